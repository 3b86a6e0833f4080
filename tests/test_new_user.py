"""The first hour of a new user: the documented forms work, a user's mistake is a
one-line usage error (never an internal error), and the usual conventions hold
(exit statuses, ``python -m``, ``-v``, progress, optional Spark, quick tests).

Each test runs what a user runs: the command (``spaseq`` in a subprocess, or
``cli.commands.main`` in process) or the public Python API.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pyoxigraph as ox
import pytest
import rdflib

from spaseq_plugin import Engine, KnowledgeBase, LimitError
from spaseq_plugin.cli import commands as cli
from spaseq_plugin.rdflib_integration.processor import spaseq_query
from spaseq_plugin.streams.network import open_stdin

from helpers import server_unavailable

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart"
QUERY = QUICKSTART / "query.rq"
STREAMS = [f"S1={QUICKSTART / 'power.trig'}", f"S2={QUICKSTART / 'weather.trig'}",
           f"S3={QUICKSTART / 'storage.trig'}"]
KB_GRAPH = "http://example/grid/kb"
KB_TTL = "@prefix : <http://example/grid/> .\n:house1 :owner :john .\n:house2 :owner :smith .\n"
OWNERS = ["http://example/grid/john", "http://example/grid/john", "http://example/grid/smith"]
SPASEQ = [sys.executable, "-m", "spaseq_plugin"]
INSTALL_SPARK = "pip install 'spaseq-plugin[spark]'"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """``spaseq ARGV...`` in process: (exit status, stdout, stderr)."""
    status = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def spaseq(*argv, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(SPASEQ + [str(a) for a in argv], capture_output=True, text=True, timeout=120,
                          **kwargs)


def owners(jsonl: str) -> list[str]:
    return sorted(json.loads(line)["bindings"]["owner"]["value"] for line in jsonl.splitlines())


@pytest.fixture
def kb_ttl(tmp_path) -> Path:
    path = tmp_path / "kb.ttl"
    path.write_text(KB_TTL)
    return path


# -- broken: --kb IRI=PATH -----------------------------------------------------------------------

@pytest.mark.parametrize("form", ["{iri}={path}", "<{iri}>={path}"])
def test_kb_iri_equals_path_loads_a_file_into_a_named_graph(capsys, kb_ttl, form):
    status, out, err = run(capsys, "run", QUERY, *[f"--stream={s}" for s in STREAMS],
                           "--kb", form.format(iri=KB_GRAPH, path=kb_ttl))
    assert status == 0, err
    assert owners(out) == OWNERS and "warning" not in err


def test_kb_urn_equals_path_and_the_api_forms(capsys, kb_ttl, tmp_path):
    query = tmp_path / "q.rq"
    query.write_text(QUERY.read_text().replace(f"<{KB_GRAPH}>", "<urn:x:kb>"))
    status, out, err = run(capsys, "run", query, *[f"--stream={s}" for s in STREAMS], "--kb", f"urn:x:kb={kb_ttl}")
    assert status == 0 and owners(out) == OWNERS, err
    for spec in (f"urn:x:kb={kb_ttl}", f"<urn:x:kb>={kb_ttl}"):
        kb = KnowledgeBase.from_specs([spec])
        assert kb.graph_names() == ["urn:x:kb"] and len(list(kb.quads("urn:x:kb"))) == 2
    events = rdflib.Dataset()
    events.parse(QUICKSTART / "power.trig", format="trig")
    one_stream = (f"PREFIX : <http://example/grid/> SELECT ?owner WITHIN 1 HOUR "
                  f"FROM STREAM S1 <http://example/grid/power> WHERE {{ SEQ (A) DEFINE GPM A ON S1 "
                  f"{{ ?house :fare ?f GRAPH <{KB_GRAPH}> {{ ?house :owner ?owner }} }} }}")
    result = spaseq_query(events, one_stream, kb=f"{KB_GRAPH}={kb_ttl}")
    assert sorted(str(row.owner) for row in result) == ["http://example/grid/john", "http://example/grid/smith",
                                                        "http://example/grid/smith"]


def test_kb_spec_mistakes_name_the_value(capsys, kb_ttl):
    for spec, message in [
            (f"not-an-iri={kb_ttl}", "'not-an-iri' is not an absolute IRI"),
            (f"{KB_GRAPH}={QUICKSTART / 'kb.trig'}", "this file names its own"),
            ("oxigrap:/tmp/kb", "no such file, and no KB store is called 'oxigrap'"),
            (str(kb_ttl.parent / "missing.ttl"), "no such file")]:
        status, out, err = run(capsys, "run", QUERY, f"--stream={STREAMS[0]}", "--kb", spec)
        assert status == 2 and err.startswith(f"spaseq: --kb {spec}: ") and message in err, err


def test_a_graph_the_kb_lacks_names_the_kb_graphs_and_how_to_load_one(capsys, kb_ttl, tmp_path):
    status, out, err = run(capsys, "run", QUERY, *[f"--stream={s}" for s in STREAMS], "--kb", kb_ttl)
    assert status == 0 and out == ""
    assert (f"warning: the KB has no graph <{KB_GRAPH}>, so GRAPH <{KB_GRAPH}> matches nothing "
            f"(it has no named graph); to load a Turtle or N-Triples file into that graph: "
            f"--kb '<{KB_GRAPH}>=FILE'") in err
    status, out, err = run(capsys, "explain", QUERY, "--kb", f"urn:x:other={kb_ttl}")
    assert status == 0 and "(its named graphs: <urn:x:other>)" in err


# -- broken: Ctrl-C while stdin waits --------------------------------------------------------------

@pytest.mark.parametrize("when", ["before any input", "again before any input", "after some input"])
def test_ctrl_c_while_stdin_waits_exits_130_with_the_summary(when):
    p = subprocess.Popen(SPASEQ + ["run", str(QUERY), "--stream", "S1=-", "-v"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        if when == "after some input":
            p.stdin.write((QUICKSTART / "power.trig").read_bytes())
            p.stdin.flush()
        seen = b""
        while b"reading <http://example/grid/power> from stdin" not in seen:     # -v says so
            line = p.stderr.readline()
            assert line, seen
            seen += line
        time.sleep(0.5)                 # now waiting for input
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    err = (seen + err).decode()
    assert p.returncode == 130, err
    assert "Fatal Python error" not in err and "Traceback" not in err
    assert "spaseq: interrupted after " in err and " events " in err
    if when == "after some input":
        assert "interrupted after 0 events" not in err


def test_closing_a_stdin_source_ends_its_reading_thread():
    read, write = os.pipe()
    with os.fdopen(read, "rb") as stream, os.fdopen(write, "wb"):
        source = open_stdin("trig", "http://example.org/s", fileobj=stream)
        source.start()
        reading = [t for t in threading.enumerate() if t.name == "spaseq stdin"]
        assert len(reading) == 1 and reading[0].is_alive()
        source.close()
        assert not reading[0].is_alive()


# -- broken: user mistakes are usage errors (exit 2) ------------------------------------------------

def test_a_stream_file_with_another_extension_is_a_usage_error(capsys, tmp_path):
    plain = tmp_path / "plain.ttl"
    plain.write_text((QUICKSTART / "power.trig").read_text())
    status, out, err = run(capsys, "run", QUERY, "--stream", f"S1={plain}")
    assert status == 2 and "internal error" not in err
    assert err.startswith(f"spaseq: --stream S1={plain}: {plain} is not a stream file: stream files are "
                          "TriG (.trig) or N-Quads (.nq)") and err.count("\n") == 1


def test_dev_null_is_an_empty_stream(capsys):
    status, out, err = run(capsys, "run", QUERY, "--stream", "S1=/dev/null")
    assert status == 0 and out == "" and "spaseq: 0 events" in err, err


def test_dev_stdin_and_dev_fd_are_streams(tmp_path):
    power = (QUICKSTART / "power.trig").read_bytes()
    want = spaseq("run", QUERY, "--stream", f"S1={QUICKSTART / 'power.trig'}", "--stream", STREAMS[1],
                  "--stream", STREAMS[2], "--kb", QUICKSTART / "kb.trig")
    assert want.returncode == 0 and len(want.stdout.splitlines()) == 3
    from_stdin = subprocess.run(SPASEQ + ["run", str(QUERY), "--stream", "S1=/dev/stdin", "--stream", STREAMS[1],
                                          "--stream", STREAMS[2], "--kb", str(QUICKSTART / "kb.trig")],
                                input=power, capture_output=True, timeout=120)
    assert from_stdin.returncode == 0, from_stdin.stderr
    assert from_stdin.stdout.decode() == want.stdout
    read, write = os.pipe()
    p = subprocess.Popen(SPASEQ + ["run", str(QUERY), "--stream", f"S1=/dev/fd/{read}", "--stream", STREAMS[1],
                                   "--stream", STREAMS[2], "--kb", str(QUICKSTART / "kb.trig")],
                         pass_fds=(read,), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.close(read)
    with os.fdopen(write, "wb") as sender:
        sender.write(power)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert out == want.stdout


def test_a_fifo_named_like_a_stream_file_is_read_as_it_arrives(capsys, tmp_path):
    fifo = tmp_path / "power.trig"
    os.mkfifo(fifo)

    def send():
        with open(fifo, "wb") as f:
            f.write((QUICKSTART / "power.trig").read_bytes())
    sender = threading.Thread(target=send)
    sender.start()
    status, out, err = run(capsys, "run", QUERY, "--stream", f"S1={fifo}", *[f"--stream={s}" for s in STREAMS[1:]],
                           "--kb", QUICKSTART / "kb.trig")
    sender.join(timeout=30)
    assert status == 0, err
    assert owners(out) == OWNERS


@pytest.mark.parametrize("stop", ["idle-timeout", "SIGTERM"])
def test_a_fifo_nobody_writes_to_is_idle_time(tmp_path, stop):
    """Opening a named pipe waits for a writer: that wait was outside --idle-timeout,
    and a run over a pipe nobody opened never ended.  It is idle time now."""
    fifo = tmp_path / "power.trig"
    os.mkfifo(fifo)
    extra = ["--idle-timeout", "1"] if stop == "idle-timeout" else []
    started = time.monotonic()
    p = subprocess.Popen(SPASEQ + ["run", str(QUERY), "--stream", f"S1={fifo}", *extra,
                                   *[f"--stream={s}" for s in STREAMS[1:]], "--kb", str(QUICKSTART / "kb.trig")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if stop == "SIGTERM":
            time.sleep(2)
            p.terminate()
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()                # (a run that hangs must not outlive the test)
    assert time.monotonic() - started < 10, err
    if stop == "SIGTERM":
        assert p.returncode == 128 + signal.SIGTERM and "terminated (SIGTERM)" in err, err
    else:
        assert p.returncode == 0, err
        assert f"spaseq: {fifo}: no input for 1 s (idle_timeout): ending" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("flag", ["--kb", "--output", "--dead-letter"])
def test_missing_or_unwritable_files_are_usage_errors_naming_the_flag(capsys, tmp_path, flag):
    where = tmp_path / "no-such-folder" / "file.txt"
    status, out, err = run(capsys, "run", QUERY, f"--stream={STREAMS[0]}", flag, where)
    assert status == 2
    detail = "no such file" if flag == "--kb" else "No such file or directory"
    assert err == f"spaseq: {flag} {where}: {detail}\n"
    assert not where.parent.exists()


LIMITED = '''
from spaseq_plugin import LimitError


def stop_at_the_first(result):
    raise LimitError("a test limit of 1 result (--test-limit)")


def fail(result):
    raise RuntimeError("a bug")
'''


@pytest.mark.parametrize("function, status, message", [
    ("stop_at_the_first", 3, "spaseq: limit reached: a test limit of 1 result (--test-limit)\n"),
    # (the user's function failing is not ours to report as an internal error)
    ("fail", 1, "spaseq: error: callback limited_sink:fail raised RuntimeError: a bug (on result 1)\n")])
def test_a_limit_exits_3_and_the_unexpected_exits_1(capsys, tmp_path, monkeypatch, function, status, message):
    (tmp_path / "limited_sink.py").write_text(LIMITED)
    monkeypatch.syspath_prepend(str(tmp_path))
    got, out, err = run(capsys, "run", QUERY, *[f"--stream={s}" for s in STREAMS], "--kb", QUICKSTART / "kb.trig",
                        "--sink", f"callback:limited_sink:{function}", "-q")
    assert (got, err) == (status, message)
    assert issubclass(LimitError, Exception)


def test_the_exit_statuses_are_documented():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("### Exit status"):]
    for status in ("| 0 |", "| 2 |", "| 3 |", "| 1 |", "| 130 |"):
        assert status in table
    assert "LimitError" in table
    help_text = spaseq("--help").stdout + spaseq("run", "--help").stdout
    assert "SPASEQ_DEBUG=1" in help_text and "3 a limit was reached" in help_text and "130 interrupted" in help_text


# -- quiet mistakes ---------------------------------------------------------------------------------

def test_a_stream_without_input_is_a_warning_naming_it_and_its_gpms(capsys):
    status, out, err = run(capsys, "run", QUERY, f"--stream={STREAMS[0]}", "--kb", QUICKSTART / "kb.trig")
    assert status == 0 and out == ""
    assert ("warning: stream S2 <http://example/grid/weather> has no input (no --stream S2=...): "
            "GPM B can never match") in err
    assert "warning: stream S3 <http://example/grid/storage> has no input (no --stream S3=...): " \
           "GPM C can never match" in err


def test_pushing_to_a_stream_the_query_does_not_read_is_counted_and_said_once(caplog):
    engine = Engine(QUERY.read_text())
    triple = [ox.Triple(ox.NamedNode("http://example/x"), ox.NamedNode("http://example/p"), ox.Literal(1))]
    with caplog.at_level(logging.WARNING, logger="spaseq_plugin"):
        for time_ in (1, 2, 3):
            assert engine.push("http://example.org/elsewhere", time_, triple) == []
        engine.push("http://example.org/other", 4, triple)
    said = [r for r in caplog.records if r.name == "spaseq_plugin.runtime.engine"]
    assert [r.getMessage().partition(": ")[0] for r in said] == [
        "events of stream <http://example.org/elsewhere> are ignored",
        "events of stream <http://example.org/other> are ignored"]
    assert "the query reads <http://example/grid/power>, <http://example/grid/storage>, " \
           "<http://example/grid/weather>" in said[0].getMessage()
    assert engine.stats.ignored == 4 and engine.stats.events == 0


def _quickstart_results(kb) -> list[str]:
    from spaseq_plugin.streams.files import open_stream, merge_streams
    engine = Engine(QUERY.read_text(), kb=kb)
    streams = [open_stream(str(QUICKSTART / f"{name}.trig"), f"http://example/grid/{name}")
               for name in ("power", "weather", "storage")]
    return sorted(r.bindings["owner"].value for r in engine.run(merge_streams(streams)))


def test_the_engine_takes_every_kind_of_kb():
    store = ox.Store()
    store.load(path=str(QUICKSTART / "kb.trig"), format=ox.RdfFormat.TRIG)
    dataset = rdflib.Dataset()
    dataset.parse(QUICKSTART / "kb.trig", format="trig")
    graph = rdflib.Graph(identifier=rdflib.URIRef(KB_GRAPH))
    graph.parse(data=KB_TTL, format="turtle")
    for kb in (store, dataset, graph, KnowledgeBase.from_specs([str(QUICKSTART / "kb.trig")]),
               str(QUICKSTART / "kb.trig")):
        assert _quickstart_results(kb) == OWNERS, type(kb)
    with pytest.raises(TypeError, match="kb must be a KnowledgeBase, a pyoxigraph Store, an rdflib"):
        Engine(QUERY.read_text(), kb=42)


@pytest.fixture
def construct(tmp_path) -> Path:
    path = tmp_path / "construct.rq"
    text = QUERY.read_text()
    path.write_text(text[:text.index("SELECT")] + "CONSTRUCT { ?house :cheaper ?storage }"
                    + text[text.index("WITHIN"):])
    return path


def test_formats_that_cannot_show_the_results_are_refused(capsys, construct):
    for query, fmt, extra, message in [
            (construct, "csv", [], "--format csv is for SELECT queries: a CONSTRUCT query's results are graphs"),
            (construct, "tsv", [], "--format tsv is for SELECT queries"),
            (construct, "json", [], "--format json is for SELECT queries"),
            (QUERY, "trig", [], "--format trig is for CONSTRUCT queries"),
            (construct, "trig", ["--events"], "--events: TriG output holds the constructed graphs only")]:
        status, out, err = run(capsys, "run", query, f"--stream={STREAMS[0]}", "--format", fmt, *extra)
        assert status == 2 and err.startswith(f"spaseq: {message}"), err
    status, out, err = run(capsys, "run", construct, *[f"--stream={s}" for s in STREAMS], "--kb",
                           QUICKSTART / "kb.trig", "--format", "jsonl")
    assert status == 0 and len(out.splitlines()) == 3 and '"triples"' in out


def test_events_in_every_format_write_stream_and_graph_alike(capsys):
    args = ["run", QUERY, *[f"--stream={s}" for s in STREAMS], "--kb", QUICKSTART / "kb.trig", "--events"]
    status, out, err = run(capsys, *args)
    first = json.loads(out.splitlines()[0])["events"]
    assert first[0] == {"stream": "http://example/grid/power", "time": "2012-05-01T10:00:00Z",
                        "graph": "http://example/grid/p1"}
    assert [e["graph"] for e in first] == ["http://example/grid/p1", "http://example/grid/w1",
                                           "http://example/grid/w3", "http://example/grid/s1"]
    status, out, err = run(capsys, *args, "--format", "csv")
    import csv
    rows = list(csv.reader(out.splitlines()))
    assert rows[0][-1] == "events" and json.loads(rows[1][-1]) == first
    status, out, err = run(capsys, *args, "--format", "tsv")
    lines = out.splitlines()
    assert lines[0].endswith("\t?events") and json.loads(ox.parse(
        f"<x:s> <x:p> {lines[1].split(chr(9))[-1]} .".encode(), format=ox.RdfFormat.N_TRIPLES).__next__()
        .object.value) == first
    status, out, err = run(capsys, *args, "--format", "json")
    doc = json.loads(out)
    assert doc["head"]["vars"][-1] == "events"
    assert json.loads(doc["results"]["bindings"][0]["events"]["value"]) == first


# -- conventions -------------------------------------------------------------------------------------

def test_python_dash_m_is_the_spaseq_command():
    args = ["run", QUERY, *[f"--stream={s}" for s in STREAMS], "--kb", QUICKSTART / "kb.trig"]
    module = spaseq(*args)
    command = subprocess.run([str(Path(sys.executable).parent / "spaseq")] + [str(a) for a in args],
                             capture_output=True, text=True, timeout=120)
    assert module.returncode == command.returncode == 0
    assert module.stdout == command.stdout and len(module.stdout.splitlines()) == 3
    assert spaseq("--version").stdout.startswith("spaseq ")


def test_verbosity_and_log_levels(capsys):
    args = [*[f"--stream={s}" for s in STREAMS[:2]], "--kb", QUICKSTART / "kb.trig"]
    status, out, err = run(capsys, "run", QUERY, *args)
    assert "warning: stream S3" in err and "reading" not in err
    for verbose in (["run", QUERY, "-v"], ["-v", "run", QUERY], ["run", QUERY, "--log-level", "info"]):
        status, out, err = run(capsys, *verbose, *args)
        assert status == 0 and f"spaseq: reading <http://example/grid/power> from {QUICKSTART / 'power.trig'}" \
            in err and "KB: loaded" in err, verbose
    status, out, err = run(capsys, "run", QUERY, "--log-level", "error", *args)
    assert "warning" not in err and "spaseq: 7 events" in err
    status, out, err = run(capsys, "run", QUERY, "-q", *args)
    assert err == ""
    status, out, err = run(capsys, "run", QUERY, "-vv", *args)
    assert "spaseq: debug: [spaseq_plugin.cli.commands] GPM A on http://example/grid/power: " in err


@pytest.fixture
def long_stream(tmp_path) -> Path:
    """Power events one second apart for 12 seconds (a run of 1.2 s at --rate 10)."""
    lines = ["@prefix : <http://example/grid/> .", "@prefix prov: <http://www.w3.org/ns/prov#> ."]
    for t in range(13):
        lines.append(f":p{t} prov:generatedAtTime {t} . :p{t} {{ :house{t} :loc :lyon ; :fare {t} . }}")
    path = tmp_path / "long.trig"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("flags, shown", [([], True), (["--progress", "never"], False), (["-q"], False),
                                          (["-q", "--progress", "always"], True)])
def test_progress_lines_when_stderr_is_not_a_terminal(capsys, monkeypatch, long_stream, flags, shown):
    monkeypatch.setattr(cli, "PROGRESS_INTERVAL", 0.3)
    status, out, err = run(capsys, "run", QUERY, "--stream", f"S1={long_stream}", "--rate", "10", *flags)
    assert status == 0
    progress = [line for line in err.splitlines() if line.startswith("spaseq: progress: ")]
    if shown:
        assert len(progress) >= 2, err
        assert " events, at " in progress[0] and " events/s" in progress[0] and "\r" not in err
    else:
        assert progress == []


def test_progress_on_a_terminal_is_one_line_rewritten(long_stream):
    import pty
    controller, terminal = pty.openpty()
    p = subprocess.Popen(SPASEQ + ["run", str(QUERY), "--stream", f"S1={long_stream}", "--rate", "10"],
                         stdout=subprocess.DEVNULL, stderr=terminal)
    os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:                 # the terminal closed with the process
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    assert p.wait(timeout=60) == 0
    text = shown.decode()
    assert "\r0 events, at -" in text or "\r1 events" in text, text
    assert text.count("\r") >= 2 and "spaseq: progress:" not in text and "spaseq: 13 events" in text


def test_pyspark_is_an_extra_of_its_own_and_of_the_tests():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("pyspark") for d in project["dependencies"])
    extras = project["optional-dependencies"]
    assert any(d.startswith("pyspark") for d in extras["spark"])
    assert any(d.startswith("pyspark") for d in extras["test"])


WITHOUT_PYSPARK = ("import sys; sys.modules['pyspark'] = None; "        # import pyspark fails, as uninstalled
                   "from spaseq_plugin.cli.commands import main; sys.exit(main(sys.argv[1:]))")


def test_without_pyspark_the_spark_commands_say_how_to_install_it(tmp_path):
    for args, what in [
            (["run", QUERY, f"--stream={STREAMS[0]}", "--engine", "spark"], "--engine spark"),
            (["kb", "load", QUICKSTART / "kb.trig", "--into", f"oxigraph:{tmp_path / 'kb'}", "--spark"],
             "spaseq kb load --spark"),
            (["kb", "materialize", QUERY, "--dump", QUICKSTART / "kb.trig", "--out", tmp_path / "blocks"],
             "spaseq kb materialize")]:
        p = subprocess.run([sys.executable, "-c", WITHOUT_PYSPARK, *map(str, args)], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 2
        assert p.stderr == f"spaseq: {what} needs PySpark, which is not installed: {INSTALL_SPARK}\n"
    assert not (tmp_path / "kb").exists() and not (tmp_path / "blocks").exists()
    readme_run = subprocess.run([sys.executable, "-c", WITHOUT_PYSPARK, "run", str(QUERY),
                                 *[f"--stream={s}" for s in STREAMS], "--kb", str(QUICKSTART / "kb.trig")],
                                capture_output=True, text=True, timeout=120)
    assert readme_run.returncode == 0 and len(readme_run.stdout.splitlines()) == 3     # needs no Spark


@pytest.mark.slow
def test_spark_prints_no_banner(tmp_path):
    p = spaseq("kb", "load", QUICKSTART / "kb.trig", "--into", f"oxigraph:{tmp_path / 'kb'}", "--spark",
               "--spark-master", "local[1]")
    assert p.returncode == 0, p.stderr
    for banner in ("Using incubator modules", "Setting default log level", "To adjust logging level"):
        assert banner not in p.stderr
    assert "spaseq: spark:" in p.stderr and "2 new triples" in p.stderr


def test_quick_loop_and_ci_run_the_documented_commands():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = ("python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/pytest"    # everything,
               " && SPASEQ_PURE=1 .venv/bin/pytest -q tests/test_engine.py tests/test_formats.py tests/test_acceptance.py")  # then pure
    assert f"\n{command}\n" in readme and ci.rstrip().endswith(command)
    assert '.venv/bin/pytest -m "not slow"' in readme


def test_missing_servers_skip_locally_and_fail_under_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="mosquitto is not installed"):
        server_unavailable("mosquitto is not installed")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"CI=true: \.ci/run should have installed it"):
        server_unavailable("mosquitto is not installed")
    for helper in ("servers.py", "brokers.py"):
        assert '"apt-get"' not in (ROOT / "tests" / helper).read_text()     # they install nothing
    assert "apt-get install" in (ROOT / ".ci" / "run").read_text()


def test_rate_manifest_help_and_select_star_order(capsys, tmp_path):
    status, out, err = run(capsys, "run", QUERY, f"--stream={STREAMS[0]}", "--rate", "abc")
    assert status == 2 and err == "spaseq: --rate abc: expected a positive number (1 = real time) or max\n"
    help_text = " ".join(spaseq("run", "--help").stdout.split())
    assert "max, the default: as fast as it can" in help_text
    assert "each N-Triples file cut into events of N triples" in help_text
    status, out, err = run(capsys, "kb", "query", QUICKSTART / "kb.trig",
                           "SELECT * WHERE { GRAPH ?g { ?s ?p ?o } }")
    assert status == 0 and out.splitlines()[0].split() == ["?g", "|", "?s", "|", "?p", "|", "?o"]
    status, out, err = run(capsys, "kb", "query", QUICKSTART / "kb.trig",
                           "SELECT ?o ?s WHERE { GRAPH ?g { ?s ?p ?o } }")
    assert out.splitlines()[0].split() == ["?o", "|", "?s"]
