"""A brute-force reference evaluator for SPASEQ: the oracle the tests hold the
engine, the fast GPM path and the Spark path to.

It is a literal reading of ``shared/spec/semantics.md`` and of the points
``docs/semantics.md`` settles, and it shares no code with the engine: it
reads the query text itself (``text.py``), derives the compile-time checks,
each GPM's variables, partition membership and the optional branches itself
(``analysis.py``), finds matches by backtracking over timestamps
(``matching.py``, whose docstring lists the rules), and asks pyoxigraph one
SPARQL query per GPM, event and injected mapping (``sparql.py``).  It uses
only the event type (``events.py``) and the error types of the package;
``tests/test_reference.py`` checks that it imports nothing else.  It is
exponential and meant for small inputs.

Projection (semantics.md section 9 and section 4):

* ``SELECT ?v``: μ(v) when bound.  ``SELECT *``: every variable some GPM
  can bind.  A Kleene variable shows its last iteration (μ holds it).
* An aggregate over ``?v``, when ``?v`` is first bound inside a Kleene atom
  of the match (not bound before it): over the iterations that bind it, of
  every such atom;
  otherwise over μ(v) alone, or nothing.  ``COUNT(*)`` counts the match's
  events (open point 9).  Aggregates are SPARQL's (pyoxigraph computes them).
* ``DISTINCT``: a result whose projected bindings an earlier result (by
  match time, then its events' times) had is dropped.
* ``CONSTRUCT``: the template under μ, a set of triples with fresh blank
  nodes, at the match time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import pyoxigraph as ox

from ..events import Event, Time
from . import sparql
from .analysis import Analysed, analyse
from .matching import Match, Matcher
from .text import Aggregate, parse

__all__ = ["Row", "Reference", "reference_evaluate", "reference_matches", "compile_reference"]


@dataclass(eq=False)
class Row:
    """One result: ``bindings`` (SELECT) or ``triples`` (CONSTRUCT), at ``time``."""
    time: Time
    bindings: dict | None
    triples: list[ox.Triple] | None
    events: list[Event]

    @property
    def is_datetime(self) -> bool:
        return bool(self.events) and self.events[0].is_datetime


def compile_reference(text: str) -> Analysed:
    """The query read and checked the reference's way; raises ``QueryError``."""
    return analyse(parse(text))


class Reference:
    """One query; ``kb``: pyoxigraph quads (or anything with ``quads()`` giving them)."""

    def __init__(self, query: str | Analysed, kb=None, start: Time | None = None):
        self.analysed = compile_reference(query) if isinstance(query, str) else query
        quads: Iterable[ox.Quad] = () if kb is None else (kb.quads() if hasattr(kb, "quads") else kb)
        self.sparql = sparql.Sparql(quads)
        self.start = start

    def matches(self, events: list[Event]) -> list[Match]:
        return Matcher(self.analysed, self.sparql, self.start).matches(events)

    def results(self, events: list[Event]) -> list[Row]:
        q = self.analysed.query
        prologue = q.prologue()
        out, seen = [], set()
        for match in self.matches(events):
            if q.template is not None:
                out.append(Row(match.time, None, sparql.construct(prologue, q.template, match.mu),
                               match.events))
                continue
            bindings = {}
            for item in (self.analysed.star if q.select is None else q.select):
                if isinstance(item, Aggregate):
                    value = _aggregate(item, match)
                    if value is not None:
                        bindings[item.alias] = value
                elif item in match.mu:
                    bindings[item] = match.mu[item]
            if q.distinct:
                key = frozenset(bindings.items())
                if key in seen:
                    continue
                seen.add(key)
            out.append(Row(match.time, bindings, None, match.events))
        return out


def _aggregate(agg: Aggregate, match: Match):
    if agg.var is None:
        values = [ox.Literal(str(n)) for n in range(len(match.events))]
    else:
        values = [s[agg.var] for kleene in match.kleene if agg.var not in kleene.before
                  for s in kleene.solutions if agg.var in s]
        if not values and agg.var in match.mu:
            values = [match.mu[agg.var]]
    return sparql.aggregate(agg.function, values, agg.distinct, agg.separator)


def reference_evaluate(query: str | Analysed, events: list[Event], kb=None,
                       start: Time | None = None) -> list[Row]:
    """All results of ``query`` (SPASEQ text) over ``events``."""
    return Reference(query, kb, start).results(events)


def reference_matches(query: str | Analysed, events: list[Event], kb=None,
                      start: Time | None = None) -> list[Match]:
    """The matches before projection, by match time."""
    return Reference(query, kb, start).matches(events)
