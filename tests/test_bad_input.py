"""Bad stream input never stops, hangs or loses good events (streams/reader.py,
"Bad input"): each case runs ``spaseq run`` as a user would, on generated
data, under a memory bound where memory is the point.  Every bad event is
rejected with its position and reason, counted, written to the dead-letter
file, and every good event before and after it is read; the exit status is 0.
"""

from __future__ import annotations

import gzip
import io
import json
import resource
import subprocess
import sys
import threading
import tracemalloc
import types
import zlib

import pyoxigraph as ox
import pytest

from spaseq_plugin import Engine, Event
from spaseq_plugin.errors import EventError
from spaseq_plugin.runtime.engine import REJECTION_SAMPLE
from spaseq_plugin.streams import reader
from spaseq_plugin.streams.network import read_text

SPASEQ = [sys.executable, "-m", "spaseq_plugin"]
S = "http://example.org/s"
EX = "http://example/"
PROV = "<http://www.w3.org/ns/prov#generatedAtTime>"
INTEGER = "<http://www.w3.org/2001/XMLSchema#integer>"
QUERY = f"""PREFIX : <{EX}>
SELECT ?x ?v
FROM STREAM S <{S}>
WHERE {{ SEQ (A)
  DEFINE GPM A ON S {{ ?x :v ?v }} }}
"""
MiB = 1 << 20


def spaseq(*args, memory: int | None = None, timeout: float = 120):
    """Run spaseq; ``memory``: a bound on its address space (bytes)."""
    def limit():
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    return subprocess.run(SPASEQ + list(args), capture_output=True, text=True, timeout=timeout,
                          preexec_fn=limit)


def trig_event(i: int, value: str | None = None, time: str | None = None) -> str:
    time = time if time is not None else f'"{i}"^^{INTEGER}'
    value = value if value is not None else f'"v{i}"'
    return f"<{EX}e{i}> {PROV} {time} .\n<{EX}e{i}> {{ <{EX}x{i}> <{EX}v> {value} . }}\n"


def nquads_event(i: int, value: str | None = None, time: str | None = None) -> str:
    time = time if time is not None else f'"{i}"^^{INTEGER}'
    value = value if value is not None else f'"v{i}"'
    return f"<{EX}e{i}> {PROV} {time} .\n<{EX}x{i}> <{EX}v> {value} <{EX}e{i}> .\n"


EVENT = {"trig": trig_event, "nq": nquads_event}


def run(tmp_path, name: str, data: bytes, *extra, memory=None, timeout=120):
    """Run QUERY over the file; (results, rejections from stderr, dead letters, process)."""
    path = tmp_path / name
    path.write_bytes(data)
    (tmp_path / "q.rq").write_text(QUERY)
    dead = tmp_path / "dead.jsonl"
    process = spaseq("run", str(tmp_path / "q.rq"), "--stream", f"S={path}", "--dead-letter", str(dead),
                     *extra, memory=memory, timeout=timeout)
    results = [json.loads(line) for line in process.stdout.splitlines()]
    rejected = [line for line in process.stderr.splitlines() if "rejected event" in line]
    letters = [json.loads(line) for line in dead.read_text().splitlines()] if dead.exists() else []
    return results, rejected, letters, process


def values(results) -> list[str]:
    return [r["bindings"]["v"]["value"] for r in results]


# -- huge literals ----------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["trig", "nq"])
def test_a_literal_over_16_mib_is_one_rejection(tmp_path, fmt):
    event = EVENT[fmt]
    big = '"' + "x" * (17 * MiB) + '"'
    text = "".join(event(i, big if i == 100 else None) for i in range(1, 201))
    results, rejected, letters, process = run(tmp_path, f"s.{fmt}", text.encode(), memory=800 * MiB)
    assert process.returncode == 0, process.stderr
    assert len(results) == 199 and "v99" in values(results) and "v101" in values(results)
    assert len(rejected) == 1 and "16 MiB" in rejected[0]
    (letter,) = letters
    assert letter["reason"] == "too-large" and letter["length"] > 17 * MiB and letter["truncated"]
    assert letter["position"].endswith(":200")


def test_a_40_mb_literal_is_read_in_linear_time_and_bounded_memory(tmp_path):
    # On one line it is skipped as it comes; spread over lines (a long string) it is
    # scanned once.  Quadratic reading took minutes; the memory bound is far below
    # what keeping the text several times would need.
    one_line = '"' + "y" * (40 * MiB) + '"'
    long_string = '"""' + ("z" * 1023 + "\n") * (20 * 1024) + '"""'
    text = "".join(trig_event(i, one_line if i == 10 else long_string if i == 20 else None)
                   for i in range(1, 31))
    results, rejected, letters, process = run(tmp_path, "s.trig", text.encode(), memory=400 * MiB,
                                              timeout=90)
    assert process.returncode == 0, process.stderr
    assert len(results) == 28
    assert [letter["reason"] for letter in letters] == ["too-large", "too-large"]
    assert letters[0]["position"].endswith(":20") and letters[0]["graph"] == f"<{EX}e10>"
    assert letters[1]["position"].endswith(":40") and letters[1]["graph"] == f"<{EX}e20>"


def test_distinct_large_literals_are_not_kept_by_the_term_caches(tmp_path):
    # 200 distinct 512 KiB literals, each in a result: the term caches (canonical forms,
    # the writer's JSON texts) keep thousands of terms, so keeping these would hold two
    # copies of the whole 100 MB input; the window keeps two events at most.
    # (Keeping them took 260 MiB of address space; without, it runs in 150 MiB.)
    text = "".join(trig_event(i, '"' + str(i) + "w" * (512 << 10) + '"') for i in range(1, 201))
    results, rejected, letters, process = run(tmp_path, "s.trig", text.encode(), memory=220 * MiB,
                                              timeout=90)
    assert process.returncode == 0, process.stderr[-2000:]
    assert len(results) == 200 and not rejected
    assert values(results)[-1] == "200" + "w" * (512 << 10)


@pytest.mark.parametrize("fmt", ["trig", "nq"])
def test_the_statement_limit_has_a_flag(tmp_path, fmt):
    event = EVENT[fmt]
    text = "".join(event(i, '"' + "z" * 3000 + '"' if i == 2 else None) for i in range(1, 4))
    results, rejected, letters, process = run(tmp_path, f"s.{fmt}", text.encode(), "--max-statement", "2KiB")
    assert process.returncode == 0, process.stderr
    assert values(results) == ["v1", "v3"] and [letter["reason"] for letter in letters] == ["too-large"]
    assert "limit of 2,048 bytes" in letters[0]["error"]
    results, rejected, letters, process = run(tmp_path, f"s.{fmt}", text.encode())
    assert len(results) == 3 and not letters
    process = spaseq("run", str(tmp_path / "q.rq"), "--stream", f"S={tmp_path / f's.{fmt}'}",
                     "--max-statement", "big")
    assert process.returncode == 2 and "--max-statement" in process.stderr


def test_a_huge_nquads_line_is_skipped_as_it_comes(tmp_path):
    text = "".join(nquads_event(i, '"' + "y" * (40 * MiB) + '"' if i == 3 else None) for i in range(1, 6))
    results, rejected, letters, process = run(tmp_path, "s.nq", text.encode(), memory=300 * MiB)
    assert process.returncode == 0, process.stderr
    assert values(results) == ["v1", "v2", "v4", "v5"]
    assert [(letter["reason"], letter["position"].rsplit(":", 1)[1]) for letter in letters] == [
        ("too-large", "6")]


@pytest.mark.parametrize("fmt", ["trig", "nq"])
def test_a_line_is_rejected_when_it_passes_the_limit_not_when_it_ends(monkeypatch, fmt):
    # A line may never end (a device or a sender of bytes without a newline): its
    # rejection, counted and shown, must not wait for its end.
    monkeypatch.setattr(reader, "MAX_STATEMENT_BYTES", 4096)
    read = reader.event_reader("s", S, ox.RdfFormat.TRIG if fmt == "trig" else ox.RdfFormat.N_QUADS)
    passed = read.feed(b"\0" * 5000)
    assert [(type(item).__name__, item.reason, item.position) for item in passed] == [
        ("EventError", "too-large", "s:1")]
    assert "passed the limit of 4,096 bytes" in passed[0].message
    assert passed[0].text_length >= 5000 and len(passed[0].text) <= reader.TEXT_LIMIT
    assert read.feed(b"\0" * 100_000) == [] and read.feed(b"\0" * 100_000) == []
    rest = read.feed(b"\n" + EVENT[fmt](4).encode()) + read.finish()
    assert [(item.time, item.position) for item in rest] == [(4, "s:3")]


@pytest.mark.parametrize("fmt", ["trig", "nq"])
def test_only_a_statement_begun_and_not_rejected_is_pending(monkeypatch, fmt):
    """What a live source's cut (an idle timeout) turns into a ``truncated``
    rejection: not blanks or comments, not a line too long (rejected already)."""
    monkeypatch.setattr(reader, "MAX_STATEMENT_BYTES", 4096)
    read = reader.event_reader("s", S, ox.RdfFormat.TRIG if fmt == "trig" else ox.RdfFormat.N_QUADS)
    out = read.feed(EVENT[fmt](1).encode())
    assert not read.pending()
    out += read.feed(b"  # a comment, then blanks\n\n \t# ")
    assert not read.pending()
    out += read.feed(b"\n<http://example.org/x2")
    assert read.pending()
    out += read.feed(b"\0" * 5000)
    assert not read.pending()
    out += read.feed(b"\0" * 100 + b"\n")
    assert not read.pending()
    out += read.feed(EVENT[fmt](2).encode()[:60])
    assert read.pending()
    out += read.finish("no input for 1 s (idle_timeout)")
    assert [(type(item).__name__, getattr(item, "reason", None), item.position) for item in out] == [
        ("Event", None, "s:2"), ("EventError", "too-large", "s:6"), ("EventError", "truncated", "s:7")]
    assert (out[2].text, out[2].text_length) == (EVENT[fmt](2)[:60], 60)     # (for the dead-letter file)


def test_spaseq_run_shows_the_rejection_of_an_endless_line_at_once(tmp_path):
    # stdin sends an event, then bytes without a newline; the rejection is on stderr
    # while they still come.
    (tmp_path / "q.rq").write_text(QUERY)
    process = subprocess.Popen(SPASEQ + ["run", str(tmp_path / "q.rq"), "--stream", "S=-", "--max-statement",
                                         "64KiB"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watchdog = threading.Timer(60, process.kill)       # (a rejection that never comes ends the wait)
    watchdog.start()
    try:
        process.stdin.write(trig_event(1).encode() + b"\0" * (256 << 10))
        process.stdin.flush()
        line = process.stderr.readline().decode()
        while "rejected event" not in line and line:
            line = process.stderr.readline().decode()
        assert "rejected event: stdin:3: a line passed the limit of 65,536 bytes" in line
        process.stdin.write(b"\0" * (1 << 20) + b"\n" + trig_event(4).encode())
        process.stdin.close()
        out, err = process.stdout.read(), process.stderr.read()
        process.wait(timeout=60)
    finally:
        watchdog.cancel()
        process.kill()
    assert process.returncode == 0, err
    assert [json.loads(line)["bindings"]["v"]["value"] for line in out.decode().splitlines()] == ["v1", "v4"]
    assert "1 rejected (1 too-large)" in err.decode()


def test_a_parse_out_of_memory_rejects_no_line(monkeypatch):
    # pyoxigraph raises MemoryError for a term over 16 MiB, and for want of memory.
    # The reader took both for a term too large: a process out of memory went on
    # rejecting good lines as too large, and they were lost.
    def out_of_memory(**_):
        raise MemoryError()
    monkeypatch.setattr(reader, "ox", types.SimpleNamespace(parse=out_of_memory))
    with pytest.raises(MemoryError):
        list(reader.parse_line_batch([(1, b"<urn:a> <urn:p> <urn:b> .\n")], ox.RdfFormat.N_TRIPLES, "t"))


@pytest.mark.parametrize("fmt", ["trig", "nq"])
def test_an_event_of_more_triples_than_the_limit_is_rejected(tmp_path, fmt):
    many = "".join(f"<{EX}y{j}> <{EX}v> \"w{j}\" .\n" for j in range(300))
    if fmt == "trig":
        middle = f"<{EX}e2> {PROV} \"2\"^^{INTEGER} .\n<{EX}e2> {{\n{many}}}\n"
    else:
        middle = f"<{EX}e2> {PROV} \"2\"^^{INTEGER} .\n" + many.replace(" .\n", f" <{EX}e2> .\n")
    text = (EVENT[fmt](1) + middle + EVENT[fmt](3)).encode()
    results, rejected, letters, process = run(tmp_path, f"s.{fmt}", text, "--max-event-triples", "200")
    assert process.returncode == 0, process.stderr
    assert values(results) == ["v1", "v3"]
    assert [letter["reason"] for letter in letters] == ["too-large"]
    assert "more than 200 triples" in letters[0]["error"] and letters[0]["graph"] == f"<{EX}e2>"
    results, rejected, letters, process = run(tmp_path, f"s.{fmt}", text)
    assert len(results) == 302 and not letters
    process = spaseq("run", str(tmp_path / "q.rq"), "--stream", f"S={tmp_path / f's.{fmt}'}",
                     "--max-event-triples", "0")
    assert process.returncode == 2 and "--max-event-triples" in process.stderr


def test_an_event_growing_across_fast_pieces_is_rejected_at_the_limit(monkeypatch):
    # N-Quads lines of one graph, many pieces long: each piece is under the limit, the
    # event is not; the events around it are read.
    monkeypatch.setattr(reader, "MAX_EVENT_TRIPLES", 20_000)
    lines = "".join(f"<{EX}y{j}> <{EX}v> \"{j}\" <{EX}e2> .\n" for j in range(30_000))
    text = (nquads_event(1) + f"<{EX}e2> {PROV} \"2\"^^{INTEGER} .\n" + lines + nquads_event(3)).encode()
    assert len(text) > 4 * reader.FAST_BYTES
    items = read_text(text, "t", S, ox.RdfFormat.N_QUADS)
    assert [(type(item).__name__, item.time if isinstance(item, Event) else item.reason) for item in items] == [
        ("Event", 1), ("EventError", "too-large"), ("Event", 3)]


def test_a_32_mib_statement_of_short_triples_stays_within_2_gb(tmp_path):
    # 4 million triples of 8 bytes each, within the statement limit: reading them all
    # took the process past 2 GB of address space (Rust's allocator then aborts it).
    block = f"<{EX}e2> {{ <{EX}x> <{EX}v> 0 ;\n" + "<urn:v> 1;\n" * (30 * MiB // 11) + f"<{EX}v> 2 . }}\n"
    text = trig_event(1) + f"<{EX}e2> {PROV} \"2\"^^{INTEGER} .\n" + block + trig_event(3)
    results, rejected, letters, process = run(tmp_path, "s.trig", text.encode(), memory=2000 * MiB)
    assert process.returncode == 0, process.stderr[-2000:]
    assert values(results) == ["v1", "v3"]
    assert [letter["reason"] for letter in letters] == ["too-large"]


def test_an_event_through_a_hub_ends_at_the_join_step_limit(tmp_path):
    # 20,000 edges into one hub and 20,000 out of it: a path of two patterns tries
    # 400 million pairs, none of which its FILTER keeps.  200,000 such edges each
    # way held `spaseq run` on the one event for hours, deaf to SIGTERM between rows.
    edges = "".join(f"<{EX}a{i}> <{EX}p> <{EX}hub> . <{EX}hub> <{EX}p> <{EX}b{i}> .\n" for i in range(20_000))
    (tmp_path / "s.trig").write_text(f"<{EX}e1> {PROV} \"1\"^^{INTEGER} .\n<{EX}e1> {{\n{edges}}}\n")
    (tmp_path / "q.rq").write_text(
        f"SELECT * WITHIN 10 SECONDS FROM STREAM S <{S}> WHERE {{ SEQ (A)\n"
        f"DEFINE GPM A ON S {{ ?x <{EX}p> ?y . ?y <{EX}p> ?z FILTER(STR(?x) = STR(?z)) }} }}")
    process = spaseq("run", str(tmp_path / "q.rq"), "--stream", f"S={tmp_path / 's.trig'}",
                     "--max-join-steps", "1000000", timeout=60)
    assert process.returncode == 3, process.stderr[-2000:]
    assert process.stderr.splitlines()[-1] == (
        f"spaseq: limit reached: query {tmp_path / 'q.rq'}: GPM A took more than 1,000,000 join steps "
        f"(--max-join-steps) on the event <{EX}e1> at time 1 (read at {tmp_path / 's.trig'}:2); "
        "--on-limit drop-oldest or drop-newest goes on with the first ones")
    process = spaseq("run", str(tmp_path / "q.rq"), "--stream", f"S={tmp_path / 's.trig'}",
                     "--max-join-steps", "1000000", "--on-limit", "drop-newest", timeout=60)
    assert process.returncode == 0 and process.stdout == "", process.stderr[-2000:]
    assert "1 partial matches dropped" in process.stderr


# -- truncated gzip --------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["trig", "nq"])
def test_a_truncated_gzip_file_keeps_every_complete_event(tmp_path, fmt):
    text = "".join(EVENT[fmt](i) for i in range(1, 2001)).encode()
    packed = gzip.compress(text)
    cut = packed[:len(packed) * 2 // 3]
    readable = zlib.decompressobj(31).decompress(cut)          # what a reader can get out of it
    complete = readable[:readable.rfind(b"\n") + 1].count(b"\n") // 2   # events whose two lines are whole
    results, rejected, letters, process = run(tmp_path, f"s.{fmt}.gz", cut)
    assert process.returncode == 0, process.stderr
    assert values(results) == [f"v{i}" for i in range(1, complete + 1)]
    assert [letter["reason"] for letter in letters] == ["truncated"]
    assert "gzip file is truncated" in letters[0]["error"]


def _damaged_in_the_middle(text: bytes) -> bytes:
    """``text`` gzipped with stored (uncompressed) deflate blocks, one byte of
    its middle changed: it inflates without an error, to other bytes, and
    only the CRC at the end tells."""
    packed = bytearray(gzip.compress(text, compresslevel=0))
    middle = len(packed) // 2
    packed[middle] = ord("w") if packed[middle] != ord("w") else ord("u")
    return bytes(packed)


@pytest.mark.parametrize("fmt", ["trig", "nq"])
def test_a_corrupt_gzip_file_gives_no_result_made_of_its_bytes(tmp_path, fmt):
    text = "".join(EVENT[fmt](i) for i in range(1, 2001)).encode()
    damaged = _damaged_in_the_middle(text)
    with pytest.raises(gzip.BadGzipFile):          # the damage shows only at the end
        with gzip.open(io.BytesIO(damaged)) as f:
            while f.read1(1 << 16):
                pass
    results, rejected, letters, process = run(tmp_path, f"s.{fmt}.gz", damaged)
    assert process.returncode == 0, process.stderr
    assert results == []
    assert [letter["reason"] for letter in letters] == ["truncated"]
    assert "the gzip data is corrupt (CRC check failed" in letters[0]["error"]
    assert "none of the file is read" in rejected[0], rejected


# -- text that is not UTF-8 ------------------------------------------------------------

def _read_all(fmt: str, data: bytes, chunk: int) -> list:
    read = reader.event_reader("s", S, ox.RdfFormat.TRIG if fmt == "trig" else ox.RdfFormat.N_QUADS)
    out = []
    for start in range(0, len(data), chunk):
        out += read.feed(data[start:start + chunk])
    return out + read.finish()


@pytest.mark.parametrize("fmt", ["trig", "nq"])
@pytest.mark.parametrize("codec, name", [("utf-16", "UTF-16 (little-endian)"), ("utf-16-be", "UTF-16 (big-endian)"),
                                         ("utf-32", "UTF-32 (little-endian)"), ("utf-32-be", "UTF-32 (big-endian)")])
def test_a_utf16_or_utf32_text_is_one_rejection(fmt, codec, name):
    # Read as UTF-8, each statement of it was a syntax error of its own (thousands of
    # rejections, none saying why)
    text = "".join(EVENT[fmt](i) for i in range(1, 201))
    data = ("\ufeff" + text).encode(codec) if codec.endswith("-be") else text.encode(codec)
    for chunk in (1, 3, 1 << 16):                   # (the mark cut across chunks too)
        out = _read_all(fmt, data, chunk)
        assert [(type(item).__name__, item.reason, item.position) for item in out] == [("EventError", "encoding", "s:1")]
        assert f"the text is {name}, by its byte order mark: RDF text must be UTF-8" in out[0].message


@pytest.mark.parametrize("fmt", ["trig", "nq"])
@pytest.mark.parametrize("codec, name", [("utf-16-le", "UTF-16 (little-endian)"), ("utf-16-be", "UTF-16 (big-endian)"),
                                         ("utf-32-le", "UTF-32 (little-endian)"), ("utf-32-be", "UTF-32 (big-endian)")])
@pytest.mark.parametrize("start", ["", "# a comment\n"])
def test_a_utf16_or_utf32_text_without_its_mark_is_one_rejection(fmt, codec, name, start):
    text = start + "".join(EVENT[fmt](i) for i in range(1, 201))
    for chunk in (1, 3, 1 << 16):
        out = _read_all(fmt, text.encode(codec), chunk)
        assert [(type(item).__name__, item.reason, item.position) for item in out] == [("EventError", "encoding", "s:1")]
        assert f"the text is {name}, without a byte order mark" in out[0].message


@pytest.mark.parametrize("fmt", ["trig", "nq"])
@pytest.mark.parametrize("data", [b"", b"\n", b"#\n", b"# \x00\n", "# \u00e9\n".encode()])
def test_short_texts_are_read_as_utf8(fmt, data):
    # (a text shorter than the longest mark is held until its end, then read)
    for chunk in (1, 1 << 16):
        assert _read_all(fmt, data + EVENT[fmt](1).encode(), chunk)[0].__class__.__name__ == "Event"
        assert [type(item).__name__ for item in _read_all(fmt, data, chunk)] == []


@pytest.mark.parametrize("fmt", ["trig", "nq"])
def test_a_statement_that_is_not_utf8_says_so_where(fmt):
    # pyoxigraph's message was "Invalid UTF-8: incomplete utf-8 byte sequence from index 0"
    text = "".join(EVENT[fmt](i, value='"caf\u00e9"' if i == 2 else None) for i in range(1, 4))
    out = _read_all(fmt, text.encode("latin-1"), 1 << 16)
    assert [(type(item).__name__, item.position) for item in out] == [
        ("Event", "s:2"), ("EventError", "s:4"), ("Event", "s:6")]
    column = text.splitlines()[3].index("\u00e9") + 1
    assert out[1].message == f"not UTF-8 text (byte 0xe9 at column {column}): RDF text must be UTF-8"
    assert out[1].reason == "syntax"


def test_spaseq_run_names_the_encoding_and_the_file(tmp_path):
    text = "".join(trig_event(i) for i in range(1, 1001))
    results, rejected, letters, process = run(tmp_path, "s.trig", text.encode("utf-16"))
    assert process.returncode == 0, process.stderr
    assert results == [] and len(rejected) == 1
    assert f"{tmp_path / 's.trig'}:1: the text is UTF-16 (little-endian)" in rejected[0]
    assert [letter["reason"] for letter in letters] == ["encoding"]
    assert "1 rejected (1 encoding)" in process.stderr


# -- timestamps ------------------------------------------------------------------

BAD_TIMES = {
    '"1e999999999"^^<http://www.w3.org/2001/XMLSchema#double>': "outside the representable range",
    '"1e100000"^^<http://www.w3.org/2001/XMLSchema#double>': "outside the representable range",
    '"0001-01-01T00:00:00+14:00"^^<http://www.w3.org/2001/XMLSchema#dateTime>': "outside",
    '"9999-12-31T23:59:59-14:00"^^<http://www.w3.org/2001/XMLSchema#dateTime>': "outside",
    '"8_000"^^<http://www.w3.org/2001/XMLSchema#integer>': "not an XSD integer",
    '"\u0663"^^<http://www.w3.org/2001/XMLSchema#integer>': "not an XSD integer",
    '"1e5"^^<http://www.w3.org/2001/XMLSchema#decimal>': "not an XSD decimal",
    '"NaN"^^<http://www.w3.org/2001/XMLSchema#double>': "finite",
    '"2024-02-30T00:00:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>': "no such day",
}


@pytest.mark.parametrize("fmt", ["trig", "nq"])
def test_bad_timestamps_are_rejected_and_the_rest_is_read(tmp_path, fmt):
    event = EVENT[fmt]
    text = event(1)
    for n, time in enumerate(BAD_TIMES, start=2):
        text += event(n, time=time)
    text += event(50)
    results, rejected, letters, process = run(tmp_path, f"s.{fmt}", text.encode(), timeout=60)
    assert process.returncode == 0, process.stderr
    assert values(results) == ["v1", "v50"]
    assert [letter["reason"] for letter in letters] == ["bad-timestamp"] * len(BAD_TIMES)
    for letter, message in zip(letters, BAD_TIMES.values()):
        assert message in letter["error"]


def test_times_at_the_ends_of_the_range_are_read_and_written(tmp_path):
    dt = "<http://www.w3.org/2001/XMLSchema#dateTime>"
    text = (trig_event(1, time=f'"0001-01-01T00:00:00Z"^^{dt}')
            + trig_event(2, time=f'"9999-12-31T23:59:59.999999999Z"^^{dt}'))
    results, rejected, letters, process = run(tmp_path, "s.trig", text.encode(), "--max-time-jump", "none")
    assert process.returncode == 0 and not letters, process.stderr
    assert [r["time"] for r in results] == ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z"]


def test_one_far_future_time_does_not_poison_the_stream(tmp_path):
    text = "".join(trig_event(i) for i in range(1, 11)) + trig_event(999, time=f'"900000000000000"^^{INTEGER}')
    text += "".join(trig_event(i) for i in range(11, 21))
    results, rejected, letters, process = run(tmp_path, "s.trig", text.encode())
    assert process.returncode == 0, process.stderr
    assert len(results) == 20
    assert [letter["reason"] for letter in letters] == ["time-jump"]
    assert "--max-time-jump" in letters[0]["error"] and letters[0]["graph"] == f"<{EX}e999>"
    # Without a bound, that one event makes every later one out of order.
    results, rejected, letters, process = run(tmp_path, "s.trig", text.encode(), "--max-time-jump", "none")
    assert len(results) == 11 and [letter["reason"] for letter in letters] == ["out-of-order"] * 10
    # A tighter bound.
    results, rejected, letters, process = run(tmp_path, "s.trig", text.encode(), "--max-time-jump", "5s")
    assert len(results) == 20
    process = spaseq("run", str(tmp_path / "q.rq"), "--stream", f"S={tmp_path / 's.trig'}",
                     "--max-time-jump", "soon")
    assert process.returncode == 2 and "--max-time-jump" in process.stderr


# -- rejections: counted, sampled, written ---------------------------------------------

def test_rejections_keep_a_sample_and_counts_in_flat_memory():
    engine = Engine(QUERY)
    engine.reject(EventError("warm up", "x:1", reason="syntax"))
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for n in range(200_000):
        engine.reject(EventError(f"bad event {n}", f"s.trig:{n}", reason=("syntax", "duplicate")[n % 2],
                                 text="x" * 1000))
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    stats = engine.stats
    assert stats.rejected == 200_001 and len(stats.rejections) == REJECTION_SAMPLE
    assert stats.rejected_by_reason == {"syntax": 100_001, "duplicate": 100_000}
    assert stats.rejections[-1].text is None         # the sample keeps no rejected text
    assert grown < 1 * MiB


def test_dead_letters_can_be_fixed_and_fed_again(tmp_path):
    text = (trig_event(1) + trig_event(3) + trig_event(2)                     # 2: out of order
            + f"<{EX}e4> {PROV} \"4\"^^{INTEGER} .\n<{EX}e4> {{ <{EX}x4> <{EX}v> . }}\n"   # syntax
            + trig_event(5) + trig_event(6, time=f'"5"^^{INTEGER}'))              # duplicate time
    results, rejected, letters, process = run(tmp_path, "s.trig", text.encode())
    assert process.returncode == 0
    assert [(letter["reason"], letter.get("graph")) for letter in letters] == [
        ("out-of-order", f"<{EX}e2>"), ("syntax", f"<{EX}e4>"), ("duplicate", f"<{EX}e6>")]
    assert len(rejected) == 3 and "3 rejected (" in process.stderr
    # The rejected event's text reads back as that event.
    (event,) = read_text(letters[0]["text"].encode(), "dead", S)
    assert event.time == 2 and event.name == ox.NamedNode(f"{EX}e2") and len(event.triples) == 1
    # The bad statement is there as written, to be fixed.
    assert letters[1]["text"] == f"<{EX}e4> {{ <{EX}x4> <{EX}v> . }}" and letters[1]["length"] == len(letters[1]["text"])


def test_a_flood_of_bad_events_prints_the_first_hundred(tmp_path):
    """A stream of bad events does not flood stderr: the first 100 are printed, then one
    line says the rest are counted; -v prints every one; the dead letters keep them all."""
    text = "".join(trig_event(i, time='"soon"') if i % 2 else trig_event(i) for i in range(1, 301))
    results, rejected, letters, process = run(tmp_path, "s.trig", text.encode())
    assert process.returncode == 0 and len(results) == 150
    assert len(rejected) == 101 and len(letters) == 150 and "150 rejected (150 bad-timestamp)" in process.stderr
    assert rejected[-1].startswith("spaseq: more rejected events are counted, not printed") and "dead.jsonl" in rejected[-1]
    results, rejected, letters, process = run(tmp_path, "s.trig", text.encode(), "-v")
    assert len(rejected) == 150


def test_a_usage_error_leaves_the_dead_letter_file_alone(tmp_path):
    (tmp_path / "q.rq").write_text(QUERY)
    (tmp_path / "s.trig").write_text(trig_event(1))
    dead = tmp_path / "dead.jsonl"
    dead.write_text("earlier letters\n")
    for bad in (["--stream", f"T={tmp_path / 's.trig'}"], ["--stream", f"S={tmp_path / 'missing.trig'}"],
                ["--stream", f"S={tmp_path / 's.trig'}", "--format", "trig"],
                ["--stream", f"S={tmp_path / 's.trig'}", "--rate", "fast"]):
        process = spaseq("run", str(tmp_path / "q.rq"), "--dead-letter", str(dead), *bad)
        assert process.returncode == 2, process.stderr
        assert dead.read_text() == "earlier letters\n"


def test_control_characters_are_escaped_in_messages(tmp_path):
    text = trig_event(1, time='"\\u001b[2J\\u202e"^^<http://www.w3.org/2001/XMLSchema#integer>') + trig_event(2)
    text += f"<{EX}e3> {PROV} 3 .\n<{EX}e3> {{ <{EX}x3> <{EX}v> \"a\" \x07 . }}\n"
    results, rejected, letters, process = run(tmp_path, "s.trig", text.encode())
    assert process.returncode == 0 and len(results) == 1
    assert len(rejected) == 2
    assert not any(ch in process.stderr for ch in "\x1b\x07\u202e")
    assert "\\x1b" in rejected[0] and "\\u202e" in rejected[0]


# -- a byte order mark ------------------------------------------------------------------

BOM = "\ufeff".encode()
PREFIXED_TRIG = f"@prefix : <{EX}> .\n" + "".join(
    f':e{i} {PROV} "{i}"^^{INTEGER} .\n:e{i} {{ :x{i} :v "v{i}" . }}\n' for i in range(1, 4))


@pytest.mark.parametrize("name, data", [
    ("s.trig", BOM + PREFIXED_TRIG.encode()),           # the prefix line first: all events were lost
    ("s.nq", BOM + "".join(nquads_event(i) for i in range(1, 4)).encode()),
    ("s.trig.gz", gzip.compress(BOM + PREFIXED_TRIG.encode())),
])
def test_a_byte_order_mark_starting_a_stream_file_is_not_text(tmp_path, name, data):
    """Editors on Windows start UTF-8 files with U+FEFF; pyoxigraph takes it for a term."""
    results, rejected, _, process = run(tmp_path, name, data)
    assert process.returncode == 0 and not rejected, process.stderr
    assert values(results) == ["v1", "v2", "v3"]


def test_a_byte_order_mark_in_the_query_the_kb_stdin_and_a_manifest(tmp_path):
    (tmp_path / "q.rq").write_bytes(BOM + QUERY.replace("?x :v ?v", "?x :v ?v . GRAPH :g { ?x :ok true }").encode())
    (tmp_path / "kb.ttl").write_bytes(BOM + f"@prefix : <{EX}> .\n:x1 :ok true .\n:x2 :ok true .\n".encode())
    process = subprocess.run(SPASEQ + ["run", "q.rq", "--stream", "S=-", "--kb", f"{EX}g=kb.ttl"], cwd=tmp_path,
                             input=BOM + PREFIXED_TRIG.encode(), capture_output=True, timeout=120)
    assert process.returncode == 0 and b" 0 rejected;" in process.stderr, process.stderr
    assert values([json.loads(line) for line in process.stdout.splitlines()]) == ["v1", "v2"]
    (tmp_path / "a.nt").write_bytes(BOM + f'<{EX}x1> <{EX}v> "v1" .\n<{EX}x2> <{EX}v> "v2" .\n'.encode())
    (tmp_path / "m.txt").write_bytes(BOM + f"<{S}> <./a.nt> 1\n".encode())
    (tmp_path / "plain.rq").write_text(QUERY)
    process = spaseq("run", str(tmp_path / "plain.rq"), "--manifest", str(tmp_path / "m.txt"))
    assert process.returncode == 0 and " 0 rejected;" in process.stderr, process.stderr
    assert values([json.loads(line) for line in process.stdout.splitlines()]) == ["v1", "v2"]


# -- a flood of prefixes --------------------------------------------------------------------

def _prefixed_text(prefixes: int, events: int, redefine_at: int | None = None) -> str:
    """``prefixes`` declarations of long IRIs, then events whose triples use a few of
    them (one declared late, beside the events; one redefined at ``redefine_at``)."""
    lines = ["@prefix prov: <http://www.w3.org/ns/prov#> .", "@prefix : <http://example/> ."]
    lines += [f"@prefix p{i}: <http://example.org/{'long/' * 8}{i}/> ." for i in range(prefixes)]
    for t in range(1, events + 1):
        if t == 3:
            lines.append("@prefix late: <http://example.org/late/> .")
        if t == redefine_at:
            lines.append("@prefix p7: <http://example.org/redefined/> .")
        lines.append(f":e{t} prov:generatedAtTime {t} .")
        lines.append(f":e{t} {{ :x{t} p7:v p{t % prefixes}:w{t} ; :kind {'late:k' if t >= 3 else ':k'} . }}")
    return "\n".join(lines) + "\n"


def _triples(items) -> list:
    return [(item.time, sorted(str(t) for t in item.triples)) for item in items if isinstance(item, Event)]


def test_prefixes_past_the_header_size_are_given_to_each_statement_that_shows_them():
    """Past 8 KiB of declarations, a statement is parsed after those whose names it
    shows (a sender that declared a hundred thousand made every later statement parse
    them all again: 352 events/s).  The events read equal pyoxigraph's whole parse."""
    text = _prefixed_text(2000, 300, redefine_at=150)
    items = read_text(text.encode(), "t.trig", "http://example.org/s")
    assert not [item for item in items if not isinstance(item, Event)]
    expected = {}
    for quad in ox.parse(input=text.encode(), format=ox.RdfFormat.TRIG):
        if not isinstance(quad.graph_name, ox.DefaultGraph):
            expected.setdefault(int(quad.graph_name.value.rsplit("e", 1)[1]), []).append(
                str(ox.Triple(quad.subject, quad.predicate, quad.object)))
    assert _triples(items) == [(t, sorted(expected[t])) for t in range(1, 301)]


def test_a_text_declares_at_most_max_prefixes():
    """Each prefix is kept for the rest of the text: without a bound, a flood of
    declarations grew the memory and the time of every later statement."""
    text = _prefixed_text(reader.MAX_PREFIXES + 5, 4)
    items = read_text(text.encode(), "t.trig", "http://example.org/s")
    too_many = [item for item in items if not isinstance(item, Event) and item.reason == "too-large"]
    assert len(too_many) == 8           # (prov:, : and MAX_PREFIXES + 5 others, then late:)
    assert too_many[0].message.startswith(f"more than {reader.MAX_PREFIXES:,} prefixes declared in one text")
    assert too_many[0].position == f"t.trig:{reader.MAX_PREFIXES + 1}"
    assert [item.time for item in items if isinstance(item, Event)] == [1, 2]    # (3 and 4 use late:)
