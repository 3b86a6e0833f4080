"""``spaseq bench``, its workloads and the rdflib baseline evaluator.

No timing is asserted: these check that the bench runs end to end, that
every evaluator gives the same results on every workload, that the data
generators are deterministic and that every workload query compiles and
matches.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import io
import json
import re
import sys
import time

import pyoxigraph as ox
import pytest

from spaseq_plugin import Engine, Event, compile_query
from spaseq_plugin.bench import bare as bench_bare, runner as bench
from spaseq_plugin.evaluators.oxigraph import OxigraphEvaluator
from spaseq_plugin.evaluators.rdflib import RdflibEvaluator
from spaseq_plugin.bench.workloads import (
    WORKLOADS, card_kb, company_kb, credit_events, peers_stock_events, smarthome_events, stock_events,
    traffic_events, vessel_events, vessel_kb, write_nquads, write_trig,
)

from shared_paths import CASES, DATA


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="spaseq")
    bench.add_bench_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["bench", *argv])


def _spectra_available() -> bool:
    return bench.evaluator_problem("spectra") is None


def _results(query, events, evaluator: str, kb=None) -> collections.Counter:
    engine = Engine(query, kb=kb, evaluator=bench.make_evaluator(evaluator, kb))
    return collections.Counter(bench.canonical_result(r) for r in engine.run(events))


# -- the command end to end ------------------------------------------------------

def test_quick_bench_end_to_end(tmp_path, capsys):
    """A --quick run in fresh processes: table, JSON, results check, exit 0."""
    out = tmp_path / "bench.json"
    status = bench.run_bench(_args("--quick", "-w", "stock-v", "--strategies", "next",
                                   "--evaluators", "oxigraph,rdflib", "--rdflib-seconds", "3",
                                   "--json", str(out), "-q"))
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "parse-only" in printed and "oxigraph" in printed and "rdflib" in printed
    assert "results check: 1/1" in printed
    data = json.loads(out.read_text())
    rows = {r["evaluator"]: r for r in data["results"]}
    assert set(rows) == {"oxigraph", "rdflib"}
    assert rows["oxigraph"]["events"] == 150 and rows["oxigraph"]["matches"] > 0
    assert rows["oxigraph"]["rss_mb"] is not None            # measured in a fresh process
    assert rows["rdflib"]["events"] <= 100
    assert all(c["equal"] for c in data["checks"])
    assert data["parse"][0]["events"] == 150


def test_read_bench_compares_the_reader_with_the_bare_parse(tmp_path, capsys):
    trig, nq = tmp_path / "s.trig", tmp_path / "s.nq"
    write_trig(stock_events(300), str(trig))
    write_nquads(stock_events(300), str(nq))
    out = tmp_path / "read.json"
    assert bench.run_bench(_args("--read", str(trig), str(nq), "--json", str(out))) == 0
    printed = capsys.readouterr().out
    assert "reader / bare" in printed and str(trig) in printed
    rows = json.loads(out.read_text())
    assert [(r["events"], r["rejected"]) for r in rows] == [(300, 0), (300, 0)]
    assert all(r["quads"] > 300 and 0 < r["ratio"] for r in rows)
    # the grouping floor builds the same events, with fewer checks than the reader
    assert all(bench_bare.group_files([r["files"][0]])[0] == 300 and r["floor_ratio"] > 0 for r in rows)
    assert bench.run_bench(_args("--read", str(tmp_path / "missing.trig"))) == 2
    bad = tmp_path / "bad.trig"
    bad.write_text('<http://e/g> { <http://e/a> <http://e/p> "unterminated . }\n')
    assert bench.run_bench(_args("--read", str(bad))) == 2
    assert "pyoxigraph cannot parse it" in capsys.readouterr().err
    huge = tmp_path / "huge.nq"         # a literal over pyoxigraph's 16 MiB buffer
    huge.write_text('<http://e/a> <http://e/p> "' + "x" * (17 << 20) + '" <http://e/g> .\n')
    assert bench.run_bench(_args("--read", str(huge))) == 2
    assert "too long for its buffer" in capsys.readouterr().err


def test_latency_bench_measures_every_event(capsys):
    assert bench.run_bench(_args("--latency", "--events", "40", "--latency-rate", "200")) == 0
    printed = capsys.readouterr().out
    assert re.search(r"40 of 40 events at 200/s: p50 [0-9.]+ ms, p99 [0-9.]+ ms", printed), printed


def test_quick_bench_inline_every_strategy_without_matplotlib(monkeypatch, tmp_path, capsys):
    """--inline, skip-till-any clamped to a small window, --plot without matplotlib."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)       # import matplotlib -> ImportError
    status = bench.run_bench(_args("--quick", "--inline", "-w", "vessels", "--events", "60",
                                   "--strategies", "strict,next,any", "--evaluators", "oxigraph,rdflib",
                                   "--rdflib-seconds", "3", "--plot", str(tmp_path / "charts"), "-q"))
    captured = capsys.readouterr()
    assert status == 0, captured.out
    assert "--plot needs matplotlib" in captured.err
    assert " SC " in captured.out and " STN " in captured.out and " STA " in captured.out
    assert "results check: 3/3" in captured.out


def test_x_parse_of_spectra_pairs_each_run_with_a_parse_only_run(tmp_path, capsys):
    """Each run of the spectra evaluator comes right after a parse-only run, made in
    the same loop with an engine that does nothing; x parse is the median of the
    pairs' ratios (the other evaluators' is against the workload's parse-only row)."""
    out = tmp_path / "bench.json"
    status = bench.run_bench(_args("--inline", "-w", "stock-v", "--events", "60", "--strategies", "next",
                                   "--windows", "300", "--evaluators", "spectra,oxigraph", "--repeat", "3",
                                   "--json", str(out), "-q"))
    assert status == 0, capsys.readouterr().out
    data = json.loads(out.read_text())
    spectra, = [r for r in data["results"] if r["evaluator"] == "spectra"]
    oxigraph, = [r for r in data["results"] if r["evaluator"] == "oxigraph"]
    assert len(spectra["x_parse_pairs"]) == 3
    assert spectra["x_parse"] == sorted(spectra["x_parse_pairs"])[1]
    assert "x_parse_pairs" not in oxigraph and oxigraph["x_parse"] == data["parse"][0]["eps"] / oxigraph["eps"]
    parse, = data["parse"]
    assert parse["events"] == 60 and "matches" not in parse and "p50_us" not in parse


def test_bench_fails_loudly_when_evaluators_disagree(monkeypatch, capsys):
    class Forgetful(OxigraphEvaluator):
        """Sees nothing in events at odd times."""
        def evaluate(self, gpm, event, mappings):
            if event.time % 2:
                return [[] for _ in mappings]
            return super().evaluate(gpm, event, mappings)

    real = bench.make_evaluator
    monkeypatch.setattr(bench, "make_evaluator",
                        lambda name, kb: Forgetful(kb) if name == "rdflib" else real(name, kb))
    status = bench.run_bench(_args("--quick", "--inline", "-w", "stock-v", "--strategies", "next",
                                   "--evaluators", "oxigraph,rdflib", "--no-parse", "-q"))
    out = capsys.readouterr().out
    assert status == 1
    assert "RESULTS DIFFER" in out and "only oxigraph" in out and "MISMATCH" in out


def test_bad_arguments_exit_2(capsys):
    assert bench.run_bench(_args("-w", "nope")) == 2
    assert bench.run_bench(_args("--strategies", "sideways")) == 2
    assert bench.run_bench(_args("--windows", "5parsecs")) == 2
    assert "unknown" in capsys.readouterr().err
    for value in ("-5", "0", "1e3,-1", "inf"):
        with pytest.raises(bench.BenchError, match=f"^--kb-sizes {re.escape(value)}: "):
            bench._plan(_args("--kb-sizes", value))


def test_a_json_file_that_cannot_be_written_is_refused_before_the_bench_runs(tmp_path, capsys):
    started = time.perf_counter()
    assert bench.run_bench(_args("--quick", "--inline", "-w", "stock-v", "--events", "30", "--strategies", "next",
                                 "--evaluators", "spectra", "--no-parse", "-q",
                                 "--json", str(tmp_path / "no" / "out.json"))) == 2
    assert capsys.readouterr().err == (f"spaseq bench: --json {tmp_path / 'no' / 'out.json'}: "
                                       "No such file or directory\n")
    assert time.perf_counter() - started < 5
    kept = tmp_path / "kept.json"
    kept.write_text("before")
    assert bench.run_bench(_args("--read", str(tmp_path / "missing.trig"), "--json", str(kept))) == 2
    assert kept.read_text() == "before"             # checked, not emptied
    assert bench.run_bench(_args("--read", str(tmp_path / "missing.trig"), "--json", str(tmp_path / "new"))) == 2
    assert not (tmp_path / "new").exists()          # checked, not made
    # (--events 0 ran the default 5,000 events, --timeout -1 failed every configuration)
    for flag, value in [("--events", "0"), ("--timeout", "-1"), ("--timeout", "nan"), ("--repeat", "0"),
                        ("--latency-rate", "inf"), ("--rdflib-seconds", "0")]:
        with pytest.raises(SystemExit) as stop:
            _args(flag, value)
        assert stop.value.code == 2
        assert f"argument {flag}" in capsys.readouterr().err


def test_option_parsing():
    assert bench._parse_windows("60,5m,1h,0.5s") == [60, 300, 3600, 0.5]
    assert bench._parse_strategies("strict,next") == [",", ";"]
    assert bench._parse_strategies(";:") == [";", ":"]
    assert bench._parse_strategies(",") == [","]
    assert bench._parse_strategies("stn, sta") == [";", ":"]


def test_missing_spectra_is_skipped_with_a_note(monkeypatch):
    real_import = importlib.import_module

    def fake_import(name, *args):
        if name == "spaseq_plugin.evaluators.spectra":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args)

    monkeypatch.setattr(bench.importlib, "import_module", fake_import)
    assert "does not exist yet" in bench.evaluator_problem("spectra")
    plan = bench._plan(_args("--quick", "--evaluators", "spectra,oxigraph"))
    assert plan.evaluators == ["oxigraph"]
    assert any("skipping the spectra evaluator" in n for n in plan.notes)


def test_histogram_quantiles():
    h = bench._Histogram()
    for ns in [1_000] * 98 + [1_000_000] * 2:
        h.add(ns)
    assert h.quantile(0.5) == pytest.approx(1.0, rel=0.03)           # microseconds
    assert h.quantile(0.99) == pytest.approx(1000.0, rel=0.03)


# -- every evaluator gives the same results on every workload ------------------

# enough events for each workload to have matches
_SCALE = {"smartgrid": 1500, "traffic": 400}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_evaluators_agree_on_workload(name):
    w = WORKLOADS[name]
    kb = w.kb(2_000)
    events = list(w.events(_SCALE.get(name, 300)))
    for strategy in (",", ";"):
        query = compile_query(w.query(strategy, w.windows[0]))
        oxigraph = _results(query, events, "oxigraph", kb)
        if _spectra_available():
            assert _results(query, events, "spectra", kb) == oxigraph, f"{name} {strategy}: spectra"
        # rdflib is slow: compare on the last events, where matches are
        tail = events[-(15 if name == "credit" else 40):]
        assert _results(query, tail, "rdflib", kb) == _results(query, tail, "oxigraph", kb), \
            f"{name} {strategy}: rdflib"


# -- the rdflib evaluator is OxigraphEvaluator's twin -----------------------------

_ACCEPTANCE = sorted(p for p in CASES.iterdir() if (p / "case.json").exists()) if CASES.is_dir() else []


@pytest.mark.skipif(not _ACCEPTANCE, reason="../shared/acceptance is absent")
@pytest.mark.parametrize("case", _ACCEPTANCE, ids=lambda p: p.name)
def test_rdflib_evaluator_on_acceptance_cases(case):
    from spaseq_plugin import KnowledgeBase, QueryError
    from spaseq_plugin.streams.files import merge_streams, open_stream
    spec = json.loads((case / "case.json").read_text())
    text = (case / spec["query"]).read_text()
    if "expect_error" in spec:
        with pytest.raises(QueryError) as info:
            compile_query(text)
        assert all(part.lower() in str(info.value).lower() for part in spec["expect_error"]["stderr_contains"])
        return
    compiled = compile_query(text)
    out = {}
    for name in ("oxigraph", "rdflib"):
        kb = KnowledgeBase.from_specs([str(case / spec["kb"])]) if spec.get("kb") else None
        items = merge_streams([open_stream(str(case / path), compiled.stream_iris[alias])
                               for alias, path in spec["streams"].items()])
        out[name] = _results(compiled, items, name, kb)
    assert out["rdflib"] == out["oxigraph"]
    assert sum(out["oxigraph"].values()) == len(spec["expected"]) > 0


def test_rdflib_evaluator_blank_nodes_graph_var_and_literal_forms():
    """Blank nodes through VALUES, GRAPH ?g over the KB's named graphs only,
    OPTIONAL, and non-canonical literals come out as Oxigraph gives them."""
    from spaseq_plugin.stores.oxigraph import OxigraphKB
    ex = "http://example/"
    xsd = "http://www.w3.org/2001/XMLSchema#"
    q = compile_query(f"""PREFIX : <{ex}>
SELECT * WITHIN 10 SECONDS FROM STREAM S <http://s> WHERE {{ SEQ (A ; B)
DEFINE GPM A ON S {{ ?x :p ?v . OPTIONAL {{ ?x :q ?w }} GRAPH ?g {{ ?x :owner ?o }} }}
DEFINE GPM B ON S {{ ?y :p ?v2 ; :r ?b . FILTER (?v2 > ?v) }} }}""")
    kb = OxigraphKB()
    kb.store.add(ox.Quad(ox.NamedNode(ex + "a"), ox.NamedNode(ex + "owner"), ox.Literal("joe"), ox.NamedNode("http://kb1")))
    kb.store.add(ox.Quad(ox.NamedNode(ex + "a"), ox.NamedNode(ex + "owner"), ox.Literal("bob"), ox.DefaultGraph()))
    n = lambda s: ox.NamedNode(ex + s)                                           # noqa: E731
    integer = lambda v: ox.Literal(v, datatype=ox.NamedNode(xsd + "integer"))    # noqa: E731
    blank = ox.BlankNode("b1")
    events = [
        Event("http://s", 1, (ox.Triple(n("a"), n("p"), integer("1")), ox.Triple(n("a"), n("owner"), ox.Literal("evt")))),
        Event("http://s", 2, (ox.Triple(blank, n("p"), integer("02")), ox.Triple(blank, n("r"), ox.BlankNode("c")))),
        Event("http://s", 3, (ox.Triple(n("z"), n("p"), ox.Literal("007.50", datatype=ox.NamedNode(xsd + "decimal"))),
                              ox.Triple(n("z"), n("r"), ox.Literal("x", language="en")))),
    ]
    a, b = q.gpms["A"], q.gpms["B"]
    ox_eval, rd_eval = OxigraphEvaluator(kb), RdflibEvaluator(kb)
    first = ox_eval.evaluate(a, events[0], [{}])
    assert first == rd_eval.evaluate(a, events[0], [{}])
    assert [s["o"].value for s in first[0]] == ["joe"]                         # not the event's, not the default graph's
    mappings = [{"v": s["v"]} for s in first[0]] + [{}, {"y": blank}]
    for event in events[1:]:
        assert ox_eval.evaluate(b, event, mappings) == rd_eval.evaluate(b, event, mappings)
    assert rd_eval.evaluate(b, events[1], mappings)[0][0]["y"] == blank
    assert _results(q, events, "rdflib", kb) == _results(q, events, "oxigraph", kb)


# -- workloads ------------------------------------------------------------------

def _text(events, trig=True) -> str:
    buffer = io.StringIO()
    (write_trig if trig else write_nquads)(events, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("make", [
    lambda: stock_events(300, companies=7, sectors=2, seed=4),
    lambda: credit_events(300),
    lambda: vessel_events(300),
    lambda: smarthome_events(300, real=False),
    lambda: traffic_events(300, real=False),
], ids=["stock", "credit", "vessels", "smarthome", "traffic"])
def test_generators_are_deterministic(make):
    first, second = _text(make()), _text(make(), trig=False)
    assert first.count("generatedAtTime") == 300
    assert _text(make()) == first
    assert _text(make(), trig=False) == second


def test_generators_differ_by_seed_and_have_the_paper_shape():
    assert _text(stock_events(50, seed=1)) != _text(stock_events(50, seed=2))
    events = list(stock_events(100))
    assert all(len(e.triples) == 6 for e in events)
    assert [e.time for e in events] == list(range(100))
    assert all(len(e.triples) == 2 for e in credit_events(50))


@pytest.mark.parametrize("make, graph", [
    (lambda size: company_kb(size), "http://stockmarket.org/db"),
    (lambda size: card_kb(size), "http://creditcard.org/db"),
    (lambda size: vessel_kb(size), "http://harbour.org/db"),
])
def test_kb_generators_have_the_asked_size(make, graph):
    kb = make(10_000)
    assert len(kb.store) == 10_000
    assert kb.graph_names() == [graph]
    assert sorted(map(str, make(10_000).store)) == sorted(map(str, kb.store))


def test_written_stream_files_read_back(tmp_path):
    from spaseq_plugin.bench.workloads import open_source
    w = WORKLOADS["smartgrid"]
    info = w.prepare(200, tmp_path, kb_size=500)
    read = [e for e in open_source(info["source"]) if isinstance(e, Event)]
    made = list(w.events(200))

    def key(events):        # simultaneous events of different streams may come in any order
        return sorted((e.time, e.stream, sorted(map(str, e.triples))) for e in events)
    assert key(read) == key(made)
    assert [e.time for e in read] == sorted(e.time for e in read)
    assert info["kb_triples"] == 500


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_workload_query_compiles(name):
    w = WORKLOADS[name]
    for strategy in (",", ";", ":"):
        for window in w.windows:
            compiled = compile_query(w.query(strategy, window))
            assert not [m for m in compiled.warnings if "unbound" in m or "binds it" in m], compiled.warnings
            assert compiled.window == window


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_workload_matches_at_default_scale(name):
    """The default strategy and middle window match on the default 5000 events
    (keys-each cannot: no key comes back; its state stays the window's instead)."""
    w = WORKLOADS[name]
    engine = Engine(w.query(), kb=w.kb())
    for _ in engine.run(w.events(5000)):
        pass
    if name == "keys-each":
        assert engine.stats.matches == 0 and 0 < engine.stats.peak_keys <= 301     # WITHIN 300 s
    else:
        assert engine.stats.matches > 0


def test_rss_scaling_runs_counted_in_progress(capsys):
    """The progress counter counts the 1x and 10x runs of --rss-scaling too."""
    status = bench.run_bench(_args("--quick", "--inline", "-w", "stock-v", "--events", "30",
                                   "--strategies", "next", "--evaluators", "oxigraph", "--rss-scaling"))
    captured = capsys.readouterr()
    assert status == 0, captured.out
    steps = [tuple(map(int, m)) for m in re.findall(r"\[(\d+)/(\d+)\] \S+ .*\.\.\.$", captured.err, re.M)]
    assert steps == [(k, 7) for k in range(1, 8)]      # parse, bare parse, oxigraph, then 2 x (parse, oxigraph)
    assert "RSS scaling: stock-v" in captured.out


# -- the peers' stream (peers-v) and the writer alone ------------------------------

PEERS = DATA / "peers-stock"


def test_peers_v_runs_strict_and_any_with_a_bare_parse_row(tmp_path, capsys):
    """peers-v's own strategies (strict per company, skip-till-any), results written as JSON
    lines, and a bare-parse row the engine rows are a fraction of."""
    out = tmp_path / "bench.json"
    status = bench.run_bench(_args("--inline", "-w", "peers-v", "--events", "400", "--evaluators",
                                   "spectra,oxigraph", "--json", str(out), "-q"))
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "bare parse" in printed and "x bare" in printed
    assert " SC " in printed and " STA " in printed and " STN " not in printed
    data = json.loads(out.read_text())
    assert data["bare_parse"][0]["events"] == 400 and data["bare_parse"][0]["triples"] == 1200
    rows = [r for r in data["results"] if r["evaluator"] == "spectra"]
    assert {r["strategy"] for r in rows} == {",", ":"}
    assert all(0 < r["x_bare"] < 1 for r in rows)           # no engine reads faster than the bare parse
    assert all(c["equal"] for c in data["checks"])


@pytest.mark.skipif(not (PEERS / "stock_trig.py").exists(), reason="needs ../shared/data/peers-stock")
def test_peers_stream_and_queries_are_the_peers_own(tmp_path):
    """The generator makes the events of the peers' stock_trig.py, and the workload's queries
    give the counts their README gives for 10,000 events."""
    import subprocess
    from spaseq_plugin.streams.files import read_stream_file
    path = tmp_path / "peers.trig"
    subprocess.run([sys.executable, str(PEERS / "stock_trig.py"), "500", str(path)], check=True)

    def facts(e):
        return e.time, e.is_datetime, str(e.name), sorted(map(str, e.triples))
    assert [facts(e) for e in read_stream_file(str(path), "http://example.org/stock")] == \
        [facts(e) for e in peers_stock_events(500)]
    events = list(peers_stock_events(10_000))
    w = WORKLOADS["peers-v"]
    for strategy, expected, name in ((",", 3_157, "v-shape-strict-per-company.rq"),
                                     (":", 56_254, "v-shape-skip-till-any.rq")):
        assert sum(1 for _ in Engine(w.query(strategy, 600)).run(events)) == expected
        theirs = Engine((PEERS / name).read_text())
        assert sum(1 for _ in theirs.run(events[:2_000])) == \
            sum(1 for _ in Engine(w.query(strategy, 600)).run(events[:2_000]))


def test_writer_bench_writes_what_json_dumps_writes(capsys):
    from spaseq_plugin.cli.commands import main
    assert main(["bench", "--writer", "--events", "3000"]) == 0
    printed = capsys.readouterr().out
    assert re.match(r"jsonl writer: [\d,]+ results/s .*json.dumps per result: [\d,]+ results/s", printed)
    assert "OUTPUT DIFFERS" not in printed
