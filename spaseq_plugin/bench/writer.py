"""``spaseq bench --writer``: the JSON-lines writer alone, in results per second.

The results are the peers' V-shape answers' shape (a company IRI and three
integer prices, ``xsd:dateTime`` times, a few results per timestamp), made
before the clock starts; the writer writes them into a discarding text
sink.  The same run times the plain way of writing them (a ``json.dumps``
of the whole row and one ``write`` per line), so the ratio holds on a busy
machine.
"""

from __future__ import annotations

import io
import json
import time

import pyoxigraph as ox

from ..output.formats import JsonLinesWriter
from ..output.writer import events_json
from ..events import format_time
from ..runtime.results import Result, term_to_json

_EX = "http://example.org/stock/"
_T0 = 1704067200        # 2024-01-01T00:00:00Z


class Discard(io.TextIOBase):
    """A text sink that keeps nothing but the number of characters written."""

    def __init__(self):
        self.chars = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.chars += len(text)
        return len(text)


def sample_results(n: int) -> list[Result]:
    """``n`` results shaped like the V-shape's: ?c ?p1 ?p2 ?p3, six per timestamp."""
    companies = [ox.NamedNode(f"{_EX}c{i}") for i in range(100)]
    prices = [ox.Literal(str(p), datatype=ox.NamedNode("http://www.w3.org/2001/XMLSchema#integer"))
              for p in range(1, 101)]
    out = []
    for i in range(n):
        bindings = {"c": companies[(i * 7) % 100], "p1": prices[(i * 13) % 100],
                    "p2": prices[(i * 17) % 100], "p3": prices[(i * 19) % 100]}
        out.append(Result(_T0 + i // 6, True, bindings, None, ()))
    return out


def plain_write(out, result: Result, with_events: bool = False) -> None:
    """A result written the straightforward way: the row as a dict, ``json.dumps``, a write."""
    row = {"time": format_time(result.time, result.is_datetime),
           "bindings": {k: term_to_json(v) for k, v in (result.bindings or {}).items()}}
    if result.triples is not None:
        row["triples"] = [str(t) + " ." for t in result.triples]
    if with_events:
        row["events"] = events_json(result)
    out.write(json.dumps(row, ensure_ascii=False) + "\n")


def measure_writer(n: int = 200_000) -> dict:
    """Results per second of the JSON-lines writer and of the plain way, in one run."""
    results = sample_results(n)
    sink = Discard()
    started = time.perf_counter()
    writer = JsonLinesWriter(sink, ["c", "p1", "p2", "p3"])
    for result in results:
        writer.write(result)
    writer.close()
    writer_seconds = time.perf_counter() - started
    plain_sink = Discard()
    started = time.perf_counter()
    for result in results:
        plain_write(plain_sink, result)
    plain_seconds = time.perf_counter() - started
    return {"results": n, "writer_per_s": n / writer_seconds, "plain_per_s": n / plain_seconds,
            "same_output": same_text(results[:2_000])}


def same_text(results: list[Result]) -> bool:
    """Does the writer write exactly what the plain way writes?"""
    fast, plain = io.StringIO(), io.StringIO()
    writer = JsonLinesWriter(fast, ["c", "p1", "p2", "p3"])
    for result in results:
        writer.write(result)
        plain_write(plain, result)
    writer.close()
    return fast.getvalue() == plain.getvalue()


def writer_report(n: int = 200_000) -> str:
    m = measure_writer(n)
    return (f"jsonl writer: {m['writer_per_s']:,.0f} results/s ({1e6 / m['writer_per_s']:.1f} us each); "
            f"json.dumps per result: {m['plain_per_s']:,.0f} results/s; "
            f"ratio {m['writer_per_s'] / m['plain_per_s']:.1f}x; {m['results']:,} results"
            + ("" if m["same_output"] else "; OUTPUT DIFFERS"))
