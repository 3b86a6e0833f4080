"""Matches -> results (semantics.md section 9).

SELECT projects a match's mapping (a Kleene variable shows its last
iteration; aggregates run over the iterations of that one match, evaluated
by pyoxigraph so they follow SPARQL exactly).  CONSTRUCT instantiates its
template into a new graph at the match time; the sinks write the graphs of
one match time as one event (``merge_constructed``).
"""

from __future__ import annotations

import hashlib
import itertools

import pyoxigraph as ox
try:
    import cython
except ImportError:     # interpreted, without Cython installed
    from ..compiled import shadow as cython
if not cython.compiled:     # interpreted, with Cython installed too: declared attributes become slots
    from ..compiled import shadow as cython
from rdflib.term import BNode, Variable

from ..language.compiler import CompiledQuery
from ..events import Event, Time
from ..errors import StateLimitError
from ..evaluators.protocol import Term, term_text
from .nfa_runtime import Match
from ..language.syntax import Aggregate

_MATCH_GRAPH = "urn:spaseq:match:"


@cython.cclass
class Result:
    """One query answer.

    ``bindings`` (SELECT) maps variable names to terms, unbound ones left
    out; ``triples`` (CONSTRUCT) is the new event's graph.  ``events`` are
    the events that made the match.  (A typed class, made once per result:
    see runtime/nfa_runtime.py's Run.)
    """
    time = cython.declare(object, visibility="public")
    is_datetime = cython.declare(object, visibility="public")
    bindings = cython.declare(object, visibility="public")
    triples = cython.declare(object, visibility="public")
    events = cython.declare(object, visibility="public")
    graph = cython.declare(object, visibility="public")
    id = cython.declare(object, visibility="public")

    def __init__(self, time: Time, is_datetime: bool, bindings: dict[str, Term] | None,
                 triples: list[ox.Triple] | None, events: tuple[Event, ...],
                 graph: ox.NamedNode | None = None, id: str | None = None):
        self._fill(time, is_datetime, bindings, triples, events, graph, id)

    @cython.cfunc
    def _fill(self, time, is_datetime, bindings, triples, events, graph, id) -> None:
        self.time = time
        self.is_datetime = is_datetime
        self.bindings = bindings
        self.triples = triples
        self.events = events
        self.graph = graph
        self.id = id            # with checkpoints: the same for the same result on every run (result_id)

    def __repr__(self) -> str:
        return f"Result(time={self.time!r}, is_datetime={self.is_datetime!r}, bindings={self.bindings!r}, " \
               f"triples={self.triples!r}, events={self.events!r}, graph={self.graph!r}, id={self.id!r})"


@cython.cfunc
@cython.locals(result=Result)
def _new_result(time, is_datetime, bindings, triples, events: tuple, graph) -> Result:
    """A new Result, made without calling the type (compiled, the call through the
    type and its ``__init__``'s argument parsing cost more than setting the fields;
    skip-till-any makes several results an event)."""
    result = Result.__new__(Result)
    result._fill(time, is_datetime, bindings, triples, events, graph, None)
    return result


def row_key(bindings: dict[str, Term]) -> bytes:
    """What DISTINCT keeps of a row: 16 bytes of BLAKE2b over its bindings, so that
    its memory is the same per row whatever the row holds (kept whole, rows of 20 KB
    literals took 2 GB at 80,000 of the 1,000,000 --max-distinct allows).  Two
    different rows share a key with a chance of 2**-128 a pair (among a billion
    rows, 10**-21; made on purpose, about 2**64 tries): the later would be dropped."""
    hashed = hashlib.blake2b(digest_size=16)
    for name, value in sorted(bindings.items()):
        text = term_text(value)
        # (each text's length before it: no two rows give the same bytes)
        hashed.update(f"{name} {len(text)} {text}".encode("utf-8", "surrogatepass"))
    return hashed.digest()


@cython.ccall
@cython.locals(seen=set, most=cython.Py_ssize_t)
def first_distinct(seen: set, key: bytes, most: int) -> bool:
    """Whether DISTINCT outputs the row whose :func:`row_key` is ``key``, remembered in
    ``seen`` when it does: at most ``most`` rows are (--max-distinct), each for the
    query's lifetime."""
    if key in seen:
        return False
    if len(seen) >= most:
        raise StateLimitError(f"DISTINCT has output {len(seen):,} rows, the most it keeps (--max-distinct): it "
                              "keeps each for the query's lifetime, to drop a later equal one; raise the limit, "
                              "or lift it with none")
    seen.add(key)
    return True


_UNLIMITED = 1 << 62        # (a C integer when compiled)


@cython.cclass
class Projector:
    """Turns matches into results for one query."""
    q = cython.declare(object, visibility="public")
    distinct_seen = cython.declare(object, visibility="public")
    _max_distinct = cython.declare(cython.Py_ssize_t, visibility="public")
    template = cython.declare(object, visibility="public")
    _plain = cython.declare(tuple, visibility="public")
    _count = cython.declare(object, visibility="public")
    _agg_store = cython.declare(object, visibility="public")

    def __init__(self, compiled: CompiledQuery, max_distinct: int | None = None):
        self.q = compiled
        self.distinct_seen: set | None = set() if compiled.query.distinct else None
        # DISTINCT keeps each row it output for the query's lifetime: at most this many
        self._max_distinct = _UNLIMITED if max_distinct is None else min(max_distinct, _UNLIMITED)
        self.template = compiled.template
        # SELECT without aggregates, the common case: the projected variables, read off μ
        self._plain = None if any(isinstance(item, Aggregate) for item in compiled.projection) \
            else tuple(compiled.projection)
        self._count = itertools.count(1)
        self._agg_store = ox.Store()

    def snapshot(self, out) -> dict:
        """DISTINCT's memory and the CONSTRUCT graph counter (``Engine.snapshot``)."""
        number = next(self._count)
        self._count = itertools.count(number)
        seen = None if self.distinct_seen is None else [key.hex() for key in self.distinct_seen]
        return {"distinct": seen, "count": number}

    def restore(self, data: dict, inp) -> None:
        self._count = itertools.count(data["count"])
        if self.distinct_seen is not None:
            # (a checkpoint written before rows were kept as keys holds the rows)
            self.distinct_seen = {bytes.fromhex(row) if isinstance(row, str) else row_key(inp.mapping(row))
                                  for row in data["distinct"] or ()}

    def project(self, match: Match) -> Result | None:
        """The result of a match, or ``None`` when DISTINCT has seen it."""
        return self._project(match)

    @cython.cfunc
    @cython.locals(mu=dict)
    def _project(self, match: Match) -> Result | None:
        is_dt = bool(match.events) and match.events[0].is_datetime
        if self.template is not None:
            number = next(self._count)
            triples = self._construct(match.mu, number, match.events)
            return _new_result(match.time, is_dt, None, triples, match.events,
                               ox.NamedNode(f"{_MATCH_GRAPH}{number}"))
        mu = match.mu
        if self._plain is not None:
            bindings: dict[str, Term] = {}
            for v in self._plain:
                value = mu.get(v)           # (one lookup, not `in` and then `[]`)
                if value is not None:
                    bindings[v] = value
        else:
            bindings = {}
            for item in self.q.projection:
                if isinstance(item, Aggregate):
                    value = self._aggregate(item, match)
                    if value is not None:
                        bindings[item.alias] = value
                elif item in mu:
                    bindings[item] = mu[item]
        if self.distinct_seen is not None and not first_distinct(self.distinct_seen, row_key(bindings),
                                                                 self._max_distinct):
            return None
        return _new_result(match.time, is_dt, bindings, None, match.events, None)

    def _values(self, var: str | None, match: Match) -> list[Term]:
        if var is None:                       # COUNT(*): one row per event of the match
            return [ox.Literal(str(i)) for i in range(len(match.events))]
        # a variable first bound inside a Kleene atom in this match (the iterations keep
        # only those): over its iterations, of every Kleene atom it is local to in this
        # match; it may be bound before the atom in another match of the same query (an
        # optional atom taken or skipped)
        values = [it[var] for _, iterations in match.iterations for it in iterations if var in it]
        if values:
            return values
        value = match.mu.get(var)
        return [] if value is None else [value]

    def _aggregate(self, agg: Aggregate, match: Match) -> Term | None:
        values = self._values(agg.var, match)
        rows = " ".join(f"({_sparql_term(v)})" for v in values)
        arg = ("DISTINCT " if agg.distinct else "") + "?v"
        if agg.function == "GROUP_CONCAT":
            arg += f' ; SEPARATOR="{_escape(agg.separator)}"'
        text = f"SELECT ({agg.function}({arg}) AS ?r) WHERE {{ VALUES (?v) {{ {rows} }} }}"
        for solution in self._agg_store.query(text):
            return _from_sparql(solution["r"])
        return None

    def _construct(self, mu: dict[str, Term], number: int, events: tuple[Event, ...]) -> list[ox.Triple]:
        bnodes: dict[str, ox.BlankNode] = {}
        names = None
        out = []
        for triple in self.template:
            terms = []
            for term in triple:
                if isinstance(term, Variable):
                    value = mu.get(str(term))
                elif isinstance(term, BNode):
                    value = bnodes.get(str(term))
                    if value is None:
                        if names is None:
                            names = _blank_names(mu, number, events)
                        label = names.copy()
                        label.update(b" %d" % len(bnodes))
                        value = bnodes[str(term)] = ox.BlankNode(label.hexdigest())
                else:
                    value = term
                if value is None:
                    break
                terms.append(value)
            else:
                s, p, o = terms
                if isinstance(s, ox.Literal) or not isinstance(p, ox.NamedNode):
                    continue       # not a valid triple: skipped, as SPARQL CONSTRUCT does
                out.append(ox.Triple(s, p, o))
        return out


def _blank_names(mu: dict[str, Term], number: int, events: tuple[Event, ...]):
    """What the blank nodes of CONSTRUCT's ``number``-th result are named from (each
    adds its place in the template), so that a run writes the same bytes as another
    over the same input, and as one resumed from a checkpoint (the numbering
    resumes): the number, the match's events and bindings.  The bindings hold
    any blank node of the input the template copies: a name made here is none
    of theirs, even where a query reads its own output back."""
    names = hashlib.blake2b(row_key(mu), digest_size=16)
    names.update(" ".join([str(number)] + [f"{e.stream} {e.time}" for e in events]).encode("utf-8"))
    return names


@cython.cclass
class Collector:
    """A run's results in order, and the counts of matches and results.  The runtime
    hands each match to :meth:`add` itself when nothing else is wanted of a result
    (no result ids, no callback: ``Engine``), so that a match becomes a kept result
    in compiled code, without a Python frame."""
    projector = cython.declare(Projector, visibility="public")
    out = cython.declare(list, visibility="public")
    matches = cython.declare(cython.longlong, visibility="public")
    results = cython.declare(cython.longlong, visibility="public")

    def __init__(self, projector: Projector):
        self.projector = projector
        self.out = []           # results not yet handed out
        self.matches = 0
        self.results = 0

    @cython.ccall
    def project(self, match: Match) -> Result | None:
        """The match's result (None: DISTINCT has seen it), counted, not kept."""
        self.matches += 1
        result = self.projector._project(match)
        if result is not None:
            self.results += 1
        return result

    def add(self, match: Match) -> None:
        result = self.project(match)
        if result is not None:
            self.out.append(result)


def merge_constructed(results: list[Result]) -> Result:
    """CONSTRUCT results of one match time as one graph event: the union of
    their graphs (each match keeps its own fresh blank nodes), named after
    the first, made from all their events.  A stream has at most one graph
    per timestamp (semantics.md section 1), so an output stream carries one
    event per match time, and reads back whole as another query's input."""
    first = results[0]
    if len(results) == 1:
        return first
    triples = list(dict.fromkeys(t for result in results for t in result.triples or ()))
    events = tuple(dict.fromkeys(e for result in results for e in result.events))
    return Result(first.time, first.is_datetime, None, triples, events, first.graph)


class ConstructedEvents:
    """Collects CONSTRUCT results into one event per match time (see
    :func:`merge_constructed`) for a sink: :meth:`add` returns the event of
    the previous time when a result of another time comes, :meth:`flush`
    the event being collected (None if there is none)."""

    def __init__(self):
        self.results: list[Result] = []

    def add(self, result: Result) -> Result | None:
        done = None
        if self.results and result.time != self.results[0].time:
            done = self.flush()
        self.results.append(result)
        return done

    def flush(self) -> Result | None:
        if not self.results:
            return None
        results, self.results = self.results, []
        return merge_constructed(results)


def result_id(query_hash: str, result: Result) -> str:
    """A result's id, the same on every run of the query over the same input:
    a hash of the query, the match time, the events (stream and time) and the
    bindings (SELECT) or the graph's name (CONSTRUCT: numbered in match order).
    A sink that may see a result twice after a restart (at-least-once) tells
    duplicates by it."""
    parts = [query_hash, str(result.time)]
    parts += [f"{e.stream} {e.time}" for e in result.events]
    if result.bindings is not None:
        parts += sorted(f"{name}={value}" for name, value in result.bindings.items())
    elif result.graph is not None:
        parts.append(str(result.graph))
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:32]


_BNODE = "urn:spaseq:bnode:"     # VALUES cannot hold a blank node: it goes in as this IRI ...


def _sparql_term(term: Term) -> str:
    if isinstance(term, ox.BlankNode):
        return f"<{_BNODE}{term.value}>"
    return term_text(term)


def _from_sparql(term: Term | None) -> Term | None:
    """... and comes back out of MIN, MAX or SAMPLE as the blank node."""
    if isinstance(term, ox.NamedNode) and term.value.startswith(_BNODE):
        return ox.BlankNode(term.value[len(_BNODE):])
    return term


_STRING_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"})


def _escape(text: str) -> str:
    """``text`` as the inside of a SPARQL ``"..."`` literal (the characters STRING_LITERAL2
    cannot hold as they are: quote, backslash, line feed, carriage return)."""
    return text.translate(_STRING_ESCAPES)


def term_to_json(term: Term) -> dict:
    """A term as a SPARQL 1.1 JSON results term."""
    if isinstance(term, ox.NamedNode):
        return {"type": "uri", "value": term.value}
    if isinstance(term, ox.BlankNode):
        return {"type": "bnode", "value": term.value}
    if isinstance(term, ox.Triple):
        return {"type": "triple", "value": {"subject": term_to_json(term.subject),
                                            "predicate": term_to_json(term.predicate),
                                            "object": term_to_json(term.object)}}
    out = {"type": "literal", "value": term.value}
    if term.language:
        out["xml:lang"] = term.language
    elif term.datatype.value != "http://www.w3.org/2001/XMLSchema#string":
        out["datatype"] = term.datatype.value
    return out
