"""The Python API: compile a query, push events, get results.

>>> from spaseq_plugin import Engine
>>> engine = Engine('''
...   PREFIX : <http://example/>
...   SELECT ?x ?y WITHIN 10 SECONDS
...   FROM STREAM S <http://example.org/s>
...   WHERE { SEQ (A ; B)
...     DEFINE GPM A ON S { ?x :kind "a" }
...     DEFINE GPM B ON S { ?y :kind "b" } }''')
>>> import pyoxigraph as ox
>>> kind = ox.NamedNode("http://example/kind")
>>> def event(name, kind_value, time):
...     return [ox.Triple(ox.NamedNode("http://example/" + name), kind, ox.Literal(kind_value))]
>>> engine.push("http://example.org/s", 1, event("a1", "a", 1))
[]
>>> [(r.time, r.bindings["x"].value, r.bindings["y"].value)
...  for r in engine.push("http://example.org/s", 2, event("b1", "b", 2))]
[(2, 'http://example/a1', 'http://example/b1')]
>>> engine.close()
[]

Results of a timestamp are final once every stream of the query has
delivered that timestamp or a later one (each stream has at most one event
per timestamp), or a later timestamp arrives, or the input went quiet
(:meth:`idle`, a live input's ``IDLE``), or at :meth:`close`: until then
simultaneous events may still complete them.
"""

from __future__ import annotations

import dataclasses
import datetime
import gc
import logging
import math
import numbers
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Callable, Iterable, Iterator

import pyoxigraph as ox

from ..language.compiler import CompiledQuery, compile_query
from ..language.limits import QueryLimits
from ..errors import EventError, PluginError, UsageError
from ..events import IDLE, Event, Time, as_time, start_time
from ..evaluators.protocol import GpmEvaluator
from ..evaluators.spectra import SpectraEvaluator
from ..kb import KnowledgeBase
from ..plugins import call_started, call_stopped
from ..stores import knowledge_base
from .checkpoint import SnapshotReader, SnapshotWriter, decode_time, encode_time, gc_paused
from .results import Collector, Projector, Result, result_id
from .nfa_runtime import Batcher, Match, Runtime, StateLimits

log = logging.getLogger(__name__)


#: How many rejections ``RunStats.rejections`` keeps (the first ones).
REJECTION_SAMPLE = 100


@dataclass
class RunStats:
    """What a run did: shown in the CLI's summary.

    Rejections are counted, in all (``rejected``) and by reason
    (``rejected_by_reason``: ``EventError.reason`` -> count), and the first
    ``REJECTION_SAMPLE`` are kept in ``rejections`` (message and position
    only): memory does not grow with the number of rejected events.
    Callers who want every one pass ``on_reject`` to the engine.
    """
    events: int = 0
    triples: int = 0
    rejected: int = 0
    matches: int = 0
    results: int = 0
    peak_runs: int = 0
    live_keys: int = 0          # PARTITION BY keys holding state now
    peak_keys: int = 0
    dropped_runs: int = 0       # partial matches a state limit dropped (--on-limit drop-*)
    before_start: int = 0       # events before the first TUMBLING window (start)
    rejections: list[EventError] = field(default_factory=list)
    ignored: int = 0                    # events of streams the query does not read
    rejected_by_reason: Counter = field(default_factory=Counter)

    def count_rejection(self, error: EventError) -> None:
        self.rejected += 1
        self.rejected_by_reason[error.reason] += 1
        if len(self.rejections) < REJECTION_SAMPLE:
            self.rejections.append(EventError(error.message, error.position, reason=error.reason,
                                              graph=error.graph))


# Why an event of the other kind of time than the stream set's is rejected (also on Spark).
OTHER_KIND = "timestamp kind differs from the stream set's (numbers vs xsd:dateTime)"


class Engine:
    """One continuous SPASEQ query.

    ``query`` is SPASEQ text or a :class:`CompiledQuery`; ``kb`` the
    background knowledge base for GRAPH clauses: a :class:`KnowledgeBase`, a
    pyoxigraph ``Store``, an rdflib ``Dataset`` or ``Graph``, or ``--kb``
    style specs (a KB opened from specs is closed by :meth:`close`);
    ``on_result`` and ``on_reject`` optional callbacks called with every
    :class:`Result` and every rejected event's :class:`EventError` as they
    happen.  ``limits`` (a :class:`~spaseq_plugin.language.limits.QueryLimits`)
    bound what the query may be and do when it is compiled here:
    ``limits=QueryLimits(allow_service=True)`` lets GPMs use SERVICE
    (docs/limits.md).
    ``start`` is the origin of TUMBLING windows (default: the first
    event's time): a number of seconds, an xsd:dateTime's text or a
    ``datetime`` (``events.start_time``); text or a ``datetime`` must be of
    the stream set's kind of time, else the first event raises
    :class:`UsageError`.
    ``state_limits`` (a :class:`StateLimits`, default: its defaults) caps
    the runs; under the ``fail`` policy a cap reached raises
    :class:`LimitError` from the push that completes the timestamp, after
    every result of earlier timestamps, and the engine stops there.
    """

    def __init__(self, query: str | CompiledQuery, kb: KnowledgeBase | object | None = None,
                 evaluator: GpmEvaluator | None = None,
                 on_result: Callable[[Result], None] | None = None,
                 on_reject: Callable[[EventError], None] | None = None,
                 start: Time | str | datetime.datetime | None = None, limits: QueryLimits | None = None,
                 state_limits: StateLimits | None = None):
        self.compiled = compile_query(query, limits) if isinstance(query, str) else query
        self.kb, self._own_kb = knowledge_base(kb) if kb is not None else (None, False)
        self.evaluator = evaluator or SpectraEvaluator(self.kb)
        self.projector = Projector(self.compiled, (state_limits or StateLimits()).max_distinct)
        self._stats = RunStats()
        self.on_result = on_result
        self.on_reject = on_reject
        self._collector = Collector(self.projector)
        self._start_kind = self._start_text = None
        if start is not None:
            start, kind, self._start_text = read_start(start)
            if self.compiled.automaton.tumbling:        # (else the start is not used)
                self._start_kind = kind
        self.runtime = Runtime(self.compiled, self.evaluator, self._on_match, start, state_limits)
        self._keyed = bool(self.compiled.partition_by)       # stats count live keys
        self._closed = self._stop_called = False
        call_started(self)
        self._batcher = Batcher(self.runtime, self._collector, self.compiled.streams)
        self._ignored_streams: set[str] = set()
        self._result_ids: str | None = None
        self._route_matches()

    @property
    def current_time(self) -> Time | None:
        """The timestamp being processed (``None`` before the first event)."""
        return self._batcher.time

    @property
    def is_datetime(self) -> bool:
        """Whether the input's timestamps are xsd:dateTime (else numbers)."""
        return bool(self._batcher.kind)

    @property
    def warnings(self) -> list[str]:
        return query_warnings(self.compiled, self.kb)

    # -- input -----------------------------------------------------------

    def push(self, stream: str, time: Time, triples: Iterable[ox.Triple] | object,
             *, is_datetime: bool = False) -> list[Result]:
        """Push one event: a stream IRI, a timestamp (seconds), its triples.

        ``triples`` may be pyoxigraph Triples or an rdflib Graph.  Returns
        the results that became final.  Raises ValueError naming the argument
        that is not what it should be.
        """
        return self.push_event(Event(_stream_argument(stream), _time_argument(time),
                                     _as_triples(triples), is_datetime=bool(is_datetime)))

    def push_event(self, event: Event) -> list[Result]:
        """Push one :class:`Event`; a bad one is rejected (counted, kept in stats)."""
        # The common case (what _check lets through, tested at once) is the batcher's,
        # compiled: on a selective query this layer was a sixth of the time per event.
        results = self._batcher.push(event)
        return self._push_checked(event) if results is None else results

    def _push_checked(self, event: Event) -> list[Result]:
        if isinstance(event.time, float):
            event = dataclasses.replace(event, time=as_time(event.time))
        problem = self._check(event)
        if problem is not None:
            message, reason = problem
            self.reject(EventError(message, event.position, reason=reason, event=event,
                                   graph=None if event.name is None else str(event.name)))
            return self._batcher.drain()
        if event.stream not in self.compiled.streams:
            self._ignore(event.stream)
            return self._batcher.drain()
        self._batcher.accept(event)
        return self._batcher.drain()

    def idle(self) -> list[Result]:
        """The input went quiet: close the pending timestamp now, as if every
        stream had moved past it.  An event of that timestamp arriving later
        is rejected (``late``)."""
        self._batcher.idle()
        return self._batcher.drain()

    def reject(self, error: EventError) -> None:
        self._stats.count_rejection(error)
        if self.on_reject is not None:
            self.on_reject(error)

    def close(self) -> list[Result]:
        """End of input: finish the last timestamp and return the results that
        became final; then the plugins' ``spaseq_query_stopped``.

        A plugin failing there costs no result: the engine is closed (the KB it
        opened too), and the :class:`~spaseq_plugin.errors.PluginError` naming the
        plugin is raised with those results as its ``results``::

            try:
                final = engine.close()
            except PluginError as error:
                final = error.results       # and report the error

        (:meth:`run` yields every result before it raises; ``on_result`` has had
        them.)  Closing again returns ``[]`` and calls no hook."""
        results = self._finish()
        try:
            self._stopped()
        except PluginError as error:
            error.results = results
            raise
        return results

    def _finish(self) -> list[Result]:
        self._batcher.finish()
        results = self._batcher.drain()
        if not self._closed:
            self._closed = True
            if self._own_kb:
                self.kb.close()
        return results

    def _stopped(self) -> None:
        # Once, after the drain (engine.stats final) and the KB closed: a plugin failing
        # here costs neither.
        if not self._stop_called:
            self._stop_called = True
            call_stopped(self)

    def run(self, items: Iterable[Event | EventError]) -> Iterator[Result]:
        """Evaluate over a whole time-ordered input, yielding results as they come."""
        push = self._batcher.push       # (push_event's two steps, without its call per event)
        for item in items:
            if isinstance(item, Event):
                results = push(item)
                if results is None:
                    results = self._push_checked(item)
                if results:
                    yield from results
            elif item is IDLE:
                yield from self.idle()
            else:
                self.reject(item)
        yield from self._finish()
        self._stopped()

    # -- checkpoints -------------------------------------------------------

    @property
    def can_snapshot(self) -> bool:
        """Whether every result so far has been returned (none is held back): a
        snapshot is taken only then, so that a restored engine owes no result."""
        return not self._collector.out

    def snapshot(self) -> dict:
        """Everything the engine holds, as plain JSON-ready data (the format is
        described in ``runtime/checkpoint.py``): the runtime's state, the events
        of the timestamp being read, each stream's last time, DISTINCT's memory
        and the statistics.  Take it between two pushes, once the results
        returned so far are delivered (:attr:`can_snapshot`); :meth:`restore`
        it into an engine of the same query."""
        if not self.can_snapshot:
            raise RuntimeError("results are held back: snapshot after the next push")
        with gc_paused():
            return self._snapshot()

    def _snapshot(self) -> dict:
        out = SnapshotWriter()
        s = self.stats
        stats = {name: getattr(s, name) for name in ("events", "triples", "rejected", "matches", "results",
                                                     "peak_runs", "live_keys", "peak_keys", "dropped_runs",
                                                     "ignored")}
        stats["rejected_by_reason"] = dict(s.rejected_by_reason)
        stats["rejections"] = [[e.message, e.position, e.reason, e.graph] for e in s.rejections]
        b = self._batcher
        state = {
            "runtime": self.runtime.snapshot(out),
            "projector": self.projector.snapshot(out),
            "batch": [out.event(e) for e in b.batch],
            "time": None if b.time is None else encode_time(b.time),
            "last_per_stream": {k: encode_time(v) for k, v in b.last_per_stream.items()},
            "kind": b.kind, "ignored_streams": sorted(self._ignored_streams),
            "idle_closed": None if b.idle_closed is None else encode_time(b.idle_closed),
            "hold": b.hold, "stats": stats}
        return {"engine": state, "tables": out.tables()}

    def restore(self, snapshot: dict) -> None:
        """Become the engine :meth:`snapshot` saved (a new engine of the same query,
        before any push).  Raises ``ValueError`` on a snapshot that does not fit."""
        if self._batcher.events or self._batcher.time is not None:
            raise RuntimeError("restore into a new engine, before any push")
        with gc_paused():
            self._restore(snapshot)

    def _restore(self, snapshot: dict) -> None:
        try:
            inp = SnapshotReader(snapshot["tables"])
            state = snapshot["engine"]
            self.runtime.restore(state["runtime"], inp)
            self.projector.restore(state["projector"], inp)
            b = self._batcher
            b.batch = [inp.event(e) for e in state["batch"]]
            b.time = None if state["time"] is None else decode_time(state["time"])
            b.last_per_stream = {k: decode_time(v) for k, v in state["last_per_stream"].items()}
            b.kind = state["kind"]
            self._ignored_streams = set(state["ignored_streams"])
            b.idle_closed = None if state["idle_closed"] is None else decode_time(state["idle_closed"])
            b.hold = state["hold"]
            stats = dict(state["stats"])
            reasons = stats.pop("rejected_by_reason")
            rejections = stats.pop("rejections")
            self._stats = RunStats(**stats, rejected_by_reason=Counter(reasons))
            self._stats.rejections = [EventError(message, position, reason=reason, graph=graph)
                                      for message, position, reason, graph in rejections]
            self._collector.matches, self._collector.results = self._stats.matches, self._stats.results
            b.events, b.triples = self._stats.events, self._stats.triples
        except (KeyError, IndexError, TypeError, AttributeError) as error:
            raise ValueError(f"the snapshot does not fit this query ({type(error).__name__}: {error})") from None

    # -- internals ---------------------------------------------------------

    def _ignore(self, stream: str) -> None:
        """An event of a stream the query does not read: counted, and said once per stream."""
        self._stats.ignored += 1
        if stream not in self._ignored_streams:
            self._ignored_streams.add(stream)
            known = ", ".join(f"<{iri}>" for iri in sorted(self.compiled.streams))
            log.warning("events of stream <%s> are ignored: the query reads %s", stream, known)

    def _check(self, event: Event) -> tuple[str, str] | None:
        """Why ``event`` cannot come next: (message, reason), or None."""
        b = self._batcher
        if b.kind is not None and event.is_datetime != b.kind and event.stream in self.compiled.streams:
            return OTHER_KIND, "kind"
        last = b.last_per_stream.get(event.stream)
        if last is not None:
            if event.time == last:
                return (f"duplicate event: stream <{event.stream}> already has an event at {event.time}",
                        "duplicate")
            if event.time < last:
                return (f"out of order: stream <{event.stream}> is already at {last}, this event is at "
                        f"{event.time}", "out-of-order")
        if b.time is not None and event.time < b.time:
            return (f"out of order: the stream set is already at {b.time}, this event is at {event.time}",
                    "out-of-order")
        if b.idle_closed is not None and event.time <= b.idle_closed:
            return (f"late: timestamp {event.time} was closed when the input went quiet (--idle-flush)",
                    "late")
        if event.stream in self.compiled.streams:
            if b.kind is None and self._start_kind is not None and event.is_datetime != self._start_kind:
                raise wrong_start_kind(self._start_text, self._start_kind, event.is_datetime,
                                       event.position or str(event.time))
            b.kind = event.is_datetime
        return None

    @property
    def stats(self) -> RunStats:
        """The run's figures so far (the runtime's are read when they are asked for)."""
        if self.runtime is not None:
            self._read_runtime_stats()
        return self._stats

    def _read_runtime_stats(self) -> None:
        runtime, stats = self.runtime, self._stats
        stats.events = self._batcher.events
        stats.triples = self._batcher.triples
        stats.matches = self._collector.matches
        stats.results = self._collector.results
        stats.peak_runs = runtime.peak_runs
        stats.dropped_runs = runtime.dropped_runs
        stats.before_start = runtime.before_start
        if self._keyed:
            stats.live_keys = runtime.live_keys
            stats.peak_keys = runtime.peak_keys

    def drop_state(self) -> None:
        """Let the run's state go (out of memory: so that the outputs can still be
        closed whole and the stop reported); :attr:`stats` keeps the figures so far."""
        self._read_runtime_stats()
        self.runtime = self._batcher.runtime = None

    @property
    def result_ids(self) -> str | None:
        """With checkpoints, the query's hash: each result then gets its ``id`` (``result_id``)."""
        return self._result_ids

    @result_ids.setter
    def result_ids(self, query_hash: str | None) -> None:
        self._result_ids = query_hash
        self._route_matches()

    def _route_matches(self) -> None:
        """Matches go straight to the collector unless a result needs more (an id, the
        callback) or a subclass looks at each match (``_on_match``)."""
        plain = self._result_ids is None and self.on_result is None and type(self)._on_match is Engine._on_match
        self.runtime.emit = self._collector.add if plain else self._on_match

    def _on_match(self, match: Match) -> None:
        result = self._collector.project(match)
        if result is None:
            return
        if self._result_ids is not None:
            result.id = result_id(self._result_ids, result)
        if self.on_result is not None:
            self.on_result(result)
        self._collector.out.append(result)


YOUNG_COLLECTION_THRESHOLD = 100_000    # allocations between young-generation collections (CPython: 700)


def prepare_collector() -> None:
    """Set CPython's cycle collector up for a long run: call it after the set-up, just
    before the loop (``spaseq run`` and the bench do).  The set-up's garbage is
    collected (about 10 ms), and what is alive then (modules, the compiled query, the
    KB's caches), which lives as long as the run, is frozen: full collections no longer
    traverse it.  The young generation is collected every YOUNG_COLLECTION_THRESHOLD
    allocations instead of 700: the engine makes many short-lived containers, most
    freed by reference counting before a collection would look at them, and a piece
    the reader parses (a few thousand events, built with the collector paused) counts
    as that many allocations at once: at 10,000, each piece set off collections that
    traversed the events it had just read.  Measured on the peers' stock stream
    through ``spaseq run`` and the bench: docs/bench.md."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *gc.get_threshold()[1:])


def query_warnings(compiled: CompiledQuery, kb: KnowledgeBase | None) -> list[str]:
    """What a user should know before a query runs: the compiler's warnings and GRAPH
    clauses the KB cannot answer."""
    out = list(compiled.warnings)
    if kb is not None:
        missing = kb.missing_graphs(compiled.kb_graphs)
        names = sorted(kb.graph_names()) if missing else []
        shown = ", ".join(f"<{g}>" for g in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        for iri in missing:
            out.append(f"the KB has no graph <{iri}>, so GRAPH <{iri}> matches nothing "
                       f"({'its named graphs: ' + shown if names else 'it has no named graph'}); "
                       f"to load a Turtle or N-Triples file into that graph: --kb '<{iri}>=FILE' "
                       f"(KnowledgeBase.from_specs(['<{iri}>=FILE']) in Python)")
    elif compiled.kb_graphs:
        out.append("GRAPH clauses are used but no KB is given: they match nothing")
    return out


# Timestamps beyond this many seconds either way are refused: exact arithmetic on
# them (Decimal to int) takes time that grows with their size.
MAX_TIME = 10 ** 18


def _stream_argument(stream) -> str:
    if isinstance(stream, ox.NamedNode):
        return stream.value
    if not isinstance(stream, str) or not stream:
        raise ValueError(f"stream must be the stream's IRI (a non-empty str), not {_shown(stream)}")
    return stream


def _time_argument(time) -> Time:
    if isinstance(time, bool) or not isinstance(time, (numbers.Real, Decimal)):
        raise ValueError(f"time must be a number of seconds (int, float or Decimal), not {_shown(time)}")
    if isinstance(time, Decimal) and not time.is_finite() or \
            not isinstance(time, (numbers.Integral, Decimal)) and not math.isfinite(time):
        raise ValueError(f"time must be a finite number of seconds, not {time}")
    if abs(time) > MAX_TIME:
        raise ValueError(f"time must be within 10^18 seconds of 0, not {_shown(time)}")
    if isinstance(time, numbers.Integral):
        return int(time)
    return as_time(time if isinstance(time, Decimal) else float(time))


_KINDS = {False: "a number of seconds", True: "an xsd:dateTime"}


def read_start(start) -> tuple[Time, bool | None, str]:
    """``start=`` as both engines take it (``events.start_time``): (time, kind, the start as
    messages show it); ``UsageError`` when it cannot be one."""
    shown = start if isinstance(start, str) else _shown(start)
    try:
        time, kind = start_time(start)
    except ValueError as error:
        # (an error about text quotes it; one about a value names its type or value)
        raise UsageError(f"start: {error}") from None
    return time, kind, shown


def wrong_start_kind(start: str, start_is_datetime: bool, first_is_datetime: bool, where: str) -> UsageError:
    """The error of a start time (``start=``, ``--start``) not of the stream set's kind: a
    dateTime start over numbers would be after every event, and silently drop them all."""
    return UsageError(f"start {start} is {_KINDS[start_is_datetime]}, but the first event of the stream set "
                      f"(at {where}) is timed by {_KINDS[first_is_datetime]}: give the start as the stream's "
                      "timestamps are written")


def _shown(value) -> str:
    text = repr(value)
    text = text[:40] + "..." if len(text) > 40 else text
    return text if text.startswith(type(value).__name__) else f"{type(value).__name__} {text}"


def _as_triples(data) -> tuple[ox.Triple, ...]:
    if hasattr(data, "triples") and hasattr(data, "namespace_manager"):   # an rdflib Graph
        from ..rdflib_terms import rdflib_to_ox
        try:
            return tuple(ox.Triple(rdflib_to_ox(s), rdflib_to_ox(p), rdflib_to_ox(o))
                         for s, p, o in data)
        except (ValueError, TypeError) as e:
            raise ValueError(f"triples: the rdflib Graph holds what is not an RDF triple: {e}") from None
    if isinstance(data, (str, bytes)) or not isinstance(data, Iterable):
        raise ValueError(f"triples must be pyoxigraph Triples or an rdflib Graph, not {_shown(data)}")
    triples = tuple(data)
    for n, triple in enumerate(triples):
        if not isinstance(triple, ox.Triple):
            raise ValueError(f"triples: item {n} is a {_shown(triple)}, not a pyoxigraph Triple")
    return triples
