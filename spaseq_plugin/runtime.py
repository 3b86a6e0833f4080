"""The NFA_scep runtime: runs, their transitions, windows and partitions.

How a query executes (paper section 6 and Algorithm 2, with the rules of
semantics.md):

* Events are processed in timestamp order, one **batch** per timestamp: all
  events of the streamset with that τ.  Batching is what lets a conjunction
  see simultaneous events, and it makes strict contiguity a rule about
  timestamps ("the next timestamp"), not about arrival order.

* A **run** is a partial match: its automaton state, its mapping μ, its
  events, its first and last τ.  A run never changes; taking an edge creates
  a new run, and the old one stays as long as some edge of its state can
  still fire for it.  Which edges can, is the selection strategy's business:

    ``:`` skip-till-any   the edge stays live: every later match extends it;
    ``;`` skip-till-next  the edge fires at the first τ where it matches, then
                          is spent (also when a negation then kills that
                          extension: the run does not wait for a later one);
    ``,`` strict          the edge is tried at the run's next timestamp only.

  A run whose edges are all spent is gone.  A Kleene state loops: its loop
  edge is one more iteration (evaluated under μ as it was before the Kleene
  atom, since iteration variables are local), its other edges leave it, and
  both happen, so every number of iterations is a match.

* **Windows** (``WITHIN``): a run whose first τ is more than ω before the
  current batch is dropped before anything is tried (the paper's window
  pushing).  ``TUMBLING`` ends every run at each window boundary.

* **Negation** edges carry guards: GPMs with no match strictly between the
  run's last τ and the new event's τ, under the new mapping.  Events those
  guards may need are kept in a per-partition buffer for one window.
  Trailing negations make *pending* matches, emitted when time passes the
  window's end unless a guard matched first.

* **PARTITION BY** gives every key its own runs, strict-contiguity clock and
  negation buffer; an event goes to the partition of every key some positive
  GPM binds on it.

* Runs are **indexed by the streams their state waits on** (paper 7.2.2), so
  a batch only touches runs that can use it, plus the strict runs whose
  next timestamp it is.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .compiler import CompiledQuery
from .events import Event, Time
from .gpm import GpmPattern
from .gpm_oxigraph import GpmEvaluator, Solution, Term
from .nfa import CONJUNCTION, DISJUNCTION, Edge, State
from .syntax import NEXT, STRICT


@dataclass(eq=False, slots=True)
class Run:
    state: State
    mu: dict[str, Term]
    base_mu: dict[str, Term] | None     # μ before this state's Kleene atom
    events: tuple[Event, ...]
    first: Time
    last: Time
    iterations: tuple[tuple[int, tuple[Solution, ...]], ...]   # Kleene atom index -> local bindings
    partition: tuple
    spent: int = 0                      # bit i set: edge i can no longer fire
    dead: bool = False

    def alive_edges(self):
        for edge in self.state.edges:
            if not self.spent & (1 << edge.index):
                yield edge


@dataclass(eq=False, slots=True)
class Match:
    """A complete match: what results are made of."""
    time: Time
    mu: dict[str, Term]
    events: tuple[Event, ...]
    iterations: tuple[tuple[int, tuple[Solution, ...]], ...]


@dataclass(eq=False, slots=True)
class _Pending:
    """A match waiting for its trailing negations' window to close."""
    run: Run
    guards: tuple[GpmPattern, ...]
    deadline: Time
    killed: bool = False


@dataclass(eq=False)
class _Partition:
    key: tuple
    by_stream: dict[str, list[Run]] = field(default_factory=dict)
    strict: list[Run] = field(default_factory=list)      # runs whose next timestamp is pending
    pending: list[_Pending] = field(default_factory=list)
    buffer: list[Event] = field(default_factory=list)    # events negation guards may need
    runs: int = 0


class Runtime:
    """Executes one compiled query over a time-ordered event sequence.

    Feed whole batches with :meth:`process_batch` (all events of one τ, in
    increasing τ) and call :meth:`finish` at the end of the input.  Matches
    go to ``emit``.
    """

    def __init__(self, compiled: CompiledQuery, evaluator: GpmEvaluator,
                 emit: Callable[[Match], None], start: Time | None = None):
        self.q = compiled
        self.nfa = compiled.automaton
        self.evaluator = evaluator
        self.emit = emit
        self.window = self.nfa.window
        self.tumbling = self.nfa.tumbling
        self.tumbling_start = start
        self.window_end: Time | None = None
        self.partitions: dict[tuple, _Partition] = {}
        self.pending_heap: list[tuple[Time, int, _Pending]] = []
        self._seq = itertools.count()
        self.needs_buffer = any(e.guards for s in self.nfa.states for e in s.edges) or any(
            s.final_guards for s in self.nfa.states)
        self.active_runs = 0
        self.peak_runs = 0
        self._memo: dict[tuple[GpmPattern, Event, frozenset], list[Solution]] = {}
        self._swept: Time | None = None
        self._batch_streams: set[str] = set()
        # evaluators that answer many mappings in one query get them together
        self._prefetching = getattr(evaluator, "batches_mappings", False)

    # -- driving ---------------------------------------------------------

    def process_batch(self, time: Time, events: list[Event]) -> None:
        self._memo = {}
        if self.tumbling:
            if self.tumbling_start is not None and time < self.tumbling_start:
                return      # before the first tumbling window
            self._tumble(time)
        elif self.window is not None and (self._swept is None or time - self._swept > self.window):
            self._sweep(time)
        self._emit_due_pending(time)
        if self.q.partition_by:
            groups: dict[tuple, list[Event]] = {}
            for event in events:
                for key in self._partition_keys(event):
                    groups.setdefault(key, []).append(event)
        else:
            groups = {(): events}
        for key, group in groups.items():
            part = self.partitions.get(key)
            if part is None:
                part = self.partitions[key] = _Partition(key)
            self._process_partition(part, time, group)
        self.peak_runs = max(self.peak_runs, self.active_runs)

    def finish(self) -> None:
        """End of input: pending trailing-negation matches are emitted."""
        for _, _, pending in sorted(self.pending_heap, key=lambda p: (p[0], p[1])):
            if not pending.killed:
                self._emit_run(pending.run, pending.deadline)
        self.pending_heap.clear()
        for part in self.partitions.values():
            part.pending.clear()

    # -- per partition ---------------------------------------------------

    def _process_partition(self, part: _Partition, time: Time, events: list[Event]) -> None:
        if part.pending:
            self._check_pending(part, events)
        streams = self._batch_streams = {e.stream for e in events}
        candidates: dict[int, Run] = {}
        strict = {id(run) for run in part.strict}
        for run in part.strict:
            candidates[id(run)] = run
        part.strict = []
        for stream in streams:
            kept = []
            for run in part.by_stream.get(stream, ()):
                if run.dead:
                    continue
                if self._expired(run, time):
                    self._kill(part, run)
                    continue
                kept.append(run)
                candidates[id(run)] = run
            part.by_stream[stream] = kept
        live = []
        for run in candidates.values():
            if run.dead:
                continue
            if self._expired(run, time):
                self._kill(part, run)
                continue
            live.append(run)
        if self._prefetching:
            self._prefetch(live, events, strict)
        created: list[Run] = []
        for run in live:
            self._advance(part, run, time, events, created, strict_turn=id(run) in strict)
        # new runs start at every event matching an initial edge
        root = Run(self.nfa.initial, {}, None, (), time, time, (), part.key)
        self._advance(part, root, time, events, created, strict_turn=True, is_root=True)
        for run in created:
            self._register(part, run)
        if self.needs_buffer:
            part.buffer.extend(events)
            if self.window is not None:
                horizon = time - self.window
                if part.buffer and part.buffer[0].time < horizon:
                    part.buffer = [e for e in part.buffer if e.time >= horizon]

    def _advance(self, part: _Partition, run: Run, time: Time, events: list[Event],
                 created: list[Run], strict_turn: bool, is_root: bool = False) -> None:
        """Try every live edge of ``run`` on the batch; spend edges per strategy."""
        streams = self._batch_streams
        for edge in list(run.alive_edges()):
            if edge.strategy == STRICT and not strict_turn:
                run.spent |= 1 << edge.index
                continue
            if edge.atom.streams.isdisjoint(streams):
                if edge.strategy == STRICT and not is_root:
                    run.spent |= 1 << edge.index
                continue
            base = run.base_mu if edge.loop else run.mu
            extensions = self._match(edge, base, events, is_root)
            if not is_root and (edge.strategy == STRICT or (edge.strategy == NEXT and extensions)):
                run.spent |= 1 << edge.index
            for solution, used in extensions:
                mu = dict(base)
                mu.update(solution)
                if edge.guards and not is_root and self._guard_hit(part, edge.guards, mu, run.last, time):
                    continue
                self._extend(part, run, edge, mu, used, time, created, is_root)
        if not is_root and run.spent == (1 << len(run.state.edges)) - 1 and not run.dead:
            self._kill(part, run)

    def _extend(self, part, run: Run, edge: Edge, mu, used, time, created, is_root) -> None:
        target = edge.target
        iterations = run.iterations
        base_mu = None
        if target.kleene_atom is not None:
            base_mu = run.base_mu if edge.loop else run.mu
            local = {k: v for k, v in mu.items() if k not in base_mu}
            iterations = _append_iteration(iterations, target.kleene_atom, local)
        partition = part.key
        if is_root and self.q.partition_by:
            partition = tuple(mu.get(v) for v in self.q.partition_by)
            if partition != part.key:
                return      # this solution belongs to another partition's run
        new = Run(target, mu, base_mu, run.events + used, run.first if not is_root else time,
                  time, iterations, partition)
        if target.accepting:
            if target.final_guards:
                self._add_pending(part, new, target.final_guards)
            else:
                self._emit_run(new, time)
        if target.edges:
            created.append(new)

    def _match(self, edge: Edge, mu: dict, events: list[Event], standalone: bool):
        """The ways ``edge``'s atom matches the batch under ``mu``: (solution, events used)."""
        atom = edge.atom
        if atom.kind == CONJUNCTION:
            partial = [({}, ())]
            for gpm in atom.gpms:
                grown = []
                for solution, used in partial:
                    merged = dict(mu)
                    merged.update(solution)
                    for event in events:
                        if event.stream not in gpm.streams:
                            continue
                        for s in self._evaluate(gpm, event, merged, standalone and not solution):
                            combined = dict(solution)
                            combined.update(s)
                            grown.append((combined, used if event in used else used + (event,)))
                partial = grown
                if not partial:
                    return []
            return partial
        out = []
        seen = set()
        for gpm in atom.gpms:
            for event in events:
                if event.stream not in gpm.streams:
                    continue
                for s in self._evaluate(gpm, event, mu, standalone):
                    if atom.kind == DISJUNCTION:
                        key = (frozenset(s.items()), event)
                        if key in seen:
                            continue
                        seen.add(key)
                    out.append((s, (event,)))
        return out

    def _prefetch(self, runs: list[Run], events: list[Event], strict: set[int]) -> None:
        """Evaluate, one query per (GPM, event), what the runs' edges will ask.

        Runs waiting on the same GPM differ only in their mappings, which
        the evaluator takes together; identical restricted mappings are
        asked once.  ``_evaluate`` then finds the answers in the memo.
        """
        requests: dict[tuple[GpmPattern, Event], dict[frozenset, dict]] = {}
        for run in runs:
            for edge in run.alive_edges():
                if edge.atom.kind == CONJUNCTION or (edge.strategy == STRICT and id(run) not in strict):
                    continue
                base = run.base_mu if edge.loop else run.mu
                for gpm in edge.atom.gpms:
                    restricted = {v: t for v, t in base.items() if v in gpm.mentioned}
                    if not restricted:
                        continue
                    key = frozenset(restricted.items())
                    for event in events:
                        if event.stream in gpm.streams:
                            requests.setdefault((gpm, event), {})[key] = restricted
        for (gpm, event), by_key in requests.items():
            answers = self.evaluator.evaluate(gpm, event, list(by_key.values()))
            for key, solutions in zip(by_key, answers):
                self._memo[(gpm, event, key)] = solutions

    def _evaluate(self, gpm: GpmPattern, event: Event, mu: dict, standalone: bool) -> list[Solution]:
        """Solutions of ``gpm`` on ``event`` under ``mu``, memoised for the batch."""
        restricted = {} if standalone else {v: t for v, t in mu.items() if v in gpm.mentioned}
        key = (gpm, event, frozenset(restricted.items()))
        solutions = self._memo.get(key)
        if solutions is None:
            solutions = self._memo[key] = self.evaluator.evaluate(gpm, event, [restricted])[0]
        return solutions

    # -- negation ----------------------------------------------------------

    def _guard_hit(self, part: _Partition, guards, mu, after: Time, before: Time) -> bool:
        for event in part.buffer:
            if after < event.time < before:
                for gpm in guards:
                    if event.stream in gpm.streams and self._evaluate(gpm, event, mu, False):
                        return True
        return False

    def _add_pending(self, part: _Partition, run: Run, guards) -> None:
        if self.tumbling:
            deadline = self.window_end
        else:
            deadline = run.first + self.window
        pending = _Pending(run, guards, deadline)
        part.pending.append(pending)
        heapq.heappush(self.pending_heap, (deadline, next(self._seq), pending))

    def _check_pending(self, part: _Partition, events: list[Event]) -> None:
        alive = []
        for pending in part.pending:
            if pending.killed:
                continue
            for event in events:
                if any(event.stream in g.streams and self._evaluate(g, event, pending.run.mu, False)
                       for g in pending.guards):
                    pending.killed = True
                    break
            else:
                alive.append(pending)
        part.pending = alive

    def _emit_due_pending(self, time: Time) -> None:
        heap = self.pending_heap
        while heap and (heap[0][0] < time or (self.tumbling and heap[0][0] <= time)):
            deadline, _, pending = heapq.heappop(heap)
            if not pending.killed:
                pending.killed = True
                self._emit_run(pending.run, deadline)

    # -- windows -----------------------------------------------------------

    def _expired(self, run: Run, time: Time) -> bool:
        return self.window is not None and not self.tumbling and time - run.first > self.window

    def _tumble(self, time: Time) -> None:
        if self.window_end is None:
            start = self.tumbling_start if self.tumbling_start is not None else time
            if time < start:
                return
            self.window_end = start + self.window
        if time < self.window_end:
            return
        self._emit_due_pending(self.window_end)   # pending matches close with their window
        self._emit_due_pending(time)
        for part in self.partitions.values():
            part.by_stream.clear()
            part.strict.clear()
            part.pending.clear()
            part.buffer.clear()
        self.partitions.clear()
        self.active_runs = 0
        periods = (time - self.window_end) // self.window + 1
        self.window_end += periods * self.window

    def _sweep(self, time: Time) -> None:
        """Drop expired runs from every index, and partitions left empty."""
        self._swept = time
        for key, part in list(self.partitions.items()):
            for stream, runs in part.by_stream.items():
                kept = []
                for run in runs:
                    if not run.dead and self._expired(run, time):
                        self._kill(part, run)
                    if not run.dead:
                        kept.append(run)
                part.by_stream[stream] = kept
            if self.needs_buffer:
                part.buffer = [e for e in part.buffer if e.time >= time - self.window]
            if not part.runs and not part.pending and not part.strict and not part.buffer:
                del self.partitions[key]

    # -- bookkeeping -------------------------------------------------------

    def _register(self, part: _Partition, run: Run) -> None:
        self.active_runs += 1
        part.runs += 1
        if any(e.strategy == STRICT for e in run.state.edges):
            part.strict.append(run)
        if any(e.strategy != STRICT for e in run.state.edges):
            for stream in run.state.waits_on:
                part.by_stream.setdefault(stream, []).append(run)

    def _kill(self, part: _Partition, run: Run) -> None:
        if not run.dead:
            run.dead = True
            self.active_runs -= 1
            part.runs -= 1

    def _emit_run(self, run: Run, time: Time) -> None:
        self.emit(Match(time, run.mu, run.events, run.iterations))

    def _partition_keys(self, event: Event) -> set[tuple]:
        keys = set()
        for gpm in self.q.placement:
            if event.stream not in gpm.streams:
                continue
            for s in self._evaluate(gpm, event, {}, True):
                key = tuple(s.get(v) for v in self.q.partition_by)
                if None not in key:
                    keys.add(key)
        return keys


def _append_iteration(iterations, atom: int, local: Solution):
    out = []
    found = False
    for index, its in iterations:
        if index == atom:
            out.append((index, its + (local,)))
            found = True
        else:
            out.append((index, its))
    if not found:
        out.append((atom, (local,)))
    return tuple(out)


def batches(events: Iterable[Event]) -> Iterable[tuple[Time, list[Event]]]:
    """Group a time-ordered event sequence into (τ, events at τ)."""
    current: list[Event] = []
    time = None
    for event in events:
        if current and event.time != time:
            yield time, current
            current = []
        time = event.time
        current.append(event)
    if current:
        yield time, current
