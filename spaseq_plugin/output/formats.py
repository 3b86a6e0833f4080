"""Result writers for the command line: jsonl, csv, tsv, json, trig.

SELECT results go to any of them but trig; CONSTRUCT results (graphs) to
trig and jsonl (:func:`check_format` refuses the others).  With
``with_events`` (``--events``), each result also shows the events that made
it, as a list of ``{"stream": IRI, "time": T, "graph": IRI}`` objects: a key
``events`` in jsonl, a last column (or variable) ``events`` holding that list
as JSON text in csv, tsv and json.
"""

from __future__ import annotations

import csv
import json
from typing import IO

import pyoxigraph as ox

from ..errors import UsageError
from ..evaluators.protocol import term_text
from ..events import PROV_GENERATED_AT, format_time, time_literal
from ..hookspecs import ResultSink, hookimpl
from ..runtime.results import ConstructedEvents, Result, term_to_json
from .jsonl import JsonLinesWriter
from .writer import Writer, events_json, plain_value

FORMATS = ("jsonl", "csv", "tsv", "json", "trig")
EVENTS_COLUMN = "events"


def check_format(fmt: str, *, construct: bool, variables: list[str], with_events: bool = False) -> None:
    """Refuse, with a UsageError, a format that cannot show a query's results."""
    if construct and fmt in ("csv", "tsv", "json"):
        raise UsageError(f"--format {fmt} is for SELECT queries: a CONSTRUCT query's results are graphs "
                         "(use --format trig, or jsonl)")
    if not construct and fmt == "trig":
        raise UsageError("--format trig is for CONSTRUCT queries: a SELECT query's results are "
                         "solutions (use --format jsonl, csv, tsv or json)")
    if with_events and fmt == "trig":
        raise UsageError("--events: TriG output holds the constructed graphs only "
                         "(use --format jsonl to see each result's events)")
    if with_events and fmt != "jsonl" and EVENTS_COLUMN in variables:
        raise UsageError(f"--events: the query has a variable ?{EVENTS_COLUMN}, which the events column "
                         "would hide (rename it, or use --format jsonl)")


def _events_text(result: Result) -> str:
    return json.dumps(events_json(result), ensure_ascii=False, separators=(",", ":"))


class DelimitedWriter(Writer):
    """CSV (plain values, as SPARQL 1.1 CSV results) or TSV (N-Triples terms)."""

    def __init__(self, out, variables, with_events=False, tsv: bool = False):
        super().__init__(out, variables, with_events)
        self.tsv = tsv
        columns = ["time"] + variables + ([EVENTS_COLUMN] if with_events else [])
        if tsv:
            out.write("\t".join("?" + c for c in columns) + "\n")
        else:
            self.csv = csv.writer(out, lineterminator="\r\n")
            self.csv.writerow(columns)

    def write(self, result: Result) -> None:
        bindings = result.bindings or {}
        time = format_time(result.time, result.is_datetime)
        if self.tsv:
            cells = [str(time_literal(result.time, result.is_datetime))]
            cells += [term_text(bindings[v]) if v in bindings else "" for v in self.variables]
            if self.with_events:
                cells.append(str(ox.Literal(_events_text(result))))
            self.out.write("\t".join(cells) + "\n")
        else:
            cells = [str(time)] + [plain_value(bindings.get(v)) for v in self.variables]
            if self.with_events:
                cells.append(_events_text(result))
            self.csv.writerow(cells)


class SparqlJsonWriter(Writer):
    """One SPARQL 1.1 JSON results document; each binding also has ``?time``.  Written
    as results come, one binding a line, so that a long run holds none of them."""

    def __init__(self, out, variables, with_events=False):
        super().__init__(out, variables, with_events)
        self.started = False

    def write(self, result: Result) -> None:
        row = {k: term_to_json(v) for k, v in (result.bindings or {}).items()}
        row["time"] = term_to_json(time_literal(result.time, result.is_datetime))
        if self.with_events:
            row[EVENTS_COLUMN] = term_to_json(ox.Literal(_events_text(result)))
        self._start(",\n")
        self.out.write("   " + json.dumps(row, ensure_ascii=False))

    def close(self) -> None:
        self._start("")
        self.out.write("\n  ]\n }\n}\n")
        super().close()

    def _start(self, separator: str) -> None:
        """The document's head before its first binding (else ``separator``)."""
        if self.started:
            self.out.write(separator)
            return
        self.started = True
        columns = ["time"] + self.variables + ([EVENTS_COLUMN] if self.with_events else [])
        self.out.write('{\n "head": {"vars": ' + json.dumps(columns, ensure_ascii=False)
                       + '},\n "results": {\n  "bindings": [\n')


class TrigWriter(Writer):
    """CONSTRUCT results as graph events, one per match time: a stream file
    another query can read."""

    def __init__(self, out: IO[str], variables: list[str], with_events: bool = False):
        super().__init__(out, variables, with_events)
        self.events = ConstructedEvents()

    def write(self, result: Result) -> None:
        if (event := self.events.add(result)) is not None:
            self.out.write(trig_event(event))

    def flush(self) -> None:
        if (event := self.events.flush()) is not None:
            self.out.write(trig_event(event))
        super().flush()


def trig_event(result: Result) -> str:
    """A CONSTRUCT result as a TriG graph event: its graph block and its timestamp."""
    graph = result.graph
    stamp = ox.Quad(graph, PROV_GENERATED_AT, time_literal(result.time, result.is_datetime))
    quads = [stamp] + [ox.Quad(t.subject, t.predicate, t.object, graph) for t in result.triples or ()]
    return ox.serialize(quads, format=ox.RdfFormat.TRIG).decode()


@hookimpl
def spaseq_result_sinks():
    descriptions = {"jsonl": "JSON lines: {time, bindings} per result", "csv": "SPARQL 1.1 CSV results plus time",
                    "tsv": "SPARQL 1.1 TSV results plus ?time", "json": "SPARQL 1.1 JSON results document",
                    "trig": "CONSTRUCT results as TriG graph events"}
    return [ResultSink(fmt, _opener(fmt), descriptions[fmt]) for fmt in FORMATS]


def _opener(fmt: str):
    def open_writer(out, variables, options):
        return make_writer(fmt, out, variables, **options)
    return open_writer


def make_writer(fmt: str, out: IO[str], variables: list[str], with_events: bool = False,
                with_ids: bool = True) -> Writer:
    if fmt == "jsonl":
        return JsonLinesWriter(out, variables, with_events, with_ids)
    if fmt in ("csv", "tsv"):
        return DelimitedWriter(out, variables, with_events, tsv=fmt == "tsv")
    if fmt == "json":
        return SparqlJsonWriter(out, variables, with_events)
    if fmt == "trig":
        return TrigWriter(out, variables, with_events)
    raise ValueError(f"unknown format {fmt}")
