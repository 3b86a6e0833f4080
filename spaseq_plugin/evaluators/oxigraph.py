"""The general GPM evaluator: SPARQL over the event graph, by pyoxigraph.

semantics.md section 2: GPM ``P`` is evaluated on an event for a run with
mapping μ as the SPARQL query ``SELECT * WHERE { VALUES μ  P }``.  Runs
waiting on the same GPM are evaluated together: their mappings become rows
of one VALUES block with a row-number column, which is the union of the
one-row queries (a join distributes over the union of its left rows), so an
event costs one query per GPM, not one per run.

The event is loaded once into a reserved named graph of a working store
that also holds the KB's named graphs; queries take the event graph as
their default graph and the KB graphs as their named graphs, so ``GRAPH``
clauses join the KB inside the same SPARQL evaluation.

SPARQL VALUES cannot hold blank nodes.  When a run's bindings hold one
(a blank node an earlier event bound, or the KB), the query runs on a second
copy of the event graph whose blank nodes are skolem IRIs, with the bindings
skolemised the same way, and answers are turned back into blank nodes.  The
KB graphs the GPM reads are skolemised too, in a store of their own, when they
hold blank nodes: a KB blank node that an earlier GPM bound joins the KB
again.  In that case only, ``isBlank`` in the GPM sees an IRI for them.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Mapping, Sequence

import pyoxigraph as ox

from ..errors import LimitError, SpaseqError
from ..events import Event
from ..language.gpm import GpmPattern
from ..waits import NoAnswer, within
from ..kb import KnowledgeBase
from .protocol import Solution, Term, gather, gather_shared, term_text

EVENT_GRAPH = ox.NamedNode("urn:spaseq:event")
SKOLEM_GRAPH = ox.NamedNode("urn:spaseq:event:skolem")
_SKOLEM = "urn:spaseq:bnode:"
ROW = "__spaseq_row"
_UNASKED = object()


class OxigraphEvaluator:
    """Evaluates any GPM with pyoxigraph (see the module docstring)."""

    batches_mappings = True      # one query answers many runs' mappings: the runtime prefetches

    def __init__(self, kb: KnowledgeBase | None = None):
        self._kb = kb
        shared = kb.working_store() if kb is not None else None
        self._store = shared if shared is not None else ox.Store()
        # A KB that cannot take the event graph (on disk, rdflib, remote) is copied, one
        # named graph at a time, when a GPM first names it.
        self._copied: set[str] | None = None if shared is not None else set()
        from ..plugins import raise_function_failure, sparql_functions
        self._functions = sparql_functions() or None
        self._function_failure = raise_function_failure
        self._named_graphs = [ox.NamedNode(g) for g in kb.graph_names()] if shared is not None else []
        self._event: Event | None = None           # the event in _event_store
        self._event_store = ox.Store()
        self._filled: set = set()
        self._kb_event: Event | None = None        # the event in the KB's store
        self._kb_filled: set = set()
        self._blank_graphs: dict[str, bool] = {}   # KB graph -> whether it holds a blank node
        self._skolem_kb: ox.Store | None = None     # KB graphs, skolemised (see _skolem_store)
        self._skolem_copied: set[str] = set()
        self._skolem_graphs: dict[GpmPattern, list[str] | None] = {}   # see _skolem_store
        self._skolem_event: Event | None = None     # the event in _skolem_kb
        self._most: int | None = None               # limit_solutions

    def _load(self, event: Event, skolemised: bool, with_kb: bool) -> tuple[ox.Store, ox.NamedNode]:
        """The store and graph to query the event in.

        GPMs without GRAPH clauses get a fresh store per event: an in-memory
        store keeps what is deleted from it, so clearing one graph per event
        gets slower as the stream goes on.  GPMs that join the KB share the
        KB's store, the event graph replaced in it.
        """
        graph = SKOLEM_GRAPH if skolemised else EVENT_GRAPH
        if not with_kb:
            if self._event is not event:
                self._event_store = ox.Store()
                self._event = event
                self._filled = set()
            store = self._event_store
        else:
            if self._kb_event is not event:
                self._store.clear_graph(EVENT_GRAPH)
                self._store.clear_graph(SKOLEM_GRAPH)
                self._kb_event = event
                self._kb_filled = set()
            store = self._store
        filled = self._kb_filled if with_kb else self._filled
        if graph not in filled:
            store.extend(_skolem_quad(t, graph) if skolemised else ox.Quad(t.subject, t.predicate, t.object, graph)
                         for t in event.triples)
            filled.add(graph)
        return store, graph

    def _skolem_store(self, gpm: GpmPattern, event: Event) -> ox.Store | None:
        """The store to query ``event`` in, skolemised, for ``gpm`` (which joins the KB)
        under bindings holding a blank node: a copy of the KB graphs it reads whose blank
        nodes are skolem IRIs, as the bindings' are, made one graph at a time when first
        needed.  None when those graphs hold no blank node: the KB's store serves."""
        if self._kb is None:
            return None
        names = self._skolem_graphs.get(gpm, _UNASKED)
        if names is _UNASKED:       # (once per GPM: its graphs, or None when none holds a blank node)
            names = self._kb.graph_names() if gpm.kb_graph_var else sorted(gpm.kb_graphs)
            names = self._skolem_graphs[gpm] = names if any(self._holds_blank_nodes(g) for g in names) else None
        if names is None:
            return None
        if self._skolem_kb is None:
            self._skolem_kb = ox.Store()
        store = self._skolem_kb
        for name in names:
            if name not in self._skolem_copied:
                store.bulk_extend(_skolem_quad(q, q.graph_name) for q in self._kb.quads(name))
                self._skolem_copied.add(name)
        if self._skolem_event is not event:
            store.clear_graph(SKOLEM_GRAPH)
            store.extend(_skolem_quad(t, SKOLEM_GRAPH) for t in event.triples)
            self._skolem_event = event
        return store

    def _holds_blank_nodes(self, graph: str) -> bool:
        """Whether the KB graph holds a blank node (or a triple term), asked once."""
        found = self._blank_graphs.get(graph)
        if found is None:
            rows = self._kb.select(f"SELECT ?s WHERE {{ GRAPH <{graph}> {{ ?s ?p ?o "
                                   "FILTER(!isIRI(?s) || (!isIRI(?o) && !isLiteral(?o))) } } LIMIT 1")
            found = self._blank_graphs[graph] = any(True for _ in rows)
        return found

    def _copy_graphs(self, gpm: GpmPattern) -> None:
        if self._copied is None or self._kb is None or not gpm.uses_kb:
            return
        if gpm.kb_graph_var:          # GRAPH ?g: the whole KB, in one go
            names = self._kb.graph_names()
            if set(names) - self._copied:
                self._store.bulk_extend(q for q in self._kb.quads() if q.graph_name.value not in self._copied)
                self._copied.update(names)
                self._named_graphs = [ox.NamedNode(g) for g in sorted(self._copied)]
            return
        for graph in sorted(set(gpm.kb_graphs) - self._copied):
            self._store.bulk_extend(self._kb.quads(graph))
            self._copied.add(graph)
            self._named_graphs.append(ox.NamedNode(graph))

    def limit_solutions(self, most: int | None) -> None:
        """At most ``most`` solutions per mapping (see the protocol)."""
        self._most = most

    def evaluate(self, gpm: GpmPattern, event: Event,
                 mappings: Sequence[Mapping[str, Term]]) -> list[list[Solution]]:
        self._copy_graphs(gpm)
        columns = injected_columns(gpm, mappings)
        if not columns:
            # No injected bindings: one evaluation serves every mapping.
            store, graph = self._load(event, False, gpm.uses_kb)
            solutions = gather_shared((_solution(s, gpm) for s in self._run(
                store, injected_query(gpm, [], mappings), graph, gpm)), len(mappings), self._most)
        else:
            blank = [any(holds_blank_node(m.get(c)) for c in columns) for m in mappings]
            if any(blank) and not all(blank):
                # (a skolemised query sees IRIs for the event's and the KB's blank nodes:
                # only the mappings holding one are asked so, as one at a time would be)
                answers = (iter(self.evaluate(gpm, event, [m for m, b in zip(mappings, blank) if not b])),
                           iter(self.evaluate(gpm, event, [m for m, b in zip(mappings, blank) if b])))
                return [next(answers[b]) for b in blank]
            skolemised = blank[0]
            store = self._skolem_store(gpm, event) if skolemised and gpm.uses_kb else None
            if store is None:
                store, graph = self._load(event, skolemised, gpm.uses_kb)
            else:
                graph = SKOLEM_GRAPH
            solutions = gather(((int(s[ROW].value), _solution(s, gpm)) for s in self._run(
                store, injected_query(gpm, columns, mappings), graph, gpm)), len(mappings), self._most)
        if self._functions is not None:
            self._function_failure()        # (a plugin's FILTER function raised in the query)
        return solutions

    def _run(self, store: ox.Store, text: str, graph: ox.NamedNode, gpm: GpmPattern):
        def run():
            return store.query(text, default_graph=graph, named_graphs=self._named_graphs,
                               custom_functions=self._functions)
        if gpm.service_timeout is None:
            return run()
        return _with_deadline(run, gpm)


class _Row(dict):
    """A solution read off pyoxigraph's: unbound variables are None, as there."""

    def __missing__(self, key):
        return None


def _with_deadline(run, gpm: GpmPattern) -> list[_Row]:
    """The solutions of ``run()`` (a query of a GPM with SERVICE), or an error once
    ``gpm.service_timeout`` seconds have passed: pyoxigraph's SERVICE requests
    have no time limit of their own (pyoxigraph releases the GIL while it waits)."""
    def rows() -> list[_Row]:       # (pyoxigraph's results must be dropped in the thread that made them)
        solutions = run()
        names = [v.value for v in solutions.variables]
        return [_Row((n, s[n]) for n in names) for s in solutions]

    try:
        return within(gpm.service_timeout, rows, f"spaseq SERVICE of GPM {gpm.name}")
    except NoAnswer:
        raise LimitError(f"GPM {gpm.name}: SERVICE did not answer within {gpm.service_timeout:g} s "
                         "(--service-timeout)") from None
    except (OSError, RuntimeError) as error:        # no answer, an HTTP error, a bad reply
        raise SpaseqError(f"GPM {gpm.name}: SERVICE failed: {error}") from None


def injected_columns(gpm: GpmPattern, mappings: Sequence[Mapping[str, Term]]) -> list[str]:
    """The variables of ``gpm`` that some mapping binds: the VALUES columns."""
    return sorted({v for m in mappings for v in m if v in gpm.mentioned})


def injected_query(gpm: GpmPattern, columns: list[str], mappings: Sequence[Mapping[str, Term]]) -> str:
    """``SELECT * WHERE { VALUES (?row columns...) { one row per mapping }  body }``.

    Blank nodes in the mappings are written as skolem IRIs (VALUES cannot hold them).
    """
    template = _template(gpm, tuple(columns))
    if not columns:
        return template
    rows = " ".join("(" + str(i) + " " + " ".join(_sparql(m.get(c)) for c in columns) + ")"
                    for i, m in enumerate(mappings))
    return template.replace("%ROWS%", rows, 1)


@lru_cache(maxsize=4096)
def _template(gpm: GpmPattern, columns: tuple[str, ...]) -> str:
    values = f"VALUES (?{ROW} {' '.join('?' + c for c in columns)}) {{ %ROWS% }}\n" if columns else ""
    return f"{gpm.prologue}\nSELECT * WHERE {{ {values}{gpm.body}\n}}"


def holds_blank_node(term) -> bool:
    """Whether ``term`` is a blank node or a triple term with one inside."""
    if type(term) is ox.Triple:
        return holds_blank_node(term.subject) or holds_blank_node(term.object)
    return type(term) is ox.BlankNode


def _skolem_quad(triple, graph) -> ox.Quad:
    """``triple`` (or a quad's triple) in ``graph``, its blank nodes as skolem IRIs."""
    return ox.Quad(skolem(triple.subject), triple.predicate, skolem(triple.object), graph)


def skolem(term):
    if isinstance(term, ox.BlankNode):
        return ox.NamedNode(_SKOLEM + term.value)
    if isinstance(term, ox.Triple):         # (a triple term's subject or object may be one)
        return ox.Triple(skolem(term.subject), term.predicate, skolem(term.object))
    return term


def unskolem(term):
    if isinstance(term, ox.NamedNode) and term.value.startswith(_SKOLEM):
        return ox.BlankNode(term.value[len(_SKOLEM):])
    if isinstance(term, ox.Triple):
        return ox.Triple(unskolem(term.subject), term.predicate, unskolem(term.object))
    return term


def _sparql(term: Term | None) -> str:
    if term is None:
        return "UNDEF"
    return term_text(skolem(term))


def _solution(solution: ox.QuerySolution, gpm: GpmPattern) -> Solution:
    out: Solution = {}
    for var in gpm.mentioned:
        value = solution[var]
        if value is not None:
            out[var] = unskolem(value)
    return out
