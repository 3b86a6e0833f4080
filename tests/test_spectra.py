"""The fast GPM path against Oxigraph: same solutions on random events,
patterns, FILTERs and injected bindings (SPARQL term semantics included).

Each example's events hold a planted instance of its patterns, and half of
its mappings are consistent with it, so most examples have solutions; the
test asserts that at least half do, and that the fast path answered (a
plan, no fall-back to Oxigraph) in most of them.  Solutions are compared as
whole multisets per mapping.  Blank nodes: a mapping may hold one; Oxigraph
then sees the event's and the mapping's blank nodes as skolem IRIs
(docs/semantics.md, open point 12), which only functions that look at a
term's kind (isIRI, isBlank, STR) can tell apart, so for a body that uses
one of them both sides are given the skolemised event and mapping."""

import collections
import json
import os
import re

import pyoxigraph as ox
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from spaseq_plugin import compile_query
from spaseq_plugin.events import Event
from spaseq_plugin.evaluators.oxigraph import OxigraphEvaluator
from spaseq_plugin.evaluators.spectra import SpectraEvaluator
from spaseq_plugin.evaluators.sparql_values import MAX_CACHED_TERM_CHARS, RevisitedTermCache, term_cache

from helpers import examples

EX = "http://e/"
XSD = "http://www.w3.org/2001/XMLSchema#"


def lit(value, datatype=None, lang=None):
    if lang:
        return ox.Literal(value, language=lang)
    return ox.Literal(value, datatype=ox.NamedNode(XSD + datatype)) if datatype else ox.Literal(value)


TERMS = [ox.NamedNode(EX + n) for n in ("s1", "s2", "s3")] + [
    lit("1", "integer"), lit("01", "integer"), lit("-2", "integer"), lit("3", "int"),
    lit("1.5", "decimal"), lit("2.0", "decimal"), lit("1e0", "double"), lit("2.5E1", "double"),
    lit("NaN", "double"), lit("a"), lit("b"), lit("ab"), lit("a", lang="en"), lit("A", lang="EN"),
    lit("true", "boolean"), lit("0", "boolean"),
    lit("2020-01-01T00:00:00Z", "dateTime"), lit("2020-01-01T00:00:01Z", "dateTime"),
    lit("2020-01-01T00:00:00", "dateTime"), lit("x", None), lit("abc", "integer"),
    lit("-0", "integer"), lit("0", "integer"), lit("-0.0", "decimal"),      # Oxigraph stores both as 0
    ox.Literal("v", datatype=ox.NamedNode(EX + "custom")), ox.BlankNode("b1"),
]
SUBJECTS = [t for t in TERMS if isinstance(t, (ox.NamedNode, ox.BlankNode))]
PREDICATES = [ox.NamedNode(EX + p) for p in ("p", "q", "r")]
VARS = ["x", "y", "z"]


def sparql(term) -> str:
    return str(term)


terms = st.sampled_from([t for t in TERMS if not isinstance(t, ox.BlankNode)])
var = st.sampled_from(VARS + ["m"])          # ?m is only ever bound by the run

operand = st.one_of(var.map(lambda v: "?" + v), terms.map(sparql),
                    st.sampled_from(["1", "2.5", "-1", '"a"', "true", "1e1"]))


def expressions(depth=2):
    base = st.one_of(
        st.tuples(operand, st.sampled_from(["=", "!=", "<", ">", "<=", ">="]), operand).map(" ".join),
        var.map(lambda v: f"BOUND(?{v})"),
        st.tuples(st.sampled_from(["isIRI", "isLiteral", "isNumeric", "isBlank"]), var).map(
            lambda t: f"{t[0]}(?{t[1]})"),
        st.tuples(var, st.sampled_from(['"a"', '"A"', '"^a"', '"b$"'])).map(lambda t: f'REGEX(STR(?{t[0]}), {t[1]}, "i")'),
        st.tuples(var, operand).map(lambda t: f"STRLEN(STR(?{t[0]})) > {t[1]}"),
        st.tuples(var, st.sampled_from(['"a"', '"b"'])).map(lambda t: f"CONTAINS(STR(?{t[0]}), {t[1]})"),
        st.tuples(var, operand, st.sampled_from(["+", "-", "*", "/"]), operand).map(
            lambda t: f"?{t[0]} {t[2]} {t[1]} > {t[3]}"),
        st.tuples(var, operand).map(lambda t: f"ABS(?{t[0]}) >= {t[1]}"),
        st.tuples(var, operand, operand).map(lambda t: f"?{t[0]} IN ({t[1]}, {t[2]})"),
        st.tuples(var, st.sampled_from(['"en"', '""'])).map(lambda t: f"LANG(?{t[0]}) = {t[1]}"),
    )
    if depth == 0:
        return base
    sub = expressions(depth - 1)
    return st.one_of(base, st.tuples(sub, st.sampled_from(["&&", "||"]), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
                     sub.map(lambda e: f"!({e})"))


position = st.one_of(var.filter(lambda v: v != "m").map(lambda v: "?" + v), terms.map(sparql))
triple_pattern = st.tuples(st.one_of(st.sampled_from(["?x", "?y"]), st.sampled_from(SUBJECTS[:3]).map(sparql)),
                           st.sampled_from(PREDICATES).map(sparql), position).map(" ".join)


@st.composite
def cases(draw):
    patterns = draw(st.lists(st.tuples(st.sampled_from(["?x", "?y", SUBJECTS[0], SUBJECTS[1]]),
                                       st.sampled_from(PREDICATES), st.one_of(st.sampled_from(["?x", "?y", "?z"]),
                                                                             st.sampled_from(TERMS))),
                             min_size=1, max_size=3))
    # a planted instance of the patterns, then random triples
    chosen = {v: draw(st.sampled_from(SUBJECTS + SUBJECTS[-1:] if v in ("?x", "?y") else TERMS))
              for v in ("?x", "?y", "?z")}
    filters = []
    for _ in range(draw(st.integers(0, 2))):
        f = draw(expressions())
        if draw(st.sampled_from([True, True, False])):
            f = _holding(f, chosen)           # most filters hold on the planted instance
        if f:
            filters.append(f)
    body = " . ".join(" ".join(sparql(t) if not isinstance(t, str) else t for t in p) for p in patterns)
    body += " . " + " ".join(f"FILTER({f})" for f in filters)
    planted = []
    for s, p, o in patterns:
        s, o = chosen.get(s, s), chosen.get(o, o)
        if isinstance(s, (ox.NamedNode, ox.BlankNode)):
            planted.append((s, p, o))
    noise = draw(st.lists(st.tuples(st.sampled_from(SUBJECTS), st.sampled_from(PREDICATES), st.sampled_from(TERMS)),
                          max_size=6))
    triples = list(dict.fromkeys(planted + noise)) or noise or [(SUBJECTS[0], PREDICATES[0], TERMS[3])]
    mappings = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.sampled_from([True, True, False])):      # consistent with the planted instance
            names = draw(st.lists(st.sampled_from(["x", "y", "z"]), max_size=2, unique=True))
            mappings.append({n: chosen["?" + n] for n in names})
        else:
            mappings.append(draw(st.dictionaries(st.sampled_from(VARS + ["m"]), st.sampled_from(TERMS), max_size=2)))
    return body, triples, mappings


def _holding(expression: str, solution: dict) -> str | None:
    """``expression`` or its negation, whichever is true for ``solution`` (None: an error)."""
    values = " ".join(str(as_iri(solution[v])) for v in ("?x", "?y", "?z"))
    text = f"SELECT ?a ?b WHERE {{ VALUES (?x ?y ?z) {{ ({values}) }} BIND(({expression}) AS ?a) BIND(!({expression}) AS ?b) }}"
    for row in ox.Store().query(text):
        if row["a"] == ox.Literal(True):
            return expression
        if row["b"] == ox.Literal(True):
            return f"!({expression})"
    return None


QUERY = """SELECT * FROM STREAM S <http://s> WHERE {{ SEQ (A ; B)
  DEFINE GPM A ON S {{ {body} }}
  DEFINE GPM B ON S {{ ?x <http://e/b> ?y . ?z <http://e/b> ?m }} }}"""
KIND_SENSITIVE = re.compile(r"\b(isIRI|isURI|isBlank|STR)\s*\(", re.I)


def canonical_rows(rows):
    """Rows as a multiset, blank nodes named by their order of first appearance."""
    names: dict = {}

    def show(term):
        if isinstance(term, ox.BlankNode):
            return names.setdefault(term, f"_:b{len(names)}")
        return str(term)

    return collections.Counter(tuple(sorted((k, show(v)) for k, v in row.items()))
                               for row in sorted(rows, key=lambda r: sorted((k, str(v)) for k, v in r.items())))


STATS = collections.Counter()


def as_iri(term):
    """A blank node as an IRI of the test's own (not the evaluator's skolem namespace)."""
    return ox.NamedNode("urn:test:bnode:" + term.value) if isinstance(term, ox.BlankNode) else term


def test_fast_path_agrees_with_oxigraph():
    before = STATS.copy()

    @settings(max_examples=examples(1))
    @given(cases())
    def agree(case):
        body, triples, mappings = case
        gpm = compile_query(QUERY.format(body=body)).gpms["A"]
        event = Event("http://s", 1, tuple(ox.Triple(*t) for t in triples))
        if KIND_SENSITIVE.search(body) and any(isinstance(v, ox.BlankNode) for m in mappings for v in m.values()):
            # what Oxigraph sees: the same skolem IRIs on both sides
            event = Event("http://s", 1, tuple(ox.Triple(as_iri(t.subject), t.predicate, as_iri(t.object))
                                               for t in event.triples))
            mappings = [{k: as_iri(v) for k, v in m.items()} for m in mappings]
            STATS["skolemised"] += 1
        note(f"{body}\n{event.triples}\n{mappings}")
        fast, slow = SpectraEvaluator(), OxigraphEvaluator()
        got = fast.evaluate(gpm, event, mappings)
        want = slow.evaluate(gpm, event, mappings)
        assert len(got) == len(want) == len(mappings)
        for mapping, g, w in zip(mappings, got, want):
            assert canonical_rows(g) == canonical_rows(w), mapping
        STATS["examples"] += 1
        STATS["non-empty"] += any(want)
        STATS["fast"] += fast.plan(gpm) is not None and fast.fallbacks == 0
        STATS["blank mappings"] += any(isinstance(v, ox.BlankNode) for m in mappings for v in m.values())

    agree()
    ran = STATS["examples"] - before["examples"]
    assert ran >= min(examples(1), 20)
    assert STATS["non-empty"] - before["non-empty"] >= ran / 2, "most examples must have solutions"
    assert STATS["fast"] - before["fast"] >= 0.8 * ran, "the fast path must answer most examples"
    # (13-17 % of the thorough runs' examples: 10 % failed one run in twenty on the
    # default profile's 300, by chance)
    assert STATS["blank mappings"] - before["blank mappings"] >= 0.05 * ran, "blank nodes must be generated"
    note_counts(STATS)


def note_counts(stats) -> None:
    """The counts, for the long run's report ($SPASEQ_PROPERTY_REPORT)."""
    if os.environ.get("SPASEQ_PROPERTY_REPORT"):
        with open(os.environ["SPASEQ_PROPERTY_REPORT"], "a") as f:
            f.write(json.dumps({"module": "spectra", "counts": {"fast path": dict(stats)}}) + "\n")


def test_unsupported_shapes_fall_back_and_say_why():
    compiled = compile_query(QUERY.format(body="?x <http://e/p> ?y OPTIONAL { ?y <http://e/q> ?z } FILTER(?y > 1)"))
    fast = SpectraEvaluator()
    assert fast.plan(compiled.gpms["A"]) is None
    assert fast.describe(compiled.gpms["A"]).startswith("oxigraph (LeftJoin")


PLACED = """PREFIX : <http://e/>
SELECT * WITHIN 10 SECONDS PARTITION BY (?c) FROM STREAM S <http://s> FROM STREAM T <http://t>
WHERE {{ SEQ (A ; B ; C ; D)
  DEFINE GPM A ON S {{ ?c :price ?p1 }}
  DEFINE GPM B ON S {{ ?c :price ?p2 FILTER(?p2 > ?p1) }}
  DEFINE GPM C ON S {{ {c_body} }}
  DEFINE GPM D ON T {{ ?c :price ?p4 }} }}"""


@pytest.mark.parametrize("c_body, kept", [
    ("?c :price ?p3", ["A", "D"]),              # B and C place events as A does
    ("?p3 :price ?c", ["A", "C", "D"]),         # the key in the other place
    ("?c :price ?p3 FILTER(?p3 > 2)", ["A", "C", "D"]),   # fewer solutions
])
def test_placement_asks_each_distinct_pattern_once(c_body, kept):
    from spaseq_plugin.runtime.nfa_runtime import Runtime
    compiled = compile_query(PLACED.format(c_body=c_body))
    runtime = Runtime(compiled, SpectraEvaluator(), lambda match: None)
    assert [g.name.split()[0] for g in runtime._placement] == kept   # D reads another stream
    assert len(compiled.placement) == 4
    assert Runtime(compiled, OxigraphEvaluator(), lambda match: None)._placement == compiled.placement


@pytest.mark.parametrize("constraint, kept", [('true > "0"^^xsd:boolean', False), ("false < true", False),
                                               ('true >= "1"^^xsd:boolean', True), ("true < true", False)])
def test_booleans_are_ordered_as_oxigraph_orders_them(constraint, kept):
    # Oxigraph orders a boolean only equal to itself (different values: an error, so
    # the FILTER fails); the fast path once ordered false < true (found by the long run)
    body = f"?x <http://e/p> ?x . FILTER({constraint})"
    gpm = compile_query("PREFIX xsd: <http://www.w3.org/2001/XMLSchema#>\n" + QUERY.format(body=body)).gpms["A"]
    node = ox.NamedNode("http://e/s1")
    event = Event("http://s", 1, (ox.Triple(node, ox.NamedNode("http://e/p"), node),))
    fast, slow = SpectraEvaluator(), OxigraphEvaluator()
    [got], [want] = fast.evaluate(gpm, event, [{}]), slow.evaluate(gpm, event, [{}])
    assert canonical_rows(got) == canonical_rows(want) and bool(want) == kept
    assert fast.plan(gpm) is not None and fast.fallbacks == 0


@pytest.mark.parametrize("value", ["1", "1.0", "1.5", "0.5", "1e0", "2E0", '"b"'])
def test_below_equal_and_above_are_ordered_as_oxigraph_orders_them(value):
    """Each ordering operator between an event's value (an integer, a decimal, a
    double, a string) and constants below, equal to and above it, of each kind
    (the decisive case is the equal one: ``<=`` and ``>=`` keep it, ``<`` and
    ``>`` do not)."""
    p, node = ox.NamedNode("http://e/p"), ox.NamedNode("http://e/s1")
    kinds = {"1": "integer", "1.0": "decimal", "1.5": "decimal", "0.5": "decimal", "1e0": "double",
             "2E0": "double", '"b"': "string"}
    literal = ox.Literal(value.strip('"'), datatype=ox.NamedNode(XSD + kinds[value]))
    event = Event("http://s", 1, (ox.Triple(node, p, literal),))
    fast, slow = SpectraEvaluator(), OxigraphEvaluator()
    kept = 0
    for constant in ("0", "1", "2", "1.0", "1.5", "1e0", '"a"', '"b"', '"c"'):
        for op in ("<", "<=", ">", ">="):
            gpm = compile_query(QUERY.format(body=f"?x <http://e/p> ?v . FILTER(?v {op} {constant})")).gpms["A"]
            [got], [want] = fast.evaluate(gpm, event, [{}]), slow.evaluate(gpm, event, [{}])
            assert canonical_rows(got) == canonical_rows(want), (value, op, constant)
            kept += bool(want)
    assert kept >= 6 and fast.fallbacks == 0


@pytest.mark.parametrize("value, constraint, kept", [
    ('"9223372036854775807"^^xsd:integer', "?v > 0", True),       # the largest 64-bit integer
    ('"170141183460469231731.687303715884105727"^^xsd:decimal', "?v > 0", True),    # and decimal
    ('"9223372036854775808"^^xsd:integer', "?v > 1e308", False),  # was an internal error (OverflowError)
    ('"1' + '0' * 400 + '"^^xsd:integer', "?v > 5", False),         # was kept: Python's int has no bound
    ('"9223372036854775807"^^xsd:integer', "?v + 1 > 0", False),  # overflows in Oxigraph
    ('"-9223372036854775808"^^xsd:integer', "-?v > 0", False),
    ('"4611686018427387904"^^xsd:integer', "?v * 2 > 0", False),
    ('"170141183460469231731.0"^^xsd:decimal', "?v + 1.0 > 0", False),
    ('"0.0000000000000000001"^^xsd:decimal', "?v >= 0", False),   # 19 digits after the point
    ('"1.50000000000000000000"^^xsd:decimal', "?v > 1", True),    # trailing zeros are fine
])
def test_numbers_beyond_oxigraph_s_ranges_are_left_to_it(value, constraint, kept):
    """Oxigraph's xsd:integer is 64 bits and its xsd:decimal a 128-bit count of 10^-18:
    beyond them a literal or a result is an error, so the FILTER is false.  The fast
    path leaves such values to Oxigraph (a fallback) rather than compute them exactly."""
    body = f"?x <http://e/p> ?v . FILTER({constraint})"
    gpm = compile_query("PREFIX xsd: <http://www.w3.org/2001/XMLSchema#>\n" + QUERY.format(body=body)).gpms["A"]
    literal = ox.Literal(value.split('"')[1], datatype=ox.NamedNode(XSD + value.rsplit(":", 1)[1]))
    event = Event("http://s", 1, (ox.Triple(ox.NamedNode("http://e/s1"), ox.NamedNode("http://e/p"), literal),))
    fast, slow = SpectraEvaluator(), OxigraphEvaluator()
    [got], [want] = fast.evaluate(gpm, event, [{}]), slow.evaluate(gpm, event, [{}])
    assert canonical_rows(got) == canonical_rows(want) and bool(want) == kept
    assert fast.plan(gpm) is not None and (fast.fallbacks == 0) == kept


@pytest.mark.parametrize("value, constraint", [
    ("12345678901234567890.499999999999999999", "ROUND(?v) = 12345678901234567890.0"),   # was ...891
    ("-12345678901234567890.500000000000000001", "ROUND(?v) = -12345678901234567891.0"),  # was ...890
    ("1234567890123.4999999999999999", "ROUND(?v) < 1234567890124"),
    ("-2.5", "ROUND(?v) = -2"),          # halves towards positive infinity
    ("2.5", "ROUND(?v) = 3"),
    ("99999999999999999999.5", "ROUND(?v) > 99999999999999999999.0"),
])
def test_decimal_round_is_exact(value, constraint):
    """ROUND on a decimal of more than 28 significant digits: Python's default
    context rounded ``x + 0.5`` before the floor, a unit off Oxigraph's answer."""
    body = f"?x <http://e/p> ?v . FILTER({constraint})"
    gpm = compile_query("PREFIX xsd: <http://www.w3.org/2001/XMLSchema#>\n" + QUERY.format(body=body)).gpms["A"]
    literal = ox.Literal(value, datatype=ox.NamedNode(XSD + "decimal"))
    event = Event("http://s", 1, (ox.Triple(ox.NamedNode("http://e/s1"), ox.NamedNode("http://e/p"), literal),))
    fast, slow = SpectraEvaluator(), OxigraphEvaluator()
    [got], [want] = fast.evaluate(gpm, event, [{}]), slow.evaluate(gpm, event, [{}])
    assert want and canonical_rows(got) == canonical_rows(want)
    assert fast.plan(gpm) is not None and fast.fallbacks == 0


@pytest.mark.parametrize("value", ["2.0", "2", "1.999999999999999999", "2.000000000000000001", "-2.0",
                                   "0.0", "-0.5", "123456789012345678.5"])
@pytest.mark.parametrize("constraint", ["?v > 2", "?v >= 2", "?v < 2", "?v <= 2", "?v > -2", "?v < 0",
                                        "?v >= 123456789012345678", "?v < 9223372036854775807"])
def test_a_decimal_against_an_integer_constant_orders_as_oxigraph(value, constraint):
    """An integer constant is compared with decimal values as a decimal: the same
    order as Oxigraph's promotion, at the edges too."""
    body = f"?x <http://e/p> ?v . FILTER({constraint})"
    gpm = compile_query(QUERY.format(body=body)).gpms["A"]
    literal = ox.Literal(value, datatype=ox.NamedNode(XSD + "decimal"))
    event = Event("http://s", 1, (ox.Triple(ox.NamedNode("http://e/s1"), ox.NamedNode("http://e/p"), literal),))
    fast, slow = SpectraEvaluator(), OxigraphEvaluator()
    [got], [want] = fast.evaluate(gpm, event, [{}]), slow.evaluate(gpm, event, [{}])
    assert canonical_rows(got) == canonical_rows(want)
    assert fast.plan(gpm) is not None and fast.fallbacks == 0


def test_a_large_event_is_joined_by_lookups():
    """A view of more rows than _SCANNED_ROWS is looked up by the bound subject or
    object (an event of 30,000 subjects was joined in their square: 15 s); the
    solutions are Oxigraph's, with shared objects, missing rows and a bound object."""
    body = "?x <http://e/p> ?v . ?x <http://e/q> ?w . ?y <http://e/r> ?w"
    gpm = compile_query(QUERY.format(body=body)).gpms["A"]
    p, q, r = (ox.NamedNode(f"http://e/{n}") for n in "pqr")
    triples = []
    for i in range(60):
        node = ox.NamedNode(f"http://e/s{i}")
        triples.append(ox.Triple(node, p, lit(str(i), "integer")))
        if i % 3:
            triples.append(ox.Triple(node, q, lit(str(i % 7), "integer")))
        if i % 5 == 0:
            triples.append(ox.Triple(ox.NamedNode(f"http://e/t{i}"), r, lit(str(i % 7), "integer")))
    event = Event("http://s", 1, tuple(triples))
    fast, slow = SpectraEvaluator(), OxigraphEvaluator()
    [got], [want] = fast.evaluate(gpm, event, [{}]), slow.evaluate(gpm, event, [{}])
    assert len(want) > 60 and canonical_rows(got) == canonical_rows(want)
    assert fast.plan(gpm) is not None and fast.fallbacks == 0


@pytest.mark.parametrize("objects", [
    ["1", "1"],                                  # a triple repeated in an event built by hand
    ["01", "1"],                                 # one triple once canonical
    ["1", "2", "3", "01", "4", "5", "6", "7", "8", "9"],    # more rows than are compared pairwise
])
def test_an_event_is_a_set_of_triples(objects):
    gpm = compile_query(QUERY.format(body="?x <http://e/p> ?y")).gpms["A"]
    node, p = ox.NamedNode("http://e/s1"), ox.NamedNode("http://e/p")
    event = Event("http://s", 1, tuple(ox.Triple(node, p, lit(o, "integer")) for o in objects))
    fast, slow = SpectraEvaluator(), OxigraphEvaluator()
    [got], [want] = fast.evaluate(gpm, event, [{}]), slow.evaluate(gpm, event, [{}])
    assert canonical_rows(got) == canonical_rows(want)
    assert len(got) == len(set(objects) - {"01"}) and fast.fallbacks == 0


def test_the_summary_s_layouts_follow_the_predicates_and_the_plans():
    """The summary remembers each stream's predicates by position, with their slots:
    an event that lists them in another order, or with others, and a GPM planned
    after events were summarised (adding predicates that had no slot) give
    Oxigraph's solutions."""
    s = ox.NamedNode("http://e/s1")
    p, q, r = (ox.NamedNode(f"http://e/{n}") for n in "pqr")
    orders = [(p, q), (q, p), (r, p, q), (p, q)]
    first = compile_query(QUERY.format(body="?x <http://e/p> ?y")).gpms["A"]
    later = compile_query(QUERY.format(body="?x <http://e/p> ?y ; <http://e/q> ?z")).gpms["A"]
    fast, slow = SpectraEvaluator(), OxigraphEvaluator()
    for gpm in (first, later, first):
        for i, predicates in enumerate(orders):
            event = Event("http://s", i, tuple(ox.Triple(s, predicate, lit(str(n), "integer"))
                                               for n, predicate in enumerate(predicates)))
            [got], [want] = fast.evaluate(gpm, event, [{}]), slow.evaluate(gpm, event, [{}])
            assert got and canonical_rows(got) == canonical_rows(want), (gpm is later, predicates)
    assert fast.fallbacks == 0


def test_join_steps_are_kept_apart_by_the_sizes_of_the_views():
    """The join order is chosen by the views' sizes and kept per plan: sizes that
    differ, small ones (keyed as one integer) and large ones (a tuple), each get
    their own steps, and every event gets Oxigraph's solutions."""
    gpm = compile_query(QUERY.format(body="?x <http://e/p> ?y . ?y <http://e/q> ?z")).gpms["A"]
    fast, slow = SpectraEvaluator(), OxigraphEvaluator()
    p, q = ox.NamedNode("http://e/p"), ox.NamedNode("http://e/q")
    sizes = [(1, 300), (300, 1), (2, 3), (3, 2), (256, 2), (2, 256), (1, 1), (2, 3)]
    for time, (a, b) in enumerate(sizes):
        triples = [ox.Triple(ox.NamedNode(f"http://e/x{i}"), p, ox.NamedNode(f"http://e/y{i}")) for i in range(a)]
        triples += [ox.Triple(ox.NamedNode(f"http://e/y{j}"), q, lit(str(j), "integer")) for j in range(b)]
        event = Event("http://s", time, tuple(triples))
        [got], [want] = fast.evaluate(gpm, event, [{}]), slow.evaluate(gpm, event, [{}])
        assert len(got) == min(a, b) and canonical_rows(got) == canonical_rows(want), (a, b)
    assert len(fast.plan(gpm).orders) == len(set(sizes))     # one entry per pair of sizes


def test_a_join_over_several_rows_keeps_no_binding_of_a_failed_branch():
    """A chain ?x p ?y . ?y q ?z . ?z r ?w over views of several rows, where some
    branches fail at the second or third step: each solution has only the values of
    its own branch (the join overwrites bindings, it does not delete them)."""
    gpm = compile_query(QUERY.format(
        body="?x <http://e/p> ?y . ?y <http://e/q> ?z . ?z <http://e/r> ?w")).gpms["A"]
    fast, slow = SpectraEvaluator(), OxigraphEvaluator()
    p, q, r = (ox.NamedNode(f"http://e/{n}") for n in "pqr")
    node = lambda name: ox.NamedNode(f"http://e/{name}")
    triples = [ox.Triple(node(f"x{i}"), p, node(f"y{i}")) for i in range(4)]
    triples += [ox.Triple(node(f"y{i}"), q, node(f"z{i}")) for i in (0, 1, 3)]    # y2 stops here
    triples += [ox.Triple(node(f"z{i}"), r, lit(str(i), "integer")) for i in (1, 3)]
    triples += [ox.Triple(node("z3"), r, lit("30", "integer"))]
    event = Event("http://s", 0, tuple(triples))
    [got], [want] = fast.evaluate(gpm, event, [{}]), slow.evaluate(gpm, event, [{}])
    assert canonical_rows(got) == canonical_rows(want) and len(got) == 3
    assert all(s["y"].value[-1] == s["x"].value[-1] == s["z"].value[-1] for s in got)


def test_the_identity_cache_answers_as_its_function_does():
    """``RevisitedTermCache``: a term object asked again is answered from its slot,
    without hashing it; equal terms, and terms whose slot another took over, still
    get the function's answer (by value, from the level behind)."""
    hashed = collections.Counter()

    class Term:
        def __init__(self, value):
            self.value = value

        def __hash__(self):
            hashed[self.value] += 1
            return hash(self.value)

        def __eq__(self, other):
            return self.value == other.value

    cache = RevisitedTermCache(lambda term: term.value * 2)
    first = Term(7)
    assert cache(first) == 14 and hashed[7] >= 1
    once = hashed[7]
    assert cache(first) == 14 and hashed[7] == once      # the same object: not hashed again
    assert cache(Term(7)) == 14 and hashed[7] == once + 1    # an equal one: by value, found
    terms = [Term(i % 300) for i in range(20_000)]       # more objects than slots
    assert [cache(t) for t in terms] == [2 * (i % 300) for i in range(20_000)]


@pytest.mark.parametrize("make", [RevisitedTermCache, term_cache])
def test_the_term_caches_keep_no_large_term(make):
    """A term longer than MAX_CACHED_TERM_CHARS is computed at each use, by either
    level: the caches hold CACHE_LIMIT terms, which must not mean that many
    payloads.  Small terms are computed once."""
    computed = collections.Counter()

    def length(term):
        computed[term.value] += 1
        return len(term.value)

    cache = make(length)
    large = ox.Literal("x" * MAX_CACHED_TERM_CHARS)         # longer as N-Triples: quoted
    small = ox.Literal("x" * (MAX_CACHED_TERM_CHARS - 2))   # exactly the limit, quoted
    for _ in range(3):
        assert cache(large) == MAX_CACHED_TERM_CHARS and cache(small) == MAX_CACHED_TERM_CHARS - 2
        assert cache(ox.Literal(large.value)) == MAX_CACHED_TERM_CHARS
    assert computed == {large.value: 6, small.value: 1}


def test_kb_lookups_keep_no_large_event_value(tmp_path):
    """A GRAPH join asked per event value (its KB block too large to materialise)
    remembers the KB's rows for each value, but not for a value longer than
    MAX_CACHED_TERM_CHARS: distinct large literals must not be kept alive by
    the remembered keys.  The answers are the same either way."""
    from spaseq_plugin import Engine
    from spaseq_plugin.kb import KnowledgeBase

    kb_file = tmp_path / "kb.trig"
    large = "x" * MAX_CACHED_TERM_CHARS
    kb_file.write_text(f'<http://kb/g> {{ <http://kb/a> <http://kb/p> "v" . <http://kb/b> <http://kb/p> "{large}" . }}\n')
    evaluator = SpectraEvaluator(KnowledgeBase.from_specs([str(kb_file)]), materialize_limit=0)
    engine = Engine("""SELECT ?s ?x WITHIN 60 SECONDS FROM STREAM S <http://s> WHERE { SEQ (A)
        DEFINE GPM A ON S { ?s <http://kb/label> ?l GRAPH <http://kb/g> { ?x <http://kb/p> ?l } } }""",
                    evaluator=evaluator, kb=evaluator.kb)
    events = [Event("http://s", t, (ox.Triple(ox.NamedNode(f"http://e/{t}"), ox.NamedNode("http://kb/label"),
                                              ox.Literal(value)),))
              for t, value in enumerate(["v", large, "v", large])]
    results = [(r.time, str(r.bindings["x"])) for r in engine.run(events)]
    assert results == [(0, "<http://kb/a>"), (1, "<http://kb/b>"), (2, "<http://kb/a>"), (3, "<http://kb/b>")]
    (join,) = [join for plan in evaluator._plans.values() if plan is not None for join in plan.kb]
    assert join.strategy == "lookup"
    assert [str(t) for (t,) in join.rows] == ['"v"']


# Texts and patterns where Python's regular expressions and Oxigraph's (Rust's regex
# crate) part: '$' before a final newline, case folding (İ and ı, ſ, µ, final sigma,
# ligatures), and syntax one reads and the other does not or reads otherwise (\Z, \<,
# \0, POSIX classes, class set operations).
REGEX_TEXT = st.lists(st.sampled_from(["a", "b", "A", "\n", "\r", "ß", "ẞ", "K", "\u212a", "k", "é", "É", "İ",
                                       "i", "ı", "ſ", "s", "S", "µ", "μ", "ς", "σ", "Σ", "ϐ", "β", "ǆ", "ǅ",
                                       "ﬅ", "ﬆ", "$", "\u2028", " ", "<", "[", "]", ":", "-", "&", "\x00"]),
                      max_size=5).map("".join)
REGEX_PATTERNS = ["a", "^a", "a$", "b$", "^$", "a.b", ".$", "[a-z]", "[A-Z]", "[^b]$", "(a|b)", "a|b$", "k", "K",
                  "ß", "ss", "s", "i", "I", "é", "\\.", "\\n", "\\r", "\\$", "[$]", "μ", "σ", "β", "ǆ", "ﬆ",
                  "[\\]]", "[-a]", "a||b"]
# ... and those the fast path leaves to Oxigraph
OTHER_REGEX_PATTERNS = ["a\\Z", "\\Aa", "^\\<a", "a\\>", "\\0", "\\bab", "[[:alpha:]]", "^[[:^alpha:]]$",
                        "[a-z-[aeiou]]", "[a-z&&[^b]]", "[a-c--b]", "\\x41", "\\e", "\\&"]


def test_regex_on_the_fast_path_agrees_with_oxigraph():
    """FILTER REGEX compiled for Python's engine gives Oxigraph's answer: the fast
    path reads '$' as the end of the text, leaves case-folding a dotted or dotless
    i to Oxigraph, and any syntax outside what both engines read alike ('a\\Z'
    matched "a" on the fast path, Oxigraph's engine refuses it; '[[:alpha:]]' is a
    POSIX class there, not in Python): each differed, found comparing the two."""
    fast, slow = SpectraEvaluator(), OxigraphEvaluator()
    answered = []

    @settings(max_examples=examples(2))
    @given(st.sampled_from(REGEX_PATTERNS + OTHER_REGEX_PATTERNS),
           st.sampled_from(["", "i", "s", "m", "im", "is", "ms", "ims"]), REGEX_TEXT)
    def agree(pattern, flags, text):
        gpm = compile_query(QUERY.format(
            body=f"?s <{EX}p> ?x FILTER(REGEX(?x, {ox.Literal(pattern)}, {ox.Literal(flags)}))")).gpms["A"]
        event = Event("http://s", 1, (ox.Triple(ox.NamedNode(EX + "s1"), ox.NamedNode(EX + "p"), ox.Literal(text)),))
        before = fast.fallbacks
        assert len(fast.evaluate_one(gpm, event, {})) == len(slow.evaluate(gpm, event, [{}])[0])
        if pattern in OTHER_REGEX_PATTERNS:
            assert fast.plan(gpm) is None
        else:
            answered.append(fast.plan(gpm) is not None and fast.fallbacks == before)

    agree()
    assert sum(answered) >= 0.8 * len(answered), "the fast path must answer most examples"


# Lexical forms that Python's int(), Decimal(), float() or datetime.fromisoformat() read
# and Oxigraph does not (spaces, '_', non-ASCII digits, ISO forms XSD lacks), or reads to
# another value (fractions of a second finer than a microsecond), beside valid ones.
ODD_FORMS = [("1", "integer"), ("+1", "integer"), (" 1", "integer"), ("1 ", "integer"), ("1_0", "integer"),
             ("١", "integer"), ("１", "short"), ("1.", "decimal"), (".5", "decimal"), (" 1.5", "decimal"),
             ("1_0.5", "decimal"), ("1e1", "decimal"), ("1.e1", "double"), ("inf", "double"), ("Infinity", "double"),
             ("1_0", "double"), (" 1", "double"), ("2020-01-01T00:00:00Z", "dateTime"),
             ("2020-01-01T00:00:00.000001Z", "dateTime"), ("2020-01-01T00:00:00.0000001Z", "dateTime"),
             ("2020-01-01 00:00:00Z", "dateTime"), ("2020-01-01T00:00Z", "dateTime"), ("2020-01-01", "dateTime"),
             ("2020-01-01T00:00:00+0100", "dateTime"), ("2020-01-01T01:00:00+01:00", "dateTime"),
             ("2020-01-01T00:00:00+15:00", "dateTime"), ("2020-01-01t00:00:00Z", "dateTime")]


def test_odd_lexical_forms_on_the_fast_path_agree_with_oxigraph():
    """A literal's value is read on the fast path only from a form Oxigraph reads the
    same: `" 1"^^xsd:integer` was 1 there, and ill-typed in Oxigraph."""
    fast, slow = SpectraEvaluator(), OxigraphEvaluator()

    @settings(max_examples=examples(2))
    @given(st.sampled_from(ODD_FORMS), st.sampled_from(ODD_FORMS),
           st.sampled_from(["?x = ?y", "?x < ?y", "?x >= ?y", "?x + ?y > 1", "?x * 2 = ?y", "isNumeric(?x)",
                            "?x", "?x IN (?y, 1)", "ABS(?x) >= ?y"]))
    def agree(x, y, condition):
        gpm = compile_query(QUERY.format(body=f"?s <{EX}p> ?x ; <{EX}q> ?y FILTER({condition})")).gpms["A"]
        subject = ox.NamedNode(EX + "s1")
        event = Event("http://s", 1, (ox.Triple(subject, ox.NamedNode(EX + "p"), lit(*x)),
                                      ox.Triple(subject, ox.NamedNode(EX + "q"), lit(*y))))
        note(f"{lit(*x)} {lit(*y)}")
        assert len(fast.evaluate_one(gpm, event, {})) == len(slow.evaluate(gpm, event, [{}])[0])

    agree()


def test_the_by_value_cache_is_bounded_and_keeps_what_is_asked_again():
    """``term_cache`` computes a term once while it is asked now and then, however
    many others pass meanwhile, and forgets the rest: never more than CACHE_LIMIT
    terms kept (a term computed again was forgotten)."""
    from spaseq_plugin.evaluators.sparql_values import CACHE_LIMIT
    computed = collections.Counter()

    def double(term):
        computed[term.value] += 1
        return term.value * 2

    cache = term_cache(double)
    hot = ox.Literal("hot")
    for i in range(5 * CACHE_LIMIT):
        assert cache(ox.Literal(f"cold{i}")) == f"cold{i}" * 2
        if i % 100 == 0:
            assert cache(ox.Literal("hot")) == "hothot"
    assert computed[hot.value] == 1
    before = sum(computed.values())
    for i in reversed(range(5 * CACHE_LIMIT - CACHE_LIMIT // 2, 5 * CACHE_LIMIT)):
        cache(ox.Literal(f"cold{i}"))       # the last ones asked are still kept
    assert sum(computed.values()) == before
    for i in range(5 * CACHE_LIMIT - CACHE_LIMIT):
        cache(ox.Literal(f"cold{i}"))       # the others are not: at most CACHE_LIMIT kept
    assert sum(computed.values()) == before + 5 * CACHE_LIMIT - CACHE_LIMIT
