"""The matches of a query over a finite, time-ordered list of events, found by
backtracking over timestamps (exponential: small inputs only).

Each rule below is a sentence of semantics.md (§) or of the open points of
docs/semantics.md (OP), read literally:

* Events of other streams are dropped; with TUMBLING, so are events before
  ``start``; t0 is ``start`` or the first event's τ (§7).
* PARTITION BY: an event is in sub-stream k when some positive GPM, on that
  event alone, with its unjudgeable top-level FILTER conjuncts left out,
  binds the partition variables to k (§8, OP 8).  Each sub-stream is
  matched on its own, and a match of sub-stream k is one whose atom
  solutions bind the partition variables to k.
* T: the sub-stream's distinct timestamps.  An atom *matches at τ under μ*
  (§2, §5, OP 1): a plain atom, once per event at τ on one of its GPM's
  streams and per solution of the GPM on it under μ; a disjunction, the set
  union of its operands' (solution, event) pairs; a conjunction, every
  choice of one event at τ and one solution per operand, all compatible
  (§5), each operand evaluated under μ and the bindings its FILTERs read
  from the operands before it (OP 2).
* After the previous atom at τ_p, the next one is found (§3): ``,`` at the
  first timestamp of T after τ_p only; ``;`` at the first τ > τ_p where it
  matches, in every way it matches there; ``:`` at every τ > τ_p.  The first
  atom may match at every τ.
* ``B+`` (§4): iteration 1 is linked to the previous atom by the operator
  before ``B+``; iteration n+1 to iteration n by the operator written just
  before ``B+`` (the one after it when ``B+`` opens SEQ; ``;`` when it is
  alone, OP 3); every iteration is evaluated under μ as it was before
  ``B+``; after every iteration the match goes on, with μ before ``B+`` and
  the last iteration's solution.
* A negation between two positive atoms (§6): no event of the sub-stream
  strictly between the previous atom's τ and the next atom's (first
  iteration's, OP 4) τ gives a solution of the negated GPM under μ
  including the next atom's solution.  Optional atoms are taken or skipped
  (``analysis.py``); a skipped one is such a negation unless it leads.
* Trailing negations (§6, OP 7): none of them matches, under the match's
  μ, an event in (τ_last, τ_first + ω] (TUMBLING: (τ_last, end of the
  window)); the match time is that end.  The input ending before it does
  not matter.
* WITHIN ω (§7): τ_last − τ_first ≤ ω; TUMBLING: all events of the match in
  one window [t0 + iω, t0 + (i+1)ω).  Arithmetic is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

from ..events import Event, Time
from .analysis import Analysed, Branch, GpmInfo
from .sparql import Sparql
from .text import KLEENE


@dataclass
class Iterations:
    """One Kleene atom of a match: μ before it, and each iteration's solution."""
    before: dict
    solutions: list[dict]


@dataclass
class Match:
    time: Time
    mu: dict
    events: list[Event]
    kleene: list[Iterations] = field(default_factory=list)


@dataclass
class _SubStream:
    key: tuple
    events: list[Event]
    times: list[Time]
    at: dict


def exact(value) -> Fraction:
    return value if isinstance(value, Fraction) else Fraction(value)


def as_time(value: Fraction) -> Time:
    if value.denominator == 1:
        return int(value)
    return (Decimal(value.numerator) / Decimal(value.denominator)).normalize()


class Matcher:
    def __init__(self, analysed: Analysed, sparql_: Sparql, start: Time | None):
        self.a = analysed
        self.q = analysed.query
        self.sparql = sparql_
        self.prologue = self.q.prologue()
        self.start = start
        self.t0: Fraction | None = None

    def solutions(self, gpm: GpmInfo, event: Event, mu: dict, placement: bool = False) -> list[dict]:
        if event.stream not in gpm.streams:
            return []
        restricted = {v: t for v, t in mu.items() if v in gpm.mentioned}
        body = gpm.placement_body if placement else gpm.body
        return self.sparql.solutions(self.prologue, body, event, restricted)

    # -- the input ----------------------------------------------------------------

    def matches(self, events: list[Event]) -> list[Match]:
        streams = set(self.q.streams.values())
        events = sorted((e for e in events if e.stream in streams), key=lambda e: e.time)
        if self.q.tumbling and events:
            if self.start is not None:
                events = [e for e in events if exact(e.time) >= exact(self.start)]
            self.t0 = exact(self.start if self.start is not None else events[0].time) if events else None
        found: list[Match] = []
        for key, sub in self._substreams(events).items():
            times = sorted({e.time for e in sub})
            at: dict = {}
            for e in sub:
                at.setdefault(e.time, []).append(e)
            for branch in self.a.branches:
                _Search(self, branch, _SubStream(key, sub, times, at), found).run()
        found.sort(key=lambda m: (m.time, [e.time for e in m.events]))
        return found

    def _substreams(self, events: list[Event]) -> dict[tuple, list[Event]]:
        by = self.q.partition_by
        if not by:
            return {(): events}
        out: dict[tuple, list[Event]] = {}
        for event in events:
            keys = []
            for gpm in self.a.positive:
                for s in self.solutions(gpm, event, {}, placement=True):
                    if all(v in s for v in by):
                        key = tuple(s[v] for v in by)
                        if key not in keys:
                            keys.append(key)
            for key in keys:
                out.setdefault(key, []).append(event)
        return out

    # -- windows --------------------------------------------------------------------

    def window_index(self, time: Time) -> int:
        return (exact(time) - self.t0) // self.q.window

    def in_window(self, first: Time, time: Time) -> bool:
        if self.q.window is None:
            return True
        if self.q.tumbling:
            return self.window_index(first) == self.window_index(time)
        return exact(time) - exact(first) <= self.q.window


class _Search:
    def __init__(self, matcher: Matcher, branch: Branch, sub: _SubStream, found: list[Match]):
        self.m = matcher
        self.branch = branch
        self.sub = sub
        self.found = found
        self.key_vars = matcher.q.partition_by

    def run(self) -> None:
        self.step(0, {}, [], None, None, [])

    def key_ok(self, solution: dict) -> bool:
        return all(solution.get(v) == k for v, k in zip(self.key_vars, self.sub.key))

    # -- atoms ------------------------------------------------------------------------

    def ways(self, step, time: Time, mu: dict) -> list[tuple[dict, list[Event]]]:
        """(solution, events) for every way the step's atom matches at ``time`` under ``mu``."""
        events = self.sub.at.get(time, [])
        kind = step.atom.kind
        if kind == "&":
            partial = [({}, [])]
            for gpm in step.gpms:
                reads = gpm.reads - gpm.bindable
                partial = [({**solution, **s}, used + [e] if e not in used else used)
                           for solution, used in partial for e in events
                           for s in self.m.solutions(gpm, e, {**mu, **{v: t for v, t in solution.items()
                                                                       if v in reads}})
                           if all(solution.get(v, t) == t for v, t in s.items())]
            return [(s, used) for s, used in partial if self.key_ok(s)]
        out = []
        for gpm in step.gpms:
            for e in events:
                for s in self.m.solutions(gpm, e, mu):
                    way = (s, [e])
                    if self.key_ok(s) and not (kind == "|" and way in out):
                        out.append(way)
        return out

    def candidates(self, step, op: str | None, after: Time | None, mu: dict):
        """(τ, solution, events) for the atom linked by ``op`` after ``after``."""
        times = self.sub.times if after is None else [t for t in self.sub.times if t > after]
        if op == "," and after is not None:
            times = times[:1]
        for time in times:
            ways = self.ways(step, time, mu)
            for solution, used in ways:
                yield time, solution, used
            if ways and op == ";" and after is not None:
                return

    def absent(self, gpms: list[GpmInfo], low: Time, high, mu: dict, include_high: bool) -> bool:
        """No event of the sub-stream in (low, high) (or (low, high]) matches one of ``gpms``."""
        for e in self.sub.events:
            t = exact(e.time)
            if t <= exact(low) or t > exact(high) or (t == exact(high) and not include_high):
                continue
            if any(self.m.solutions(g, e, mu) for g in gpms):
                return False
        return True

    # -- the sequence --------------------------------------------------------------------

    def step(self, i: int, mu: dict, events: list[Event], first, last, kleene: list[Iterations]) -> None:
        steps = self.branch.steps
        if i == len(steps):
            self.finish(mu, events, first, last, kleene)
            return
        step = steps[i]
        if step.atom.suffix == KLEENE:
            self.iterate(i, mu, 1, step.op, last, [], events, first, last, kleene)
            return
        for time, solution, used in self.candidates(step, step.op, last, mu):
            start = time if i == 0 else first
            if not self.m.in_window(start, time):
                continue
            new_mu = {**mu, **solution}
            if step.negations and not self.absent(step.negations, last, time, new_mu, False):
                continue
            self.step(i + 1, new_mu, events + used, start, time, kleene)

    def iterate(self, i, before: dict, n: int, op, after, solutions, events, first, last_before,
                kleene) -> None:
        step = self.branch.steps[i]
        for time, solution, used in self.candidates(step, op, after, before):
            start = time if first is None else first
            if not self.m.in_window(start, time):
                continue
            mu = {**before, **solution}
            if n == 1 and step.negations and not self.absent(step.negations, last_before, time, mu, False):
                continue
            its = solutions + [solution]
            self.step(i + 1, mu, events + used, start, time, kleene + [Iterations(before, its)])
            self.iterate(i, before, n + 1, step.iteration_op, time, its, events + used, start,
                         last_before, kleene)

    def finish(self, mu: dict, events: list[Event], first, last, kleene) -> None:
        time = last
        trailing = self.branch.trailing
        if trailing:
            m = self.m
            if m.q.tumbling:
                end = m.t0 + (m.window_index(first) + 1) * m.q.window
                if not self.absent(trailing, last, end, mu, False):
                    return
            else:
                end = exact(first) + m.q.window
                if not self.absent(trailing, last, end, mu, True):
                    return
            time = as_time(end)
        self.found.append(Match(time, mu, events, kleene))
