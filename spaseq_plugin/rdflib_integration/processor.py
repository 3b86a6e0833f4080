"""SPASEQ as an rdflib query processor: ``dataset.query(text, processor="spaseq")``.

The processor is registered under the ``rdf.plugins.queryprocessor``
entry-point group (see ``pyproject.toml``), so rdflib finds it by name once
this package is installed.  It evaluates a SPASEQ query over an rdflib
``Dataset`` whose named graphs are timestamped events and returns an
ordinary rdflib query ``Result``.  ``docs/rdflib.md`` is the user's guide.

Events in a Dataset
-------------------
* A named graph is an **event** when the default graph gives it a timestamp:
  ``<g> prov:generatedAtTime τ`` (a number of seconds or an ``xsd:dateTime``,
  as in stream files; semantics.md section 1).
* Its **stream** is the object of ``<g> spaseq:stream <stream IRI>`` in the
  default graph (``spaseq:`` is ``urn:spaseq:``, :data:`SPASEQ_STREAM`).  A
  graph naming several streams is an event of each.  A graph naming none
  belongs to the query's stream when the query reads exactly one stream;
  with several streams it is rejected.  Events of streams the query does not
  read are ignored.
* Named graphs **without a timestamp** are not events.  When no ``kb=`` is
  given they are the background knowledge base that ``GRAPH`` clauses read,
  so one Dataset can hold both; with ``kb=`` they are ignored.  (An untimed
  graph that names a stream is a rejected event.)
* Other default-graph triples are metadata.

Bad events (unreadable or conflicting timestamps, a duplicate ``(stream, τ)``,
a graph naming no stream in a multi-stream query, mixed number and dateTime
timestamps) are rejected as the command line rejects them: the rest of the
query goes on, each rejection is issued as a :class:`SpaseqWarning` and kept
in ``result.bindings.rejections``.  ``strict=True`` raises the first one
(an :class:`~spaseq_plugin.errors.EventError`) instead.

Results
-------
SELECT gives a ``SELECT`` Result whose rows are the matches, in match-time
order.  ``result.bindings`` is a :class:`MatchRows` list: besides the rows it
has ``match_times`` (aligned with the rows: ``int``/``Decimal`` seconds, or
``datetime`` in UTC for ``xsd:dateTime`` input), ``results`` (the engine's
:class:`~spaseq_plugin.runtime.results.Result` objects, with the events of each
match), ``rejections`` and ``warnings``.  ``time_var="time"`` also projects
the match time as an extra first variable, so that serialisations show it.

CONSTRUCT gives a ``CONSTRUCT`` Result whose ``graph`` is a Dataset in the
stream format: each match is a named graph ``urn:spaseq:match:N`` with its
``prov:generatedAtTime`` in the default graph, so the output is itself a
stream another query can read.
"""

from __future__ import annotations

import datetime as _dt
import re
import warnings as _warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyoxigraph as ox
from rdflib import Dataset, Graph, URIRef, Variable
from rdflib.query import Processor

from ..language.compiler import CompiledQuery, compile_query
from ..language.parser import is_prefix_name, is_variable_name
from ..runtime.engine import Engine
from ..errors import EventError, QueryError, SpaseqError
from ..events import Event, Time, format_time, parse_timestamp, time_literal
from ..rdflib_terms import ox_to_rdflib
from ..kb import KnowledgeBase
from ..rdflib_terms import rdflib_to_ox
from ..runtime.results import ConstructedEvents, Result
from ..stores import as_knowledge_base, knowledge_base
from ..stores.rdflib_store import to_ox

__all__ = [
    "MatchRows", "PROV_GENERATED_AT_TIME", "SPASEQ_NS", "SPASEQ_STREAM", "SpaseqProcessor",
    "SpaseqWarning", "as_knowledge_base", "dataset_events", "spaseq_query",
]

PROV_GENERATED_AT_TIME = URIRef("http://www.w3.org/ns/prov#generatedAtTime")
#: The namespace of this package's small vocabulary (``PREFIX spaseq: <urn:spaseq:>``).
SPASEQ_NS = "urn:spaseq:"
#: ``<graph> spaseq:stream <stream IRI>`` in the default graph: the event's stream.
SPASEQ_STREAM = URIRef(SPASEQ_NS + "stream")

_KNOWN_OPTIONS = ("kb", "time_var", "strict", "start")


class SpaseqWarning(UserWarning):
    """A query warning or a rejected event, reported while a query runs."""


class MatchRows(list):
    """The rows of a SPASEQ SELECT (dicts ``Variable -> term``), plus per-row facts.

    rdflib keeps this list as ``result.bindings``; the rows serialise as any
    SPARQL result.  ``match_times[i]`` is the match time of row ``i``;
    ``results[i]`` the engine result it came from (``.events`` tells why it
    matched).
    """

    def __init__(self, rows: Iterable[dict] = (), match_times: Iterable = (),
                 results: Iterable[Result] = ()):
        super().__init__(rows)
        self.match_times: list = list(match_times)
        self.results: list[Result] = list(results)
        self.rejections: list[EventError] = []
        self.warnings: list[str] = []
        self.is_datetime: bool = False


class SpaseqProcessor(Processor):
    """rdflib query processor ``"spaseq"``.

    ``graph.query(text, processor="spaseq", **options)`` calls :meth:`query`
    with rdflib's ``initBindings`` and ``initNs`` and the options: ``kb``
    (the knowledge base: any rdflib Graph or Dataset, a pyoxigraph Store, a
    :class:`~spaseq_plugin.kb.KnowledgeBase`, or ``--kb`` style specs),
    ``time_var`` (name of an extra variable holding the match time),
    ``strict`` (raise on the first rejected event) and ``start`` (the
    origin of TUMBLING windows: seconds, an xsd:dateTime text or a
    ``datetime``; see ``Engine``).
    """

    def __init__(self, graph: Graph):
        super().__init__(graph)
        self.graph = graph

    def query(self, strOrQuery, initBindings: Mapping | None = None,  # noqa: N803 (rdflib's names)
              initNs: Mapping[str, Any] | None = None, base: str | None = None,
              DEBUG: bool = False, **options) -> Mapping[str, Any]:  # noqa: N803
        unknown = sorted(set(options) - set(_KNOWN_OPTIONS))
        if unknown:
            raise TypeError(f"processor='spaseq' got unexpected option(s) {', '.join(unknown)}; "
                            f"it takes {', '.join(_KNOWN_OPTIONS)}")
        if initBindings:
            raise ValueError(
                "processor='spaseq' does not take initBindings: a SPASEQ query has no single "
                "solution to pre-bind; put the values in a GPM (VALUES or FILTER) instead")
        if not isinstance(strOrQuery, str):
            raise TypeError("processor='spaseq' takes SPASEQ query text, not a prepared "
                            f"{type(strOrQuery).__name__}")
        compiled = _compile(strOrQuery, initNs or {}, base)
        time_var = options.get("time_var")
        if time_var is not None:
            _check_time_var(compiled, time_var)
        return evaluate(self.graph, compiled, kb=options.get("kb"), time_var=time_var,
                        strict=bool(options.get("strict", False)), start=options.get("start"))


def spaseq_query(graph: Graph, query: str, **options):
    """``graph.query(query, processor="spaseq", use_store_provided=False, **options)``.

    The same as the plain call, except that a store with its own query
    method (Oxigraph through oxrdflib) is bypassed, which that store needs.
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"spaseq_query queries an rdflib Dataset, not {type(graph).__name__}")
    return graph.query(query, processor="spaseq", use_store_provided=False, **options)


# --------------------------------------------------------------------------
# Query text
# --------------------------------------------------------------------------

def _compile(text: str, init_ns: Mapping[str, Any], base: str | None) -> CompiledQuery:
    """Compile ``text`` with rdflib's initNs (and base) as an extra first prologue line.

    Only the prefixes the text uses are added; the query's own PREFIX lines
    come later and win.  Error positions are given in the user's text.
    """
    decls = [f"BASE <{base}>"] if base else []
    for prefix, iri in init_ns.items():
        if not is_prefix_name(str(prefix)):
            continue                      # not a SPARQL prefix name: the text cannot use it
        if re.search(r"(?<![\w.\-:])" + re.escape(str(prefix)) + ":", text):
            decls.append(f"PREFIX {prefix}: <{iri}>")
    if not decls:
        return compile_query(text)
    try:
        compiled = compile_query(" ".join(decls) + "\n" + text)
    except QueryError as e:
        if e.line is None:
            raise
        if e.line == 1:
            raise QueryError(f"in the prefixes from initNs/base ({' '.join(decls)}): {e.message}") \
                from None
        raise QueryError(e.message, e.line - 1, e.column) from None
    compiled.warnings[:] = [_shift_line(w) for w in compiled.warnings]
    return compiled


def _shift_line(message: str) -> str:
    return re.sub(r"^line (\d+)", lambda m: f"line {int(m.group(1)) - 1}", message)


def _check_time_var(compiled: CompiledQuery, name: str) -> None:
    if compiled.template is not None:
        raise ValueError("time_var applies to SELECT queries; CONSTRUCT output already "
                         "timestamps each match graph with prov:generatedAtTime")
    if not isinstance(name, str):
        raise ValueError(f"time_var is a variable name, not {type(name).__name__} {name!r}")
    name = name.lstrip("?$")
    if not is_variable_name(name):
        raise ValueError(f"time_var {name!r} is not a variable name")
    if name in _projected_names(compiled):
        raise ValueError(f"time_var ?{name} is already projected by the query; choose another name")


def _projected_names(compiled: CompiledQuery) -> list[str]:
    return [item if isinstance(item, str) else item.alias for item in compiled.projection]


# --------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------

def evaluate(graph: Graph, compiled: CompiledQuery, *, kb=None, time_var: str | None = None,
             strict: bool = False, start: Time | None = None) -> dict[str, Any]:
    """Run ``compiled`` over the events of ``graph``; rdflib's result mapping."""
    rows = MatchRows()
    rejections: list[EventError] = []

    def reject(error: EventError) -> None:
        if strict:
            raise error
        rejections.append(error)

    events, untimed = _dataset_events(graph, compiled.stream_iris, reject)
    own_kb = None
    if kb is None:
        if untimed and any(g.uses_kb for g in compiled.gpms.values()):
            kb = own_kb = _kb_from_graphs(untimed)
    else:
        kb, owned = knowledge_base(kb)
        own_kb = kb if owned else None
    try:
        engine = Engine(compiled, kb=kb, on_reject=reject, start=start)
        for message in engine.warnings:
            rows.warnings.append(message)
            _warnings.warn(message, SpaseqWarning, stacklevel=4)
        results = list(engine.run(events))
    finally:
        if own_kb is not None:
            own_kb.close()
    rows.rejections = rejections
    for error in rejections:
        _warnings.warn(f"rejected event: {error}", SpaseqWarning, stacklevel=4)
    rows.is_datetime = engine.is_datetime
    if compiled.template is not None:
        return {"type_": "CONSTRUCT", "graph": _construct_dataset(results, compiled.query.prefixes)}
    names = _projected_names(compiled)
    if time_var is not None:
        time_var = time_var.lstrip("?$")
        names = [time_var] + names
    for result in results:
        row = {Variable(k): ox_to_rdflib(v) for k, v in (result.bindings or {}).items()}
        if time_var is not None:
            row = {Variable(time_var): ox_to_rdflib(time_literal(result.time, result.is_datetime)),
                   **row}
        rows.append(row)
        rows.match_times.append(_python_time(result.time, result.is_datetime))
        rows.results.append(result)
    return {"type_": "SELECT", "vars_": [Variable(n) for n in names], "bindings": rows}


def _python_time(time: Time, is_datetime: bool):
    if not is_datetime:
        return time
    return _dt.datetime.fromisoformat(format_time(time, True).replace("Z", "+00:00"))


def _construct_dataset(results: list[Result], prefixes: Mapping[str, str]) -> Dataset:
    out = Dataset()
    out.bind("prov", "http://www.w3.org/ns/prov#")
    for prefix, iri in prefixes.items():
        out.bind(prefix, iri, override=True, replace=True)
    default = _default_graph(out)
    for result in _one_per_time(results):
        name = ox_to_rdflib(result.graph)
        default.add((name, PROV_GENERATED_AT_TIME,
                     ox_to_rdflib(time_literal(result.time, result.is_datetime))))
        event_graph = out.graph(name)
        for t in result.triples or ():
            event_graph.add((ox_to_rdflib(t.subject), ox_to_rdflib(t.predicate),
                             ox_to_rdflib(t.object)))
    return out


def _one_per_time(results: list[Result]) -> list[Result]:
    """CONSTRUCT results as one graph event per match time (``merge_constructed``)."""
    events = ConstructedEvents()
    out = [event for result in results if (event := events.add(result)) is not None]
    if (event := events.flush()) is not None:
        out.append(event)
    return out


# --------------------------------------------------------------------------
# Events from a Dataset
# --------------------------------------------------------------------------

def dataset_events(dataset: Graph, streams: Mapping[str, str] | Iterable[str],
                   on_reject=None) -> list[Event]:
    """The events of ``dataset`` for the given streams, in time order.

    ``streams`` are the stream IRIs a query reads (or its ``alias -> IRI``
    mapping); see the module docstring for how a graph is assigned to a
    stream.  Rejected graphs are passed to ``on_reject`` (an
    :class:`EventError`); by default they raise.
    """
    def raise_(error):
        raise error
    return _dataset_events(dataset, streams, on_reject or raise_)[0]


def _dataset_events(dataset: Graph, streams, reject) -> tuple[list[Event], list[Graph]]:
    iris = sorted(set(streams.values() if isinstance(streams, Mapping) else streams))
    graphs = _named_graphs(dataset)
    default = _default_graph(dataset)
    events: list[Event] = []
    untimed: list[Graph] = []
    for g in graphs:
        name = g.identifier
        where = f"graph {name.n3()}"
        named_streams = sorted({str(s) for s in default.objects(name, SPASEQ_STREAM)})
        stamps = set(default.objects(name, PROV_GENERATED_AT_TIME))
        if not stamps:
            if named_streams:
                reject(EventError(f"no timestamp: the default graph has no "
                                  f"{name.n3()} prov:generatedAtTime τ", where))
            else:
                untimed.append(g)
            continue
        try:
            times = {parse_timestamp(rdflib_to_ox(s)) for s in stamps}
        except ValueError as e:
            reject(EventError(f"unreadable timestamp: {e}", where))
            continue
        if len(times) > 1:
            reject(EventError("two different timestamps: "
                              + ", ".join(sorted(s.n3() for s in stamps)), where))
            continue
        time, is_dt = times.pop()
        if not named_streams:
            if len(iris) != 1:
                reject(EventError(
                    f"the graph names no stream and the query reads {len(iris)}: add "
                    f"{name.n3()} <{SPASEQ_STREAM}> <stream IRI> to the default graph", where))
                continue
            named_streams = iris
        targets = [s for s in named_streams if s in iris]
        if not targets:
            continue
        try:
            triples = tuple(ox.Triple(to_ox(s), to_ox(p), to_ox(o)) for s, p, o in g)
        except (SpaseqError, ValueError) as e:
            reject(EventError(f"cannot read the graph: {e}", where))
            continue
        ox_name = to_ox(name)
        for stream in targets:
            events.append(Event(stream, time, triples, name=ox_name, position=where,
                                is_datetime=is_dt))
    events.sort(key=lambda e: (e.time, e.stream, str(e.name)))
    return events, untimed


def _named_graphs(dataset: Graph) -> list[Graph]:
    if not hasattr(dataset, "contexts"):
        raise TypeError(
            "processor='spaseq' queries an rdflib Dataset whose named graphs are the events "
            f"(with prov:generatedAtTime in the default graph); this is a {type(dataset).__name__}, "
            "which has no named graphs")
    default_id = _default_graph(dataset).identifier
    graphs = dataset.graphs() if isinstance(dataset, Dataset) else dataset.contexts()
    return [g for g in graphs if g.identifier != default_id]


def _default_graph(dataset: Graph) -> Graph:
    graph = getattr(dataset, "default_graph", None)      # rdflib >= 7.5
    if isinstance(graph, Graph):
        return graph
    return dataset.default_context


# --------------------------------------------------------------------------
# Knowledge bases
# --------------------------------------------------------------------------

def _kb_from_graphs(graphs: list[Graph]) -> KnowledgeBase:
    """An in-memory Oxigraph KB holding copies of rdflib named graphs."""
    from ..stores.oxigraph import OxigraphKB
    store = ox.Store()
    store.extend(_quads(graphs))
    kb = OxigraphKB(store)
    kb.description = "the untimed named graphs of the queried Dataset (copied into Oxigraph)"
    return kb


def _quads(graphs: list[Graph]) -> Iterator[ox.Quad]:
    for g in graphs:
        if isinstance(g.identifier, URIRef):
            name = ox.NamedNode(str(g.identifier))
            for s, p, o in g:
                yield ox.Quad(to_ox(s), to_ox(p), to_ox(o), name)
