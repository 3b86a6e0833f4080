"""Live stream sources: standard input and TCP (semantics.md sections 1 and 10).

Both read one continuous TriG or N-Quads text, exactly like a stream file
(``streams/files.py``: one named graph is one event, its timestamp is
``<graph> prov:generatedAtTime τ`` in the default graph, bad statements are
rejected alone), but as it arrives:

* **Format**: given (``stdin:trig``, ``stdin:nq``, ``tcp://h:p?format=nq``)
  or sniffed from the first lines: a directive, a ``{`` or a line that is not
  N-Quads means TriG; an N-Quads line with a graph name means N-Quads; plain
  triples (valid in both) are read further (TriG when nothing decides).
* **Lines**: text is handled a whole line at a time, so a sender must end
  what it sends with a newline (``\\n``).
* **When an event is complete**: as in a file, when the next graph starts;
  and also whenever the sender pauses (no more bytes are waiting), so that
  the last event sent does not wait for the next one.  A sender must
  therefore send each event's graph block(s) and timestamp together: a
  block of a graph that was already emitted is rejected.
* **Positions** of rejected events are ``stdin:LINE`` and
  ``tcp://HOST:PORT#N:LINE`` (N: the connection, 1 for the first); the line
  counts from the start of that connection.  Each connection is a new text
  (prefixes declared on one do not carry over to the next), but the
  stream's order checks (duplicate or older times) go on across them.

Standard input
--------------
``--stream S=-`` (format sniffed) or ``--stream S=stdin:trig`` /
``stdin:nq``.  Standard input ends the stream at end of file.

TCP
---
``tcp://HOST:PORT``: **spaseq is the client**: it connects to a server that
sends events, as ``nc -l 5000 < events.trig`` or any program does.
``tcp://HOST:PORT?listen=1``: spaseq listens (binds HOST:PORT, port 0 picks
a free one) and reads the connections that producers open, all at once,
their events merged in time order: up to ``max_connections`` of them (100),
more wait in the listen backlog until one closes; ``connections=N`` ends the
stream after N of them.  ``connection_idle_timeout=S`` closes a connection
that sends nothing for S seconds (an event it left half sent is rejected,
``truncated``): idle connections then cannot hold every slot.

A client connection that closes (the server ended, crashed or the network
dropped) is retried with exponential backoff: ``backoff`` seconds (0.5),
doubled each attempt up to ``max_backoff`` (30), at most ``retries``
attempts in a row (5; 0 ends the stream as soon as the connection closes).
Each drop, retry and reconnection is reported (a ``report`` callback; by
default a line on standard error, with the count so far).  The stream ends
for good when the attempts run out; if no connection was ever made, that is
an error (``SpaseqError``).

Ending a live stream
--------------------
Besides the end of its input, a live source (stdin, TCP, MQTT) ends after
``max_events`` accepted events or after ``idle_timeout`` seconds without
input.  Both are options of the location (``tcp://h:p?max_events=100&
idle_timeout=30``) and default to the run's ``max_events`` and
``idle_timeout`` settings (``spaseq_configure``: the command line's
``--max-events`` and ``--idle-timeout``).

Options of a location's query string: ``format`` (trig, nq, auto),
``max_events``, ``idle_timeout``, ``retries``, ``backoff``, ``max_backoff``,
``connect_timeout``, and for TCP ``listen``, ``connections``,
``max_connections`` and ``connection_idle_timeout``.  An unknown option is
an error.
"""

from __future__ import annotations

import itertools
import os
import queue
import re
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

import pyoxigraph as ox

from ..errors import EventError, SpaseqError
from ..events import IDLE, Event
from ..hookspecs import StreamSource, hookimpl
from ..waits import wait_seconds
from .files import order_check
from .reader import EventReader, OrderCheck, event_reader, term_too_deep
from .reorder import ReorderBuffer

__all__ = [
    "LiveOptions",
    "LiveSource",
    "Reconnecting",
    "StdinSource",
    "TcpSource",
    "TextReader",
    "backoff_delay",
    "open_stdin",
    "open_tcp",
    "parse_format",
    "sniff_format",
]

_READ_BYTES = 1 << 16
_POLL = 0.2                     # how often blocked threads look at the stop flag
_SNIFF_LIMIT = 1 << 16          # undecided after this many bytes: TriG
_QUEUE_SIZE = 10_000            # items a producer may run ahead of the engine
MAX_CONNECTIONS = 100           # connections a listening tcp source reads at once (max_connections)
_QUIET_AFTER = 0.2              # an input silent this long holds the others back no more
_DRAIN_SECONDS = 10 * _POLL     # how long a cut input's producer may take to hand over the rest

# The run's defaults for live sources, set by the spaseq_configure hook.
_RUN_DEFAULTS: dict[str, object] = {}


@hookimpl
def spaseq_configure(config):
    """Take ``max_events``, ``idle_timeout`` and ``idle_flush`` (``--max-events``,
    ``--idle-timeout``, ``--idle-flush``, milliseconds) as the defaults of every
    live source of the run."""
    _RUN_DEFAULTS.clear()
    for key in ("max_events", "idle_timeout"):
        if config.get(key) is not None:
            _RUN_DEFAULTS[key] = config[key]
    if config.get("idle_flush") is not None:
        _RUN_DEFAULTS["idle_flush"] = config["idle_flush"] / 1000


# --------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------

@dataclass
class LiveOptions:
    """How a live source reads, retries and ends (see the module doc)."""

    rdf_format: ox.RdfFormat | None = None      # None: sniffed
    max_events: int | None = None
    idle_timeout: float | None = None
    idle_flush: float | None = None             # seconds; None: no IDLE items
    retries: int = 5
    backoff: float = 0.5
    max_backoff: float = 30.0
    connect_timeout: float = 10.0
    report: Callable[[str], None] | None = None  # None: a line on stderr
    extra: dict[str, str] = field(default_factory=dict)  # scheme-specific options

    @classmethod
    def from_query(cls, query: dict[str, str], where: str, extra_keys: Iterable[str] = ()) -> LiveOptions:
        """Options from a location's query string (with the run's defaults)."""
        options = cls(max_events=_RUN_DEFAULTS.get("max_events"),
                      idle_timeout=_RUN_DEFAULTS.get("idle_timeout"),
                      idle_flush=_RUN_DEFAULTS.get("idle_flush"))
        extra_keys = set(extra_keys)
        for raw_key, value in query.items():
            key = raw_key.replace("-", "_")
            try:
                if key == "format":
                    options.rdf_format = parse_format(value)
                elif key == "max_events":
                    options.max_events = _positive_int(value)
                elif key == "idle_timeout":
                    options.idle_timeout = wait_seconds(value)
                elif key == "idle_flush":
                    options.idle_flush = wait_seconds(value) / 1000
                elif key == "retries":
                    options.retries = int(value)
                    if options.retries < 0:
                        raise ValueError("must be 0 or more")
                elif key in ("backoff", "max_backoff", "connect_timeout"):
                    setattr(options, key, wait_seconds(value))
                elif key in extra_keys:
                    options.extra[key] = value
                else:
                    known = sorted({"format", "max_events", "idle_timeout", "idle_flush", "retries", "backoff",
                                    "max_backoff", "connect_timeout"} | extra_keys)
                    raise SpaseqError(f"{where}: unknown option {raw_key!r} (known: {', '.join(known)})")
            except ValueError as e:
                raise SpaseqError(f"{where}: option {raw_key}={value!r}: {e}") from None
        if options.max_events is not None:
            options.max_events = int(options.max_events)
        if options.idle_timeout is not None:
            options.idle_timeout = float(options.idle_timeout)
        return options


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be 1 or more")
    return value


_FORMAT_NAMES = {"trig": ox.RdfFormat.TRIG, "nq": ox.RdfFormat.N_QUADS, "nquads": ox.RdfFormat.N_QUADS,
                 "n-quads": ox.RdfFormat.N_QUADS, "auto": None, "": None}


def parse_format(name: str) -> ox.RdfFormat | None:
    """``trig``, ``nq`` (``nquads``, ``n-quads``) or ``auto`` (None: sniff)."""
    try:
        return _FORMAT_NAMES[name.strip().lower()]
    except KeyError:
        raise ValueError("the format must be trig, nq or auto") from None


def backoff_delay(attempt: int, initial: float, maximum: float) -> float:
    """The wait before retry number ``attempt`` (1-based): initial, doubled, capped."""
    return min(initial * 2 ** (attempt - 1), maximum)


def split_location(scheme: str, location: str) -> tuple[str, int | None, str, dict[str, str]]:
    """``//host:port/path?options`` (or ``host:port...``) -> host, port, path, options.

    The path is everything between the first ``/`` after the address and the
    ``?`` (percent-decoded), so that an MQTT topic may hold ``#`` and ``+``.
    """
    rest = location[2:] if location.startswith("//") else location
    rest, _, query = rest.partition("?")
    address, slash, path = rest.partition("/")
    try:
        parts = urlsplit("//" + address)
        host, port = parts.hostname, parts.port
    except ValueError as e:
        raise SpaseqError(f"{scheme}://{rest}: bad address: {e}") from None
    if not host:
        raise SpaseqError(f"{scheme}://{rest}: no host (expected {scheme}://HOST:PORT...)")
    options = dict(parse_qsl(query, keep_blank_values=True))
    return host, port, unquote(path), options


# --------------------------------------------------------------------------
# Reading a TriG or N-Quads text chunk by chunk
# --------------------------------------------------------------------------

_TRIG_START = re.compile(rb"(?:@prefix|@base|(?i:prefix|base|graph))\b")


def sniff_format(head: bytes, at_end: bool) -> ox.RdfFormat | None:
    """The format of a text from its first complete lines, or ``None`` when
    they do not tell yet (only comments and plain triples so far)."""
    lines = head.split(b"\n")
    if not at_end:
        lines.pop()                                   # not complete yet
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith(b"#") or term_too_deep(line) >= 0:
            continue
        try:
            quads = list(ox.parse(input=line, format=ox.RdfFormat.N_QUADS))
        except SyntaxError:
            return ox.RdfFormat.TRIG                  # prefixes, braces, Turtle syntax
        if any(not isinstance(q.graph_name, ox.DefaultGraph) for q in quads):
            return ox.RdfFormat.N_QUADS
        if _TRIG_START.match(line):
            return ox.RdfFormat.TRIG
    if at_end or len(head) > _SNIFF_LIMIT:
        return ox.RdfFormat.TRIG                      # TriG reads N-Triples too
    return None


class TextReader:
    """Events of one TriG or N-Quads text read as it arrives (standard input,
    one TCP connection, one MQTT message), with the stream file rules
    (``streams/reader.py``).

    :meth:`run` reads the chunks and passes each ``Event``/``EventError`` to
    ``emit``.  The chunk iterator may call :meth:`idle` whenever it would
    wait for more bytes: the event being read is then judged complete if
    it has its timestamp (a later block of its graph will be rejected).
    ``order``: an ``OrderCheck`` for the text's events (None: none here).
    ``cut``, asked when the chunks end: why the text was cut short (its
    source stopped reading it), or None; a statement begun and not complete
    is then one rejection (``truncated``) instead of a syntax error.
    """

    def __init__(self, where: str, stream: str, rdf_format: ox.RdfFormat | None = None,
                 base: str | None = None, order: OrderCheck | None = None):
        self.where = where
        self.stream = stream
        self.rdf_format = rdf_format
        self.base = base
        self.order = order
        self._reader: EventReader | None = None
        self._emit: Callable[[Event | EventError], None] | None = None

    def run(self, chunks: Iterable[bytes], emit: Callable[[Event | EventError], None],
            cut: Callable[[], str | None] | None = None) -> None:
        chunks = iter(chunks)
        self._emit = emit
        rdf_format, head = self.rdf_format, b""
        if rdf_format is None:
            for chunk in chunks:
                head += chunk
                rdf_format = sniff_format(head, at_end=False)
                if rdf_format is not None:
                    break
            else:
                rdf_format = sniff_format(head, at_end=True)
        reader = self._reader = event_reader(self.where, self.stream, rdf_format, base=self.base,
                                             order=self.order)
        for chunk in itertools.chain([head], chunks):
            for item in reader.feed(chunk):
                emit(item)
        truncated = cut() if cut is not None else None
        for item in reader.finish(truncated if truncated is not None and reader.pending() else None):
            emit(item)
        self._reader = None

    def idle(self) -> None:
        """The sender paused: the graph being read is complete."""
        reader = self._reader
        if reader is None or self._emit is None:
            return
        for item in reader.pause():
            self._emit(item)


def read_text(data: bytes | Iterable[bytes], where: str, stream: str,
              rdf_format: ox.RdfFormat | None = None, base: str | None = None) -> list[Event | EventError]:
    """The events of a whole TriG or N-Quads text (a message, a string)."""
    out: list[Event | EventError] = []
    TextReader(where, stream, rdf_format, base).run([data] if isinstance(data, bytes) else data, out.append)
    return out


# --------------------------------------------------------------------------
# Live sources: a producer thread, a queue, limits
# --------------------------------------------------------------------------

class _Readiness:
    """Whether a file descriptor has bytes (or its end, or an error) to read, waiting
    at most a timeout: poll(2), which takes a descriptor of any number, where
    select(2) fails from 1024 on (FD_SETSIZE: a run with many files or connections
    open lost the connections past it); select where there is no poll (Windows)."""

    def __init__(self, fd: int):
        self.fd = fd
        self._poll = None
        if hasattr(select, "poll"):
            self._poll = select.poll()
            self._poll.register(fd, select.POLLIN | select.POLLPRI)
        else:
            select.select([fd], [], [], 0)      # (ValueError or OSError: not selectable)

    def ready(self, timeout: float) -> bool:
        if self._poll is not None:
            return bool(self._poll.poll(timeout * 1000))
        return bool(select.select([self.fd], [], [], timeout)[0])


def _stderr_report(message: str) -> None:
    print(f"spaseq: {message}", file=sys.stderr, flush=True)


class Reconnecting:
    """What the live sources and the MQTT sink share: a name, options, a stop
    flag, reports, and the bookkeeping of drops and bounded retries."""

    def __init__(self, name: str, options: LiveOptions):
        self.name = name
        self.options = options
        self.reconnects = 0                     # successful reconnections
        self.failures = 0                       # connections lost or attempts failed
        self.ended_because: str | None = None
        self.connected = threading.Event()      # set once the first connection is up
        self._stop = threading.Event()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def report(self, message: str) -> None:
        (self.options.report or _stderr_report)(f"{self.name}: {message}")

    def _end(self, why: str) -> None:
        self.ended_because = why
        self.report(why)

    def failed(self, attempts: int, reason: str, ever_connected: bool) -> float | None:
        """After a drop or a failed attempt (``attempts`` in a row): report it
        and return the wait before the next attempt, or ``None`` to give up.
        Raises ``SpaseqError`` when giving up without ever having connected."""
        options = self.options
        self.failures += 1
        retries = options.retries
        if attempts > retries:
            plural = "y" if retries == 1 else "ies"
            if not ever_connected:
                raise SpaseqError(f"{self.name}: {reason}" + (f" (gave up after {retries} retr{plural})"
                                                              if retries else ""))
            if retries == 0:
                self._end(f"{reason}: ending (retries=0)")
            else:
                self._end(f"{reason}; giving up after {retries} retr{plural} "
                          f"({_count(self.reconnects, 'reconnect')} so far)")
            return None
        delay = backoff_delay(attempts, options.backoff, options.max_backoff)
        self.report(f"{reason}; retrying in {delay:.3g} s (attempt {attempts} of {retries}, "
                    f"{_count(self.failures, 'failure')} so far)")
        return delay

    def reconnected(self) -> None:
        self.reconnects += 1
        self.report(f"reconnected ({_count(self.reconnects, 'reconnect')} so far)")


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class LiveSource(Reconnecting):
    """An iterator of ``Event | EventError`` fed by a producer thread.

    Iterating starts the thread; the iteration ends at the end of the input,
    after ``max_events`` accepted events, after ``idle_timeout`` seconds
    without input, or when :meth:`close` is called.  Counters: ``events``,
    ``rejected``, ``reconnects`` (successful reconnections), ``failures``
    (connections lost or attempts failed).

    An idle timeout or :meth:`stop_reading` *cuts* the input (``cut`` says
    why): the producer stops reading, an event that a sender began and did
    not finish becomes a ``truncated`` rejection, and the iteration passes
    on everything queued, then what the producer still emits for at most
    ``_DRAIN_SECONDS``, before it ends: what was received is not lost.
    """

    def __init__(self, name: str, stream: str, options: LiveOptions):
        super().__init__(name, options)
        self.stream = stream
        self.events = 0
        self.rejected = 0
        self._queue: queue.Queue = queue.Queue(maxsize=_QUEUE_SIZE)
        self._thread: threading.Thread | None = None
        self._items: Iterator | None = None
        self.cut: str | None = None

    @property
    def stopping(self) -> bool:
        """Whether the producer should stop reading: stopped, or cut (it then still
        emits what the cut makes of the text it holds)."""
        return self._stop.is_set() or self.cut is not None

    # -- the consumer side ------------------------------------------------

    def __iter__(self) -> LiveSource:
        return self

    def __next__(self) -> Event | EventError:
        if self._items is None:
            self._items = self._iterate()
        return next(self._items)

    def start(self) -> None:
        """Start reading now (iteration starts it otherwise)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run_producer, name=f"spaseq {self.name}",
                                            daemon=True)
            self._thread.start()

    def stop_reading(self, reason: str) -> None:
        """Cut the input now, as an idle timeout does (``reason``, e.g. "the run was
        stopped (SIGTERM)", heads the rejection of an event left half-sent); the
        iteration ends once it has passed on what was received."""
        if self.cut is None:
            self.cut = reason

    def close(self) -> None:
        """Stop reading (the producer thread ends within a fraction of a second)."""
        self._stop.set()
        self._closing()

    def _iterate(self) -> Iterator[Event | EventError]:
        self.start()
        limit = self.options.max_events
        try:
            for item in self._merged():
                if type(item) is Event:
                    self.events += 1
                elif item is not IDLE:
                    self.rejected += 1
                yield item
                if limit is not None and self.events >= limit:
                    self._end(f"{_count(self.events, 'event')} read (max_events): ending")
                    return
        finally:
            self.close()

    def _merged(self) -> Iterator[Event | EventError]:
        """The producer's items with the order rules applied: to each of several
        inputs (channels), merged in time order, then to the stream; one input
        is passed on as it comes."""
        order = order_check()
        orders: dict = {}
        merge = ReorderBuffer(None, quiet_after=self.options.idle_flush or _QUIET_AFTER)
        for kind, value, channel in self._received():
            if kind == "item":
                if channel is not None and type(value) is Event:
                    value = orders.setdefault(channel, order_check()).check(value) or value
                    out = merge.push(value, channel) if type(value) is Event else [value]
                else:
                    out = [value]
            elif kind == "open":
                merge.open_channel(channel)
                continue
            elif kind == "close":
                orders.pop(channel, None)
                out = merge.close_channel(channel)
            elif kind == "idle":
                out = merge.idle() + [IDLE]
            else:                               # a poll: inputs that went quiet hold back no more
                out = merge.release_quiet()
            for item in out:
                yield order.check(item) or item if type(item) is Event else item
        for item in merge.flush():
            yield order.check(item) or item

    def _received(self) -> Iterator[tuple[str, object, object]]:
        """(kind, value, channel) messages of the producer: items, inputs opening
        and closing; ``idle`` once ``idle_flush`` has passed without input
        (after some), ``poll`` every ``_POLL`` seconds without input."""
        idle = self.options.idle_timeout
        flush = self.options.idle_flush
        last = time.monotonic()
        flushed = True
        while True:
            if self.cut is not None:                # stop_reading (seen within _POLL)
                yield from self._drained()
                return
            wait = _POLL if idle is None else max(0.0, min(_POLL, last + idle - time.monotonic()))
            if flush is not None and not flushed:
                wait = max(0.0, min(wait, last + flush - time.monotonic()))
            try:
                message = self._queue.get(timeout=wait)
            except queue.Empty:
                now = time.monotonic()
                if flush is not None and not flushed and now - last >= flush:
                    flushed = True
                    yield "idle", None, None
                elif idle is not None and now - last >= idle:
                    self._end(f"no input for {idle:g} s (idle_timeout): ending")
                    self.cut = f"no input for {idle:g} s (idle_timeout)"
                    yield from self._drained()
                    return
                else:
                    yield "poll", None, None
                continue
            kind = message[0]
            if kind == "end":
                return
            if kind == "error":
                raise message[1]
            if kind == "item":
                last = time.monotonic()
                flushed = False
            yield message

    def _drained(self) -> Iterator[tuple[str, object, object]]:
        """After a cut: the messages queued, however long the engine takes over
        them, then the producer's until it ends (it sees the cut within _POLL), for
        at most _DRAIN_SECONDS more (a read blocked for good)."""
        self._wake_producer()
        deadline = None
        backlog = self._queue.qsize()
        while True:
            if backlog > 0:
                backlog -= 1
                wait = None
            else:
                if deadline is None:
                    deadline = time.monotonic() + _DRAIN_SECONDS
                wait = deadline - time.monotonic()
                if wait <= 0:
                    return
            try:
                message = self._queue.get(timeout=wait)
            except queue.Empty:
                return
            if message[0] in ("end", "error"):      # (an error now changes nothing)
                return
            yield message

    # -- the producer side --------------------------------------------------

    def wait_for_bytes(self, readiness: _Readiness, reader: TextReader, until: float | None = None) -> bool:
        """Wait until there is something to read (False: the source stops meanwhile, or
        the monotonic time ``until`` passes); the reader hears of a pause in the input
        (``TextReader.idle``).  Waits a slice of time at a time: a blocked read could not
        see the stop flag."""
        if readiness.ready(0):
            return True
        reader.idle()
        while not self.stopping:
            wait = _POLL if until is None else min(_POLL, until - time.monotonic())
            if wait <= 0:
                return False
            if readiness.ready(wait):
                return True
        return False

    def emit(self, item: Event | EventError, channel=None) -> None:
        """Pass an item to the consumer (waits while the queue is full).
        ``channel`` names the input it comes from when there are several."""
        self._put(("item", item, channel))

    def open_channel(self, channel) -> None:
        """An input opens (its events are merged with the others' in time order)."""
        self._put(("open", None, channel))

    def close_channel(self, channel) -> None:
        self._put(("close", None, channel))

    def _put(self, message) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(message, timeout=_POLL)
                return
            except queue.Full:
                continue

    def _run_producer(self) -> None:
        try:
            self.produce()
        except BaseException as error:          # handed to the consumer, raised there
            self._put(("error", error, None))
        else:
            self._put(("end", None, None))

    def produce(self) -> None:
        """Read the input, calling :meth:`emit` for each item (in the thread)."""
        raise NotImplementedError

    def _closing(self) -> None:
        """Release what the source holds (sockets); called by :meth:`close`."""

    def _wake_producer(self) -> None:
        """Unblock a producer waiting in a call that does not see the stop flag
        (called on a cut and on :meth:`close`)."""

    def retry_or_give_up(self, attempts: int, reason: str, ever_connected: bool) -> bool:
        """:meth:`failed`, then wait the backoff: whether to try again (not when the
        source stops or is cut meanwhile)."""
        delay = self.failed(attempts, reason, ever_connected)
        if delay is None:
            return False
        deadline = time.monotonic() + delay
        while not self.stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            self._stop.wait(min(left, _POLL))
        return False


# --------------------------------------------------------------------------
# Standard input
# --------------------------------------------------------------------------

class StdinSource(LiveSource):
    """Events read from standard input, any binary file object, or a pipe or
    device (``path``).

    A named pipe's ``open`` waits until some process opens it for writing,
    so ``path`` is opened by the producer thread: the wait is then idle time
    like any other (``idle_timeout`` ends it), and :meth:`close` ends it by
    opening the pipe for writing itself, which lets the blocked ``open``
    return."""

    def __init__(self, stream: str, options: LiveOptions, fileobj=None, name: str = "stdin",
                 path: str | None = None):
        super().__init__(name, stream, options)
        self.fileobj = fileobj
        self.path = path
        self._opening = False

    def produce(self) -> None:
        if self.path is not None:
            self._opening = True
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except OSError as error:
                raise SpaseqError(f"{self.name}: cannot open it: {error.strerror}") from None
            finally:
                self._opening = False
            with os.fdopen(fd, "rb", buffering=0) as f:
                self._read(f)
        else:
            self._read(self.fileobj if self.fileobj is not None else sys.stdin.buffer)

    def _read(self, f) -> None:
        reader = TextReader(self.name, self.stream, self.options.rdf_format,
                            base=Path.cwd().as_uri() + "/")
        try:
            readiness = _Readiness(f.fileno())
        except (AttributeError, OSError, ValueError):
            readiness = None
        read = getattr(f, "read1", None) or f.read

        def chunks() -> Iterator[bytes]:
            # A file descriptor is waited on (wait_for_bytes) and read with os.read: a
            # thread blocked inside a buffered file object at exit aborts the interpreter.
            self.connected.set()
            while not self.stopping:
                if readiness is not None:
                    if not self.wait_for_bytes(readiness, reader):
                        return
                    data = os.read(readiness.fd, _READ_BYTES)
                else:
                    data = read(_READ_BYTES)
                if not data:
                    return
                yield data

        reader.run(chunks(), self.emit, lambda: self.cut)

    def _closing(self) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            self._wake_producer()
            thread.join(timeout=4 * _POLL)      # it sees the stop flag within _POLL

    def _wake_producer(self) -> None:
        """An ``open`` of a named pipe blocked until a writer comes returns if we are
        that writer for a moment."""
        if self._opening:
            try:
                os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:         # no reader waits any more (ENXIO)
                pass


def open_stdin(location: str, stream: str, *, fileobj=None, report=None) -> StdinSource:
    """``-`` or ``stdin:FORMAT[?options]`` -> a source reading standard input."""
    fmt, _, query = location.partition("?")
    options = LiveOptions.from_query(dict(parse_qsl(query, keep_blank_values=True)), "stdin")
    if fmt:
        try:
            options.rdf_format = parse_format(fmt)
        except ValueError as e:
            raise SpaseqError(f"stdin:{fmt}: {e}") from None
    if report is not None:
        options.report = report
    return StdinSource(stream, options, fileobj)


# --------------------------------------------------------------------------
# TCP
# --------------------------------------------------------------------------

class TcpSource(LiveSource):
    """Events read from TCP connections (client by default, or listening)."""

    def __init__(self, host: str, port: int, stream: str, options: LiveOptions,
                 listen: bool = False, connections: int | None = None, max_connections: int = MAX_CONNECTIONS,
                 connection_idle_timeout: float | None = None):
        super().__init__(f"tcp://{_show_host(host)}:{port}", stream, options)
        self.host, self.port = host, port
        self.listen = listen
        self.connections = connections
        self.max_connections = max_connections
        self.connection_idle_timeout = connection_idle_timeout
        self.connection_count = 0
        self._sockets: set[socket.socket] = set()       # the connections being read
        self._lock = threading.Lock()
        self._server: socket.socket | None = None
        if listen:
            try:
                self._server = socket.create_server((host, port))
            except OSError as e:
                raise SpaseqError(f"{self.name}: cannot listen: {e.strerror or e}") from None
            self._server.settimeout(_POLL)
            self.port = self._server.getsockname()[1]
            self.name = f"tcp://{_show_host(host)}:{self.port}"

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    def produce(self) -> None:
        if self.listen:
            self._serve()
        else:
            self._connect_loop()

    def _connect_loop(self) -> None:
        attempts = 0
        ever = False
        while not self.stopping:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=self.options.connect_timeout)
            except OSError as e:
                reason = f"cannot connect: {_why(e)}"
            else:
                if ever:
                    self.reconnected()
                ever = True
                self.connected.set()
                got, reason = self._read_connection(sock)
                if self.stopping:
                    return
                if got:
                    attempts = 0
            attempts += 1
            if not self.retry_or_give_up(attempts, reason, ever):
                return

    def _serve(self) -> None:
        """Listen mode: every connection is read at once, in a thread of its own;
        their events are merged in time order (``_iterate``)."""
        server = self._server
        self.connected.set()
        readers: list[threading.Thread] = []
        while not self.stopping:
            if self.connections is not None and self.connection_count >= self.connections:
                break
            readers = [thread for thread in readers if thread.is_alive()]
            if len(readers) >= self.max_connections:
                # (not accepted: a sender waits in the listen backlog; a thread each
                # for thousands starved the engine of the interpreter's lock)
                readers[0].join(_POLL)
                continue
            try:
                sock, peer = server.accept()
            except TimeoutError:
                continue
            except OSError:
                if self.stopping:
                    return
                raise
            self.connection_count += 1
            number = self.connection_count
            self.report(f"connection {number} from {peer[0]}:{peer[1]}")
            thread = threading.Thread(target=self._serve_connection, args=(sock, number),
                                      name=f"spaseq {self.name}#{number}", daemon=True)
            readers.append(thread)
            thread.start()
        for thread in readers:          # (after a cut too: they emit what it makes of their text)
            while thread.is_alive() and not self._stop.is_set():
                thread.join(_POLL)
        if not self.stopping:
            self._end(f"{self.connection_count} connection(s) read (connections): ending")

    def _serve_connection(self, sock: socket.socket, number: int) -> None:
        self.open_channel(number)
        try:
            _, reason = self._read_connection(sock, number)
        except BaseException as error:          # handed to the consumer, raised there
            self._put(("error", error, None))
            return
        finally:
            self.close_channel(number)
        if not self.stopping:
            self.report(f"connection {number}: {reason}")

    def _read_connection(self, sock: socket.socket, number: int | None = None) -> tuple[bool, str]:
        """Read one connection to its end: (whether it sent bytes, why it ended).
        ``number``: in listen mode, the connection's number (its channel)."""
        if number is None:
            self.connection_count += 1
        where = f"{self.name}#{number or self.connection_count}"
        reader = TextReader(where, self.stream, self.options.rdf_format, base=self.name + "/")
        state = {"got": False, "error": None, "cut": None}
        readiness = _Readiness(sock.fileno())
        patience = self.connection_idle_timeout if number is not None else None
        with self._lock:
            self._sockets.add(sock)

        def chunks() -> Iterator[bytes]:
            while not self.stopping:
                try:
                    until = None if patience is None else time.monotonic() + patience
                    if not self.wait_for_bytes(readiness, reader, until):
                        if not self.stopping:
                            state["cut"] = f"nothing sent for {patience:g} s (connection_idle_timeout)"
                        return
                    data = sock.recv(_READ_BYTES)
                except (OSError, ValueError) as e:
                    state["error"] = e
                    return
                if not data:
                    return
                state["got"] = True
                yield data

        try:
            sock.settimeout(None)
            reader.run(chunks(), lambda item: self.emit(item, number), lambda: state["cut"] or self.cut)
        finally:
            with self._lock:
                self._sockets.discard(sock)
            try:
                sock.close()
            except OSError:
                pass
        if state["cut"] is not None:
            return state["got"], f"{state['cut']}: closed"
        if state["error"] is not None and not self.stopping:
            return state["got"], f"connection lost: {_why(state['error'])}"
        return state["got"], "connection closed by the other side"

    def _closing(self) -> None:
        with self._lock:
            sockets = [self._server, *self._sockets]
        for sock in sockets:
            if sock is not None:
                try:
                    sock.close()
                except OSError:
                    pass


def _show_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _why(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


def open_tcp(location: str, stream: str, *, report=None) -> TcpSource:
    """``//HOST:PORT[?options]`` (the part after ``tcp:``) -> a TCP source."""
    host, port, path, query = split_location("tcp", location)
    where = f"tcp://{_show_host(host)}:{port}"
    if port is None:
        raise SpaseqError(f"{where}: no port (expected tcp://HOST:PORT)")
    listen_options = {"connections": _positive_int, "max_connections": _positive_int,
                      "connection_idle_timeout": wait_seconds}
    options = LiveOptions.from_query(query, where, extra_keys=("listen", *listen_options))
    if report is not None:
        options.report = report
    listen = options.extra.pop("listen", "0").lower() not in ("0", "no", "false")
    values = {}
    for name, parse in listen_options.items():
        value = options.extra.pop(name, None)
        try:
            values[name] = parse(value) if value is not None else None
        except ValueError as e:
            raise SpaseqError(f"{where}: option {name}: {e}") from None
        if value is not None and not listen:
            raise SpaseqError(f"{where}: {name}= is for listen=1")
    return TcpSource(host, port, stream, options, listen=listen, connections=values["connections"],
                     max_connections=values["max_connections"] or MAX_CONNECTIONS,
                     connection_idle_timeout=values["connection_idle_timeout"])


@hookimpl
def spaseq_stream_sources():
    return [
        StreamSource("stdin", open_stdin,
                     "standard input (--stream S=- or S=stdin:trig / stdin:nq): TriG or N-Quads, "
                     "format sniffed unless given"),
        StreamSource("tcp", open_tcp,
                     "tcp://HOST:PORT: TriG or N-Quads lines from a server (or ?listen=1: from "
                     "clients); reconnects with backoff"),
    ]
