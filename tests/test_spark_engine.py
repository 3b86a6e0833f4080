"""``spaseq run --engine spark``: the same results as the streaming engine.

The shared acceptance cases run through the command line on the shared
local SparkSession (and one through the acceptance runner as a separate
process, as a user would); random scenarios (the differential tests'
generator) are written to stream files and evaluated by both engines with
cuts forced everywhere (``min_piece_windows=0``: correctness must not
depend on how wide a piece is), so Kleene+, negation, conjunction and
strict contiguity cross piece boundaries all the time.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib.machinery
import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
import tempfile

import pyoxigraph as ox
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spaseq_plugin import Engine, compile_query
from spaseq_plugin.cli.commands import main
from spaseq_plugin.errors import StateLimitError
from spaseq_plugin.events import PROV_GENERATED_AT, Event, time_literal
from spaseq_plugin.reference import reference_evaluate
from spaseq_plugin.streams.files import read_stream_file
from spaseq_plugin.spark.engine import SparkRun, archived_sources, key_piece, plan_cut

from shared_paths import ACCEPTANCE, CASES
from helpers import STREAM_IRIS as STREAMS, examples, result_key, scenarios

CASE_DIRS = sorted(p for p in CASES.iterdir() if (p / "case.json").exists()) if CASES.is_dir() else []
SPARK_EXAMPLES = int(os.environ.get("SPASEQ_SPARK_EXAMPLES", examples(0.125)))


@pytest.fixture(autouse=True)
def _shared_master(spark, monkeypatch):
    """The CLI's default master resolves to the shared session's."""
    monkeypatch.setenv("SPARK_MASTER", spark.sparkContext.master)


def write_stream_files(events: list[Event], folder: str) -> dict[str, str]:
    """One N-Quads file per stream."""
    by_stream: dict[str, list[Event]] = {}
    for event in events:
        by_stream.setdefault(event.stream, []).append(event)
    return {stream: write_events(group, os.path.join(folder, f"s{n}.nq"))
            for n, (stream, group) in enumerate(sorted(by_stream.items()))}


def write_events(events: list[Event], path) -> str:
    """An N-Quads stream file of ``events``; the timestamps in the default graph."""
    quads = []
    for event in events:
        quads.append(ox.Quad(event.name, PROV_GENERATED_AT, time_literal(event.time, event.is_datetime)))
        quads += [ox.Quad(t.subject, t.predicate, t.object, event.name) for t in event.triples]
    with open(path, "wb") as f:
        f.write(ox.serialize(quads, format=ox.RdfFormat.N_QUADS))
    return str(path)


def spark_results(compiled, query: str, events: list[Event], *, start=None, pieces=4) -> list:
    with tempfile.TemporaryDirectory() as folder:
        paths = write_stream_files(events, folder)
        sources = archived_sources(compiled, sorted(paths.items()), [])
        run = SparkRun(compiled, query, sources, [], pieces=pieces, start=start, min_piece_windows=0)
        return list(run.results())


# -- random scenarios ---------------------------------------------------------------------

@settings(max_examples=SPARK_EXAMPLES)
@given(scenarios(), st.sampled_from([2, 3, 5]))
def test_spark_equals_streaming_engine(scenario, pieces):
    compiled = compile_query(scenario.query)
    events = [e for e in scenario.to_events() if e.stream in compiled.streams]
    start = scenario.start_time
    expected = collections.Counter(result_key(r) for r in Engine(compiled, start=start).run(events))
    assert expected == collections.Counter(
        result_key(r) for r in reference_evaluate(scenario.query, events, start=start))
    got = collections.Counter(result_key(r) for r in
                              spark_results(compiled, scenario.query, events, start=start, pieces=pieces))
    assert got == expected, (f"spark differs\n  missing: {sorted((expected - got).elements())}"
                             f"\n  extra: {sorted((got - expected).elements())}")


# -- boundaries, chosen by hand -----------------------------------------------------------

EX = "http://example/"


def kind_events(spec: str, stream: int = 0, tag: str = "") -> list[Event]:
    """``"a@1 b@2 ..."``: events of one stream, each ``:eN :kind "k"`` (``:<tag>eN`` when
    tagged, ``:s<stream>eN`` on another stream than the first) in graph ``:gN`` alike."""
    tag = tag or (f"s{stream}" if stream else "")
    out = []
    for n, item in enumerate(spec.split(), 1):
        kind, time = item.split("@")
        s = ox.NamedNode(f"{EX}{tag}e{n}")
        out.append(Event(STREAMS[stream], int(time), (ox.Triple(s, ox.NamedNode(EX + "kind"), ox.Literal(kind)),),
                         ox.NamedNode(f"{EX}{tag}g{n}")))
    return out


def query(seq: str, within: str = "WITHIN 3 SECONDS", head: str = "SELECT *", on: dict | None = None) -> str:
    """GPM K binds ``?k`` to events of kind "k", on stream S1 unless ``on`` says otherwise."""
    on = on or {}
    gpms = "\n".join(f'  DEFINE GPM {k.upper()} ON {on.get(k.upper(), "S1")} {{ ?{k} <{EX}kind> "{k}" }}'
                      for k in "abcd" if k.upper() in seq)
    streams = "\n".join(f"FROM STREAM S{n + 1} <{STREAMS[n]}>" for n in range(1 + bool(on)))
    return f"{head}\n{within}\n{streams}\nWHERE {{\n  SEQ ({seq})\n{gpms}\n}}"


@pytest.mark.parametrize("seq", ["A , B", "A ; B+ ; C", "A : B+ , C", "A ; B! ; C", "A ; C!", "A , (B & C)",
                                 "A ; B? ; C", "(A | B) , C"])
def test_matches_across_every_boundary(seq):
    events = kind_events("a@1 b@2 c@3 a@4 b@5 b@6 c@7 a@8 c@9 b@10 a@11 b@12 c@13 d@14 a@15 b@16")
    on = {}
    if "&" in seq:        # a conjunction needs simultaneous events: C comes on a second stream
        on = {"C": "S2"}
        events = sorted(events + kind_events("c@2 c@5 c@9 c@12 c@15", stream=1), key=lambda e: e.time)
    text = query(seq, on=on)
    compiled = compile_query(text)
    expected = collections.Counter(result_key(r) for r in Engine(compiled).run(events))
    for pieces in (3, 16):
        got = collections.Counter(result_key(r) for r in spark_results(compiled, text, events, pieces=pieces))
        assert got == expected, (seq, pieces)
    assert expected == collections.Counter(result_key(r) for r in reference_evaluate(text, events))
    assert expected


def test_distinct_and_construct_numbering_are_global():
    events = kind_events("a@1 b@2 a@3 b@4 a@5 b@6 a@7 b@8")
    distinct = query("A ; B", head="SELECT DISTINCT ?b")
    compiled = compile_query(distinct)
    got = [result_key(r) for r in spark_results(compiled, distinct, events, pieces=4)]
    assert got == [result_key(r) for r in Engine(compiled).run(events)]
    construct = query("A ; B", head=f"CONSTRUCT {{ ?a <{EX}then> ?b }}")
    compiled = compile_query(construct)
    graphs = [str(r.graph) for r in spark_results(compiled, construct, events, pieces=4)]
    assert graphs == [f"<urn:spaseq:match:{n}>" for n in range(1, 5)]


@pytest.mark.parametrize("head", ["SELECT *", "SELECT DISTINCT ?b", f"CONSTRUCT {{ ?a <{EX}then> ?b }}"])
def test_many_results_come_sorted_by_spark_in_the_order_the_driver_gives_few(monkeypatch, head):
    """Past COLLECTED_RESULTS the driver does not collect the results to sort them: Spark
    sorts them and the driver reads them a partition at a time, in the same order."""
    from pyspark.rdd import RDD
    from spaseq_plugin.spark import engine as spark_engine
    read_in_parts = []
    to_local_iterator = RDD.toLocalIterator
    monkeypatch.setattr(RDD, "toLocalIterator", lambda rdd, *a, **k: read_in_parts.append(rdd) or
                        to_local_iterator(rdd, *a, **k))
    events = kind_events("a@1 b@2 a@3 b@4 b@5 a@6 b@7 a@8 b@9 b@10")
    text = query("A : B", head=head, within="WITHIN 5 SECONDS")
    compiled = compile_query(text)
    collected = [(r.time, result_key(r), str(r.graph)) for r in spark_results(compiled, text, events, pieces=3)]
    assert not read_in_parts
    monkeypatch.setattr(spark_engine, "COLLECTED_RESULTS", 0)
    streamed = [(r.time, result_key(r), str(r.graph)) for r in spark_results(compiled, text, events, pieces=3)]
    assert len(read_in_parts) == 1
    assert streamed == collected and len(collected) > 5
    assert [key for _, key, _ in collected] == [result_key(r) for r in Engine(compiled).run(events)]


def test_distinct_keeps_at_most_its_limit_of_rows_on_spark_too():
    from spaseq_plugin import LimitError, StateLimits
    events = kind_events("a@1 b@2 a@3 b@4 a@5 b@6 a@7 b@8")
    distinct = query("A : B", head="SELECT DISTINCT ?b", within="WITHIN 10 SECONDS")
    compiled = compile_query(distinct)
    with tempfile.TemporaryDirectory() as folder:
        paths = write_stream_files(events, folder)
        sources = archived_sources(compiled, sorted(paths.items()), [])
        for most, stops in ((4, False), (3, True)):
            run = SparkRun(compiled, distinct, sources, [], pieces=4, min_piece_windows=0,
                           limits=StateLimits(max_distinct=most))
            if stops:
                with pytest.raises(LimitError, match="DISTINCT has output 3 rows"):
                    list(run.results())
            else:
                assert len(list(run.results())) == 4


def test_cut_by_time_places_overlap_and_ownership():
    compiled = compile_query(query("A ; B", within="WITHIN 2 SECONDS"))
    cut = plan_cut(compiled, list(range(0, 100)), 0, 99, 4, None)
    assert cut.mode == "time" and cut.bounds == (25, 50, 75) and cut.window == 2
    record = type("R", (), {"time": 51})
    assert cut.targets(record, set) == [1, 2]           # own piece 2, and piece 1's overlap [50, 52]
    record.time = 53
    assert cut.targets(record, set) == [2]


def test_tumbling_cut_with_decimal_times():
    from decimal import Decimal
    compiled = compile_query(query("A ; B", within="WITHIN 500 MILLISECONDS TUMBLING"))
    times = [Decimal(k) / 4 for k in range(1, 41)]                # 0.25 .. 10
    cut = plan_cut(compiled, times, times[0], times[-1], 4, None)
    assert cut.mode == "time" and cut.bounds == (Decimal("2.75"), Decimal("5.25"), Decimal("7.75"))


PARTITIONED = """PREFIX : <http://example/>
SELECT ?l ?a ?b
PARTITION BY (?l)
FROM STREAM S1 <http://example.org/s1>
WHERE { SEQ (A , B)
  DEFINE GPM A ON S1 { ?a :kind "a" ; :loc ?l }
  DEFINE GPM B ON S1 { ?b :kind "b" ; :loc ?l } }"""


def test_cut_by_key_without_window_and_one_piece_otherwise():
    assert plan_cut(compile_query(PARTITIONED), [], 0, 10, 4, None).mode == "key"
    assert plan_cut(compile_query(query("A ; B", within="")), [], 0, 10, 4, None).mode == "single"
    key = (ox.NamedNode(EX + "x"),)
    assert key_piece(key, 7) == key_piece((ox.NamedNode(EX + "x"),), 7)     # no per-process hash seed


def test_partition_by_key_equals_streaming(tmp_path):
    text = PARTITIONED
    events = []
    for n in range(1, 41):
        s = ox.NamedNode(f"{EX}e{n}")
        triples = (ox.Triple(s, ox.NamedNode(EX + "kind"), ox.Literal("ab"[n % 3 % 2])),
                   ox.Triple(s, ox.NamedNode(EX + "loc"), ox.NamedNode(f"{EX}L{n % 4}")))
        events.append(Event(STREAMS[0], n, triples, ox.NamedNode(f"{EX}g{n}")))
    compiled = compile_query(text)
    expected = collections.Counter(result_key(r) for r in Engine(compiled).run(events))
    assert expected
    got = collections.Counter(result_key(r) for r in spark_results(compiled, text, events, pieces=3))
    assert got == expected


# -- the command line -------------------------------------------------------------------

def _load_runner():
    loader = importlib.machinery.SourceFileLoader("acceptance_run", str(ACCEPTANCE / "run"))
    spec = importlib.util.spec_from_loader("acceptance_run", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.skipif(not CASE_DIRS, reason="../shared/acceptance is absent")
@pytest.mark.parametrize("case", CASE_DIRS, ids=lambda p: p.name)
def test_acceptance_case_on_spark(case, capsys, monkeypatch):
    """The acceptance runner's own comparison, on ``spaseq run ... --engine spark`` run in-process."""
    runner = _load_runner()
    spec = json.loads((case / "case.json").read_text())
    argv = ["run", spec["query"]] + [a for alias, f in spec["streams"].items() for a in ("--stream", f"{alias}={f}")]
    argv += (["--kb", spec["kb"]] if spec.get("kb") else []) + spec.get("args", [])
    argv += ["--engine", "spark", "--spark-pieces", "3", "--format", "jsonl"]
    monkeypatch.chdir(case)
    status = main(argv)
    out, err = capsys.readouterr()
    if "expect_error" in spec:
        assert status == spec["expect_error"]["exit"]
        assert all(s.lower() in err.lower() for s in spec["expect_error"].get("stderr_contains", []))
        return
    assert status == 0, err
    got = collections.Counter(runner.row_key(json.loads(line)["time"], json.loads(line)["bindings"],
                                             runner.output_term) for line in out.splitlines() if line.strip())
    want = collections.Counter(runner.row_key(r["time"], r["bindings"], runner.expected_term)
                               for r in spec["expected"])
    assert got == want


@pytest.mark.skipif(not CASE_DIRS, reason="../shared/acceptance is absent")
def test_acceptance_runner_with_engine_spark():
    """As a user runs it: the runner starts ``spaseq run --engine spark`` (its own Spark) per case."""
    case = next(p for p in CASE_DIRS if p.name == "paper-ex9-kleene")
    proc = subprocess.run(
        [sys.executable, str(ACCEPTANCE / "run"), "--cmd", f"{sys.executable} -m spaseq_plugin",
         "--extra", "--engine spark --spark-master local[1]", str(case)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 0 failed" in proc.stdout


def test_live_sources_are_refused(tmp_path, capsys):
    query_file = tmp_path / "q.rq"
    query_file.write_text(query("A ; B"))
    assert main(["run", str(query_file), "--stream", "S1=tcp://localhost:9", "--engine", "spark"]) == 2
    assert "archived stream files" in capsys.readouterr().err
    assert main(["run", str(query_file), "--stream", "S1=x.nq", "--rate", "1", "--engine", "spark"]) == 2


def test_rejects_are_counted_once(tmp_path, capsys):
    """A bad event inside an overlap is read by two pieces: reported once."""
    events = kind_events("a@1 b@2 a@3 b@4 a@5 b@6 a@7 b@8")
    paths = write_stream_files(events, str(tmp_path))
    with open(paths[STREAMS[0]], "a") as f:
        f.write(f'<{EX}bad> <{EX}kind> "x" <{EX}gbad> .\n')       # a graph without a timestamp
        f.write(f'<{EX}g4> <{PROV_GENERATED_AT.value}> "9"^^<http://www.w3.org/2001/XMLSchema#integer> .\n')
    query_file = tmp_path / "q.rq"
    query_file.write_text(query("A ; B"))
    status = main(["run", str(query_file), "--stream", f"S1={paths[STREAMS[0]]}", "--engine", "spark",
                   "--spark-pieces", "4"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert len(out.splitlines()) == 4
    assert "2 rejected" in err and err.count("rejected event:") == 2


def test_dead_letters_are_the_stream_engines(tmp_path, capsys, monkeypatch):
    """Spark wrote each rejection with reason 'invalid' and without its graph or
    text: a dead-letter file nobody could fix and feed again; and its positions
    named the file by its absolute path where the user gave a relative one."""
    events = kind_events("a@1 b@2 a@3 b@4")
    paths = write_stream_files(events, str(tmp_path))
    with open(paths[STREAMS[0]], "a") as f:
        f.write(f'<{EX}bad> <{EX}kind> "x" <{EX}gbad> .\n')       # a graph without a timestamp
        f.write(f'<{EX}g9> <{PROV_GENERATED_AT.value}> "nine" .\n')
        f.write(f'<{EX}g9> <{EX}kind> "a" <{EX}g9> .\n')
        f.write(f'<{EX}g10> <{EX}kind> "a <{EX}g10> .\n')            # a syntax error
    query_file = tmp_path / "q.rq"
    query_file.write_text(query("A ; B"))
    monkeypatch.chdir(tmp_path)
    given = os.path.basename(paths[STREAMS[0]])
    letters = {}
    for engine in ("stream", "spark"):
        dead = tmp_path / f"dead-{engine}.jsonl"
        assert main(["run", str(query_file), "--stream", f"S1={given}", "--engine", engine,
                     "--dead-letter", str(dead)]) == 0, capsys.readouterr().err
        letters[engine] = [json.loads(line) for line in dead.read_text().splitlines()]
    assert {letter["position"].rsplit(":", 1)[0] for letter in letters["stream"]} == {given}
    assert sorted(letter["reason"] for letter in letters["stream"]) == ["bad-timestamp", "no-timestamp", "syntax"]
    assert letters["spark"] == letters["stream"]


def run_both_engines(tmp_path, capsys, monkeypatch, text: str, *streams: str) -> dict[str, tuple]:
    """``spaseq run`` of ``text`` in ``tmp_path`` with ``--stream`` values ``streams``, on each
    engine: its rows, its summary's counts (events, triples, rejections by reason) and its
    dead letters, each sorted."""
    (tmp_path / "q.rq").write_text(text)
    monkeypatch.chdir(tmp_path)
    got = {}
    for engine, extra in (("stream", []), ("spark", ["--spark-pieces", "4"])):
        args = ["run", "q.rq", *(a for s in streams for a in ("--stream", s)), "--format", "jsonl",
                "--dead-letter", f"dead-{engine}.jsonl", "--engine", engine, *extra]
        assert main(args) == 0
        out, err = capsys.readouterr()
        counts = re.search(r"([\d,]+) events \(([\d,]+) triples\).*?; ([^;]*rejected[^;]*);", err).groups()
        letters = sorted((tmp_path / f"dead-{engine}.jsonl").read_text().splitlines())
        got[engine] = sorted(out.splitlines()), counts, letters
    return got


def test_order_rules_apply_across_the_files_of_a_stream(tmp_path, capsys, monkeypatch):
    """A folder whose second file starts more than the maximum time jump after the first
    ends: the streaming engine rejects that file's events (time-jump); Spark checked each
    file on its own and matched them too (28 rows, not 14)."""
    (tmp_path / "s").mkdir()
    write_events(kind_events(" ".join(f"{'ab'[t % 2]}@{t}" for t in range(1, 31)), tag="p"), tmp_path / "s/f1.nq")
    write_events(kind_events(" ".join(f"{'ab'[t % 2]}@{40_000_000 + t}" for t in range(1, 31)), tag="q"),
                 tmp_path / "s/f2.nq")
    got = run_both_engines(tmp_path, capsys, monkeypatch, query("A ; B"), "S1=s")
    assert got["stream"][1] == ("30", "30", "30 rejected (30 time-jump)") and len(got["stream"][0]) == 14
    assert got["spark"] == got["stream"]


def test_the_first_event_decides_the_kind_of_time_of_every_piece(tmp_path, capsys, monkeypatch):
    """Numbers on S1, xsd:dateTime on S2: the streaming engine takes the kind of the earliest
    event and rejects S2 (kind); Spark's pieces each took the kind of their own first event,
    so pieces of dateTime events only matched them."""
    write_events(kind_events(" ".join(f"{'ab'[t % 2]}@{t}" for t in range(1, 31))), tmp_path / "s1.nq")
    write_events([dataclasses.replace(e, time=1_704_067_200 + e.time, is_datetime=True) for e in
                  kind_events(" ".join(f"{'ab'[t % 2]}@{t}" for t in range(1, 40)), stream=1)], tmp_path / "s2.nq")
    text = query("A ; B", on={"A": "S1, S2", "B": "S1, S2"})
    got = run_both_engines(tmp_path, capsys, monkeypatch, text, "S1=s1.nq", "S2=s2.nq")
    assert got["stream"][1] == ("30", "30", "39 rejected (39 kind)") and len(got["stream"][0]) == 14
    assert got["spark"] == got["stream"]


def test_order_rules_apply_before_the_cut_by_key(tmp_path, capsys, monkeypatch):
    """PARTITION BY without a window: two files of a folder hold an event each at time 1 (a
    duplicate), of two keys; Spark sent them to two pieces, which each accepted theirs."""
    def event(name: str, kind: str, loc: str, time: int) -> Event:
        s = ox.NamedNode(EX + name)
        return Event(STREAMS[0], time, (ox.Triple(s, ox.NamedNode(EX + "kind"), ox.Literal(kind)),
                                        ox.Triple(s, ox.NamedNode(EX + "loc"), ox.NamedNode(EX + loc))),
                     ox.NamedNode(EX + "g" + name))
    (tmp_path / "s").mkdir()
    write_events([event("a1", "a", "L1", 1), event("b1", "b", "L1", 2)], tmp_path / "s/f1.nq")
    write_events([event("a2", "a", "L2", 1), event("b2", "b", "L2", 5)], tmp_path / "s/f2.nq")
    got = run_both_engines(tmp_path, capsys, monkeypatch, PARTITIONED, "S1=s")
    assert got["stream"][1] == ("3", "6", "1 rejected (1 duplicate)") and len(got["stream"][0]) == 1
    assert got["spark"] == got["stream"]


def test_state_limits_apply_to_every_piece(tmp_path, capsys):
    """--max-runs and --on-limit reach the pieces: fail stops the run with exit
    status 3; drop-newest goes on and the summary counts what was dropped."""
    events = kind_events(" ".join(f"a@{t}" for t in range(1, 13)) + " b@13")
    paths = write_stream_files(events, str(tmp_path))
    query_file = tmp_path / "q.rq"
    query_file.write_text(query("A ; B", within=""))
    args = ["run", str(query_file), "--stream", f"S1={paths[STREAMS[0]]}", "--engine", "spark", "--max-runs", "5"]
    assert main(args) == 3
    out, err = capsys.readouterr()
    assert out == "" and "limit reached" in err and "5 active runs reached the limit of 5 (--max-runs)" in err
    assert main(args + ["--on-limit", "drop-newest"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 5 and "7 partial matches dropped (--on-limit drop-newest)" in err


@pytest.mark.skipif(not CASE_DIRS, reason="../shared/acceptance is absent")
def test_spark_engine_with_a_materialized_kb(tmp_path, capsys, monkeypatch):
    """``kb materialize`` then ``run --engine spark --kb-materialized``: the streaming engine's results."""
    case = next(p for p in CASE_DIRS if p.name == "paper-ex10-kb-graph")
    spec = json.loads((case / "case.json").read_text())
    dump = tmp_path / "kb.nq"
    dump.write_bytes(ox.serialize(ox.parse(path=str(case / spec["kb"])), format=ox.RdfFormat.N_QUADS))
    monkeypatch.chdir(case)
    assert main(["kb", "materialize", spec["query"], "--dump", str(dump), "--out", str(tmp_path / "blocks"),
                 "--quiet"]) == 0
    streams = [a for alias, f in spec["streams"].items() for a in ("--stream", f"{alias}={f}")]
    capsys.readouterr()
    assert main(["run", spec["query"], *streams, "--kb", spec["kb"], "--quiet"]) == 0
    expected = sorted(capsys.readouterr().out.splitlines())
    assert expected
    assert main(["run", spec["query"], *streams, "--kb-materialized", str(tmp_path / "blocks"),
                 "--engine", "spark", "--quiet"]) == 0
    assert sorted(capsys.readouterr().out.splitlines()) == expected


def test_spark_bench_checks_results_and_reports_speedups(spark, capsys):
    from spaseq_plugin.bench.runner import add_bench_parser
    import argparse
    parser = argparse.ArgumentParser()
    add_bench_parser(parser.add_subparsers())
    args = parser.parse_args(["bench", "--engine", "spark", "--spark-sizes", "300,600", "--spark-masters",
                              spark.sparkContext.master, "--spark-files", "3", "--quiet"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "stock-v (Q4 V-shape)" in out and "600" in out and "in a running session" in out


def test_large_nquads_files_are_read_in_parts(tmp_path):
    """One N-Quads file read by several tasks: the same results as reading it whole; a file
    whose events lie across the cuts (timestamps far from their graphs) is read again whole."""
    from spaseq_plugin.spark.engine import read_source
    events = kind_events(" ".join(f"{'ab'[n % 2]}@{n}" for n in range(1, 301)))
    text = query("A ; B")
    compiled = compile_query(text)
    expected = collections.Counter(result_key(r) for r in Engine(compiled).run(events))
    paths = write_stream_files(events, str(tmp_path))
    sources = archived_sources(compiled, sorted(paths.items()), [], split_bytes=4000)
    assert len(sources) > 5 and all(s.span for s in sources)
    assert sum(1 for s in sources for item in read_source(s) if type(item).__name__ == "EventRecord") == 300
    run = SparkRun(compiled, text, sources, [], pieces=4, min_piece_windows=0)
    assert collections.Counter(result_key(r) for r in run.results()) == expected
    # every timestamp at the end of the file: only the whole file gives the events
    nquads = open(paths[STREAMS[0]], "rb").read().splitlines(keepends=True)
    stamps = [line for line in nquads if PROV_GENERATED_AT.value.encode() in line]
    with open(paths[STREAMS[0]], "wb") as f:
        f.writelines([line for line in nquads if line not in stamps][:1200] + stamps[:150])
    whole = list(Engine(compiled).run(read_stream_file(paths[STREAMS[0]], STREAMS[0])))
    sources = archived_sources(compiled, sorted(paths.items()), [], split_bytes=4000)
    messages = []
    run = SparkRun(compiled, text, sources, [], pieces=4, min_piece_windows=0, progress=messages.append)
    assert collections.Counter(result_key(r) for r in run.results()) == \
        collections.Counter(result_key(r) for r in whole)
    assert any("read again whole" in m for m in messages)


def test_a_time_jump_across_the_cut_of_a_large_file(tmp_path):
    """Times that jump by more than the maximum time jump exactly where a file read in parts
    was cut: Spark checked only that times increased across the cut, and the later parts
    accepted every event that reading the file whole rejects."""
    from spaseq_plugin.spark.engine import read_source
    text = query("A ; B")
    compiled = compile_query(text)
    path = str(tmp_path / "s.nq")

    def write(jump_after: int) -> None:        # times of one width: the same cuts whatever the jump
        times = [10**9 + n + (40_000_000 if n > jump_after else 0) for n in range(1, 301)]
        write_events(kind_events(" ".join(f"{'ab'[n % 2]}@{t}" for n, t in enumerate(times, 1))), path)
    write(300)
    first_part = archived_sources(compiled, [(STREAMS[0], path)], [], split_bytes=4000)[0]
    write(max(item.time for item in read_source(first_part) if hasattr(item, "time")) - 10**9)
    rejected, spark_rejected = [], []
    expected = collections.Counter(result_key(r) for r in Engine(compiled, on_reject=rejected.append).run(
        read_stream_file(path, STREAMS[0])))
    sources = archived_sources(compiled, [(STREAMS[0], path)], [], split_bytes=4000)
    assert len(sources) > 5
    run = SparkRun(compiled, text, sources, [], pieces=4, min_piece_windows=0, on_reject=spark_rejected.append)
    assert collections.Counter(result_key(r) for r in run.results()) == expected
    assert rejected and all(e.reason == "time-jump" for e in rejected)
    assert sorted((e.position, e.message) for e in spark_rejected) == sorted((e.position, e.message) for e in rejected)


def test_output_files_appear_only_whole(tmp_path, capsys, monkeypatch):
    """A Spark run writes its results at its end, but it emptied --output (and the
    dead-letter file) as it started: a run killed while Spark worked (kill -9, the OOM
    killer) left an empty file, or a CSV header, that reads as a run without results.
    Its files are now written as FILE.partial and renamed whole when the run ends."""
    from spaseq_plugin.spark import engine as spark_engine
    events = kind_events("a@1 b@2 a@3 b@4 a@5 b@6")
    paths = write_stream_files(events, str(tmp_path))
    with open(paths[STREAMS[0]], "a") as f:
        f.write(f'<{EX}bad> <{EX}kind> "x" <{EX}gbad> .\n')       # a graph without a timestamp
    (tmp_path / "q.rq").write_text(query("A ; B"))
    monkeypatch.chdir(tmp_path)
    for name in ("out.csv", "dead.jsonl", "sink.jsonl"):
        (tmp_path / name).write_text("an earlier run's\n")
    seen = {}
    results = spark_engine.SparkRun.results

    def watched(run):
        for result in results(run):
            seen.setdefault("during", {name: (tmp_path / name).read_text() for name in
                                       ("out.csv", "dead.jsonl", "sink.jsonl")})
            yield result
    monkeypatch.setattr(spark_engine.SparkRun, "results", watched)
    args = ["run", "q.rq", "--stream", f"S1={paths[STREAMS[0]]}", "--engine", "spark", "--format", "csv",
            "-o", "out.csv", "--dead-letter", "dead.jsonl", "--sink", "jsonl:sink.jsonl"]
    assert main(args) == 0
    capsys.readouterr()
    assert seen["during"] == {name: "an earlier run's\n" for name in ("out.csv", "dead.jsonl", "sink.jsonl")}
    assert len((tmp_path / "out.csv").read_text().splitlines()) == 1 + 3
    assert len((tmp_path / "sink.jsonl").read_text().splitlines()) == 3
    assert json.loads((tmp_path / "dead.jsonl").read_text())["reason"] == "no-timestamp"
    assert not list(tmp_path.glob("*.partial"))

    def interrupted(run):
        yield from []
        raise KeyboardInterrupt
    monkeypatch.setattr(spark_engine.SparkRun, "results", interrupted)
    (tmp_path / "out.csv").write_text("an earlier run's\n")
    assert main(args) == 130
    err = capsys.readouterr().err
    assert "not written (the run did not complete): out.csv, sink.jsonl, dead.jsonl" in err
    assert (tmp_path / "out.csv").read_text() == "an earlier run's\n"
    assert not list(tmp_path.glob("*.partial"))

    def limited(run):           # (a Spark run has no results from before a limit)
        yield from []
        raise StateLimitError("5 active runs reached the limit of 5 (--max-runs)")
    monkeypatch.setattr(spark_engine.SparkRun, "results", limited)
    assert main(args) == 3
    assert "not written" in capsys.readouterr().err
    assert (tmp_path / "out.csv").read_text() == "an earlier run's\n"
    assert not list(tmp_path.glob("*.partial"))


def _children() -> set[int]:
    pids = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            pids.update(int(pid) for pid in f.read().split())
    return pids


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads /proc")
def test_a_signal_while_the_jvm_starts_leaves_no_jvm_behind(monkeypatch):
    """SIGTERM or Ctrl-C in the seconds Spark's JVM takes to start made PySpark remove the
    directory the JVM writes its gateway's port to; the JVM then never watched its standard
    input, and ran on after spaseq had exited (found by a SIGTERM 1 s into a run)."""
    from pyspark import SparkConf, java_gateway
    from spaseq_plugin.spark import session

    class SignalArrives:        # PySpark's time module as it waits for the JVM
        @staticmethod
        def sleep(seconds):
            raise KeyboardInterrupt
    session.prepare_environment()
    before = _children()
    monkeypatch.setattr(java_gateway, "time", SignalArrives)
    with pytest.raises(KeyboardInterrupt):
        session._launch_gateway(SparkConf(loadDefaults=False).set("spark.master", "local[1]"))
    left = []
    for pid in _children() - before:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                left.append(pid)
    for pid in left:                # (the old code's: stopped here)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert left == []


def test_an_interrupted_spark_job_prints_no_py4j_traceback(spark):
    """Py4J logs a command interrupted by Ctrl-C or SIGTERM through the root logger, and its
    connection's failures through its own, which reached the root logger's handler (the
    one Python sets up to print to standard error): ``ERROR:root:KeyboardInterrupt while
    sending command.`` and tracebacks before spaseq's own message."""
    import io
    import signal
    import threading
    import time

    def slow(x):
        time.sleep(20)
        return x
    shown = io.StringIO()
    handler = logging.StreamHandler(shown)
    logging.getLogger().addHandler(handler)
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            spark.sparkContext.parallelize(range(2), 2).map(slow).count()
        logging.getLogger("py4j.clientserver").error("Exception occurred while shutting down connection")
    finally:
        timer.cancel()
        logging.getLogger().removeHandler(handler)
    assert "while sending command" not in shown.getvalue()
    assert "shutting down connection" not in shown.getvalue()


def test_a_stop_during_a_collect_is_a_stop(tmp_path, capsys, monkeypatch):
    """Ctrl-C while PySpark opened a job's result socket: its cleanup then failed
    (``UnboundLocalError: ... 'sockfile'``), and the run ended as an internal error, exit
    status 1, instead of an interrupted one (130)."""
    from pyspark import util
    from spaseq_plugin.cli.stopping import Terminated
    paths = write_stream_files(kind_events("a@1 b@2"), str(tmp_path))
    (tmp_path / "q.rq").write_text(query("A ; B"))

    def signal_arrives(sock_info):
        raise Terminated(15)
    monkeypatch.setattr(util, "_create_local_socket", signal_arrives)
    assert main(["run", str(tmp_path / "q.rq"), "--stream", f"S1={paths[STREAMS[0]]}", "--engine", "spark"]) == 143
    err = capsys.readouterr().err
    assert "internal error" not in err and "terminated (SIGTERM)" in err


def test_a_broken_accumulator_connection_prints_no_traceback(spark, capfd):
    """When a run is stopped during a job, the JVM's connection to PySpark's accumulator
    server breaks, and the server printed ``Exception occurred during processing of
    request`` with a traceback after spaseq's message."""
    server = spark.sparkContext._accumulatorServer
    try:
        raise EOFError
    except EOFError:
        server.handle_error(None, ("127.0.0.1", 0))
    assert "Traceback" not in capfd.readouterr().err


def test_a_piece_reads_its_events_as_the_engine_takes_them(monkeypatch):
    """A piece sorted its events in a list before its engine started: the whole input in one
    Python worker for a query that runs as one piece (no window, no PARTITION BY).  Spark
    sorts them now, and the engine reads them one by one."""
    from spaseq_plugin.spark import engine as spark_engine
    from spaseq_plugin.spark.engine import Cut, EventRecord, evaluate_piece
    events = kind_events("a@1 b@2 " + " ".join(f"c@{t}" for t in range(3, 2003)))
    pulled, at_first_match = 0, []

    def records():
        nonlocal pulled
        for seq, e in enumerate(events):
            pulled += 1
            payload = ox.serialize(e.triples, format=ox.RdfFormat.N_TRIPLES)
            yield EventRecord(e.time, 0, seq, e.stream, False, str(e.name), None, payload)
    on_match = spark_engine._PieceEngine._on_match

    def seen(self, match):
        at_first_match.append(pulled)
        on_match(self, match)
    monkeypatch.setattr(spark_engine._PieceEngine, "_on_match", seen)
    output = evaluate_piece(0, records(), query("A ; B", within=""), (), Cut("single", 1), None)
    assert len(output.results) == 1 and output.events == 2002
    assert at_first_match[0] < 10


def test_running_out_of_memory_on_spark_is_a_limit():
    """A Spark job that ran out of memory ended as 'a Spark task failed: ...', exit status 1,
    without saying what to change: it is a limit now (exit status 3), naming the memory
    to give and --spark-pieces."""
    from spaseq_plugin.errors import LimitError
    from spaseq_plugin.spark.session import task_failure
    jvm = task_failure(Exception("An error occurred while calling o93.collectAndServe.\n"
                                 ": org.apache.spark.SparkException: Job aborted due to stage failure\n"
                                 "Caused by: java.lang.OutOfMemoryError: Java heap space\n\tat java.base/x"))
    assert isinstance(jvm, LimitError) and "Java heap space" in str(jvm)
    assert "SPASEQ_SPARK_DRIVER_MEMORY" in str(jvm) and "--spark-pieces" in str(jvm)
    worker = task_failure(Exception("Traceback (most recent call last):\n  File \"worker.py\", line 1\n"
                                    "MemoryError\n"))
    assert isinstance(worker, LimitError) and "--spark-pieces" in str(worker)
    assert not isinstance(task_failure(Exception("ValueError: bad")), LimitError)


def test_too_little_memory_for_spark_says_so():
    """SPASEQ_SPARK_DRIVER_MEMORY below what Spark needs ended as 'cannot start Spark (master
    local[2]): An error occurred while calling None.org.apache.spark.api.java.JavaSparkContext.'"""
    from spaseq_plugin.spark.session import _start_failure
    error = Exception("An error occurred while calling None.org.apache.spark.api.java.JavaSparkContext.\n"
                      ": org.apache.spark.SparkIllegalArgumentException: [INVALID_DRIVER_MEMORY.SYSTEM_MEMORY] "
                      "Insufficient driver memory: System memory 419430400 must be at least 471859200.\n"
                      "\tat org.apache.spark.memory.UnifiedMemoryManager$.getMaxMemory(x.scala:1)")
    assert _start_failure(error).startswith("[INVALID_DRIVER_MEMORY.SYSTEM_MEMORY] Insufficient driver memory")
