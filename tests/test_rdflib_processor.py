"""The rdflib query processor: ``dataset.query(text, processor="spaseq")``.

Everything goes through rdflib's plugin system (the installed entry point),
as a user's code would.  docs/rdflib.md describes what is tested here.
"""

import collections
import csv
import datetime as dt
import importlib.machinery
import importlib.metadata
import importlib.util
import io
import json
import re
import subprocess
import sys
import warnings
from decimal import Decimal
from pathlib import Path

import pytest
import rdflib
from rdflib import BNode, Dataset, Graph, Literal, Namespace, URIRef, Variable

from shared_paths import ACCEPTANCE, CASES
from spaseq_plugin import Engine, EventError, QueryError, SpaseqError, compile_query
from spaseq_plugin.errors import UsageError
from spaseq_plugin.rdflib_integration.processor import (
    SPASEQ_STREAM, MatchRows, SpaseqProcessor, SpaseqWarning, as_knowledge_base, dataset_events,
    spaseq_query)

ROOT = Path(__file__).resolve().parents[1]
EX = Namespace("http://example/")
# (plain IRIs: rdflib's closed namespace objects warn when pytest inspects module globals)
GENERATED_AT = URIRef("http://www.w3.org/ns/prov#generatedAtTime")
XSD_DATETIME = URIRef("http://www.w3.org/2001/XMLSchema#dateTime")
XSD_DECIMAL = URIRef("http://www.w3.org/2001/XMLSchema#decimal")
S1 = URIRef("http://example.org/s1")
S2 = URIRef("http://example.org/s2")
PREFIXES = "@prefix : <http://example/> . @prefix prov: <http://www.w3.org/ns/prov#> . " \
           "@prefix xsd: <http://www.w3.org/2001/XMLSchema#> . @prefix spaseq: <urn:spaseq:> .\n"

ONE_STREAM = """
PREFIX : <http://example/>
SELECT ?a ?b WITHIN 10 SECONDS
FROM STREAM S <http://example.org/s1>
WHERE { SEQ (A ; B)
  DEFINE GPM A ON S { ?a :kind "a" }
  DEFINE GPM B ON S { ?b :kind "b" } }
"""

TWO_STREAMS = """
PREFIX : <http://example/>
SELECT ?a ?b WITHIN 10 SECONDS
FROM STREAM S1 <http://example.org/s1>
FROM STREAM S2 <http://example.org/s2>
WHERE { SEQ (A ; B)
  DEFINE GPM A ON S1 { ?a :kind "a" }
  DEFINE GPM B ON S2 { ?b :kind "b" } }
"""


def trig(text: str, store: str = "default") -> Dataset:
    ds = Dataset(store=store)
    ds.parse(data=PREFIXES + text, format="trig")
    return ds


def simple_events(store: str = "default") -> Dataset:
    return trig("""
        :e1 prov:generatedAtTime 1 .   :e1 { :c1 :kind "c" . }
        :e2 prov:generatedAtTime 2 .   :e2 { :a1 :kind "a" . }
        :e3 prov:generatedAtTime 3 .   :e3 { :b1 :kind "b" . }
        :e4 prov:generatedAtTime 4 .   :e4 { :a2 :kind "a" . }
        :e5 prov:generatedAtTime 5 .   :e5 { :b2 :kind "b" . }
    """, store)


def plain_rows(result) -> list[tuple]:
    return [tuple(row) for row in result]


# --------------------------------------------------------------------------
# The plugin
# --------------------------------------------------------------------------

def test_entry_point_is_installed():
    eps = importlib.metadata.entry_points(group="rdf.plugins.queryprocessor")
    assert [ep.value for ep in eps if ep.name == "spaseq"] == \
        ["spaseq_plugin.rdflib_integration.processor:SpaseqProcessor"]
    assert rdflib.plugin.get("spaseq", rdflib.query.Processor) is SpaseqProcessor


def test_select_through_the_plugin():
    result = simple_events().query(ONE_STREAM, processor="spaseq")
    assert isinstance(result, rdflib.query.Result)
    assert result.type == "SELECT"
    assert result.vars == [Variable("a"), Variable("b")]
    assert plain_rows(result) == [(EX.a1, EX.b1), (EX.a2, EX.b2)]
    assert isinstance(result.bindings, MatchRows)
    assert result.bindings.match_times == [3, 5]
    assert len(result) == 2 and bool(result)
    first = next(iter(result))
    assert first.a == EX.a1 and first["b"] == EX.b1


def test_results_know_their_events():
    result = simple_events().query(ONE_STREAM, processor="spaseq")
    events = result.bindings.results[0].events
    assert [(e.stream, e.time, e.name.value) for e in events] == \
        [(str(S1), 2, str(EX.e2)), (str(S1), 3, str(EX.e3))]


def test_processor_used_directly():
    mapping = SpaseqProcessor(simple_events()).query(ONE_STREAM)
    assert mapping["type_"] == "SELECT"
    assert len(mapping["bindings"]) == 2


def test_graph_order_in_the_store_does_not_matter():
    ds = trig("""
        :e5 prov:generatedAtTime 5 .   :e5 { :b2 :kind "b" . }
        :e3 prov:generatedAtTime 3 .   :e3 { :b1 :kind "b" . }
        :e2 prov:generatedAtTime 2 .   :e2 { :a1 :kind "a" . }
    """)
    result = ds.query(ONE_STREAM, processor="spaseq")
    assert plain_rows(result) == [(EX.a1, EX.b1)]


# --------------------------------------------------------------------------
# The shared acceptance cases, loaded into an rdflib Dataset
# --------------------------------------------------------------------------

CASE_DIRS = sorted(p for p in CASES.iterdir() if (p / "case.json").exists()) if CASES.is_dir() else []


def _acceptance_runner():
    loader = importlib.machinery.SourceFileLoader("spaseq_acceptance_run", str(ACCEPTANCE / "run"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def case_dataset(case_dir: Path, case: dict, stream_iris: dict[str, str]) -> Dataset:
    """All the case's stream files in one Dataset; with several streams each
    event graph gets its ``spaseq:stream`` triple (one stream: the default)."""
    out = Dataset()
    seen = set()
    for alias, fname in case["streams"].items():
        part = Dataset()
        part.parse(case_dir / fname, format="trig")
        default_id = part.default_graph.identifier
        for g in part.graphs():
            if g.identifier == default_id:
                continue
            # one Dataset cannot tell two events of one graph name apart
            assert g.identifier not in seen, f"graph {g.identifier} is in two stream files"
            seen.add(g.identifier)
            if len(case["streams"]) > 1:
                out.add((g.identifier, SPASEQ_STREAM, URIRef(stream_iris[alias])))
        out.parse(case_dir / fname, format="trig")
    return out


@pytest.mark.skipif(not CASE_DIRS, reason="../shared/acceptance is absent")
@pytest.mark.parametrize("case_dir", CASE_DIRS, ids=lambda p: p.name)
def test_acceptance_case_through_rdflib(case_dir):
    case = json.loads((case_dir / "case.json").read_text())
    args = case.get("args", [])
    assert all(a == "--start" for a in args[::2]), f"no processor option for the arguments {args}"
    options = {"start": json.loads(args[args.index("--start") + 1])} if "--start" in args else {}
    text = (case_dir / case["query"]).read_text()
    if case.get("expect_error"):
        with pytest.raises(QueryError) as info:
            Dataset().query(text, processor="spaseq")
        assert info.value.line is not None
        for fragment in case["expect_error"].get("stderr_contains", []):
            assert fragment.lower() in str(info.value).lower()
        return
    events = case_dataset(case_dir, case, compile_query(text).stream_iris)
    kb = None
    if case.get("kb"):
        kb_path = case_dir / case["kb"]
        if kb_path.suffix in (".trig", ".nq"):
            kb = Dataset()
            kb.parse(kb_path)
        else:
            kb = str(kb_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpaseqWarning)     # no rejection, no warning
        if kb is not None:
            options["kb"] = kb
        result = events.query(text, processor="spaseq", **options)
    run = _acceptance_runner()
    # compare what the JSON serialisation says, with the match times beside it
    doc = json.loads(result.serialize(format="json"))
    times = [str(t) if isinstance(t, Decimal) else t for t in result.bindings.match_times]
    assert len(times) == len(doc["results"]["bindings"])
    got = collections.Counter(run.row_key(t, b, run.output_term)
                              for t, b in zip(times, doc["results"]["bindings"]))
    want = collections.Counter(run.row_key(r["time"], r["bindings"], run.expected_term)
                               for r in case["expected"])
    assert got == want


# --------------------------------------------------------------------------
# Streams
# --------------------------------------------------------------------------

def test_graphs_say_their_stream():
    ds = trig("""
        :e1 prov:generatedAtTime 1 ; spaseq:stream <http://example.org/s2> .  :e1 { :b0 :kind "b" . }
        :e2 prov:generatedAtTime 2 ; spaseq:stream <http://example.org/s1> .  :e2 { :a1 :kind "a" . }
        :e3 prov:generatedAtTime 3 ; spaseq:stream <http://example.org/s1> .  :e3 { :b1 :kind "b" . }
        :e4 prov:generatedAtTime 4 ; spaseq:stream <http://example.org/s2> .  :e4 { :b2 :kind "b" . }
    """)
    result = ds.query(TWO_STREAMS, processor="spaseq")
    assert plain_rows(result) == [(EX.a1, EX.b2)]        # :b1 is on s1, which B does not read
    assert result.bindings.match_times == [4]


def test_a_graph_may_name_several_streams():
    ds = trig("""
        :e1 prov:generatedAtTime 1 ; spaseq:stream <http://example.org/s1> .  :e1 { :a1 :kind "a" . }
        :e2 prov:generatedAtTime 2 ; spaseq:stream <http://example.org/s1>, <http://example.org/s2> .
        :e2 { :x :kind "b" . :x :kind "a" . }
    """)
    result = ds.query(TWO_STREAMS, processor="spaseq")
    assert plain_rows(result) == [(EX.a1, EX.x)]


def test_graphs_of_other_streams_are_ignored():
    ds = simple_events()
    ds.add((EX.e3, SPASEQ_STREAM, URIRef("http://example.org/elsewhere")))
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpaseqWarning)
        result = ds.query(ONE_STREAM, processor="spaseq")
    assert plain_rows(result) == [(EX.a1, EX.b2), (EX.a2, EX.b2)]


def test_unnamed_stream_with_several_streams_is_rejected():
    ds = trig("""
        :e1 prov:generatedAtTime 1 ; spaseq:stream <http://example.org/s1> .  :e1 { :a1 :kind "a" . }
        :e2 prov:generatedAtTime 2 .  :e2 { :b1 :kind "b" . }
        :e3 prov:generatedAtTime 3 ; spaseq:stream <http://example.org/s2> .  :e3 { :b2 :kind "b" . }
    """)
    with pytest.warns(SpaseqWarning, match=r"graph <http://example/e2>.*names no stream"):
        result = ds.query(TWO_STREAMS, processor="spaseq")
    assert plain_rows(result) == [(EX.a1, EX.b2)]
    [error] = result.bindings.rejections
    assert isinstance(error, EventError) and "urn:spaseq:stream" in str(error)
    with pytest.raises(EventError, match="names no stream"):
        ds.query(TWO_STREAMS, processor="spaseq", strict=True)


def test_bad_timestamps_are_rejected_and_the_rest_goes_on():
    ds = trig("""
        :e1 prov:generatedAtTime "soon" .  :e1 { :a0 :kind "a" . }
        :e2 prov:generatedAtTime 2 .       :e2 { :a1 :kind "a" . }
        :e3 prov:generatedAtTime 3, 4 .    :e3 { :b0 :kind "b" . }
        :e4 spaseq:stream <http://example.org/s1> .  :e4 { :b1 :kind "b" . }
        :e5 prov:generatedAtTime 5 .       :e5 { :b2 :kind "b" . }
        :e6 prov:generatedAtTime 5 .       :e6 { :b3 :kind "b" . }
    """)
    with pytest.warns(SpaseqWarning) as record:
        result = ds.query(ONE_STREAM, processor="spaseq")
    assert len(result) == 1 and result.bindings.match_times == [5]
    messages = sorted(str(e) for e in result.bindings.rejections)
    assert len(messages) == 4, messages
    assert any("<http://example/e1>" in m and "timestamp" in m for m in messages)
    assert any("<http://example/e3>" in m and "two different timestamps" in m for m in messages)
    assert any("<http://example/e4>" in m and "no timestamp" in m for m in messages)
    assert any("duplicate" in m for m in messages)
    assert len([w for w in record if "rejected event" in str(w.message)]) == 4
    with pytest.raises(EventError):
        ds.query(ONE_STREAM, processor="spaseq", strict=True)


def test_blank_nodes_pyoxigraph_refuses_are_relabelled():
    ds = Dataset()
    ds.graph(EX.e1).add((BNode("an odd label"), EX.kind, Literal("a")))
    ds.graph(EX.e2).add((EX.b1, EX.kind, Literal("b")))
    ds.add((EX.e1, GENERATED_AT, Literal(1)))
    ds.add((EX.e2, GENERATED_AT, Literal(2)))
    [row] = ds.query(ONE_STREAM, processor="spaseq")
    assert isinstance(row.a, BNode) and row.b == EX.b1


def test_dataset_events_for_an_engine():
    ds = simple_events()
    engine = Engine(ONE_STREAM)
    events = dataset_events(ds, engine.compiled.stream_iris)
    assert [e.time for e in events] == [1, 2, 3, 4, 5]
    assert [len(r.bindings) for r in engine.run(events)] == [2, 2]


# --------------------------------------------------------------------------
# Times
# --------------------------------------------------------------------------

def test_datetime_match_times():
    ds = trig("""
        :e1 prov:generatedAtTime "2024-05-01T10:00:00Z"^^xsd:dateTime .  :e1 { :a1 :kind "a" . }
        :e2 prov:generatedAtTime "2024-05-01T12:00:05+02:00"^^xsd:dateTime .  :e2 { :b1 :kind "b" . }
        :e3 prov:generatedAtTime "2024-05-01T10:00:07.250"^^xsd:dateTime .  :e3 { :b2 :kind "b" . }
    """)
    result = ds.query(ONE_STREAM, processor="spaseq")
    assert result.bindings.is_datetime
    utc = dt.timezone.utc
    assert result.bindings.match_times == [dt.datetime(2024, 5, 1, 10, 0, 5, tzinfo=utc)]
    assert result.bindings.match_times[0].utcoffset() == dt.timedelta(0)
    timed = ds.query(ONE_STREAM, processor="spaseq", time_var="time")
    assert timed.vars[0] == Variable("time")
    [row] = timed
    assert (str(row.time), row.time.datatype) == ("2024-05-01T10:00:05Z", XSD_DATETIME)
    assert row.time.toPython() == dt.datetime(2024, 5, 1, 10, 0, 5, tzinfo=utc)


def test_datetime_with_rdflib_literals_from_python():
    ds = Dataset()
    for n, (kind, moment) in enumerate([("a", dt.datetime(2024, 1, 1, 9, 0, 0)),
                                        ("b", dt.datetime(2024, 1, 1, 9, 0, 3, 500000))]):
        ds.graph(EX[f"e{n}"]).add((EX[f"x{n}"], EX.kind, Literal(kind)))
        ds.add((EX[f"e{n}"], GENERATED_AT, Literal(moment)))      # naive: UTC
    result = ds.query(ONE_STREAM, processor="spaseq")
    assert result.bindings.match_times == [dt.datetime(2024, 1, 1, 9, 0, 3, 500000, tzinfo=dt.timezone.utc)]


def test_decimal_match_times():
    ds = trig("""
        :e1 prov:generatedAtTime 0.5 .   :e1 { :a1 :kind "a" . }
        :e2 prov:generatedAtTime 1.25 .  :e2 { :b1 :kind "b" . }
    """)
    result = ds.query(ONE_STREAM, processor="spaseq", time_var="t")
    assert result.bindings.match_times == [Decimal("1.25")]
    [row] = result
    assert row.t == Literal("1.25", datatype=XSD_DECIMAL)


def test_mixed_timestamp_kinds_are_rejected():
    ds = trig("""
        :e1 prov:generatedAtTime 1 .  :e1 { :a1 :kind "a" . }
        :e2 prov:generatedAtTime "2024-05-01T10:00:00Z"^^xsd:dateTime .  :e2 { :b1 :kind "b" . }
    """)
    with pytest.warns(SpaseqWarning, match="kind"):
        result = ds.query(ONE_STREAM, processor="spaseq")
    assert len(result) == 0 and len(result.bindings.rejections) == 1


# --------------------------------------------------------------------------
# Serialisation
# --------------------------------------------------------------------------

TERMS_QUERY = """
PREFIX : <http://example/>
SELECT ?x ?label ?n ?blank (COUNT(?b) AS ?count) WITHIN 10 SECONDS
FROM STREAM S <http://example.org/s1>
WHERE { SEQ (A ; B+)
  DEFINE GPM A ON S { ?x :label ?label ; :n ?n ; :ref ?blank }
  DEFINE GPM B ON S { ?b :kind "b" } }
"""


def terms_events() -> Dataset:
    return trig("""
        :e1 prov:generatedAtTime 1 .  :e1 { :x1 :label "héllo, \\"world\\""@en ; :n 2.5 ; :ref _:z . }
        :e2 prov:generatedAtTime 2 .  :e2 { :b1 :kind "b" . }
        :e3 prov:generatedAtTime 3 .  :e3 { :b2 :kind "b" . }
    """)


def test_serialise_json():
    result = terms_events().query(TERMS_QUERY, processor="spaseq")
    doc = json.loads(result.serialize(format="json"))
    assert doc["head"]["vars"] == ["x", "label", "n", "blank", "count"]
    rows = doc["results"]["bindings"]
    assert len(rows) == 2
    assert rows[0]["x"] == {"type": "uri", "value": "http://example/x1"}
    assert rows[0]["label"] == {"type": "literal", "value": 'héllo, "world"', "xml:lang": "en"}
    assert rows[0]["n"] == {"type": "literal", "value": "2.5", "datatype": str(XSD_DECIMAL)}
    assert rows[0]["blank"]["type"] == "bnode"
    assert [r["count"]["value"] for r in rows] == ["1", "2"]
    assert result.bindings.match_times == [2, 3]


def test_serialise_csv_with_and_without_time():
    ds = terms_events()
    plain = ds.query(TERMS_QUERY, processor="spaseq").serialize(format="csv").decode()
    table = list(csv.reader(io.StringIO(plain)))
    assert table[0] == ["x", "label", "n", "blank", "count"]
    assert table[1][:3] == ["http://example/x1", 'héllo, "world"', "2.5"]
    assert table[1][3].startswith("_:")
    timed = ds.query(TERMS_QUERY, processor="spaseq", time_var="time").serialize(format="csv").decode()
    table = list(csv.reader(io.StringIO(timed)))
    assert table[0] == ["time", "x", "label", "n", "blank", "count"]
    assert [r[0] for r in table[1:]] == ["2", "3"]
    assert [r[-1] for r in table[1:]] == ["1", "2"]


def test_serialise_xml_and_txt(tmp_path):
    result = simple_events().query(ONE_STREAM, processor="spaseq")
    xml = result.serialize(format="xml").decode()
    assert "http://www.w3.org/2005/sparql-results#" in xml
    assert xml.count("<result>") == 2 and "http://example/a2" in xml
    txt = result.serialize(format="txt").decode()
    assert "<http://example/a1>" in txt and "<http://example/b2>" in txt
    target = tmp_path / "out.json"
    result.serialize(str(target), format="json")
    assert len(json.loads(target.read_text())["results"]["bindings"]) == 2
    # and the serialisation parses back as a SPARQL result
    parsed = rdflib.query.Result.parse(io.BytesIO(result.serialize(format="json")), format="json")
    assert [tuple(r) for r in parsed] == [tuple(r) for r in result]


# --------------------------------------------------------------------------
# CONSTRUCT
# --------------------------------------------------------------------------

CONSTRUCT = """
PREFIX : <http://example/>
CONSTRUCT { _:alert a :Alert ; :first ?a ; :then ?b . }
WITHIN 10 SECONDS
FROM STREAM S <http://example.org/s1>
WHERE { SEQ (A ; B)
  DEFINE GPM A ON S { ?a :kind "a" }
  DEFINE GPM B ON S { ?b :kind "b" } }
"""


def test_construct_gives_a_dataset_of_graph_events():
    result = simple_events().query(CONSTRUCT, processor="spaseq")
    assert result.type == "CONSTRUCT"
    out = result.graph
    assert isinstance(out, Dataset)
    default = out.default_graph
    stamps = sorted((str(g), int(t)) for g, _, t in default.triples((None, GENERATED_AT, None)))
    assert stamps == [("urn:spaseq:match:1", 3), ("urn:spaseq:match:2", 5)]
    one = out.graph(URIRef("urn:spaseq:match:1"))
    [alert] = one.subjects(rdflib.RDF.type, EX.Alert)
    assert isinstance(alert, BNode)
    assert (alert, EX.first, EX.a1) in one and (alert, EX.then, EX.b1) in one
    two = out.graph(URIRef("urn:spaseq:match:2"))
    assert next(two.subjects(rdflib.RDF.type, EX.Alert)) != alert       # fresh per match
    text = result.serialize(format="trig").decode()
    assert "urn:spaseq:match:2" in text and "generatedAtTime" in text


def test_construct_output_is_a_stream_for_another_query():
    alerts = simple_events().query(CONSTRUCT, processor="spaseq").graph
    again = Dataset()
    again.parse(data=alerts.serialize(format="trig"), format="trig")
    follow = """PREFIX : <http://example/>
        SELECT ?a WITHIN 10 SECONDS FROM STREAM Al <urn:alerts>
        WHERE { SEQ (X) DEFINE GPM X ON Al { ?x a :Alert ; :first ?a } }"""
    for source in (alerts, again):
        result = source.query(follow, processor="spaseq")
        assert plain_rows(result) == [(EX.a1,), (EX.a2,)]
        assert result.bindings.match_times == [3, 5]


# --------------------------------------------------------------------------
# Knowledge base
# --------------------------------------------------------------------------

KB_QUERY = """
PREFIX : <http://example/>
SELECT ?a ?owner ?g WITHIN 10 SECONDS
FROM STREAM S <http://example.org/s1>
WHERE { SEQ (A)
  DEFINE GPM A ON S { ?a :kind "a" . GRAPH <http://example.org/kb> { ?a :owner ?owner } } }
""".replace("?g ", "")

KB_VAR_QUERY = """
PREFIX : <http://example/>
SELECT ?a ?owner ?g WITHIN 10 SECONDS
FROM STREAM S <http://example.org/s1>
WHERE { SEQ (A)
  DEFINE GPM A ON S { ?a :kind "a" . GRAPH ?g { ?a :owner ?owner } } }
"""

KB_TRIG = """
<http://example.org/kb> { :a1 :owner :alice . :a2 :owner :bob . }
<http://example.org/kb2> { :a2 :owner :carol . }
"""


def test_kb_as_an_rdflib_dataset():
    result = simple_events().query(KB_QUERY, processor="spaseq", kb=trig(KB_TRIG))
    assert plain_rows(result) == [(EX.a1, EX.alice), (EX.a2, EX.bob)]
    result = simple_events().query(KB_VAR_QUERY, processor="spaseq", kb=trig(KB_TRIG))
    assert sorted(plain_rows(result)) == [
        (EX.a1, EX.alice, URIRef("http://example.org/kb")), (EX.a2, EX.bob, URIRef("http://example.org/kb")),
        (EX.a2, EX.carol, URIRef("http://example.org/kb2"))]


def test_kb_as_one_rdflib_graph():
    owners = Graph(identifier=URIRef("http://example.org/kb"))
    owners.add((EX.a2, EX.owner, EX.dave))
    kb = as_knowledge_base(owners)
    assert type(kb).__name__ == "RdflibKB" and kb.graph_names() == ["http://example.org/kb"]
    assert plain_rows(simple_events().query(KB_QUERY, processor="spaseq", kb=owners)) == [(EX.a2, EX.dave)]
    with pytest.raises(SpaseqError, match="graph name"):
        simple_events().query(KB_QUERY, processor="spaseq", kb=Graph())     # no IRI to name it


def test_kb_in_the_same_dataset_as_untimed_graphs():
    ds = simple_events()
    ds.parse(data=PREFIXES + KB_TRIG, format="trig")
    result = ds.query(KB_QUERY, processor="spaseq")
    assert plain_rows(result) == [(EX.a1, EX.alice), (EX.a2, EX.bob)]
    # with kb=, the untimed graphs are not used
    other = trig("<http://example.org/kb> { :a1 :owner :zoe . }")
    assert plain_rows(ds.query(KB_QUERY, processor="spaseq", kb=other)) == [(EX.a1, EX.zoe)]


def test_kb_as_a_pyoxigraph_store_and_as_specs(tmp_path):
    import pyoxigraph as ox
    store = ox.Store()
    store.load(PREFIXES + KB_TRIG, ox.RdfFormat.TRIG)
    assert plain_rows(simple_events().query(KB_QUERY, processor="spaseq", kb=store)) == \
        [(EX.a1, EX.alice), (EX.a2, EX.bob)]
    path = tmp_path / "kb.trig"
    path.write_text(PREFIXES + KB_TRIG)
    assert plain_rows(simple_events().query(KB_QUERY, processor="spaseq", kb=str(path))) == \
        [(EX.a1, EX.alice), (EX.a2, EX.bob)]
    assert plain_rows(simple_events().query(KB_QUERY, processor="spaseq", kb=[str(path)])) == \
        [(EX.a1, EX.alice), (EX.a2, EX.bob)]


def test_missing_kb_graph_is_a_warning():
    with pytest.warns(SpaseqWarning, match="no KB is given"):
        result = simple_events().query(KB_QUERY, processor="spaseq")
    assert len(result) == 0 and result.bindings.warnings
    with pytest.warns(SpaseqWarning, match="has no graph <http://example.org/kb>"):
        simple_events().query(KB_QUERY, processor="spaseq", kb=trig("<urn:other> { :a :b :c . }"))


def test_bad_kb_argument():
    with pytest.raises(TypeError, match="kb must be"):
        simple_events().query(KB_QUERY, processor="spaseq", kb=42)


# --------------------------------------------------------------------------
# Arguments: initNs, initBindings, options
# --------------------------------------------------------------------------

NO_PREFIX = """SELECT ?a ?b WITHIN 10 SECONDS
FROM STREAM S <http://example.org/s1>
WHERE { SEQ (A ; B)
  DEFINE GPM A ON S { ?a ex:kind "a" }
  DEFINE GPM B ON S { ?b ex:kind "b" } }
"""


def test_init_ns_gives_prefixes():
    ds = simple_events()
    result = ds.query(NO_PREFIX, processor="spaseq", initNs={"ex": EX})
    assert plain_rows(result) == [(EX.a1, EX.b1), (EX.a2, EX.b2)]
    # rdflib passes the Dataset's own namespace bindings when initNs is not given
    ds.bind("ex", EX)
    assert len(ds.query(NO_PREFIX, processor="spaseq")) == 2


def test_prefixes_with_letters_of_any_script_are_given():
    # initNs and the graph's bindings with a non-ASCII prefix name were dropped
    # ("a prefix is not declared")
    query = NO_PREFIX.replace("ex:", "ü:")
    assert len(simple_events().query(query, processor="spaseq", initNs={"ü": EX})) == 2
    ds = simple_events()
    ds.bind("ü", EX)
    assert len(ds.query(query, processor="spaseq")) == 2


def test_the_querys_own_prefix_wins_over_init_ns():
    result = simple_events().query(ONE_STREAM, processor="spaseq", initNs={"": "http://wrong/"})
    assert len(result) == 2


def test_errors_keep_the_users_line_numbers():
    bad = NO_PREFIX.replace('?b ex:kind "b" }', '?b ex:kind "b" . FILTER( }')
    with pytest.raises(QueryError) as plain:
        compile_query('PREFIX ex: <http://example/>\n' + bad)
    with pytest.raises(QueryError) as via_rdflib:
        simple_events().query(bad, processor="spaseq", initNs={"ex": EX})
    assert (via_rdflib.value.line, via_rdflib.value.column) == (plain.value.line - 1, plain.value.column)
    with pytest.raises(QueryError, match="prefix ex: is not declared"):
        Dataset().query(NO_PREFIX.replace("<http://example.org/s1>", "ex:s1"), processor="spaseq",
                        initNs={"xsd": "http://www.w3.org/2001/XMLSchema#"})


def test_base_argument():
    text = ONE_STREAM.replace("<http://example.org/s1>", "<s1>")
    result = simple_events().query(text, processor="spaseq", base="http://example.org/")
    assert len(result) == 2


def test_init_bindings_are_rejected():
    with pytest.raises(ValueError, match="initBindings"):
        simple_events().query(ONE_STREAM, processor="spaseq", initBindings={"a": EX.a1})


def test_unknown_options_and_prepared_queries_are_rejected():
    with pytest.raises(TypeError, match="unexpected option.*windo"):
        simple_events().query(ONE_STREAM, processor="spaseq", windo=3)
    prepared = rdflib.plugins.sparql.prepareQuery("SELECT * WHERE { ?s ?p ?o }")
    with pytest.raises(TypeError, match="SPASEQ query text"):
        simple_events().query(prepared, processor="spaseq")


def test_time_var_checks():
    with pytest.raises(ValueError, match="already projected"):
        simple_events().query(ONE_STREAM, processor="spaseq", time_var="a")
    with pytest.raises(ValueError, match="CONSTRUCT"):
        simple_events().query(CONSTRUCT, processor="spaseq", time_var="time")
    with pytest.raises(ValueError, match="not a variable name"):
        simple_events().query(ONE_STREAM, processor="spaseq", time_var="two words")
    with pytest.raises(ValueError, match="time_var is a variable name, not int 5"):     # (was an AttributeError)
        simple_events().query(ONE_STREAM, processor="spaseq", time_var=5)
    with pytest.raises(TypeError, match="spaseq_query queries an rdflib Dataset, not str"):
        spaseq_query("events.trig", ONE_STREAM)
    assert simple_events().query(ONE_STREAM, processor="spaseq", time_var="?t").vars[0] == Variable("t")
    assert simple_events().query(ONE_STREAM, processor="spaseq", time_var="zeit_ä").vars[0] == Variable("zeit_ä")


def test_a_plain_graph_is_not_a_stream_set():
    g = Graph()
    g.add((EX.a, EX.b, EX.c))
    with pytest.raises(TypeError, match="Dataset"):
        g.query(ONE_STREAM, processor="spaseq")


def test_bad_query_raises_query_error():
    with pytest.raises(QueryError) as info:
        simple_events().query(ONE_STREAM.replace("SEQ (A ; B)", "SEQ (A ; Z)"), processor="spaseq")
    assert "Z" in str(info.value) and info.value.line == 5


def test_tumbling_start_option():
    text = ONE_STREAM.replace("WITHIN 10 SECONDS", "WITHIN 2 SECONDS TUMBLING")
    # windows [2,4) [4,6): a1@2 b1@3 and a2@4 b2@5 match
    assert len(simple_events().query(text, processor="spaseq", start=2)) == 2
    # windows [1,3) [3,5) [5,7): no a and b in one window
    assert len(simple_events().query(text, processor="spaseq", start=1)) == 0



@pytest.mark.parametrize("start, said", [
    (float("nan"), "a start time must be finite, not nan"),
    (float("inf"), "a start time must be finite, not inf"),
    (1e30, "outside the representable range"),
    ("abc", "not a number of seconds or an xsd:dateTime: 'abc'"),
    ([1], "a number of seconds, an xsd:dateTime text or a datetime, not list"),
    (True, "a number of seconds, an xsd:dateTime text or a datetime, not bool"),
    ("2012-01-01T00:00:00Z", "start 2012-01-01T00:00:00Z is an xsd:dateTime, but the first event of the stream "
                             "set (at graph <http://example/e1>) is timed by a number of seconds"),
])
def test_a_start_that_would_drop_every_event_is_an_error(start, said):
    """Each of these once gave no result and no word (NaN, an infinity, a huge number,
    a dateTime over numbers), or a bare TypeError (a list)."""
    text = ONE_STREAM.replace("WITHIN 10 SECONDS", "WITHIN 2 SECONDS TUMBLING")
    with pytest.raises(UsageError) as info:
        list(simple_events().query(text, processor="spaseq", start=start))
    assert said in str(info.value)


def test_a_datetime_start_reads_as_an_xsd_datetime():
    text = ONE_STREAM.replace("WITHIN 10 SECONDS", "WITHIN 2 SECONDS TUMBLING")
    events = trig("".join(f':e{t} prov:generatedAtTime "2020-01-01T00:00:0{t}Z"^^xsd:dateTime . '
                          f':e{t} {{ :{name} :kind "{name[0]}" . }}\n'
                          for t, name in [(1, "c1"), (2, "a1"), (3, "b1"), (4, "a2"), (5, "b2")]))
    # windows [2,4) [4,6), as with start=2 over numbers
    zone = dt.timezone(dt.timedelta(hours=1))
    for start in (dt.datetime(2020, 1, 1, 0, 0, 2), dt.datetime(2020, 1, 1, 1, 0, 2, tzinfo=zone),
                  "2020-01-01T00:00:02Z"):
        assert len(events.query(text, processor="spaseq", start=start)) == 2, start
    assert len(events.query(text, processor="spaseq", start=dt.datetime(2020, 1, 1, 0, 0, 1))) == 0

# --------------------------------------------------------------------------
# Oxigraph through oxrdflib
# --------------------------------------------------------------------------

def test_oxigraph_backed_dataset():
    ds = simple_events(store="Oxigraph")
    assert type(ds.store).__name__ == "OxigraphStore"
    # rdflib asks the store first: Oxigraph's SPARQL parser refuses SPASEQ
    with pytest.raises(SyntaxError):
        ds.query(ONE_STREAM, processor="spaseq")
    result = ds.query(ONE_STREAM, processor="spaseq", use_store_provided=False)
    assert plain_rows(result) == [(EX.a1, EX.b1), (EX.a2, EX.b2)]
    assert result.bindings.match_times == [3, 5]
    assert plain_rows(spaseq_query(ds, ONE_STREAM)) == plain_rows(result)
    assert json.loads(result.serialize(format="json"))["head"]["vars"] == ["a", "b"]


def test_oxigraph_backed_events_and_kb():
    ds = simple_events(store="Oxigraph")
    kb = trig(KB_TRIG, store="Oxigraph")
    result = ds.query(KB_QUERY, processor="spaseq", use_store_provided=False, kb=kb)
    assert plain_rows(result) == [(EX.a1, EX.alice), (EX.a2, EX.bob)]
    ds.parse(data=PREFIXES + KB_TRIG, format="trig")      # the KB inside the event Dataset
    assert plain_rows(spaseq_query(ds, KB_QUERY)) == [(EX.a1, EX.alice), (EX.a2, EX.bob)]


# --------------------------------------------------------------------------
# Engine.push with rdflib Graphs
# --------------------------------------------------------------------------

def test_engine_push_rdflib_graphs_with_a_callback():
    text = """PREFIX : <http://example/>
        SELECT ?a ?label ?b ?node WITHIN 10 SECONDS FROM STREAM S <http://example.org/s1>
        WHERE { SEQ (A ; B)
          DEFINE GPM A ON S { ?a :kind "a" ; :label ?label }
          DEFINE GPM B ON S { ?b :kind "b" ; :next ?node . FILTER(?node != ?a) } }"""
    seen = []
    engine = Engine(text, on_result=seen.append)
    a = Graph()
    a.add((EX.a1, EX.kind, Literal("a")))
    a.add((EX.a1, EX.label, Literal("un", lang="fr")))
    b = Graph()
    node = BNode()
    b.add((EX.b1, EX.kind, Literal("b")))
    b.add((EX.b1, EX.next, node))
    assert engine.push(str(S1), 1, a) == []
    pushed = engine.push(str(S1), 2.5, b)      # final at once: the query's one stream is at 2.5
    assert len(seen) == 1 and pushed == seen
    assert engine.close() == []
    [r] = seen
    assert r.time == Decimal("2.5")
    assert r.bindings["a"].value == str(EX.a1)
    assert (r.bindings["label"].value, r.bindings["label"].language) == ("un", "fr")
    assert r.bindings["node"].value == str(node)


def test_engine_with_an_rdflib_kb():
    engine = Engine(KB_QUERY, kb=as_knowledge_base(trig(KB_TRIG)))
    g = Graph()
    g.add((EX.a2, EX.kind, Literal("a")))
    [r] = engine.push(str(S1), 1, g) + engine.close()
    assert r.bindings["owner"].value == str(EX.bob)


# --------------------------------------------------------------------------
# The documentation's code
# --------------------------------------------------------------------------

def test_the_example_script_runs():
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "rdflib" / "example.py")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    h1 = "2024-05-01T10:10:00+00:00 <http://example/grid/h1> <http://example/grid/alice> 5"
    h2 = "2024-05-01T10:40:00+00:00 <http://example/grid/h2> <http://example/grid/bob> 7"
    assert out.count(h1) == 2 and out.count(h2) == 2        # in-memory and Oxigraph-backed
    assert "2024-05-01T10:10:00Z,http://example/grid/h1,http://example/grid/alice,5" in out
    assert "alert for <http://example/grid/h1>" in out and "alert for <http://example/grid/h2>" in out
    assert "match at 10 http://example/grid/h1 http://example/grid/alice" in out
    assert "match at 40 http://example/grid/h2 http://example/grid/bob" in out
    assert "Warning" not in proc.stderr


def test_the_docs_first_block_runs(capsys):
    text = (ROOT / "docs" / "rdflib.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    first = next(b for b in blocks if "Dataset()" in b and "processor=\"spaseq\"" in b)
    exec(compile(first, "docs/rdflib.md", "exec"), {})
    out = capsys.readouterr().out
    assert "3 http://example/a1 http://example/b1" in out
    assert "a,b" in out
