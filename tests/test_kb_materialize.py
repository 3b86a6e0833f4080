"""``spaseq kb materialize`` and ``--kb materialized:DIR``.

Each query's GRAPH blocks are materialised with Spark (the session-scoped
``spark`` fixture) from an N-Quads dump of its KB; the run on the
materialised tables must give the results the run on the KB itself gives
(blank nodes compared up to renaming).  Error cases need no Spark.
"""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pyoxigraph as ox
import pytest

from shared_paths import CASES
from spaseq_plugin import Engine
from spaseq_plugin.cli import commands as cli
from spaseq_plugin.language.compiler import compile_query
from spaseq_plugin.errors import QueryError, SpaseqError
from spaseq_plugin.evaluators.spectra import SpectraEvaluator
from spaseq_plugin.kb import KnowledgeBase
from spaseq_plugin.stores.materialized import MaterializedKB, graph_blocks

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PAPER_EX10 = CASES / "paper-ex10-kb-graph"


def materialize(query: Path, dumps: list[Path], out: Path) -> int:
    """``spaseq kb materialize`` in process, on the test session's Spark: the exit status."""
    return cli.main(["kb", "materialize", str(query), "--dump", *map(str, dumps), "--out", str(out),
                     "--spark-master", "local[2]", "--quiet"])


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def nquads(kb: Path, dump: Path) -> Path:
    """The KB file as an N-Quads dump (gzipped when ``dump`` ends in .gz)."""
    data = ox.serialize(ox.parse(path=str(kb)), format=ox.RdfFormat.N_QUADS)
    dump.write_bytes(gzip.compress(data) if dump.suffix == ".gz" else data)
    return dump


def run(query: Path, streams: dict[str, Path], kb: list[str], tmp_path: Path) -> list[dict]:
    """``spaseq run`` in process; the JSON results, sorted (simultaneous results come in no set
    order), blank nodes all written ``_:`` (their labels are the store's)."""
    out = tmp_path / f"results-{len(list(tmp_path.glob('results-*')))}.jsonl"
    argv = ["run", str(query), "--format", "jsonl", "--output", str(out), "--quiet"]
    for alias, path in streams.items():
        argv += ["--stream", f"{alias}={path}"]
    for spec in kb:
        argv += ["--kb", spec]
    assert cli.main(argv) == 0
    results = []
    for line in out.read_text().splitlines():
        result = json.loads(line)
        for term in result["bindings"].values():
            if term["type"] == "bnode":
                term["value"] = "_:"
        results.append(result)
    return sorted(results, key=lambda r: json.dumps(r, sort_keys=True))


def prepare(example: str, out: Path, *args: str) -> Path:
    subprocess.run([sys.executable, str(EXAMPLES / example / "prepare.py"), "--out", str(out), *args],
                   check=True, capture_output=True, timeout=120)
    return out


# -- the examples and the acceptance case: materialised == the KB ----------------------------

def _quickstart(tmp_path):
    folder = EXAMPLES / "quickstart"
    return folder / "query.rq", {s: folder / f"{n}.trig" for s, n in
                                 (("S1", "power"), ("S2", "weather"), ("S3", "storage"))}, folder / "kb.trig"


def _paper_ex10(tmp_path):
    if not PAPER_EX10.exists():
        pytest.skip(f"no shared acceptance case {PAPER_EX10}")
    return PAPER_EX10 / "query.rq", {"S1": PAPER_EX10 / "power.trig"}, PAPER_EX10 / "kb.trig"


def _trajectory(tmp_path):
    out = prepare("uc2-trajectory", tmp_path / "data", "--limit", "600")
    return EXAMPLES / "uc2-trajectory" / "query.rq", {"S1": out / "boats.trig"}, out / "kb.trig"


def _credit_card(tmp_path):
    out = prepare("uc3-credit-card", tmp_path / "data", "--generated", "--limit", "200")
    return EXAMPLES / "uc3-credit-card" / "query.rq", {"S1": out / "transactions.trig"}, out / "kb.trig"


def _traffic(tmp_path):       # two KB graphs, the same blocks in three GPMs
    out = prepare("uc5-traffic", tmp_path / "data", "--generated", "--limit", "30")
    streams = {"S1": out / "traffic182955.trig", "S2": out / "traffic195578.trig", "S3": out / "traffic195446.trig"}
    return EXAMPLES / "uc5-traffic" / "query.rq", streams, out / "kb.trig"


@pytest.mark.parametrize("case", [_quickstart, _paper_ex10, _trajectory, _credit_card, _traffic],
                         ids=lambda case: case.__name__.strip("_"))
def test_materialised_kb_gives_the_kb_results(spark, tmp_path, case):
    query, streams, kb = case(tmp_path)
    dump = nquads(kb, tmp_path / "kb.nq.gz")
    assert materialize(query, [dump], tmp_path / "blocks") == 0
    assert all(block["rows"] > 0 for block in manifest(tmp_path / "blocks")["blocks"])
    expected = run(query, streams, [str(kb)], tmp_path)
    assert expected, "the case should have results"
    assert run(query, streams, [f"materialized:{tmp_path / 'blocks'}"], tmp_path) == expected


# -- a KB with blank nodes, non-canonical literals, two graphs, two dumps ----------------------

KB = """@prefix : <http://example/> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
<http://example/kb> {
  :H1 :owner :john ; :address _:a1 ; :rooms "03"^^xsd:integer ; :label "Maison"@FR, "\\u00C9t\\u00E9\\t\\"x\\""@EN-gb .
  _:a1 :city :paris .
  :H2 :owner :smith ; :address _:a2 ; :rooms 4 .
  _:a2 :city :lyon .
  :H3 :owner :ann .
  :john :likes :john .  :smith :likes :john .
}
<http://example/zones> { :H1 :zone "north" . :H2 :zone "south" . }
"""
# a second dump: a blank node label the first one uses too (another node), and a default-graph
# triple that GRAPH clauses must not see
MORE_KB = """_:a1 <http://example/city> <http://example/rome> <http://example/kb> .
<http://example/H2> <http://example/owner> <http://example/mallory> .
"""
EVENTS = """@prefix : <http://example/> .
@prefix prov: <http://www.w3.org/ns/prov#> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
:e1 prov:generatedAtTime "1"^^xsd:integer .  :e1 { :H1 :pow :P1 . }
:e2 prov:generatedAtTime "2"^^xsd:integer .  :e2 { :H2 :pow :P2 . :H2 :note "n2" . }
:e3 prov:generatedAtTime "3"^^xsd:integer .  :e3 { :H1 :pow :P3 . }
:e4 prov:generatedAtTime "4"^^xsd:integer .  :e4 { :H2 :pow :P4 . :H3 :pow :P5 . }
"""
PROLOGUE = """PREFIX : <http://example/>
SELECT * WITHIN 100 SECONDS
FROM STREAM S1 <http://example/s>
"""
# A: the fast path through a blank node; B: Oxigraph (OPTIONAL), two blocks on one graph,
# a constant literal that matches "03" only in canonical form, a language tag
QUERY = PROLOGUE + """WHERE {
  SEQ (A ; B)
  DEFINE GPM A ON S1 { ?h :pow ?p1 . GRAPH <http://example/kb> { ?h :owner ?o ; :address ?ad . ?ad :city ?c } }
  DEFINE GPM B ON S1 { ?h :pow ?p2 OPTIONAL { ?h :note ?n }
                       GRAPH <http://example/kb> { ?h :rooms 3 } GRAPH <http://example/kb> { ?h :label ?lab } }
}
"""
# C: a blank node in the pattern, a repeated variable, a second graph; D: a block without
# solutions; E: a block without variables
QUERY_2 = PROLOGUE + """WHERE {
  SEQ (C ; (D | E))
  DEFINE GPM C ON S1 { ?h :pow ?p1 . GRAPH <http://example/kb> { ?h :owner [ :likes ?who ] . ?who :likes ?who }
                       GRAPH <http://example/zones> { ?h :zone ?z } }
  DEFINE GPM D ON S1 { ?h :pow ?p2 . GRAPH <http://example/zones> { ?h :zone "east" } }
  DEFINE GPM E ON S1 { ?h2 :pow ?p2 . FILTER (?h2 != ?h) GRAPH <http://example/kb> { :H1 :owner :john } }
}
"""


@pytest.fixture(scope="module")
def features(tmp_path_factory):
    """Files of the hand-made KB case: the TriG KB, dumps, the events, the two queries."""
    folder = tmp_path_factory.mktemp("features")
    (folder / "kb.trig").write_text(KB)
    (folder / "more.nq").write_text(MORE_KB)
    (folder / "events.trig").write_text(EVENTS)
    (folder / "query.rq").write_text(QUERY)
    (folder / "query2.rq").write_text(QUERY_2)
    nquads(folder / "kb.trig", folder / "kb.nq")
    return folder


@pytest.fixture(scope="module")
def materialised(spark, features):
    """QUERY's blocks materialised from both dumps."""
    assert materialize(features / "query.rq", [features / "kb.nq", features / "more.nq"], features / "blocks") == 0
    return features / "blocks"


def test_fast_path_and_oxigraph_fallback_give_the_kb_results(materialised, features, tmp_path):
    streams = {"S1": features / "events.trig"}
    expected = run(features / "query.rq", streams, [str(features / "kb.trig"), str(features / "more.nq")], tmp_path)
    assert [(r["time"], r["bindings"]["c"]["value"], r["bindings"]["lab"]["value"]) for r in expected] \
        == [(3, "http://example/paris", "Maison"), (3, "http://example/paris", 'Été\t"x"')]
    assert run(features / "query.rq", streams, [f"materialized:{materialised}"], tmp_path) == expected

    kb = MaterializedKB(str(materialised))
    evaluator = SpectraEvaluator(kb)
    gpms = compile_query(QUERY).gpms
    assert evaluator.describe(gpms["A"]).startswith("spectra")     # from block_solutions
    assert evaluator.describe(gpms["B"]).startswith("oxigraph")    # from the sub-dataset
    # the two dumps' _:a1 are two nodes: paris and rome are two addresses' cities
    a = next(b for b in graph_blocks(gpms["A"]))
    assert sorted(s["c"].value for s in kb.block_solutions(a.graph, a.patterns)) == \
        ["http://example/lyon", "http://example/paris"]
    assert kb.block_solutions(a.graph, ["?x <http://example/owner> ?y"]) is None


def test_blank_node_pattern_repeated_variable_and_an_empty_block(spark, features, tmp_path):
    assert materialize(features / "query2.rq", [features / "kb.nq"], tmp_path / "blocks") == 0
    written = manifest(tmp_path / "blocks")
    assert [(b["gpms"], b["rows"]) for b in written["blocks"]] == [(["C"], 2), (["C"], 2), (["D"], 0), (["E"], 1)]
    assert written["graphs"] == ["http://example/kb", "http://example/zones"]
    streams = {"S1": features / "events.trig"}
    expected = run(features / "query2.rq", streams, [str(features / "kb.trig")], tmp_path)
    assert {r["bindings"]["h"]["value"] for r in expected} == {"http://example/H1", "http://example/H2"}
    assert run(features / "query2.rq", streams, [f"materialized:{tmp_path / 'blocks'}"], tmp_path) == expected


def test_the_materialised_kb_as_a_dataset(materialised):
    kb = KnowledgeBase.from_specs([f"materialized:{materialised}"])
    assert kb.graph_names() == ["http://example/kb"]
    assert kb.missing_graphs(["http://example/kb", "http://example/nowhere"]) == ["http://example/nowhere"]
    # what the blocks need, and nothing else: not :H3, not the default graph's mallory
    owners = {(row["h"].value, row["o"].value) for row in
              kb.select("SELECT ?h ?o WHERE { GRAPH <http://example/kb> { ?h <http://example/owner> ?o } }")}
    assert owners == {("http://example/H1", "http://example/john"), ("http://example/H2", "http://example/smith")}
    assert len(list(kb.quads("http://example/kb"))) == 9     # A: 2 x 3, B: 1 + 2


# -- errors ---------------------------------------------------------------------------------

def test_a_block_missing_from_the_manifest_stops_the_run(materialised, features, capsys):
    with pytest.raises(SpaseqError, match=r"GPM C: GRAPH <http://example/kb> \{ .* \} is not materialised in "):
        Engine(QUERY_2, kb=MaterializedKB(str(materialised)))
    assert cli.main(["run", str(features / "query2.rq"), "--stream", f"S1={features / 'events.trig'}",
                     "--kb", f"materialized:{materialised}"]) == 2
    assert f"is not materialised in {materialised}" in capsys.readouterr().err


@pytest.mark.parametrize("block, why", [
    ("GRAPH <http://example/kb> { ?h :owner ?o OPTIONAL { ?h :address ?a } }", "OPTIONAL inside the block"),
    ("GRAPH <http://example/kb> { ?h :owner ?o FILTER (?o != :john) }", "FILTER inside the block"),
    ("GRAPH ?g { ?h :owner ?o }", "its graph is a variable"),
    ("GRAPH <http://example/kb> { ?h :owner+ ?o }", "a variable predicate or a property path"),
])
def test_blocks_that_cannot_be_materialised(features, tmp_path, capsys, block, why):
    query = tmp_path / "q.rq"
    query.write_text(PROLOGUE + f"WHERE {{ SEQ (A) DEFINE GPM A ON S1 {{ ?h :pow ?p . {block} }} }}")
    assert materialize(query, [features / "kb.nq"], tmp_path / "blocks") == 2
    assert "line 4, column 17: GPM A: " in capsys.readouterr().err     # where the GPM is
    with pytest.raises(QueryError, match=f"GPM A: .* cannot be materialised: {why}"):
        graph_blocks(compile_query(query.read_text()).gpms["A"])
    assert not (tmp_path / "blocks").exists()        # nothing started, nothing written


def test_bad_inputs(spark, features, tmp_path, capsys):
    bad = tmp_path / "bad.nq"
    bad.write_text("# a comment\n\n<http://example/H1> <http://example/owner> <http://example/john> "
                   "<http://example/kb> .\n<http://example/H1> <http://example/owner> oops .\n")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "file").write_text("x")
    for dumps, out, error in [
            ([bad], tmp_path / "blocks", f"{bad}:4: not an N-Triples/N-Quads statement: <http"),
            ([features / "kb.trig"], tmp_path / "blocks", "kb.trig: give N-Quads or N-Triples"),
            ([tmp_path / "nowhere.nq"], tmp_path / "blocks", "nowhere.nq: no such file"),
            ([features / "kb.nq"], taken, "is a directory that 'spaseq kb materialize' did not write")]:
        assert materialize(features / "query.rq", dumps, out) == 2
        assert error in capsys.readouterr().err
    with pytest.raises(SpaseqError, match="no manifest.json"):
        KnowledgeBase.from_specs([f"materialized:{taken}"])
