"""The spaseq command as a user runs it."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from helpers import EX

SPASEQ = [sys.executable, "-m", "spaseq_plugin"]

STREAM = """@prefix : <http://example/> .
@prefix prov: <http://www.w3.org/ns/prov#> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
:e1 prov:generatedAtTime "2020-01-01T00:00:01Z"^^xsd:dateTime .
:e1 { :a1 :kind "a" . }
:e2 prov:generatedAtTime "2020-01-01T00:00:02Z"^^xsd:dateTime .
:e2 { :b1 :kind "b" ; :oops . }
:e3 prov:generatedAtTime "2020-01-01T00:00:03Z"^^xsd:dateTime .
:e3 { :b2 :kind "b" . }
"""

QUERY = """PREFIX : <http://example/>
{head}
WITHIN 1 MINUTE
FROM STREAM S <http://example.org/s>
WHERE {{ SEQ (A ; B)
  DEFINE GPM A ON S {{ ?a :kind "a" }}
  DEFINE GPM B ON S {{ ?b :kind "b" }} }}
"""


def spaseq(*args, cwd=None):
    return subprocess.run(SPASEQ + list(args), capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "s.trig").write_text(STREAM)
    (tmp_path / "select.rq").write_text(QUERY.format(head="SELECT ?a ?b"))
    (tmp_path / "construct.rq").write_text(QUERY.format(head="CONSTRUCT { ?a :before ?b }"))
    return tmp_path


def test_run_jsonl_with_a_bad_event_and_dead_letter(files):
    p = spaseq("run", "select.rq", "--stream", "S=s.trig", "--dead-letter", "dead.jsonl", cwd=files)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    assert rows == [{"time": "2020-01-01T00:00:03Z", "bindings": {
        "a": {"type": "uri", "value": "http://example/a1"}, "b": {"type": "uri", "value": "http://example/b2"}}}]
    dead = [json.loads(line) for line in (files / "dead.jsonl").read_text().splitlines()]
    assert len(dead) == 1 and dead[0]["position"].endswith("s.trig:7")
    assert "1 rejected" in p.stderr and "Traceback" not in p.stderr


def test_the_dead_letter_file_holds_at_most_its_limit(tmp_path):
    """A short prefixed name rejected as TriG with full IRIs: a long namespace makes
    the dead-letter record hundreds of times the text it came from (a disk filled
    from a small input).  Past --dead-letter-limit, rejections are only counted."""
    namespace = "http://example.org/" + "n" * 2000 + "#"
    events = "".join(f':e{t} prov:generatedAtTime {t} .\n:e{t} {{ n:a{t} n:b n:c , n:d , n:e . }}\n'
                     for t in (5, 4, 3, 2, 1))         # (each older than the one before: out of order)
    (tmp_path / "s.trig").write_text(f"@prefix : <http://example/> .\n@prefix n: <{namespace}> .\n"
                                     f"@prefix prov: <http://www.w3.org/ns/prov#> .\n{events}")
    (tmp_path / "select.rq").write_text(QUERY.format(head="SELECT ?a ?b"))
    p = spaseq("run", "select.rq", "--stream", "S=s.trig", "--dead-letter", "dead.jsonl",
               "--dead-letter-limit", "25KiB", cwd=tmp_path)
    assert p.returncode == 0 and "4 rejected (4 out-of-order)" in p.stderr, p.stderr
    written = (tmp_path / "dead.jsonl").read_text(encoding="utf-8")
    assert 0 < len(written.encode()) <= 25 << 10 and written.count("\n") == 2, len(written)
    assert p.stderr.count("further rejections are counted, not written") == 1, p.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device that is always full)")
@pytest.mark.parametrize("args, redirect, named", [
    (["--output", "/dev/full"], False, "the results to /dev/full"),
    ([], True, "the results to standard output"),
    (["--output", "out.jsonl", "--dead-letter", "/dev/full"], False, "the rejected events to /dev/full"),
    (["--output", "/dev/full", "--checkpoint", "state"], False, "the results to /dev/full"),
])
def test_an_output_that_cannot_be_written_is_named(files, args, redirect, named):
    """A full disk: one line naming the output that failed, exit status 1, no traceback."""
    with open("/dev/full", "w") as full:
        p = subprocess.run(SPASEQ + ["run", "select.rq", "--stream", "S=s.trig"] + args, cwd=files, text=True,
                           stdout=full if redirect else subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert p.returncode == 1
    assert f"spaseq: error: cannot write {named}: No space left on device" in p.stderr.splitlines()
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr


@pytest.mark.parametrize("args, said", [
    (["--output", "s.trig"], "--output s.trig: that is also --stream S=s.trig"),
    (["--dead-letter", "./s.trig"], "--dead-letter ./s.trig: that is also --stream S=s.trig"),
    (["--output", "link.trig"], "--output link.trig: that is also --stream S=s.trig"),
    (["--output", "select.rq"], "--output select.rq: that is also the query"),
    (["--output", "new.jsonl", "--dead-letter", "new.jsonl"],
     "--dead-letter new.jsonl: that is also the file of --output new.jsonl"),
])
def test_an_output_that_is_an_input_is_refused_before_anything_is_written(files, args, said):
    """Opened for writing, the output would be empty before the run reads it: a typo would erase the input."""
    (files / "link.trig").symlink_to(files / "s.trig")
    p = spaseq("run", "select.rq", "--stream", "S=s.trig", *args, cwd=files)
    assert p.returncode == 2
    assert f"spaseq: {said}: give another file" in p.stderr.splitlines()
    assert (files / "s.trig").read_text() == STREAM and "SELECT" in (files / "select.rq").read_text()
    assert not (files / "new.jsonl").exists()


def test_a_format_as_a_sink_writes_a_file_beside_the_output(files):
    """--sink csv:FILE (any output format by name) writes FILE as --format csv would; it was an
    internal error (the format's writer was given the file name as a stream)."""
    p = spaseq("run", "select.rq", "--stream", "S=s.trig", "--sink", "csv:also.csv", "--sink", "tsv:also.tsv",
               cwd=files)
    assert p.returncode == 0, p.stderr
    for fmt in ("csv", "tsv"):
        alone = spaseq("run", "select.rq", "--stream", "S=s.trig", "--format", fmt, cwd=files)
        assert (files / f"also.{fmt}").read_text() == alone.stdout
    assert len(p.stdout.splitlines()) == 1                      # (the output, in jsonl, as without sinks)
    for args, said in [
        (["--sink", "trig:x.trig"], "--sink trig:x.trig: --format trig is for CONSTRUCT queries"),
        (["--sink", "csv:s.trig"], "--sink csv:s.trig: that is also --stream S=s.trig: give another file"),
        (["--sink", "csv:x.csv", "--checkpoint", "state"], "--sink csv:x.csv: a file sink is not cut back"),
    ]:
        p = spaseq("run", "select.rq", "--stream", "S=s.trig", *args, cwd=files)
        assert p.returncode == 2 and p.stderr.startswith(f"spaseq: {said}"), p.stderr
    assert (files / "s.trig").read_text() == STREAM and not (files / "x.trig").exists()


@pytest.mark.parametrize("args, said", [
    (["-o", ""], "--output: give a file name (or - for standard output)"),     # (was standard output)
    (["--dead-letter", ""], "--dead-letter: give a file name"),
    (["--sink", "csv"], "--sink csv: give a file: --sink csv:FILE"),            # (was "No such file...")
    (["--sink", "webhook:http://"], "--sink webhook:http://: webhook http://: the URL names no host"),
    (["--stream", "S=sd", "-o", "sd/out.trig"], "--output sd/out.trig: --stream S=sd would read it as input"),
    (["--stream", "S=sd/*.trig", "-o", "sd/x.trig"], "--output sd/x.trig: --stream S=sd/*.trig would read it"),
])
def test_outputs_that_cannot_be_what_was_meant_are_usage_errors(files, args, said):
    (files / "sd").mkdir()
    (files / "sd" / "a.trig").write_text(STREAM)
    stream = [] if "--stream" in args else ["--stream", "S=s.trig"]
    p = spaseq("run", "select.rq", *stream, *args, cwd=files)
    assert p.returncode == 2 and p.stdout == "" and p.stderr.startswith(f"spaseq: {said}"), p.stderr
    assert sorted(path.name for path in (files / "sd").iterdir()) == ["a.trig"]


def test_output_dash_is_standard_output(files):
    p = spaseq("run", "select.rq", "--stream", "S=s.trig", "-o", "-", cwd=files)
    assert p.returncode == 0 and '"value": "http://example/a1"' in p.stdout, p.stderr
    assert not (files / "-").exists()          # (it was a file named "-")


@pytest.mark.parametrize("flag, value", [("--max-events", "0"), ("--max-events", "-1"), ("--idle-timeout", "-1"),
                                         ("--idle-timeout", "nan"), ("--spark-pieces", "0")])
def test_numbers_out_of_range_are_usage_errors(files, flag, value):
    """They were taken: --max-events -1 and --idle-timeout nan changed nothing, silently."""
    p = spaseq("run", "select.rq", "--stream", "S=s.trig", flag, value, cwd=files)
    assert p.returncode == 2 and f"argument {flag}: '{value}': must be" in p.stderr, p.stderr


@pytest.mark.parametrize("flag, value, said", [
    # other scripts' digits and Python's underscores: int() and float() take them, nothing else does
    ("--max-events", "\u0663", "argument --max-events: '\u0663': expected a whole number"),
    ("--max-events", "1_000", "argument --max-events: '1_000': expected a whole number"),
    ("--idle-timeout", "\u0663", "argument --idle-timeout: '\u0663': must be a number of seconds"),
    ("--service-timeout", "inf", "argument --service-timeout: 'inf': must be a number of seconds"),
    ("--max-runs", "\u00b2", "--max-runs \u00b2: expected a whole number of at least 1, or none"),  # (was internal)
    ("--rate", "1e-300", "--rate 1e-300: must be at least 1e-09"),
    ("--checkpoint-every", "-1", "argument --checkpoint-every: '-1': expected seconds"),     # (without --checkpoint)
    ("--checkpoint-every", "1e999", "argument --checkpoint-every: '1e999': expected seconds"),
])
def test_numbers_in_other_forms_are_usage_errors(files, flag, value, said):
    p = spaseq("run", "select.rq", "--stream", "S=s.trig", f"{flag}={value}", cwd=files)
    assert p.returncode == 2 and said in p.stderr, p.stderr


def test_checkpoint_every_without_checkpoint_is_a_warning(files):
    p = spaseq("run", "select.rq", "--stream", "S=s.trig", "--checkpoint-every", "5", cwd=files)
    assert p.returncode == 0
    assert "spaseq: warning: --checkpoint-every 5: without --checkpoint it changes nothing" in p.stderr


def test_a_small_state_memory_limit_is_shown_in_bytes(files):
    p = spaseq("run", "select.rq", "--stream", "S=s.trig", "--max-state-memory", "5", cwd=files)
    assert p.returncode == 3 and "reached the limit of 5 bytes (--max-state-memory)" in p.stderr, p.stderr


def test_streams_without_input_past_five_are_one_warning(files):
    """One line per stream made 999 lines for a query of 1,000 streams."""
    streams = "\n".join(f"FROM STREAM S{i} <http://example.org/s{i}>" for i in range(1, 9))
    gpms = "\n".join(f'  DEFINE GPM A{i} ON S{i} {{ ?a :kind "a" }}' for i in range(1, 9))
    (files / "many.rq").write_text(f"PREFIX : <http://example/>\nSELECT * WITHIN 1 MINUTE\n{streams}\n"
                                   f"WHERE {{ SEQ ({' ; '.join(f'A{i}' for i in range(1, 9))})\n{gpms} }}\n")
    p = spaseq("run", "many.rq", "--stream", "S1=s.trig", cwd=files)
    warnings = [line for line in p.stderr.splitlines() if "no input" in line]
    assert p.returncode == 0 and len(warnings) == 6, p.stderr
    assert warnings[-1] == "spaseq: warning: 2 more streams have no input: S7, S8"


def test_explain_svg_onto_the_query_is_refused(files):
    p = spaseq("explain", "select.rq", "--svg", "./select.rq", cwd=files)
    assert p.returncode == 2 and "spaseq: --svg ./select.rq: that is also the query: give another file" in p.stderr
    assert "SELECT" in (files / "select.rq").read_text()


def test_devices_may_be_both_outputs(files):
    p = spaseq("run", "select.rq", "--stream", "S=s.trig", "--output", "/dev/null", "--dead-letter", "/dev/null",
               cwd=files)
    assert p.returncode == 0, p.stderr


TUMBLING = """PREFIX : <http://example/>
SELECT ?a ?b
WITHIN 10 SECONDS TUMBLING
FROM STREAM S <http://example.org/s>
WHERE { SEQ (A ; B)
  DEFINE GPM A ON S { ?a :kind "a" }
  DEFINE GPM B ON S { ?b :kind "b" } }
"""


@pytest.mark.parametrize("start, said", [
    ("nan", "not a number of seconds or an xsd:dateTime: 'nan'"),       # was an internal error
    ("8_000", "not a number of seconds or an xsd:dateTime: '8_000'"),
    ("1e400", "outside the representable range"),
    ("0.0000000001", "more than 9 digits after the point"),
    ("2024-02-30T00:00:00Z", "no such day"),
])
def test_start_is_read_as_stream_timestamps_are(files, start, said):
    (files / "tumbling.rq").write_text(TUMBLING)
    p = spaseq("run", "tumbling.rq", "--stream", "S=s.trig", "--start", start, cwd=files)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("spaseq: --start: ") and said in p.stderr and repr(start) in p.stderr, p.stderr


def test_a_signal_while_the_handlers_are_set_up_is_no_traceback(files):
    """SIGTERM between the handler's installation and the watchdog's start (1 run in
    80, sent at 0.3 s) raised Terminated outside the command: a traceback."""
    script = ("import os, signal, sys\n"
              "from spaseq_plugin.cli import commands, stopping\n"
              "enter = stopping._Watchdog.__enter__\n"
              "def late(self):\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "    return enter(self)\n"
              "stopping._Watchdog.__enter__ = late\n"
              "sys.exit(commands.main(sys.argv[1:]))\n")
    p = subprocess.run([sys.executable, "-c", script, "run", "select.rq", "--stream", "S=s.trig"], cwd=files,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 128 + signal.SIGTERM and p.stderr == "spaseq: terminated (SIGTERM)\n", p.stderr


@pytest.mark.parametrize("importing", ["spaseq_plugin.cli.commands", "rdflib", "pyoxigraph",
                                       "spaseq_plugin.runtime.engine", "spaseq_plugin.output.writer"])
def test_a_signal_while_the_command_imports_is_a_stop(files, importing):
    """SIGTERM in the first third of a second, while the command imported rdflib and
    pyoxigraph, had its default action: the process ended at once (status -15 to its
    parent), without a word.  Sent here as ``importing`` is about to be imported."""
    script = ("import os, runpy, signal, sys\n"
              "importing = sys.argv.pop(1)\n"
              "class Stop:\n"
              "    def find_spec(self, name, path=None, target=None):\n"
              "        if name == importing:\n"
              "            sys.meta_path.remove(self)\n"
              "            os.kill(os.getpid(), signal.SIGTERM)\n"
              "sys.meta_path.insert(0, Stop())\n"
              "runpy.run_module('spaseq_plugin', run_name='__main__')\n")
    p = subprocess.run([sys.executable, "-c", script, importing, "run", "select.rq", "--stream", "S=s.trig"],
                       cwd=files, capture_output=True, text=True, timeout=60)
    assert p.returncode == 128 + signal.SIGTERM and p.stderr == "spaseq: terminated (SIGTERM)\n", p.stderr


def test_an_empty_start_is_an_error_not_no_start(files):
    (files / "tumbling.rq").write_text(TUMBLING)
    p = spaseq("run", "tumbling.rq", "--stream", "S=s.trig", "--start=", cwd=files)
    assert p.returncode == 2 and p.stdout == ""
    assert "spaseq: --start: not a number of seconds or an xsd:dateTime: ''\n" in p.stderr, p.stderr


@pytest.mark.parametrize("engine", ["stream", "spark"])
def test_a_start_of_the_other_kind_of_time_is_an_error(files, engine):
    """A number of seconds is a time near 1970 on a dateTime stream, and a dateTime
    millions of seconds past a stream of small numbers: either start silently gave
    no result (every event before it, or every window empty)."""
    (files / "tumbling.rq").write_text(TUMBLING)
    p = spaseq("run", "tumbling.rq", "--stream", "S=s.trig", "--start", "5", "--engine", engine, cwd=files)
    assert p.returncode == 2 and p.stdout == "", p.stderr
    assert ("spaseq: start 5 is a number of seconds, but the first event of the stream set (at s.trig"
            in p.stderr), p.stderr
    assert "is timed by an xsd:dateTime: give the start as the stream's timestamps are written" in p.stderr


@pytest.mark.parametrize("engine", ["stream", "spark"])
def test_the_summary_counts_the_events_before_the_start(files, engine):
    (files / "tumbling.rq").write_text(TUMBLING)
    p = spaseq("run", "tumbling.rq", "--stream", "S=s.trig", "--start", "2020-01-01T00:00:02Z",
               "--engine", engine, cwd=files)
    assert p.returncode == 0, p.stderr
    assert "; 1 before --start; " in p.stderr, p.stderr


def test_start_on_a_query_without_tumbling_windows_is_a_warning(files):
    p = spaseq("run", "select.rq", "--stream", "S=s.trig", "--start", "5", cwd=files)
    assert p.returncode == 0
    assert "spaseq: warning: --start 5: the query has no TUMBLING window; --start changes nothing" in p.stderr


@pytest.mark.parametrize("fmt, expected", [
    ("csv", "time,a,b\n2020-01-01T00:00:03Z,http://example/a1,http://example/b2\n"),  # CRLF, read as text
    ("tsv", '?time\t?a\t?b\n"2020-01-01T00:00:03Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>'
            "\t<http://example/a1>\t<http://example/b2>\n"),
])
def test_delimited_formats(files, fmt, expected):
    p = spaseq("run", "select.rq", "--stream", "S=s.trig", "--format", fmt, "-q", cwd=files)
    assert p.stdout == expected


def test_sparql_json_results(files):
    p = spaseq("run", "select.rq", "--stream", "S=s.trig", "--format", "json", "-q", cwd=files)
    doc = json.loads(p.stdout)
    assert doc["head"]["vars"] == ["time", "a", "b"]
    assert doc["results"]["bindings"][0]["b"]["value"] == "http://example/b2"


def test_construct_output_feeds_another_query(files):
    p = spaseq("run", "construct.rq", "--stream", "S=s.trig", "-o", "out.trig", "-q", cwd=files)
    assert p.returncode == 0, p.stderr
    (files / "again.rq").write_text("""PREFIX : <http://example/>
        SELECT ?x ?y WITHIN 1 MINUTE FROM STREAM R <http://example.org/r>
        WHERE { SEQ (A) DEFINE GPM A ON R { ?x :before ?y } }""")
    p = spaseq("run", "again.rq", "--stream", "R=out.trig", cwd=files)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    assert [(r["time"], r["bindings"]["y"]["value"]) for r in rows] == [
        ("2020-01-01T00:00:03Z", "http://example/b2")]


def test_query_error_exits_2_with_position(files):
    (files / "bad.rq").write_text(QUERY.format(head="SELECT ?a").replace("SEQ (A ; B)", "SEQ (A ; C)"))
    p = spaseq("run", "bad.rq", "--stream", "S=s.trig", cwd=files)
    assert p.returncode == 2
    assert "line 5, column 18" in p.stderr and "C" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("args, words", [
    (["run", "select.rq", "--stream", "X=s.trig"], "no stream X"),
    (["run", "select.rq", "--stream", "S=missing.trig"], "no such file"),
    (["run", "select.rq"], "no input"),
    (["run", "missing.rq", "--stream", "S=s.trig"], "cannot read query"),
])
def test_usage_errors_exit_2(files, args, words):
    p = spaseq(*args, cwd=files)
    assert p.returncode == 2 and words in p.stderr and "Traceback" not in p.stderr


def test_an_error_line_keeps_its_start_and_end(files):
    """A location of 70,000 characters was named twice in its error: a line of 140 KB."""
    p = spaseq("run", "select.rq", "--stream", "S=mqtt://127.0.0.1:1/" + "x" * 70000, cwd=files)
    line = p.stderr.strip()
    assert p.returncode == 2 and "\n" not in line and len(line) < 2100, len(line)
    assert line.startswith("spaseq: --stream S=mqtt://127.0.0.1:1/xxx") and "characters ...]" in line
    assert line.endswith("topic must be at most 65535 bytes of UTF-8, without NUL"), line[-200:]


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero (a file without end)")
@pytest.mark.parametrize("args, words", [
    (["run", "/dev/zero", "--stream", "S=s.trig"], "cannot read query /dev/zero: longer than 16 MiB"),
    (["explain", "/dev/zero"], "cannot read query /dev/zero: longer than 16 MiB"),
    (["run", "select.rq", "--manifest", "/dev/zero"], "manifest longer than 16,777,216 characters"),
])
def test_a_query_or_manifest_without_end_is_refused(files, args, words):
    """Read whole into memory: /dev/zero filled 24 GB, and the kernel killed the run."""
    p = spaseq(*args, cwd=files)
    assert p.returncode == 2 and words in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_explain_text_and_dot(files):
    p = spaseq("explain", "select.rq", cwd=files)
    assert "x0 [start]" in p.stdout and "skip-till-next" in p.stdout and "window: 60 s" in p.stdout
    p = spaseq("explain", "select.rq", "--dot", cwd=files)
    assert p.stdout.startswith("digraph nfa_scep {") and "x1 -> x2" in p.stdout


def test_explain_draws_an_svg(files):
    p = spaseq("explain", "select.rq", "--svg", "nfa.svg", cwd=files)
    assert p.returncode == 0, p.stderr
    svg = (files / "nfa.svg").read_text()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert svg.count("<circle") == 4          # x0, x1, and x2 accepting (two rings)
    assert "A ;" in svg and "B ;" in svg


def _started_run(folder, text: str, awaited: str, *args: str, **popen):
    """``spaseq run`` of the select query on standard input into out.jsonl, given
    ``text`` and waiting for more, once its output file holds ``awaited``."""
    (folder / "select.rq").write_text(QUERY.format(head="SELECT ?a ?b"))
    process = subprocess.Popen(SPASEQ + ["run", "select.rq", "--stream", "S=-", "-o", "out.jsonl", *args],
                               cwd=folder, stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    process.stdin.write(text)
    process.stdin.flush()
    deadline = time.monotonic() + 60
    out = folder / "out.jsonl"
    while time.monotonic() < deadline and not (out.exists() and awaited in out.read_text()):
        time.sleep(0.02)
    assert process.poll() is None and awaited in out.read_text()
    return process


def _live_run(folder, **popen):
    """The events of times 1 to 4, once their result (a1 b1) is out."""
    return _started_run(folder, STREAM.replace(" ; :oops", "") + ':e4 prov:generatedAtTime '
                        '"2020-01-01T00:00:04Z"^^xsd:dateTime .\n:e4 { :c1 :kind "c" . }\n', "b1", **popen)


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_run_stopped_by_a_signal_closes_its_output_and_says_so(tmp_path, sig, status):
    """SIGTERM (a service manager stopping the run) and SIGHUP (a closed terminal) stop
    it as Ctrl-C does: the output closed whole, the summary printed, 128 + the signal's
    number as exit status.  Their default action ended the process at once."""
    # (the run starts with the signal's default action whatever the suite inherited: under
    # nohup SIGHUP comes ignored, and a run keeps an ignored SIGHUP ignored, as tested below)
    process = _live_run(tmp_path, preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
    process.send_signal(sig)
    returned = process.wait(timeout=60)
    err = process.stderr.read()
    assert returned == status and f"spaseq: terminated ({sig.name}) after 4 events" in err \
        and "Traceback" not in err, (returned, err)
    text = (tmp_path / "out.jsonl").read_text()
    assert text.endswith("\n") and json.loads(text)["bindings"]["b"]["value"] == "http://example/b1"
    process.stdin.close()


def test_a_sighup_ignored_when_the_run_started_stays_ignored(tmp_path):
    """Under nohup the run goes on after SIGHUP, to the end of its input."""
    process = _live_run(tmp_path, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    process.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert process.poll() is None
    process.stdin.close()
    assert process.wait(timeout=60) == 0, process.stderr.read()


def _paced_live_run(folder, pause: int = 0, *extra: str):
    """Replayed at twice its pace (``--rate 2``: half a second between events), the
    events a1 b2 a3 b4 (a3 ``pause`` seconds more after b2) and the first half of an
    event a5, once the result of a1 b2 is out."""
    def time_of(t):
        seconds = t + (pause if t > 2 else 0)
        return f'"2020-01-01T00:{seconds // 60:02d}:{seconds % 60:02d}Z"^^xsd:dateTime'

    prefixes = "".join(line + "\n" for line in STREAM.splitlines() if line.startswith("@prefix"))
    events = "".join(f':e{t} prov:generatedAtTime {time_of(t)} .\n:e{t} {{ :{kind}{t} :kind "{kind}" . }}\n'
                     for t, kind in ((1, "a"), (2, "b"), (3, "a"), (4, "b")))
    half = f':e5 prov:generatedAtTime {time_of(5)} .\n:e5 {{ :a5 :kind '
    return _started_run(folder, prefixes + events + half, "b2", "--rate", "2", "--dead-letter", "dead.jsonl",
                        *extra)


@pytest.mark.parametrize("sig, status, said", [(signal.SIGTERM, 143, "terminated (SIGTERM)"),
                                               (signal.SIGINT, 130, "interrupted")])
def test_a_signal_stops_a_live_run_once_what_it_received_is_evaluated(tmp_path, sig, status, said):
    """The events a live source had received and the engine not yet taken were dropped
    without a word, and so was the event a sender had half sent.  Now the first signal
    makes the input stop reading: a3 and b4 are evaluated (their result is written),
    the half-sent a5 is rejected as truncated, and the run stops there."""
    process = _paced_live_run(tmp_path)
    started = time.monotonic()
    process.send_signal(sig)
    returned = process.wait(timeout=60)
    err = process.stderr.read()
    assert returned == status and "Traceback" not in err, (returned, err)
    assert time.monotonic() - started < 10
    rows = [json.loads(line)["bindings"] for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [(row["a"]["value"], row["b"]["value"]) for row in rows] == \
        [("http://example/a1", "http://example/b2"), ("http://example/a3", "http://example/b4")]
    assert "stopping: evaluating what the live input received (the same signal again stops at once)" in err
    assert f"spaseq: {said} after 4 events" in err and "1 rejected (1 truncated)" in err, err
    dead = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert [(d["reason"], d["error"], d["text"]) for d in dead] == \
        [("truncated", f"the run was stopped ({sig.name}): the text from line 13 on is lost", ":e5 { :a5 :kind ")]


@pytest.mark.parametrize("how", ["signal again", "--stop-timeout"])
def test_a_second_signal_or_the_stop_timeout_stops_a_live_run_at_once(tmp_path, how):
    """Evaluating what was received can take long (here the replay's pace: half a
    minute before a3): the same signal again, or ``--stop-timeout``, stops the run
    where it is."""
    process = _paced_live_run(tmp_path, 60, *(["--stop-timeout", "1"] if how == "--stop-timeout" else []))
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    if how == "signal again":
        time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
    returned = process.wait(timeout=60)
    err = process.stderr.read()
    assert returned == 143 and "Traceback" not in err, (returned, err)
    assert time.monotonic() - started < 5
    assert "spaseq: terminated (SIGTERM) after 2 events" in err, err
    assert ("took more than 1 s (--stop-timeout)" in err) == (how == "--stop-timeout"), err
    assert (tmp_path / "out.jsonl").read_text().count("\n") == 1


@pytest.mark.parametrize("files_too", [False, True])
def test_a_stopped_run_lets_go_of_an_output_nobody_reads(tmp_path, files_too):
    """Results to a pipe whose reader stopped reading: after SIGTERM and the stop
    timeout, closing that output waited for ever (and so did Python's exit, flushing
    it).  Now it gets what is left of the timeout, at least a second, and the run ends
    with its summary; an output that takes what it is given (a file) loses nothing."""
    (tmp_path / "q.rq").write_text(f"""PREFIX : <{EX}>
SELECT ?p1 ?p2 WITHIN 100 SECONDS FROM STREAM S <{EX}s>
WHERE {{ SEQ (A : B) DEFINE GPM A ON S {{ ?x :price ?p1 }} DEFINE GPM B ON S {{ ?x :price ?p2 }} }}""")
    sink = ["--sink", f"csv:{tmp_path / 'also.csv'}"] if files_too else []
    process = subprocess.Popen(SPASEQ + ["run", "q.rq", "--stream", "S=-", "--stop-timeout", "1", *sink],
                               cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    head = f"@prefix : <{EX}> .\n@prefix prov: <http://www.w3.org/ns/prov#> .\n".encode()
    process.stdin.write(head + b"".join(f":g{t} {{ :s :price {t} }} :g{t} prov:generatedAtTime {t} .\n".encode()
                                        for t in range(1, 400)))
    process.stdin.flush()               # 400 events: some 80,000 results, more than a pipe holds
    time.sleep(3)
    assert process.poll() is None
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        returned = process.wait(timeout=30)
    finally:
        process.kill()
        process.stdin.close()
    err = process.stderr.read().decode()
    assert returned == 143 and "Traceback" not in err, (returned, err)
    assert time.monotonic() - started < 5
    assert "an output took nothing for 1 s after the stop: what it had not taken is dropped" in err, err
    assert "spaseq: terminated (SIGTERM) after" in err
    if files_too:
        count = int(re.search(r"(\d[\d,]*) results", err).group(1).replace(",", ""))
        assert (tmp_path / "also.csv").read_text().count("\n") == count + 1


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_run_held_in_an_oxigraph_evaluation_stops_at_the_stop_timeout(tmp_path, sig, status):
    """A GPM that Oxigraph evaluates (OPTIONAL keeps it off the fast path) over an event
    of 20,000 edges into a hub and 20,000 out of it tries 400 million pairs, minutes.
    Python runs signal handlers only between its own instructions, so SIGTERM and
    Ctrl-C waited for the evaluation to end.  Now a run that has not taken a signal
    within --stop-timeout is stopped at once, saying where it was held."""
    edges = "".join(f"<{EX}a{i}> <{EX}p> <{EX}hub> . <{EX}hub> <{EX}p> <{EX}b{i}> .\n" for i in range(20_000))
    (tmp_path / "s.trig").write_text(f"<{EX}e1> <http://www.w3.org/ns/prov#generatedAtTime> 1 .\n"
                                     f"<{EX}e1> {{\n{edges}}}\n")
    (tmp_path / "q.rq").write_text(
        f"SELECT * WITHIN 10 SECONDS FROM STREAM S <{EX}s> WHERE {{ SEQ (A)\n DEFINE GPM A ON S {{ "
        f"?x <{EX}p> ?y . ?y <{EX}p> ?z OPTIONAL {{ ?z <{EX}q> ?w }} FILTER(STR(?x) = STR(?z)) }} }}")
    process = subprocess.Popen(SPASEQ + ["run", "q.rq", "--stream", "S=s.trig", "--stop-timeout", "1",
                                         "--progress", "always"],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The progress line counts the one event once it is read, and the input's end
        # then sets the evaluation off; the line comes every 5 s, from a thread that
        # Oxigraph's evaluation does not hold up.
        lines = []
        for line in process.stderr:
            lines.append(line)
            if "progress: 1 events" in line:
                break
        time.sleep(0.5)
        started = time.monotonic()
        process.send_signal(sig)
        returned = process.wait(timeout=30)
    finally:
        process.kill()
    err = "".join(lines) + process.stderr.read()
    assert returned == status and "Traceback" not in err, (returned, err)
    assert time.monotonic() - started < 4
    assert f"spaseq: stopped at once ({sig.name}): the run did not take the signal within 1 s " \
        "(--stop-timeout), held in a call that does not return to Python (in " in err, err
    assert "oxigraph.py:" in err.splitlines()[-1] and "what it had not written is lost" in err


@pytest.mark.parametrize("flag", ["--stop-timeout", "--idle-timeout"])
def test_a_wait_longer_than_the_system_counts_is_a_usage_error(files, flag):
    """``--stop-timeout 1e300`` raised OverflowError in the thread that waits it out:
    a traceback on stderr (waits.py)."""
    p = spaseq("run", "select.rq", "--stream", "S=s.trig", flag, "1e300", cwd=files)
    assert p.returncode == 2 and f"argument {flag}: '1e300': must be a number of seconds more than 0, " \
        "at most 1e+09" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_live_input_that_sends_nothing_still_gets_progress_lines(tmp_path):
    """The progress line came only as items were read: a quiet live input showed none."""
    import selectors
    (tmp_path / "select.rq").write_text(QUERY.format(head="SELECT ?a ?b"))
    process = subprocess.Popen(SPASEQ + ["run", "select.rq", "--stream", "S=-", "--progress", "always"],
                               cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    try:
        selector = selectors.DefaultSelector()
        selector.register(process.stderr, selectors.EVENT_READ)
        assert selector.select(timeout=30), "no progress line while the input stays quiet"
        assert process.stderr.readline().startswith("spaseq: progress: 0 events")
        assert process.poll() is None
    finally:
        process.stdin.close()
        process.wait(timeout=60)
    assert process.returncode == 0


def test_results_go_out_at_once_to_a_terminal_and_in_blocks_to_a_file(tmp_path):
    # Stream files read into a file or a pipe: the writers flush when their buffers
    # fill.  A terminal is watched by a person, a live input's reader waits: each
    # result goes out as soon as it is final.
    import pty
    from spaseq_plugin.cli.commands import _results_awaited
    from spaseq_plugin.output.writer import NamedOutput
    main_end, terminal_end = pty.openpty()
    try:
        with open(terminal_end, "w", closefd=False) as terminal, open(tmp_path / "out.jsonl", "w") as file:
            assert _results_awaited(False, NamedOutput(terminal, "the results to a terminal"))
            assert not _results_awaited(False, NamedOutput(file, "the results to out.jsonl"))
            assert _results_awaited(True, NamedOutput(file, "the results to out.jsonl"))
            file.close()
            assert not _results_awaited(False, NamedOutput(file, "the results to out.jsonl"))
    finally:
        os.close(main_end)
        os.close(terminal_end)


def test_staged_files_appear_whole_and_leave_devices_alone(tmp_path):
    """--engine spark's files (``StagedFiles``): FILE.partial until committed; a symbolic link
    keeps pointing at its file, which is replaced; /dev/null is written directly."""
    from spaseq_plugin.output.writer import StagedFiles
    (tmp_path / "real.jsonl").write_text("old\n")
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "real.jsonl")
    staged = StagedFiles()
    with staged.open(str(tmp_path / "link.jsonl")) as f:
        f.write("new\n")
    with staged.open(os.devnull) as f:
        f.write("dropped\n")
    assert (tmp_path / "real.jsonl").read_text() == "old\n"
    assert (tmp_path / "real.jsonl.partial").read_text() == "new\n"
    staged.commit()
    assert (tmp_path / "link.jsonl").is_symlink() and (tmp_path / "real.jsonl").read_text() == "new\n"
    assert not (tmp_path / "real.jsonl.partial").exists() and os.path.exists(os.devnull)
    with staged.open(str(tmp_path / "other.csv")) as f:
        f.write("x\n")
    assert staged.discard() == [str(tmp_path / "other.csv")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.jsonl", "real.jsonl"]
