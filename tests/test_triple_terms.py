"""RDF 1.2 triple terms, ``<<( s p o )>>``: written in every output and query text
as the syntax says, and never nested so deep that the parser, which recurses into
them, overflows its stack (about 17,000 levels killed the process with SIGSEGV)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import subprocess
import sys

import pyoxigraph as ox
import pytest
from hypothesis import given, settings, strategies as st

from spaseq_plugin import Engine, Event
from spaseq_plugin.evaluators.oxigraph import OxigraphEvaluator
from spaseq_plugin.evaluators.spectra import SpectraEvaluator
from spaseq_plugin.output.formats import DelimitedWriter
from spaseq_plugin.runtime.results import Result
from spaseq_plugin.streams import reader
from spaseq_plugin.streams.reader import NestingCheck, term_too_deep

from helpers import examples

SPASEQ = [sys.executable, "-m", "spaseq_plugin"]
EX = "http://example/"
STREAM = EX + "s"
A, P = ox.NamedNode("http://a"), ox.NamedNode("http://p")
PRICE = ox.NamedNode(EX + "price")
QUERY = f"""PREFIX : <{EX}>
SELECT ?p1 ?p2 WITHIN 10 SECONDS FROM STREAM S <{STREAM}>
WHERE {{ SEQ (A ; B) DEFINE GPM A ON S {{ ?x :price ?p1 }} DEFINE GPM B ON S {{ ?x :price ?p2 %s }} }}
"""
#: a literal with a comma, a quote and a language, two levels down
NESTED = ox.Triple(A, P, ox.Triple(ox.NamedNode("http://c"), P, ox.Literal('x,y"z', language="en")))


def nested_text(levels: int, innermost: str = "<http://b>") -> str:
    return "<<( <http://a> <http://p> " * levels + innermost + " )>>" * levels


def spaseq(*args, stdin=None):
    return subprocess.run(SPASEQ + list(args), input=stdin, capture_output=True, text=True, timeout=120)


def prices(*objects) -> list[Event]:
    return [Event(STREAM, t, (ox.Triple(ox.NamedNode(EX + "s1"), PRICE, o),)) for t, o in enumerate(objects, 1)]


def pyoxigraph_results(fmt: ox.QueryResultsFormat) -> str:
    text = ox.Store().query(f"SELECT ?x WHERE {{ BIND(<<( {NESTED} )>> AS ?x) }}").serialize(format=fmt)
    return text.decode().splitlines()[1]


# -- written as the syntax says ---------------------------------------------------------

def test_tsv_writes_a_triple_term_as_pyoxigraph_does_and_csv_as_its_plain_values():
    result = Result(1, False, {"x": NESTED}, None, ())
    tsv, comma = io.StringIO(), io.StringIO()
    for out, is_tsv in ((tsv, True), (comma, False)):
        writer = DelimitedWriter(out, ["x"], tsv=is_tsv)
        writer.write(result)
        writer.close()
    assert tsv.getvalue().splitlines()[1].split("\t")[1] == pyoxigraph_results(ox.QueryResultsFormat.TSV)
    assert list(csv.reader(io.StringIO(comma.getvalue())))[1][1] == 'http://a http://p http://c http://p x,y"z'


@pytest.mark.parametrize("evaluator", [OxigraphEvaluator, SpectraEvaluator])
def test_a_run_bound_to_a_triple_term_is_given_to_oxigraph_in_values(evaluator):
    """``!=`` on a triple term goes to Oxigraph, in a VALUES block: it was written
    without its ``<<( )>>`` (a syntax error), and a blank node in it was not
    replaced by the IRI VALUES can hold."""
    with_blank = ox.Triple(ox.BlankNode("b1"), P, NESTED)
    engine = Engine(QUERY % "FILTER (?p2 != ?p1)", evaluator=evaluator())
    results = [r for e in prices(ox.Literal("1"), with_blank, ox.Literal("2")) for r in engine.push_event(e)]
    results += engine.close()
    assert [(r.time, r.bindings["p1"], r.bindings["p2"]) for r in results] == [
        (2, ox.Literal("1"), with_blank), (3, with_blank, ox.Literal("2"))]


@pytest.mark.parametrize("evaluator", [OxigraphEvaluator, SpectraEvaluator])
def test_a_triple_term_holding_a_blank_node_joins_with_itself(evaluator):
    """The event graph is skolemised too when a run's triple term holds a blank node."""
    with_blank = ox.Triple(ox.BlankNode("b1"), P, NESTED)
    query = f"""PREFIX : <{EX}>
SELECT ?p WITHIN 10 SECONDS FROM STREAM S <{STREAM}>
WHERE {{ SEQ (A ; B) DEFINE GPM A ON S {{ ?x :price ?p }} DEFINE GPM B ON S {{ ?x :price ?p FILTER (isTriple(?p)) }} }}"""
    results = list(Engine(query, evaluator=evaluator()).run(prices(with_blank, ox.Literal("2"), with_blank)))
    assert [(r.time, r.bindings["p"]) for r in results] == [(3, with_blank)]


def test_aggregates_over_triple_terms():
    query = f"""PREFIX : <{EX}>
SELECT ?p1 (COUNT(?p2) AS ?n) (SAMPLE(?p2) AS ?one) WITHIN 10 SECONDS FROM STREAM S <{STREAM}>
WHERE {{ SEQ (A , B+) DEFINE GPM A ON S {{ ?x :price ?p1 }} DEFINE GPM B ON S {{ ?x :price ?p2 }} }}"""
    results = list(Engine(query).run(prices(ox.Literal("1"), NESTED, NESTED)))
    assert sorted(int(r.bindings["n"].value) for r in results) == [1, 1, 2]
    assert {r.bindings["one"] for r in results if r.bindings["p1"] == ox.Literal("1")} == {NESTED}


def test_a_kb_join_looked_up_per_event_value_takes_triple_terms_and_blank_nodes(tmp_path):
    """A GRAPH block too large to materialise is asked per event value, in VALUES:
    a triple term went there without its ``<<( )>>``.  An event's blank node is no
    KB term (and VALUES cannot hold one): no rows, and no query."""
    from spaseq_plugin.kb import KnowledgeBase

    kb_file = tmp_path / "kb.trig"
    kb_file.write_text(f"<http://kb/g> {{ <http://kb/who> <http://kb/said> <<( {NESTED} )>> . }}\n")
    evaluator = SpectraEvaluator(KnowledgeBase.from_specs([str(kb_file)]), materialize_limit=0)
    query = f"""PREFIX : <{EX}>
SELECT ?who WITHIN 10 SECONDS FROM STREAM S <{STREAM}>
WHERE {{ SEQ (A) DEFINE GPM A ON S {{ ?x :price ?p GRAPH <http://kb/g> {{ ?who <http://kb/said> ?p }} }} }}"""
    engine = Engine(query, evaluator=evaluator, kb=evaluator.kb)
    results = list(engine.run(prices(NESTED, ox.BlankNode("b1"), ox.Triple(ox.BlankNode("b2"), P, A), NESTED)))
    assert [(r.time, r.bindings["who"]) for r in results] == [(1, ox.NamedNode("http://kb/who")),
                                                            (4, ox.NamedNode("http://kb/who"))]
    (join,) = [join for plan in evaluator._plans.values() if plan is not None for join in plan.kb]
    assert join.strategy == "lookup"


# -- nested too deep -----------------------------------------------------------------------

def trig(levels: int) -> str:
    return (f"@prefix : <{EX}> .\n@prefix prov: <http://www.w3.org/ns/prov#> .\n"
            ":g1 { :s1 :price 10 } :g1 prov:generatedAtTime 1 .\n"
            f":g2 {{ :s1 :price {nested_text(levels)} }} :g2 prov:generatedAtTime 2 .\n"
            ":g3 { :s1 :price 12 } :g3 prov:generatedAtTime 3 .\n")


def nquads(levels: int) -> str:
    stamp = '<{g}> <http://www.w3.org/ns/prov#generatedAtTime> "{t}"^^<http://www.w3.org/2001/XMLSchema#integer> .\n'
    return "".join(f"<{EX}s1> <{EX}price> {o} <{EX}g{t}> .\n" + stamp.format(g=f"{EX}g{t}", t=t)
                   for t, o in ((1, '"10"'), (2, nested_text(levels)), (3, '"12"')))


@pytest.mark.parametrize("fmt, text", [("trig", trig), ("nq", nquads)])
@pytest.mark.parametrize("from_stdin", [False, True])
def test_an_event_nesting_triple_terms_too_deep_is_rejected_and_the_stream_goes_on(fmt, text, from_stdin, tmp_path):
    """30,000 levels (900 KB) killed the process in pyoxigraph's parser."""
    (tmp_path / "q.rq").write_text(QUERY % "")
    path = tmp_path / f"s.{fmt}"
    path.write_text(text(30_000))
    stream = "S=-" if from_stdin else f"S={path}"        # (stdin: the format is told from the text)
    p = spaseq("run", str(tmp_path / "q.rq"), "--stream", stream, "--dead-letter", str(tmp_path / "dl.jsonl"),
               stdin=path.read_text() if from_stdin else None)
    assert p.returncode == 0, p.stderr
    assert [json.loads(line)["time"] for line in p.stdout.splitlines()] == [3]
    assert "1 rejected (1 too-large)" in p.stderr
    rejected = json.loads((tmp_path / "dl.jsonl").read_text())
    assert rejected["reason"] == "too-large" and rejected["position"].endswith(":4" if fmt == "trig" else ":3")
    assert f"nested more than {reader.DEFAULT_MAX_TERM_DEPTH} deep" in rejected["error"]


def test_a_graph_named_by_a_deep_triple_term_is_rejected(tmp_path):
    """A block's label is parsed alone to name the event it rejects: never a deep one."""
    (tmp_path / "q.rq").write_text(QUERY % "")
    (tmp_path / "s.trig").write_text(trig(1).replace(":g2 {", nested_text(30_000) + " {"))
    p = spaseq("run", str(tmp_path / "q.rq"), "--stream", f"S={tmp_path / 's.trig'}")
    assert p.returncode == 0 and "1 rejected (1 too-large)" in p.stderr, p.stderr


def test_the_depth_limit_and_its_flag(tmp_path):
    (tmp_path / "q.rq").write_text(QUERY % "")
    limit = reader.DEFAULT_MAX_TERM_DEPTH
    for levels, flags, read in [(limit, [], 3), (limit + 1, [], 2), (limit + 1, ["--max-term-depth", str(limit + 1)], 3)]:
        (tmp_path / "s.trig").write_text(trig(levels))
        p = spaseq("run", str(tmp_path / "q.rq"), "--stream", f"S={tmp_path / 's.trig'}", *flags)
        assert p.returncode == 0, p.stderr
        assert f"{read} events" in p.stderr
    p = spaseq("run", str(tmp_path / "q.rq"), "--stream", f"S={tmp_path / 's.trig'}",
               "--max-term-depth", str(reader.MOST_TERM_DEPTH + 1))
    assert p.returncode == 2 and f"must be at most {reader.MOST_TERM_DEPTH}" in p.stderr
    p = spaseq("run", str(tmp_path / "q.rq"), "--stream", f"S={tmp_path / 's.trig'}", "--engine", "spark",
               "--max-term-depth", "10")
    assert p.returncode == 2 and "--max-term-depth: for --engine stream" in p.stderr, p.stderr
    p = spaseq("kb", "load", str(tmp_path / "s.trig"), "--into", f"oxigraph:{tmp_path / 'store'}", "--spark",
               "--max-term-depth", "10")
    assert p.returncode == 2 and "--max-term-depth: for loading without --spark" in p.stderr, p.stderr


def test_at_the_most_the_flag_allows_every_output_writes_the_term(tmp_path):
    """The writers, the checkpoint tables and the VALUES text recurse into triple
    terms: ``--max-term-depth`` stops where they still can."""
    (tmp_path / "q.rq").write_text(QUERY % "FILTER (?p2 != ?p1)")
    (tmp_path / "s.trig").write_text(trig(reader.MOST_TERM_DEPTH))
    for fmt in ("jsonl", "json", "csv", "tsv"):
        checkpoint = [] if fmt == "json" else ["--checkpoint", str(tmp_path / f"ck-{fmt}")]
        p = spaseq("run", str(tmp_path / "q.rq"), "--stream", f"S={tmp_path / 's.trig'}", "--format", fmt,
                   "--max-term-depth", str(reader.MOST_TERM_DEPTH), *checkpoint, "--output", str(tmp_path / f"out.{fmt}"))
        assert p.returncode == 0, (fmt, p.stderr)
        assert "2 results" in p.stderr


@pytest.mark.parametrize("name, text, refused", [
    ("kb.ttl", '<http://x> <http://p> """long\nstring""" .\n<http://x> <http://q> ' + nested_text(30_000) + " .\n",
     "kb.ttl:3: a triple term nested more than"),
    ("kb.nt", '<http://x> <http://p> "ok" .\n<http://x> <http://q> ' + nested_text(30_000) + " .\n",
     "kb.nt:2: a triple term nested more than"),
])
def test_a_kb_file_nesting_too_deep_is_refused_by_run_and_loses_its_line_in_kb_load(name, text, refused, tmp_path):
    (tmp_path / "q.rq").write_text(QUERY % "")
    (tmp_path / "s.trig").write_text(trig(1))
    (tmp_path / name).write_text(text)
    p = spaseq("run", str(tmp_path / "q.rq"), "--stream", f"S={tmp_path / 's.trig'}",
               "--kb", f"http://example/kb={tmp_path / name}")
    assert p.returncode == 2 and refused in p.stderr, p.stderr
    p = spaseq("kb", "load", str(tmp_path / name), "--into", f"oxigraph:{tmp_path / 'store'}")
    if name.endswith(".nt"):            # a line format: the line is rejected, the rest loaded
        assert p.returncode == 0, p.stderr
        assert "1 bad line rejected" in p.stderr
        assert "nested more than" in (tmp_path / "store.rejects").read_text()
    else:
        assert p.returncode == 2 and refused in p.stderr, p.stderr


# -- the check itself ------------------------------------------------------------------------

@contextlib.contextmanager
def depth_three():
    kept, reader.MAX_TERM_DEPTH = reader.MAX_TERM_DEPTH, 3
    try:
        yield
    finally:
        reader.MAX_TERM_DEPTH = kept


@depth_three()
def test_what_holds_the_tokens_as_text_does_not_count_and_cannot_hide_them():
    assert term_too_deep(nested_text(3).encode()) == -1
    assert term_too_deep(nested_text(4).encode()) == len("<<( <http://a> <http://p> ") * 3
    for text in ['<x> <p> "<<(<<(<<(<<(" .', "# <<(<<(<<(<<(\n", "<x#a> <p> '''<<(<<(\n<<(<<(''' ."]:
        assert term_too_deep(text.encode()) == -1, text
    # a ')>>' in a comment, or a long string that seems to open where one closes
    hidden_by_comments = "".join("<<( <http://a> <http://p> # )>>\n" for _ in range(5)) + "<b>" + " )>>" * 5
    assert term_too_deep(hidden_by_comments.encode()) >= 0
    across_a_long_string = ':s :p """start\nend""" ; :q ' + nested_text(5) + ' ; :r """x""" .\n'
    check = NestingCheck()
    assert check.feed(across_a_long_string[:15].encode()) is None
    assert check.feed(across_a_long_string[15:].encode()) == 2


@settings(max_examples=examples(), deadline=None)
@given(st.lists(st.sampled_from(["<<( <http://a> <http://p> ", " )>>", '"<<("', "'''\n<<(\n'''", "# <<(\n",
                                 "<http://x#<<(>", "\n", " <b> "]), max_size=40),
       st.lists(st.integers(1, 30), max_size=8))
@depth_three()
def test_a_text_checked_in_chunks_is_checked_as_the_whole(pieces, cuts):
    text = "".join(pieces).encode()
    at = term_too_deep(text)
    expected = None if at < 0 else 1 + text.count(b"\n", 0, at)
    check, found, start = NestingCheck(), None, 0
    for cut in cuts + [len(text)]:
        found = found or check.feed(text[start:start + cut])
        start += cut
    found = found or check.feed(text[start:]) or check.feed(b"", final=True)
    assert found == expected
