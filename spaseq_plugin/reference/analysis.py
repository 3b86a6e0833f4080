"""What the reference derives from a parsed query before reading any event:
the compile-time checks of semantics.md section 10, each GPM's variables,
its partition-membership pattern (section 8), and the positive branches of
the sequence once every optional atom is taken or skipped (section 6)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import QueryError
from . import sparql
from .text import KLEENE, NEGATION, OPTIONAL, Atom, ParsedQuery, conjuncts, filters, read_variables, variables


@dataclass(eq=False)
class GpmInfo:
    name: str
    streams: frozenset[str]          # IRIs
    body: str
    mentioned: frozenset[str]        # every variable written in the body
    bindable: frozenset[str]         # what it can bind
    reads: frozenset[str]            # what its FILTERs read (anywhere in the body)
    placement_body: str              # section 8: top-level FILTER conjuncts it cannot judge alone left out


@dataclass
class Step:
    """A positive atom of a branch; ``op`` links it to the previous step (None: the first);
    ``negations`` must have no match strictly between the two."""
    atom: Atom
    gpms: list[GpmInfo]              # operands (a conjunction's in evaluation order)
    op: str | None
    negations: list[GpmInfo]
    iteration_op: str | None         # Kleene atoms: the operator between iterations


@dataclass
class Branch:
    steps: list[Step]
    trailing: list[GpmInfo] = field(default_factory=list)


@dataclass
class Analysed:
    query: ParsedQuery
    gpms: dict[str, GpmInfo]
    branches: list[Branch]
    positive: list[GpmInfo]          # the GPMs of non-negated atoms
    star: list[str]                  # SELECT *: every variable some GPM can bind
    warnings: list[str]


def analyse(q: ParsedQuery) -> Analysed:
    """Check ``q`` and derive what evaluation needs.  Raises :class:`QueryError`."""
    warnings = list(q.warnings)
    used = set()
    for atom in q.atoms:
        for name in atom.names:
            if name not in q.gpms:
                raise QueryError(f"SEQ uses GPM {name}, which is not defined", atom.line, atom.column)
            used.add(name)
    for gpm in q.gpms.values():
        if gpm.name not in used:
            raise QueryError(f"GPM {gpm.name} is defined but never used", gpm.line, gpm.column)
        for alias in gpm.streams:
            if alias not in q.streams:
                raise QueryError(f"GPM {gpm.name} is on stream {alias}, which is not declared",
                                 gpm.line, gpm.column)
    gpms = {name: _gpm_info(q, name) for name in q.gpms}
    if q.template is not None:
        try:
            sparql.check_template(q.prologue(), q.template)
        except SyntaxError as e:
            raise QueryError(f"CONSTRUCT template: {e}") from None
    can_bind = set().union(*(g.bindable for g in gpms.values()))
    for info in gpms.values():
        for var in sorted(info.reads - can_bind):
            gpm = q.gpms[info.name]
            raise QueryError(f"GPM {info.name}: FILTER reads ?{var}, which no GPM binds", gpm.line, gpm.column)
    positive = []
    for atom in q.atoms:
        if atom.suffix != NEGATION:
            positive += [gpms[n] for n in atom.names if gpms[n] not in positive]
    for var in q.partition_by:
        for info in positive:
            if var not in info.bindable:
                raise QueryError(f"PARTITION BY ?{var}: GPM {info.name} does not bind it")
    skippable = (NEGATION, OPTIONAL)
    for j, atom in enumerate(q.atoms):
        if atom.suffix == NEGATION and all(a.suffix in skippable for a in q.atoms[:j]):
            raise QueryError(f"{atom.names[0]}! opens the sequence", atom.line, atom.column)
    if q.window is None:
        for j, atom in enumerate(q.atoms[:-1]):
            if atom.suffix != NEGATION and all(a.suffix in skippable for a in q.atoms[j + 1:]):
                raise QueryError("a trailing negation or optional needs WITHIN")
    if q.select is not None:
        for item in q.select:
            var = item if isinstance(item, str) else item.var
            if var is not None and var not in can_bind:
                warnings.append(f"SELECT ?{var}: no GPM binds it")
    star = sorted(can_bind)
    return Analysed(q, gpms, _branches(q, gpms), positive, star, warnings)


def _gpm_info(q: ParsedQuery, name: str) -> GpmInfo:
    gpm = q.gpms[name]
    try:
        can_bind = sparql.bindable(q.prologue(), gpm.body)
    except SyntaxError as e:
        raise QueryError(f"GPM {name}: SPARQL syntax error: {e}", gpm.line, gpm.column) from None
    reads = set()
    for span in filters(gpm.body, top_level=False):
        reads |= read_variables(span.constraint)
    return GpmInfo(name, frozenset(q.streams[a] for a in gpm.streams), gpm.body,
                   frozenset(variables(gpm.body)), frozenset(can_bind), frozenset(reads),
                   _placement_body(gpm.body, can_bind))


def _placement_body(body: str, can_bind: set[str]) -> str:
    """The body with every top-level FILTER conjunct that reads a variable the GPM
    cannot bind left out: such a conjunct cannot be judged on one event (section 8)."""
    out, last = [], 0
    for span in filters(body, top_level=True):
        kept = [c for c in conjuncts(span.constraint) if read_variables(c) <= can_bind]
        out.append(body[last:span.start])
        if kept:
            out.append(" FILTER(" + " && ".join(f"({c})" for c in kept) + ") ")
        last = span.end
    out.append(body[last:])
    return "".join(out)


def conjunction_order(operands: list[GpmInfo]) -> list[GpmInfo]:
    """Operands in written order, except that one whose FILTER reads a variable another
    operand binds comes after that operand (docs/semantics.md, open point 2); a cycle
    keeps the written order."""
    ordered, pending = [], list(operands)
    while pending:
        ready = [g for g in pending
                 if not any((g.reads - g.bindable) & o.bindable for o in pending if o is not g)]
        chosen = ready[0] if ready else pending[0]
        ordered.append(chosen)
        pending.remove(chosen)
    return ordered


def _branches(q: ParsedQuery, gpms: dict[str, GpmInfo]) -> list[Branch]:
    """Every way to take or skip the optional atoms (a skipped one is a negation)."""
    atoms, ops = q.atoms, q.operators

    def written_before(j: int) -> str:
        """The operator written just before atom j (before the first: the one after it; alone: ;)."""
        if j > 0:
            return ops[j - 1]
        return ops[0] if ops else ";"

    optional = [a.index for a in atoms if a.suffix == OPTIONAL]
    branches = []
    for mask in range(1 << len(optional)):
        taken = {j for bit, j in enumerate(optional) if mask >> bit & 1}
        steps: list[Step] = []
        negations: list[GpmInfo] = []
        for atom in atoms:
            j = atom.index
            if atom.suffix == NEGATION or (atom.suffix == OPTIONAL and j not in taken):
                if steps:                       # a leading optional that is skipped checks nothing
                    negations.append(gpms[atom.names[0]])
                continue
            operands = [gpms[n] for n in atom.names]
            if atom.kind == "&":
                operands = conjunction_order(operands)
            steps.append(Step(atom, operands, written_before(j) if steps else None, negations,
                              written_before(j) if atom.suffix == KLEENE else None))
            negations = []
        if steps:
            branches.append(Branch(steps, negations))
    return branches
