"""Reading graph streams from files (semantics.md sections 1 and 10).

Stream files
------------
A stream file is TriG (``.trig``) or N-Quads (``.nq``), optionally gzipped
(``.trig.gz``, ``.nq.gz``), and holds one stream.  Each named graph is one
event; its timestamp is the object of ``<graph> prov:generatedAtTime τ`` in
the default graph.  Other default-graph triples are metadata and are ignored.

The streaming rule
------------------
Files are read as a stream, never loaded whole, so an event must be judged
complete without seeing the rest of the file:

* Events are kept in the order their graph first appears in the file.
* An event is **emitted** once its graph block and its timestamp have both
  been read *and* the reader has moved on to another graph (or reached the
  end of the file).  The timestamp may come before or after the graph.
* Later blocks of the same graph add to the event **only while it has not
  been emitted yet**; a block of a graph that was already emitted is
  rejected.  So a graph's blocks and its timestamp must be near each other.
* An event still without a timestamp when more than ``NEAR_GRAPHS`` other
  graphs have started after it, or at the end of the file, is rejected.
  Events behind it wait for it: output always follows the file's order
  (rejections included).
* A timestamp whose graph does not show up within ``NEAR_GRAPHS`` graphs is
  dropped silently: it may be metadata about something else.
* An empty graph block ``<g> { }`` is an event with no triples.

Bad input
---------
Bad input never stops a file: each rejection is an ``EventError`` (position
``FILE:LINE``) in the output, in place of what it rejects.

* A syntax error rejects the statement it is in (N-Quads: the line; TriG:
  the top-level statement, that is a directive, a triples statement ending
  in ``.``, or a whole graph block ``{ ... }``) and reading resumes at the
  next statement.  A bad graph block rejects the whole event of its graph.
* A graph without a timestamp, an unreadable timestamp (neither a number nor
  an ``xsd:dateTime``), or two different timestamps for one graph.
* An event whose time equals (duplicate ``(stream, τ)``) or precedes (out of
  order) the previous accepted event of its stream, or whose kind of time
  (number or ``xsd:dateTime``) differs from it.

How
---
TriG statements are found by a light tokenizer (``_TrigSplitter``: it skips
IRIs, strings and comments and tracks braces) and each one is parsed by
pyoxigraph with the prefixes declared so far, so that a bad statement is
rejected alone.  That is the reference reading; most lines take a faster
road that gives exactly the same result.  While the splitter is *idle*
(nothing pending, at a line start), the complete lines up to the next
obstacle (see ``_Obstacles``: a directive keyword ``PREFIX``/``BASE``/
``VERSION`` with or without ``@``, an empty block ``{ }``, a carriage return
not followed by a line feed) are parsed in one pyoxigraph call with the same
prefixes and base, a marker after each line: two comment lines holding
three single and three double quotes, then the block
``GRAPH _:spaseqline { _:spaseqline a _:spaseqline }``.
The result is used only if the parse succeeds and gives exactly one marker
quad per line; the quads between two markers are the line's.  Why that is
what the statement-by-statement reading gives:

1. Lines end between tokens: pyoxigraph rejects a line break in an IRI or a
   short string, a comment ends at the line end for both readers (a lone
   carriage return, where pyoxigraph ends it too, is an obstacle), and a
   long string left open by a line is closed by the marker's comment lines,
   after which ``GRAPH`` makes the parse fail.
2. The marker block is valid only between top-level statements (``GRAPH``
   is a syntax error anywhere else), so every line ends a statement and its
   quads are those of the statements it holds.  Each marker gives one
   marker quad; a quad of the file equal to it makes one too many.
3. Both readers see the same IRIs, strings and comments (pyoxigraph is
   strict about them), and the splitter cuts only where a statement ends
   for pyoxigraph: at a '.' followed by space outside braces or at the '}'
   of a block (it keeps ``a .b`` statements without the space together,
   which changes nothing: they start on the same line).  So the splitter
   cuts each line into statements that start on it, and parsing them one
   by one with the same prefixes and base gives the same quads in the same
   order (blank node labels are kept; ``[]`` nodes are fresh either way).
4. What a statement's parse does besides giving quads comes only from
   directives (they change the prefixes, and the splitter does not see a
   ``VERSION``, or a directive right after a '.') and empty blocks (an event
   without quads): those lines are obstacles.  Feeding the assembler one
   line's quads at a time is the same as one statement's at a time, with
   the same line.

When the parse fails, the lines before the one with the error are parsed
again alone (and used if that succeeds); the rest is read statement by
statement until the splitter is idle again.  A failure makes the next batch
small (4 KB, growing back to 64 KB), so bad input costs about what it did.
Read so, 3000 events (3 files of the smartgrid bench data, 2.3 MB) take
about 60 ms, 3 times a bare pyoxigraph parse of the files (20 ms) and half
of what the statement-by-statement reading takes (110 ms); on the traffic
data (3.9 MB, ``xsd:dateTime`` times) 74 ms against 25 ms and 150 ms.
N-Quads lines are parsed in batches, and a batch with an error is parsed
again line by line.  Blank node labels are kept, so one label in one file is
one blank node.  Relative IRIs are resolved against the file's own ``file:``
IRI unless the file sets ``@base``.

The SPASEQ authors' reference implementation describes its streams in a
manifest (``read_manifest``): N-Triples files in which every N consecutive
triples form one event, timestamped 1, 2, 3, ... in arrival order
(``read_ntriples_chunks``).
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import heapq
import itertools
import os
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyoxigraph as ox

from ..errors import EventError
from ..hookspecs import StreamSource, hookimpl
from ..events import PROV_GENERATED_AT, Event, Time, format_time, parse_timestamp

__all__ = [
    "DONE_MEMORY",
    "NEAR_GRAPHS",
    "merge_streams",
    "open_stream",
    "read_manifest",
    "read_manifest_streams",
    "read_ntriples_chunks",
    "read_stream_file",
    "nquads_spans",
    "stream_file_format",
    "stream_file_paths",
]

#: How many other graphs may start between a graph's first block and its
#: timestamp (or its other blocks) before the event is judged.
NEAR_GRAPHS = 1000

#: How many finished graph names a reader remembers at most (and at least half
#: as many), to tell a late block or a late different timestamp of an already
#: emitted graph.  Bounded so that a very long file does not grow memory
#: without end.
DONE_MEMORY = 10_000

_CHUNK_BYTES = 1 << 16
_NQUADS_BATCH_LINES = 2000

_FORMATS = {".trig": ox.RdfFormat.TRIG, ".nq": ox.RdfFormat.N_QUADS}


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------

def read_stream_file(path: str, stream: str | None, *, default_stream_for_graphs: str | None = None,
                     span: tuple[int, int, int] | None = None) -> Iterator[Event | EventError]:
    """Events of one stream file, in file order, with ``EventError`` for rejects.

    ``stream`` is the stream IRI every event gets (one file holds one stream);
    when it is ``None``, ``default_stream_for_graphs`` is used instead.
    ``span`` (uncompressed N-Quads only) reads just the lines from byte
    ``span[0]`` (a line start, numbered ``span[2]``) to byte ``span[1]``.
    Raises ``ValueError`` for an unknown file extension and
    ``FileNotFoundError`` for a missing file, right away (not on iteration).
    """
    stream = stream or default_stream_for_graphs
    if not stream:
        raise ValueError("read_stream_file needs a stream IRI")
    rdf_format = stream_file_format(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"stream file not found: {path}")
    if span is not None and (rdf_format != ox.RdfFormat.N_QUADS or path.lower().endswith(".gz")):
        raise ValueError(f"{path}: only uncompressed N-Quads files are read in spans")
    if rdf_format == ox.RdfFormat.TRIG:
        units = trig_units(_chunks(path), _TrigParser(path))
    else:
        units = _nquads_units(path, span)
    return _check_order(_assemble(units, path, stream))


def stream_file_format(path: str) -> ox.RdfFormat:
    """The RDF format of a stream file name (``.trig``/``.nq``, maybe ``.gz``)."""
    name = path.lower().removesuffix(".gz")
    rdf_format = _FORMATS.get(os.path.splitext(name)[1])
    if rdf_format is None:
        raise ValueError(f"{path}: a stream file must end in .trig, .nq, .trig.gz or .nq.gz")
    return rdf_format


def open_stream(spec_path: str, stream: str) -> Iterator[Event | EventError]:
    """Events of one stream given as a file, a glob pattern or a directory.

    Several files feeding one stream are merged by time, and the duplicate
    and out-of-order checks apply across them.
    """
    paths = stream_file_paths(spec_path)
    if len(paths) == 1:
        return read_stream_file(paths[0], stream)
    return _check_order(merge_streams([read_stream_file(p, stream) for p in paths]))


def stream_file_paths(spec_path: str) -> list[str]:
    """The files a stream location names: the file itself, the stream files of a
    directory, or the files a glob matches (sorted).  Raises ``FileNotFoundError``
    when there are none."""
    if os.path.isdir(spec_path):
        paths = sorted(str(p) for p in Path(spec_path).iterdir()
                       if p.is_file() and _is_stream_file(p.name))
        if not paths:
            raise FileNotFoundError(f"no .trig/.nq(.gz) stream file in directory {spec_path}")
        return paths
    if glob.has_magic(spec_path):
        paths = sorted(p for p in glob.glob(spec_path) if os.path.isfile(p))
        if not paths:
            raise FileNotFoundError(f"no file matches {spec_path}")
        return paths
    return [spec_path]


def merge_streams(sources: list[Iterator[Event | EventError]]) -> Iterator[Event | EventError]:
    """Merge time-ordered sources into one non-decreasing sequence.

    Stable: for equal times, events keep the order of ``sources`` (and their
    order within one source).  ``EventError`` items have no time: each one is
    passed on as soon as it is read, so it neither waits for nor reorders the
    events.  Each source is read only as far as the merge needs.
    """
    heap: list[tuple[Time, int, Event]] = []
    iterators = [iter(source) for source in sources]

    def pull(index: int) -> Iterator[EventError]:
        # Advance one source to its next event, passing errors through.
        for item in iterators[index]:
            if isinstance(item, EventError):
                yield item
                continue
            heapq.heappush(heap, (item.time, index, item))
            return

    for index in range(len(iterators)):
        yield from pull(index)
    while heap:
        _, index, event = heapq.heappop(heap)
        yield event
        yield from pull(index)


_MANIFEST_LINE = re.compile(r"<([^<>\s]+)>\s+<([^<>]+)>\s+(\d+)(?:\s+#.*)?")


def read_manifest(path: str) -> list[tuple[str, str, int]]:
    """Parse a reference-implementation stream manifest.

    Each line is ``<stream IRI> <path> N``: the path (in angle brackets) is
    relative to the manifest's folder or, when not found there, to the
    current directory (the authors' own manifests are written that way); N
    is the number of triples per event.  Blank lines and ``#`` comments are
    ignored.  A malformed line, or one naming a missing file, raises
    ``EventError`` with ``FILE:LINE``.
    """
    base = os.path.dirname(path)
    entries = []
    with open(path, encoding="utf-8") as f:
        for number, text in enumerate(f, start=1):
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            match = _MANIFEST_LINE.fullmatch(text.strip())
            position = f"{path}:{number}"
            if match is None:
                raise EventError("malformed manifest line, expected '<stream IRI> <path> N': "
                                 f"{text.strip()!r}", position)
            stream, file_path, count = match.group(1), match.group(2), int(match.group(3))
            if count < 1:
                raise EventError(f"triples per event must be at least 1, not {count}", position)
            beside = os.path.normpath(os.path.join(base, file_path))
            if os.path.isfile(beside):
                file_path = beside
            elif not os.path.isfile(file_path):
                raise EventError(f"stream file not found: {file_path} (looked in "
                                 f"{base or '.'} and in the current directory)", position)
            entries.append((stream, file_path, count))
    return entries


def read_manifest_streams(path: str) -> dict[str, Iterator[Event | EventError]]:
    """Each stream IRI of a manifest mapped to its events.

    Several lines for one stream are merged by time (that is, interleaved in
    arrival order) and then renumbered 1, 2, 3, ... so that the stream still
    has one event per timestamp.
    """
    files: dict[str, list[tuple[str, int]]] = {}
    for stream, file_path, count in read_manifest(path):
        files.setdefault(stream, []).append((file_path, count))
    streams = {}
    for stream, entries in files.items():
        readers = [read_ntriples_chunks(p, stream, n) for p, n in entries]
        streams[stream] = readers[0] if len(readers) == 1 else _renumber(merge_streams(readers))
    return streams


def read_ntriples_chunks(path: str, stream: str, triples_per_event: int) -> Iterator[Event | EventError]:
    """Events of N-Triples file cut every ``triples_per_event`` triples.

    The k-th event (1-based) has time k.  Comment and blank lines are
    skipped; a malformed line is rejected and does not count.  Left-over
    triples at the end of the file, too few for an event, are rejected.
    Raises ``FileNotFoundError`` right away for a missing file.
    """
    if triples_per_event < 1:
        raise ValueError("triples_per_event must be at least 1")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"stream file not found: {path}")
    return _ntriples_chunks(path, stream, triples_per_event)


# --------------------------------------------------------------------------
# Event assembly: from parsed statements to events
# --------------------------------------------------------------------------

class _Pending:
    """An event being read: the graph's triples so far and its timestamp."""

    __slots__ = ("name", "line", "index", "triples", "time", "time_line")

    def __init__(self, name, line: int, index: int):
        self.name = name
        self.line = line
        self.index = index          # how many graphs started before this one
        self.triples: list[ox.Triple] = []
        self.time: tuple[Time, bool] | None = None
        self.time_line = 0


@dataclasses.dataclass(slots=True)
class _Unit:
    """One parsed statement (TriG) or line (N-Quads).

    ``graph`` is set for a graph block that yielded no quads: an empty graph
    (still an event), or one ``rejected`` for a syntax error (its whole
    event is dropped).
    """

    line: int
    quads: list[ox.Quad]
    graph: ox.NamedNode | ox.BlankNode | None = None
    rejected: bool = False


_NOTHING: list = []      # shared empty result, never modified
_ABSENT = object()


class _Assembler:
    """Turns statements into events following the module's streaming rule."""

    def __init__(self, path: str, stream: str):
        self.path = path
        self.stream = stream
        # Events being read, in file order, and errors waiting behind them
        # (an error's key is itself), so that output keeps the file's order.
        self.queue: OrderedDict[object, _Pending | EventError] = OrderedDict()
        self.orphans: OrderedDict[object, tuple[tuple[Time, bool], int, int]] = OrderedDict()
        self.done = _Finished(DONE_MEMORY)
        self.current = None         # the graph the reader is in
        self.pending: _Pending | None = None   # its event (None: dropping its triples)
        self.graphs = 0             # graphs started so far
        self.out: list[Event | EventError] = []

    def take(self, item: _Unit | _Lines | EventError) -> list[Event | EventError]:
        """One item from a unit reader; the events and errors it completes."""
        if type(item) is _Lines:
            return self.feed_lines(item)
        if isinstance(item, EventError):
            return self.error(item)
        return self.feed(item)

    def feed(self, unit: _Unit) -> list[Event | EventError]:
        if unit.graph is not None:
            if unit.rejected:
                self._reject(unit.graph)
            else:
                self._enter(unit.graph, unit.line)
        self._read(unit.line, (unit.quads,))
        return self._drain() if self.out else _NOTHING

    def feed_lines(self, lines: _Lines) -> list[Event | EventError]:
        """Like feeding each line's quads as one unit, in order."""
        self._read(lines.line, lines.quads)
        return self._drain() if self.out else _NOTHING

    def _read(self, line: int, quads_of_lines: Iterable[list[ox.Quad]]) -> None:
        # Local names: this loop runs once per quad of the file.
        current, triples = self.current, self._triples()
        for quads in quads_of_lines:
            for quad in quads:
                graph = quad.graph_name
                if graph != current:
                    if isinstance(graph, ox.DefaultGraph):
                        if quad.predicate == PROV_GENERATED_AT:
                            self._timestamp(quad.subject, quad.object, line)
                            # (a bad timestamp may have rejected the current graph)
                            current, pending = self.current, self.pending
                            triples = None if pending is None else pending.triples
                        continue
                    pending = self._enter(graph, line)
                    current, triples = graph, None if pending is None else pending.triples
                if triples is not None:
                    triples.append(quad.triple)
            line += 1

    def _triples(self) -> list[ox.Triple] | None:
        return None if self.pending is None else self.pending.triples

    def finish(self) -> list[Event | EventError]:
        self.current = self.pending = None
        self._flush(at_end=True)
        return self._drain()

    def _drain(self) -> list[Event | EventError]:
        out, self.out = self.out, []
        return out

    def error(self, error: EventError) -> list[Event | EventError]:
        """Pass on a syntax error, in file order."""
        self._error(error)
        return self._drain() if self.out else _NOTHING

    def _error(self, error: EventError | str, line: int = 0) -> None:
        if isinstance(error, str):
            error = EventError(error, f"{self.path}:{line}")
        if self.queue:
            self.queue[error] = error       # after the events read before it
        else:
            self.out.append(error)

    def _enter(self, name, line: int) -> _Pending | None:
        """The reader moves on to (a block of) graph ``name``: its event
        (None when its triples are dropped)."""
        self.current = name
        pending = self.queue.get(name)          # (never an error: keys differ)
        if pending is None:
            done = self.done.get(name, _ABSENT)
            if done is not _ABSENT:
                if done is not None:
                    self._error(f"graph {name} was already read as an event; blocks of one "
                                "graph must not be split around other events", line)
            else:
                pending = _Pending(name, line, self.graphs)
                self.graphs += 1
                orphans = self.orphans
                if orphans:
                    orphan = orphans.pop(name, None)
                    if orphan is not None:
                        pending.time, pending.time_line = orphan[0], orphan[1]
                    if orphans:
                        self._forget_old_orphans()
                self.queue[name] = pending
        self.pending = pending
        self._flush()
        return pending

    def _timestamp(self, name, term, line: int) -> None:
        done = self.done.get(name, _ABSENT)
        if done is None:
            return                                  # already rejected
        try:
            time = parse_timestamp(term)
        except ValueError as error:
            self._error(f"unreadable timestamp for graph {name}: {error}", line)
            self._reject(name)
            return
        pending = self.queue.get(name)
        if pending is not None:
            if pending.time is None:
                pending.time, pending.time_line = time, line
                self._flush()                       # it may have been waiting for this
            elif pending.time != time:
                self._two_times(name, pending.time, pending.time_line, time, line)
        elif done is not _ABSENT:
            if done != time:
                self._error(f"second timestamp {_show(time)} for graph {name}, which was read "
                            f"as an event at {_show(done)}", line)
        elif (orphan := self.orphans.get(name)) is not None:
            first, first_line, _ = orphan
            if first != time:
                self._two_times(name, first, first_line, time, line)
        else:
            self.orphans[name] = (time, line, self.graphs)

    def _two_times(self, name, first, first_line: int, second, line: int) -> None:
        self._error(f"graph {name} has two different timestamps: {_show(first)} "
                    f"(line {first_line}) and {_show(second)} (line {line})", line)
        self._reject(name)

    def _reject(self, name) -> None:
        """Drop graph ``name``: its event, and anything more about it."""
        self.orphans.pop(name, None)
        if self.queue.pop(name, None) is not None and self.current == name:
            self.pending = None
        self._remember(name, None)
        self._flush()

    def _flush(self, at_end: bool = False) -> None:
        """Emit (or reject) the events at the head of the queue that are ready."""
        queue, out = self.queue, self.out
        while queue:
            name = next(iter(queue))
            pending = queue[name]
            if type(pending) is not _Pending:       # an error
                queue.popitem(last=False)
                out.append(pending)
                continue
            if name == self.current:
                return                              # still being read
            time = pending.time
            if time is None:
                if not at_end and self.graphs - pending.index - 1 <= NEAR_GRAPHS:
                    return                          # its timestamp may still come
                queue.popitem(last=False)
                self._remember(name, None)
                out.append(EventError(
                    f"graph {name} has no timestamp (no '{name} {PROV_GENERATED_AT} τ' "
                    "in the default graph near it)", f"{self.path}:{pending.line}"))
                continue
            queue.popitem(last=False)
            self._remember(name, time)
            # an RDF graph is a set: drop repeated triples, keep the order
            out.append(Event(self.stream, time[0], tuple(dict.fromkeys(pending.triples)),
                             name, f"{self.path}:{pending.line}", time[1]))

    def _remember(self, name, time) -> None:
        self.done.add(name, time)

    def _forget_old_orphans(self) -> None:
        while self.orphans:
            _, (_, _, index) = next(iter(self.orphans.items()))
            if self.graphs - index <= NEAR_GRAPHS:
                return
            self.orphans.popitem(last=False)


class _Finished:
    """Finished graphs: name -> (time, is_datetime), or None for a rejected one.

    Two generations of at most ``limit / 2`` names each; when the newer one is
    full the older one is dropped whole.  So the last ``limit / 2`` names are
    always remembered, never more than ``limit``, and memory stays flat on an
    endless stream (an ordered dict evicting one name per event fragments)."""

    __slots__ = ("half", "newer", "older")

    def __init__(self, limit: int):
        self.half = max(1, limit // 2)
        self.newer: dict = {}
        self.older: dict = {}

    def get(self, name, default):
        found = self.newer.get(name, _ABSENT)
        return self.older.get(name, default) if found is _ABSENT else found

    def add(self, name, time) -> None:
        self.newer[name] = time
        if len(self.newer) >= self.half:
            self.older, self.newer = self.newer, {}


def _assemble(units: Iterable[_Unit | _Lines | EventError], path: str, stream: str) -> Iterator[Event | EventError]:
    assembler = _Assembler(path, stream)
    for unit in units:
        if out := assembler.take(unit):
            yield from out
    yield from assembler.finish()


def _check_order(items: Iterable[Event | EventError]) -> Iterator[Event | EventError]:
    """Reject duplicate, out-of-order and wrong-kind times, per stream."""
    last: dict[str, Event] = {}
    for item in items:
        if isinstance(item, EventError):
            yield item
            continue
        previous = last.get(item.stream)
        if previous is not None and (item.is_datetime != previous.is_datetime
                                     or item.time <= previous.time):
            yield _order_error(item, previous)
            continue
        last[item.stream] = item
        yield item


def _order_error(item: Event, previous: Event) -> EventError:
    """Why ``item`` cannot follow ``previous`` (its time is of another kind, or not later)."""
    shown = _show((item.time, item.is_datetime))
    before = f"the previous event {_describe(previous)}"
    if item.is_datetime != previous.is_datetime:
        kinds = ("an xsd:dateTime", "a number")
        return EventError(f"timestamp {shown} is {kinds[not item.is_datetime]} but "
                          f"{before} has {kinds[not previous.is_datetime]}", item.position)
    if item.time == previous.time:
        return EventError(f"duplicate timestamp {shown} on stream <{item.stream}>: "
                          f"{before} has the same time", item.position)
    return EventError(f"out of order: timestamp {shown} is older than "
                      f"{before} at {_show((previous.time, previous.is_datetime))}",
                      item.position)


def _show(time: tuple[Time, bool] | None) -> str:
    return "?" if time is None else str(format_time(*time))


def _describe(event: Event) -> str:
    name = f"{event.name} " if event.name is not None else ""
    return f"{name}({event.position})" if event.position else name.strip()


def _renumber(items: Iterable[Event | EventError]) -> Iterator[Event | EventError]:
    """Give events arrival-order times 1, 2, 3, ..."""
    count = 0
    for item in items:
        if isinstance(item, Event):
            count += 1
            item = dataclasses.replace(item, time=count, is_datetime=False)
        yield item


# --------------------------------------------------------------------------
# Reading bytes, lines and statements
# --------------------------------------------------------------------------

def _is_stream_file(name: str) -> bool:
    try:
        stream_file_format(name)
    except ValueError:
        return False
    return True


def _open(path: str):
    return gzip.open(path, "rb") if path.lower().endswith(".gz") else open(path, "rb")


def _chunks(path: str) -> Iterator[bytes]:
    with _open(path) as f:
        while chunk := f.read(_CHUNK_BYTES):
            yield chunk


_SYNTAX_DETAIL = re.compile(r"^Parser error (?:at|between) [^:]*: ")


def _syntax_error(error: SyntaxError, path: str, line: int, column0: int, header_lines: int) -> EventError:
    """An ``EventError`` for a pyoxigraph error in a statement starting at
    ``line`` (0-based column ``column0``) parsed after ``header_lines`` lines."""
    detail = _SYNTAX_DETAIL.sub("", error.msg or str(error))
    column = error.offset
    if error.lineno is not None and error.lineno > header_lines:
        offset = error.lineno - header_lines - 1
        if offset == 0 and column is not None:
            column += column0
        line += offset
    where = f" (column {column})" if column else ""
    return EventError(f"syntax error: {detail}{where}", f"{path}:{line}")


# ---- N-Quads and N-Triples: line by line, parsed in batches ----------------

def _significant_lines(path: str, span: tuple[int, int, int] | None = None) -> Iterator[tuple[int, bytes]]:
    """(line number, line) for the lines that are not blank or comments (of ``span``)."""
    with _open(path) as f:
        start, end, first = span if span is not None else (0, None, 1)
        f.seek(start)
        at = start
        for number, line in enumerate(f, start=first):
            if end is not None:
                if at >= end:
                    return
                at += len(line)
            stripped = line.strip()
            if stripped and not stripped.startswith(b"#"):
                yield number, line


def nquads_spans(path: str, size: int) -> list[tuple[int, int, int]]:
    """Cut an N-Quads file into spans of about ``size`` bytes, each ``(start byte,
    end byte, number of the first line)``, at lines where the event changes (the
    graph of a quad, the subject of a default-graph line: a timestamp), so that
    no event is cut as long as its lines are together.  The reader of the spans
    checks that they were (see spark.engine)."""
    total = os.path.getsize(path)
    spans: list[tuple[int, int, int]] = []
    start, first, lines = 0, 1, 0
    with open(path, "rb") as f:
        while True:
            block = f.read(min(_CHUNK_BYTES, max(size, 4096)))
            if not block:
                break
            lines += block.count(b"\n")
            if f.tell() - start < size or f.tell() >= total:
                continue
            lines += f.readline().count(b"\n")     # to the next line start
            previous = None
            for _ in range(NEAR_GRAPHS):
                at = f.tell()
                line = f.readline()
                if not line:
                    break
                owner = _line_owner(line)
                if previous is not None and owner is not None and owner != previous:
                    spans.append((start, at, first))
                    start, first = at, lines + 1
                    f.seek(at)
                    break
                previous = owner if owner is not None else previous
                lines += line.count(b"\n")
    spans.append((start, total, first))
    return spans


def _line_owner(line: bytes):
    """The event an N-Quads line belongs to: its graph, or a default-graph line's subject."""
    try:
        quads = list(ox.parse(input=line, format=ox.RdfFormat.N_QUADS))
    except SyntaxError:
        return None
    if len(quads) != 1:
        return None
    quad = quads[0]
    return quad.subject if isinstance(quad.graph_name, ox.DefaultGraph) else quad.graph_name


def _parse_lines(path: str, rdf_format: ox.RdfFormat,
                 span: tuple[int, int, int] | None = None) -> Iterator[tuple[int, ox.Quad] | EventError]:
    """(line number, quad) per line, or an ``EventError`` for a bad line.

    Lines are parsed a batch at a time; only a batch with an error is
    parsed again line by line, to find the bad lines and keep the rest.
    """
    batch: list[tuple[int, bytes]] = []
    for item in _significant_lines(path, span):
        batch.append(item)
        if len(batch) >= _NQUADS_BATCH_LINES:
            yield from parse_line_batch(batch, rdf_format, path)
            batch.clear()
    if batch:
        yield from parse_line_batch(batch, rdf_format, path)


def parse_line_batch(batch: list[tuple[int, bytes]], rdf_format: ox.RdfFormat,
                     where: str) -> Iterator[tuple[int, ox.Quad] | EventError]:
    """(line number, quad) per quad of N-Triples/N-Quads lines given as (number,
    text), or an ``EventError`` per bad line: one parse for the batch, and line
    by line only when that fails, to find the bad lines and keep the rest."""
    try:
        quads = list(ox.parse(input=b"".join(line for _, line in batch), format=rdf_format))
    except SyntaxError:
        quads = None
    if quads is not None and len(quads) == len(batch):   # one statement per line
        yield from zip((number for number, _ in batch), quads)
        return
    for number, line in batch:
        try:
            quads = list(ox.parse(input=line, format=rdf_format))
        except SyntaxError as error:
            yield _syntax_error(error, where, number, 0, 0)
            continue
        yield from ((number, quad) for quad in quads)


def _nquads_units(path: str, span: tuple[int, int, int] | None = None) -> Iterator[_Unit | EventError]:
    return line_units(_parse_lines(path, ox.RdfFormat.N_QUADS, span))


def line_units(items: Iterable[tuple[int, ox.Quad] | EventError]) -> Iterator[_Unit | EventError]:
    """What an ``_Assembler`` takes, from ``parse_line_batch``'s items."""
    for item in items:
        yield item if isinstance(item, EventError) else _Unit(item[0], [item[1]])


def _ntriples_chunks(path: str, stream: str, size: int) -> Iterator[Event | EventError]:
    triples: list[ox.Triple] = []
    first_line = 0
    count = 0
    for item in _parse_lines(path, ox.RdfFormat.N_TRIPLES):
        if isinstance(item, EventError):
            yield item
            continue
        number, quad = item
        if not triples:
            first_line = number
        triples.append(quad.triple)
        if len(triples) == size:
            count += 1
            yield Event(stream=stream, time=count, triples=tuple(triples),
                        position=f"{path}:{first_line}")
            triples = []
    if triples:
        yield EventError(f"incomplete event at the end of the file: {len(triples)} of "
                         f"{size} triples", f"{path}:{first_line}")


# ---- TriG: top-level statements --------------------------------------------

# Pieces of TriG that may hold '.', '{', '}' or '#' without meaning them: the
# statement splitter skips them whole.  All loops are possessive, so a failed
# match never backtracks.
_IRI = rb'<(?:[^<>"{}|^`\\\x00-\x20]|\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})*+>'
# (as in the Turtle grammar: quotes inside a long string are followed by
# another character, so the first three quotes in a row close it)
_LONG_STRING = (rb'"""(?:"{0,2}(?:[^"\\]|\\.))*+"""'
                rb"|'''(?:'{0,2}(?:[^'\\]|\\.))*+'''")
# (a short string never starts with three quotes: that is a long string)
_SHORT_STRING = rb'"(?!"")(?:[^"\\\n]|\\.)*+"' rb"|'(?!'')(?:[^'\\\n]|\\.)*+'"
# RDF 1.2 annotations {| ... |} are not graph blocks.
_SKIPPED = b"|".join([_IRI, _LONG_STRING, _SHORT_STRING, rb"#[^\n]*+", rb"\\.", rb"\{\||\|\}"])
# A '.' ends a statement only when a space, a comment or the end follows: the
# '.' of 1.5 or of ex:a.b does not.
_END_DOT = rb"\.(?=[\s#]|\Z)"
_SPARQL_DIRECTIVE = rb"(?i:prefix)\s++[^\s:]*+:\s*+<[^>\s]*+>|(?i:base)\s++<[^>\s]*+>"

# Fast path: one whole statement, when it is well formed and complete.  A
# lone '<', '|' or quote (not an IRI, annotation or string) is plain content.
_ATOM = (rb"[^<\"'#{}.\\|]++|" + _SKIPPED
         + rb"|<|\||\"(?!\"\")|'(?!'')|\.(?![\s#]|\Z)")
_STATEMENT = re.compile(
    rb"(?:\s++|#[^\n]*+)*+(?P<text>" + _SPARQL_DIRECTIVE
    + rb"|(?:" + _ATOM + rb")*+(?:" + _END_DOT + rb"|(?P<brace>\{)(?:" + _ATOM + rb"|\.)*+\}))",
    re.S)
# Slow path: the tokens that matter, one at a time (statements cut by a chunk
# end, unclosed blocks, stray braces, unclosed strings).
_TOKEN = re.compile(
    rb"(?P<skip>" + _SKIPPED + rb")"
    rb"|(?P<open_long>\"\"\"|''')"          # a long string not closed (yet)
    rb"|(?P<open>\{)|(?P<close>\})"
    rb"|(?P<dot>" + _END_DOT + rb")"
    rb"|(?P<sparql>(?i:prefix|base)(?=\s))",  # SPARQL-style directives have no '.'
    re.S)
_SPACE = re.compile(rb"(?:\s++|#[^\n]*+)*+")
_SPARQL_DIRECTIVE_RE = re.compile(_SPARQL_DIRECTIVE)
_DIRECTIVE_START = re.compile(rb"@prefix|@base|(?i:prefix|base)\s")


@dataclasses.dataclass(slots=True)
class _Statement:
    line: int           # line of its first character
    column0: int        # 0-based column of its first character
    text: bytes
    brace: int | None   # offset of the '{' of a graph block
    unclosed: bool = False  # a graph block cut off before its '}'


class _TrigSplitter:
    """Splits TriG text into top-level statements, given chunk by chunk.

    A statement ends at a '.' outside braces, at the '}' closing a graph
    block, or after a SPARQL-style ``PREFIX``/``BASE`` directive.  Only
    complete lines are scanned, so the only token a chunk can cut is a long
    string: the scan then stops before it and waits for more text.  Most
    statements are matched whole by one regex; the token-by-token scan takes
    over where that fails, and also recovers from an unclosed graph block.

    The splitter is *idle* when the text from ``start`` on begins a new
    statement at a line start (nothing before it is pending).  Then the
    lines from ``start`` may be read by other means (``_TrigParser.lines``)
    and skipped with :meth:`skip`: what the splitter finds after them does
    not depend on whether it scanned them itself.
    """

    def __init__(self):
        self.buf = b""
        self.start = 0              # where the current statement begins in buf
        self.scan = 0               # where the token scan resumes (>= start)
        self.end = 0                # the end of the complete lines in buf
        self.depth = 0              # 1 inside a graph block
        self.brace = None           # offset in buf of the current block's '{'
        self.line_at, self.line_no = 0, 1   # line_no is the line of buf[line_at]
        self.idle = True

    def add(self, chunk: bytes) -> None:
        """Add text, dropping the finished statements (keeping whole lines, for columns)."""
        buf = self.buf
        keep = buf.rfind(b"\n", 0, self.start) + 1
        self.line_no += buf.count(b"\n", self.line_at, keep)
        self.buf = buf = buf[keep:] + chunk
        self.start, self.scan, self.line_at = self.start - keep, self.scan - keep, 0
        if self.brace is not None:
            self.brace -= keep
        self.end = buf.rfind(b"\n") + 1

    def statements(self, stop: bool = False) -> Iterator[_Statement]:
        """The statements in the complete lines added so far.  With ``stop``,
        ends early once the splitter is idle after a statement (``idle``)."""
        buf, end = self.buf, self.end
        self.idle = False
        while self.scan < end:
            if self.scan == self.start:
                match = _STATEMENT.match(buf, self.start, end)
                if match:
                    self.brace = match.start("brace") if match.group("brace") else None
                    item = self._cut(match.end(), match.start("text"))
                    self.brace = None
                    if item:
                        yield item
                    if stop and self._idle_after(end):
                        return
                    continue
            for match in _TOKEN.finditer(buf, self.scan, end):
                kind = match.lastgroup
                if kind == "skip":
                    continue
                if kind == "open_long":
                    self.scan = end = match.start()     # its end is not read yet
                    break
                if kind == "open":
                    if self.depth == 1:
                        # A '{' inside a graph block: that block was never
                        # closed.  Cut it off at the start of this line, most
                        # likely where the next graph's name begins.
                        cut = buf.rfind(b"\n", self.start, match.start()) + 1
                        if cut > self.start and (item := self._cut(cut, unclosed=True)):
                            yield item
                    self.depth, self.brace = 1, match.start()
                elif kind == "close" or (kind == "dot" and self.depth == 0):
                    item = self._cut(match.end())
                    self.depth, self.brace = 0, None
                    if item:
                        yield item
                    if stop and self._idle_after(end):
                        return
                    break
                elif (kind == "sparql" and self.depth == 0
                      and _SPACE.match(buf, self.start).end() == match.start()):
                    directive = _SPARQL_DIRECTIVE_RE.match(buf, match.start(), end)
                    if directive:
                        if item := self._cut(directive.end()):
                            yield item
                        if stop and self._idle_after(end):
                            return
                        break
            else:
                self.scan = end
        if self.depth == 0 and _SPACE.match(buf, self.start, self.end).end() == self.end:
            self._idle_at(self.end)             # only space and comments left

    def finish(self) -> _Statement | None:
        """What is left at the end of the text: an unclosed block or long
        string, a missing '.' (None if only space is left)."""
        # (an unclosed long string ends the scan early: that is its own error)
        return self._cut(len(self.buf), unclosed=self.depth == 1 and self.scan == len(self.buf))

    def skip(self, to: int, lines: int) -> None:
        """The ``lines`` lines up to ``to`` were read by other means (the
        splitter was idle at their start)."""
        self.line_no += lines
        self.line_at = self.start = self.scan = to

    def _cut(self, end: int, first: int | None = None, unclosed: bool = False) -> _Statement | None:
        # Cut buf[start:end] as a statement (None if it is only space).
        buf = self.buf
        if first is None:
            first = _SPACE.match(buf, self.start, end).end()
        self.start = self.scan = end
        if first >= end:
            return None
        self.line_no += buf.count(b"\n", self.line_at, first)
        self.line_at = first
        column0 = first - (buf.rfind(b"\n", 0, first) + 1)
        brace = self.brace
        # (rstrip: a statement cut short should fail at its own last line)
        return _Statement(self.line_no, column0, buf[first:end].rstrip(),
                          None if brace is None else brace - first, unclosed)

    def _idle_after(self, end: int) -> bool:
        """After a statement: when only space and comments follow it up to a
        line end, the splitter is idle from the next line on."""
        buf = self.buf
        newline = buf.rfind(b"\n", self.start, _SPACE.match(buf, self.start, end).end())
        if newline < 0:
            return False
        self._idle_at(newline + 1)
        return True

    def _idle_at(self, at: int) -> None:
        self.line_no += self.buf.count(b"\n", self.line_at, at)
        self.line_at = self.start = self.scan = at
        self.idle = True


# ---- TriG: many lines in one parse -----------------------------------------

# After each line of a batch: two comment lines, which close a long string
# left open by the line (so that its parse fails), and a graph block, which
# is valid only between top-level statements and gives one marker quad.
_MARK_NODE = ox.BlankNode("spaseqline")
_MARK = ox.Quad(_MARK_NODE, ox.NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type"),
                _MARK_NODE, _MARK_NODE)
_MARKED_NEWLINE = b"\n#'''\n#\"\"\"\nGRAPH _:spaseqline { _:spaseqline a _:spaseqline }\n"
_MARKED_LINES = _MARKED_NEWLINE.count(b"\n")    # text lines per line of the batch

#: Read TriG lines in batches parsed at once (see the module docstring);
#: tests turn it off to compare with the statement-by-statement reading,
#: which must give exactly the same.
_TRIG_BATCHES = True
_BATCH_BYTES = 1 << 16                  # the most a batch holds...
_BATCH_BYTES_AFTER_ERROR = 1 << 12      # ...and the least, after a failed one

_LONE_CR = re.compile(rb"\r(?!\n)")
_EMPTY_BLOCK = re.compile(rb"\{\s*\}")
_KEYWORDS = [re.compile(word) for word in (b"prefix", b"base", b"version")]
# A keyword with one of these before or after it is part of a longer name or
# IRI, not a directive (the text is lowercased).
_NAME_BEFORE = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_-:/#%\\") | frozenset(range(0x80, 0x100))
_NAME_AFTER = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_-:") | frozenset(range(0x80, 0x100))


class _Obstacles:
    """Where in a text the batch reading must stop: a line holding one of
    these goes to the statement-by-statement reading.

    * a directive keyword (``PREFIX``, ``BASE``, ``VERSION``, with or without
      ``@``, any case) that is not part of a longer name or IRI;
    * an empty block ``{ }`` (the per-statement reading makes it an event);
    * a carriage return not followed by a line feed (pyoxigraph ends a
      comment there, the statement splitter does not).

    ``first(pos)`` is the offset of the first one at or after ``pos``
    (``len(text)`` if none).  Each kind is searched for again only once
    ``pos`` has passed the last one found, so a text is scanned once.
    """

    def __init__(self, text: bytes):
        self.text = text
        self.low = text.lower()
        self.cr = b"\r" in text
        self.found = [(0, -1)] * (len(_KEYWORDS) + 2)   # per kind: (searched from, found at)
        self.since, self.at = 0, -1     # the answer for positions since..at

    def first(self, pos: int) -> int:
        if self.since <= pos <= self.at:
            return self.at
        found = self.found
        for kind, (since, at) in enumerate(found):
            if not since <= pos <= at:
                found[kind] = (pos, self._search(kind, pos))
        self.since, self.at = pos, min(at for _, at in found)
        return self.at

    def _search(self, kind: int, pos: int) -> int:
        text = self.text
        if kind < len(_KEYWORDS):
            return self._keyword(_KEYWORDS[kind], pos)
        if kind == len(_KEYWORDS):
            match = _EMPTY_BLOCK.search(text, pos)
        else:
            match = _LONE_CR.search(text, pos) if self.cr else None
        return match.start() if match else len(text)

    def _keyword(self, word: re.Pattern, pos: int) -> int:
        low = self.low
        while match := word.search(low, pos):
            at, after = match.span()
            if not ((at > 0 and low[at - 1] in _NAME_BEFORE)
                    or (after < len(low) and low[after] in _NAME_AFTER)):
                return at
            pos = at + 1
        return len(low)


@dataclasses.dataclass(slots=True)
class _Lines:
    """Consecutive lines read in one parse: the quads of each line, in order
    (none for a blank or comment line), the first being line ``line``."""

    line: int
    quads: list[list[ox.Quad]]


class _TrigParser:
    """Parses TriG statements one by one, remembering prefixes and base."""

    _PROBE = b" { <urn:x-spaseq:probe> <urn:x-spaseq:probe> <urn:x-spaseq:probe> }"

    def __init__(self, path: str):
        self.path = path
        self.base = Path(path).resolve().as_uri()
        self.header = b""           # the prefixes declared so far, as TriG
        self.header_lines = 0

    def parse(self, statement: _Statement) -> list[_Unit | EventError]:
        text = statement.text
        if statement.unclosed:
            return self._reject(statement, EventError(
                "syntax error: graph block not closed (no '}' before the next graph "
                "or the end of the file)", f"{self.path}:{statement.line}"))
        try:
            parser = ox.parse(input=self.header + text, format=ox.RdfFormat.TRIG,
                              base_iri=self.base)
            quads = list(parser)
        except SyntaxError as error:
            return self._reject(statement, _syntax_error(
                error, self.path, statement.line, statement.column0, self.header_lines))
        if _DIRECTIVE_START.match(text):
            self._remember(parser.prefixes, parser.base_iri)
        if not quads and statement.brace is not None:
            # An empty graph block: still an event, with no triples.
            return [_Unit(statement.line, quads, self._graph_name(text[:statement.brace]))]
        return [_Unit(statement.line, quads)]

    def lines(self, text: bytes) -> tuple[list[list[ox.Quad]], int]:
        """The quads of each complete line of ``text``, parsed at once, for
        as many of the first lines as this can read: ``(quads of each line,
        bytes read)``.

        The lines must be free of ``_Obstacles`` and start at a statement.
        A marker after each line proves that the line ends a statement and
        tells which quads it gave.  When the parse fails, the lines before the
        error are parsed again alone; the others are left to ``parse``.
        """
        try:
            quads = self._marked(text)
        except SyntaxError as error:
            quads = None
            count = max(0, (error.lineno or 0) - self.header_lines - 1) // _MARKED_LINES
            if 0 < count < text.count(b"\n"):
                text = text[:_line_end(text, count)]
                try:
                    quads = self._marked(text)
                except SyntaxError:
                    pass
        return ([], 0) if quads is None else (quads, len(text))

    def _marked(self, text: bytes) -> list[list[ox.Quad]] | None:
        """The quads of each line of text, or None when the markers are not
        exactly one after each line."""
        marked = text.replace(b"\n", _MARKED_NEWLINE)
        count = (len(marked) - len(text)) // (len(_MARKED_NEWLINE) - 1)     # lines
        quads = list(ox.parse(input=self.header + marked, format=ox.RdfFormat.TRIG,
                              base_iri=self.base))
        out = []
        index = quads.index
        start = 0
        try:
            for _ in range(count):
                end = index(_MARK, start)
                out.append(quads[start:end])
                start = end + 1
        except ValueError:
            return None
        return out if start == len(quads) else None

    def _reject(self, statement: _Statement, error: EventError) -> list[_Unit | EventError]:
        """The error, and for a bad graph block the rejection of its whole event
        (when its name can be read)."""
        if statement.brace is not None:
            graph = self._graph_name(statement.text[:statement.brace])
            if graph is not None:
                return [error, _Unit(statement.line, [], graph, rejected=True)]
        return [error]

    def _graph_name(self, label: bytes) -> ox.NamedNode | ox.BlankNode | None:
        """The graph a block label (``<g>``, ``ex:g``, ``GRAPH _:b``...) names."""
        if not label.strip():
            return None                 # '{ ... }' is the default graph
        try:
            quads = list(ox.parse(input=self.header + label + self._PROBE,
                                  format=ox.RdfFormat.TRIG, base_iri=self.base))
        except SyntaxError:
            return None
        graph = quads[0].graph_name if quads else None
        return None if isinstance(graph, ox.DefaultGraph) else graph

    def _remember(self, prefixes: dict[str, str], base: str | None) -> None:
        if base:
            self.base = base
        self.header = b"".join(f"@prefix {name}: <{iri}> .\n".encode()
                               for name, iri in prefixes.items())
        self.header_lines = len(prefixes)


def trig_units(chunks: Iterable[bytes], parser: _TrigParser) -> Iterator[_Unit | _Lines | EventError]:
    """What an ``_Assembler`` takes (``take``) from TriG text given chunk by chunk:
    batches of lines where it can, statements elsewhere (see the module docstring).
    Only complete lines are read, so text arriving live is read as it comes."""
    splitter = _TrigSplitter()
    batches = _TRIG_BATCHES
    size = _BATCH_BYTES
    # A last newline makes the last line complete; it changes nothing in TriG.
    for chunk in itertools.chain(chunks, [b"\n"]):
        splitter.add(chunk)
        buf, end = splitter.buf, splitter.end
        obstacles = _Obstacles(buf) if batches else None
        careful = False             # after a failed batch, in this chunk
        while True:
            # Batches of lines while the splitter is idle, up to an obstacle.
            while batches and splitter.idle and splitter.start < end:
                pos = splitter.start
                stop = end
                if stop - pos > size:
                    stop = buf.rfind(b"\n", pos, pos + size) + 1 or buf.index(b"\n", pos) + 1
                if careful:
                    stop = _complete_lines_end(buf, pos, stop)
                    if stop <= pos:
                        break                           # it cannot end a statement
                obstacle = obstacles.first(pos)
                if obstacle < stop:
                    stop = buf.rfind(b"\n", pos, obstacle) + 1
                    if stop <= pos:
                        break                           # its first line has one
                quads, used = parser.lines(buf[pos:stop])
                if used:
                    yield _Lines(splitter.line_no, quads)
                    splitter.skip(pos + used, len(quads))
                if pos + used < stop:
                    size, careful = _BATCH_BYTES_AFTER_ERROR, True
                    break
                size = min(2 * size, _BATCH_BYTES)
            # The statement-by-statement reading, until idle again (or to the
            # end of the complete lines).
            for statement in splitter.statements(stop=batches):
                yield from parser.parse(statement)
            if not (batches and splitter.idle and splitter.start < end):
                break
    if item := splitter.finish():
        yield from parser.parse(item)


def _complete_lines_end(text: bytes, pos: int, stop: int) -> int:
    """Where the lines from ``pos`` (up to ``stop``) that can end a
    statement end: lines ending in '.' or '}', blank and comment lines.
    (This only saves parses bound to fail, as in a pretty-printed file.)"""
    while pos < stop:
        end = text.index(b"\n", pos) + 1
        line = text[pos:end].strip()
        if line and line[-1] not in b".}" and line[0] != 35:    # (35: '#')
            break
        pos = end
    return pos


def _line_end(text: bytes, count: int) -> int:
    """Where the first ``count`` lines of text end."""
    end = 0
    for _ in range(count):
        end = text.index(b"\n", end) + 1
    return end


@hookimpl
def spaseq_stream_sources():
    return [StreamSource("file", open_stream,
                         "TriG or N-Quads files, optionally .gz; a glob or a folder feeds one stream")]
