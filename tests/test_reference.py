"""The brute-force reference evaluator (spaseq_plugin/reference/).

1. It shares nothing with the engine: its modules import only the event and
   error types of the package (and the standard library, pyoxigraph).
2. Every shared acceptance case (tests/shared_paths.py: $SPASEQ_SHARED or
   ../shared/acceptance/cases) gives exactly its hand-written expected rows
   through the reference alone: its own reading of the query, the stream
   reader, pyoxigraph (skipped when the folder is absent).
3. Its compile-time checks (semantics.md section 10).
4. Hand-written cases, one or more per rule of the settled semantics (see
   the docstring of reference/matching.py), with results worked out by hand.
"""

from __future__ import annotations

import ast
import collections
import importlib.machinery
import importlib.util
import json
from pathlib import Path

import pyoxigraph as ox
import pytest

from spaseq_plugin import QueryError
from spaseq_plugin.events import Event, format_time
from spaseq_plugin.reference import compile_reference, reference_evaluate, reference_matches
from spaseq_plugin.streams.files import merge_streams, open_stream

from shared_paths import ACCEPTANCE, CASES

EX = "http://example/"
S1, S2 = "http://example.org/s1", "http://example.org/s2"
REFERENCE = Path(__file__).resolve().parents[1] / "spaseq_plugin" / "reference"


# -- independence ------------------------------------------------------------------

# What the reference may import from the package: the event type, the error types and
# (tests and users only) the stream reader.  Nothing of language/, evaluators/,
# runtime/, output/: a bug there must not be able to hide by breaking both sides.
ALLOWED = {"spaseq_plugin.events", "spaseq_plugin.errors"}
THIRD_PARTY = {"pyoxigraph"}


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ["spaseq_plugin", "reference"][:3 - node.level]
                module = ".".join(base + ([node.module] if node.module else []))
                out.update(f"{module}.{a.name}" if not node.module else module for a in node.names)
            else:
                out.add(node.module)
    return out


def test_the_reference_imports_nothing_of_the_engine():
    modules = sorted(REFERENCE.glob("*.py"))
    assert len(modules) >= 4
    seen = set()
    for path in modules:
        for name in _imports(path):
            seen.add(name)
            top = name.split(".")[0]
            if top == "spaseq_plugin":
                assert name in ALLOWED or name.startswith("spaseq_plugin.reference"), \
                    f"{path.name} imports {name}"
            else:
                assert top in THIRD_PARTY or top in _stdlib(), f"{path.name} imports {name}"
    for engine_part in ("language", "evaluators", "runtime", "output", "results", "rdflib_terms"):
        assert not any(f".{engine_part}" in n for n in seen if n.startswith("spaseq_plugin"))
    assert "rdflib" not in {n.split(".")[0] for n in seen}


def _stdlib() -> set[str]:
    import sys
    return set(sys.stdlib_module_names) | {"__future__"}


def test_the_independence_check_would_see_an_engine_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from ..language.compiler import compile_query\nfrom ..runtime import results\n")
    assert {"spaseq_plugin.language.compiler", "spaseq_plugin.runtime"} <= _imports(bad)


# -- acceptance cases ------------------------------------------------------------

def _runner():
    """The acceptance runner script, loaded as a module for its term comparison."""
    loader = importlib.machinery.SourceFileLoader("spaseq_acceptance_run", str(ACCEPTANCE / "run"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def json_term(term) -> dict:
    """A pyoxigraph term as a SPARQL 1.1 JSON results term."""
    if isinstance(term, ox.NamedNode):
        return {"type": "uri", "value": term.value}
    if isinstance(term, ox.BlankNode):
        return {"type": "bnode", "value": term.value}
    out = {"type": "literal", "value": term.value}
    if term.language:
        out["xml:lang"] = term.language
    else:
        out["datatype"] = term.datatype.value
    return out


def kb_quads(spec: str, folder: Path) -> list[ox.Quad]:
    """``--kb`` as the spec reads it: TriG/N-Quads keep their graphs, ``IRI=PATH`` names one."""
    iri, _, path = spec.rpartition("=") if "=" in spec and "://" in spec.split("=")[0] else ("", "", spec)
    quads = list(ox.parse(path=str(folder / path)))
    if iri:
        quads = [ox.Quad(q.subject, q.predicate, q.object, ox.NamedNode(iri)) for q in quads]
    return quads


def _case_dirs():
    if not CASES.is_dir():
        return []
    return sorted(d for d in CASES.iterdir() if (d / "case.json").exists())


@pytest.mark.skipif(not CASES.is_dir(), reason=f"no acceptance cases at {CASES}")
@pytest.mark.parametrize("case_dir", _case_dirs(), ids=lambda d: d.name)
def test_acceptance_case(case_dir: Path):
    case = json.loads((case_dir / "case.json").read_text())
    text = (case_dir / case["query"]).read_text()
    if "expect_error" in case:
        with pytest.raises(QueryError) as info:
            compile_reference(text)
        for part in case["expect_error"].get("stderr_contains", []):
            assert part.lower() in str(info.value).lower()
        return
    args = case.get("args", [])
    assert all(a == "--start" for a in args[::2]), f"unsupported args {args}"
    start = None
    if "--start" in args:
        start = json.loads(args[args.index("--start") + 1])
    analysed = compile_reference(text)
    events = list(merge_streams([open_stream(str(case_dir / path), analysed.query.streams[alias])
                                 for alias, path in case["streams"].items()]))
    assert all(isinstance(e, Event) for e in events)
    kb = kb_quads(case["kb"], case_dir) if case.get("kb") else None
    run = _runner()
    got = collections.Counter(
        run.row_key(format_time(r.time, r.is_datetime), {k: json_term(v) for k, v in r.bindings.items()},
                    run.output_term)
        for r in reference_evaluate(analysed, events, kb, start))
    want = collections.Counter(
        run.row_key(r["time"], r["bindings"], run.expected_term) for r in case["expected"])
    assert want, "a case without expected rows proves nothing"
    assert got == want, (f"missing {list((want - got).elements())}\n"
                         f"unexpected {list((got - want).elements())}")


# -- compile-time checks (semantics.md section 10) ------------------------------------

BAD_QUERIES = {
    "does not parse": ('SELECT ?x FROM STREAM S1 <http://s> WHERE { SEQ (A ;; B) '
                       'DEFINE GPM A ON S1 { ?x :p ?y } DEFINE GPM B ON S1 { ?x :q ?y } }', "line 2, column 53"),
    "undeclared GPM": ("SELECT ?x FROM STREAM S1 <http://s> WHERE { SEQ (A ; Z) "
                       "DEFINE GPM A ON S1 { ?x :p ?y } }", "Z"),
    "unused GPM": ("SELECT ?x FROM STREAM S1 <http://s> WHERE { SEQ (A) "
                   "DEFINE GPM A ON S1 { ?x :p ?y } DEFINE GPM B ON S1 { ?x :q ?y } }", "B"),
    "undeclared stream": ("SELECT ?x FROM STREAM S1 <http://s> WHERE { SEQ (A) "
                          "DEFINE GPM A ON S9 { ?x :p ?y } }", "S9"),
    "GPM syntax": ("SELECT ?x FROM STREAM S1 <http://s> WHERE { SEQ (A) "
                   "DEFINE GPM A ON S1 { ?x :p ?y FILTER( } }", "GPM A"),
    "FILTER reads nothing bindable": ("SELECT ?x FROM STREAM S1 <http://s> WHERE { SEQ (A) "
                                      "DEFINE GPM A ON S1 { ?x :p ?y FILTER(?s1 > 0) } }", "?s1"),
    "partition variable": ("SELECT ?x WITHIN 5 SECONDS PARTITION BY (?y) FROM STREAM S1 <http://s> "
                           "WHERE { SEQ (A ; B) DEFINE GPM A ON S1 { ?x :p ?y } "
                           "DEFINE GPM B ON S1 { ?x :q ?z } }", "?y"),
    "leading negation": ("SELECT ?x WITHIN 5 SECONDS FROM STREAM S1 <http://s> WHERE { SEQ (B? ; N! ; A) "
                         "DEFINE GPM A ON S1 { ?x :p ?y } DEFINE GPM B ON S1 { ?x :q ?y } "
                         "DEFINE GPM N ON S1 { ?x :r ?y } }", "N!"),
    "trailing optional without WITHIN": ("SELECT ?x FROM STREAM S1 <http://s> WHERE { SEQ (A ; B?) "
                                         "DEFINE GPM A ON S1 { ?x :p ?y } DEFINE GPM B ON S1 { ?x :q ?y } }",
                                         "WITHIN"),
    "zero window": ("SELECT ?x WITHIN 0 SECONDS FROM STREAM S1 <http://s> WHERE { SEQ (A) "
                    "DEFINE GPM A ON S1 { ?x :p ?y } }", "zero"),
}


@pytest.mark.parametrize("name", sorted(BAD_QUERIES))
def test_the_reference_rejects_what_must_not_compile(name):
    text, fragment = BAD_QUERIES[name]
    with pytest.raises(QueryError) as info:
        compile_reference(PREFIX + text)
    assert fragment in str(info.value)


def test_both_layouts_keywords_and_a_trailing_separator():
    paper = compile_reference(PREFIX + "select ?x within 1 minutes from stream S1 <http://s> "
                              "where { seq (A, B,) define gpm A on S1 { ?x :p 'a' } "
                              "Define GPM B ON S1 { ?x :q ?y Filter(?y > 1) } }")
    assert paper.query.window == 60 and paper.query.operators == [","]
    assert any("trailing" in w for w in paper.warnings)
    implementation = compile_reference(PREFIX + "SELECT ?x WITHIN 700 MILLISECONDS "
                                       "FROM STREAM S1 <http://s> WHERE SEQ (A; B+) { "
                                       "DEFINE GPM A ON S1 { ?x :p ?y } DEFINE GPM B ON S1 { ?z :p ?y } }")
    assert implementation.query.window * 10 == 7
    assert [a.suffix for a in implementation.query.atoms] == ["", "+"]


def test_filter_text_is_read_around_strings_iris_and_comments():
    from spaseq_plugin.reference.text import conjuncts, filters, read_variables, variables
    assert conjuncts('("a" = ?x && (?y > 2 && regex(?z, "&&")))') == ['"a" = ?x', "?y > 2", 'regex(?z, "&&")']
    body = ('?s <http://e/p#x> "?no" # ?comment\n FILTER(?s != <http://e/q>) '
            'OPTIONAL { ?s :q ?o FILTER(?o > ?p1) } FILTER NOT EXISTS { ?s :r ?inner }')
    assert variables(body) == {"s", "o", "p1", "inner"}
    assert [f.constraint for f in filters(body, top_level=True)] == ["(?s != <http://e/q>)",
                                                                      "NOT EXISTS { ?s :r ?inner }"]
    assert {v for f in filters(body, top_level=False) for v in read_variables(f.constraint)} == {"s", "o", "p1"}


def test_placement_leaves_out_only_the_conjuncts_a_gpm_cannot_judge():
    analysed = compile_reference(PREFIX + "SELECT * WITHIN 5 SECONDS PARTITION BY (?c) "
                                 f"FROM STREAM S1 <{S1}> WHERE {{ SEQ (A , B) "
                                 "DEFINE GPM A ON S1 { ?c :price ?p1 FILTER(?p1 < 6) } "
                                 "DEFINE GPM B ON S1 { ?c :price ?p2 FILTER(?p2 > ?p1 && ?p2 < 10) "
                                 "OPTIONAL { ?c :note ?n FILTER(?n != ?p1) } } }")
    body = analysed.gpms["B"].placement_body
    assert "?p2 > ?p1" not in body and "(?p2 < 10)" in body and "?n != ?p1" in body
    text = analysed.query.text
    # 20 is in no sub-stream (A: not < 6; B alone: not < 10): 8 is the next event of :g
    events = [ev(S1, 1, ":g :price 5 ."), ev(S1, 2, ":g :price 20 ."), ev(S1, 3, ":g :price 8 .")]
    assert rows(text, events) == C((3, ("c=g", "p1=5", "p2=8")))
    # 4 is placed by B alone (4 < 10; 4 > ?p1 cannot be judged): it breaks 5 , 8
    events[1] = ev(S1, 2, ":g :price 4 .")
    assert rows(text, events) == C((3, ("c=g", "p1=4", "p2=8")))


# -- hand-written cases ----------------------------------------------------------

PREFIX = "PREFIX : <http://example/>\n"


def ev(stream: str, time, turtle: str) -> Event:
    """An event from Turtle text using the ``:`` prefix."""
    triples = tuple(ox.parse(PREFIX + turtle, format=ox.RdfFormat.TURTLE))
    return Event(stream, time, triples)


def kinds(*items, stream=S1) -> list[Event]:
    """Events ``name@time`` on one stream: ``:name :kind "<first letter>"``."""
    out = []
    for item in items:
        name, time = item.split("@")
        out.append(ev(stream, int(time), f':{name} :kind "{name[0]}" .'))
    return out


def query(seq: str, gpms: dict[str, str], select: str = "SELECT *", within: str = "",
          partition: str = "", streams=("S1",)) -> str:
    lines = [PREFIX + select]
    if within:
        lines.append(within)
    if partition:
        lines.append(partition)
    iris = {"S1": S1, "S2": S2}
    lines += [f"FROM STREAM {s} <{iris[s]}>" for s in streams]
    lines.append(f"WHERE {{ SEQ ({seq})")
    for name, body in gpms.items():
        on, _, body = body.partition(":") if body.startswith("S") and ":" in body[:6] else ("S1", "", body)
        lines.append(f"  DEFINE GPM {name} ON {on} {{ {body} }}")
    lines.append("}")
    return "\n".join(lines)


def kind_gpm(var: str, kind: str) -> str:
    return f'?{var} :kind "{kind}" .'


def short(term) -> str:
    if isinstance(term, ox.NamedNode) and term.value.startswith(EX):
        return term.value[len(EX):]
    return term.value


def rows(text: str, events, **kw) -> collections.Counter:
    """Results as a multiset of (time, (var=value, ...)) with short values."""
    results = reference_evaluate(text, events, **kw)
    return collections.Counter(
        (r.time, tuple(f"{k}={short(v)}" for k, v in sorted(r.bindings.items()))) for r in results)


def C(*items) -> collections.Counter:
    return collections.Counter(items)


FLINK = ["c@1", "d@2", "a1@3", "a2@4", "a3@5", "d@6", "a4@7", "b@8"]
CAB = {"C": kind_gpm("c", "c"), "A": kind_gpm("x", "a"), "B": kind_gpm("b", "b")}


def test_flink_kleene_skip_till_next():
    text = query("C ; A+ ; B", CAB, "SELECT ?x (COUNT(?x) AS ?n)", "WITHIN 60 SECONDS")
    assert rows(text, kinds(*FLINK)) == C(*[(8, (f"n={n}", f"x=a{n}")) for n in range(1, 5)])


def test_flink_kleene_skip_till_any_gives_15():
    text = query("C : A+ : B", CAB, "SELECT ?x (COUNT(?x) AS ?n)", "WITHIN 60 SECONDS")
    got = rows(text, kinds(*FLINK))
    assert sum(got.values()) == 15
    # every non-empty ordered subset of a1..a4: its size and last element
    from itertools import combinations
    want = C(*[(8, (f"n={len(s)}", f"x={s[-1]}")) for k in range(1, 5)
               for s in combinations(["a1", "a2", "a3", "a4"], k)])
    assert got == want


def test_flink_kleene_strict_iterations():
    # C , A+ , B: A+ iterates strictly; d@2 breaks contiguity after c@1
    text = query("C , A+ , B", CAB, "SELECT ?x (COUNT(?x) AS ?n)", "WITHIN 60 SECONDS")
    assert rows(text, kinds(*FLINK)) == C()
    events = kinds("c@1", "a1@2", "a2@3", "b@4")
    assert rows(text, events) == C((4, ("n=2", "x=a2")))


def test_kleene_iterations_keep_their_own_bindings():
    text = query("C ; A+ ; B", CAB, "SELECT (GROUP_CONCAT(?x) AS ?all)", "WITHIN 60 SECONDS")
    matches = reference_matches(text, kinds("c@1", "a1@2", "a2@3", "b@4"))
    assert sorted(len(m.kleene[0].solutions) for m in matches) == [1, 2]
    two = [m for m in matches if len(m.kleene[0].solutions) == 2][0]
    assert [short(it["x"]) for it in two.kleene[0].solutions] == ["a1", "a2"]
    assert short(two.mu["x"]) == "a2"          # a Kleene variable shows its last iteration


def test_lone_kleene_iterates_skip_till_next():
    text = query("A+", {"A": kind_gpm("x", "a")}, "SELECT (COUNT(?x) AS ?n) (GROUP_CONCAT(?x) AS ?s)")
    got = rows(text, kinds("a1@1", "a2@2", "a3@3"))
    # ; iterations: a1, a1 a2, a1 a2 a3, a2, a2 a3, a3 (not a1 a3, which : would give)
    assert sum(got.values()) == 6
    assert (3, ("n=2", "s=http://example/a1 http://example/a3")) not in got


def test_opening_kleene_uses_the_operator_after_it():
    gpms = {"A": kind_gpm("x", "a"), "B": kind_gpm("y", "b")}
    events = kinds("a1@1", "c@2", "a2@3", "b@4")
    strict = query("A+ , B", gpms, "SELECT ?x (COUNT(?x) AS ?n)")
    assert rows(strict, events) == C((4, ("n=1", "x=a2")))
    anyway = query("A+ : B", gpms, "SELECT ?x (COUNT(?x) AS ?n)")
    assert rows(anyway, events) == C((4, ("n=1", "x=a1")), (4, ("n=2", "x=a2")), (4, ("n=1", "x=a2")))


def test_kleene_joins_variables_bound_before():
    gpms = {"A": "?h :kind \"a\" ; :loc ?l .", "B": "?w :kind \"b\" ; :loc ?l ."}
    events = [ev(S1, 1, ':h1 :kind "a" ; :loc :L1 .'), ev(S1, 2, ':w1 :kind "b" ; :loc :L2 .'),
              ev(S1, 3, ':w2 :kind "b" ; :loc :L1 .')]
    text = query("A : B+", gpms, "SELECT ?w (COUNT(?w) AS ?n)")
    assert rows(text, events) == C((3, ("n=1", "w=w2")))


def test_skip_till_next_and_strict_paper_examples():
    gpms = {"A": '?h :kind "a" ; :loc ?l .', "B": '?w :kind "w" ; :loc ?l .'}
    events = [ev(S1, 10, ':H1 :kind "a" ; :loc :L1 .'), ev(S1, 15, ':H2 :kind "a" ; :loc :L1 .'),
              ev(S2, 15, ':W1 :kind "w" ; :loc :L2 .'), ev(S2, 20, ':W1 :kind "w" ; :loc :L1 .'),
              ev(S2, 25, ':W2 :kind "w" ; :loc :L1 .')]
    sel = "SELECT ?h ?w"

    def q(op):
        return query(f"A {op} B", {"A": "S1:" + gpms["A"], "B": "S2:" + gpms["B"]}, sel,
                     streams=("S1", "S2"))
    assert rows(q(":"), events) == C((20, ("h=H1", "w=W1")), (25, ("h=H1", "w=W2")),
                                     (20, ("h=H2", "w=W1")), (25, ("h=H2", "w=W2")))
    assert rows(q(";"), events) == C((20, ("h=H1", "w=W1")), (20, ("h=H2", "w=W1")))
    assert rows(q(","), events) == C((20, ("h=H2", "w=W1")))


def test_negation_under_skip_till_next_kills_instead_of_waiting():
    gpms = {"A": kind_gpm("a", "a"), "N": kind_gpm("n", "n"), "X": kind_gpm("c", "x")}
    events = kinds("a1@1", "n@2", "a2@3", "x1@4", "x2@5")
    text = query("A ; N! ; X", gpms, "SELECT ?a ?c", "WITHIN 10 SECONDS")
    # a1's first X is x1, with n between: a1 dies (it does not wait for x2)
    assert rows(text, events) == C((4, ("a=a2", "c=x1")))
    anyway = query("A : N! : X", gpms, "SELECT ?a ?c", "WITHIN 10 SECONDS")
    assert rows(anyway, events) == C((4, ("a=a2", "c=x1")), (5, ("a=a2", "c=x2")))


def test_negation_sees_the_bindings_of_the_atom_after_it():
    gpms = {"A": '?a :kind "a" ; :loc ?l .', "N": '?n :kind "n" ; :loc ?l .',
            "X": '?c :kind "x" ; :loc ?l .'}
    events = [ev(S1, 1, ':a1 :kind "a" ; :loc :L1 .'), ev(S1, 2, ':a2 :kind "a" ; :loc :L2 .'),
              ev(S1, 3, ':n1 :kind "n" ; :loc :L1 .'), ev(S1, 4, ':x1 :kind "x" ; :loc :L1 .'),
              ev(S1, 5, ':x2 :kind "x" ; :loc :L2 .')]
    text = query("A : N! : X", gpms, "SELECT ?a ?c", "WITHIN 10 SECONDS")
    assert rows(text, events) == C((5, ("a=a2", "c=x2")))


def test_negation_before_kleene_uses_its_first_iteration():
    gpms = {"A": kind_gpm("a", "a"), "N": "?n :kind \"n\" ; :val ?v .",
            "B": "?b :kind \"b\" ; :val ?v ."}
    events = [ev(S1, 1, ':a1 :kind "a" .'), ev(S1, 2, ':n1 :kind "n" ; :val 1 .'),
              ev(S1, 3, ':b1 :kind "b" ; :val 2 .'), ev(S1, 4, ':b2 :kind "b" ; :val 1 .')]
    text = query("A : N! : B+", gpms, "SELECT ?b (COUNT(?b) AS ?k)", "WITHIN 10 SECONDS")
    # ?v is local to the Kleene atom: iteration b1 (v=2) passes the negation; b2 (v=1)
    # opening the Kleene atom is killed by n1 (v=1); b1 b2 is fine (only the first counts)
    assert rows(text, events) == C((3, ("b=b1", "k=1")), (4, ("b=b2", "k=2")))


def test_several_negations_in_a_row_all_apply():
    gpms = {"A": kind_gpm("a", "a"), "N": kind_gpm("n", "n"), "M": kind_gpm("m", "m"),
            "X": kind_gpm("c", "x")}
    text = query("A : N! : M! : X", gpms, "SELECT ?a ?c", "WITHIN 10 SECONDS")
    assert rows(text, kinds("a1@1", "m@2", "x1@3", "a2@4", "x2@5")) == C((5, ("a=a2", "c=x2")))


def test_trailing_negation_time_and_deadline():
    gpms = {"A": kind_gpm("a", "a"), "N": kind_gpm("n", "n")}
    text = query("A ; N!", gpms, "SELECT ?a", "WITHIN 5 SECONDS")
    assert rows(text, kinds("a1@1", "n@7")) == C((6, ("a=a1",)))     # n after the deadline
    assert rows(text, kinds("a1@1", "n@6")) == C()                     # deadline included
    assert rows(text, kinds("a1@1")) == C((6, ("a=a1",)))              # input ends before it
    # a simultaneous N (other stream) is not after the match
    two = query("A ; N!", {"A": "S1:" + gpms["A"], "N": "S2:" + gpms["N"]}, "SELECT ?a",
                "WITHIN 5 SECONDS", streams=("S1", "S2"))
    assert rows(two, kinds("a1@1") + kinds("n@1", stream=S2)) == C((6, ("a=a1",)))


def test_trailing_negation_after_kleene_and_tumbling():
    gpms = {"A": kind_gpm("a", "a"), "N": kind_gpm("n", "n")}
    text = query("A+ ; N!", gpms, "SELECT (COUNT(?a) AS ?k)", "WITHIN 5 SECONDS")
    # a1, a1 a2 and a2 all see n@5 before their deadline (6, 6, 7)
    assert rows(text, kinds("a1@1", "a2@2", "n@5")) == C()
    # n@7: after the deadline 6 of a1 and a1 a2, but it kills a2 alone (deadline 7 included)
    assert rows(text, kinds("a1@1", "a2@2", "n@7")) == C((6, ("k=1",)), (6, ("k=2",)))
    tumbling = query("A ; N!", gpms, "SELECT ?a", "WITHIN 5 SECONDS TUMBLING")
    # t0 = 1 (the first event): windows [1, 6) [6, 11); n@6 is in the next window
    assert rows(tumbling, kinds("x@1", "a1@2", "n@6")) == C((6, ("a=a1",)))
    assert rows(tumbling, kinds("x@1", "a1@2", "n@5")) == C()
    # t0 = 2: window [2, 7)
    assert rows(tumbling, kinds("a1@2", "n@6")) == C()
    # start 0: windows [0, 5) [5, 10)
    assert rows(tumbling, kinds("a1@2", "n@6"), start=0) == C((5, ("a=a1",)))


def test_optional_in_the_middle():
    gpms = {"A": kind_gpm("a", "a"), "B": kind_gpm("b", "b"), "X": kind_gpm("c", "x")}
    text = query("A ; B? ; X", gpms, "SELECT ?a ?b ?c", "WITHIN 10 SECONDS")
    # with B: a1 b1 x2; without B: a1 x1 (no b between)
    assert rows(text, kinds("a1@1", "x1@2", "b1@3", "x2@4")) == C(
        (4, ("a=a1", "b=b1", "c=x2")), (2, ("a=a1", "c=x1")))
    # b1 between a1 and the first x kills the skipping branch
    assert rows(text, kinds("a1@1", "b1@2", "x1@3")) == C((3, ("a=a1", "b=b1", "c=x1")))
    # the skipping branch links A and X with the operator before X
    strict = query("A : B? , X", gpms, "SELECT ?a ?b ?c", "WITHIN 10 SECONDS")
    assert rows(strict, kinds("a1@1", "x1@2", "x2@3")) == C((2, ("a=a1", "c=x1")))


def test_leading_and_trailing_optional():
    gpms = {"B": kind_gpm("b", "b"), "X": kind_gpm("c", "x")}
    lead = query("B? ; X", gpms, "SELECT ?b ?c", "WITHIN 10 SECONDS")
    assert rows(lead, kinds("b1@1", "x1@2")) == C((2, ("b=b1", "c=x1")), (2, ("c=x1",)))
    trail = query("X ; B?", gpms, "SELECT ?b ?c", "WITHIN 3 SECONDS")
    assert rows(trail, kinds("x1@1", "b1@2")) == C((2, ("b=b1", "c=x1")))
    assert rows(trail, kinds("x1@1", "b1@5")) == C((4, ("c=x1",)))


def test_partition_strict_contiguity_is_per_substream():
    gpms = {"A": '?a :kind "a" ; :loc ?l .', "B": '?b :kind "b" ; :loc ?l .'}
    events = [ev(S1, 1, ':a1 :kind "a" ; :loc :L1 .'), ev(S1, 2, ':a2 :kind "a" ; :loc :L2 .'),
              ev(S1, 3, ':b1 :kind "b" ; :loc :L1 .'), ev(S1, 4, ':b2 :kind "b" ; :loc :L2 .')]
    plain = query("A , B", gpms, "SELECT ?a ?b", "WITHIN 10 SECONDS")
    assert rows(plain, events) == C()
    part = query("A , B", gpms, "SELECT ?a ?b", "WITHIN 10 SECONDS", "PARTITION BY (?l)")
    assert rows(part, events) == C((3, ("a=a1", "b=b1")), (4, ("a=a2", "b=b2")))


def test_partition_negation_and_skip_are_per_substream():
    gpms = {"A": '?a :kind "a" ; :loc ?l .', "N": '?n :kind "n" .', "B": '?b :kind "b" ; :loc ?l .'}
    events = [ev(S1, 1, ':a1 :kind "a" ; :loc :L1 .'), ev(S1, 2, ':n1 :kind "n" ; :loc :L2 .'),
              ev(S1, 3, ':b1 :kind "b" ; :loc :L1 .')]
    part = query("A ; N! ; B", gpms, "SELECT ?a ?b", "WITHIN 10 SECONDS", "PARTITION BY (?l)")
    # n1 matches N but belongs to no sub-stream (no positive GPM binds ?l on it)
    assert rows(part, events) == C((3, ("a=a1", "b=b1")))
    plain = query("A ; N! ; B", gpms, "SELECT ?a ?b", "WITHIN 10 SECONDS")
    assert rows(plain, events) == C()


def test_tumbling_windows():
    gpms = {"A": kind_gpm("a", "a"), "B": kind_gpm("b", "b")}
    span = query("A ; B", gpms, "SELECT ?a ?b", "WITHIN 5 SECONDS")
    tumbling = query("A ; B", gpms, "SELECT ?a ?b", "WITHIN 5 SECONDS TUMBLING")
    events = kinds("x@1", "a1@4", "b1@7")
    assert rows(span, events) == C((7, ("a=a1", "b=b1")))
    assert rows(tumbling, events) == C()                        # [1, 6) and [6, 11)
    assert rows(tumbling, events, start=3) == C((7, ("a=a1", "b=b1")))   # [3, 8)
    # events before start are ignored
    assert rows(tumbling, kinds("a1@1", "b1@4"), start=2) == C()


def test_conjunction_same_timestamp_and_operand_order():
    gpms = {"B": "S2:?w :kind \"w\" ; :val ?v2 . FILTER(?v2 > ?v1)",
            "A": "S1:?h :kind \"h\" ; :val ?v1 ."}
    text = query("(B & A)", gpms, "SELECT ?h ?w", streams=("S1", "S2"))
    events = [ev(S1, 1, ':h1 :kind "h" ; :val 1 .'), ev(S2, 1, ':w1 :kind "w" ; :val 2 .'),
              ev(S1, 2, ':h2 :kind "h" ; :val 3 .'), ev(S2, 2, ':w2 :kind "w" ; :val 2 .'),
              ev(S2, 3, ':w3 :kind "w" ; :val 9 .')]
    assert rows(text, events) == C((1, ("h=h1", "w=w1")))
    # the same event may serve both operands; it is counted once
    same = query("(A & B)", {"A": kind_gpm("x", "a"), "B": "?x :val ?v ."},
                 "SELECT (COUNT(*) AS ?n)")
    assert rows(same, [ev(S1, 1, ':a1 :kind "a" ; :val 1 .')]) == C((1, ("n=1",)))


def test_conjunction_under_skip_till_next_waits_for_the_whole_atom():
    gpms = {"A": "S1:" + kind_gpm("a", "a"), "B": "S1:" + kind_gpm("b", "b"),
            "C": "S2:" + kind_gpm("c", "c")}
    text = query("A ; (B & C)", gpms, "SELECT ?b ?c", "WITHIN 10 SECONDS", streams=("S1", "S2"))
    events = sorted(kinds("a@1", "b1@2", "b2@3") + kinds("c1@3", "c2@4", stream=S2),
                    key=lambda e: e.time)
    assert rows(text, events) == C((3, ("b=b2", "c=c1")))


def test_disjunction_counts_identical_results_once():
    text = query("(A | B)", {"A": kind_gpm("x", "a"), "B": kind_gpm("x", "a")}, "SELECT ?x")
    assert rows(text, kinds("a1@1")) == C((1, ("x=a1",)))
    two = query("(A | B)", {"A": kind_gpm("x", "a"), "B": "?x :val ?v ."}, "SELECT ?x ?v")
    assert rows(two, [ev(S1, 1, ':a1 :kind "a" ; :val 1 .')]) == C(
        (1, ("x=a1",)), (1, ("v=1", "x=a1")))


def test_window_span():
    gpms = {"A": kind_gpm("a", "a"), "B": kind_gpm("b", "b")}
    text = query("A : B", gpms, "SELECT ?a ?b", "WITHIN 3 SECONDS")
    assert rows(text, kinds("a1@1", "b1@4", "b2@5")) == C((4, ("a=a1", "b=b1")))


def test_distinct_keeps_the_first_in_time_and_construct():
    gpms = {"A": kind_gpm("a", "a"), "B": kind_gpm("b", "b")}
    text = query("A : B", gpms, "SELECT DISTINCT ?a", "WITHIN 10 SECONDS")
    assert rows(text, kinds("a1@1", "b1@2", "b2@3")) == C((2, ("a=a1",)))
    construct = query("A : B", gpms, "CONSTRUCT { ?a :then ?b . _:m :has ?a }", "WITHIN 10 SECONDS")
    results = reference_evaluate(construct, kinds("a1@1", "b1@2", "b2@3"))
    assert sorted(r.time for r in results) == [2, 3]
    assert all(len(r.triples) == 2 for r in results)
    assert len({str(t.subject) for r in results for t in r.triples if t.predicate.value.endswith("has")}) == 2
