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
  guards may need are kept in a per-partition buffer for one window: those
  of a stream a guard reads, on which it has a standalone solution (when the
  evaluator lists solution keys: under a run's μ it has none on an event
  without, ``_guarded``).
  Trailing negations make *pending* matches, emitted when time passes the
  window's end unless a guard matched first.  A guard does not try every
  buffered event on every run: its GPM's buffered events are indexed, once
  each, by their values of the variables the GPM binds and the run has bound
  (``solution_keys``, as for probes below), and a run tries only the events
  filed under its values (``_GuardIndex``).  "Order placed; not cancelled;
  shipped" then costs a lookup per shipment, not a pass over the window.  A
  variable the GPM binds that a FILTER conjunct ``?a = ?b`` equates with one
  the run has bound files by its value's ``equality_key`` (``=`` compares
  values: 1 = 1.0); a value without one (a literal of an unknown datatype)
  may equal any: a run's is not filed by it, an event's is tried by every run.
  Pending matches are filed the same way, by their values of their guards'
  variables: an event's solution keys name the few it may kill
  (``_check_pending``), where every pending match was tried on every event.

* **PARTITION BY** gives every key its own runs, strict-contiguity clock and
  negation buffer; an event goes to the partition of every key some positive
  GPM binds on it (GPMs that the evaluator knows bind the key alike, such
  as the V-shape's three, are asked once: ``distinct_placement``).

* Runs are **indexed by the edges they wait on** (paper 7.2.2, and its
  "pushing stateful joins" into the automaton), so a batch only touches runs
  that can use it, plus the strict runs whose next timestamp it is.  Per
  edge, a run is filed under its values of the edge's *probe variables*:
  the variables of one GPM of the edge's atom that every run at the state
  has bound (a static analysis of the automaton, below) and every solution
  of that GPM binds.  The evaluator (``solution_keys``) lists the values
  those variables take in the GPM's standalone solutions on the batch; a
  run filed under other values cannot be extended by that edge (the join
  would fail), so it is not visited, nor evaluated.  With no probe
  variables the key is ``()``: a GPM with no solution on the batch touches
  no run at all.  A GPM the evaluator cannot answer that way (no
  ``solution_keys``, an Oxigraph fallback) leaves its edge unprobed: every
  run waiting on it is visited, as before.

  Stateful *comparisons* are pushed the same way.  When the GPM has a
  FILTER conjunct ``?e < ?r`` (or ``<=``, ``>``, ``>=``) between a variable
  it binds and one the run has bound, the runs of a key are also kept
  sorted by their number in ``?r`` (as a float: rounding is monotone, so
  the order is never wrong, only sometimes tied), and a batch visits only
  those at or above the smallest ``?e`` of the key's solutions (for ``<``;
  at or below the largest for ``>``).  Runs whose ``?r`` is not a number,
  and keys with a solution whose ``?e`` is not, are always visited.  The
  V-shape's ``?p2 > ?p1`` and the smart grid's ``?fr2 < ?fr1`` then touch
  the runs they extend, not every run of the company or the house.  The
  order also proves the conjunct for most of them: a run whose number is
  strictly beyond every solution's (for ``<``: above the greatest ``?e``)
  satisfies it, since a strict order of floats is the values' order; the
  evaluator is told so (``evaluate_one``'s ``holds``) and does not check it
  again.  Ties decide nothing, and are checked.

  Which variables are certainly bound at a state: nothing at the initial
  state; along an edge, what the source had plus what the atom certainly
  binds (a conjunction: any operand's; a disjunction: only what every
  operand binds); at a state reached several ways, what every way gives.  A
  Kleene loop edge evaluates μ as it was before the Kleene atom: what was
  certain at the states that enter the Kleene state.

Where the state lives, and when it goes
---------------------------------------

All state of a run is in plain slots objects: ``Runtime`` holds the
partitions by key (``partitions``), two heaps, and counters; a
``_Partition`` holds everything of one key (one partition, ``()``, without
PARTITION BY).  A key's state lives as long as something in it can still
fire, and no longer (Flink's keyed state with timers is the model):

==========================  ==============================  ==========================================
state                       where                           gone when
==========================  ==============================  ==========================================
waiting runs                ``_Partition.waiting``          the run dies: all its edges spent, or its
                            (by edge, then probe key)       window passed (first τ + ω < now), or
                                                            dropped by a limit; the index forgets it
                                                            when it next looks, or at compaction
runs on a strict edge       ``_Partition.strict``           the partition's next batch (the edge is
                                                            tried then, or spent), or the run dies
runs by age                 ``_Partition.ages``             the run dies (by first τ, see _Ages:
                                                            expiry pops it; ``drop-oldest`` kills
                                                            the oldest)
negation buffer             ``_Partition.buffer``           the event is older than the partition's
                                                            oldest run (no guard can look that far
                                                            back: guards see events after a run's
                                                            last τ), or the partition goes
guard indexes of the buffer ``_Partition.guard_indexes``    made again from the buffer once more of
                                                            their events left it than it holds
pending matches by guard    ``_Partition.pending_indexes``  made again from the live pending matches
values                      and ``pending_scans``           when the partition is compacted
pending trailing negations  ``_Partition.pending`` and      emitted when time passes the deadline
                            ``Runtime.pending_heap``        (τ_first + ω), or killed by a guard
the partition itself        ``Runtime.partitions``          at once when it holds no live run and no
                                                            pending match (after its batch, after
                                                            expiry); with it go its indexes, buffer
                                                            and strict clock.  Without PARTITION BY
                                                            the one partition stays (emptied)
the partition's next expiry ``Runtime._deadlines``          a heap of (oldest first τ, partition):
                                                            popped when that τ leaves the window
==========================  ==============================  ==========================================

Expiry costs what expires, never the number of keys: ``_expire`` pops
``_deadlines`` while its top is out of the window, and in each popped
partition pops ``ages`` while its top is; the partition is then dropped if
empty, or filed again under its new oldest run.  A key that never appears
again is dropped within one window of its last run's start.  Dead runs left
in a partition's indexes (killed by expiry, spent, or evicted) are counted
(``garbage``); when they outnumber the live ones the partition is compacted,
in time linear in its size, so the work is amortised over the deaths.
``TUMBLING`` drops every partition at each boundary.  Without WITHIN a
partition is still dropped once it holds nothing, but a waiting run never
expires: the compiler warns, and ``live_keys`` / ``peak_keys`` count the
partitions (none without PARTITION BY).  What is not per key: the
evaluator's caches (bounded), and DISTINCT's memory of projected bindings
(``results.Projector``), which semantics.md keeps for the query's lifetime.

Limits (``StateLimits``, docs/limits.md): a cap on active runs (runs and
pending matches) per query and per partition, and a budget on the bytes
they and the negation buffers hold (an estimate: ``_run_bytes``, each event
counted once, ``_event_bytes``).  When a new run or pending match would
pass one, the policy decides: ``fail`` raises ``StateLimitError`` (the
command exits with status 3); ``drop-newest`` does not keep the new one;
``drop-oldest`` evicts the partial matches that started first (in the
partition, for the partition cap; in the query, else) until it fits.
Dropped ones are counted (``dropped_runs``).  A buffered event is never
dropped (a guard may need it): when the buffer passes the budget, ``fail``
raises and both drop policies evict the oldest partial matches, whose start
holds the buffer's oldest events (``_buffer_over``).  Matches already complete
are always emitted.  Two products would fill memory before a run is counted, so
the run cap bounds them where they are made: a conjunction's combinations on
a batch (``_too_many_combinations``), and a GPM's solutions on one event,
which the evaluator stops making one past the cap (``limit_solutions`` in the
evaluator protocol; ``_too_many_solutions``).  Time bounds a third: a GPM's join
on one event whose FILTER rejects nearly every combination makes no solution
for the cap to see, so the evaluator also stops after ``max_join_steps`` rows
tried (``limit_steps``), and the policy treats that cut as the solutions' one.
The runtime counts the pending matches a guard is tried on for one event
against the same limit (``_try_pending``): those it cannot file try them all.
So are the buffered events the guards of negations in mid-sequence are tried on
when runs cross them, for one batch (``_guard_hit``): past the limit a run whose
check was cut short never crosses, it is dropped (``_guard_cut_short``).
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from heapq import heapify, heappop, heappush
from operator import itemgetter
from dataclasses import dataclass
from typing import Callable, Iterable

try:
    import cython
except ImportError:     # interpreted, without Cython installed
    from ..compiled import shadow as cython
if not cython.compiled:     # interpreted, with Cython installed too: declared attributes become slots
    from ..compiled import shadow as cython

from ..errors import StateLimitError
from ..language.compiler import CompiledQuery
from ..events import Event, Time, format_time
from ..language.gpm import GpmPattern
from ..evaluators.protocol import GpmEvaluator, Solution, Term, TooManySolutions
from ..language.nfa import CONJUNCTION, DISJUNCTION, AtomMatcher, Edge, State
from ..language.syntax import NEXT, STRICT

FAIL, DROP_NEWEST, DROP_OLDEST = "fail", "drop-newest", "drop-oldest"
POLICIES = (FAIL, DROP_NEWEST, DROP_OLDEST)
DEFAULT_MAX_RUNS = 1_000_000
DEFAULT_MAX_STATE_BYTES = 512 << 20
DEFAULT_MAX_JOIN_STEPS = 10_000_000     # seconds of work on one event (2-3 million rows a second, filtered)
DEFAULT_MAX_DISTINCT = 1_000_000        # rows DISTINCT keeps: about 100 MB (results.row_key)


def size_text(size: int) -> str:
    """A number of bytes in a message: ``512 MB``, ``3.5 kB`` or ``40 bytes``."""
    if size >= 10 << 20:
        return f"{size / (1 << 20):,.0f} MB"
    if size >= 1 << 20:
        return f"{size / (1 << 20):.1f} MB"
    return f"{size / 1024:.1f} kB" if size >= 1024 else f"{size} bytes"
# A guard's scan of more buffered events than this asks the evaluator to hold their
# summaries over the batch (more than the few recent ones SPECTRA keeps anyway).
_HELD_FROM = cython.declare(cython.Py_ssize_t, 16)
COMPACT_SLACK = 32      # dead runs a partition's indexes may hold beyond its live ones
DISCARD_AMONG = 16      # a spent run leaves the age index at once if its first τ has no more runs (_Ages.discard)


@dataclass(frozen=True, slots=True)
class StateLimits:
    """Caps on the runtime's state (see the module docstring and docs/limits.md).

    ``None`` lifts a cap.  The defaults keep a machine with 2 GB safe: a
    million runs of a few small bindings, or 512 MB of run state, whichever
    comes first."""
    max_runs: int | None = DEFAULT_MAX_RUNS                 # active runs of the query
    max_partition_runs: int | None = None                   # active runs of one PARTITION BY key
    max_state_bytes: int | None = DEFAULT_MAX_STATE_BYTES   # their estimated size
    policy: str = FAIL                                      # fail, drop-newest or drop-oldest
    max_join_steps: int | None = DEFAULT_MAX_JOIN_STEPS     # rows a GPM's join tries on one event
    max_distinct: int | None = DEFAULT_MAX_DISTINCT         # rows DISTINCT keeps (always fails past it)

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"unknown limit policy {self.policy!r} (use {', '.join(POLICIES)})")
        for name in ("max_runs", "max_partition_runs", "max_state_bytes", "max_join_steps", "max_distinct"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, not {value!r}")

    def describe(self) -> str:
        """The limits in force, as ``spaseq explain`` shows them."""
        def cap(value, unit: str) -> str:
            return "no limit" if value is None else f"{value:,} {unit}"
        per_key = cap(self.max_partition_runs, "per key") if self.max_partition_runs is not None else \
            "the query's limit"
        state = "no limit" if self.max_state_bytes is None else size_text(self.max_state_bytes)
        action = {FAIL: "stop with an error (exit status 3)",
                  DROP_NEWEST: "drop the newest partial match and go on",
                  DROP_OLDEST: "drop the oldest partial matches and go on"}[self.policy]
        return (f"limits: active runs per query: {cap(self.max_runs, 'runs')} (--max-runs); "
                f"per partition: {per_key} (--max-partition-runs); run state: {state}, estimated "
                f"(--max-state-memory); a join on one event (a GPM's rows, a negation guard's tries): "
                f"{cap(self.max_join_steps, 'steps')} "
                f"(--max-join-steps); when reached: {action} (--on-limit {self.policy}); rows DISTINCT "
                f"keeps: {cap(self.max_distinct, 'rows')} (--max-distinct; when reached, the run stops)")

# The classes below are Cython extension types when the module is compiled (typed
# attributes, read in C by the functions that declare their arguments' types with
# cython.locals) and plain slots classes when it runs interpreted.


@cython.cclass
class Probe:
    """How an edge finds the runs a batch may extend (see the module docstring)."""
    gpm = cython.declare(object, visibility="public")
    variables = cython.declare(tuple, visibility="public")
    compared = cython.declare(object, visibility="public")
    against = cython.declare(object, visibility="public")
    upward = cython.declare(cython.bint, visibility="public")
    comparison = cython.declare(object, visibility="public")

    def __init__(self, gpm: GpmPattern, variables: tuple[str, ...], compared: str | None = None,
                 against: str | None = None, upward: bool = False, comparison: tuple | None = None):
        self.gpm = gpm
        self.variables = variables      # joined: the run's values must be a solution's
        self.compared = compared        # the GPM's variable in an ordering FILTER conjunct ...
        self.against = against          # ... and the run's variable it is compared with
        self.upward = upward            # the run's number must be >= the least ?compared (else <= the greatest)
        self.comparison = comparison    # that conjunct, (compared, op, against) as the evaluator's comparisons()


@cython.cclass
class _Place:
    """An NFA state as its runs use it, made once per query: the state, its edges'
    steps (``_Step``), whether one of them is strict (its runs wait in their
    partition's strict list), and its runs' probe keys when none of its edges probes
    (None: made per run, ``Runtime._probe_keys``)."""
    state = cython.declare(object, visibility="public")
    steps = cython.declare(tuple, visibility="public")
    strict = cython.declare(cython.bint, visibility="public")
    unprobed = cython.declare(object, visibility="public")

    def __init__(self, state: State, steps: tuple, strict: bool, unprobed: tuple | None):
        self.state = state
        self.steps = steps
        self.strict = strict
        self.unprobed = unprobed


@cython.cclass
class Run:
    """A partial match (see the module docstring), in the NFA state of its ``place``."""
    place = cython.declare(_Place, visibility="public")
    mu = cython.declare(dict, visibility="public")
    base_mu = cython.declare(object, visibility="public")
    events = cython.declare(tuple, visibility="public")
    first = cython.declare(object, visibility="public")
    last = cython.declare(object, visibility="public")
    iterations = cython.declare(tuple, visibility="public")
    partition = cython.declare(tuple, visibility="public")
    spent = cython.declare(object, visibility="public")
    dead = cython.declare(cython.bint, visibility="public")
    keys = cython.declare(tuple, visibility="public")
    size = cython.declare(cython.Py_ssize_t, visibility="public")
    held = cython.declare(cython.Py_ssize_t, visibility="public")
    turn = cython.declare(cython.bint, visibility="public")

    def __init__(self, place, mu: dict[str, Term], base_mu: dict[str, Term] | None,
                 events: tuple[Event, ...], first: Time, last: Time,
                 iterations: tuple[tuple[int, tuple[Solution, ...]], ...], partition: tuple,
                 spent: int = 0, dead: bool = False):
        self._fill(place, mu, base_mu, events, first, last, iterations, partition, spent, dead)

    @cython.cfunc
    def _fill(self, place, mu: dict, base_mu, events: tuple, first, last, iterations: tuple,
              partition: tuple, spent, dead) -> None:
        self.place = place
        self.mu = mu
        self.base_mu = base_mu              # μ before this state's Kleene atom
        self.events = events
        self.first = first
        self.last = last
        self.iterations = iterations        # Kleene atom index -> local bindings
        self.partition = partition
        self.spent = spent                  # bit i set: edge i can no longer fire
        self.dead = dead
        self.keys = ()                      # per edge: the run's values of its probe variables, or None
        self.size = 0                       # what it counts for in state_bytes (_run_bytes), once registered
        self.held = 0                       # the bytes of its events it counts for (see _extend)
        self.turn = False                   # it waited in its partition's strict list for the batch being processed

    @property
    def state(self) -> State:
        return self.place.state

    def alive_edges(self):
        return [edge for edge in self.state.edges if not self.spent & (1 << edge.index)]


@cython.cfunc
@cython.locals(run=Run)
def _new_run(place, mu: dict, base_mu, events: tuple, first, last, iterations: tuple,
             partition: tuple) -> Run:
    """A new live Run, made without calling the type (compiled, a call through the
    type and its ``__init__`` parsing eight arguments cost as much as the rest)."""
    run = Run.__new__(Run)
    run._fill(place, mu, base_mu, events, first, last, iterations, partition, 0, False)
    return run


@cython.cclass
class Match:
    """A complete match: what results are made of."""
    time = cython.declare(object, visibility="public")
    mu = cython.declare(object, visibility="public")
    events = cython.declare(object, visibility="public")
    iterations = cython.declare(object, visibility="public")

    def __init__(self, time: Time, mu: dict[str, Term], events: tuple[Event, ...],
                 iterations: tuple[tuple[int, tuple[Solution, ...]], ...]):
        self._fill(time, mu, events, iterations)

    @cython.cfunc
    def _fill(self, time, mu, events, iterations) -> None:
        self.time = time
        self.mu = mu
        self.events = events
        self.iterations = iterations


@cython.cfunc
@cython.locals(match=Match)
def _new_match(time, mu: dict, events: tuple, iterations: tuple) -> Match:
    """A new Match, made without calling the type (see _new_run): skip-till-any
    makes several an event."""
    match = Match.__new__(Match)
    match._fill(time, mu, events, iterations)
    return match


@cython.cclass
class _Pending:
    """A match waiting for its trailing negations' window to close."""
    run = cython.declare(Run, visibility="public")
    guards = cython.declare(object, visibility="public")
    deadline = cython.declare(object, visibility="public")
    killed = cython.declare(cython.bint, visibility="public")

    def __init__(self, run: Run, guards: tuple[GpmPattern, ...], deadline: Time, killed: bool = False):
        self.run = run
        self.guards = guards
        self.deadline = deadline
        self.killed = killed


@cython.cclass
class _Bucket:
    """The runs waiting on an edge with one probe key: ``sorted`` by ``numbers``
    (their numbers in the probe's ``against`` variable), the others ``unsorted``."""
    numbers = cython.declare(list, visibility="public")
    sorted = cython.declare(list, visibility="public")
    unsorted = cython.declare(list, visibility="public")

    def __init__(self, numbers: list | None = None, sorted: list | None = None, unsorted: list | None = None):
        self.numbers = [] if numbers is None else numbers
        self.sorted = [] if sorted is None else sorted
        self.unsorted = [] if unsorted is None else unsorted


@cython.cclass
class _Waiting:
    """The runs waiting on one non-strict edge: filed by probe key, or loose."""
    keyed = cython.declare(dict, visibility="public")
    loose = cython.declare(list, visibility="public")

    def __init__(self, keyed: dict | None = None, loose: list | None = None):
        self.keyed = {} if keyed is None else keyed      # probe key -> _Bucket
        self.loose = [] if loose is None else loose


_DEAD_AT_ONCE = 64      # dead runs _Ages.oldest deletes from a start's list at once

@cython.cclass
class _Ages:
    """A partition's runs by first τ, for expiry and drop-oldest: the distinct first
    τs in a heap, each with its runs in the order they were registered (so the
    oldest run is the first registered of the least τ).  Skip-till-any makes many
    runs of one start: one heap entry per start time, comparing plain times, costs
    a fraction of a heap of (τ, seq, run) tuples.  A run whose edges are all
    spent leaves at once (:meth:`discard`: strict contiguity spends most runs
    long before their window ends, and a run kept until then is freed cold);
    other dead runs stay until expiry, :meth:`oldest` or :meth:`compact` meets
    them.  A first τ whose runs all left stays in the heap until it comes up."""
    times = cython.declare(list, visibility="public")       # the distinct first τs: a heap
    runs = cython.declare(dict, visibility="public")        # first τ -> its runs, oldest first

    def __init__(self):
        self.times = []
        self.runs = {}

    @cython.ccall
    @cython.locals(run=Run, runs=list)
    def add(self, run: Run) -> None:
        runs = self.runs.get(run.first)
        if runs is None:
            self.runs[run.first] = [run]
            heappush(self.times, run.first)
        else:
            runs.append(run)

    @cython.ccall
    @cython.locals(runs=list)
    def discard(self, run: Run) -> None:
        """Forget ``run`` (dead), found among the runs of its first τ, unless they are
        more than DISCARD_AMONG: then it stays until expiry, :meth:`oldest` or
        :meth:`compact` meets it (finding and deleting it would cost a pass over
        them per run, quadratic when many runs start together)."""
        runs = self.runs.get(run.first)
        if runs is not None and len(runs) <= DISCARD_AMONG:
            for i in range(len(runs)):
                if runs[i] is run:
                    del runs[i]
                    break
            if not runs:
                del self.runs[run.first]

    @cython.ccall
    def first_time(self):
        """The least first τ (of a live run or a dead one not yet dropped); None: no runs."""
        times = self.times
        while times and times[0] not in self.runs:
            heappop(times)
        return times[0] if times else None

    @cython.ccall
    @cython.locals(expired=list)
    def expire(self, horizon: Time) -> list:
        """Remove and return the runs that started before ``horizon``, oldest first."""
        expired = []
        times = self.times
        while times and times[0] < horizon:
            expired.extend(self.runs.pop(heappop(times), ()))
        return expired

    @cython.ccall
    @cython.locals(runs=list, dead=cython.Py_ssize_t, n=cython.Py_ssize_t, run=Run)
    def oldest(self) -> Run | None:
        """The oldest live run (the dead ones before it are dropped); None: none."""
        times = self.times
        while times:
            runs = self.runs.get(times[0])
            if runs is None:
                heappop(times)
                continue
            n = len(runs)
            dead = 0
            while dead < n and runs[dead].dead:
                dead += 1
            if dead < n:
                run = runs[dead]
                # The dead before it go in bulk: drop-oldest kills the first run at each
                # call, and deleting it each time moved all the others (skip-till-any makes
                # 10,000 runs of one start: 80 kB a drop).  A deque costs more on every
                # other path (+3k instructions an event on peers-v skip-till-any).
                if dead >= _DEAD_AT_ONCE or 2 * dead >= n:
                    del runs[:dead]
                return run
            del self.runs[heappop(times)]
        return None

    @cython.ccall
    @cython.locals(live=dict, runs=list, kept=list, run=Run)
    def compact(self) -> None:
        """Forget the dead runs."""
        live = {}
        for first, runs in self.runs.items():
            kept = [run for run in runs if not run.dead]
            if kept:
                live[first] = kept
        self.runs = live
        self.times = list(live)
        heapify(self.times)

    def entries(self) -> list[tuple[Time, Run]]:
        """(first τ, run) for every run, oldest first (``Runtime.snapshot``)."""
        return [(first, run) for first in sorted(self.runs) for run in self.runs[first]]


@cython.cclass
class _GuardIndex:
    """One guard GPM's events in a partition's negation buffer, by their keys under
    ``spec`` (``_guard_spec``, ``_event_keys``): a run whose key is not among
    an event's gets no solution from it, so it tries only the
    events filed under its own values, and those the evaluator could not list.
    Events are added once each, as the buffer grows; those that left the buffer
    stay until the index is made again (a run never looks back that far: they are
    older than its last τ, as every buffered event it could need is newer)."""
    spec = cython.declare(tuple, visibility="public")
    by_key = cython.declare(dict, visibility="public")     # key -> events, in buffer order
    unlisted = cython.declare(list, visibility="public")   # events solution_keys could not answer for
    start = cython.declare(cython.longlong, visibility="public")    # buffer position of its first event
    upto = cython.declare(cython.longlong, visibility="public")     # buffer position it has read up to

    def __init__(self, spec: tuple, start: int):
        self.spec = spec
        self.by_key = {}
        self.unlisted = []
        self.start = self.upto = start


@cython.cclass
class _Partition:
    """Everything of one PARTITION BY key (see "Where the state lives")."""
    key = cython.declare(tuple, visibility="public")
    waiting = cython.declare(dict, visibility="public")
    strict = cython.declare(list, visibility="public")
    pending = cython.declare(list, visibility="public")
    buffer = cython.declare(list, visibility="public")
    buffer_start = cython.declare(cython.longlong, visibility="public")
    buffer_bytes = cython.declare(cython.longlong, visibility="public")
    guard_indexes = cython.declare(dict, visibility="public")
    pending_indexes = cython.declare(dict, visibility="public")
    pending_scans = cython.declare(dict, visibility="public")
    ages = cython.declare(_Ages, visibility="public")
    runs = cython.declare(cython.Py_ssize_t, visibility="public")
    garbage = cython.declare(cython.Py_ssize_t, visibility="public")
    filed = cython.declare(cython.bint, visibility="public")
    dropped = cython.declare(cython.bint, visibility="public")

    def __init__(self, key: tuple):
        self.key = key
        self.waiting = {}        # Edge -> _Waiting
        self.strict = []         # runs whose next timestamp is pending
        self.pending = []        # (deadline, seq, _Pending): a heap by deadline
        self.buffer = []         # events negation guards may need
        self.buffer_start = 0    # how many events have left the buffer: the position of its first
        self.buffer_bytes = 0    # their estimated size (_buffered_bytes), counted in Runtime.state_bytes
        # (made when first needed: a partition per key, most of them without negation)
        self.guard_indexes = None    # (GPM, _guard_spec) -> _GuardIndex
        self.pending_indexes = None  # (guard GPM, _guard_spec) -> key -> pending matches
        self.pending_scans = None    # guard GPM -> the pending matches it cannot be filed for
        self.ages = _Ages()
        self.runs = 0            # live runs and pending matches
        self.garbage = 0         # runs dead since the indexes were last compacted
        self.filed = False       # has an entry in Runtime._deadlines
        self.dropped = False     # no longer in Runtime.partitions


@cython.cclass
class _Step:
    """An edge as runs take it: what the per-run work reads of the edge, its atom
    and its target, made once per query (C attributes when compiled)."""
    edge = cython.declare(object, visibility="public")
    index = cython.declare(object, visibility="public")
    bit = cython.declare(object, visibility="public")
    strict = cython.declare(cython.bint, visibility="public")
    next = cython.declare(cython.bint, visibility="public")
    loop = cython.declare(cython.bint, visibility="public")
    guards = cython.declare(tuple, visibility="public")
    streams = cython.declare(frozenset, visibility="public")
    kind = cython.declare(object, visibility="public")
    gpms = cython.declare(tuple, visibility="public")
    gpm_streams = cython.declare(tuple, visibility="public")
    single = cython.declare(object, visibility="public")
    reads = cython.declare(tuple, visibility="public")
    target_place = cython.declare(_Place, visibility="public")
    kleene_atom = cython.declare(object, visibility="public")
    accepting = cython.declare(cython.bint, visibility="public")
    final_guards = cython.declare(tuple, visibility="public")
    continues = cython.declare(cython.bint, visibility="public")
    hands_over = cython.declare(cython.bint, visibility="public")

    def __init__(self, edge: Edge, only: bool):
        self.edge = edge
        self.index = edge.index
        self.bit = 1 << edge.index
        self.strict = edge.strategy == STRICT
        self.next = edge.strategy == NEXT
        self.loop = edge.loop
        self.guards = tuple(edge.guards)
        self.streams = frozenset(edge.atom.streams)
        self.kind = edge.atom.kind
        self.gpms = tuple(edge.atom.gpms)
        self.gpm_streams = tuple([gpm.streams for gpm in self.gpms])
        self.single = self.gpms[0] if len(self.gpms) == 1 else None   # the atom is this one GPM
        # per GPM: what its FILTERs read and it does not bind (a conjunction injects them)
        self.reads = tuple([tuple(sorted(gpm.filter_vars.keys() - gpm.bindable)) for gpm in self.gpms])
        target = edge.target
        self.target_place = None             # (set once every state's _Place is made)
        self.kleene_atom = target.kleene_atom
        self.accepting = target.accepting
        self.final_guards = tuple(target.final_guards)
        self.continues = bool(target.edges)       # runs at the target wait for more
        # the run it extends dies as it fires (its state's only edge, spent by firing):
        # the new run holds that run's events alone
        self.hands_over = only and (self.strict or self.next)


@cython.cclass
class Runtime:
    """Executes one compiled query over a time-ordered event sequence.

    Feed whole batches with :meth:`process_batch` (all events of one τ, in
    increasing τ) and call :meth:`finish` at the end of the input.  Matches
    go to ``emit``.  ``limits`` caps the state (:class:`StateLimits`; its
    defaults when not given); a cap reached under the ``fail`` policy raises
    :class:`StateLimitError` from :meth:`process_batch`.
    """
    q = cython.declare(object, visibility="public")
    nfa = cython.declare(object, visibility="public")
    evaluator = cython.declare(object, visibility="public")
    emit = cython.declare(object, visibility="public")
    window = cython.declare(object, visibility="public")
    tumbling = cython.declare(object, visibility="public")
    tumbling_start = cython.declare(object, visibility="public")
    window_end = cython.declare(object, visibility="public")
    partitions = cython.declare(dict, visibility="public")
    pending_heap = cython.declare(list, visibility="public")
    _seq = cython.declare(object, visibility="public")
    needs_buffer = cython.declare(object, visibility="public")
    active_runs = cython.declare(cython.longlong, visibility="public")
    peak_runs = cython.declare(cython.longlong, visibility="public")
    peak_keys = cython.declare(cython.longlong, visibility="public")
    state_bytes = cython.declare(cython.longlong, visibility="public")
    dropped_runs = cython.declare(cython.longlong, visibility="public")
    before_start = cython.declare(cython.longlong, visibility="public")
    limits = cython.declare(object, visibility="public")
    _max_runs = cython.declare(cython.longlong, visibility="public")
    _max_partition_runs = cython.declare(cython.longlong, visibility="public")
    _max_state_bytes = cython.declare(cython.longlong, visibility="public")
    _max_join_steps = cython.declare(cython.longlong, visibility="public")
    _batch_matches = cython.declare(list, visibility="public")
    _batching = cython.declare(cython.bint, visibility="public")
    _memo = cython.declare(dict, visibility="public")
    _locals = cython.declare(dict, visibility="public")
    _starts = cython.declare(object, visibility="public")
    _deadlines = cython.declare(list, visibility="public")
    _stale_deadlines = cython.declare(cython.longlong, visibility="public")
    _batch_streams = cython.declare(object, visibility="public")
    _batch_stream = cython.declare(object, visibility="public")
    _event_streams = cython.declare(list, visibility="public")
    _prefetching = cython.declare(object, visibility="public")
    _evaluate_one = cython.declare(object, visibility="public")
    _hold_summaries = cython.declare(object, visibility="public")
    _holding = cython.declare(cython.bint, visibility="public")
    _solution_keys = cython.declare(object, visibility="public")
    _certain = cython.declare(dict, visibility="public")
    _equalities = cython.declare(object, visibility="public")
    _equality_key = cython.declare(object, visibility="public")
    _probes = cython.declare(dict, visibility="public")
    _placement = cython.declare(object, visibility="public")
    _partition_by = cython.declare(object, visibility="public")
    _standalone = cython.declare(object, visibility="public")
    _root = cython.declare(Run, visibility="public")
    _batch_keys = cython.declare(dict, visibility="public")
    _waiting_on = cython.declare(dict, visibility="public")
    _places = cython.declare(dict, visibility="public")
    _proven = cython.declare(dict, visibility="public")
    _standalone_gpm = cython.declare(object, visibility="public")
    _standalone_event = cython.declare(object, visibility="public")
    _standalone_solutions = cython.declare(list, visibility="public")
    _taken = cython.declare(set, visibility="public")
    _guard_gpms = cython.declare(tuple, visibility="public")
    _guard_steps = cython.declare(cython.longlong, visibility="public")
    _guard_cut = cython.declare(object, visibility="public")

    def __init__(self, compiled: CompiledQuery, evaluator: GpmEvaluator,
                 emit: Callable[[Match], None], start: Time | None = None,
                 limits: StateLimits | None = None):
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
        self.active_runs = 0         # live runs and pending matches
        self.peak_runs = 0
        self.peak_keys = 0
        self.state_bytes = 0         # their estimated size (_run_bytes)
        self.dropped_runs = 0        # partial matches a limit dropped
        self.before_start = 0        # events before the first TUMBLING window (start)
        self.limits = limits if limits is not None else StateLimits()
        # The counters and caps are C integers when compiled: a cap beyond 2**62 is none.
        unlimited = 1 << 62
        self._max_runs = min(self.limits.max_runs or unlimited, unlimited)
        self._max_partition_runs = min(self.limits.max_partition_runs or unlimited, unlimited)
        self._max_state_bytes = min(self.limits.max_state_bytes or unlimited, unlimited)
        self._max_join_steps = min(self.limits.max_join_steps or unlimited, unlimited)
        self._batch_matches: list[Match] = []      # matches of the batch being processed
        self._batching = False
        self._memo: dict[tuple[GpmPattern, Event, frozenset], list[Solution]] = {}
        self._locals: dict[tuple[int, tuple], tuple[Solution, Solution]] = {}    # per batch: see _local
        self._taken: set[Event] = set()      # events of the batch a run holds (counted once: _held_once)
        # every guard GPM, once: an event none of them can match is not buffered (_guarded)
        self._guard_gpms = tuple({gpm: None for state in self.nfa.states for gpms in
                                  [state.final_guards, *[edge.guards for edge in state.edges]] for gpm in gpms})
        # per batch: the buffered events mid-sequence guards were tried on, counted
        # against --max-join-steps; the guard whose check that cap cut short (_guard_hit)
        self._guard_steps = 0
        self._guard_cut = None
        # A batch's start matches by partition key, when it has several keys (see _start)
        self._starts: dict[tuple[_Step, tuple], dict[tuple, list]] | None = None
        self._deadlines: list[tuple[Time, int, _Partition]] = []   # partitions by oldest first τ
        self._stale_deadlines = 0                   # entries of dropped partitions in it
        self._batch_streams: set[str] = set()
        self._batch_stream: str | None = None     # the batch's one stream (None: several)
        self._event_streams: list[str] = []       # the stream of each event of a batch of several, in order
        # evaluators that answer many mappings in one query get them together
        self._prefetching = getattr(evaluator, "batches_mappings", False)
        self._evaluate_one = None if self._prefetching else getattr(evaluator, "evaluate_one", None)
        limit_solutions = getattr(evaluator, "limit_solutions", None)
        if limit_solutions is not None:
            # Each solution may become a run: a GPM's solutions on one event are made up
            # to the same cap (_too_many_solutions), not all before a limit sees them.
            limit_solutions(self.limits.max_runs)
        limit_steps = getattr(evaluator, "limit_steps", None)
        if limit_steps is not None:
            limit_steps(self.limits.max_join_steps)
        # A negation guard checks each run against every buffered event: an evaluator
        # that keeps only the last few events' summaries would make them again per run
        # (see _guard_hit).
        self._hold_summaries = getattr(evaluator, "hold_summaries", None) if self.needs_buffer else None
        self._holding = False
        # ... unless it lists each event's solution keys: then guards index the buffer
        self._solution_keys = getattr(evaluator, "solution_keys", None) \
            if self.needs_buffer and hasattr(evaluator, "certain_variables") else None
        # certain_variables and equalities, asked once
        self._certain: dict[GpmPattern, tuple[frozenset[str], tuple]] = {}
        self._equality_key = getattr(evaluator, "equality_key", None)
        self._equalities = getattr(evaluator, "equalities", None) if self._equality_key is not None else None
        self._probes: dict[Edge, Probe] = self._make_probes()
        self._placement = distinct_placement(compiled, evaluator)
        self._partition_by = compiled.partition_by
        self._standalone = self._standalone_on      # (made once: a bound method per event costs)
        self._batch_keys: dict[Edge, dict | None] = {}     # per partition batch: see _offered
        self._proven: dict[Run, int] = {}      # per partition batch: see _visit
        # The last standalone solutions evaluate_one gave (the partition key and the
        # start of a run ask for those of one GPM on one event in a row)
        self._standalone_gpm = self._standalone_event = None
        self._standalone_solutions = []
        self._waiting_on: dict[str, list[Edge]] = {}       # stream -> non-strict edges reading it
        self._places: dict[State, _Place] = {}
        for state in self.nfa.states:
            steps = tuple([_Step(edge, len(state.edges) == 1) for edge in state.edges])
            unprobed = (None,) * len(steps) if all(self._asked_probe(step) is None for step in steps) else None
            self._places[state] = _Place(state, steps, any(step.strict for step in steps), unprobed)
        for place in self._places.values():
            for step in place.steps:
                step.target_place = self._places[step.edge.target]
        # what new runs extend: no events, no bindings (never registered)
        self._root = Run(self._places[self.nfa.initial], {}, None, (), 0, 0, (), ())
        for state in self.nfa.states:
            for edge in state.edges:
                if edge.strategy != STRICT:
                    for stream in edge.atom.streams:
                        self._waiting_on.setdefault(stream, []).append(edge)

    # -- driving ---------------------------------------------------------

    @cython.ccall
    def process_batch(self, time: Time, events: list[Event]) -> None:
        # A batch's matches go out together, in a natural order that does not depend
        # on how runs are indexed: by match time, then by the times of their events.
        self._batching = True
        try:
            self._process_batch(time, events)
        finally:
            self._batching = False
            if self._holding:
                self._hold_summaries(False)
                self._holding = False
        matches = self._batch_matches
        if matches:
            if len(matches) > 1:
                _sort_matches(matches)
            for match in matches:
                self.emit(match)
            matches.clear()

    @cython.cfunc
    def _process_batch(self, time: Time, events: list[Event]) -> None:
        if self._memo:
            self._memo = {}
        if self._taken:
            self._taken.clear()
        if self._locals:
            self._locals = {}
        self._guard_steps = 0
        if self.tumbling:
            if self.tumbling_start is not None and time < self.tumbling_start:
                self.before_start += len(events)
                return      # before the first tumbling window
            self._tumble(time)
        elif self.window is not None:
            self._expire(time)
        self._emit_due_pending(time)
        if self._partition_by:
            if len(events) == 1:        # (the common batch: each of its keys gets it whole)
                groups = [(key, events) for key in partition_keys(self._partition_by, self._placement,
                                                                  events[0], self._standalone)]
            else:
                by_key: dict = {}
                for event in events:
                    for key in partition_keys(self._partition_by, self._placement, event, self._standalone):
                        by_key.setdefault(key, []).append(event)
                groups = list(by_key.items())
        else:
            groups = [((), events)]
        self._starts = {} if len(groups) > 1 else None
        for key, group in groups:
            part = self.partitions.get(key)
            if part is None:
                part = self.partitions[key] = _Partition(key)
            self._process_partition(part, time, group)
            self._settle(part)
        self.peak_runs = max(self.peak_runs, self.active_runs)
        if self._partition_by:
            self.peak_keys = max(self.peak_keys, len(self.partitions))

    def finish(self) -> None:
        """End of input: pending trailing-negation matches are emitted."""
        for _, _, pending in sorted(self.pending_heap, key=_heap_order):
            if not pending.killed:
                part = self._retire(pending)
                self._emit_run(pending.run, pending.deadline)
                self._settle(part)
        self.pending_heap.clear()

    @property
    def live_keys(self) -> int:
        """PARTITION BY keys holding state now (none without PARTITION BY)."""
        return len(self.partitions) if self._partition_by else 0

    # -- checkpoints ---------------------------------------------------------

    def snapshot(self, out) -> dict:
        """Everything this runtime holds, as plain data (``runtime/checkpoint.py``
        describes the format): the partitions in their order, with their indexes
        and heaps as they are (dead runs included, so that a restored runtime
        visits, expires and emits exactly as this one would), the heaps of the
        query and the counters.  ``out`` (a ``checkpoint.SnapshotWriter``) turns
        terms, events and mappings into references to its tables.  Taken between
        two batches; the per-batch memo and probe keys are not kept."""
        runs: dict[int, int] = {}
        run_list: list = []
        pendings: dict[int, int] = {}
        pending_list: list = []
        parts: dict[int, int] = {}
        part_list: list = []
        time = out.time

        def run_ref(run: Run) -> int:
            ref = runs.get(id(run))
            if ref is None:
                ref = runs[id(run)] = len(run_list)
                run_list.append(None)
                run_list[ref] = [run.state.id, out.mapping(run.mu),
                                 None if run.base_mu is None else out.mapping(run.base_mu),
                                 [out.event(e) for e in run.events], time(run.first), time(run.last),
                                 [[atom, [out.mapping(s) for s in its]] for atom, its in run.iterations],
                                 [out.term(t) for t in run.partition], run.spent, run.dead]
            return ref

        def pending_ref(pending: _Pending) -> int:
            ref = pendings.get(id(pending))
            if ref is None:
                ref = pendings[id(pending)] = len(pending_list)
                pending_list.append([run_ref(pending.run), time(pending.deadline), pending.killed])
            return ref

        def part_ref(part: _Partition) -> int:
            ref = parts.get(id(part))
            if ref is not None:
                return ref
            ref = parts[id(part)] = len(part_list)
            part_list.append(None)
            waiting = []
            for edge, w in part.waiting.items():
                buckets = [[[run_ref(r) for r in b.sorted], [run_ref(r) for r in b.unsorted]]
                           for b in w.keyed.values()]
                waiting.append([edge_source[id(edge)], edge.index, buckets, [run_ref(r) for r in w.loose]])
            part_list[ref] = {
                "key": [out.term(t) for t in part.key], "waiting": waiting,
                "strict": [run_ref(r) for r in part.strict],
                "pending": [[time(d), seq, pending_ref(p)] for d, seq, p in part.pending],
                "buffer": [out.event(e) for e in part.buffer],
                "ages": [[time(t), seq, run_ref(r)] for seq, (t, r) in enumerate(part.ages.entries())],
                "runs": part.runs, "garbage": part.garbage, "filed": part.filed, "dropped": part.dropped}
            return ref

        edge_source = {id(edge): state.id for state in self.nfa.states for edge in state.edges}
        seq = next(self._seq)
        self._seq = itertools.count(seq)
        return {
            "partitions": [part_ref(p) for p in self.partitions.values()],
            "pending_heap": [[time(d), s, pending_ref(p)] for d, s, p in self.pending_heap],
            "deadlines": [[time(t), s, part_ref(p)] for t, s, p in self._deadlines],
            "parts": part_list, "runs": run_list, "pendings": pending_list,
            "seq": seq, "stale_deadlines": self._stale_deadlines,
            "window_end": None if self.window_end is None else time(self.window_end),
            "tumbling_start": None if self.tumbling_start is None else time(self.tumbling_start),
            "active_runs": self.active_runs, "peak_runs": self.peak_runs, "peak_keys": self.peak_keys,
            "state_bytes": self.state_bytes, "dropped_runs": self.dropped_runs,
            "before_start": self.before_start}

    def restore(self, data: dict, inp) -> None:
        """Become the runtime :meth:`snapshot` saved (``inp``: a
        ``checkpoint.SnapshotReader`` over the same tables).  A run's probe keys
        and sorted numbers are computed again, as registering it did, and so is
        ``state_bytes`` (each event counted for the first run holding it): the
        estimate may have changed since the checkpoint was written."""
        time = inp.time
        states = {state.id: state for state in self.nfa.states}
        runs = []
        self._taken = set()
        for state_id, mu, base_mu, events, first, last, iterations, partition, spent, dead in data["runs"]:
            run = Run(self._places[states[state_id]], inp.mapping(mu), None if base_mu is None else inp.mapping(base_mu),
                      tuple(inp.event(e) for e in events), time(first), time(last),
                      tuple((atom, tuple(inp.mapping(s) for s in its)) for atom, its in iterations),
                      tuple(inp.term(t) for t in partition), spent, dead)
            run.keys = self._probe_keys(run)
            run.held = self._held_once(run.events)
            run.size = _run_bytes(run)
            runs.append(run)
        self._taken = set()
        pendings = [_Pending(runs[run], runs[run].state.final_guards, time(deadline), killed)
                    for run, deadline, killed in data["pendings"]]
        parts = []
        state_bytes = 0
        for saved in data["parts"]:
            part = _Partition(tuple(inp.term(t) for t in saved["key"]))
            for state_id, index, buckets, loose in saved["waiting"]:
                edge = states[state_id].edges[index]
                waiting = part.waiting[edge] = _Waiting(loose=[runs[r] for r in loose])
                probe = self._probes.get(edge)
                for sorted_refs, unsorted_refs in buckets:
                    bucket = _Bucket(sorted=[runs[r] for r in sorted_refs],
                                     unsorted=[runs[r] for r in unsorted_refs])
                    if bucket.sorted:
                        bucket.numbers = [self._sort_number(probe, r.base_mu if edge.loop else r.mu)
                                          for r in bucket.sorted]
                    some = (bucket.sorted or bucket.unsorted)[0]
                    waiting.keyed[some.keys[edge.index]] = bucket
            part.strict = [runs[r] for r in saved["strict"]]
            part.pending = [(time(d), seq, pendings[p]) for d, seq, p in saved["pending"]]
            for entry in part.pending:
                if not entry[2].killed:
                    self._file_pending(part, entry[2])
            part.buffer = [inp.event(e) for e in saved["buffer"]]
            for event in part.buffer:
                part.buffer_bytes += _buffered_bytes(event)
            for _, _, r in sorted([(time(t), seq, r) for t, seq, r in saved["ages"]], key=_heap_order):
                part.ages.add(runs[r])          # (by first τ, then as registered)
            part.runs, part.garbage = saved["runs"], saved["garbage"]
            part.filed, part.dropped = saved["filed"], saved["dropped"]
            if not part.dropped:        # (a dropped one's buffer counts no more)
                state_bytes += part.buffer_bytes + sum([r.size for _, r in part.ages.entries() if not r.dead]) + \
                    sum([entry[2].run.size for entry in part.pending if not entry[2].killed])
            parts.append(part)
        self.partitions = {parts[p].key: parts[p] for p in data["partitions"]}
        self.pending_heap = [(time(d), s, pendings[p]) for d, s, p in data["pending_heap"]]
        self._deadlines = [(time(t), s, parts[p]) for t, s, p in data["deadlines"]]
        self._seq = itertools.count(data["seq"])
        self._stale_deadlines = data["stale_deadlines"]
        self.window_end = None if data["window_end"] is None else time(data["window_end"])
        self.tumbling_start = None if data["tumbling_start"] is None else time(data["tumbling_start"])
        self.active_runs, self.peak_runs = data["active_runs"], data["peak_runs"]
        self.peak_keys, self.state_bytes = data["peak_keys"], state_bytes
        self.dropped_runs = data["dropped_runs"]
        self.before_start = data.get("before_start", 0)       # (absent from older checkpoints)

    # -- per partition ---------------------------------------------------

    @cython.cfunc
    @cython.locals(part=_Partition, run=Run)
    def _process_partition(self, part: _Partition, time: Time, events: list[Event]) -> None:
        if part.pending:
            self._check_pending(part, events)
        if len(events) == 1:
            one = events[0].stream
        else:
            self._event_streams = [e.stream for e in events]
            streams = self._batch_streams = set(self._event_streams)
            one = events[0].stream if len(streams) == 1 else None
        self._batch_stream = one
        if self._batch_keys:
            self._batch_keys = {}
        if self._proven:
            self._proven = {}
        candidates: dict[Run, Run] = {}     # (a run hashes by identity, in C)
        if part.strict:
            for run in part.strict:
                run.turn = True
                candidates[run] = run
            part.strict = []
        if one is not None:
            edges = self._waiting_on.get(one, ())
        else:
            edges = {edge: None for stream in streams for edge in self._waiting_on.get(stream, ())}
        for edge in edges:
            waiting = part.waiting.get(edge)
            if waiting is None:
                continue
            offered = self._offered(edge, events)
            if offered is None:
                visits = [(key, None) for key in waiting.keyed]
            elif len(offered) > len(waiting.keyed):
                visits = [(key, offered[key]) for key in waiting.keyed if key in offered]
            else:
                visits = offered.items()
            upward = edge in self._probes and self._probes[edge].upward
            for key, bounds in visits:
                bucket = waiting.keyed.get(key)
                if bucket is not None and not self._visit(edge, bucket, bounds, upward, candidates):
                    del waiting.keyed[key]
            if waiting.loose:
                waiting.loose = self._collect(edge, waiting.loose, candidates)
        live = [run for run in candidates.values() if not run.dead]
        if self._prefetching:
            self._prefetch(live, events)
        created: list[Run] = []
        spent: list[Run] = []
        for run in live:
            # (unless a limit dropped it meanwhile)
            if not run.dead and self._advance(part, run, time, events, created, run.turn):
                spent.append(run)
            run.turn = False
        self._start(part, time, events, created)
        for run in created:
            self._register(part, run)
        # The runs that spent every edge leave their first τ's list after their successors
        # joined it: under strict contiguity the list and its heap entry were otherwise
        # dropped and made again for each run.
        for run in spent:
            part.ages.discard(run)
        if self.needs_buffer:
            self._keep_for_guards(part, events)

    @staticmethod
    @cython.locals(run=Run)
    def _collect(edge: Edge, runs: list[Run], candidates: dict[Run, Run]) -> list[Run]:
        """Add the runs still waiting on ``edge`` to ``candidates``; the list without the others."""
        kept = []
        spent = 1 << edge.index
        for run in runs:
            if not (run.dead or run.spent & spent):
                kept.append(run)
                candidates[run] = run
        return kept

    @cython.cfunc
    @cython.locals(bucket=_Bucket, run=Run, runs=list, numbers=list, i=cython.Py_ssize_t,
                   low=cython.Py_ssize_t, high=cython.Py_ssize_t, proven_low=cython.Py_ssize_t,
                   proven_high=cython.Py_ssize_t, proven=dict)
    def _visit(self, edge: Edge, bucket: _Bucket, bounds: tuple | None, upward: bool,
               candidates: dict[Run, Run]) -> bool:
        """Add the bucket's runs the batch may extend to ``candidates`` (sorted runs
        beyond ``bounds``' limit cannot be; those strictly beyond its proof satisfy the
        probe's comparison, noted in ``_proven``), forgetting dead ones; False when it
        is empty."""
        if bucket.unsorted:
            bucket.unsorted = self._collect(edge, bucket.unsorted, candidates)
        runs = bucket.sorted
        if runs:
            numbers = bucket.numbers
            low, high = 0, len(runs)
            proven_low, proven_high = 0, 0      # (none)
            if bounds is not None:
                if upward:      # ?compared < ?against (or <=): runs at or above the least ?compared
                    low = _bisect(numbers, bounds[0], False)
                    proven_low, proven_high = _bisect(numbers, bounds[1], True), high
                else:           # ?compared > ?against (or >=): runs at or below the greatest
                    high = _bisect(numbers, bounds[0], True)
                    proven_low, proven_high = low, _bisect(numbers, bounds[1], False)
            # one pass: the live runs become candidates, the others leave the bucket
            spent = 1 << edge.index
            proven = self._proven
            kept, kept_numbers = [], []
            for i in range(low, high):
                run = runs[i]
                if not (run.dead or run.spent & spent):
                    kept.append(run)
                    kept_numbers.append(numbers[i])
                    candidates[run] = run
                    if proven_low <= i < proven_high:
                        proven[run] = proven.get(run, 0) | spent
            if len(kept) != high - low:
                numbers[low:high] = kept_numbers
                runs[low:high] = kept
        return bool(bucket.sorted or bucket.unsorted)

    @cython.cfunc
    @cython.locals(probe=Probe)
    def _offered(self, edge: Edge, events: list[Event]) -> dict | None:
        """What the batch offers ``edge``'s runs: probe key -> the bounds on their
        number (``_bounds``; ``None``: none).  ``None``: not known, every run may extend."""
        if edge in self._batch_keys:
            return self._batch_keys[edge]
        probe = self._probes.get(edge)
        offered: dict | None = None
        if probe is not None:
            solutions: dict[tuple, list] = {}
            for event in events:
                if event.stream in probe.gpm.streams:
                    found = self.evaluator.solution_keys(probe.gpm, event, probe.variables)
                    if found is None:
                        solutions = None
                        break
                    for key, rows in found.items():
                        solutions[key] = solutions[key] + rows if key in solutions else rows
            if solutions is not None:
                offered = {key: self._bounds(probe, rows) for key, rows in solutions.items()}
        self._batch_keys[edge] = offered
        return offered

    @cython.cfunc
    @cython.locals(probe=Probe, least=cython.double, greatest=cython.double, x=cython.double)
    def _bounds(self, probe: Probe, solutions: list) -> tuple | None:
        """(limit, proof) for runs whose ?against the probe's comparison reads, from the
        ``solutions``' numbers in ?compared: a run beyond the limit fails the comparison
        with every solution (for ``<``: below the least), one strictly beyond the proof
        satisfies it with every solution (for ``<``: above the greatest).  Numbers are
        floats, rounded monotonically: a strict float order is the values' order, a
        tie decides nothing.  ``None``: no bounds (no comparison, or not a number)."""
        if probe.compared is None or not solutions:
            return None
        order_number = self.evaluator.order_number
        least = greatest = 0.0
        for i, s in enumerate(solutions):      # (a loop: min() and max() of a list are calls)
            number = order_number(s[probe.compared])
            if number is None:
                return None
            x = number
            if i == 0 or x < least:
                least = x
            if i == 0 or x > greatest:
                greatest = x
        return (least, greatest) if probe.upward else (greatest, least)

    @cython.cfunc
    @cython.locals(step=_Step)
    def _reads_batch(self, step: _Step) -> cython.bint:
        """Whether ``step``'s atom reads a stream of the batch (mostly one: a set lookup)."""
        if self._batch_stream is not None:
            return self._batch_stream in step.streams
        return not step.streams.isdisjoint(self._batch_streams)

    @cython.cfunc
    @cython.locals(step=_Step)
    def _start(self, part: _Partition, time: Time, events: list[Event], created: list[Run]) -> None:
        """New runs: every way an initial edge matches the batch (whatever the
        strategy: a run starts at any event)."""
        for step in self._root.place.steps:
            if self._reads_batch(step):
                if self._starts is None:
                    matches = self._match(step, _EMPTY, events, True)
                else:
                    matches = self._starts_by_key(step, events).get(part.key, ())
                # (the solution itself becomes the run's μ: no μ is ever modified, and the
                # evaluator's solutions are not either)
                for solution, used in matches:
                    self._extend(part, self._root, step, solution, solution, used, time, created, True)

    @cython.cfunc
    def _starts_by_key(self, step: _Step, events: list[Event]) -> dict:
        """``step``'s start matches on ``events``, by their PARTITION BY key, found once
        per batch: an event of many keys (300,000 companies in one graph) goes to as
        many partitions, and each taking every match to keep its own was quadratic
        (``_extend`` drops a start of another key)."""
        found = self._starts.get((step, tuple(events)))
        if found is None:
            found = self._starts[(step, tuple(events))] = {}
            variables = self._partition_by
            for match in self._match(step, _EMPTY, events, True):
                key = _key_of(match[0], variables)
                matches = found.get(key)
                if matches is None:
                    found[key] = [match]
                else:
                    matches.append(match)
        return found

    @cython.cfunc
    @cython.locals(part=_Partition, run=Run, step=_Step)
    def _advance(self, part: _Partition, run: Run, time: Time, events: list[Event],
                 created: list[Run], strict_turn: bool) -> cython.bint:
        """Try every live edge of ``run`` on the batch; spend edges per strategy.  Whether
        it spent them all (killed: the caller takes it out of ``part.ages``)."""
        steps = run.place.steps
        alive = ~run.spent          # the edges alive before this batch (the loop spends some)
        for step in steps:
            if not alive & step.bit:
                continue
            if step.strict and not strict_turn:
                run.spent |= step.bit
                continue
            if not self._reads_batch(step):
                if step.strict:
                    run.spent |= step.bit
                continue
            base = run.base_mu if step.loop else run.mu
            # An evaluator answering one mapping at the cost of a lookup (evaluate_one)
            # finds a failing join as fast as the probe would: asking what the batch
            # offers first only pays when each evaluation is a query.
            key = None if self._evaluate_one is not None else run.keys[step.index]
            offered = None if key is None else self._offered(step.edge, events)
            if offered is not None and key not in offered:
                extensions = ()     # the join fails: no standalone solution has the run's values
            else:
                # the probe's comparison, when the run's place in its bucket proved it (_visit)
                holds = self._probes[step.edge].comparison \
                    if self._proven and self._proven.get(run, 0) & step.bit else None
                extensions = self._match(step, base, events, False, holds)
            if step.strict or (step.next and extensions):
                run.spent |= step.bit
            for solution, used in extensions:
                mu = {**base, **solution}
                if step.guards and self._guard_hit(part, step.guards, mu, run.last, time):
                    if self._guard_cut is not None:
                        self._guard_cut_short(events)
                    continue
                self._extend(part, run, step, mu, solution, used, time, created, False)
        if run.spent == (1 << len(steps)) - 1 and not run.dead:
            self._kill(part, run)
            return True
        return False

    @cython.cfunc
    @cython.locals(part=_Partition, run=Run, new=Run, step=_Step)
    def _extend(self, part, run: Run, step: _Step, mu, solution, used, time, created, is_root) -> None:
        """The run ``run`` goes on by ``step`` with the evaluator's ``solution`` (``mu``:
        the run's bindings with it): a match, a new run, or both."""
        iterations = run.iterations
        base_mu = None
        if step.kleene_atom is not None:
            base_mu = run.base_mu if step.loop else run.mu
            iterations = _append_iteration(iterations, step.kleene_atom, self._local(solution, base_mu))
        partition = part.key
        if self._partition_by and (is_root or step.loop):
            # a Kleene iteration binds its own values too (the key may be local to it)
            if not _has_key(mu, self._partition_by, part.key):
                return      # this solution belongs to another partition's run
        events = run.events + used
        if step.accepting and not step.final_guards:
            self._emit_match(time, mu, events, iterations)
            if not step.continues:
                return      # (a match no run goes on from makes no run)
        new = _new_run(step.target_place, mu, base_mu, events, run.first if not is_root else time,
                       time, iterations, partition)
        # Each event counts once, for the first run that takes it; a run that dies as
        # it is extended hands its count over (else its events, held on, counted for none).
        new.held = self._held_once(used) + (run.held if step.hands_over else 0)
        if step.accepting and step.final_guards:
            self._add_pending(part, new, step.final_guards)
        if step.continues:
            created.append(new)

    @cython.cfunc
    @cython.locals(new=list)
    def _local(self, solution, base_mu):
        """What a Kleene iteration binds: ``solution`` without the variables of
        ``base_mu``, one dict for all the runs the batch extends with ``solution``
        (the evaluators share it among them).  _run_bytes counts iterations'
        bindings as shared, and a copy per run is not: under drop-oldest the live
        runs are the newest, of no common ancestor, and their copies grew by a
        dict per run at every event, unbounded by --max-state-memory."""
        new = [v for v in solution if v not in base_mu]
        if len(new) == len(solution):
            return solution
        key = (id(solution), tuple(new))
        found = self._locals.get(key)
        if found is None:
            # (the entry holds the solution, so its id is not reused within the batch)
            found = self._locals[key] = (solution, {v: solution[v] for v in new})
        return found[1]

    @cython.cfunc
    @cython.locals(step=_Step, streams=list, i=cython.Py_ssize_t, n=cython.Py_ssize_t, k=cython.Py_ssize_t)
    def _match(self, step: _Step, mu: dict, events: list[Event], standalone: bool, holds=None):
        """The ways ``step``'s atom matches the batch under ``mu``: (solution, events used).
        The callers have checked that the atom reads a stream of the batch.  ``holds``:
        a comparison of the edge's probe known to hold (see ``_bounds``).  ``events`` is
        the batch of ``_process_partition`` (see ``_streams_of``)."""
        if step.single is not None and len(events) == 1:
            # the common case: one GPM on one event, of a stream the GPM reads
            used = (events[0],)
            return [(s, used) for s in self._evaluate(step.single, events[0], mu, standalone, holds)]
        if step.kind == CONJUNCTION:
            return self._match_all(step, mu, events, standalone)
        streams = self._streams_of(events)
        n = len(events)
        out = []
        seen = set() if step.kind == DISJUNCTION else None
        for k in range(len(step.gpms)):
            gpm = step.gpms[k]
            gpm_streams = step.gpm_streams[k]
            for i in range(n):
                if streams[i] not in gpm_streams:
                    continue
                event = events[i]
                for s in self._evaluate(gpm, event, mu, standalone):
                    if seen is not None:
                        key = (frozenset(s.items()), event)
                        if key in seen:
                            continue
                        seen.add(key)
                    out.append((s, (event,)))
        return out

    @cython.cfunc
    def _streams_of(self, events: list[Event]) -> list:
        """The stream of each of ``events``, the batch of ``_process_partition``: read
        once per batch there when it has several events (an attribute of each event,
        which the matchers would otherwise read for each GPM and partial match)."""
        return self._event_streams if len(events) > 1 else [events[0].stream]

    @cython.cfunc
    @cython.locals(step=_Step, streams=list, partial=list, grown=list, solution=dict, injected=dict,
                   joined=cython.bint, most=cython.Py_ssize_t, past=cython.Py_ssize_t, k=cython.Py_ssize_t,
                   i=cython.Py_ssize_t, n=cython.Py_ssize_t)
    def _match_all(self, step: _Step, mu: dict, events: list[Event], standalone: bool) -> list:
        """``_match`` for a conjunction: the operands' solutions joined.

        Each operand is evaluated under μ and only the bindings its FILTERs read
        from the operands before it (semantics.md open point 2), so that the result
        does not depend on which independent operand the compiler put first (an
        OPTIONAL sees injected bindings).  A solution joined with the empty partial
        match (the first operand's) is the partial match as it is: no solution is
        ever modified.  The combinations are bounded by --max-runs: each would be
        a run or a match, and a product of operands (3,000 solutions each on one
        event: 9 million) would otherwise fill the memory before any run is counted."""
        streams = self._streams_of(events)
        n = len(events)
        most = self._max_runs
        partial = _NOTHING_MATCHED
        for k in range(len(step.gpms)):
            gpm = step.gpms[k]
            gpm_streams = step.gpm_streams[k]
            reads = step.reads[k]
            grown = []
            past = 0
            for solution, used in partial:
                joined = len(solution) != 0
                injected = None
                if joined:
                    for v in reads:
                        t = solution.get(v)
                        if t is not None:
                            if injected is None:
                                injected = {}
                            injected[v] = t
                merged = mu if injected is None else {**mu, **injected}
                for i in range(n):
                    if streams[i] not in gpm_streams:
                        continue
                    event = events[i]
                    for s in self._evaluate(gpm, event, merged, standalone and injected is None):
                        if joined and _conflict(solution, s):
                            continue
                        if len(grown) >= most:
                            past += 1
                            continue
                        if joined:
                            grown.append(({**solution, **s}, used if event in used else used + (event,)))
                        else:
                            grown.append((s, (event,)))
            if past:
                self._too_many_combinations(step, events, past)
            if not grown:
                return grown
            partial = grown
        return partial

    @cython.cfunc
    def _prefetch(self, runs: list[Run], events: list[Event]) -> None:
        """Evaluate, one query per (GPM, event), what the runs' edges will ask.

        Runs waiting on the same GPM differ only in their mappings, which
        the evaluator takes together; identical restricted mappings are
        asked once.  ``_evaluate`` then finds the answers in the memo.
        """
        requests: dict[tuple[GpmPattern, Event], dict[frozenset, dict]] = {}
        for run in runs:
            for edge in run.alive_edges():
                if edge.atom.kind == CONJUNCTION or (edge.strategy == STRICT and not run.turn):
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
            try:
                answers = self.evaluator.evaluate(gpm, event, list(by_key.values()))
            except TooManySolutions:
                continue        # (_evaluate asks each mapping again, and applies the policy)
            for key, solutions in zip(by_key, answers):
                self._memo[(gpm, event, key)] = solutions

    @cython.cfunc
    def _evaluate(self, gpm: GpmPattern, event: Event, mu: dict, standalone: bool,
                  holds=None) -> list[Solution]:
        """Solutions of ``gpm`` on ``event`` under ``mu``, memoised for the batch
        unless the evaluator answers one mapping at the cost of a lookup (which is then
        told of a comparison that ``holds``)."""
        if self._evaluate_one is not None:
            try:
                if holds is not None:
                    return self._evaluate_one(gpm, event, mu, holds)
                if not standalone:
                    return self._evaluate_one(gpm, event, mu)
                if gpm is not self._standalone_gpm or event is not self._standalone_event:
                    self._standalone_solutions = self._evaluate_one(gpm, event, _EMPTY)
                    self._standalone_gpm, self._standalone_event = gpm, event
                return self._standalone_solutions
            except TooManySolutions as cut:
                return self._too_many_solutions(gpm, event, cut.solutions, cut.steps)
        restricted = {} if standalone else {v: t for v, t in mu.items() if v in gpm.mentioned}
        key = (gpm, event, frozenset(restricted.items()))
        solutions = self._memo.get(key)
        if solutions is None:
            try:
                solutions = self.evaluator.evaluate(gpm, event, [restricted])[0]
            except TooManySolutions as cut:
                solutions = self._too_many_solutions(gpm, event, cut.solutions[0], cut.steps)
            self._memo[key] = solutions
        return solutions

    # -- negation ----------------------------------------------------------

    @cython.cfunc
    @cython.locals(part=_Partition, size=cython.Py_ssize_t, grew=cython.bint)
    def _keep_for_guards(self, part: _Partition, events: list[Event]) -> None:
        """Buffer the batch's events a guard may need, let go of those none can need
        any more, and hold the buffer to --max-state-memory."""
        # A guard looks at events after a run's last τ, never before the oldest
        # run's first: older events are of no use, nor is anything without runs.
        oldest = part.ages.first_time()
        grew = False
        if oldest is not None:
            for event in events:
                if self._guarded(event):
                    part.buffer.append(event)
                    size = _buffered_bytes(event)
                    part.buffer_bytes += size
                    self.state_bytes += size
                    grew = True
        self._trim_buffer(part, oldest)
        if grew and self.state_bytes > self._max_state_bytes:
            self._buffer_over(part)

    @cython.cfunc
    def _guarded(self, event: Event) -> cython.bint:
        """Whether a guard GPM may match ``event`` under some run's μ: it reads the
        event's stream and, when the evaluator lists solution keys, has a standalone
        solution on it (a run gets no solution from an event without its values)."""
        for gpm in self._guard_gpms:
            if event.stream in gpm.streams:
                if self._solution_keys is None:
                    return True
                keys = self._solution_keys(gpm, event, ())
                if keys is None or keys:
                    return True
        return False

    @cython.cfunc
    @cython.locals(part=_Partition, buffer=list, gone=cython.Py_ssize_t, i=cython.Py_ssize_t,
                   size=cython.Py_ssize_t)
    def _trim_buffer(self, part: _Partition, oldest) -> None:
        """Let go of ``part``'s buffered events before ``oldest`` (None: all of them)."""
        buffer = part.buffer
        if not buffer or (oldest is not None and buffer[0].time >= oldest):
            return
        gone = len(buffer) if oldest is None else bisect_left(buffer, oldest, key=_event_time)
        size = 0
        for i in range(gone):
            size += _buffered_bytes(buffer[i])
        del buffer[:gone]
        part.buffer_start += gone
        part.buffer_bytes -= size
        self.state_bytes -= size

    @cython.cfunc
    @cython.locals(part=_Partition, oldest=Run)
    def _buffer_over(self, part: _Partition) -> None:
        """The negation buffer took the state past --max-state-memory.  A guard may
        need any of its events, so neither drop policy drops one: both drop the
        oldest partial matches, whose start is what holds the oldest events."""
        if self.limits.policy == FAIL:
            last = part.buffer[-1]
            where = f"at time {format_time(last.time, last.is_datetime)}" + self._key_text(part)
            raise StateLimitError(
                f"{self._state_text(0)}, reached the limit of {size_text(self._max_state_bytes)} "
                f"(--max-state-memory) {where}: the buffer keeps the events a negation guard may need, "
                "from the start of the oldest partial match on; --on-limit drop-oldest or drop-newest "
                "goes on without the oldest partial matches")
        while self.state_bytes > self._max_state_bytes and self._evict_oldest(None, part):
            oldest = part.ages.oldest()
            self._trim_buffer(part, None if oldest is None else oldest.first)

    @cython.cfunc
    @cython.locals(index=_GuardIndex)
    def _guard_hit(self, part: _Partition, guards, mu, after: Time, before: Time) -> bool:
        """Whether a buffered event strictly between ``after`` and ``before`` matches one
        of the ``guards`` under ``mu``: a scan of the buffer when it is short, or when the
        evaluator cannot say which events a run's values could match (``_GuardIndex``).
        Each guard tried on an event is a join step of the batch (``_guard_steps``): past
        --max-join-steps the check stops, True, with ``_guard_cut`` set to the guard it
        could not try (the run may not cross a negation it was not checked against)."""
        if len(part.buffer) <= _HELD_FROM:
            return self._scan_hit(part.buffer, guards, mu, after, before)
        scanned = []
        for gpm in guards:
            index = self._guard_index(part, gpm, mu)
            if index is None:
                scanned.append(gpm)
                continue
            for events in (index.by_key.get(self._guard_key(index.spec, mu), ()), index.unlisted):
                for event in events:
                    if after < event.time < before and self._try_guard(gpm, event, mu):
                        return True
        if not scanned:
            return False
        if not self._holding and self._hold_summaries is not None:
            self._hold_summaries(True)      # (until the batch ends: process_batch)
            self._holding = True
        return self._scan_hit(part.buffer, scanned, mu, after, before)

    @cython.cfunc
    def _scan_hit(self, events: list, guards, mu, after: Time, before: Time) -> cython.bint:
        """Whether one of ``events`` strictly between ``after`` and ``before`` matches one of
        the ``guards`` under ``mu``; ``after`` None: any of them (a batch's, all of one time).
        Each evaluation is a join step of the batch: past the cap, True with
        ``_guard_cut`` set (see _guard_hit)."""
        for event in events:
            if after is None or after < event.time < before:
                for gpm in guards:
                    if event.stream in gpm.streams and self._try_guard(gpm, event, mu):
                        return True
        return False

    @cython.cfunc
    def _try_guard(self, gpm: GpmPattern, event: Event, mu) -> cython.bint:
        """Whether ``gpm`` matches the buffered ``event`` under ``mu``, a join step of the
        batch; past --max-join-steps True untried, with ``_guard_cut`` set (_guard_hit)."""
        if self._guard_steps >= self._max_join_steps:
            self._guard_cut = gpm
            return True
        self._guard_steps += 1
        return bool(self._evaluate(gpm, event, mu, False))

    def _guard_cut_short(self, events: list[Event]) -> None:
        """A run's check against a negation's guards was cut short by --max-join-steps
        (``_guard_cut``): ``fail`` stops; drop policies drop the extension, counted, as
        if the guard had matched (letting it cross could emit a match the guard kills)."""
        gpm, self._guard_cut = self._guard_cut, None
        # (the count is the batch's, of every mid-sequence guard: name them all)
        names = sorted({g.name for state in self.nfa.states for edge in state.edges for g in edge.guards})
        what = f"negation guard {gpm.name} was tried on more than {self._max_join_steps:,} buffered events " \
            "(--max-join-steps)" if len(names) == 1 else \
            f"negation guards {', '.join(names)} were tried on more than {self._max_join_steps:,} buffered " \
            f"events (--max-join-steps), cutting short a check of guard {gpm.name}"
        where = self._event_text(events[0]) if len(events) == 1 else \
            f"the events at time {format_time(events[0].time, events[0].is_datetime)}"
        self._past_the_cap(what, where, 1)

    @cython.cfunc
    def _guard_spec(self, gpm: GpmPattern, mu: dict) -> tuple:
        """How ``gpm``'s events are filed against runs (or pending matches) with that
        ``mu``: ``(variables, equated)``, the variables it binds in every solution
        whose values are asked of its events (``solution_keys``), and the variables of
        ``mu`` that the last ``len(equated)`` of them are equal to by a FILTER conjunct
        (``equalities``): the others ``mu`` binds too, sorted.  None when there are
        none, or the evaluator lists no solution keys."""
        if self._solution_keys is None:
            return None
        known = self._certain.get(gpm)
        if known is None:
            known = self._certain[gpm] = (self.evaluator.certain_variables(gpm) or (),
                                          self._equalities(gpm) if self._equalities is not None else ())
        certain, equalities = known
        joined = sorted([v for v in certain if v in mu])
        # (only a value with an equality key files: another may equal any of theirs)
        equated = [(a, b) for a, b in equalities if b in mu and self._equality_key(mu[b]) is not None]
        if not joined and not equated:
            return None
        return tuple(joined + [a for a, _ in equated]), tuple([b for _, b in equated])

    @cython.cfunc
    def _guard_key(self, spec: tuple, mu: dict) -> tuple:
        """A run's (or pending match's) key under ``spec`` (``_guard_spec``): its
        values of the joined variables, then the equality keys of the equated ones."""
        variables, equated = spec
        if not equated:
            return _key_of(mu, variables)
        joined = len(variables) - len(equated)
        return tuple([mu.get(v) for v in variables[:joined]] + [self._equality_key(mu[b]) for b in equated])

    @cython.cfunc
    def _event_keys(self, gpm: GpmPattern, event: Event, spec: tuple):
        """The keys (``_guard_key``) of ``gpm``'s standalone solutions on ``event`` under
        ``spec``, as a dict: a run whose key is not among them gets no solution from it.
        None: not known (the evaluator cannot list them, or a value has no equality key)."""
        variables, equated = spec
        keys = self._solution_keys(gpm, event, variables)
        if keys is None or not equated:
            return keys
        joined = len(variables) - len(equated)
        by_value = {}
        for key in keys:
            values = [self._equality_key(term) for term in key[joined:]]
            if None in values:
                return None
            by_value[key[:joined] + tuple(values)] = True
        return by_value

    @cython.cfunc
    @cython.locals(index=_GuardIndex)
    def _guard_index(self, part: _Partition, gpm: GpmPattern, mu: dict) -> _GuardIndex:
        """The guard index of ``gpm`` for runs binding what ``mu`` binds, brought up to
        date with the buffer; None when there is none to be had (the evaluator lists
        no solution keys, or ``gpm`` binds none of the run's variables)."""
        spec = self._guard_spec(gpm, mu)
        if spec is None:
            return None
        if part.guard_indexes is None:
            part.guard_indexes = {}
        index = part.guard_indexes.get((gpm, spec))
        buffer = part.buffer
        if index is None or part.buffer_start - index.start > len(buffer):
            # (made again once more of its events left the buffer than it holds)
            index = part.guard_indexes[(gpm, spec)] = _GuardIndex(spec, part.buffer_start)
        at = index.upto - part.buffer_start
        streams = gpm.streams
        for event in buffer[at:] if at > 0 else buffer:
            if event.stream in streams:
                keys = self._event_keys(gpm, event, spec)
                if keys is None:
                    index.unlisted.append(event)
                else:
                    for key in keys:
                        listed = index.by_key.get(key)
                        if listed is None:
                            index.by_key[key] = [event]
                        else:
                            listed.append(event)
        index.upto = part.buffer_start + len(buffer)
        return index

    @cython.cfunc
    @cython.locals(size=cython.Py_ssize_t)
    def _add_pending(self, part: _Partition, run: Run, guards) -> None:
        if self.tumbling:
            deadline = self.window_end
        else:
            deadline = run.first + self.window
        size = run.size = _run_bytes(run)
        if self._full(part, size) and not self._make_room(part, run, size):
            return
        pending = _Pending(run, guards, deadline)
        entry = (deadline, next(self._seq), pending)
        heappush(part.pending, entry)
        heappush(self.pending_heap, entry)
        self._file_pending(part, pending)
        self.active_runs += 1
        part.runs += 1
        self.state_bytes += size

    @cython.cfunc
    @cython.locals(pending=_Pending)
    def _file_pending(self, part: _Partition, pending: _Pending) -> None:
        """File a pending match under its values of each guard's variables, for
        ``_check_pending``; a guard without such variables goes to the scans."""
        mu = pending.run.mu
        for gpm in pending.guards:
            spec = self._guard_spec(gpm, mu)
            if spec is None:
                if part.pending_scans is None:
                    part.pending_scans = {}
                scanned = part.pending_scans.get(gpm)
                if scanned is None:
                    part.pending_scans[gpm] = [pending]
                else:
                    scanned.append(pending)
                continue
            if part.pending_indexes is None:
                part.pending_indexes = {}
            by_key = part.pending_indexes.get((gpm, spec))
            if by_key is None:
                by_key = part.pending_indexes[(gpm, spec)] = {}
            key = self._guard_key(spec, mu)
            listed = by_key.get(key)
            if listed is None:
                by_key[key] = [pending]
            else:
                listed.append(pending)

    @cython.cfunc
    def _check_pending(self, part: _Partition, events: list[Event]) -> None:
        """Kill the pending matches one of whose guards matches an event of the batch.
        Each guard GPM's solution keys on the batch's events name the pending matches
        filed under them (``_file_pending``): only those are evaluated, not every pending
        match on every event; those of a guard that cannot be filed are all tried
        (``pending_scans``).  Those killed stay in the heap and the files until the
        partition is compacted (``_compact``), skipped."""
        for event in events:
            tried: dict = {}    # guard GPM -> pending matches it was tried on for the event
            if part.pending_scans:
                for gpm, scanned in part.pending_scans.items():
                    if event.stream in gpm.streams:
                        self._try_pending(gpm, event, scanned, tried)
            if not part.pending_indexes:
                continue
            for (gpm, spec), by_key in part.pending_indexes.items():
                if event.stream not in gpm.streams:
                    continue
                keys = self._event_keys(gpm, event, spec)
                if keys is None:
                    candidates = list(by_key.values())
                elif len(keys) < len(by_key):
                    candidates = [by_key[key] for key in keys if key in by_key]
                else:
                    candidates = [listed for key, listed in by_key.items() if key in keys]
                for listed in candidates:
                    self._try_pending(gpm, event, listed, tried)
        if part.pending_scans:
            scans = {}
            for gpm, scanned in part.pending_scans.items():
                kept = [pending for pending in scanned if not pending.killed]
                if kept:
                    scans[gpm] = kept
            part.pending_scans = scans

    @cython.cfunc
    @cython.locals(pending=_Pending, count=cython.longlong, dropped=cython.longlong)
    def _try_pending(self, gpm: GpmPattern, event: Event, pendings: list, tried: dict) -> None:
        """Kill those of ``pendings`` that ``gpm`` matches on ``event``.  Each pending
        match tried is a row of the guard's join on the event (``tried`` counts them, per
        GPM): past --max-join-steps the policy decides, and drop policies drop the rest
        untried, since keeping them could emit a match the guard would have killed."""
        count = tried.get(gpm, 0)
        dropped = 0
        for pending in pendings:
            if pending.killed:
                continue
            if count < self._max_join_steps:
                count += 1
                if self._evaluate(gpm, event, pending.run.mu, False):
                    self._retire(pending)
            else:
                self._retire(pending)
                dropped += 1
        tried[gpm] = count
        if dropped:
            self._past_the_cap(f"negation guard {gpm.name} was tried on more than {self._max_join_steps:,} "
                               "pending matches (--max-join-steps)", self._event_text(event), dropped)

    @cython.cfunc
    def _emit_due_pending(self, time: Time) -> None:
        heap = self.pending_heap
        while heap and (heap[0][0] < time or (self.tumbling and heap[0][0] <= time)):
            deadline, _, pending = heappop(heap)
            if not pending.killed:
                part = self._retire(pending)
                self._emit_run(pending.run, deadline)
                self._settle(part)

    @cython.cfunc
    def _retire(self, pending: _Pending) -> _Partition:
        """A pending match is emitted or killed: it no longer counts."""
        pending.killed = True
        part = self.partitions[pending.run.partition]
        part.garbage += 1
        part.runs -= 1
        self.active_runs -= 1
        self.state_bytes -= pending.run.size
        return part

    # -- windows -----------------------------------------------------------

    @cython.cfunc
    @cython.locals(part=_Partition, run=Run)
    def _expire(self, time: Time) -> None:
        """Kill the runs that started more than a window before ``time``: pop the
        partitions whose oldest run did, and in each the runs that did."""
        horizon = time - self.window
        heap = self._deadlines
        while heap and heap[0][0] < horizon:
            part = heappop(heap)[2]
            part.filed = False
            if part.dropped:
                self._stale_deadlines -= 1
                continue
            for run in part.ages.expire(horizon):
                if not run.dead:
                    self._kill(part, run)
            self._settle(part)

    @cython.cfunc
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
        self.partitions.clear()
        self._deadlines.clear()
        self._stale_deadlines = 0
        self.active_runs = 0
        self.state_bytes = 0
        periods = (time - self.window_end) // self.window + 1
        self.window_end += periods * self.window

    # -- bookkeeping -------------------------------------------------------

    @cython.cfunc
    @cython.locals(part=_Partition)
    def _settle(self, part: _Partition) -> None:
        """After a change to ``part`` (its batch, an expiry, an emission): drop it
        when nothing in it can fire any more, unless it is the one partition of a
        query without PARTITION BY (dropped, it was made again for most batches);
        compact its indexes when dead runs outnumber the live ones; file it under
        its oldest run for expiry."""
        if part.dropped:
            return
        if not part.runs and self._partition_by:
            part.dropped = True
            del self.partitions[part.key]
            self.state_bytes -= part.buffer_bytes
            if part.filed:
                self._stale_deadlines += 1
                if self._stale_deadlines > len(self._deadlines) // 2 + COMPACT_SLACK:
                    self._deadlines = [e for e in self._deadlines if not e[2].dropped]
                    heapify(self._deadlines)
                    self._stale_deadlines = 0
            return
        if part.garbage > part.runs + COMPACT_SLACK:
            self._compact(part)
        if not part.filed:
            oldest = part.ages.first_time()
            if oldest is not None:
                part.filed = True
                heappush(self._deadlines, (oldest, next(self._seq), part))

    @cython.cfunc
    @cython.locals(part=_Partition)
    def _compact(self, part: _Partition) -> None:
        """Forget the dead runs (and spent edges) in all of ``part``'s indexes."""
        for edge, waiting in list(part.waiting.items()):
            visited: dict[Run, Run] = {}
            for probe_key, bucket in list(waiting.keyed.items()):
                if not self._visit(edge, bucket, None, False, visited):
                    del waiting.keyed[probe_key]
            waiting.loose = self._collect(edge, waiting.loose, visited)
            if not waiting.keyed and not waiting.loose:
                del part.waiting[edge]
        part.strict = [run for run in part.strict if not run.dead]
        part.ages.compact()
        part.pending = [entry for entry in part.pending if not entry[2].killed]
        heapify(part.pending)
        part.pending_indexes = part.pending_scans = None
        for entry in part.pending:
            self._file_pending(part, entry[2])
        part.garbage = 0

    @cython.cfunc
    @cython.locals(part=_Partition, run=Run, waiting=_Waiting, bucket=_Bucket, step=_Step, probe=Probe,
                   size=cython.Py_ssize_t)
    def _register(self, part: _Partition, run: Run) -> None:
        size = run.size = _run_bytes(run)
        if self._full(part, size) and not self._make_room(part, run, size):
            return
        self.active_runs += 1
        part.runs += 1
        self.state_bytes += size
        part.ages.add(run)
        if run.place.strict:
            part.strict.append(run)
        keys = run.keys = self._probe_keys(run)
        for step in run.place.steps:
            if step.strict:
                continue
            edge = step.edge
            key = keys[step.index]
            probe = self._probes.get(edge)
            mapping = run.base_mu if step.loop else run.mu
            waiting = part.waiting.get(edge)
            if waiting is None:
                waiting = part.waiting[edge] = _Waiting()
            if key is None:
                waiting.loose.append(run)
                continue
            bucket = waiting.keyed.get(key)
            if bucket is None:
                bucket = waiting.keyed[key] = _Bucket()
            number = self._sort_number(probe, mapping)
            if number is None:
                bucket.unsorted.append(run)
            else:
                at = _bisect(bucket.numbers, number, True)
                bucket.numbers.insert(at, number)
                bucket.sorted.insert(at, run)

    @cython.cfunc
    @cython.locals(probe=Probe)
    def _sort_number(self, probe: Probe, mapping: dict) -> float | None:
        """The number a run with ``mapping`` is sorted by in ``probe``'s buckets (None: unsorted)."""
        if probe.against is None or probe.against not in mapping:
            return None
        return self.evaluator.order_number(mapping[probe.against])

    @cython.cfunc
    @cython.locals(run=Run, step=_Step, probe=Probe)
    def _probe_keys(self, run: Run) -> tuple:
        """Per edge of the run's state: its values of the edge's probe variables (None: no
        probe, or a strict edge when the evaluator answers by lookup: _advance asks none)."""
        keys = run.place.unprobed
        if keys is not None:
            return keys
        keys = []
        for step in run.place.steps:
            probe = self._asked_probe(step)
            if probe is None:
                keys.append(None)
            else:
                keys.append(_mapping_key(run.base_mu if step.loop else run.mu, probe.variables))
        return tuple(keys)

    @cython.cfunc
    @cython.locals(step=_Step)
    def _asked_probe(self, step: _Step):
        """The probe whose key a run keeps for ``step``, or None (see _probe_keys)."""
        if step.strict and self._evaluate_one is not None:
            return None
        return self._probes.get(step.edge)

    @cython.cfunc
    @cython.locals(part=_Partition, run=Run)
    def _kill(self, part: _Partition, run: Run) -> None:
        if not run.dead:
            run.dead = True
            part.garbage += 1
            part.runs -= 1
            self.active_runs -= 1
            self.state_bytes -= run.size

    @cython.cfunc
    @cython.locals(size=cython.Py_ssize_t)
    def _held_once(self, events: tuple) -> cython.Py_ssize_t:
        """The bytes of those of ``events`` that no run took before (_event_bytes):
        skip-till-any extends many runs with one event, which is held once."""
        size = 0
        for event in events:
            if event not in self._taken:
                self._taken.add(event)
                size += _event_bytes(event)
        return size

    # -- limits --------------------------------------------------------------

    @cython.cfunc
    @cython.locals(part=_Partition, size=cython.longlong)
    def _full(self, part: _Partition, size: int) -> cython.bint:
        """Whether one more run (or pending match) of ``size`` bytes in ``part`` passes a limit."""
        return (part.runs >= self._max_partition_runs or self.active_runs >= self._max_runs
                or self.state_bytes + size > self._max_state_bytes)

    @cython.cfunc
    def _make_room(self, part: _Partition, run: Run, size: int) -> bool:
        """A limit is reached: apply the policy.  True when the new ``run`` (or a
        pending match of it), of ``size`` bytes, may now be kept in ``part``."""
        while self._full(part, size):
            scope = part if part.runs >= self._max_partition_runs else None
            policy = self.limits.policy
            if policy == FAIL:
                raise StateLimitError(self._limit_message(part, run, scope, size))
            if policy == DROP_NEWEST or not self._evict_oldest(scope, part):
                self.dropped_runs += 1
                return False
        return True

    @cython.cfunc
    def _evict_oldest(self, scope: _Partition | None, current: _Partition) -> bool:
        """Drop the partial match that started first, in ``scope`` or in the whole
        query; False when there is none (``current``, being processed, is settled
        after its batch, not here)."""
        part, run = self._oldest_run(scope, current)
        pending = self._oldest_pending(scope)
        if pending is not None and (run is None or pending.run.first < run.first):
            part = self._retire(pending)
        elif run is not None:
            self._kill(part, run)       # (ages drops it when it next looks)
        else:
            return False
        self.dropped_runs += 1
        if part is not current:
            self._settle(part)
        return True

    @cython.cfunc
    def _oldest_run(self, scope: _Partition | None, current: _Partition) -> tuple[_Partition, Run | None]:
        """The live run with the least first τ, of ``scope`` or of the query: the
        top of a partition's ``ages``; across partitions, the top of ``_deadlines``
        (once its stale entries are filed again under their true oldest run), or
        of ``current``, which is filed only after its batch."""
        if scope is not None:
            return scope, scope.ages.oldest()
        oldest = (current, None)
        heap = self._deadlines
        while heap:
            key, _, part = heap[0]
            if part is current:
                # Not filed again under its oldest live run: runs its batch has still to
                # register may be older (an extension keeps its run's first τ), and an
                # entry later than them would let them outlive the window.  _settle
                # files it after the batch.
                heappop(heap)
                part.filed = False
                continue
            run = None if part.dropped else part.ages.oldest()
            if run is not None and run.first == key:
                oldest = (part, run)
                break
            heappop(heap)
            part.filed = False
            if part.dropped:
                self._stale_deadlines -= 1
            elif run is not None:
                part.filed = True
                heappush(heap, (run.first, next(self._seq), part))
        if not current.filed:
            own = current.ages.oldest()
            if own is not None and (oldest[1] is None or own.first < oldest[1].first):
                oldest = (current, own)
        return oldest

    @cython.cfunc
    def _oldest_pending(self, scope: _Partition | None) -> _Pending | None:
        heap = scope.pending if scope is not None else self.pending_heap
        while heap and heap[0][2].killed:
            heappop(heap)
        return heap[0][2] if heap else None

    def _too_many_combinations(self, step: _Step, events: list[Event], past: int) -> None:
        """A conjunction's combinations on a batch went past --max-runs."""
        self._past_the_cap(f"the conjunction {step.edge.atom.label()} has more than {self._max_runs:,} "
                           "combinations (--max-runs)",
                           f"the events at time {format_time(events[0].time, events[0].is_datetime)}", past)

    def _too_many_solutions(self, gpm: GpmPattern, event: Event, solutions: list[Solution],
                            steps: int | None) -> list[Solution]:
        """A GPM's solutions on an event went past --max-runs, or its join past
        ``steps``, --max-join-steps (the evaluator stopped there): the first ones,
        the cut counted as one dropped."""
        what = f"GPM {gpm.name} has more than {self._max_runs:,} solutions (--max-runs)" if steps is None else \
            f"GPM {gpm.name} took more than {steps:,} join steps (--max-join-steps)"
        self._past_the_cap(what, self._event_text(event), 1)
        return solutions[:self._max_runs]

    @staticmethod
    def _event_text(event: Event) -> str:
        """An event as a limit's message names it: its graph, time and where it was read."""
        name = "" if event.name is None else f" {event.name}"
        read = "" if event.position is None else f" (read at {event.position})"
        return f"the event{name} at time {format_time(event.time, event.is_datetime)}{read}"

    def _past_the_cap(self, what: str, where: str, dropped: int) -> None:
        """A product went past --max-runs where it is made, before any run counts it
        (or a join past --max-join-steps): fail, or (drop policies) go on with the
        first ones, ``dropped`` counted."""
        if self.limits.policy == FAIL:
            raise StateLimitError(f"{what} on {where}; "
                                  "--on-limit drop-oldest or drop-newest goes on with the first ones")
        self.dropped_runs += dropped

    def _limit_message(self, part: _Partition, run: Run, scope: _Partition | None, size: int) -> str:
        state = run.state
        where = f"at x{state.id} [{state.label}], time {format_time(run.last, run.events[-1].is_datetime)}" + \
            self._key_text(part)
        if scope is not None:
            what = (f"{part.runs:,} active runs in one partition reached the limit of "
                    f"{self._max_partition_runs:,} (--max-partition-runs)")
        elif self.active_runs >= self._max_runs:
            what = f"{self.active_runs:,} active runs reached the limit of {self._max_runs:,} (--max-runs)"
        else:
            what = (f"{self._state_text(size)}, reached the limit of "
                    f"{size_text(self._max_state_bytes)} (--max-state-memory)")
        return (f"{what} {where}; --on-limit drop-oldest or drop-newest goes on without "
                "the partial matches past the limit")

    def _state_text(self, size: int) -> str:
        """What --max-state-memory counts, with ``size`` bytes more: 'the state of N
        active runs (and a negation buffer of M events), about S'."""
        buffered = sum([len(part.buffer) for part in self.partitions.values()])
        buffer = f" and a negation buffer of {buffered:,} events" if buffered else ""
        return f"the state of {self.active_runs:,} active runs{buffer}, about {size_text(self.state_bytes + size)}"

    def _key_text(self, part: _Partition) -> str:
        """', key (...)': the partition of a limit's message (nothing without PARTITION BY)."""
        return ", key (" + ", ".join(str(term) for term in part.key) + ")" if self._partition_by else ""

    def _make_probes(self) -> dict[Edge, Probe]:
        """Each edge's probe (see the module's docstring), when the evaluator supports them."""
        certain_of = getattr(self.evaluator, "certain_variables", None)
        if certain_of is None:
            return {}

        def atom_binds(atom: AtomMatcher) -> frozenset[str]:
            sets = [certain_of(g) or frozenset() for g in atom.gpms]
            if atom.kind == DISJUNCTION:
                return frozenset.intersection(*sets)
            return frozenset().union(*sets)

        # The variables bound on reaching a state are kept only if an edge of that state
        # or a later one reads them: all of them made the sets grow along the sequence,
        # quadratic in its atoms (5,000 atoms took 600 MB).  (The compiler numbers
        # states in SEQ order, and edges go forward.)
        last_read: dict[str, int] = {}
        for state in self.nfa.states:
            for edge in state.edges:
                for gpm in edge.atom.gpms:
                    for name in gpm.mentioned:
                        last_read[name] = max(last_read.get(name, -1), state.id)

        def still_read(names: frozenset[str], state: State) -> frozenset[str]:
            return frozenset([name for name in names if last_read.get(name, -1) >= state.id])

        bound: dict[State, frozenset[str]] = {self.nfa.initial: frozenset()}
        before_kleene: dict[State, frozenset[str]] = {}
        changed = True
        while changed:
            changed = False
            for state in self.nfa.states:
                if state not in bound:
                    continue
                for edge in state.edges:
                    if edge.loop:
                        continue
                    target = edge.target
                    for table, value in ((bound, still_read(bound[state] | atom_binds(edge.atom), target)),
                                         (before_kleene, still_read(bound[state], target))):
                        old = table.get(target)
                        new = value if old is None else old & value
                        if new != old:
                            table[target] = new
                            changed = True
        comparisons_of = getattr(self.evaluator, "comparisons", lambda gpm: ())
        probes = {}
        for state in self.nfa.states:
            for edge in state.edges:
                have = (before_kleene if edge.loop else bound).get(state)
                if have is None or edge.atom.kind == DISJUNCTION:
                    continue
                best = None
                for gpm in edge.atom.gpms:
                    certain = certain_of(gpm)
                    if certain is None:
                        continue
                    probe = Probe(gpm, tuple(sorted(certain & gpm.mentioned & have)))
                    for compared, op, against in comparisons_of(gpm):
                        if compared in certain and against in have - certain:
                            probe = Probe(gpm, probe.variables, compared, against, op in ("<", "<="),
                                          (compared, op, against))
                            break
                    rank = (len(probe.variables), probe.compared is not None)
                    if best is None or rank > best[0]:
                        best = (rank, probe)
                if best is not None:
                    probes[edge] = best[1]
        return probes

    @cython.cfunc
    @cython.locals(run=Run)
    def _emit_run(self, run: Run, time: Time) -> None:
        self._emit_match(time, run.mu, run.events, run.iterations)

    @cython.cfunc
    def _emit_match(self, time: Time, mu: dict, events: tuple, iterations: tuple) -> None:
        match = _new_match(time, mu, events, iterations)
        if self._batching:
            self._batch_matches.append(match)
        else:
            self.emit(match)

    def _standalone_on(self, gpm: GpmPattern, event: Event) -> list[Solution]:
        return self._evaluate(gpm, event, _EMPTY, True)


def distinct_placement(compiled: CompiledQuery, evaluator) -> list[GpmPattern]:
    """The placement patterns without those that always bind the partition variables
    like an earlier one (the evaluator's ``same_solutions``: the V-shape's three GPMs
    are one pattern under other names, with the company in the same place)."""
    same = getattr(evaluator, "same_solutions", None)
    if same is None:
        return compiled.placement
    kept: list[GpmPattern] = []
    for gpm in compiled.placement:
        if not any(same(other, gpm, compiled.partition_by) for other in kept):
            kept.append(gpm)
    return kept


@cython.ccall
@cython.locals(keys=set, placement=list, solution=dict, key=tuple, first=tuple)
def partition_keys(variables: list[str], placement: list[GpmPattern], event: Event,
                   standalone: Callable[[GpmPattern, Event], list[Solution]]) -> list[tuple]:
    """The keys of PARTITION BY ``variables`` an event belongs to (semantics.md section 8),
    each once: the values any placement pattern (``distinct_placement``) binds on it;
    ``standalone(gpm, event)`` gives a GPM's solutions on the event.  (Mostly there is
    one: a set, which hashes each key's terms, is made when a second comes.)"""
    first = None
    keys = None
    for gpm in placement:
        if event.stream not in gpm.streams:
            continue
        for solution in standalone(gpm, event):
            key = _key_of(solution, variables)
            if not _complete(key):
                continue
            if first is None:
                first = key
            elif keys is not None:
                keys.add(key)
            elif key != first:
                keys = {first, key}
    if keys is not None:
        return list(keys)
    return [] if first is None else [first]


_EMPTY: dict = {}       # the empty mapping, never modified
_NOTHING_MATCHED = [(_EMPTY, ())]   # a conjunction's partial matches before its first operand (never modified)


@cython.cfunc
@cython.locals(mapping=dict)
def _key_of(mapping: dict, variables) -> tuple:
    """The values of ``variables`` in ``mapping`` (None where unbound): a PARTITION BY
    key, or a probe's."""
    if len(variables) == 1:     # (the common key: no list made first)
        return (mapping.get(variables[0]),)
    return tuple([mapping.get(v) for v in variables])


@cython.cfunc
@cython.locals(mapping=dict, key=tuple, i=cython.Py_ssize_t)
def _has_key(mapping: dict, variables, key: tuple) -> cython.bint:
    """Whether ``mapping`` binds ``variables`` to ``key`` (``_key_of(mapping, variables) ==
    key``, without the tuple)."""
    for i in range(len(key)):
        value = mapping.get(variables[i])
        if value is not key[i] and value != key[i]:
            return False
    return True


@cython.cfunc
@cython.locals(key=tuple)
def _complete(key: tuple) -> cython.bint:
    """Whether ``key`` has no None (a loop of identity tests: ``None in key`` would ask
    each pyoxigraph term to compare itself with None, and None with it)."""
    for value in key:
        if value is None:
            return False
    return True


@cython.cfunc
def _mapping_key(mapping: dict, variables: tuple):
    """A run's values of ``variables``, as the evaluator's ``solution_keys`` lists them
    (μ holds the evaluator's own terms); None: one is unbound."""
    key = _key_of(mapping, variables)
    return key if _complete(key) else None


@cython.ccall
@cython.locals(low=cython.Py_ssize_t, high=cython.Py_ssize_t, middle=cython.Py_ssize_t,
               x=cython.double, y=cython.double)
def _bisect(numbers: list, number: float, right: cython.bint) -> cython.Py_ssize_t:
    """``bisect_right`` (``right``) or ``bisect_left`` of ``number`` in the sorted
    floats ``numbers`` (a bucket's order numbers): a loop in C when compiled, where
    the bisect module's functions cost a Python call each."""
    x = number
    low, high = 0, len(numbers)
    while low < high:
        middle = (low + high) >> 1
        y = numbers[middle]
        if (x < y) if right else (x <= y):
            high = middle
        else:
            low = middle + 1
    return low


RSS_PER_OBJECT_BYTE = 2     # resident memory per byte of objects (_run_bytes)
# The resident memory of an event read from a stream (CPython 3.11, pyoxigraph 0.5,
# short terms): its object, graph name and position, and per triple the triple and
# its terms' text.  Measured: 640, 760, 1,490 and 5,460 bytes with 1, 2, 5 and 20.
EVENT_BYTES = 384
TRIPLE_BYTES = 256
# A buffered event's slots in the buffer and in its guard's index, whose key and list
# it may have alone (measured: 1.2 KB per buffered event of 2 triples with its index).
GUARD_ENTRY_BYTES = 256


@cython.cfunc
@cython.locals(run=Run, size=cython.Py_ssize_t)
def _run_bytes(run: Run) -> cython.Py_ssize_t:
    """About the resident memory a run (or a pending match) adds (CPython 3.11, 64
    bits): the run, its heap and index entries, its mapping, its tuple of events,
    its Kleene iterations (the terms and earlier iterations' bindings are shared
    with others), times RSS_PER_OBJECT_BYTE: the process's resident set grows by
    about twice what its objects add up to (allocator arenas, over-allocated
    lists, what a batch frees but the arenas keep; measured: 2.0 KB of RSS per
    run of SEQ(A : B+ : C) from 131k to 262k runs, whose objects sum to 0.9 KB),
    so that --max-state-memory bounds what the machine sees.  Plus the events it
    counts for (``held``, see _extend): each event once, though many runs share it.
    Measured against it (RSS per run, from 100k to 300k): a pending match of
    SEQ(A ; N!) holding its one event 1.9 KB, estimated 2.1 KB; a run of SEQ(A ; B)
    2.1 KB, estimated 2.1 KB (the event was not counted: 1.2 KB, and 0.4 KB for the
    pending match)."""
    size = 480 + 8 * len(run.events) + 64 * len(run.mu)
    if run.iterations:
        for _, local in run.iterations:
            size += 64 + 8 * len(local)
        size += 64 * len(run.iterations[-1][1][-1])
    return size * RSS_PER_OBJECT_BYTE + run.held


@cython.cfunc
def _event_bytes(event: Event) -> cython.Py_ssize_t:
    """About the resident memory of ``event`` (see EVENT_BYTES): what a run or the
    negation buffer holding it counts for it.  Its terms' length is not read (a
    pass over them per event): an event with long literals counts for less."""
    return EVENT_BYTES + TRIPLE_BYTES * len(event.triples)


@cython.cfunc
def _buffered_bytes(event: Event) -> cython.Py_ssize_t:
    """What an event in a negation buffer counts for (see GUARD_ENTRY_BYTES)."""
    return _event_bytes(event) + GUARD_ENTRY_BYTES


def _event_time(event: Event) -> Time:
    return event.time


def _heap_order(entry: tuple) -> tuple:
    return entry[0], entry[1]


@cython.cfunc
@cython.locals(match=Match, key=list, keyed=list)
def _sort_matches(matches: list) -> None:
    """Sort a batch's matches in place by match time, then their events' times."""
    # Each key is one flat tuple, so the sort compares the times themselves, not
    # a nested tuple's.  The keys are made here, in C, each paired with its match,
    # and the sort reads them with itemgetter: a key function written in Python
    # cost a call per match.
    keyed = []
    for match in matches:
        key = [match.time]
        for event in match.events:
            key.append(event.time)
        keyed.append((tuple(key), match))
    keyed.sort(key=_PAIR_KEY)
    matches[:] = [pair[1] for pair in keyed]


_PAIR_KEY = itemgetter(0)


def _result_order(result) -> tuple:
    return (result.time, *[event.time for event in result.events])


@cython.cfunc
@cython.locals(a=dict)
def _conflict(a: dict, b: dict) -> cython.bint:
    """Whether two solutions bind a variable to different terms (a loop, not ``any()``
    over a generator: a generator costs a frame per call in compiled code)."""
    for v, t in b.items():
        if a.get(v, t) != t:
            return True
    return False


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


@cython.cclass
class Batcher:
    """The runtime's input from ``Engine``: accepted events grouped by timestamp, a
    batch processed once every stream of the query has delivered its time (each
    stream has at most one event per timestamp) or a later time arrives, and the
    results handed out (held back while a trailing negation may still add to them).

    :meth:`push` takes the common case whole, compiled: an event of a stream the
    query reads, an integer time after that stream's last and not before the
    batch's, of the stream set's kind, nothing closed by ``Engine.idle``.  Anything
    else it leaves to the engine's checks, which then :meth:`accept` the event.
    ``collector`` is a ``results.Collector``: its ``out`` holds the results."""
    runtime = cython.declare(Runtime, visibility="public")
    collector = cython.declare(object, visibility="public")
    streams = cython.declare(tuple, visibility="public")
    stream_set = cython.declare(frozenset, visibility="public")
    batch = cython.declare(list, visibility="public")
    time = cython.declare(object, visibility="public")              # the timestamp being read
    last_per_stream = cython.declare(dict, visibility="public")
    kind = cython.declare(object, visibility="public")              # is_datetime of the stream set (None: no event yet)
    idle_closed = cython.declare(object, visibility="public")       # the latest timestamp closed by Engine.idle
    hold = cython.declare(cython.bint, visibility="public")         # hold back the results of ``time`` (flush)
    events = cython.declare(cython.longlong, visibility="public")            # events accepted, and their triples
    triples = cython.declare(cython.longlong, visibility="public")

    def __init__(self, runtime: Runtime, collector, streams: frozenset[str]):
        self.runtime = runtime
        self.collector = collector
        self.streams = tuple(streams)
        self.stream_set = frozenset(streams)
        self.batch = []
        self.time = None
        self.last_per_stream = {}
        self.kind = None
        self.idle_closed = None
        self.hold = False
        self.events = 0
        self.triples = 0

    def push(self, event: Event) -> list | None:
        """The results ``event`` made final, or None: not the common case (check it)."""
        time = event.time
        stream = event.stream
        last = self.last_per_stream.get(stream)
        if last is not None and time.__class__ is int and time > last and time >= self.time \
                and event.is_datetime is self.kind and self.idle_closed is None and stream in self.stream_set:
            self._take(event, stream, time)
            return self.drain() if self.collector.out else []
        return None

    def accept(self, event: Event) -> None:
        """Take a checked event of a stream the query reads."""
        self._take(event, event.stream, event.time)

    @cython.cfunc
    def _take(self, event: Event, stream: str, time) -> None:
        """``accept`` with the event's stream and time already read (an attribute of
        an Event costs a generic lookup from compiled code)."""
        self.last_per_stream[stream] = time
        self.events += 1
        self.triples += len(event.triples)
        if self.batch and time != self.time:
            self.flush()
        self.time = time
        self.batch.append(event)
        if len(self.streams) == 1 or self._complete(time):
            self.flush()

    @cython.cfunc
    def _complete(self, time) -> cython.bint:
        """Whether every stream of the query has delivered ``time`` or later."""
        for stream in self.streams:
            delivered = self.last_per_stream.get(stream)
            if delivered is None or delivered < time:
                return False
        return True

    @cython.ccall
    def flush(self) -> None:
        """Process the batch being read, if any."""
        if self.batch:
            batch, self.batch = self.batch, []
            runtime = self.runtime
            time = self.time        # (the batch's: a batch holds the events of one time)
            released = self.hold
            runtime.process_batch(time, batch)
            if released:
                self._sort_released()
            # A trailing negation's match due at this very time comes out with the next
            # batch: hold this time's results back until then, so that the results of
            # one match time always come out together (a CONSTRUCT sink writes them
            # as one event).
            self.hold = bool(runtime.pending_heap) and runtime.pending_heap[0][0] == time

    def idle(self) -> None:
        """The input went quiet: process the batch being read now, and remember its
        time as closed (an event of it arriving later is late)."""
        if self.batch:
            self.idle_closed = self.time
            self.flush()
        self.hold = False

    def finish(self) -> None:
        """End of input: the last batch, then the pending matches."""
        self.flush()
        self.runtime.finish()
        if self.hold:
            self._sort_released()
        self.hold = False

    @cython.cfunc
    def _sort_released(self) -> None:
        """The results of a held time, with those its pending matches added after them,
        in a batch's order (``Runtime.process_batch``): by match time, then by the
        times of their events (a stable sort: the rest keep their order)."""
        out = self.collector.out
        if len(out) > 1:
            out.sort(key=_result_order)

    @cython.ccall
    def drain(self) -> list:
        """The results final so far, taken out (those of a held time stay)."""
        collector = self.collector
        if self.hold and collector.out:
            held = self.time
            out = [result for result in collector.out if result.time != held]
            collector.out = [result for result in collector.out if result.time == held]
            return out
        out, collector.out = collector.out, []
        return out


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
