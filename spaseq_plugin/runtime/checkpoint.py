"""Checkpoints: a run's state on disk, so that a killed run resumes where it was.

What a checkpoint holds
-----------------------
A checkpoint is taken between two input items, once the results of what was
read are written and flushed (docs/checkpoints.md).  It holds the engine
(``Engine.snapshot``: the runtime's partitions, runs, indexes, heaps,
negation buffers and pending matches, the events of the timestamp being
read, DISTINCT's memory, the statistics), the position of every source, and
the committed length of the output and dead-letter files.  What can be
rebuilt is not kept: the evaluators' caches, the per-batch memo.

The format (version 2)
----------------------
A checkpoint file is two lines of UTF-8 JSON.  The first is the header::

    {"format": "spaseq-checkpoint", "version": 2, "query": SHA-256 of the query text,
     "arguments": SHA-256 of the arguments that change results, "created": ISO time,
     "finished": false, "body_bytes": N, "body_sha256": ...}

the second the body, ``N`` bytes whose SHA-256 the header gives.  In the
body, RDF terms are N-Triples text, each distinct term once in
``tables.terms``; events are rows of ``tables.events`` (stream, time,
is_datetime, position, graph name as a term number, triples as N-Triples
text); the mappings, ``{variable: term number}``, are rows of ``tables.mappings``,
each once however many runs share it (a Kleene iteration's bindings, the μ
its successors start from); everything else refers to them by number, and
runs refer to events, so that the size is linear in the state and a restored
runtime shares what the saved one did.  (Version 1 wrote each mapping where it
was used; it is still read.)  Times are JSON integers, or strings for decimals.
Reading a checkpoint runs no code of it (no pickle): it is JSON and N-Triples
parsed as data.

A checkpoint with another format name or a later version, or from another
query or other arguments, is refused (:class:`CheckpointError`: the command
exits with status 2).  One whose body does not match its header (cut short,
corrupted) is skipped with a warning for the previous one, kept beside it.

Writing is atomic: the new checkpoint goes to a new file, which is flushed
and fsynced, the current one is linked as the previous one, the new file
renamed over the current one, and the directory fsynced; a kill at any
moment leaves a current checkpoint, whole, and usually the previous one.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import hashlib
import json
import logging
import os
import re
import time as _time
from decimal import Decimal

import pyoxigraph as ox

from ..errors import OutputError, UsageError
from ..events import Event, Time
from ..waits import LONGEST_WAIT
from ..evaluators.protocol import term_text

log = logging.getLogger(__name__)

FORMAT = "spaseq-checkpoint"
VERSION = 2
CURRENT = "checkpoint.json"
PREVIOUS = "checkpoint.previous.json"
_NEW = "checkpoint.json.new"
_LINKED = "checkpoint.previous.json.new"

#: The default ``--checkpoint-every``: seconds between two checkpoints.
DEFAULT_INTERVAL = "10s"

#: The most of a run's time checkpoints every so many seconds may take: after one
#: that took c seconds, the next waits at least c * (1 - share) / share.
MAX_SHARE = 0.05

_TERM_LINE = "<urn:spaseq:t> <urn:spaseq:t> {} .\n"


class CheckpointError(UsageError):
    """A checkpoint that cannot be used: of another query or arguments, of a newer
    format, or none readable (exit status 2)."""


class CorruptCheckpoint(ValueError):
    """A checkpoint file whose content does not match its header."""


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def arguments_hash(arguments: dict) -> str:
    return text_hash(json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str))


# --------------------------------------------------------------------------
# Terms, events and mappings as tables
# --------------------------------------------------------------------------

@contextlib.contextmanager
def gc_paused():
    """The cycle collector paused while a snapshot is made or restored: it builds
    many objects and no cycle, and each collection would traverse the whole
    state again (a third of the time, at 30,000 runs)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def encode_time(time: Time):
    return time if isinstance(time, int) else str(time)


def decode_time(value) -> Time:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        return Decimal(value)
    raise CorruptCheckpoint(f"not a time: {value!r}")


class SnapshotWriter:
    """Numbers terms, events and mappings as a snapshot refers to them
    (``tables`` gives the tables)."""

    time = staticmethod(encode_time)

    def __init__(self):
        self._terms: dict = {}
        self._term_ids: dict[int, int] = {}     # terms are shared objects: most are found by id
        self._events: dict[int, int] = {}
        self._mappings: dict[int, int] = {}
        self._kept: list = []                   # (ids stay valid while the snapshot is made)
        self.terms: list[str] = []
        self.events: list[list] = []
        self.mappings: list[dict[str, int]] = []

    def term(self, term) -> int:
        ref = self._term_ids.get(id(term))
        if ref is None:
            ref = self._terms.get(term)
            if ref is None:
                ref = self._terms[term] = len(self.terms)
                self.terms.append(term_text(term))
            self._term_ids[id(term)] = ref
            self._kept.append(term)
        return ref

    def mapping(self, mapping: dict) -> int:
        """The number of ``mapping``, by identity: runs share their bindings (no
        mapping is ever modified), and so do the runs restored from them."""
        ref = self._mappings.get(id(mapping))
        if ref is None:
            ref = self._mappings[id(mapping)] = len(self.mappings)
            self._kept.append(mapping)
            term = self.term
            self.mappings.append({name: term(value) for name, value in mapping.items()})
        return ref

    def event(self, event: Event) -> int:
        ref = self._events.get(id(event))
        if ref is None:
            ref = self._events[id(event)] = len(self.events)
            self._kept.append(event)
            self.events.append([event.stream, encode_time(event.time), event.is_datetime, event.position,
                                None if event.name is None else self.term(event.name),
                                "".join([f"{triple} .\n" for triple in event.triples])])
        return ref

    def tables(self) -> dict:
        return {"terms": self.terms, "events": self.events, "mappings": self.mappings}


def _triples(text: str) -> tuple:
    if not text:
        return ()
    return tuple([quad.triple for quad in ox.parse(text, format=ox.RdfFormat.N_TRIPLES)])


class SnapshotReader:
    """The terms, events and mappings of a snapshot's tables, made once each."""

    time = staticmethod(decode_time)

    def __init__(self, tables: dict):
        texts = tables["terms"]
        try:
            parsed = list(ox.parse("".join(_TERM_LINE.format(text) for text in texts),
                                   format=ox.RdfFormat.N_TRIPLES))
        except SyntaxError as error:
            raise CorruptCheckpoint(f"a term is not N-Triples ({error})") from None
        if len(parsed) != len(texts):
            raise CorruptCheckpoint("the term table does not parse to one term per entry")
        self.terms = [triple.object for triple in parsed]
        terms = self.terms
        try:
            self.events = [Event(stream, decode_time(at), _triples(text), None if name is None else _row(terms, name),
                                 position, bool(is_datetime))
                           for stream, at, is_datetime, position, name, text in tables["events"]]
        except SyntaxError as error:
            raise CorruptCheckpoint(f"an event's triples are not N-Triples ({error})") from None
        self.mappings = [self._mapping(data) for data in tables.get("mappings", ())]

    def term(self, ref: int):
        return _row(self.terms, ref)

    def event(self, ref: int) -> Event:
        return _row(self.events, ref)

    def mapping(self, data: int | dict) -> dict:
        """The mapping numbered ``data``, the same object for each reference to it
        (a version 1 checkpoint gives the mapping itself: a new one each time)."""
        return self._mapping(data) if isinstance(data, dict) else _row(self.mappings, data)

    def _mapping(self, data: dict) -> dict:
        terms = self.terms
        return {name: _row(terms, ref) for name, ref in data.items()}


def _row(table: list, ref):
    """``table[ref]`` for a number a snapshot holds: Python would take -1 (or True)
    for a row, and a checkpoint edited by hand would restore another term or run."""
    if type(ref) is not int or ref < 0:
        raise IndexError(f"{ref!r} is not the number of a row")
    return table[ref]


# --------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------

def write_checkpoint(directory: str, header: dict, body: dict) -> int:
    """Write a checkpoint atomically (see the module docstring); its size in bytes."""
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    header = {"format": FORMAT, "version": VERSION, **header,
              "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "body_bytes": len(data), "body_sha256": hashlib.sha256(data).hexdigest()}
    new = os.path.join(directory, _NEW)
    try:
        with open(new, "wb") as f:
            f.write(json.dumps(header).encode("utf-8") + b"\n")
            f.write(data)
            f.write(b"\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as error:        # (a full disk: the half-written file would hold its space)
        with contextlib.suppress(OSError):
            os.unlink(new)
        raise OutputError(f"cannot write a checkpoint in {directory} (--checkpoint): "
                          f"{error.strerror or error}; the previous checkpoints are kept") from None
    current = os.path.join(directory, CURRENT)
    if os.path.exists(current):
        linked = os.path.join(directory, _LINKED)
        if os.path.lexists(linked):
            os.unlink(linked)
        os.link(current, linked)
        os.replace(linked, os.path.join(directory, PREVIOUS))
    os.replace(new, current)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(data)


def read_checkpoint(path: str, query: str, arguments: str) -> tuple[dict, dict]:
    """(header, body) of one checkpoint file; ``CheckpointError`` when it is not
    this run's, ``CorruptCheckpoint`` when it is damaged."""
    with open(path, "rb") as f:
        head = f.readline(1 << 16)
        try:
            header = json.loads(head)
        except ValueError:
            raise CorruptCheckpoint("its header is not JSON") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise CheckpointError(f"{path} is not a spaseq checkpoint")
        version = header.get("version")
        if not isinstance(version, int) or version > VERSION:
            raise CheckpointError(f"{path} has format version {version}, newer than this spaseq reads "
                                  f"({VERSION}): use the spaseq that wrote it, or remove the checkpoint "
                                  "directory to start over")
        if header.get("query") != query:
            raise CheckpointError(f"{path} is the checkpoint of another query: use another --checkpoint "
                                  "directory, or remove this one to start over")
        if header.get("arguments") != arguments:
            raise CheckpointError(f"{path} was taken with other arguments (inputs, outputs, KB, format, "
                                  "limits...): run with the same arguments, or remove the checkpoint "
                                  "directory to start over")
        data = f.read()
    size = header.get("body_bytes")
    if data.endswith(b"\n"):
        data = data[:-1]
    if len(data) != size or hashlib.sha256(data).hexdigest() != header.get("body_sha256"):
        raise CorruptCheckpoint(f"its body is not what its header says ({len(data):,} bytes of "
                                f"{size if isinstance(size, int) else '?'})")
    try:
        body = json.loads(data)
    except ValueError as error:
        raise CorruptCheckpoint(f"its body is not JSON ({error})") from None
    return header, body


def load_checkpoint(directory: str, query: str, arguments: str) -> tuple[dict, dict] | None:
    """The newest usable checkpoint in ``directory`` (None: there is none yet).
    A damaged current checkpoint is skipped, with a warning, for the previous one."""
    tried = []
    for name in (CURRENT, PREVIOUS):
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            continue
        try:
            return read_checkpoint(path, query, arguments)
        except CorruptCheckpoint as error:
            tried.append(f"{path}: {error}")
            log.warning("checkpoint %s is damaged (%s): %s", path, error,
                        "using the previous one" if name == CURRENT else "none is left")
    if tried:
        raise CheckpointError(f"no usable checkpoint in {directory} ({'; '.join(tried)}): remove the "
                              "directory to start over")
    return None


# --------------------------------------------------------------------------
# When to take one
# --------------------------------------------------------------------------

_INTERVAL = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|sec|min|h|events?|)\s*", re.I)
_SECONDS = {"ms": 0.001, "": 1, "s": 1, "sec": 1, "min": 60, "h": 3600}


def parse_interval(text: str) -> tuple[float | None, int | None]:
    """``--checkpoint-every``: (seconds, None) for a duration (``10``, ``10s``,
    ``500ms``, ``2min``), (None, events) for a count (``50000events``)."""
    match = _INTERVAL.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r}: expected seconds (10, 10s, 500ms, 2min) or a number of events (50000events)")
    number, unit = match.group(1), match.group(2).lower()
    if unit.startswith("event"):
        if "." in number or int(number) < 1:
            raise ValueError(f"{text!r}: a number of events is a whole number of at least 1")
        return None, int(number)
    seconds = float(number) * _SECONDS[unit]
    if not 0 < seconds <= LONGEST_WAIT:
        raise ValueError(f"{text!r}: must be more than 0 and at most {LONGEST_WAIT:g} s")
    return seconds, None


class Checkpointer:
    """Takes a run's checkpoints in ``directory`` every ``every`` (``parse_interval``)
    and finds the one to resume from (:meth:`load`).  An interval in seconds is
    a least one: a checkpoint that took c seconds (its snapshot included, from
    ``since``) is followed by at least 19 c seconds without one, so that
    checkpoints take at most ``MAX_SHARE`` (5 %) of the run's time whatever the
    state's size.

    ``query`` is the query text and ``arguments`` what else changes the results
    (a dict of plain values): both are hashed into the header and must be the
    same to resume."""

    def __init__(self, directory: str, query: str, arguments: dict, every: str = DEFAULT_INTERVAL):
        self.directory = directory
        self.query = text_hash(query)
        self.arguments = arguments_hash(arguments)
        self.seconds, self.events = parse_interval(every)
        self.taken = 0
        self.last_size = 0
        self._next_time = 0.0
        self._next_events = 0

    def load(self) -> tuple[dict, dict] | None:
        """(header, body) of the checkpoint to resume from, or None (and the directory
        is made, so that a bad path is said before the run)."""
        if os.path.exists(self.directory) and not os.path.isdir(self.directory):
            raise UsageError(f"--checkpoint {self.directory}: not a directory")
        os.makedirs(self.directory, exist_ok=True)
        found = load_checkpoint(self.directory, self.query, self.arguments)
        return found

    def start(self, events: int, cost: float = 0.0) -> None:
        """The run (re)starts with ``events`` read, or a checkpoint that took ``cost``
        seconds was taken: the next one is one interval away."""
        wait = max(self.seconds or 0, cost * (1 - MAX_SHARE) / MAX_SHARE)
        self._next_time = _time.monotonic() + wait
        self._next_events = events + (self.events or 0)

    def due(self, events: int) -> bool:
        if self.events is not None:
            return events >= self._next_events
        return _time.monotonic() >= self._next_time

    def save(self, body: dict, events: int, finished: bool = False, since: float | None = None) -> None:
        """Write ``body`` as the next checkpoint; ``since``: when its snapshot began
        (``time.perf_counter()``)."""
        started = _time.perf_counter() if since is None else since
        self.last_size = write_checkpoint(self.directory, {"query": self.query, "arguments": self.arguments,
                                                           "finished": finished}, body)
        self.taken += 1
        self.start(events, _time.perf_counter() - started)
