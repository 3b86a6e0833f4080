"""RDF 1.2 triple terms, ``<<( s p o )>>``: written in every output and query text
as the syntax says."""

from __future__ import annotations

import csv
import io

import pyoxigraph as ox
import pytest

from spaseq_plugin import Engine, Event
from spaseq_plugin.evaluators.oxigraph import OxigraphEvaluator
from spaseq_plugin.evaluators.spectra import SpectraEvaluator
from spaseq_plugin.output.formats import DelimitedWriter
from spaseq_plugin.runtime.results import Result

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
