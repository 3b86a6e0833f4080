"""Everything SPARQL means, asked of pyoxigraph one query at a time.

* A GPM on an event under a mapping μ (semantics.md section 2): the query
  ``SELECT * WHERE { VALUES (μ's variables) { (μ's terms) } body }`` over a
  dataset whose default graph is the event's graph and whose named graphs
  are the KB's.  SPARQL cannot write a blank node in VALUES: when μ holds
  one, the query runs on a copy of the dataset, the event and the KB, whose
  blank nodes are IRIs ``urn:spaseq:reference:bnode:LABEL``, with μ written
  the same way, and the answers are turned back (docs/semantics.md, open
  point 12): a KB blank node that an earlier GPM bound joins the KB again.
* What a body can bind: the variables ``SELECT *`` projects (SPARQL's
  in-scope variables).
* An aggregate over a list of terms: ``SELECT (AGG(?v) AS ?r) WHERE { VALUES
  ?v { the terms, in order } }``.
* A CONSTRUCT template under μ: ``CONSTRUCT { template } WHERE { VALUES μ }``
  (fresh blank nodes, unbound and invalid triples left out, a set of triples).
"""

from __future__ import annotations

import itertools
from typing import Iterable

import pyoxigraph as ox

from ..events import Event

_SKOLEM = "urn:spaseq:reference:bnode:"


def _skolem(term):
    if isinstance(term, ox.Triple):
        return ox.Triple(_skolem(term.subject), term.predicate, _skolem(term.object))
    return ox.NamedNode(_SKOLEM + term.value) if isinstance(term, ox.BlankNode) else term


def _unskolem(term):
    if isinstance(term, ox.Triple):
        return ox.Triple(_unskolem(term.subject), term.predicate, _unskolem(term.object))
    if isinstance(term, ox.NamedNode) and term.value.startswith(_SKOLEM):
        return ox.BlankNode(term.value[len(_SKOLEM):])
    return term


def _values_term(term) -> str:
    """A term as VALUES holds it: a blank node as an IRI, a triple term in ``<<( )>>``
    (``str()`` leaves them out)."""
    term = _skolem(term)
    return f"<<( {term} )>>" if isinstance(term, ox.Triple) else str(term)


def values_clause(mu: dict) -> str:
    """``VALUES (?a ?b) { (ta tb) }`` for a mapping (blank nodes as skolem IRIs); '' if empty."""
    if not mu:
        return ""
    names = sorted(mu)
    return (f"VALUES ({' '.join('?' + n for n in names)}) "
            f"{{ ({' '.join(_values_term(mu[n]) for n in names)}) }}")


class Sparql:
    """One dataset: the KB's named graphs, and each event loaded on demand."""

    def __init__(self, kb_quads: Iterable[ox.Quad] = ()):
        self.store = ox.Store()
        self.store.extend(q for q in kb_quads if q.graph_name != ox.DefaultGraph())
        self.kb_graphs = sorted({q.graph_name for q in self.store}, key=str)
        self.skolem_store = ox.Store()          # the same, blank nodes as skolem IRIs
        self.skolem_store.extend(ox.Quad(_skolem(q.subject), q.predicate, _skolem(q.object), q.graph_name)
                                 for q in self.store)
        self._graphs: dict[tuple[int, bool], ox.NamedNode] = {}
        self._events: list[Event] = []         # keeps the events whose id() names a graph alive
        self._answers: dict = {}
        self._ids = itertools.count()

    def _graph(self, event: Event, skolemised: bool) -> ox.NamedNode:
        key = (id(event), skolemised)
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._graphs[key] = ox.NamedNode(f"urn:spaseq:reference:event:{next(self._ids)}")
            self._events.append(event)
            convert = _skolem if skolemised else (lambda t: t)
            store = self.skolem_store if skolemised else self.store
            store.extend(ox.Quad(convert(t.subject), t.predicate, convert(t.object), graph) for t in event.triples)
        return graph

    def solutions(self, prologue: str, body: str, event: Event, mu: dict) -> list[dict]:
        """The solutions of ``body`` on ``event`` under ``mu`` (each a dict with μ's part too)."""
        key = (body, id(event), frozenset(mu.items()))
        found = self._answers.get(key)
        if found is None:
            skolemised = any(_skolem(t) != t for t in mu.values())     # (a blank node, maybe in a triple term)
            text = f"{prologue}\nSELECT * WHERE {{ {values_clause(mu)}\n{body}\n}}"
            store = self.skolem_store if skolemised else self.store
            rows = store.query(text, default_graph=self._graph(event, skolemised), named_graphs=self.kb_graphs)
            names = [v.value for v in rows.variables]
            found = []
            for row in rows:
                found.append({n: _unskolem(row[n]) for n in names if row[n] is not None})
            self._answers[key] = found
        return found


def bindable(prologue: str, body: str) -> set[str]:
    """The variables ``body`` can bind: what ``SELECT *`` projects.  Raises SyntaxError."""
    rows = ox.Store().query(f"{prologue}\nSELECT * WHERE {{ {body}\n}}")
    return {v.value for v in rows.variables}


def check_template(prologue: str, template: str) -> None:
    """Raises SyntaxError when the CONSTRUCT template is not SPARQL."""
    ox.Store().query(f"{prologue}\nCONSTRUCT {{ {template}\n}} WHERE {{}}")


def aggregate(function: str, values: list, distinct: bool, separator: str | None):
    """SPARQL's ``function([DISTINCT] ?v)`` over ``values``, one row each, in their order
    (SPARQL leaves SAMPLE, and MIN/MAX among equal values written differently, to the
    implementation: pyoxigraph chooses, from the values in iteration order)."""
    argument = ("DISTINCT " if distinct else "") + "?v"
    if separator is not None:
        escaped = separator.replace("\\", "\\\\").replace('"', '\\"')
        argument += f'; SEPARATOR="{escaped}"'
    rows = " ".join(f"({_values_term(v)})" for v in values)
    text = f"SELECT ({function}({argument}) AS ?r) WHERE {{ VALUES (?v) {{ {rows} }} }}"
    for row in ox.Store().query(text):
        return None if row["r"] is None else _unskolem(row["r"])
    return None


def construct(prologue: str, template: str, mu: dict) -> list[ox.Triple]:
    """The template instantiated with ``mu``: a set of triples, fresh blank nodes."""
    text = f"{prologue}\nCONSTRUCT {{ {template}\n}} WHERE {{ {values_clause(mu)} }}"
    out = []
    for triple in ox.Store().query(text):
        out.append(ox.Triple(_unskolem(triple.subject), triple.predicate, _unskolem(triple.object)))
    return out
