"""A GPM evaluator written the way a plain rdflib user would: the baseline.

For every event, the event's triples go into an rdflib ``Graph`` (or into
the default graph of an rdflib ``Dataset`` that also holds the knowledge
base's named graphs, when the GPM has ``GRAPH`` clauses), and the GPM runs
as ``graph.query("SELECT * WHERE { VALUES (...) { ... } body }")``: the
runs' mappings are injected as rows of a VALUES block with a row-number
column, exactly as :class:`~spaseq_plugin.evaluators.oxigraph.OxigraphEvaluator`
does, so one query per (GPM, event) serves every waiting run.

It exists to be measured against (``spaseq bench``) and to cross-check the
other evaluators: it must give the same solutions as ``OxigraphEvaluator``.
Three details keep it so:

* Literals are built with ``normalize=False`` (rdflib's own normalisation
  would turn ``"038.0"^^xsd:double`` into ``"38.0"`` for data but not for
  the same literal in query text, so joins would break), after being put
  in the canonical form Oxigraph stores them in (``"038.0"^^xsd:double`` is
  ``"38"`` there): Oxigraph identifies typed literals by value, and its
  results carry the canonical form.  Solutions are canonicalised the same
  way on the way out.
* Blank nodes of the event are replaced by skolem IRIs, as in the oxigraph
  evaluator (SPARQL VALUES cannot hold blank nodes), and turned back on
  the way out.
* ``GRAPH ?g`` ranges over the KB's named graphs only, never over the event.

The query text is parsed by rdflib on every call: no caching of prepared
queries, on purpose (this is the naive baseline).
"""

from __future__ import annotations

import warnings
from typing import Mapping, Sequence

import pyoxigraph as ox
from rdflib import Dataset, Graph

from ..events import Event
from ..language.gpm import GpmPattern
from .oxigraph import ROW, injected_columns, injected_query, skolem, unskolem
from .protocol import gather, gather_shared
from ..kb import KnowledgeBase
from ..rdflib_terms import ox_to_rdflib, rdflib_to_ox
from .sparql_values import canonical

__all__ = ["RdflibEvaluator", "ox_to_rdflib"]


Term = ox.NamedNode | ox.BlankNode | ox.Literal
Solution = dict[str, Term]


class RdflibEvaluator:
    """Evaluates any GPM with rdflib's SPARQL engine (see the module docstring)."""

    batches_mappings = True      # one query answers many runs' mappings: the runtime prefetches

    def __init__(self, kb: KnowledgeBase | None = None):
        self._kb = kb
        self._dataset: Dataset | None = None      # built on first use by a GRAPH GPM
        self._event: Event | None = None
        self._graph: Graph | None = None          # the event alone
        self._dataset_event: Event | None = None  # the event the dataset's default graph holds
        self._most: int | None = None             # limit_solutions

    # -- the event graph -------------------------------------------------

    def _triples(self, event: Event):
        for t in event.triples:
            yield (ox_to_rdflib(skolem(t.subject)), ox_to_rdflib(t.predicate),
                   ox_to_rdflib(canonical(skolem(t.object))))

    def _event_graph(self, event: Event) -> Graph:
        if self._event is not event:
            graph = Graph()
            for triple in self._triples(event):
                graph.add(triple)
            self._graph, self._event = graph, event
        return self._graph

    def _event_dataset(self, event: Event) -> Dataset:
        if self._dataset is None:
            self._dataset = Dataset()
            if self._kb is not None:
                for quad in self._kb.quads():       # the named graphs: GPMs see no KB default graph
                    if isinstance(quad.graph_name, ox.DefaultGraph):
                        continue
                    graph = self._dataset.graph(ox_to_rdflib(quad.graph_name))
                    graph.add((ox_to_rdflib(quad.subject), ox_to_rdflib(quad.predicate),
                               ox_to_rdflib(canonical(quad.object))))
        if self._dataset_event is not event:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                default = self._dataset.default_context
            default.remove((None, None, None))
            for triple in self._triples(event):
                default.add(triple)
            self._dataset_event = event
        return self._dataset

    # -- evaluation --------------------------------------------------------

    def limit_solutions(self, most: int | None) -> None:
        """At most ``most`` solutions per mapping (see the protocol).  rdflib holds a
        query's whole result before it hands out the first row: this bounds what the
        runtime gets, not what rdflib makes."""
        self._most = most

    def evaluate(self, gpm: GpmPattern, event: Event,
                 mappings: Sequence[Mapping[str, Term]]) -> list[list[Solution]]:
        if gpm.uses_kb:
            # rdflib 7 warns about its own use of Dataset.default_context on every query
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                return self._evaluate(self._event_dataset(event), gpm, mappings)
        return self._evaluate(self._event_graph(event), gpm, mappings)

    def _evaluate(self, target, gpm: GpmPattern, mappings: Sequence[Mapping[str, Term]]) -> list[list[Solution]]:
        columns = injected_columns(gpm, mappings)
        text = injected_query(gpm, columns, mappings)
        if not columns:
            return gather_shared((self._solution(row.asdict(), gpm) for row in target.query(text)),
                                 len(mappings), self._most)
        return gather(((int(str(values[ROW])), self._solution(values, gpm))
                       for values in (row.asdict() for row in target.query(text))), len(mappings), self._most)

    def _solution(self, values: dict, gpm: GpmPattern) -> Solution:
        out: Solution = {}
        for var in gpm.mentioned:
            value = values.get(var)
            if value is not None:
                out[var] = unskolem(canonical(rdflib_to_ox(value)))
        return out
