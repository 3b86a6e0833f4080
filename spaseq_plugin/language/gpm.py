"""Graph pattern matching expressions (GPMs): what the compiler knows of one.

A GPM body is a SPARQL 1.1 group graph pattern.  Its nesting is measured
first (:mod:`.limits`), then pyoxigraph checks its syntax (its errors are
mapped back to the query's line and column) and rdflib's algebra gives its
structure: which variables it mentions, which it can bind, which its FILTERs
read, which KB graphs it names.  Nothing here evaluates a pattern (no
SERVICE is called at compile time); the evaluators
(:mod:`spaseq_plugin.evaluators`) do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pyoxigraph as ox
from rdflib.plugins.sparql.parserutils import CompValue
from rdflib.term import URIRef, Variable

from ..errors import QueryError
from ..rdflib_terms import prepare_sparql, unalias
from .limits import QueryLimits, check_nesting
from .syntax import GpmDef, Pos, Query

_OXIGRAPH_ERROR = re.compile(r"error at (\d+):(\d+): (.*)", re.S)
_VARIABLE = re.compile(r"[?$]([A-Za-z0-9_\u00B7-\uFFFF]+)")
_STRINGS = re.compile(r'"""(?:.|\n)*?"""|\'\'\'(?:.|\n)*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|<[^<>"{}|^`\\\x00-\x20]*>|#[^\n]*|\\.')


def _without_strings(body: str) -> str:
    """A body with strings, IRIs, comments and the escapes of prefixed names (``ex:a\\?b``,
    ``ex:it\\'s``) blanked: what is left holds the variables."""
    return _STRINGS.sub(" ", body)


@dataclass(eq=False)
class GpmPattern:
    """A GPM as the engine uses it.

    ``mentioned``: every variable in the body (what a run's mapping is
    restricted to before it is injected).  ``bindable``: variables the body
    can bind.  ``filter_vars``: variables FILTER expressions read.
    ``kb_graphs``: IRIs named by ``GRAPH <iri>``; ``kb_graph_var``: the body
    has ``GRAPH ?g``.
    """

    name: str
    streams: frozenset[str]
    body: str
    prologue: str
    pos: Pos
    mentioned: frozenset[str] = frozenset()
    bindable: frozenset[str] = frozenset()
    filter_vars: dict[str, None] = field(default_factory=dict)
    kb_graphs: frozenset[str] = frozenset()
    kb_graph_var: bool = False
    algebra: object = None        # rdflib's algebra of the body, for evaluators that plan
    size: int = 0                 # triple patterns in the body: a cost estimate
    service_timeout: float | None = None   # the body uses SERVICE: each evaluation's time limit

    @property
    def uses_kb(self) -> bool:
        return bool(self.kb_graphs) or self.kb_graph_var

    def __repr__(self) -> str:
        return f"GPM {self.name}"


def analyse_gpm(query: Query, gdef: GpmDef, stream_iris: frozenset[str],
                limits: QueryLimits = QueryLimits()) -> GpmPattern:
    """Check a GPM body's SPARQL syntax and work out its variables.

    Nothing is evaluated: the body is measured (:func:`check_nesting`),
    then parsed by pyoxigraph and rdflib, never run.
    """
    service = check_nesting(gdef.body, limits.max_nesting, gdef.body_pos, what=f"GPM {gdef.name}")
    if service is not None and not limits.allow_service:
        raise QueryError(f"GPM {gdef.name}: SERVICE is refused: it would send requests to another "
                         "endpoint (allow it with --allow-service, or QueryLimits(allow_service=True) "
                         "in Python)", service.line, service.column)
    timeout = limits.service_timeout if service is not None else None
    prologue = query.prologue()
    _check_syntax(prologue, gdef)
    try:
        algebra = prepare_sparql(query.prefixes, query.base, "SELECT * WHERE {" + gdef.body + "\n}")
        walker = _VariableWalker()
        walker.pattern(algebra["p"]["p"])
    except Exception as e:
        # Oxigraph accepted the pattern but rdflib cannot build its algebra (it trips over
        # some literal mixes, SERVICE, and nesting its recursive parser cannot take): every
        # variable counts as bindable, no fast path for it.
        names = frozenset(_VARIABLE.findall(_without_strings(gdef.body)))
        why = " (it nests too deeply for rdflib's parser)" if isinstance(e, RecursionError) else ""
        query.warnings.append(f"GPM {gdef.name}: its pattern could not be analysed in detail{why}; "
                              "it is evaluated by Oxigraph and its FILTER variables are not checked")
        return GpmPattern(name=gdef.name, streams=stream_iris, body=gdef.body, prologue=prologue,
                          pos=gdef.pos, mentioned=names, bindable=names, service_timeout=timeout)
    _check_functions(walker.functions, gdef)
    return GpmPattern(
        name=gdef.name, streams=stream_iris, body=gdef.body, prologue=prologue, pos=gdef.pos,
        mentioned=frozenset(walker.mentioned), bindable=frozenset(walker.bindable),
        filter_vars=walker.filter_vars, kb_graphs=frozenset(walker.graphs),
        kb_graph_var=walker.graph_var, algebra=algebra["p"]["p"], size=walker.triples,
        service_timeout=timeout)


def parse_only(text: str) -> None:
    """Parse a SPARQL SELECT query with pyoxigraph without evaluating it: raises
    SyntaxError.  The query is joined with an empty VALUES block, which
    Oxigraph's optimizer turns into the empty pattern before evaluation starts,
    so no SERVICE is called and no pattern is matched."""
    ox.Store().query(text + "\nVALUES () {}")


def _check_syntax(prologue: str, gdef: GpmDef) -> None:
    header = prologue + " SELECT * WHERE {"
    try:
        parse_only(header + gdef.body + "\n}")
    except SyntaxError as e:
        message = str(e)
        match = _OXIGRAPH_ERROR.match(message)
        line, column = gdef.body_pos.line, gdef.body_pos.column
        if match:
            err_line, err_col, message = int(match[1]), int(match[2]), match[3]
            if err_line == 1:
                column = max(gdef.body_pos.column, gdef.body_pos.column + err_col - 1 - len(header))
            else:
                line, column = gdef.body_pos.line + err_line - 1, err_col
        message = message.split("\n")[0]
        if "Prefix not found" in message:
            message = "a prefix is not declared (add a PREFIX line)"
        elif message.startswith("expected one of"):
            message = "unexpected text in the pattern (" + message + ")"
        if len(message) > 160:
            message = message[:160] + "..."
        raise QueryError(f"GPM {gdef.name}: SPARQL syntax error: {message}", line, column) from None


def _check_functions(functions: dict[str, int], gdef: GpmDef) -> None:
    """Functions called by IRI must be ones Oxigraph or a plugin provides, with an arity
    they take.  Oxigraph checks that when it plans a query: each call is planned in a
    query of its own, on unbound arguments and with LIMIT 0, so nothing is called."""
    from ..plugins import sparql_functions
    provided = sparql_functions() or None
    for iri, arity in functions.items():
        arguments = ", ".join(f"?a{i}" for i in range(arity))
        try:
            ox.Store().query(f"SELECT * WHERE {{ BIND(<{iri}>({arguments}) AS ?r) }} LIMIT 0",
                             custom_functions=provided)
        except (RuntimeError, SyntaxError) as e:       # e.g. a function no plugin provides
            raise QueryError(f"GPM {gdef.name}: {e} (see 'spaseq plugins')",
                             gdef.body_pos.line, gdef.body_pos.column) from None


class _VariableWalker:
    """Collects variable roles from an rdflib algebra tree."""

    def __init__(self):
        self.mentioned: set[str] = set()
        self.bindable: set[str] = set()
        self.filter_vars: dict[str, None] = {}
        self.graphs: set[str] = set()
        self.graph_var = False
        self.triples = 0
        self.functions: dict[str, int] = {}     # IRIs of the functions called -> their arity

    def pattern(self, node, binding: bool = True) -> None:
        if isinstance(node, Variable):
            self.mentioned.add(str(node))
            if binding:
                self.bindable.add(str(node))
            return
        if isinstance(node, (list, tuple)):
            for item in node:
                self.pattern(item, binding)
            return
        if not isinstance(node, CompValue):
            return
        name = node.name
        if name in ("BGP",):
            self.triples += len(node.triples)
            for triple in node.triples:
                for term in triple:
                    self._path_term(term, binding)
        elif name == "Filter":
            self.expression(node.expr)
            self.pattern(node.p, binding)
        elif name == "Extend":
            self.expression(node.expr, record_filter=False)
            self.pattern(node.var, binding)
            self.pattern(node.p, binding)
        elif name == "LeftJoin":
            self.pattern(node.p1, binding)
            self.pattern(node.p2, binding)
            if node.expr is not None and getattr(node.expr, "name", "") != "TrueFilter":
                self.expression(node.expr)
        elif name == "Minus":
            self.pattern(node.p1, binding)
            self.pattern(node.p2, False)
        elif name == "Graph":
            term = node.term
            if isinstance(term, Variable):
                self.graph_var = True
                self.pattern(term, binding)
            elif isinstance(term, URIRef):
                self.graphs.add(unalias(str(term)))
            self.pattern(node.p, binding)
        elif name in ("values", "ToMultiSet") and "res" in node:
            for row in node.res:
                for var in row:
                    self.pattern(var, binding)
        elif name == "Project":
            for var in node.PV:
                self.pattern(var, binding)
            self.pattern(node.p, False)
        else:
            for key, value in node.items():
                if key.startswith("_"):
                    continue
                if key in ("expr",):
                    self.expression(value, record_filter=False)
                else:
                    self.pattern(value, binding)

    def _path_term(self, term, binding: bool) -> None:
        if isinstance(term, Variable):
            self.pattern(term, binding)

    def expression(self, expr, record_filter: bool = True) -> None:
        if isinstance(expr, Variable):
            self.mentioned.add(str(expr))
            if record_filter:
                self.filter_vars[str(expr)] = None
            return
        if isinstance(expr, (list, tuple)):
            for item in expr:
                self.expression(item, record_filter)
            return
        if not isinstance(expr, CompValue):
            return
        if expr.name in ("Builtin_EXISTS", "Builtin_NOTEXISTS"):
            self.pattern(expr.graph, False)
            return
        if expr.name == "Function":
            self.functions[unalias(str(expr.iri))] = len(expr.get("expr") or ())
        for key, value in expr.items():
            if not key.startswith("_"):
                self.expression(value, record_filter)


def placement_pattern(gpm: GpmPattern) -> GpmPattern:
    """The GPM that places events into PARTITION BY sub-streams.

    An event belongs to key k when a GPM binds the partition variables to k
    on it (semantics.md section 8).  A FILTER that reads another GPM's
    variable (``FILTER(?b > ?a)``) cannot be judged on the event alone, and
    it does not bind anything: the placement pattern is the GPM without
    such top-level FILTER conjuncts, so the event of B is in the sub-stream
    whatever the run it may extend.
    """
    from rdflib.plugins.sparql.algebra import Filter, Project, translateAlgebra
    from rdflib.plugins.sparql.operators import and_
    from rdflib.plugins.sparql.sparql import Prologue, Query as RdflibQuery

    from .filters import conjuncts, variables

    node = gpm.algebra
    if not (isinstance(node, CompValue) and node.name == "Filter"):
        return gpm      # (also when the pattern could not be analysed)
    parts = conjuncts(node.expr)
    kept = [c for c in parts if variables(c) <= gpm.bindable]
    if len(kept) == len(parts):
        return gpm
    pattern = node.p if not kept else Filter(and_(*kept) if len(kept) > 1 else kept[0], node.p)
    projected = [Variable(v) for v in sorted(gpm.bindable)]
    try:
        text = translateAlgebra(RdflibQuery(Prologue(), CompValue("SelectQuery", p=Project(pattern, projected),
                                                                   PV=projected, datasetClause=None)))
        body = text[text.index("{") + 1:text.rindex("}")]
        parse_only("SELECT * WHERE {" + body + "}")
    except Exception:      # rdflib cannot write this pattern back: keep the whole GPM
        return gpm
    return GpmPattern(
        name=gpm.name + " (placement)", streams=gpm.streams, body=body, prologue="", pos=gpm.pos,
        mentioned=gpm.mentioned, bindable=gpm.bindable,
        filter_vars={v: None for c in kept for v in variables(c)}, kb_graphs=gpm.kb_graphs,
        kb_graph_var=gpm.kb_graph_var, algebra=pattern, size=gpm.size, service_timeout=gpm.service_timeout)
