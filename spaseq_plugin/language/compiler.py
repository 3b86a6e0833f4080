"""Parsed query -> compiled query: compile-time checks and the automaton.

Every check that can fail raises :class:`QueryError` with the line and
column of the text at fault (semantics.md section 10).
"""

from __future__ import annotations

import functools
import heapq
from dataclasses import dataclass, field

from rdflib.term import BNode, URIRef, Variable

from ..errors import LimitError, QueryError
from ..events import Time
from .gpm import GpmPattern, analyse_gpm, placement_pattern
from .limits import MAX_OPTIONAL_RUN, QueryLimits
from .nfa import CONJUNCTION, DISJUNCTION, SINGLE, AtomMatcher, Automaton, Edge, State
from .parser import parse_query
from ..rdflib_terms import prepare_sparql, rdflib_to_ox, unalias
from .syntax import (
    ANY, KLEENE, NEGATION, NEXT, OPTIONAL, Aggregate, Conjunction, GpmRef, Pos, Query,
)

#: A skip-till-any Kleene loop under a window at least this long (seconds), or none, is warned about.
EXPONENTIAL_WINDOW = 60


@dataclass(eq=False)
class CompiledQuery:
    """Everything the runtime needs, independent of any input."""

    query: Query
    gpms: dict[str, GpmPattern]
    automaton: Automaton
    positive: list[GpmPattern]           # GPMs of positive atoms, in SEQ order, distinct
    placement: list[GpmPattern]          # PARTITION BY: what places events (gpm.placement_pattern)
    projection: list[str | Aggregate]    # what SELECT shows (``*`` expanded); [] for CONSTRUCT
    stream_iris: dict[str, str]          # alias -> IRI
    template: list[tuple] | None = None  # CONSTRUCT: triples of pyoxigraph terms, rdflib Variables and BNodes
    warnings: list[str] = field(default_factory=list)

    @property
    def window(self) -> Time | None:
        return self.automaton.window

    @property
    def partition_by(self) -> list[str]:
        return self.query.partition_by

    @functools.cached_property
    def streams(self) -> frozenset[str]:
        return frozenset(self.stream_iris.values())

    @property
    def kb_graphs(self) -> frozenset[str]:
        return frozenset().union(*(g.kb_graphs for g in self.gpms.values()))

    def explain(self, evaluator=None) -> str:
        """The automaton and the GPMs; ``evaluator`` (with ``describe``) tells each GPM's path."""
        lines = [self.automaton.describe(), "", "GPMs:"]
        for gpm in self.gpms.values():
            path = evaluator.describe(gpm) if evaluator is not None else "oxigraph"
            lines.append(f"  {gpm.name} on {', '.join(sorted(gpm.streams))}: binds "
                         f"{' '.join('?' + v for v in sorted(gpm.bindable)) or 'nothing'}"
                         + (f"; KB graphs {', '.join(sorted(gpm.kb_graphs))}" if gpm.kb_graphs else "")
                         + f"\n    evaluator: {path}")
        if self.partition_by:
            lines.append("partition by: " + ", ".join("?" + v for v in self.partition_by))
        return "\n".join(lines)


def compile_query(text: str, limits: QueryLimits | None = None) -> CompiledQuery:
    """Parse and compile SPASEQ text; raises :class:`QueryError`.

    ``limits`` bound what the query may be and do (nesting, SERVICE); the
    defaults are documented in docs/limits.md.
    """
    limits = limits or QueryLimits()
    return compile_parsed(parse_query(text, limits.max_nesting, limits.max_atoms), limits)


def compile_parsed(query: Query, limits: QueryLimits | None = None) -> CompiledQuery:
    limits = limits or QueryLimits()
    # (its size, --max-atoms, was checked in the text: parse_query, limits.check_query_text)
    try:
        return _compile(query, limits)
    except MemoryError:
        pass        # (raised below, once the frames the MemoryError holds are freed)
    # The state limits (--max-state-memory, --max-runs) bound runs, not this.
    raise LimitError("out of memory compiling the query: give the process more memory "
                     "(--max-atoms bounds the size of the queries compiled)")


def _compile(query: Query, limits: QueryLimits) -> CompiledQuery:
    seq = query.sequence
    used: set[str] = set()
    for atom in seq.atoms:
        for name, pos in _atom_names(atom):
            if name not in query.gpms:
                raise QueryError(f"SEQ uses GPM {name}, which is not defined (no DEFINE GPM {name})",
                                 pos.line, pos.column)
            used.add(name)
    for gdef in query.gpms.values():
        if gdef.name not in used:
            raise QueryError(f"GPM {gdef.name} is defined but SEQ never uses it",
                             gdef.pos.line, gdef.pos.column)
        for alias, pos in zip(gdef.streams, gdef.stream_pos):
            if alias not in query.streams:
                raise QueryError(f"GPM {gdef.name} is ON stream {alias}, which no FROM STREAM declares",
                                 pos.line, pos.column)
    gpms = {name: analyse_gpm(query, gdef, frozenset(query.streams[a].iri for a in gdef.streams), limits)
            for name, gdef in query.gpms.items()}
    warnings = list(query.warnings)       # parsing's, and the GPM analysis's
    _check_filters(query, gpms)
    positive = _positive_gpms(seq.atoms, gpms)
    _check_partition(query, positive)
    automaton = _build_automaton(query, gpms)
    projection = _projection(query, gpms, warnings)
    if query.window is None:
        warnings.append("no WITHIN window: runs live until the input ends")
    warnings.extend(_state_growth_warnings(query, automaton))
    template = _construct_template(query) if query.construct is not None else None
    placement = [placement_pattern(g) for g in positive] if query.partition_by else []
    return CompiledQuery(query, gpms, automaton, positive, placement, projection,
                         {a: s.iri for a, s in query.streams.items()}, template, warnings)


def _state_growth_warnings(query: Query, automaton: Automaton) -> list[str]:
    """State that may grow without bound: keys without a window, and a Kleene atom
    iterated under skip-till-any, where every subset of the matching events is a run
    (2^n runs after n of them: the state limits of docs/limits.md stop it)."""
    out = []
    window = automaton.window
    if query.partition_by and window is None:
        out.append("PARTITION BY without WITHIN: the runs of a key never expire, so the state grows "
                   "with the keys seen (live keys are counted in the summary)")
    if window is None or window >= EXPONENTIAL_WINDOW:
        span = "no WITHIN window" if window is None else f"a WITHIN window of {window:g} s"
        for state in automaton.states:
            for edge in state.edges:
                if edge.loop and edge.strategy == ANY:
                    out.append(f"{edge.atom.label()}+ iterates with skip-till-any (:) under {span}: the "
                               "runs can double with every matching event (2^n after n), until a state "
                               "limit stops the query (--max-runs, --max-state-memory, --on-limit)")
    return out


def _atom_names(atom) -> list[tuple[str, Pos]]:
    if isinstance(atom, GpmRef):
        return [(atom.name, atom.pos)]
    return list(zip(atom.names, atom.name_pos))


def _check_filters(query: Query, gpms: dict[str, GpmPattern]) -> None:
    bindable = set().union(*(g.bindable for g in gpms.values()))
    for gpm in gpms.values():
        for var in gpm.filter_vars:
            if var not in bindable:
                gdef = query.gpms[gpm.name]
                line, column = _find_var(query.text, gdef.body, gdef.body_pos, var)
                raise QueryError(f"GPM {gpm.name}: FILTER reads ?{var}, which no GPM of the query can bind",
                                 line, column)


def _find_var(text: str, body: str, body_pos: Pos, var: str) -> tuple[int, int]:
    """Line and column of ``?var`` inside a GPM body (for error messages)."""
    for sigil in "?$":
        at = body.find(sigil + var)
        if at >= 0:
            before = body[:at]
            if "\n" in before:
                return body_pos.line + before.count("\n"), len(before) - before.rfind("\n")
            return body_pos.line, body_pos.column + len(before)
    return body_pos.line, body_pos.column


def _positive_gpms(atoms, gpms) -> list[GpmPattern]:
    out: dict[str, GpmPattern] = {}      # (a dict: testing a list for each atom was quadratic)
    for atom in atoms:
        if isinstance(atom, GpmRef) and atom.suffix == NEGATION:
            continue
        for name, _ in _atom_names(atom):
            out.setdefault(name, gpms[name])
    return list(out.values())


def _check_partition(query: Query, positive: list[GpmPattern]) -> None:
    for var in query.partition_by:
        for gpm in positive:
            if var not in gpm.bindable:
                pos = query.partition_pos
                raise QueryError(f"PARTITION BY ?{var}: GPM {gpm.name} does not bind it "
                                 "(every positive GPM must)", pos.line, pos.column)


def _matcher(atom, index: int, gpms: dict[str, GpmPattern]) -> AtomMatcher:
    if isinstance(atom, GpmRef):
        return AtomMatcher(SINGLE, (gpms[atom.name],), index)
    operands = [gpms[n] for n in atom.names]
    if isinstance(atom, Conjunction):
        return AtomMatcher(CONJUNCTION, tuple(conjunction_order(operands)), index)
    return AtomMatcher(DISJUNCTION, tuple(operands), index)


def conjunction_order(operands: list[GpmPattern]) -> list[GpmPattern]:
    """Conjunction operands in evaluation order.

    Each comes after the operands whose variables its FILTERs read (that is
    semantics: the paper's Query 5 needs it); among those free to go, the
    cheapest pattern (fewest triple patterns) goes first, since evaluation
    stops at the first operand without a match (paper 7.3).  When none is
    free (a cycle), the first one written goes.  Each operand counts the
    variables it waits for, so the order takes time linear in the operands'
    variables (testing every pair at every step took minutes for 1,000).
    """
    needs = [set(g.filter_vars) - g.bindable for g in operands]
    unplaced_binders: dict[str, int] = {}
    for gpm in operands:
        for var in gpm.bindable:
            unplaced_binders[var] = unplaced_binders.get(var, 0) + 1
    needed_by: dict[str, list[int]] = {}
    waiting = [0] * len(operands)        # per operand: the variables it still waits for
    for i, wanted in enumerate(needs):
        for var in wanted:
            if var in unplaced_binders:
                needed_by.setdefault(var, []).append(i)
                waiting[i] += 1
    free = [(g.size, i) for i, g in enumerate(operands) if not waiting[i]]
    heapq.heapify(free)
    placed = [False] * len(operands)
    ordered: list[GpmPattern] = []
    first_unplaced = 0
    while len(ordered) < len(operands):
        if free:
            i = heapq.heappop(free)[1]
        else:                            # a cycle: the first one written
            while placed[first_unplaced]:
                first_unplaced += 1
            i = first_unplaced
        placed[i] = True
        ordered.append(operands[i])
        for var in operands[i].bindable:
            unplaced_binders[var] -= 1
            if unplaced_binders[var] == 0:
                for k in needed_by.get(var, ()):
                    waiting[k] -= 1
                    if waiting[k] == 0 and not placed[k]:
                        heapq.heappush(free, (operands[k].size, k))
    return ordered


def _build_automaton(query: Query, gpms: dict[str, GpmPattern]) -> Automaton:
    """One state per positive atom, plus the initial state; see nfa.py."""
    seq = query.sequence
    atoms, ops = seq.atoms, seq.ops

    def op_before(j: int) -> str:
        if j > 0:
            return ops[j - 1]
        return ops[0] if ops else NEXT

    def is_negated(j):
        return isinstance(atoms[j], GpmRef) and atoms[j].suffix == NEGATION

    def is_optional(j):
        return isinstance(atoms[j], GpmRef) and atoms[j].suffix == OPTIONAL

    for j, atom in enumerate(atoms):
        if not (is_negated(j) or is_optional(j)):
            break
        if is_negated(j):
            raise QueryError(f"{atom.name}! cannot open the sequence: a negation needs a positive "
                             "atom before it", atom.pos.line, atom.pos.column)
    optional_run = 0
    for j, atom in enumerate(atoms):
        if is_optional(j):
            optional_run += 1
            if optional_run > MAX_OPTIONAL_RUN:
                raise QueryError(f"{atom.name}?: more than {MAX_OPTIONAL_RUN} optional atoms in a row (the "
                                 "automaton has an edge from each to every later one)",
                                 atom.pos.line, atom.pos.column)
        elif not is_negated(j):
            optional_run = 0
    initial = State(0, "start")
    states = [initial]
    after: dict[int, State] = {}
    for j, atom in enumerate(atoms):
        if is_negated(j):
            continue
        state = State(len(states), _state_label(atoms, j))
        if isinstance(atom, GpmRef) and atom.suffix == KLEENE:
            state.kleene_atom = j
        after[j] = state
        states.append(state)

    window = query.window
    for source_index, state in [(-1, initial)] + sorted(after.items()):
        guards: list[GpmPattern] = []
        j = source_index + 1
        ended = True
        while j < len(atoms):
            atom = atoms[j]
            matcher = _matcher(atom, j, gpms)
            if is_negated(j):
                guards.append(gpms[atom.name])
            elif is_optional(j):
                state.edges.append(Edge(matcher, op_before(j), after[j], tuple(guards)))
                if source_index >= 0:
                    guards.append(gpms[atom.name])
            else:
                state.edges.append(Edge(matcher, op_before(j), after[j], tuple(guards)))
                ended = False
                break
            j += 1
        if ended and state is not initial:
            state.accepting = True
            state.final_guards = tuple(guards)
            if guards and window is None:
                last = atoms[-1]
                raise QueryError("a negation or optional atom at the end of the sequence needs a "
                                 "WITHIN window (it is checked until the window closes)",
                                 last.pos.line, last.pos.column)
        if state.kleene_atom is not None:
            j = state.kleene_atom
            loop_op = ops[j - 1] if j > 0 else (ops[0] if ops else NEXT)
            state.edges.insert(0, Edge(_matcher(atoms[j], j, gpms), loop_op, state, (), loop=True))
    for state in states:
        for i, edge in enumerate(state.edges):
            edge.index = i
    return Automaton(initial, states, window.seconds if window else None,
                     bool(window and window.tumbling))


#: A state's label names at most this many atoms, the last ones matched.
LABEL_ATOMS = 8


def _state_label(atoms: list, j: int) -> str:
    """The atoms matched on reaching the state after atom ``j``: ``A B+ C``, or the
    last LABEL_ATOMS of them after ``...`` (each state naming every atom before it
    made the labels quadratic in the atoms: 20,000 took gigabytes)."""
    first = max(0, j + 1 - LABEL_ATOMS)
    shown = " ".join(_label(a) for a in atoms[first:j + 1])
    return "... " + shown if first else shown


def _label(atom) -> str:
    if isinstance(atom, GpmRef):
        return atom.name + atom.suffix
    sep = " & " if isinstance(atom, Conjunction) else " | "
    return "(" + sep.join(atom.names) + ")"


def _construct_template(query: Query) -> list[tuple]:
    """The CONSTRUCT template's triples; variables and blank nodes stay rdflib terms."""
    pos = query.construct_pos
    try:
        algebra = prepare_sparql(query.prefixes, query.base, f"CONSTRUCT {{ {query.construct} }} WHERE {{}}")
    except RecursionError:
        raise QueryError("CONSTRUCT template: it nests too deeply for rdflib's parser",
                         pos.line, pos.column) from None
    except Exception as e:
        raise QueryError(f"CONSTRUCT template: {e}", pos.line, pos.column) from None

    def convert(term):
        if isinstance(term, (Variable, BNode)):
            return term
        if isinstance(term, URIRef):
            term = URIRef(unalias(str(term)))
        return rdflib_to_ox(term)

    return [tuple(convert(t) for t in triple) for triple in algebra.template]


def _projection(query: Query, gpms: dict[str, GpmPattern], warnings: list[str]) -> list:
    if query.construct is not None:
        return []
    if query.select_star:
        seen: dict[str, None] = {}
        for gpm in gpms.values():
            for var in sorted(gpm.bindable):
                seen.setdefault(var)
        return list(seen)
    bindable = set().union(*(g.bindable for g in gpms.values()))
    for item in query.select:
        var = item.var if isinstance(item, Aggregate) else item
        if var is not None and var not in bindable:
            warnings.append(f"SELECT ?{var}: no GPM binds it, so it is always unbound")
    return list(query.select)
