"""The result writers' hot path: JSON lines made from cached pieces, written through a buffer."""

from __future__ import annotations

import io
import json
import selectors
import subprocess
import sys
from decimal import Decimal

import pyoxigraph as ox
from hypothesis import given, settings, strategies as st

from spaseq_plugin import Event
from spaseq_plugin.bench.writer import plain_write
from spaseq_plugin.output.formats import JsonLinesWriter, SparqlJsonWriter
from spaseq_plugin.runtime.results import Result

XSD = "http://www.w3.org/2001/XMLSchema#"
EX = "http://example/"

texts = st.text(max_size=12)
terms = st.one_of(
    st.builds(lambda t: ox.NamedNode(EX + t), st.text(alphabet="abé0_-", max_size=8)),
    st.builds(lambda t: ox.BlankNode("b" + t), st.text(alphabet="ab019", max_size=8)),
    st.builds(ox.Literal, texts),
    st.builds(lambda t, lang: ox.Literal(t, language=lang), texts, st.sampled_from(["en", "fr-BE", "de"])),
    st.builds(lambda n: ox.Literal(str(n), datatype=ox.NamedNode(XSD + "integer")), st.integers()),
    st.builds(lambda t: ox.Literal(t, datatype=ox.NamedNode(XSD + "decimal")), st.sampled_from(["1.5", "0.0"])),
)
times = st.one_of(st.integers(0, 4 * 10**9), st.decimals(0, 4 * 10**9, places=3, allow_nan=False))
variables = st.sampled_from(["a", "b", "price", "é", 'q"uote'])


@st.composite
def results(draw) -> Result:
    time = draw(times)
    is_datetime = draw(st.booleans())
    if draw(st.booleans()):
        triple = ox.Triple(ox.NamedNode(EX + "s"), ox.NamedNode(EX + "p"), draw(terms))
        return Result(time, is_datetime, None, [triple], (), ox.NamedNode(EX + "g"))
    bindings = draw(st.dictionaries(variables, terms, max_size=4))
    events = tuple(Event("http://example/s", t, (), ox.NamedNode(f"{EX}e{t}") if t % 2 else None)
                   for t in draw(st.lists(st.integers(0, 100), max_size=3)))
    return Result(time, is_datetime, bindings, None, events)


@settings(max_examples=150, deadline=None)
@given(st.lists(results(), max_size=30), st.booleans())
def test_jsonl_lines_are_the_text_json_dumps_gives(batch, with_events):
    """Same text, byte for byte, as one json.dumps of the whole row per result: cached terms,
    keys and times (Decimal and int times that compare equal are kept apart) change nothing."""
    fast, plain = io.StringIO(), io.StringIO()
    writer = JsonLinesWriter(fast, [], with_events)
    for result in batch:
        writer.write(result)
        plain_write(plain, result, with_events)
    writer.close()
    assert fast.getvalue() == plain.getvalue()
    for line in fast.getvalue().split("\n")[:-1]:     # (not splitlines: U+0085 and U+2028 stay in strings)
        json.loads(line)


@settings(max_examples=100, deadline=None)
@given(st.lists(results().filter(lambda r: r.bindings is not None), max_size=20), st.booleans())
def test_the_sparql_json_document_is_written_as_results_come(batch, with_events):
    """Each binding is on its way out once written (a long run held them all, 296 MB for
    114,576 results); the whole is one SPARQL 1.1 JSON results document."""
    out = io.StringIO()
    writer = SparqlJsonWriter(out, ["a", "b", "price", "é", 'q"uote'], with_events)
    for index, result in enumerate(batch):
        writer.write(result)
        assert out.getvalue().count('"time": {') == index + 1
    writer.close()
    doc = json.loads(out.getvalue())
    assert doc["head"]["vars"][0] == "time" and len(doc["results"]["bindings"]) == len(batch)
    for row, result in zip(doc["results"]["bindings"], batch):
        assert set(row) == set(result.bindings) | {"time"} | ({"events"} if with_events else set())


def test_equal_times_of_other_types_are_formatted_apart():
    fast = io.StringIO()
    writer = JsonLinesWriter(fast, [])
    for time in (1, Decimal("1.0"), 1):
        writer.write(Result(time, False, {}, None, ()))
    writer.close()
    assert fast.getvalue().splitlines() == ['{"time": 1, "bindings": {}}', '{"time": 1.0, "bindings": {}}',
                                            '{"time": 1, "bindings": {}}']


class CountingOut(io.StringIO):
    def __init__(self):
        super().__init__()
        self.writes = 0

    def write(self, text):
        self.writes += 1
        return super().write(text)


def test_lines_are_written_in_blocks_and_on_flush():
    out = CountingOut()
    writer = JsonLinesWriter(out, ["a"])
    result = Result(1, False, {"a": ox.NamedNode(EX + "x")}, None, ())
    for _ in range(JsonLinesWriter.BUFFERED_LINES + 3):
        writer.write(result)
    assert out.writes == 1                      # one block of BUFFERED_LINES lines so far
    writer.flush()
    assert out.writes == 2
    writer.flush()                              # nothing held: nothing written
    assert out.writes == 2
    writer.close()
    assert out.getvalue().count("\n") == JsonLinesWriter.BUFFERED_LINES + 3


def test_large_terms_are_written_once_they_fill_the_buffer():
    # A result may hold a literal of megabytes: the buffer is bounded by its terms'
    # characters too, not only by its lines (512 such lines held 256 MiB).
    out = CountingOut()
    writer = JsonLinesWriter(out, ["a"])
    size = JsonLinesWriter.BUFFERED_CHARS // 4 + 1
    for i in range(9):
        writer.write(Result(i, False, {"a": ox.Literal(str(i) * size)}, None, ()))
    assert out.writes == 2                      # after the 4th and the 8th line
    assert out.getvalue().count("\n") == 8
    writer.close()
    assert out.getvalue().count("\n") == 9


QUERY = """PREFIX : <http://example/>
SELECT ?a ?b WITHIN 100 SECONDS
FROM STREAM S <http://example.org/s>
WHERE { SEQ (A ; B)
  DEFINE GPM A ON S { ?a :kind "a" }
  DEFINE GPM B ON S { ?b :kind "b" } }
"""


def trig(t: int, kind: str) -> str:
    g = f"<{EX}e{t}>"
    return (f'{g} <http://www.w3.org/ns/prov#generatedAtTime> "{t}"^^<{XSD}integer> .\n'
            f'{g} {{ <{EX}x{t}> <{EX}kind> "{kind}" . }}\n')


def test_a_live_source_gets_its_results_out_while_the_input_waits(tmp_path):
    """`spaseq run` on standard input: the result of time 2 is written as soon as time 3
    arrives, while standard input stays open (the writer's buffer is flushed before the
    next read, which waits)."""
    (tmp_path / "q.rq").write_text(QUERY)
    process = subprocess.Popen([sys.executable, "-m", "spaseq_plugin", "run", str(tmp_path / "q.rq"),
                                "--stream", "S=-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        process.stdin.write(trig(1, "a") + trig(2, "b") + trig(3, "c") + trig(4, "c"))
        process.stdin.flush()
        selector = selectors.DefaultSelector()
        selector.register(process.stdout, selectors.EVENT_READ)
        assert selector.select(timeout=60), "no result while the input stays open"
        line = process.stdout.readline()
        assert json.loads(line)["bindings"]["b"]["value"] == EX + "x2"
        assert process.poll() is None                       # still reading its input
    finally:
        process.stdin.close()
        process.wait(timeout=60)
    assert process.returncode == 0, process.stderr.read()
