"""A brute-force reference evaluator for SPASEQ, for testing the engine.

It follows ``semantics.md`` literally and shares nothing with the runtime or
the automaton: it reads the parsed SEQ expression (atoms, suffixes,
operators) and enumerates candidate event sequences by backtracking over
timestamps.  It is exponential and meant for tiny inputs only.

The reading of semantics.md it implements (the project's settled one):

1. Time is processed by timestamps.  ``T(k)``: sorted distinct timestamps of
   sub-stream ``k``.  An atom *matches at τ under μ*: a single GPM, when an
   event at τ on one of its streams gives a solution under μ (each solution
   and event is one way); a disjunction, the union over operands and events
   (identical (solution, event) pairs once); a conjunction, operands in
   ``conjunction_order``, each on every event at τ on its streams under μ
   extended by the previous operands' solutions.
2. Between consecutive positive atoms (previous atom's last τ = p): ``,``
   the next atom at the next timestamp of T(k) after p; ``;`` at the
   smallest τ > p where it matches (every way at that τ); ``:`` any τ > p.
3. Kleene ``B+``: iterations linked by the operator written just before
   ``B+`` (opening the SEQ: the one just after it; a lone atom: ``;``); each
   iteration is evaluated under μ before ``B+``; every k ≥ 1 is a match;
   afterwards μ = μ_pre ∪ the last iteration's solution.
4. Negation ``X op1 N! op2 Y``: X and Y linked by op2, and no event of
   sub-stream k strictly between X's last τ and Y's first τ has a solution
   of N under μ after Y (Kleene Y: after its first iteration).
5. Optional ``X op1 B? op2 Y`` = ``X op1 B op2 Y`` ∪ ``X op2 Y`` with B as a
   negation in between; a leading optional is simply skipped; a trailing one
   is ``... B`` ∪ ``... B!``.
6. Trailing negation: the prefix, with no solution of N on sub-stream k in
   (τ_last, τ_first + ω] (TUMBLING: (τ_last, window end)); match time is
   that deadline, emitted even when the input ends before it.
7. WITHIN ω: τ_last − τ_first ≤ ω; TUMBLING: all events of a match in one
   window ``[t0 + iω, t0 + (i+1)ω)``, t0 = ``start`` or the first event's τ.
   Window arithmetic is exact (``fractions.Fraction`` of the decimal each
   timestamp was written as; ω rounded to the nearest small fraction, so
   ``WITHIN 700 MILLISECONDS`` is 7/10 s), never binary floating point.
8. PARTITION BY: an event is in sub-stream k when some positive GPM on it
   (empty μ) binds the partition variables to k; a match of k uses only
   sub-stream k, and its first atom must bind the key to k.
9. A match may start at every event matching its first positive atom.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

from .language.compiler import CompiledQuery, conjunction_order
from .events import Event, Time, as_time
from .language.gpm import GpmPattern
from .evaluators.oxigraph import OxigraphEvaluator
from .evaluators.protocol import Solution
from .runtime.results import Projector, Result
from .runtime.nfa_runtime import Match
from .language.syntax import KLEENE, NEGATION, NEXT, OPTIONAL, STRICT, Conjunction, Disjunction, GpmRef

_SINGLE, _AND, _OR = "single", "and", "or"


@dataclass
class _Atom:
    index: int                       # position in the SEQ
    kind: str                        # single / and / or
    gpms: tuple[GpmPattern, ...]
    kleene: bool = False


@dataclass
class _Step:
    """A positive atom of a branch, with how it links to the previous one."""
    atom: _Atom
    op: str | None                   # None for the branch's first atom
    negations: tuple[GpmPattern, ...] = ()
    iteration_op: str | None = None  # Kleene only


@dataclass
class _Branch:
    steps: list[_Step]
    trailing: tuple[GpmPattern, ...] = ()


@dataclass
class _Context:
    key: tuple
    events: list[Event]
    times: list[Time]
    at: dict[Time, list[Event]] = field(default_factory=dict)


def reference_evaluate(compiled: CompiledQuery, events: list[Event], kb=None,
                       start: Time | None = None) -> list[Result]:
    """All results of ``compiled`` over the whole time-ordered ``events``."""
    return _Reference(compiled, kb, start).run(events)


def reference_matches(compiled: CompiledQuery, events: list[Event], kb=None,
                      start: Time | None = None) -> list[Match]:
    """The matches (before projection), sorted by match time."""
    return _Reference(compiled, kb, start).matches(events)


class _Reference:
    def __init__(self, compiled: CompiledQuery, kb, start):
        self.q = compiled
        self.evaluator = OxigraphEvaluator(kb)
        self.start = start
        window = compiled.query.window
        # exact arithmetic: WITHIN 700 MILLISECONDS is 7/10 s, not 700 * 0.001
        self.window = _exact(window.seconds).limit_denominator(10 ** 9) if window else None
        self.tumbling = bool(window and window.tumbling)
        self.t0: Time | None = None
        self._cache: dict = {}
        self.branches = _branches(compiled)

    # -- driver --------------------------------------------------------------

    def run(self, events: list[Event]) -> list[Result]:
        projector = Projector(self.q)
        out = []
        for match in self.matches(events):
            result = projector.project(match)
            if result is not None:
                out.append(result)
        return out

    def matches(self, events: list[Event]) -> list[Match]:
        streams = self.q.streams
        events = [e for e in events if e.stream in streams]
        if self.tumbling and events:
            self.t0 = self.start if self.start is not None else events[0].time
            events = [e for e in events if e.time >= self.t0]
        found: list[Match] = []
        for key, sub in self._substreams(events).items():
            ctx = _Context(key, sub, sorted({e.time for e in sub}))
            for e in sub:
                ctx.at.setdefault(e.time, []).append(e)
            for branch in self.branches:
                self._branch(branch, ctx, found)
        found.sort(key=lambda m: m.time)
        return found

    def _substreams(self, events: list[Event]) -> dict[tuple, list[Event]]:
        by = self.q.partition_by
        if not by:
            return {(): list(events)}
        out: dict[tuple, list[Event]] = {}
        for event in events:
            keys: list[tuple] = []
            for gpm in self.q.placement:
                if event.stream not in gpm.streams:
                    continue
                for s in self._eval(gpm, event, {}):
                    if all(v in s for v in by):
                        key = tuple(s[v] for v in by)
                        if key not in keys:
                            keys.append(key)
            for key in keys:
                out.setdefault(key, []).append(event)
        return out

    # -- GPM and atom evaluation -----------------------------------------------

    def _eval(self, gpm: GpmPattern, event: Event, mu: dict) -> list[Solution]:
        restricted = {v: t for v, t in mu.items() if v in gpm.mentioned}
        key = (id(gpm), id(event), frozenset(restricted.items()))
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self.evaluator.evaluate(gpm, event, [restricted])[0]
        return hit

    def _atom_at(self, atom: _Atom, time: Time, mu: dict, ctx: _Context):
        """The ways ``atom`` matches at ``time`` under ``mu``: (solution, events)."""
        events = ctx.at.get(time, [])
        if atom.kind == _AND:
            partial: list[tuple[dict, tuple]] = [({}, ())]
            for gpm in atom.gpms:
                grown = []
                for solution, used in partial:
                    merged = {**mu, **solution}
                    for event in events:
                        if event.stream not in gpm.streams:
                            continue
                        for s in self._eval(gpm, event, merged):
                            grown.append(({**solution, **s},
                                          used if event in used else used + (event,)))
                partial = grown
            return partial
        out = []
        seen = set()
        for gpm in atom.gpms:
            for event in events:
                if event.stream not in gpm.streams:
                    continue
                for s in self._eval(gpm, event, mu):
                    if atom.kind == _OR:
                        k = (frozenset(s.items()), id(event))
                        if k in seen:
                            continue
                        seen.add(k)
                    out.append((dict(s), (event,)))
        return out

    def _candidates(self, atom: _Atom, op: str | None, after: Time | None, mu: dict,
                    ctx: _Context):
        """(τ, solution, events) for the atom after ``after`` linked by ``op``."""
        times = ctx.times if after is None else [t for t in ctx.times if t > after]
        if op == STRICT and after is not None:
            times = times[:1]
        for time in times:
            ways = self._atom_at(atom, time, mu, ctx)
            for solution, used in ways:
                yield time, solution, used
            if ways and op == NEXT and after is not None:
                return

    def _absent(self, gpms, low: Time, high, mu: dict, ctx: _Context,
                include_high: bool = False) -> bool:
        """No event of the sub-stream in (low, high) [or (low, high]] matches a GPM."""
        high = _exact(high)
        for event in ctx.events:
            time = _exact(event.time)
            if event.time <= low or time > high or (time == high and not include_high):
                continue
            for gpm in gpms:
                if event.stream in gpm.streams and self._eval(gpm, event, mu):
                    return False
        return True

    # -- windows ---------------------------------------------------------------

    def _window_index(self, time: Time) -> int:
        return math.floor((_exact(time) - _exact(self.t0)) / self.window)

    def _in_window(self, first: Time, time: Time) -> bool:
        if self.window is None:
            return True
        if self.tumbling:
            return self._window_index(first) == self._window_index(time)
        return _exact(time) - _exact(first) <= self.window

    # -- the search ------------------------------------------------------------

    def _branch(self, branch: _Branch, ctx: _Context, found: list[Match]) -> None:
        steps = branch.steps
        by = self.q.partition_by

        def key_ok(mu):
            return not by or tuple(mu.get(v) for v in by) == ctx.key

        def finish(mu, events, first, last, iterations):
            time = last
            if branch.trailing:
                if self.tumbling:
                    deadline = _exact(self.t0) + (self._window_index(first) + 1) * self.window
                    if not self._absent(branch.trailing, last, deadline, mu, ctx):
                        return
                else:
                    deadline = _exact(first) + self.window
                    if not self._absent(branch.trailing, last, deadline, mu, ctx,
                                        include_high=True):
                        return
                time = _number(deadline)
            found.append(Match(time, mu, events, iterations))

        def go(i, mu, events, first, last, iterations):
            if i == len(steps):
                finish(mu, events, first, last, iterations)
                return
            step = steps[i]
            atom = step.atom
            if not atom.kleene:
                for time, solution, used in self._candidates(atom, step.op, last, mu, ctx):
                    start = time if i == 0 else first
                    if not self._in_window(start, time):
                        continue
                    new_mu = {**mu, **solution}
                    if i == 0 and not key_ok(new_mu):
                        continue
                    if step.negations and not self._absent(step.negations, last, time, new_mu, ctx):
                        continue
                    go(i + 1, new_mu, events + used, start, time, iterations)
                return
            mu_pre = mu
            local_vars = self.q.kleene_local.get(atom.index, frozenset())

            def iterate(n, op, after, its, events_so_far, first_time):
                for time, solution, used in self._candidates(atom, op, after, mu_pre, ctx):
                    start = time if first_time is None else first_time
                    if not self._in_window(start, time):
                        continue
                    new_mu = {**mu_pre, **solution}
                    if n == 1:
                        if i == 0 and not key_ok(new_mu):
                            continue
                        if step.negations and not self._absent(step.negations, last, time,
                                                               new_mu, ctx):
                            continue
                    new_its = its + ({v: t for v, t in solution.items() if v in local_vars},)
                    new_events = events_so_far + used
                    go(i + 1, new_mu, new_events, start, time,
                       tuple(sorted(iterations + ((atom.index, new_its),), key=lambda x: x[0])))
                    iterate(n + 1, step.iteration_op, time, new_its, new_events, start)

            iterate(1, step.op, last, (), events, None if i == 0 else first)

        go(0, {}, (), None, None, ())


def _exact(time) -> Fraction:
    """A timestamp or duration as the exact decimal it was written as."""
    if isinstance(time, Fraction):
        return time
    if isinstance(time, (int, Decimal)):
        return Fraction(time)
    return Fraction(repr(float(time)))


def _number(value: Fraction) -> Time:
    return as_time(Decimal(value.numerator) / Decimal(value.denominator))


def _branches(compiled: CompiledQuery) -> list[_Branch]:
    """The SEQ with every optional atom either taken or skipped."""
    seq = compiled.query.sequence
    atoms, ops = seq.atoms, seq.ops
    gpms = compiled.gpms

    def op_before(j):
        if j > 0:
            return ops[j - 1]
        return ops[0] if ops else NEXT

    described: list[tuple[str, object]] = []      # (role, _Atom | GpmPattern)
    for j, atom in enumerate(atoms):
        if isinstance(atom, GpmRef):
            gpm = gpms[atom.name]
            if atom.suffix == NEGATION:
                described.append(("neg", gpm))
            elif atom.suffix == OPTIONAL:
                described.append(("opt", _Atom(j, _SINGLE, (gpm,))))
            else:
                described.append(("pos", _Atom(j, _SINGLE, (gpm,), kleene=atom.suffix == KLEENE)))
        elif isinstance(atom, Conjunction):
            described.append(("pos", _Atom(j, _AND,
                                           tuple(conjunction_order([gpms[n] for n in atom.names])))))
        elif isinstance(atom, Disjunction):
            described.append(("pos", _Atom(j, _OR, tuple(gpms[n] for n in atom.names))))
        else:
            raise TypeError(atom)

    optional_at = [j for j, (role, _) in enumerate(described) if role == "opt"]
    branches = []
    for mask in range(1 << len(optional_at)):
        taken = {j for b, j in enumerate(optional_at) if mask >> b & 1}
        steps: list[_Step] = []
        negations: list[GpmPattern] = []
        for j, (role, item) in enumerate(described):
            if role == "neg" or (role == "opt" and j not in taken):
                gpm = item if role == "neg" else item.gpms[0]
                if steps:                      # leading skipped optionals check nothing
                    negations.append(gpm)
                continue
            steps.append(_Step(item, op_before(j) if steps else None, tuple(negations),
                               op_before(j) if item.kleene else None))
            negations = []
        if not steps:
            continue
        branches.append(_Branch(steps, tuple(negations)))
    return branches
