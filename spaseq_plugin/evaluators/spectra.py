"""The fast GPM evaluator, after SPECTRA (Gillani et al., SSDBM 2016).

Per-event graph pattern matching dominates a SPASEQ engine's cost (the
paper's Fig. 19).  This evaluator answers the same question as
:class:`~spaseq_plugin.evaluators.oxigraph.OxigraphEvaluator` (the semantics of
section 2: the GPM under the run's bindings) without a SPARQL query:

1. **Plan once per GPM.**  A GPM body that is a basic graph pattern with
   constant predicates, FILTERs in the supported expression set, and
   ``GRAPH <iri> { BGP }`` blocks against the KB, compiles into a plan:
   triple patterns, filters split at top-level ``&&``, each filter placed
   at the earliest join step where its variables are bound (pushed down),
   and *stateful* filters (reading variables the GPM does not bind: the
   run's bindings) kept for the per-run step.  Anything else (OPTIONAL,
   UNION, MINUS, BIND, paths, variable predicates, other functions) keeps
   the Oxigraph evaluator, per GPM; ``describe`` says which.

2. **Summarise each event once** (GRAPH-SUMMARY): one pass over its triples
   dispatches them by predicate into views, lists of ``(s, o)`` rows, one slot
   per predicate the plans use;
   triples whose predicate no GPM uses are never looked at again.  The
   summary is shared by every GPM and every run evaluated on the event.
   Literals are canonicalised as Oxigraph would store them.

3. **Join the views** in a greedy connected order, smallest view first,
   binding variables as it goes (a cyclic pattern's closing edge is an
   equality check on already bound variables; a view of many rows is looked
   up by its bound subject or object, hashed once per join), applying
   pushed-down filters at once.  The result, the GPM's *standalone* solutions on the
   event, is computed once per (GPM, event) and joined with the KB.

4. **Per run**, the standalone solutions are looked up by the run's values
   of the shared variables (a hash index built once per event and set of
   shared variables), and the stateful filters are checked on each.  So an
   event that cannot extend a run costs a dictionary lookup.  The runtime
   goes further with :meth:`SpectraEvaluator.solution_keys`: it indexes its
   waiting runs by those values and never visits a run whose values no
   standalone solution has.

GPMs with the same plan up to variable names (the V-shape's three GPMs, a
GPM and its PARTITION BY placement copy) share one standalone evaluation
per event, renamed.  The last few events' summaries are kept, so a batch
of simultaneous events (a conjunction) does not summarise them again and
again.

KB joins: a GRAPH block's solutions are materialised when the plan is made
(the paper's approach) and indexed by the variables it shares with the
event pattern; when that would exceed ``materialize_limit`` rows, the
evaluator looks them up in the store per distinct key instead, with a cache.
A KB that keeps block solutions ready (``block_solutions``: the
``materialized:`` store that ``spaseq kb materialize`` fills on Spark) hands
them over as they are, without a query.

Values the Python filter semantics does not model exactly (see
sparql_values) make that one evaluation go to Oxigraph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import pyoxigraph as ox

try:
    import cython
except ImportError:     # interpreted, without Cython installed
    from ..compiled import shadow as cython
if not cython.compiled:     # interpreted, with Cython installed too: declared attributes become slots
    from ..compiled import shadow as cython
from rdflib.plugins.sparql.parserutils import CompValue
from rdflib.term import BNode, Literal, URIRef, Variable

from ..events import Event, may_repeat
from ..language.filters import NotCompilable, compile_filter, conjuncts, variables
from ..language.gpm import GpmPattern
from .oxigraph import OxigraphEvaluator, holds_blank_node
from .protocol import Solution, Term, TooManySolutions, term_text
from ..kb import KnowledgeBase, checked_rows, solution_count
from ..rdflib_terms import rdflib_to_ox, unalias
from .sparql_values import (MAX_CACHED_TERM_CHARS, RevisitedTermCache, Unsupported, canonical, canonical_literal,
                            XSD, equality_key, native)

MATERIALIZE, LOOKUP = "materialize", "lookup"
KB_LOOKUPS_KEPT = 100_000       # event values whose KB rows a looked-up GRAPH join remembers
_NONE: list = []           # shared empty answer, never modified
_UNLIMITED = 1 << 62       # SpectraEvaluator._most without a bound (a C integer when compiled)
_UNKNOWN = object()        # (a GPM not planned yet)


@cython.cclass
class _Pattern:
    """A triple pattern: (is_var, name or term) for subject and object.  ``slot``: where
    an event's summary keeps the rows of its predicate (an event pattern's; -1 in a KB
    join).  (A typed class: see runtime/nfa_runtime.py's Run.)"""
    subject = cython.declare(tuple, visibility="public")
    predicate = cython.declare(object, visibility="public")
    object = cython.declare(tuple, visibility="public")
    vars = cython.declare(frozenset, visibility="public")
    slot = cython.declare(cython.Py_ssize_t, visibility="public")

    def __init__(self, subject: tuple[bool, object], predicate: ox.NamedNode, object: tuple[bool, object]):
        self.subject = subject
        self.predicate = predicate
        self.object = object
        self.vars = frozenset([x for is_var, x in (subject, object) if is_var])
        self.slot = -1


@dataclass(eq=False)
class _KbJoin:
    graph: str
    patterns: list[_Pattern]
    shared: tuple[str, ...]               # variables shared with the event pattern
    strategy: str = MATERIALIZE
    rows: dict = field(default_factory=dict)   # shared key -> list of solutions
    blank_rows: dict = field(default_factory=dict)     # key positions -> shared key -> list (see _rows_with_blank_nodes)
    text: str = ""

    @property
    def variables(self) -> frozenset[str]:
        return frozenset().union(*(p.vars for p in self.patterns))


@cython.cclass
class Plan:
    """A GPM's plan (see the module docstring), read per event and per run: a typed
    class (see runtime/nfa_runtime.py's Run)."""
    patterns = cython.declare(list, visibility="public")
    local_filters = cython.declare(list, visibility="public")      # (vars, keep(row))
    stateful_filters = cython.declare(list, visibility="public")
    kb = cython.declare(list, visibility="public")                 # _KbJoin
    bound = cython.declare(frozenset, visibility="public")         # what it binds (every solution binds them all)
    mentioned = cython.declare(object, visibility="public")
    comparisons = cython.declare(tuple, visibility="public")       # stateful ?a op ?b, both ways round (see comparisons)
    equalities = cython.declare(tuple, visibility="public")        # stateful ?a = ?b, ?a bound (see equalities)
    shape = cython.declare(object, visibility="public")            # its shape's number: equal, same solutions up to variable names
    names = cython.declare(tuple, visibility="public")             # the variables in shape order
    orders = cython.declare(dict, visibility="public")             # view sizes -> join steps (see _steps)
    single_steps = cython.declare(object, visibility="public")     # the join steps when every view has one row
    renames = cython.declare(dict, visibility="public")            # plan of the same shape -> its names to this plan's (None: the same)
    bound_order = cython.declare(tuple, visibility="public")       # ``bound``, sorted: index keys list variables so
    stateful_reads = cython.declare(tuple, visibility="public")    # what only the stateful filters read: a run's bindings
    unproven = cython.declare(dict, visibility="public")           # comparison -> the stateful filters but its conjunct

    def __init__(self, patterns: list[_Pattern], local_filters: list, stateful_filters: list,
                 kb: list[_KbJoin], bound: frozenset[str], mentioned: frozenset[str],
                 comparisons: tuple, shape: int, names: tuple[str, ...], unproven: dict, equalities: tuple):
        self.patterns = patterns
        self.local_filters = local_filters
        self.stateful_filters = stateful_filters
        self.kb = kb
        self.bound = bound
        self.mentioned = mentioned
        self.comparisons = comparisons
        self.shape = shape
        self.names = names
        self.orders = {}
        self.single_steps = None
        self.renames = {}
        self.bound_order = tuple(sorted(bound))
        self.stateful_reads = tuple(sorted(mentioned - bound))
        self.unproven = unproven
        self.equalities = equalities


@cython.cclass
class _EventState:
    """What the evaluator knows of one event: its summary and what was solved on it;
    made by ``_event_state``.  (A Cython extension type when compiled: see
    runtime/nfa_runtime.py's Run.)"""
    views = cython.declare(list, visibility="public")
    standalone = cython.declare(dict, visibility="public")
    by_shape = cython.declare(dict, visibility="public")
    indexes = cython.declare(dict, visibility="public")
    cut = cython.declare(object, visibility="public")


@cython.cfunc
@cython.locals(state=_EventState)
def _event_state(views: list) -> _EventState:
    """A new _EventState (made without calling the type: compiled, a call
    through the type and its ``__init__`` cost more than the rest of it)."""
    state = _EventState.__new__(_EventState)
    state.views = views
    state.standalone = {}       # GpmPattern -> standalone solutions
    state.by_shape = {}         # plan's shape number -> (plan, solutions)
    state.indexes = None        # (GpmPattern, variables) -> value tuple -> solutions (made when first needed)
    state.cut = None            # shape number -> why its solutions were cut short: None, limit_solutions;
                                # or the join steps of limit_steps
    return state


@RevisitedTermCache
def _order_number(term: Term) -> float | None:
    """A float that orders ``term`` as the ordering FILTERs do, up to ties
    (rounding to float is monotone); ``None`` for what is not a number, or NaN."""
    try:
        category, payload = native(canonical(term))
        if category != "num":
            return None
        number = float(payload[1])
    except (Unsupported, OverflowError):
        return None
    return None if number != number else number


# (a module global: `ox.Literal` is a module attribute lookup per use).  pyoxigraph's
# Literal is final, so its type tells a literal: a pointer comparison, not isinstance()
_LITERAL = ox.Literal
# event summaries kept: more than a batch of simultaneous events needs
_KEPT_EVENTS = cython.declare(cython.Py_ssize_t, 16)


@cython.cclass
class SpectraEvaluator:
    """The fast path with the Oxigraph evaluator as per-GPM fallback.  (A Cython
    extension type when compiled, its per-event steps C functions.)"""
    kb = cython.declare(object, visibility="public")
    _fallback = cython.declare(object, visibility="public")
    materialize_limit = cython.declare(object, visibility="public")
    _plans = cython.declare(dict, visibility="public")
    _reasons = cython.declare(dict, visibility="public")
    _kept_events = cython.declare(list, visibility="public")
    _kept_states = cython.declare(list, visibility="public")
    _next_kept = cython.declare(cython.Py_ssize_t, visibility="public")
    _last_event = cython.declare(object, visibility="public")
    _last_state = cython.declare(_EventState, visibility="public")
    _held = cython.declare(object, visibility="public")
    _slots = cython.declare(dict, visibility="public")
    _layouts = cython.declare(dict, visibility="public")
    _shapes = cython.declare(dict, visibility="public")
    fallbacks = cython.declare(object, visibility="public")
    summaries = cython.declare(cython.longlong, visibility="public")
    _most = cython.declare(cython.Py_ssize_t, visibility="public")
    _most_steps = cython.declare(cython.longlong, visibility="public")

    def __init__(self, kb: KnowledgeBase | None = None, *, materialize_limit: int = 500_000,
                 fallback: OxigraphEvaluator | None = None):
        self.kb = kb
        self._fallback = fallback
        self.materialize_limit = materialize_limit
        self._plans: dict[GpmPattern, Plan | None] = {}
        self._reasons: dict[GpmPattern, str] = {}
        # The last _KEPT_EVENTS events summarised and their states, in a ring: found by
        # identity in a C loop, the oldest replaced (a dict hashed each event in and out).
        self._kept_events: list[Event | None] = [None] * _KEPT_EVENTS
        self._kept_states: list[_EventState | None] = [None] * _KEPT_EVENTS
        self._next_kept = 0
        self._last_event: Event | None = None          # the last event _state was asked about ...
        self._last_state: _EventState | None = None    # ... and its state
        self._held: dict | None = None     # event -> state, every one made while hold_summaries is on
        self._slots: dict[ox.NamedNode, int] = {}       # what some plan's triple patterns use -> its view's slot
        self._layouts: dict[str, list] = {}             # stream -> its last event's (predicate, slot) by position
        self._shapes: dict[tuple, int] = {}             # plan shape -> its number (a small int hashes for nothing)
        self.fallbacks = 0           # evaluations that went to Oxigraph for a value
        self.summaries = 0           # event summaries made (an event's again when it left the ring)
        self._most = _UNLIMITED      # solutions of a GPM on an event made at most (limit_solutions)
        self._most_steps = _UNLIMITED    # join steps of a GPM on an event at most (limit_steps)

    @property
    def fallback(self) -> OxigraphEvaluator:
        """Made when first needed: it may copy KB graphs that the fast path never needs."""
        if self._fallback is None:
            self._fallback = OxigraphEvaluator(self.kb)
            if self._most != _UNLIMITED:
                self._fallback.limit_solutions(self._most - 1)
        return self._fallback

    def limit_solutions(self, most: int | None) -> None:
        """Make at most ``most + 1`` solutions of a GPM on one event (``None``: no
        bound): the runtime's cap, so that a product inside one GPM stops one past it
        (see the protocol)."""
        self._most = _UNLIMITED if most is None or most >= _UNLIMITED else most + 1
        if self._fallback is not None:
            self._fallback.limit_solutions(most)

    def hold_summaries(self, hold: bool) -> None:
        """While ``hold``, keep the summary of every event asked about, beyond the ring
        of the last few: the runtime holds them over a batch of a query with negation,
        whose guard checks each run against every buffered event (with the ring alone,
        each run made the summaries of the whole buffer again).  ``False`` lets them go."""
        self._held = {} if hold else None

    def limit_steps(self, most: int | None) -> None:
        """Stop a GPM's join on one event after ``most`` steps, a step being a row of
        a view tried under the bindings so far (``None``: no bound; see the protocol)."""
        self._most_steps = _UNLIMITED if most is None or most >= _UNLIMITED else most

    # -- the evaluator protocol --------------------------------------------

    def evaluate(self, gpm: GpmPattern, event: Event,
                 mappings: Sequence[Mapping[str, Term]]) -> list[list[Solution]]:
        out = []
        cut: TooManySolutions | None = None
        for mapping in mappings:
            restricted = {v: canonical(t) for v, t in mapping.items() if v in gpm.mentioned}
            try:
                solutions = self.evaluate_one(gpm, event, restricted)
            except TooManySolutions as short:
                solutions, cut = short.solutions, short
            out.append([{**restricted, **s} for s in solutions])
        if cut is not None:
            raise TooManySolutions(out, cut.steps)
        return out

    @cython.locals(state=_EventState, plan=Plan)
    def evaluate_one(self, gpm: GpmPattern, event: Event, mapping: Mapping[str, Term],
                     holds: tuple | None = None) -> list[Solution]:
        """The solutions of ``gpm`` on ``event`` compatible with ``mapping``, a
        run's whole μ (only the GPM's variables count).  A solution binds the
        variables the GPM binds, not those only its stateful FILTERs read (the
        mapping has them).  The list and its dicts may be shared with other
        calls: callers never modify them.  ``holds``: one of :meth:`comparisons`
        that the caller knows holds for every solution under ``mapping``; its
        conjunct is not checked.

        The runtime's μ holds only values from this evaluator's solutions,
        the KB's or Oxigraph's, all in canonical form already, so they are
        compared with the event's canonical terms as they are (``evaluate``
        canonicalises the mappings it is given)."""
        known = self._plans.get(gpm, _UNKNOWN)
        plan = self.plan(gpm) if known is _UNKNOWN else known
        if plan is not None:
            try:
                state = self._state(event)
                solutions = self._standalone(gpm, plan, state)
                if mapping or plan.stateful_filters:
                    solutions = self._extend(gpm, plan, solutions, mapping if type(mapping) is dict
                                             else dict(mapping), state, holds)
                if state.cut is not None and plan.shape in state.cut:
                    raise TooManySolutions(solutions, state.cut[plan.shape])
                return solutions
            except Unsupported:
                self.fallbacks += 1
        restricted = {v: t for v, t in mapping.items() if v in gpm.mentioned}
        try:
            return self.fallback.evaluate(gpm, event, [restricted])[0]
        except TooManySolutions as cut:
            raise TooManySolutions(cut.solutions[0], cut.steps) from None

    def certain_variables(self, gpm: GpmPattern) -> frozenset[str] | None:
        """Variables every solution of ``gpm`` binds (``None``: not known, the GPM goes to Oxigraph)."""
        plan = self.plan(gpm)
        return None if plan is None else plan.bound

    def comparisons(self, gpm: GpmPattern) -> tuple[tuple[str, str, str], ...]:
        """``(?a, op, ?b)`` for each stateful FILTER conjunct ``?a op ?b`` with op one
        of < <= > >=, written both ways round (``(b, flipped op, a)`` too): a
        solution is kept only if the conjunct holds, a necessary condition the
        runtime indexes runs by (with :meth:`order_number`), and which that index
        often proves (``evaluate_one``'s ``holds``)."""
        plan = self.plan(gpm)
        return () if plan is None else plan.comparisons

    def same_solutions(self, a: GpmPattern, b: GpmPattern, variables: Sequence[str]) -> bool:
        """Whether ``a`` and ``b`` bind ``variables`` to the same values on every
        event: the same streams and plan shape (the same solutions up to variable
        names), no stateful filters, and each of ``variables`` in the same place."""
        plan_a, plan_b = self.plan(a), self.plan(b)
        if plan_a is None or plan_b is None or a.streams != b.streams \
                or plan_a.stateful_filters or plan_b.stateful_filters or plan_a.shape != plan_b.shape:
            return False
        return all(_place(plan_a, v) == _place(plan_b, v) for v in variables)

    order_number = staticmethod(_order_number)

    def equalities(self, gpm: GpmPattern) -> tuple[tuple[str, str], ...]:
        """``(?a, ?b)`` for each stateful FILTER conjunct ``?a = ?b`` (either way round)
        where ``gpm`` binds ?a and not ?b: a solution is kept only if ?a's value is
        equal to ?b's, which a run's or pending match's value of ?b finds among the
        solutions' values of ?a by :meth:`equality_key`."""
        plan = self.plan(gpm)
        return () if plan is None else plan.equalities

    equality_key = staticmethod(equality_key)

    @cython.locals(state=_EventState)
    def solution_keys(self, gpm: GpmPattern, event: Event, variables: tuple[str, ...]) -> dict | None:
        """The values of ``variables`` (from :meth:`certain_variables`) in ``gpm``'s
        standalone solutions on ``event``, as a dict keyed by value tuple: the terms
        themselves, canonical as in every solution, so that a run's μ (made of
        solutions) gives its key as it is.  A run whose values are not among them
        gets no solution from :meth:`evaluate`.  ``None``: not known."""
        plan = self.plan(gpm)
        if plan is None:
            return None
        try:
            state = self._state(event)
            solutions = self._standalone(gpm, plan, state)
            if state.cut is not None and plan.shape in state.cut:
                return None         # (cut short: each run is to be asked, and told)
            return _index(gpm, variables, solutions, state)
        except Unsupported:
            return None

    def describe(self, gpm: GpmPattern) -> str:
        """Which path a GPM takes, for ``spaseq explain``."""
        plan = self.plan(gpm)
        if plan is None:
            return f"oxigraph ({self._reasons[gpm]})"
        text = f"spectra ({len(plan.patterns)} triple patterns, {len(plan.local_filters)} pushed-down " \
               f"and {len(plan.stateful_filters)} stateful filters"
        for join in plan.kb:
            text += f"; GRAPH <{join.graph}>: {join.strategy}"
            if join.strategy == MATERIALIZE:
                text += f" ({sum(len(r) for r in join.rows.values())} solutions, indexed by " \
                        f"{' '.join('?' + v for v in join.shared) or 'nothing'})"
        return text + ")"

    # -- planning ------------------------------------------------------------

    def plan(self, gpm: GpmPattern) -> Plan | None:
        plan = self._plans.get(gpm, _UNKNOWN)
        if plan is not _UNKNOWN:
            return plan
        try:
            plan = self._make_plan(gpm)
        except NotCompilable as e:
            plan = None
            self._reasons[gpm] = str(e)
        self._plans[gpm] = plan
        if plan is not None:
            if any(p.predicate not in self._slots for p in plan.patterns):
                for p in plan.patterns:
                    self._slots.setdefault(p.predicate, len(self._slots))
                self._kept_events = [None] * _KEPT_EVENTS     # summaries made without the new predicates
                self._kept_states = [None] * _KEPT_EVENTS
                self._last_event = self._last_state = None
                if self._held is not None:
                    self._held = {}
                self._layouts = {}
            for p in plan.patterns:
                p.slot = self._slots[p.predicate]
        return plan

    def _make_plan(self, gpm: GpmPattern) -> Plan:
        node = gpm.algebra
        if node is None:
            raise NotCompilable("its pattern could not be analysed")
        exprs = []
        while isinstance(node, CompValue) and node.name == "Filter":
            exprs += conjuncts(node.expr)
            node = node.p
        event_patterns: list[_Pattern] = []
        graphs: list[tuple[str, list[_Pattern]]] = []
        for part in _join_parts(node):
            if part.name == "BGP":
                event_patterns += [_pattern(t) for t in part.triples]
            elif part.name == "Graph" and isinstance(part.term, URIRef) \
                    and isinstance(part.p, CompValue) and part.p.name == "BGP":
                graphs.append((unalias(str(part.term)), [_pattern(t) for t in part.p.triples]))
            else:
                raise NotCompilable(f"{part.name} in the pattern")
        if not event_patterns:
            raise NotCompilable("no triple pattern on the event")
        bound = set().union(*(p.vars for p in event_patterns))
        kb_joins = []
        for graph, patterns in graphs:
            kb_vars = set().union(*(p.vars for p in patterns))
            kb_joins.append(self._kb_join(graph, patterns, tuple(sorted(kb_vars & bound))))
            bound |= kb_vars
        local, stateful, comparisons, local_exprs, unproven, equalities = [], [], [], [], {}, []
        for expr in exprs:
            needed = variables(expr)
            keep = compile_filter(expr)
            if needed <= bound:
                local.append((frozenset(needed), keep))
                local_exprs.append(expr)
            else:
                stateful.append(keep)
                for comparison in _comparison(expr):
                    comparisons.append(comparison)
                    unproven[comparison] = len(stateful) - 1
                equalities += [(a, b) for a, b in _equality(expr) if a in bound and b not in bound]
        for comparison, index in unproven.items():
            unproven[comparison] = stateful[:index] + stateful[index + 1:]
        shape, names = _shape(event_patterns, graphs, local_exprs)
        shape = self._shapes.setdefault(shape, len(self._shapes))
        return Plan(event_patterns, local, stateful, kb_joins, frozenset(bound), gpm.mentioned,
                    tuple(comparisons), shape, names, unproven, tuple(equalities))

    def _kb_join(self, graph: str, patterns: list[_Pattern], shared: tuple[str, ...]) -> _KbJoin:
        join = _KbJoin(graph, patterns, shared)
        body = " . ".join(_sparql_pattern(p) for p in patterns)
        join.text = f"SELECT * WHERE {{ %VALUES% GRAPH <{graph}> {{ {body} }} }}"
        if self.kb is None:
            return join                        # no KB: the GRAPH block matches nothing
        solutions = _materialized_solutions(self.kb, graph, patterns)
        if solutions is None:
            count_var = "count"
            while count_var in join.variables:      # a name of its own (SPARQL 18.2.4.1)
                count_var += "_"
            count_text = join.text.replace("%VALUES%", "").replace("SELECT *", f"SELECT (COUNT(*) AS ?{count_var})", 1)
            count = solution_count(self.kb.select(count_text), count_var, f"the KB ({self.kb.description})")
            if count > self.materialize_limit and shared:
                join.strategy = LOOKUP
                return join
            rows = self._rows(join, "")
        else:
            rows = _canonical_rows(solutions)
        for row in rows:
            join.rows.setdefault(tuple(row[v] for v in shared), []).append(row)
        return join

    # -- per event -------------------------------------------------------------

    @cython.cfunc
    @cython.locals(state=_EventState, kept=list, i=cython.Py_ssize_t)
    def _state(self, event: Event) -> _EventState:
        if event is self._last_event:       # the runtime asks about one event many times in a row
            return self._last_state
        kept = self._kept_events
        for i in range(_KEPT_EVENTS):
            if kept[i] is event:
                state = self._kept_states[i]
                break
        else:
            held = self._held
            state = None if held is None else held.get(event)
            if state is None:
                state = _event_state(_summarise(event, self._slots, self._layouts))
                self.summaries += 1
                if held is not None:
                    held[event] = state
            i = self._next_kept
            kept[i] = event
            self._kept_states[i] = state
            self._next_kept = (i + 1) % _KEPT_EVENTS
        self._last_event, self._last_state = event, state
        return state

    @cython.cfunc
    @cython.locals(state=_EventState, plan=Plan)
    def _standalone(self, gpm: GpmPattern, plan: Plan, state: _EventState) -> list[Solution]:
        """``gpm``'s solutions on the event without any run's bindings: solved once
        per plan shape and event, renamed for the other GPMs of that shape."""
        solutions = state.standalone.get(gpm)
        if solutions is None:
            solved = state.by_shape.get(plan.shape)
            if solved is None:
                solutions = self._solve(plan, state)
                state.by_shape[plan.shape] = (plan, solutions)
            else:
                # (keyed by the solved plan, which hashes by identity: comparing the
                # two plans' name tuples here cost a tuple comparison per event)
                rename = plan.renames.get(solved[0], _UNKNOWN)
                if rename is _UNKNOWN:
                    rename = plan.renames[solved[0]] = None if solved[0].names == plan.names else \
                        dict(zip(solved[0].names, plan.names))
                if rename is None:
                    solutions = solved[1]
                else:
                    solutions = [{rename[v]: t for v, t in s.items()} for s in solved[1]]
            state.standalone[gpm] = solutions
        return solutions

    @cython.cfunc
    @cython.locals(plan=Plan, pattern=_Pattern, state=_EventState, single=cython.bint)
    def _solve(self, plan: Plan, state: _EventState) -> list[Solution]:
        """The plan's solutions on the event; when a join made ``_most`` of them (the
        most limit_solutions allows: one more than the runtime's cap), or took
        ``_most_steps``, it stopped there, and the plan's shape goes into
        ``state.cut`` (a later join or filter may leave fewer: the count at the end
        cannot tell)."""
        views = []
        single = True
        for pattern in plan.patterns:
            rows = state.views[pattern.slot]
            if not rows:
                return []
            if len(rows) != 1:
                single = False
            views.append(rows)
        order, final = _steps(plan, views, single)
        steps = None
        if single:
            solutions = _join_single_rows(order, views)
        else:
            solutions = _join(order, views, self._most, self._most_steps)
            if _steps_left < 0:
                steps = self._most_steps
        cut = steps is not None or len(solutions) >= self._most
        for join in plan.kb:
            solutions = self._join_kb(join, solutions)
            cut = cut or len(solutions) >= self._most
        if final:
            solutions = [s for s in solutions if _keeps(final, s)]
        if cut:
            if state.cut is None:
                state.cut = {}
            state.cut[plan.shape] = steps
        return solutions

    @cython.cfunc
    def _join_kb(self, join: _KbJoin, solutions: list[Solution]) -> list[Solution]:
        out = []
        for solution in solutions:
            key = tuple([solution[v] for v in join.shared])
            rows = join.rows.get(key)
            if rows is None:
                if join.strategy != LOOKUP:
                    continue
                rows = self._lookup(join, key)
            for row in rows:
                if len(out) >= self._most:
                    return out
                merged = dict(solution)
                merged.update(row)
                out.append(merged)
        return out

    def _lookup(self, join: _KbJoin, key: tuple) -> list[Solution]:
        """The KB's rows for the event's values ``key``, remembered for the next events
        with them unless one is longer than MAX_CACHED_TERM_CHARS (a key keeps its
        terms alive: distinct large literals must not pile up here either)."""
        blank = tuple([i for i, t in enumerate(key) if holds_blank_node(t)])
        if blank:
            return self._rows_with_blank_nodes(join, blank).get(key, _NONE)
        texts = [term_text(t) for t in key]
        # A store that keeps literals as written may hold the key's literal in another
        # form ("01"^^xsd:integer for 1): such a literal is looked up by its datatype and
        # the rows kept whose canonical form is the key's.  (That scans the block's rows,
        # once per key: the rows are remembered.)
        literals = [] if getattr(self.kb, "canonical_literals", False) else \
            [i for i, t in enumerate(key) if _may_be_written_otherwise(t)]
        exact = [i for i in range(len(key)) if i not in literals]
        values = "VALUES (" + " ".join("?" + join.shared[i] for i in exact) + ") { (" + \
            " ".join(texts[i] for i in exact) + ") }" if exact else ""
        values += "".join(f" FILTER(DATATYPE(?{join.shared[i]}) = <{key[i].datatype.value}>)" for i in literals)
        rows = self._rows(join, values)
        if literals:
            rows = [row for row in rows if all(row[join.shared[i]] == key[i] for i in literals)]
        if len(join.rows) > KB_LOOKUPS_KEPT:
            join.rows.clear()
        if max(map(len, texts)) <= MAX_CACHED_TERM_CHARS:
            join.rows[key] = rows
        return rows

    def _rows_with_blank_nodes(self, join: _KbJoin, blank: tuple) -> dict:
        """The block's rows whose values at the key's positions ``blank`` are blank nodes
        (or triple terms holding one), by their key, read once for those positions.
        VALUES cannot hold a blank node, the event's or an earlier block's (one label is
        one node, as in pyoxigraph and the reference), and reading the block for each
        blank node of a stream would scan it per event: most KBs hold none there, and
        these rows are then none."""
        found = join.blank_rows.get(blank)
        if found is None:
            found = join.blank_rows[blank] = {}
            test = "".join(f" FILTER(!isIRI(?{join.shared[i]}) && !isLiteral(?{join.shared[i]}))" for i in blank)
            for row in self._rows(join, test):
                found.setdefault(tuple([row[v] for v in join.shared]), []).append(row)
        return found

    def _rows(self, join: _KbJoin, restriction: str) -> list[Solution]:
        """The block's rows under ``restriction`` (VALUES, FILTERs), in canonical form."""
        return _canonical_rows(checked_rows(self.kb.select(join.text.replace("%VALUES%", restriction)),
                                            join.variables, f"the KB ({self.kb.description})"))

    @cython.cfunc
    @cython.locals(state=_EventState, plan=Plan, mapping=dict, s=dict, row=dict, candidates=list)
    def _extend(self, gpm: GpmPattern, plan: Plan, solutions: list[Solution],
                mapping: dict[str, Term], state: _EventState, holds: tuple | None) -> list[Solution]:
        """The standalone solutions compatible with one run's bindings, filtered
        (but for the conjunct of ``holds``, a comparison known to hold)."""
        shared = [v for v in plan.bound_order if v in mapping]
        if not shared:
            candidates = solutions
        elif len(solutions) == 1:       # the common case: compared, without an index
            if not _agrees(solutions[0], mapping, shared):
                return _NONE
            candidates = solutions
        elif len(solutions) <= _SCANNED_SOLUTIONS:
            # (an index hashes each solution's terms, whole IRIs, for the one or two
            # runs that mostly ask about an event: comparing costs less)
            candidates = [s for s in solutions if _agrees(s, mapping, shared)]
        else:
            candidates = _index(gpm, tuple(shared), solutions, state).get(
                tuple([mapping[v] for v in shared]), _NONE)
        filters = plan.stateful_filters if holds is None else plan.unproven[holds]
        if not filters or not candidates:
            # Every solution binds all of plan.bound, so the comparison or the
            # index already made the candidates agree with the mapping.
            return candidates
        out = []
        for s in candidates:
            row = dict(s)           # and the run's values its stateful filters read (not bound by s)
            for v in plan.stateful_reads:
                value = mapping.get(v)
                if value is not None:
                    row[v] = value
            if _keeps(filters, row):
                out.append(s)
        return out


@cython.cfunc
@cython.locals(state=_EventState)
def _index(gpm: GpmPattern, variables: tuple[str, ...], solutions: list[Solution],
           state: _EventState) -> dict:
    """The standalone solutions by their values of ``variables`` (built once per event)."""
    if state.indexes is None:
        state.indexes = {}
    index = state.indexes.get((gpm, variables))
    if index is None:
        index = state.indexes[(gpm, variables)] = {}
        for s in solutions:
            index.setdefault(tuple([s[v] for v in variables]), []).append(s)
    return index


@cython.cfunc
@cython.locals(solution=dict, mapping=dict, shared=list)
def _agrees(solution: dict, mapping: dict, shared: list) -> cython.bint:
    """Whether ``solution`` has ``mapping``'s values of the ``shared`` variables."""
    for v in shared:
        if solution[v] != mapping[v]:
            return False
    return True


@cython.cfunc
def _keeps(filters: list, row: dict) -> cython.bint:
    """Whether every filter keeps ``row`` (a loop: ``all()`` over a generator costs a frame)."""
    for keep in filters:
        if not keep(row):
            return False
    return True


def _place(plan: Plan, variable: str) -> int | None:
    """Where ``variable`` is in the plan's shape (None: the plan does not bind it)."""
    return plan.names.index(variable) if variable in plan.names else None


def _join_parts(node) -> list[CompValue]:
    if isinstance(node, CompValue) and node.name == "Join":
        return _join_parts(node.p1) + _join_parts(node.p2)
    if not isinstance(node, CompValue):
        raise NotCompilable("unexpected pattern")
    return [node]


def _term(term) -> tuple[bool, object]:
    if isinstance(term, Variable):
        return True, str(term)
    if isinstance(term, BNode):
        raise NotCompilable("blank node in a triple pattern")
    if isinstance(term, URIRef):
        return False, ox.NamedNode(unalias(str(term)))
    if isinstance(term, Literal):
        return False, canonical(rdflib_to_ox(term))
    raise NotCompilable("property path or unusual term")


def _pattern(triple) -> _Pattern:
    s, p, o = triple
    if not isinstance(p, URIRef):
        raise NotCompilable("variable predicate or property path")
    return _Pattern(_term(s), ox.NamedNode(unalias(str(p))), _term(o))


_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _equality(expr) -> list[tuple[str, str]]:
    if isinstance(expr, CompValue) and expr.name == "RelationalExpression" and expr.op == "=" \
            and isinstance(expr.expr, Variable) and isinstance(expr.other, Variable):
        a, b = str(expr.expr), str(expr.other)
        return [(a, b), (b, a)]
    return []


def _comparison(expr) -> list[tuple[str, str, str]]:
    if isinstance(expr, CompValue) and expr.name == "RelationalExpression" and expr.op in _FLIPPED \
            and isinstance(expr.expr, Variable) and isinstance(expr.other, Variable):
        a, b = str(expr.expr), str(expr.other)
        return [(a, expr.op, b), (b, _FLIPPED[expr.op], a)]
    return []


_LAYOUT_POSITIONS = cython.declare(cython.Py_ssize_t, 64)   # triples of an event whose predicates a layout keeps
_LAYOUT_STREAMS = 64        # streams whose layouts are kept (the query's, unless evaluate() is called with others)


@cython.cfunc
@cython.locals(slots=dict, layouts=dict, views=list, layout=list, known=tuple,
               i=cython.Py_ssize_t, n=cython.Py_ssize_t)
def _summarise(event: Event, slots: dict, layouts: dict) -> list:
    """GRAPH-SUMMARY: the event's triples whose predicate some plan uses, in canonical
    form, as (subject, object) rows in the predicate's slot (None: no such triple).

    A pyoxigraph term hashes its whole IRI at each dict lookup; comparing two IRIs
    costs a fraction of that.  A stream's events mostly list the same predicates in the
    same order, so the stream's layout, the (predicate, slot) pairs of its last event
    by position, is asked first: a predicate equal to the one at its position there
    has that slot, and only a differing one is looked up in ``slots``."""
    views = [None] * len(slots)
    layout = layouts.get(event.stream)
    if layout is None:
        if len(layouts) >= _LAYOUT_STREAMS:
            layouts.clear()
        layout = layouts[event.stream] = []
    n = len(layout)
    i = 0
    for triple in event.triples:
        predicate = triple.predicate
        if i < n:
            known = layout[i]
            if known[0] == predicate:
                slot = known[1]
            else:
                slot = slots.get(predicate)
                layout[i] = (predicate, slot)
        else:
            slot = slots.get(predicate)
            if i < _LAYOUT_POSITIONS:
                layout.append((predicate, slot))
                n += 1
        i += 1
        if slot is not None:
            obj = triple.object
            row = (triple.subject, canonical_literal(obj) if type(obj) is _LITERAL else obj)
            rows = views[slot]
            if rows is None:
                views[slot] = [row]
            else:
                rows.append(row)
    for slot, rows in enumerate(views):
        # A graph is a set: canonical forms may make two triples one, and an event built
        # by hand may repeat one.  Rows hash their pyoxigraph terms' whole text, so a
        # few rows are compared pairwise first (most differ in their subjects).
        if rows is not None and len(rows) > 1 and may_repeat(rows):
            views[slot] = list(dict.fromkeys(rows))
    return views


def _shape(patterns: list[_Pattern], graphs: list[tuple[str, list[_Pattern]]], exprs: list) -> tuple:
    """A plan's solving work (``exprs``: its local FILTERs) up to the names of
    its variables: (shape, names in shape order).  Variables that those
    FILTERs read keep their names, so the filters' text can stand for them."""
    filtered = set().union(*(variables(e) for e in exprs)) if exprs else set()
    names: list[str] = []

    def part(is_var, x):
        if not is_var:
            return (False, x)
        if x not in names:
            names.append(x)
        return (True, x if x in filtered else names.index(x))

    def triples(ps):
        return tuple((part(*p.subject), p.predicate, part(*p.object)) for p in ps)

    shape = (triples(patterns), tuple((g, triples(ps)) for g, ps in graphs), tuple(str(e) for e in exprs))
    return shape, tuple(names)


@cython.cfunc
@cython.locals(plan=Plan, rows=list, single=cython.bint, key=cython.longlong, size=cython.Py_ssize_t)
def _steps(plan: Plan, views: list[list], single: bool) -> tuple[list, list]:
    """The join steps for these view sizes, ``(subject is a variable, subject,
    object is a variable, object, the two are one variable, view index,
    filters the step makes decidable, an earlier step binds the subject, an
    earlier step binds the object)``, and the filters left for after the
    KB join; cached per plan, by the sizes, or without a key when every view
    has one row (``single``: the common case, each predicate once in the event).
    Up to 7 views of fewer than 256 rows each (the usual event) are keyed by their
    sizes as the digits of one integer: no tuple made and hashed."""
    if single and plan.single_steps is not None:
        return plan.single_steps
    key = 1
    for rows in views:
        size = len(rows)
        if size >= 256 or key >= 1 << 48:
            sizes = tuple([len(rows) for rows in views])
            break
        key = key * 256 + size
    else:
        sizes = key
    found = plan.orders.get(sizes)
    if found is None:
        if len(plan.orders) > 256:
            plan.orders.clear()
        pending = list(plan.local_filters)
        steps = []
        bound: set[str] = set()
        for index in _join_order(plan.patterns, views):
            pattern = plan.patterns[index]
            (s_var, s), (o_var, o) = pattern.subject, pattern.object
            s_known, o_known = s_var and s in bound, o_var and o in bound
            bound |= pattern.vars
            steps.append((s_var, s, o_var, o, s_var and o_var and s == o, index,
                          [keep for needed, keep in pending if needed <= bound], s_known, o_known))
            pending = [(n, k) for n, k in pending if not n <= bound]
        found = plan.orders[sizes] = (steps, [keep for _, keep in pending])
    if single:
        plan.single_steps = found
    return found


_SCANNED_ROWS = 8      # a join step looks a bound term up among more rows than this, by hash
_SCANNED_SOLUTIONS = cython.declare(cython.Py_ssize_t, 4)  # a run's values are looked up among more standalone solutions than this, by hash


# Join steps left to the join under way (a C global when compiled, set by _join:
# an argument more to each recursive call of _extend_join cost more).  Below 0:
# the join stopped for want of them.
_steps_left = cython.declare(cython.longlong, 0)


@cython.cfunc
@cython.locals(steps=cython.longlong)
def _join(order: list, views: list[list], most: int, steps: int) -> list[Solution]:
    """The event pattern's solutions, at most ``most`` of them, in at most ``steps``
    rows tried (``_steps_left`` is below 0 when that stopped it): the join steps as
    nested loops over the views (a large view is looked up by its bound subject or
    object instead: an event of thousands of subjects must not cost their square)."""
    global _steps_left
    _steps_left = steps
    solutions: list[Solution] = []
    _extend_join(order, views, 0, len(order) - 1, {}, solutions, {}, most)
    return solutions


@cython.cfunc
@cython.locals(lookups=dict, rows=list, by=dict)
def _rows_with(lookups: dict, rows: list, index: int, position: int, term) -> list:
    """The rows of view ``index`` whose subject (``position`` 0) or object (1) is
    ``term``, by a hash of the view made once per join."""
    by = lookups.get((index, position))
    if by is None:
        by = lookups[(index, position)] = {}
        for row in rows:
            found = by.get(row[position])
            if found is None:
                by[row[position]] = [row]
            else:
                found.append(row)
    return by.get(term, _NONE)


@cython.cfunc
@cython.locals(depth=cython.Py_ssize_t, last=cython.Py_ssize_t, row=dict, solutions=list, rows=list,
               lookups=dict, most=cython.Py_ssize_t)
def _extend_join(order: list, views: list, depth: int, last: int, row: dict, solutions: list,
                 lookups: dict, most: int) -> None:
    """Step ``depth`` of ``_join`` under the bindings in ``row`` (a C function when
    compiled: the recursion costs no Python frame).

    Which variables the earlier steps bind is known from the order, so a binding
    is never taken back: ``row`` may keep one from an earlier pass through a
    later step, which that step sets again before any step reads it."""
    global _steps_left
    s_var, s, o_var, o, same, index, ready, s_known, o_known = order[depth]
    s_val = (row[s] if s_known else None) if s_var else s
    o_val = (row[o] if o_known else None) if o_var else o
    bind_s = s_val is None          # (a constant is never None)
    bind_o = o_val is None and not (same and bind_s)
    rows = views[index]
    if len(rows) > _SCANNED_ROWS:
        if not bind_s:
            rows = _rows_with(lookups, rows, index, 0, s_val)
        elif o_val is not None:
            rows = _rows_with(lookups, rows, index, 1, o_val)
    for subject, obj in rows:
        if len(solutions) >= most:
            return
        _steps_left -= 1
        if _steps_left < 0:
            return
        if not bind_s and subject != s_val:
            continue
        if o_val is not None and obj != o_val:
            continue
        if same and bind_s and obj != subject:    # ?x :p ?x
            continue
        if bind_s:
            row[s] = subject
        if bind_o:
            row[o] = obj
        if _keeps(ready, row):
            if depth == last:
                solutions.append(dict(row))
            else:
                _extend_join(order, views, depth + 1, last, row, solutions, lookups, most)


@cython.cfunc
@cython.locals(row=dict)
def _join_single_rows(order: list, views: list[list]) -> list[Solution]:
    """``_join`` when every view has one row (each predicate once in the event,
    the common case): one pass over the steps, no loops."""
    row: dict = {}
    for s_var, s, o_var, o, _, index, ready, _, _ in order:
        subject, obj = views[index][0]
        if s_var:
            bound = row.get(s)
            if bound is None:
                row[s] = subject
            elif bound != subject:
                return []
        elif subject != s:
            return []
        if o_var:
            bound = row.get(o)
            if bound is None:
                row[o] = obj
            elif bound != obj:
                return []
        elif obj != o:
            return []
        if not _keeps(ready, row):
            return []
    return [row]


def _sparql_pattern(p: _Pattern) -> str:
    def show(part):
        is_var, x = part
        return "?" + x if is_var else str(x)
    return f"{show(p.subject)} {p.predicate} {show(p.object)}"


def _may_be_written_otherwise(term) -> bool:
    """Whether a (canonical) term has other written forms that Oxigraph stores as it:
    a literal of an XSD datatype but xsd:string (IRIs, strings, tagged literals: no)."""
    return isinstance(term, ox.Literal) and not term.language and term.datatype.value.startswith(XSD) \
        and term.datatype.value != XSD + "string"


def _canonical_rows(solutions) -> list[Solution]:
    """A GRAPH block's solutions from the KB in canonical form, each once: a store that
    keeps literals as written (rdflib) holds ``"1"^^xsd:integer`` and ``"01"^^xsd:integer``
    as two triples, which are one in canonical form (a graph is a set), so one solution."""
    rows, seen = [], set()
    for solution in solutions:
        row = {v: canonical(t) for v, t in solution.items()}
        identity = frozenset(row.items())
        if identity not in seen:
            seen.add(identity)
            rows.append(row)
    return rows


def _materialized_solutions(kb: KnowledgeBase, graph: str, patterns: list[_Pattern]):
    """A GRAPH block's solutions from a KB that keeps them ready (``block_solutions``, e.g.
    stores/materialized.py, which knows a block by these pattern texts), or None: ask select()."""
    block_solutions = getattr(kb, "block_solutions", None)
    if block_solutions is None:
        return None
    return block_solutions(graph, [_sparql_pattern(p) for p in patterns])


def _join_order(patterns: list[_Pattern], views: list[list]) -> list[int]:
    """Greedy: the smallest view first, then the smallest view connected to what is bound."""
    remaining = set(range(len(patterns)))
    order: list[int] = []
    bound: set[str] = set()
    while remaining:
        connected = [i for i in remaining if patterns[i].vars & bound] or list(remaining)
        best = min(connected, key=lambda i: (len(views[i]), i))
        order.append(best)
        bound |= patterns[best].vars
        remaining.remove(best)
    return order
