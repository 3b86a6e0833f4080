"""Checkpoints (docs/checkpoints.md): a run killed with SIGKILL at random moments
and started again ends with the output and dead-letter files of the run that
was never killed, byte for byte; damaged, foreign and newer checkpoints and
standard input are refused or skipped with clear messages."""

import gzip
import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spaseq_plugin import Engine, Event
from spaseq_plugin.runtime.checkpoint import CURRENT, PREVIOUS, SnapshotReader, SnapshotWriter
from spaseq_plugin.streams.files import merge_streams, open_stream

SPASEQ = [sys.executable, "-m", "spaseq_plugin"]
S, T = "http://ex/s", "http://ex/t"

PREFIXES = "PREFIX : <http://ex/>\n"

# Every operator: Kleene+, negation in the middle and trailing, conjunction,
# PARTITION BY, TUMBLING, CONSTRUCT, DISTINCT and aggregates; the three strategies.
QUERIES = {
    "kleene-partition-negation": PREFIXES + """
SELECT ?a ?b ?c ?k (COUNT(?b) AS ?n) WITHIN 12 SECONDS
FROM STREAM S <http://ex/s>
PARTITION BY ?k
WHERE {
  SEQ (A ; B+ : N! ; C)
  DEFINE GPM A ON S { ?a :kind "a" ; :key ?k ; :v ?va . }
  DEFINE GPM B ON S { ?b :kind "b" ; :key ?k . }
  DEFINE GPM N ON S { ?n :kind "n" ; :key ?k ; :v ?vn . FILTER(?vn > 90) }
  DEFINE GPM C ON S { ?c :kind "c" ; :key ?k . }
}""",
    "conjunction-trailing-negation": PREFIXES + """
SELECT DISTINCT ?a ?c ?d WITHIN 8 SECONDS
FROM STREAM S <http://ex/s>
FROM STREAM T <http://ex/t>
WHERE {
  SEQ (A : (C & D) ; N!)
  DEFINE GPM A ON S { ?a :kind "a" ; :v ?va . }
  DEFINE GPM C ON S { ?c :kind "c" ; :v ?vc . FILTER(?vc > ?va) }
  DEFINE GPM D ON T { ?d :kind "b" . }
  DEFINE GPM N ON T { ?n :kind "n" ; :v ?vn . FILTER(?vn < 20) }
}""",
    "tumbling-construct-strict": PREFIXES + """
CONSTRUCT { ?a :then ?b . ?b :key ?k . [] :from ?a ; :to ?b . }
WITHIN 10 SECONDS TUMBLING
FROM STREAM S <http://ex/s>
FROM STREAM T <http://ex/t>
WHERE {
  SEQ (A , B ; C ; N!)
  DEFINE GPM A ON S { ?a :kind "a" ; :key ?k . }
  DEFINE GPM B ON S, T { ?b :kind "b" . }
  DEFINE GPM C ON T { ?c :kind "c" ; :key ?k . }
  DEFINE GPM N ON S { ?n :kind "c" ; :key ?k . }
}""",
    "kleene-any-sum": PREFIXES + """
SELECT ?a ?k (SUM(?v) AS ?total) (COUNT(?b) AS ?n) WITHIN 6 SECONDS
FROM STREAM S <http://ex/s>
FROM STREAM T <http://ex/t>
PARTITION BY ?k
WHERE {
  SEQ (A : B+ ; C)
  DEFINE GPM A ON S { ?a :kind "a" ; :key ?k . }
  DEFINE GPM B ON S, T { ?b :kind "b" ; :key ?k ; :v ?v . }
  DEFINE GPM C ON T { ?c :kind "c" ; :key ?k . }
}""",
}


def _event(stream: str, t: int, rnd: random.Random) -> str:
    kind = rnd.choice("abcn" if stream == "s" else "bbcn")
    g = f":{stream}{t}"
    return (f'{g} prov:generatedAtTime {t} .\n'
            f'{g} {{ :x{stream}{t} :kind "{kind}" ; :key :k{rnd.randrange(4)} ; :v {rnd.randrange(100)} . }}\n')


def write_streams(folder: Path, events: int, seed: int) -> dict[str, str]:
    """Stream S in two files (odd times in a TriG file, even ones gzipped) read as
    a glob, stream T in one file; each with a few bad statements (rejections for
    the dead-letter file)."""
    rnd = random.Random(seed)
    head = "@prefix : <http://ex/> .\n@prefix prov: <http://www.w3.org/ns/prov#> .\n"
    odd, even, t_text = [head], [head], [head]
    for t in range(1, events + 1):
        (odd if t % 2 else even).append(_event("s", t, rnd))
        t_text.append(_event("t", t, rnd))
        if t % 997 == 0:
            odd.append(":bad { :x :kind . }\n")              # a syntax error
            t_text.append(f":late prov:generatedAtTime {t - 50} .\n:late {{ :x :kind \"a\" . }}\n")
    (folder / "s").mkdir()
    (folder / "s" / "odd.trig").write_text("".join(odd))
    with gzip.open(folder / "s" / "even.trig.gz", "wt") as f:
        f.write("".join(even))
    (folder / "t.trig").write_text("".join(t_text))
    return {"S": str(folder / "s" / "*.trig*"), "T": str(folder / "t.trig")}


def command(query: Path, streams: dict[str, str], out: Path, dead: Path, *extra: str) -> list[str]:
    text = query.read_text()
    args = SPASEQ + ["run", str(query), "-o", str(out), "--dead-letter", str(dead), "-q"]
    for alias, location in streams.items():
        if f"STREAM {alias} " in text:
            args += ["--stream", f"{alias}={location}"]
    return args + list(extra)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("streams")
    return write_streams(folder, 3000, 7)


def _wait_for_output(process, path: Path, size: int, deadline: float) -> None:
    while process.poll() is None and time.monotonic() < deadline:
        if path.exists() and path.stat().st_size >= size:
            return
        time.sleep(0.002)


def kill_and_resume(name: str, seed: int, inputs: dict, tmp_path: Path, kills: int) -> tuple[int, int, int]:
    """The run of ``name`` killed ``kills`` times (after a random delay, or once the
    output has a random length), then run to its end: both files as the
    uninterrupted run's.  Returns the kills that hit a running process, those
    after which the run resumed from a checkpoint, and the results compared."""
    rnd = random.Random(seed)
    query = tmp_path / f"{name}.rq"
    query.write_text(QUERIES[name])
    expected_out, expected_dead = tmp_path / "expected.out", tmp_path / "expected.dead"
    started = time.monotonic()
    subprocess.run(command(query, inputs, expected_out, expected_dead), check=True, timeout=120)
    duration = time.monotonic() - started
    final = expected_out.stat().st_size
    out, dead, directory = tmp_path / "out", tmp_path / "dead", tmp_path / "checkpoints"
    every = rnd.choice(["25events", "100events", "400events", "20ms"])
    args = command(query, inputs, out, dead, "--checkpoint", str(directory), "--checkpoint-every", every)
    hits = resumed = 0
    for _ in range(kills):
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if rnd.random() < 0.5:
            time.sleep(rnd.uniform(0.2, duration + 0.2))
        else:
            _wait_for_output(process, out, rnd.randrange(1, max(final, 2)), time.monotonic() + duration + 5)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            hits += 1
            resumed += (directory / CURRENT).exists()
        process.wait(timeout=60)
        process.stderr.close()
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == expected_out.read_bytes(), f"{name}, seed {seed}, every {every}"
    assert dead.read_bytes() == expected_dead.read_bytes()
    return hits, resumed, expected_out.read_text().count("\n")


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_killed_runs_end_with_the_uninterrupted_output(name, inputs, tmp_path):
    hits, _, lines = kill_and_resume(name, 1, inputs, tmp_path, kills=3)
    assert lines > 10                       # the query finds something to compare
    assert hits >= 1                        # at least one kill landed in a running process


# More seeds: SPASEQ_KILL_SEEDS=50 pytest tests/test_checkpoint.py -k many_seeds
KILL_SEEDS = int(os.environ.get("SPASEQ_KILL_SEEDS", "2"))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2, 2 + KILL_SEEDS))
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_killed_runs_many_seeds(name, seed, inputs, tmp_path):
    kill_and_resume(name, seed, inputs, tmp_path, kills=2 + seed % 2)


# -- the Python API ---------------------------------------------------------

def _items(inputs: dict, text: str) -> list:
    sources = [open_stream(inputs[alias], iri) for alias, iri in (("S", S), ("T", T))
               if f"STREAM {alias} " in text]
    return list(merge_streams(sources))


def _shown(results) -> list:
    return [(r.time, sorted((k, str(v)) for k, v in (r.bindings or {}).items()),
             sorted(str(t) for t in r.triples or ()), r.graph and str(r.graph)) for r in results]


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_an_engine_restored_anywhere_goes_on_as_the_original(name, inputs):
    """Engine.snapshot() through JSON text, restored into a new engine at many points
    of the input: the results are the same, in the same order."""
    text = QUERIES[name]
    items = _items(inputs, text)[:2500]

    def run(cut: int | None) -> list:
        engine, out = Engine(text), []
        for number, item in enumerate(items):
            if number == cut and engine.can_snapshot:
                snapshot = json.loads(json.dumps(engine.snapshot()))
                engine = Engine(text)
                engine.restore(snapshot)
            if isinstance(item, Event):
                out += engine.push_event(item)
            else:
                engine.reject(item)
        return _shown(out + engine.close())

    expected = run(None)
    assert expected
    for cut in range(1, len(items), 97):
        assert run(cut) == expected, cut


def test_terms_and_events_survive_the_tables():
    """Literals with languages, datatypes, escapes; blank nodes keep their labels;
    triple terms; decimal times."""
    import pyoxigraph as ox
    from decimal import Decimal
    terms = [ox.NamedNode("http://ex/a"), ox.BlankNode("b1"), ox.Literal("x\n\"y\"\\", language="en"),
             ox.Literal("1.50", datatype=ox.NamedNode("http://www.w3.org/2001/XMLSchema#decimal")),
             ox.Triple(ox.NamedNode("http://ex/s"), ox.NamedNode("http://ex/p"), ox.Literal("o"))]
    event = Event(S, Decimal("1.25"), tuple(ox.Triple(ox.NamedNode("http://ex/s"), ox.NamedNode("http://ex/p"), t)
                                            for t in terms), ox.BlankNode("g"), "f:1", False)
    out = SnapshotWriter()
    refs = [out.term(t) for t in terms]
    ref = out.event(event)
    back = SnapshotReader(json.loads(json.dumps(out.tables())))
    assert [back.term(r) for r in refs] == terms
    again = back.event(ref)
    assert (again.stream, again.time, again.triples, again.name, again.position) == \
        (event.stream, event.time, event.triples, event.name, event.position)


KLEENE_ANY = PREFIXES + """SELECT ?a ?b FROM STREAM S <http://ex/s> WITHIN 100 SECONDS
WHERE { SEQ (A : B+ : C)
  DEFINE GPM A ON S { ?x :kind "a" ; :v ?a }
  DEFINE GPM B ON S { ?y :kind "b" ; :v ?b }
  DEFINE GPM C ON S { ?z :kind "c" } }"""


def _kleene_engine() -> Engine:
    """``A : B+`` under skip-till-any after one A and 12 Bs: 4,096 runs, which
    share the A's bindings as their base and each B's bindings as an iteration."""
    import pyoxigraph as ox
    engine = Engine(KLEENE_ANY)
    kind, value = ox.NamedNode("http://ex/kind"), ox.NamedNode("http://ex/v")
    for t in range(13):
        e = ox.NamedNode(f"http://ex/e{t}")
        engine.push_event(Event(S, t, (ox.Triple(e, kind, ox.Literal("b" if t else "a")),
                                       ox.Triple(e, value, ox.Literal(str(t))))))
    engine.push_event(Event(S, 13, ()))
    return engine


def _bindings(engine: Engine) -> tuple[int, int, int]:
    """(runs, distinct base mappings, distinct iteration mappings) by identity."""
    runs = [run for part in engine.runtime.partitions.values() for _, run in part.ages.entries()]
    bases = {id(run.base_mu) for run in runs if run.base_mu is not None}
    iterations = {id(m) for run in runs for _, its in run.iterations for m in its}
    return len(runs), len(bases), len(iterations)


def test_a_restored_runtime_shares_the_bindings_the_saved_one_shared():
    """Each mapping is written once however many runs hold it, and read back as one
    object: a restored runtime of 4,096 Kleene runs had a copy of each binding per
    run, more memory than --max-state-memory counted (it counts them shared)."""
    engine = _kleene_engine()
    saved = _bindings(engine)
    assert saved[0] == 4096 and saved[1] == 1 and saved[2] == 12
    snapshot = json.loads(json.dumps(engine.snapshot()))
    assert len(snapshot["tables"]["mappings"]) < 5000
    restored = Engine(KLEENE_ANY)
    restored.restore(snapshot)
    assert _bindings(restored) == saved
    assert restored.runtime.state_bytes == engine.runtime.state_bytes


def test_a_version_1_snapshot_with_mappings_written_in_place_is_read():
    """Checkpoints written before the mappings table hold each mapping where it is
    used: they are restored, and go on as the original."""
    engine = _kleene_engine()
    snapshot = json.loads(json.dumps(engine.snapshot()))
    table = snapshot["tables"].pop("mappings")
    runtime = snapshot["engine"]["runtime"]
    for run in runtime["runs"]:
        run[1] = table[run[1]]
        run[2] = None if run[2] is None else table[run[2]]
        run[6] = [[atom, [table[m] for m in its]] for atom, its in run[6]]
    restored = Engine(KLEENE_ANY)
    restored.restore(snapshot)
    assert _bindings(restored)[0] == 4096
    import pyoxigraph as ox
    last = Event(S, 14, (ox.Triple(ox.NamedNode("http://ex/c"), ox.NamedNode("http://ex/kind"), ox.Literal("c")),))
    expected = _shown(engine.push_event(last) + engine.close())
    assert len(expected) == 4095
    assert _shown(restored.push_event(last) + restored.close()) == expected


# -- refusals and damaged checkpoints ------------------------------------------

@pytest.fixture
def small(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    streams = write_streams(folder, 400, 3)
    query = tmp_path / "q.rq"
    query.write_text(QUERIES["kleene-partition-negation"])
    return query, streams, tmp_path


def _run(args, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, timeout=120, **kwargs)


def _checkpointed(small, *extra):
    query, streams, tmp_path = small
    return command(query, streams, tmp_path / "out", tmp_path / "dead", "--checkpoint",
                   str(tmp_path / "cp"), *extra)


def test_a_finished_run_started_again_has_nothing_to_do(small):
    args = _checkpointed(small)
    assert _run(args).returncode == 0
    out = small[2] / "out"
    before = out.read_bytes()
    again = subprocess.run([a for a in args if a != "-q"], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0
    assert "nothing to do" in again.stderr
    assert out.read_bytes() == before


def test_a_directory_in_use_by_a_run_is_refused_until_that_run_is_killed(small):
    """Two runs of one command on one directory wrote the output twice, interleaved (114,965
    lines for 114,576 results); the lock goes with the process, kill -9 included."""
    args = _checkpointed(small, "--rate", "1")             # (real time: it runs for minutes)
    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        lock = small[2] / "cp" / "lock"
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        second = _run(args)
        assert second.returncode == 2
        assert f"another run uses it (process {first.pid})" in second.stderr, second.stderr
    finally:
        first.kill()
        first.wait()
    third = _run(args[:args.index("--rate")] + args[args.index("--rate") + 2:])
    assert third.returncode == 0, third.stderr


def _unfinished(small) -> Path:
    """A checkpoint directory whose current checkpoint is not the last (finished) one:
    the final one is dropped, so that the previous becomes current."""
    args = _checkpointed(small, "--checkpoint-every", "50events")
    assert _run(args).returncode == 0
    directory = small[2] / "cp"
    os.replace(directory / PREVIOUS, directory / CURRENT)
    return directory


def test_a_damaged_checkpoint_falls_back_to_the_previous_one(small):
    args = _checkpointed(small, "--checkpoint-every", "50events")
    expected = subprocess.run(command(small[0], small[1], small[2] / "plain", small[2] / "plain.dead"),
                              timeout=60)
    assert expected.returncode == 0
    directory = _unfinished(small)
    (directory / PREVIOUS).write_bytes((directory / CURRENT).read_bytes())
    data = bytearray((directory / CURRENT).read_bytes())
    data[len(data) // 2] ^= 0x55
    (directory / CURRENT).write_bytes(bytes(data))
    done = _run([a for a in args if a != "-q"])
    assert done.returncode == 0, done.stderr
    assert "is damaged" in done.stderr and "using the previous one" in done.stderr
    assert (small[2] / "out").read_bytes() == (small[2] / "plain").read_bytes()


def test_a_checkpoint_cut_short_falls_back_and_two_damaged_ones_are_refused(small):
    args = _checkpointed(small, "--checkpoint-every", "50events")
    directory = _unfinished(small)
    (directory / PREVIOUS).write_bytes((directory / CURRENT).read_bytes())
    for name in (CURRENT, PREVIOUS):
        data = (directory / name).read_bytes()
        (directory / name).write_bytes(data[: len(data) - 40])
    done = _run(args)
    assert done.returncode == 2
    assert "no usable checkpoint" in done.stderr and "remove the directory" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_checkpoint_of_another_query_is_refused(small):
    query, streams, tmp_path = small
    directory = _unfinished(small)
    other = tmp_path / "other.rq"
    other.write_text(QUERIES["kleene-partition-negation"].replace("12 SECONDS", "13 SECONDS"))
    done = _run(command(other, streams, tmp_path / "out", tmp_path / "dead", "--checkpoint", str(directory)))
    assert done.returncode == 2
    assert "checkpoint of another query" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_checkpoint_taken_with_other_arguments_is_refused(small):
    directory = _unfinished(small)
    done = _run(_checkpointed(small, "--max-runs", "5000"))
    assert done.returncode == 2
    assert "other arguments" in done.stderr
    assert directory.exists()


def test_a_checkpoint_of_a_newer_format_is_refused(small):
    directory = _unfinished(small)
    lines = (directory / CURRENT).read_bytes().split(b"\n", 1)
    header = json.loads(lines[0])
    header["version"] = 99
    (directory / CURRENT).write_bytes(json.dumps(header).encode() + b"\n" + lines[1])
    done = _run(_checkpointed(small))
    assert done.returncode == 2
    assert "format version 99, newer" in done.stderr


def test_an_output_file_shorter_than_committed_is_refused(small):
    _unfinished(small)
    (small[2] / "out").write_text("")
    done = _run(_checkpointed(small))
    assert done.returncode == 2
    assert "shorter" in done.stderr


def test_a_stream_file_shorter_than_its_recorded_read_is_refused(small):
    """Its items past the shorter end were dropped as already read, and the run went
    on to the end and said it had finished: results silently lost."""
    _unfinished(small)
    (Path(small[1]["S"]).parent / "odd.trig").write_text("@prefix : <http://ex/> .\n")     # (of a glob)
    done = _run(_checkpointed(small))
    assert done.returncode == 2, done.stderr
    assert f"spaseq: --stream S={small[1]['S']} has become shorter since the checkpoint: it now ends after " \
        in done.stderr, done.stderr


def test_a_checkpoint_that_cannot_be_written_names_its_directory_and_leaves_no_part(tmp_path):
    """A full disk said only "No space left on device", and the half-written file
    kept its space.  (A file size limit stands in for the full disk: EFBIG.)"""
    script = (
        "import resource, signal, sys\n"
        "from spaseq_plugin.runtime.checkpoint import write_checkpoint\n"
        "from spaseq_plugin.errors import OutputError\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        "try:\n"
        "    write_checkpoint(sys.argv[1], {}, {'state': 'x' * 100000})\n"
        "except OutputError as error:\n"
        "    print(error)\n")
    done = _run([sys.executable, "-c", script, str(tmp_path)])
    assert done.stdout.startswith(f"cannot write a checkpoint in {tmp_path} (--checkpoint): File too large"), \
        done.stdout + done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("field, value, said", [
    ("outputs", -5, "records no readable length for"),           # (was "--output ...: Invalid argument")
    ("sources", "7", "the checkpoint records no readable position for it ('7')"),    # (was an internal error)
    ("mapping", -1, "IndexError: -1 is not the number of a row"),   # (restored another run's bindings)
])
def test_a_checkpoint_body_with_impossible_positions_is_refused(small, field, value, said):
    """A checkpoint edited by hand, its checksum made again: its positions are checked."""
    directory = _unfinished(small)
    header_line, body_text = (directory / CURRENT).read_text().split("\n", 1)
    body = json.loads(body_text)
    if field == "outputs":
        body["outputs"]["output"] = value
    elif field == "mapping":
        body["engine"]["runtime"]["runs"][0][1] = value
    else:
        body["sources"] = [value] * len(body["sources"])
    data = json.dumps(body, separators=(",", ":")).encode()
    header = {**json.loads(header_line), "body_bytes": len(data), "body_sha256": hashlib.sha256(data).hexdigest()}
    (directory / CURRENT).write_bytes(json.dumps(header).encode() + b"\n" + data + b"\n")
    done = _run(_checkpointed(small))
    assert done.returncode == 2 and said in done.stderr and "internal error" not in done.stderr, done.stderr


def test_standard_input_is_refused(small):
    query, streams, tmp_path = small
    done = subprocess.run(SPASEQ + ["run", str(query), "--stream", "S=-", "--checkpoint", str(tmp_path / "cp")],
                          input="", capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--checkpoint" in done.stderr and "standard input" in done.stderr
    assert not (tmp_path / "cp" / CURRENT).exists()


@pytest.mark.parametrize("flags, message", [
    (["--format", "json"], "--format json"),
    (["--checkpoint-every", "soon"], "--checkpoint-every"),
    (["--lateness", "2"], "--lateness"),
])
def test_what_cannot_be_checkpointed_is_refused(small, flags, message):
    query, streams, tmp_path = small
    done = _run(command(query, streams, tmp_path / "out", tmp_path / "dead", "--checkpoint",
                        str(tmp_path / "cp"), *flags))
    assert done.returncode == 2
    assert message in done.stderr


def test_results_on_stdout_carry_ids_that_repeat_after_a_restart(small):
    """Standard output is at-least-once: results after the checkpoint come again,
    with the same ids."""
    query, streams, tmp_path = small
    args = SPASEQ + ["run", str(query), "-q", "--stream", f"S={streams['S']}", "--checkpoint",
                     str(tmp_path / "cp"), "--checkpoint-every", "100events"]
    first = [json.loads(line) for line in _run(args).stdout.splitlines()]
    assert first and all(len(r["id"]) == 32 for r in first)
    assert len({r["id"] for r in first}) == len(first)
    directory = tmp_path / "cp"
    os.replace(directory / PREVIOUS, directory / CURRENT)
    again = [json.loads(line) for line in _run(args).stdout.splitlines()]
    assert again == first[len(first) - len(again):]


def test_the_async_api_resumes_from_its_checkpoint(inputs, tmp_path):
    """run_async(..., checkpoint=Checkpointer(...)): a consumer that stops part way
    (as a killed process would) and starts again gets every result, those after
    the last checkpoint twice with equal ids."""
    import asyncio
    from spaseq_plugin.runtime.aio import run_async
    from spaseq_plugin.runtime.checkpoint import Checkpointer
    text = QUERIES["conjunction-trailing-negation"]
    items = _items(inputs, text)

    async def consume(stop_after: int | None) -> list:
        checkpointer = Checkpointer(str(tmp_path / "cp"), text, {"input": "test"}, "200events")
        got = []
        async for result in run_async(Engine(text), items, checkpoint=checkpointer):
            got.append(result)
            if stop_after is not None and len(got) == stop_after:
                break
        return got

    expected = asyncio.run(_plain(text, items))
    first = asyncio.run(consume(len(expected) // 2))
    second = asyncio.run(consume(None))
    ids = [r.id for r in first] + [r.id for r in second]
    assert len(set(ids)) == len(expected)                     # nothing lost
    assert _shown(second) == _shown(expected)[len(expected) - len(second):]
    assert len(second) < len(expected)                          # it did resume
    assert asyncio.run(consume(None)) == []                     # finished: nothing more


async def _plain(text, items):
    from spaseq_plugin.runtime.aio import run_async
    return [r async for r in run_async(Engine(text), items)]


# -- MQTT: a persistent session, acknowledged after the checkpoints ----------------

from brokers import Mosquitto, free_port, mosquitto_program, wait_until  # noqa: E402,F401 (fixture)


class PersistentMosquitto(Mosquitto):
    """A broker that keeps sessions and queued messages across a restart (saved at
    each change; stopped with SIGTERM, as a service manager restarts it)."""

    def __init__(self, program, directory: Path):
        super().__init__(program, directory)
        store = directory / "mosquitto-store"
        store.mkdir()
        self.config.write_text(self.config.read_text().replace("persistence false\n", "")
                               + f"persistence true\npersistence_location {store}/\n"
                               "autosave_on_changes true\nautosave_interval 1\n"
                               # (started by root, mosquitto would run as 'mosquitto', which
                               # cannot write here)
                               f"user {__import__('getpass').getuser()}\n")

    def restart(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        self.process.stderr.close()
        self.process = None
        self.start()


def _publisher(broker):
    import paho.mqtt.client as paho
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="test-publisher", clean_session=False)
    client.reconnect_delay_set(0.05, 0.2)
    client.connect("127.0.0.1", broker.port)
    client.loop_start()
    return client


def test_mqtt_runs_killed_and_a_broker_restarted_lose_no_result(mosquitto_program, tmp_path):
    """A run over an MQTT topic with --checkpoint, killed twice with SIGKILL while
    events are published (the broker keeps them: persistent session, acknowledged
    after the checkpoints) and the broker restarted once: the output file equals
    the run over the same events read from a file."""
    rnd = random.Random(5)
    head = "@prefix : <http://ex/> .\n@prefix prov: <http://www.w3.org/ns/prov#> .\n"
    messages = [_event("s", t, rnd) for t in range(1, 701)]
    stream_file = tmp_path / "s.trig"
    stream_file.write_text(head + "".join(messages))
    query = tmp_path / "q.rq"
    query.write_text(QUERIES["kleene-partition-negation"])
    expected = tmp_path / "expected.out"
    subprocess.run(SPASEQ + ["run", str(query), "-q", "--stream", f"S={stream_file}", "-o", str(expected)],
                   check=True, timeout=60)
    broker = PersistentMosquitto(mosquitto_program, tmp_path).start()
    out = tmp_path / "out"
    args = SPASEQ + ["run", str(query), "-q", "-o", str(out), "--checkpoint", str(tmp_path / "cp"),
                     "--checkpoint-every", "1s", "--idle-timeout", "5",
                     "--stream", f"S={broker.url('ev', backoff='0.05', max_backoff='0.2', retries='200')}"]
    publisher = None
    try:
        first = subprocess.run(args[:-3] + ["1"] + args[-2:], capture_output=True, text=True, timeout=60)
        assert first.returncode == 0, first.stderr        # the session exists from now on
        publisher = _publisher(broker)
        sent = []

        def publish():
            for number, text in enumerate(messages):
                sent.append(publisher.publish("ev", head + text, qos=1))
                time.sleep(0.004)
                if number == 350:
                    # What the broker has acknowledged is kept across its restart; what is
                    # in flight would be sent again after the reconnect, maybe after newer
                    # messages: an order the file run does not have. So wait for it first.
                    wait_until(lambda: all(info.is_published() for info in sent), 30,
                               what="the messages in flight to be acknowledged")
                    broker.restart()
                    wait_until(publisher.is_connected, 30, what="the publisher to reconnect")
        thread = __import__("threading").Thread(target=publish)
        thread.start()
        for n, delay in enumerate((1.2, 1.0)):
            process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=(tmp_path / f"killed{n}.err").open("w"))
            time.sleep(delay)
            assert process.poll() is None
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
        thread.join(timeout=60)
        wait_until(lambda: all(info.is_published() for info in sent), 30, what="every message published")
        last = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert last.returncode == 0, last.stderr
    finally:
        if publisher is not None:
            publisher.loop_stop()
        broker.stop()
    killed = "".join((tmp_path / f"killed{n}.err").read_text() for n in range(2))
    assert out.read_bytes() == expected.read_bytes(), killed + last.stderr
    assert expected.read_text().count("\n") > 5


def test_a_costly_checkpoint_spaces_out_the_next_ones(tmp_path):
    """--checkpoint-every SECONDS is a least interval: after a checkpoint that took c
    seconds the next waits 19 c, so checkpoints take at most 5 % of the time."""
    from spaseq_plugin.runtime.checkpoint import Checkpointer
    checkpointer = Checkpointer(str(tmp_path), "query", {}, "10ms")
    checkpointer.start(0, cost=0.01)
    time.sleep(0.05)
    assert not checkpointer.due(0)                  # 10 ms have passed, 190 ms have not
    time.sleep(0.2)
    assert checkpointer.due(0)
    counted = Checkpointer(str(tmp_path), "query", {}, "100events")
    counted.start(1000, cost=5.0)                   # a number of events is kept as given
    assert not counted.due(1099) and counted.due(1100)


# -- a live run stopped by a signal ---------------------------------------------------

def test_a_tcp_run_stopped_by_sigterm_keeps_what_it_evaluated(tmp_path):
    """A tcp run with --checkpoint stopped by SIGTERM evaluates what it had received
    and takes a checkpoint: started again, it keeps those results.  The output was cut
    back to the last checkpoint before (here none), and a tcp producer sends none of
    it again: they were lost."""
    query = tmp_path / "q.rq"
    query.write_text(PREFIXES + 'SELECT ?a ?b WITHIN 60 SECONDS FROM STREAM S <http://ex/s>\n'
                     'WHERE { SEQ (A ; B) DEFINE GPM A ON S { ?a :kind "a" } DEFINE GPM B ON S { ?b :kind "b" } }\n')
    out = tmp_path / "out.jsonl"
    port = free_port()
    args = SPASEQ + ["run", str(query), "-o", str(out), "--checkpoint", str(tmp_path / "cp"),
                     "--checkpoint-every", "1000000events", "--stream",
                     f"S=tcp://127.0.0.1:{port}?listen=1&connections=1"]

    def events(*numbered) -> bytes:
        return "".join(f'<http://ex/e{t}> <http://www.w3.org/ns/prov#generatedAtTime> "{t}"^^'
                       f'<http://www.w3.org/2001/XMLSchema#integer> .\n'
                       f'<http://ex/e{t}> {{ <http://ex/{kind}{t}> <http://ex/kind> "{kind}" . }}\n'
                       for t, kind in numbered).encode()

    def connect() -> socket.socket:
        return wait_until(lambda: _connected(port), 60, what="the run to listen")

    first = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    try:
        with connect() as producer:
            producer.sendall(events((1, "a"), (2, "b"), (3, "a"), (4, "b")))
            wait_until(lambda: out.exists() and "b4" in out.read_text(), 60, what="the results of a1 to b4")
            first.send_signal(signal.SIGTERM)
            assert first.wait(timeout=60) == 143, first.stderr.read()
        second = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        with connect() as producer:
            producer.sendall(events((5, "a"), (6, "b")))
        assert second.wait(timeout=60) == 0, second.stderr.read()
    finally:
        first.kill()
    pairs = [(row["bindings"]["a"]["value"], row["bindings"]["b"]["value"])
             for row in map(json.loads, out.read_text().splitlines())]
    assert pairs == [("http://ex/a1", "http://ex/b2"), ("http://ex/a3", "http://ex/b4"), ("http://ex/a5", "http://ex/b6")]


def _connected(port: int) -> socket.socket | None:
    try:
        return socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return None
