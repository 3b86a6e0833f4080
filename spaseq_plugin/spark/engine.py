"""``spaseq run --engine spark``: a query over archived streams, in parallel.

The streaming engine reads one time-ordered sequence of events; an archive
can instead be cut into pieces that are evaluated independently, each by
the same NFA engine, as long as every match lies wholly inside one piece
and is reported by exactly one.  Two cuts have that property
(semantics.md sections 7 and 8):

**By time, with an overlap of the window.**  Under ``WITHIN ω`` a match
depends only on the events in ``[τ_first, τ_first + ω]``: its own events
lie there (``τ_last − τ_first ≤ ω``), and so does everything that can
veto it: the events between two atoms for ``,`` ``;`` and negation, and
``(τ_prev, τ_first + ω]`` for a trailing negation.  Events before
``τ_first`` never matter, because a new run may start at every event
(nothing is consumed).  So piece ``k`` owns the matches whose first event
lies in ``[lo_k, hi_k)`` and reads the events of ``[lo_k, hi_k + ω]``; a
match it finds that starts at or after ``hi_k`` belongs to the next piece
and is dropped here (the overlap's duplicates never reach the output).
``TUMBLING`` windows are cut exactly at window boundaries: no overlap.
The cuts are chosen at quantiles of the events' times, and never closer
than twice the window, so the overlap costs at most half again.

**By PARTITION BY key.**  Each key's sub-stream is independent (section
8): contiguity and skipping are judged among its events only.  An event
goes to the piece of every key it belongs to (``hash(key) mod pieces``,
with a hash that is the same in every process); a piece keeps the matches
of its own keys.  This is the only cut for a query without ``WITHIN``;
such a query without PARTITION BY runs as one piece.

Stages: (1) every stream file is read by one task with the streaming
engine's own reader (the same rejects, with file and line), its events
kept as N-Triples bytes; then the order rules that the streaming path
applies to a stream's merged files (duplicate, older, kind, time jump) and
the stream set's kind of time apply to the whole stream, before any cut
(``SparkRun._order_rules``: only a stream whose files overlap in time, or
of the other kind, is sorted and checked again); (2) each event is sent to
the pieces that need it and each piece runs the engine on its events in
time order (stable by ``--stream`` order, then file order, then file
position, as the streaming merge; Spark sorts them, spilling to disk, and
the engine reads them as they come: a piece holds its runs, not its
events); (3) results are sorted as the streaming engine emits them (match time, then
the times of their events), and
DISTINCT and CONSTRUCT's graph numbering are applied once, on the driver.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import functools
import itertools
import os
import time as clock
import zlib
import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import pyoxigraph as ox

from ..language.compiler import CompiledQuery, compile_query
from ..runtime.engine import OTHER_KIND, Engine, RunStats, read_start, wrong_start_kind
from ..errors import EventError, SpaseqError, StateLimitError
from ..events import Event, Time
from ..evaluators.spectra import SpectraEvaluator
from ..kb import KnowledgeBase, parse_kb_spec
from ..runtime.results import Result, first_distinct, row_key
from ..runtime.nfa_runtime import Match, StateLimits, distinct_placement, partition_keys
from ..streams.files import (DONE_MEMORY, nquads_spans, order_check, read_manifest, read_ntriples_chunks,
                             read_stream_file, stream_file_paths)
from ..streams.reader import event_text
from .session import spark_session, task_failure

_MATCH_GRAPH = "urn:spaseq:match:"
MIN_PIECE_WINDOWS = 2          # a piece spans at least this many windows (overlap <= 1/2)
TIME_SAMPLE_PER_SOURCE = 20_000   # event times sampled per file (part) to place the cuts
SPLIT_BYTES = 64 << 20         # N-Quads files larger than this are read in parts of this size
EDGE_ITEMS = DONE_MEMORY      # items at each end of a part that a cut may have changed


@dataclass(frozen=True)
class Source:
    """One unit of reading: a stream file, or a manifest's N-Triples file."""
    index: int                     # the merge order of the streaming engine
    stream: str
    path: str
    triples_per_event: int = 0     # > 0: a manifest's N-Triples file
    span: tuple[int, int, int] | None = None    # a part of an N-Quads file (files.nquads_spans)
    part: int = 0                  # which part of its file
    shown: str = ""                # the path as given (``path`` is absolute)

    def shown_position(self, position: str | None) -> str | None:
        """A position read in ``path``, naming the file as the user gave it (as the
        streaming engine does in messages and dead letters)."""
        if position and self.shown and position.startswith(self.path + ":"):
            return self.shown + position[len(self.path):]
        return position


@dataclass(frozen=True)
class PartEdges:
    """The first and last items a part of a file read: what decides whether cutting
    the file there changed nothing (see :func:`clean_cuts`)."""
    path: str
    part: int
    head: tuple
    tail: tuple


@dataclass(frozen=True)
class EventRecord:
    """An event between stages: its triples as N-Triples bytes (cheap to ship)."""
    time: Time
    source: int
    seq: int
    stream: str
    is_datetime: bool
    name: str | None
    position: str | None
    triples: bytes

    def sort_key(self) -> tuple:
        return self.time, self.source, self.seq

    def event(self, parse: bool = True) -> Event:
        """The event; with ``parse`` false, without its triples (for the order rules: cheap)."""
        triples = tuple(ox.parse(self.triples, ox.RdfFormat.N_TRIPLES)) if parse and self.triples else ()
        name = None
        if self.name is not None:
            name = ox.BlankNode(self.name[2:]) if self.name.startswith("_:") else ox.NamedNode(self.name[1:-1])
        return Event(self.stream, self.time, triples, name, self.position, self.is_datetime)


@dataclass(frozen=True)
class Rejected:
    """A rejected event between stages (EventError itself does not survive pickling),
    with all that the dead-letter file writes of it: an event rejected by an order
    rule as its text."""
    position: str | None
    message: str
    reason: str = "invalid"
    graph: str | None = None
    text: str | None = None
    text_length: int | None = None

    @classmethod
    def of(cls, error: EventError) -> "Rejected":
        text, length = error.text, error.text_length
        if text is None and error.event is not None:
            text = event_text(error.event)
            length = len(text)
        return cls(error.position, error.message, error.reason, error.graph, text, length)

    def error(self) -> EventError:
        return EventError(self.message, self.position, reason=self.reason, graph=self.graph, text=self.text,
                          text_length=self.text_length)


@dataclass(frozen=True)
class Cut:
    """How the archive is cut into pieces (see the module docstring)."""
    mode: str                      # "time", "key" or "single"
    pieces: int
    bounds: tuple = ()             # time: the lower bounds lo_1 .. lo_{n-1} (lo_0 = -inf)
    window: Time | None = None     # time: the overlap
    partition_by: tuple = ()
    why: str = ""                  # single: why the input is not cut

    def targets(self, record: EventRecord, keys: Callable[[], list[tuple]]) -> list[int]:
        """The pieces that read this event."""
        if self.mode == "single":
            return [0]
        if self.mode == "key":
            return sorted({key_piece(key, self.pieces) for key in keys()})
        own = bisect.bisect_right(self.bounds, record.time)
        first = own
        if self.window is not None:        # earlier pieces read it as overlap
            while first > 0 and record.time <= self.bounds[first - 1] + self.window:
                first -= 1
        return list(range(first, own + 1))

    def owns(self, piece: int, match: Match) -> bool:
        """Whether ``piece`` reports this match (exactly one piece does)."""
        if self.mode == "single":
            return True
        if self.mode == "key":
            return key_piece(tuple(match.mu.get(v) for v in self.partition_by), self.pieces) == piece
        first = min(e.time for e in match.events)
        return bisect.bisect_right(self.bounds, first) == piece


def key_piece(key: tuple, pieces: int) -> int:
    """The piece of a PARTITION BY key: a hash that every process computes alike."""
    return zlib.crc32("\x1f".join(str(term) for term in key).encode()) % pieces


def plan_cut(compiled: CompiledQuery, times: list[Time], first: Time, last: Time,
             pieces: int, start: Time | None, min_piece_windows: int = MIN_PIECE_WINDOWS) -> Cut:
    """Choose the cut: time ranges when the query has a window, else PARTITION BY keys."""
    nfa = compiled.automaton
    window = nfa.window
    if pieces <= 1:
        return Cut("single", 1, why="one piece asked for")
    if window is None:
        if compiled.query.partition_by:
            return Cut("key", pieces, partition_by=tuple(compiled.query.partition_by))
        return Cut("single", 1, why="the query has neither a window nor PARTITION BY")
    if nfa.tumbling:
        t0 = start if start is not None else first
        windows = int((last - t0) // window) + 1          # a count, also for decimal times
        per_piece = max(1, -(-windows // pieces))
        bounds = tuple(t0 + k * per_piece * window for k in range(1, -(-windows // per_piece)))
        return Cut("time", len(bounds) + 1, bounds)
    ordered = sorted(times)
    bounds: list[Time] = []
    for k in range(1, pieces):
        candidate = ordered[len(ordered) * k // pieces]
        lower = bounds[-1] if bounds else first
        wide = min_piece_windows * window
        if candidate > lower and candidate - lower >= wide and last - candidate >= wide:
            bounds.append(candidate)
    if not bounds:
        return Cut("single", 1, why=f"the input spans less than {2 * max(1, min_piece_windows)} windows")
    return Cut("time", len(bounds) + 1, tuple(bounds), window)


# -- stage 1: reading (one task per source) -------------------------------------------------

def read_source(source: Source) -> Iterator[EventRecord | Rejected | PartEdges]:
    """A source's events as records, with the streaming reader's rejects (and, for a
    part of a file, its edges)."""
    if source.triples_per_event:
        items = read_ntriples_chunks(source.path, source.stream, source.triples_per_event)
    else:
        items = read_stream_file(source.path, source.stream, span=source.span)
    seq = 0
    head: list = []
    tail: collections.deque = collections.deque(maxlen=EDGE_ITEMS)
    for item in items:
        if isinstance(item, EventError):
            record = dataclasses.replace(Rejected.of(item), position=source.shown_position(item.position))
            edge = ("rejected",)
        else:
            payload = ox.serialize(item.triples, format=ox.RdfFormat.N_TRIPLES) if item.triples else b""
            name = None if item.name is None else str(item.name)
            record = EventRecord(item.time, source.index, seq, item.stream, item.is_datetime,
                                 name, source.shown_position(item.position), payload)
            edge = ("event", name, item.time, item.is_datetime)
            seq += 1
        if source.span is not None:
            if len(head) < EDGE_ITEMS:
                head.append(edge)
            tail.append(edge)
        yield record
    if source.span is not None:
        yield PartEdges(source.path, source.part, tuple(head), tuple(tail))


@dataclass
class ReadSummary:
    """What reading one source gave, short: for the cut plan and the summary line."""
    path: str | None = None
    stream: str | None = None
    source: int | None = None                           # Source.index (of the first event read)
    events: int = 0
    triples: int = 0
    first: Time | None = None
    first_is_datetime: bool = False
    last: Time | None = None
    before_start: int = 0                               # events before the first TUMBLING window
    times: list = field(default_factory=list)         # a sample, to place the cuts
    rejections: list = field(default_factory=list)    # Rejected
    edges: list = field(default_factory=list)         # PartEdges of a part of a file


def summarise_read(items: Iterable, tumbling_start: Time | None = None) -> list[ReadSummary]:
    """One source's summary (a reading partition holds one source)."""
    summary = ReadSummary()
    sampler = random.Random(1)
    for item in items:
        if isinstance(item, EventRecord):
            if not summary.events:
                summary.stream, summary.source = item.stream, item.source
            summary.events += 1
            summary.triples += item.triples.count(b"\n")
            if summary.first is None or item.time < summary.first:
                summary.first = item.time
                summary.first_is_datetime = item.is_datetime
            if tumbling_start is not None and item.time < tumbling_start:
                summary.before_start += 1
            if summary.last is None or item.time > summary.last:
                summary.last = item.time
            if len(summary.times) < TIME_SAMPLE_PER_SOURCE:        # reservoir sampling
                summary.times.append(item.time)
            else:
                slot = sampler.randrange(summary.events)
                if slot < TIME_SAMPLE_PER_SOURCE:
                    summary.times[slot] = item.time
            if summary.path is None and item.position:
                summary.path = item.position.rsplit(":", 1)[0]
        elif isinstance(item, Rejected):
            summary.rejections.append(item)
            if summary.path is None and item.position:
                summary.path = item.position.rsplit(":", 1)[0]
        else:
            summary.edges.append(item)
            summary.path = item.path
    return [summary]


def clean_cuts(edges: list[PartEdges]) -> bool:
    """Whether reading a file's parts one by one gives exactly what reading it whole
    gives.  The reader judges an event by what lies near it (files.py: a timestamp
    within NEAR_GRAPHS graphs, a repeated graph within DONE_MEMORY events), so a
    cut changes nothing when, near every cut, no part rejected anything (a split
    event leaves an event without a timestamp on one side), no graph occurs on
    both sides, and the event after it may follow the one before it by the
    order rules (a later time, of the same kind, within the time jump)."""
    parts = sorted(edges, key=lambda e: e.part)
    for before, after in zip(parts, parts[1:]):
        near = before.tail + after.head
        if any(kind == ("rejected",) for kind in near):
            return False
        if {e[1] for e in before.tail} & {e[1] for e in after.head}:
            return False
        if before.tail and after.head and not follows(before.tail[-1][2:], after.head[0][2:]):
            return False
    return True


def follows(before: tuple[Time, bool], after: tuple[Time, bool]) -> bool:
    """Whether an event at ``after`` (time, is_datetime) may come next after one at
    ``before`` on a stream, by the streaming path's order rules (``OrderCheck``)."""
    check = order_check().check
    return all(check(Event("", time, (), is_datetime=kind)) is None for time, kind in (before, after))


def follow_one_another(sources: list[ReadSummary]) -> bool:
    """Whether the sources of one stream, each read with its own order check, need no
    check across them: taken by their first events, each starts after the previous one
    ends, as the order rules allow (all of a source's events are of one kind).  Then
    merging them is laying them end to end, and no boundary rejects anything."""
    ordered = sorted(sources, key=lambda s: (s.first, s.source))
    return all(follows((a.last, a.first_is_datetime), (b.first, b.first_is_datetime))
               for a, b in zip(ordered, ordered[1:]))


def order_stream(records: Iterable[EventRecord], other_kind: frozenset) -> Iterator[EventRecord | Rejected]:
    """One stream's records in the streaming merge's order through the order rules that the
    streaming path applies across a stream's files (``files.open_stream``); a stream whose
    kind of time is not the stream set's then has all its events rejected, as the engine
    rejects them (``Engine._check``)."""
    check = order_check().check
    for record in records:
        error = check(record.event(parse=False))
        if error is None and record.stream in other_kind:
            error = EventError(OTHER_KIND, record.position, reason="kind", graph=record.name)
        if error is None:
            yield record
        else:
            error.event = record.event()        # the whole event, for the dead-letter text
            yield Rejected.of(error)


def archived_sources(compiled: CompiledQuery, streams: list[tuple[str, str]],
                     manifests: list[str], split_bytes: int = SPLIT_BYTES) -> list[Source]:
    """The sources of ``--stream IRI=LOCATION`` pairs (files, globs, folders) and manifests,
    numbered in the streaming engine's merge order; N-Quads files larger than
    ``split_bytes`` are read in parts, in parallel."""
    sources: list[Source] = []
    for iri, location in streams:
        for shown in stream_file_paths(location):
            path = os.path.abspath(shown)       # workers have their own cwd
            if path.lower().endswith(".nq") and os.path.getsize(path) > split_bytes:
                for part, span in enumerate(nquads_spans(path, split_bytes)):
                    sources.append(Source(len(sources), iri, path, span=span, part=part, shown=shown))
            else:
                sources.append(Source(len(sources), iri, path, shown=shown))
    for manifest in manifests:
        entries = read_manifest(manifest)
        if len({stream for stream, _, _ in entries}) != len(entries):
            raise SpaseqError(f"{manifest}: several files feed one stream (renumbered in arrival order); "
                              "--engine spark reads one file per manifest stream")
        for stream, path, count in entries:
            sources.append(Source(len(sources), stream, os.path.abspath(path), count, shown=path))
    return sources


# -- stage 2: evaluation (one task per piece) -----------------------------------------------

# The most results (the pieces' matches, counted before DISTINCT) the driver collects and
# sorts itself, about 3.5 KB each there; more are sorted by Spark and read a partition at
# a time, so that the driver never holds them all (a few jobs more: about 2 s in local
# mode).  Measured: 317,290 results took the driver to 1.2 GB collected, 101 MB read so.
COLLECTED_RESULTS = 20_000


@dataclass
class PieceOutput:
    """What one piece sends back: its owned results (sorted later) and its engine's rejects."""
    results: list[tuple[tuple, tuple]]          # (sort key, pack_result(...))
    rejections: list[Rejected]
    peak_runs: int
    matches: int
    events: int            # events the piece read (its own and its overlap)
    seconds: float         # time in the engine
    peak_keys: int = 0
    dropped_runs: int = 0
    limit: str | None = None     # the LimitError that stopped the piece


def _without_results(output: PieceOutput) -> PieceOutput:
    """What the driver needs of a piece's output before its results: the rest of it."""
    return dataclasses.replace(output, results=[])


def _sort_key(item: tuple[tuple, tuple]) -> tuple:
    return item[0]


class _PieceEngine(Engine):
    """The engine of one piece: keeps only the matches the piece owns, and leaves
    DISTINCT to the driver (a duplicate may first appear in a match another piece owns)."""

    def __init__(self, compiled, kb, cut: Cut, piece: int, start: Time | None, limits: StateLimits | None):
        super().__init__(compiled, kb=kb, start=start, state_limits=limits)
        self.projector.distinct_seen = None
        self.cut, self.piece = cut, piece

    def _on_match(self, match: Match) -> None:
        if self.cut.owns(self.piece, match):
            super()._on_match(match)


# -- results between processes ----------------------------------------------------------
# Unpickling pyoxigraph terms costs about 5 µs each, more than the engine spends on a
# result: results travel as tuples of strings and are rebuilt on the driver.

def pack_term(term) -> tuple:
    if isinstance(term, ox.NamedNode):
        return ("u", term.value)
    if isinstance(term, ox.BlankNode):
        return ("b", term.value)
    if isinstance(term, ox.Literal):
        return ("l", term.value, term.datatype.value, term.language)
    return ("t", pack_term(term.subject), pack_term(term.predicate), pack_term(term.object))


def unpack_term(packed: tuple, iris: dict):
    kind = packed[0]
    if kind == "u":
        node = iris.get(packed[1])
        if node is None:
            if len(iris) > 100_000:
                iris.clear()
            node = iris[packed[1]] = ox.NamedNode(packed[1])
        return node
    if kind == "b":
        return ox.BlankNode(packed[1])
    if kind == "l":
        if packed[3]:
            return ox.Literal(packed[1], language=packed[3])
        return ox.Literal(packed[1], datatype=unpack_term(("u", packed[2]), iris))
    return ox.Triple(*(unpack_term(part, iris) for part in packed[1:]))


def pack_result(result: Result) -> tuple:
    bindings = None if result.bindings is None else \
        tuple((name, pack_term(term)) for name, term in result.bindings.items())
    triples = None if result.triples is None else tuple(pack_term(t) for t in result.triples)
    events = tuple((e.stream, e.time, None if e.name is None else pack_term(e.name), e.position, e.is_datetime)
                   for e in result.events)          # without their triples: outputs show none
    return result.time, result.is_datetime, bindings, triples, events, result.graph is not None


def unpack_result(packed: tuple, iris: dict) -> Result:
    time, is_datetime, bindings, triples, events, has_graph = packed
    return Result(
        time, is_datetime,
        None if bindings is None else {name: unpack_term(term, iris) for name, term in bindings},
        None if triples is None else [unpack_term(t, iris) for t in triples],
        tuple(Event(stream, at, (), None if name is None else unpack_term(name, iris), position, dt)
              for stream, at, name, position, dt in events),
        _PLACEHOLDER_GRAPH if has_graph else None)


_PLACEHOLDER_GRAPH = ox.NamedNode(_MATCH_GRAPH + "0")    # numbered on the driver


_WORKER_CACHE: dict[tuple, object] = {}


def _cached(key: tuple, make: Callable[[], object]):
    """Compiled queries and KBs, made once per Python worker (workers are reused)."""
    value = _WORKER_CACHE.get(key)
    if value is None:
        value = _WORKER_CACHE[key] = make()
    return value


def _worker_kb(kb_specs: tuple) -> KnowledgeBase | None:
    """The KB of ``--kb`` values (with their files' stamps: a changed file is read again)."""
    if not kb_specs:
        return None
    return _cached(("kb", kb_specs), lambda: KnowledgeBase.from_specs([spec for spec, _ in kb_specs]))


def evaluate_piece(piece: int, records: Iterable[EventRecord], query_text: str, kb_specs: tuple,
                   cut: Cut, start: Time | None, limits: StateLimits | None = None) -> PieceOutput:
    """Run one piece on its records, which come in merge order (``EventRecord.sort_key``:
    Spark sorted them, spilling to disk, so that a piece never holds its events in a
    list); each piece has the state limits of the whole query."""
    compiled = _cached(("query", query_text), lambda: compile_query(query_text))
    kb = _worker_kb(kb_specs)
    engine = _PieceEngine(compiled, kb, cut, piece, start, limits)
    rejections = []         # every one (engine.stats keeps only a sample)
    engine.on_reject = lambda error: rejections.append(Rejected.of(error))
    started = clock.perf_counter()
    read = 0

    def events() -> Iterator[Event]:
        nonlocal read
        for record in records:
            read += 1
            yield record.event()
    owned = []
    limit = None
    try:
        for result in engine.run(events()):
            times = tuple(e.time for e in result.events)      # the streaming engine's order (runtime)
            owned.append(((result.time, times, piece, len(owned)), pack_result(result)))
    except StateLimitError as e:
        limit = str(e)
    stats = engine.stats
    return PieceOutput(owned, rejections, stats.peak_runs, stats.matches, read,
                       clock.perf_counter() - started, stats.peak_keys, stats.dropped_runs, limit)


def event_keys(query_text: str, kb_specs: tuple, record: EventRecord) -> list[tuple]:
    """The PARTITION BY keys an event belongs to, each once, as the runtime finds them."""
    compiled = _cached(("query", query_text), lambda: compile_query(query_text))
    evaluator = _cached(("keys", query_text, kb_specs), lambda: SpectraEvaluator(_worker_kb(kb_specs)))
    placement = _cached(("placement", query_text, kb_specs), lambda: distinct_placement(compiled, evaluator))
    event = record.event()
    return partition_keys(compiled.query.partition_by, placement, event,
                          lambda gpm, event: evaluator.evaluate(gpm, event, [{}])[0])


# -- the driver ---------------------------------------------------------------------------

@dataclass
class SparkRunReport:
    """What the stages did, for the summary line."""
    sources: int = 0
    pieces: int = 0
    mode: str = ""
    read_seconds: float = 0.0
    evaluate_seconds: float = 0.0
    replicated: int = 0            # event copies sent to more than one piece


class SparkRun:
    """Evaluates one query over archived sources on Spark; iterate :meth:`results`."""

    def __init__(self, compiled: CompiledQuery, query_text: str, sources: list[Source],
                 kb_specs: list[str], *, master: str | None = None, pieces: int | None = None,
                 start: Time | None = None, on_reject: Callable[[EventError], None] | None = None,
                 progress: Callable[[str], None] | None = None, min_piece_windows: int = MIN_PIECE_WINDOWS,
                 limits: StateLimits | None = None):
        self.compiled = compiled
        self.limits = limits
        self.query_text = query_text
        self.sources = sources
        self.kb_specs = tuple(_stamped(absolute_kb_spec(spec)) for spec in kb_specs)
        self.master = master
        self.requested_pieces = pieces
        self.min_piece_windows = min_piece_windows      # correctness never depends on it: only cost
        self.start = self.start_kind = self.start_text = None
        if start is not None:
            self.start, self.start_kind, self.start_text = read_start(start)
        self.on_reject = on_reject
        self.progress = progress or (lambda text: None)
        self.stats = RunStats()
        self.report = SparkRunReport(sources=len(sources))

    def results(self) -> Iterator[Result]:
        try:
            yield from self._results()
        except SpaseqError:
            raise
        except Exception as e:          # Py4J/PySpark errors of a failed job
            stop = _stop_behind(e)
            if stop is not None:
                raise stop from None
            if type(e).__module__.startswith(("pyspark", "py4j")):
                raise task_failure(e) from None
            raise

    def _results(self) -> Iterator[Result]:
        spark = spark_session(self.master)
        from pyspark import StorageLevel
        context = spark.sparkContext
        pieces = self.requested_pieces or 4 * context.defaultParallelism
        started = clock.perf_counter()
        read = context.parallelize(self.sources, max(1, len(self.sources))).flatMap(read_source)
        read.persist()
        cached = [read]
        try:
            tumbling_start = self.start if self.compiled.automaton.tumbling else None
            summarise = functools.partial(summarise_read, tumbling_start=tumbling_start)
            summaries = read.mapPartitions(summarise).collect()      # one pass: stats and edges
            read, summaries = self._whole_where_cuts_changed(context, read, summaries, summarise)
            if read is not cached[0]:
                read.persist()
                cached.append(read)
            for summary in summaries:
                for rejection in summary.rejections:
                    self._reject(rejection)
            read, summaries, earliest = self._order_rules(read, summaries, summarise, cached)
            count = sum(summary.events for summary in summaries)
            triples = sum(summary.triples for summary in summaries)
            self.report.read_seconds = clock.perf_counter() - started
            self.progress(f"read {count:,} events from {len(self.sources)} file"
                          f"{'s' * (len(self.sources) != 1)} in {self.report.read_seconds:.1f} s")
            if not count:
                return
            first = min(summary.first for summary in summaries if summary.events)
            if tumbling_start is not None and self.start_kind is not None \
                    and earliest.first_is_datetime != self.start_kind:
                raise wrong_start_kind(self.start_text, self.start_kind, earliest.first_is_datetime,
                                       earliest.path or str(earliest.first))
            self.stats.before_start = sum(summary.before_start for summary in summaries)
            last = max(summary.last for summary in summaries if summary.events)
            times = [t for summary in summaries for t in summary.times]
            records = read.filter(lambda item: isinstance(item, EventRecord))
            start = self.start
            if start is None and self.compiled.automaton.tumbling:
                start = first          # the streaming engine's t0: the first event
            cut = plan_cut(self.compiled, times, first, last, pieces, start, self.min_piece_windows)
            self.report.pieces, self.report.mode = cut.pieces, cut.mode
            query_text, kb_specs, limits = self.query_text, self.kb_specs, self.limits
            evaluated = clock.perf_counter()

            def route(record: EventRecord):
                return [(piece, record) for piece in
                        cut.targets(record, lambda: event_keys(query_text, kb_specs, record))]

            def evaluate(piece_records):
                first = next(piece_records, None)
                if first is None:
                    return []
                items = itertools.chain([first], piece_records)
                return [evaluate_piece(first[0][0], (r for _, r in items), query_text, kb_specs, cut, start,
                                       limits)]

            # each piece's events sorted into merge order by Spark (an external sort), not in a list
            routed = records.flatMap(route).map(lambda item: ((item[0],) + item[1].sort_key(), item[1]))
            pieces_out = (routed.repartitionAndSortWithinPartitions(cut.pieces, lambda key: key[0])
                          .mapPartitions(evaluate).persist(StorageLevel.MEMORY_AND_DISK))
            cached.append(pieces_out)
            outputs = pieces_out.map(_without_results).collect()
            self.report.evaluate_seconds = clock.perf_counter() - evaluated
            self._piece_stats(outputs, count, triples, cut)
            results = pieces_out.flatMap(lambda output: output.results)
            if sum(output.matches for output in outputs) <= COLLECTED_RESULTS:
                ordered = sorted(results.collect(), key=_sort_key)
            else:       # (sorted by Spark, spilling to disk, and read a piece of the order at a time)
                ordered = results.sortBy(_sort_key, numPartitions=cut.pieces).toLocalIterator()
            yield from self._final(ordered)
        finally:
            for rdd in cached:
                rdd.unpersist()

    def _piece_stats(self, outputs: list[PieceOutput], count: int, triples: int, cut: Cut) -> None:
        """The pieces' counts and rejections into the run's; a piece stopped by a limit stops it."""
        stopped = next((output.limit for output in outputs if output.limit is not None), None)
        if stopped is not None:
            raise StateLimitError(f"a piece of the Spark run: {stopped}")
        rejected = set()
        for output in outputs:
            self.stats.peak_runs = max(self.stats.peak_runs, output.peak_runs)
            self.stats.peak_keys = max(self.stats.peak_keys, output.peak_keys)
            self.stats.dropped_runs += output.dropped_runs
            self.stats.matches += output.matches
            for rejection in output.rejections:
                if (rejection.position, rejection.message) not in rejected:
                    rejected.add((rejection.position, rejection.message))
                    self._reject(rejection)
        self.stats.events = count - len(rejected)
        self.stats.triples = triples
        busy = [o.seconds for o in outputs]
        read_by_pieces = sum(o.events for o in outputs)
        self.progress(f"evaluated {cut.pieces} piece{'s' * (cut.pieces != 1)} ({_describe_cut(cut)}) "
                      f"in {self.report.evaluate_seconds:.1f} s: engines busy {sum(busy):.1f} s in all, "
                      f"{max(busy, default=0):.1f} s the longest; {read_by_pieces:,} events read "
                      f"({read_by_pieces / max(1, count):.2f}x the input)")

    def _order_rules(self, read, summaries: list[ReadSummary], summarise, cached: list):
        """The order rules across the sources of a stream and the stream set's kind of time,
        applied as the streaming path applies them to its merged input, before the events are
        cut into pieces (a piece sees only some of a stream's events, and a piece by key none
        of an event of no key).  Each source was checked on its own as it was read; a stream
        whose sources follow one another is then checked whole (the common case).  The others,
        and the streams whose kind is not the stream set's (the kind of its earliest event, as
        in the merged input), are sorted into merge order and checked, one task per stream.
        Returns the items, their summaries and the summary holding the earliest event."""
        by_stream: dict[str, list[ReadSummary]] = {}
        for summary in summaries:
            if summary.events:
                by_stream.setdefault(summary.stream, []).append(summary)
        if not by_stream:
            return read, summaries, None
        heads = {stream: min(group, key=lambda s: (s.first, s.source)) for stream, group in by_stream.items()}
        deciding = [head for stream, head in heads.items() if stream in self.compiled.streams] or heads.values()
        earliest = min(deciding, key=lambda s: (s.first, s.source))
        other_kind = frozenset(stream for stream, head in heads.items() if stream in self.compiled.streams
                               and head.first_is_datetime != earliest.first_is_datetime)
        unordered = {stream for stream, group in by_stream.items() if not follow_one_another(group)}
        slot = {stream: n for n, stream in enumerate(sorted(other_kind | unordered))}
        if not slot:
            return read, summaries, earliest
        checked = (read.filter(lambda item: isinstance(item, EventRecord) and item.stream in slot)
                   .keyBy(lambda record: (slot[record.stream],) + record.sort_key())
                   .repartitionAndSortWithinPartitions(len(slot), lambda key: key[0])
                   .values()
                   .mapPartitions(functools.partial(order_stream, other_kind=other_kind)))
        checked.persist()
        cached.append(checked)
        again = checked.mapPartitions(summarise).collect()
        for summary in again:
            for rejection in summary.rejections:
                self._reject(rejection)
        kept = read.filter(lambda item: not (isinstance(item, EventRecord) and item.stream in slot))
        return kept.union(checked), [s for s in summaries if s.stream not in slot] + again, earliest

    def _whole_where_cuts_changed(self, context, read, summaries: list[ReadSummary], summarise):
        """Files read in parts whose cuts may have changed an event are read again whole."""
        by_path: dict[str, list[PartEdges]] = {}
        for summary in summaries:
            for edges in summary.edges:
                by_path.setdefault(edges.path, []).append(edges)
        again = {path for path, edges in by_path.items() if not clean_cuts(edges)}
        if not again:
            return read, summaries
        self.progress(f"{len(again)} file{'s' * (len(again) != 1)} read again whole: events lie "
                      "across the places where they were cut")
        first = {}
        for source in self.sources:
            if source.path in again:
                first.setdefault(source.path, source)
        # the whole file takes its first part's place in the merge order
        whole = context.parallelize([dataclasses.replace(source, span=None, part=0) for source in first.values()],
                                    len(first)).flatMap(read_source)
        kept = read.filter(lambda item: not isinstance(item, PartEdges) and not _from_parts_of(item, again))
        summaries = [s for s in summaries if s.path not in again] + whole.mapPartitions(summarise).collect()
        return kept.union(whole), summaries

    def _final(self, ordered: list[tuple[tuple, tuple]]) -> Iterator[Result]:
        """DISTINCT and CONSTRUCT graph numbers, once over the whole output."""
        seen: set | None = set() if self.compiled.query.distinct else None
        most = (self.limits or StateLimits()).max_distinct or 1 << 62
        number = itertools.count(1)
        iris: dict = {}
        for _, packed in ordered:
            result = unpack_result(packed, iris)
            if seen is not None and result.bindings is not None and \
                    not first_distinct(seen, row_key(result.bindings), most):
                continue
            if result.graph is not None:
                result.graph = ox.NamedNode(f"{_MATCH_GRAPH}{next(number)}")
            self.stats.results += 1
            yield result

    def _reject(self, rejection: Rejected) -> None:
        error = rejection.error()
        self.stats.count_rejection(error)
        if self.on_reject is not None:
            self.on_reject(error)


def _stop_behind(error: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM that an error was raised in the handling of, if any.  PySpark's
    cleanup can fail when a signal interrupts it (``collect``'s socket: ``UnboundLocalError:
    ... 'sockfile'``), and its error then hides the stop: an internal error, exit status 1,
    where the run was stopped (130, 143)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _from_parts_of(item, paths: set[str]) -> bool:
    position = item.position or ""
    return position.rsplit(":", 1)[0] in paths


def absolute_kb_spec(spec: str) -> str:
    """A ``--kb`` value with its local path made absolute: workers have their own cwd."""
    scheme, location, graph = parse_kb_spec(spec)
    if scheme is None:
        return f"<{graph}>={os.path.abspath(location)}" if graph else os.path.abspath(location)
    if scheme in ("oxigraph", "materialized") and location:
        return f"{scheme}:{os.path.abspath(location)}"
    return spec


def _stamped(spec: str) -> tuple[str, tuple]:
    """A ``--kb`` value with the modification stamp of the path it names, if local."""
    path = parse_kb_spec(spec).path
    try:
        stat = os.stat(path)
    except OSError:
        return spec, ()
    return spec, (stat.st_mtime_ns, stat.st_size)


def _describe_cut(cut: Cut) -> str:
    if cut.mode == "time":
        return "time ranges" + (f", overlap {cut.window} s" if cut.window is not None else ", tumbling")
    if cut.mode == "key":
        return "by PARTITION BY key"
    return f"one piece: {cut.why}"
