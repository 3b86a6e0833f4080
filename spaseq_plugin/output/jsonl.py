"""The JSON-lines result writer, the one ``spaseq run`` uses by default.

A hot module (compiled with the runtime: see ``compiled.py``): a
skip-till-any query writes several results per event, and writing them cost
as much as a third of the engine's time.  A line is never built as one
string: its pieces (the time head, made once per timestamp; each variable's
key, made once; each term's JSON, cached) go on a list that one ``join``
turns into text every ``BUFFERED_LINES`` lines or at :meth:`flush`.
"""

from __future__ import annotations

import json
from typing import IO

from ..evaluators.sparql_values import RevisitedTermCache
from ..events import format_time
from ..runtime.results import Result, term_to_json
from .writer import Writer, events_json


@RevisitedTermCache
def _term_text(term) -> str:
    """A term's JSON text, remembered for the terms used last: results repeat their values
    (the same term objects: a run's value is in each of its matches)."""
    return json.dumps(term_to_json(term), ensure_ascii=False)


class JsonLinesWriter(Writer):
    """One JSON object per line: ``{"time": T, "bindings": {var: term}}``.

    The line is the text ``json.dumps(row, ensure_ascii=False)`` gives.  A
    result with an ``id`` (``spaseq run --checkpoint``) shows it, unless
    ``with_ids`` is off (an output file written exactly once has no use for it)."""

    BUFFERED_LINES = 512

    def __init__(self, out: IO[str], variables: list[str], with_events: bool = False, with_ids: bool = True):
        super().__init__(out, variables, with_events)
        self.with_ids = with_ids
        self._pieces: list[str] = []
        self._lines = 0
        self._keys: dict[str, str] = {}           # variable -> '"name": '
        self._time = None                         # the time and is_datetime of ``_head``
        self._is_datetime = None
        self._head = ""                           # '{"time": T, "bindings": {'

    def write(self, result: Result) -> None:
        time = result.time
        is_datetime = result.is_datetime
        # the same time object, as for every result of one event, or an equal one of the same type
        if not (time is self._time and is_datetime is self._is_datetime) and not (
                time == self._time and type(time) is type(self._time) and is_datetime == self._is_datetime):
            self._time, self._is_datetime = time, is_datetime
            self._head = '{"time": ' + json.dumps(format_time(time, is_datetime)) + ', "bindings": {'
        pieces = self._pieces
        keys = self._keys
        pieces.append(self._head)
        first = True
        for name, term in (result.bindings or {}).items():
            key = keys.get(name)
            if key is None:
                key = keys[name] = json.dumps(name, ensure_ascii=False) + ": "
            if not first:
                pieces.append(", ")
            first = False
            pieces.append(key)
            pieces.append(_term_text(term))
        pieces.append("}")
        if result.triples is not None:
            pieces.append(', "triples": ' + json.dumps([str(t) + " ." for t in result.triples],
                                                       ensure_ascii=False))
        if self.with_events:
            pieces.append(', "events": ' + json.dumps(events_json(result), ensure_ascii=False))
        if result.id is not None and self.with_ids:
            pieces.append(', "id": "' + result.id + '"')
        pieces.append("}\n")
        self._lines += 1
        if self._lines >= self.BUFFERED_LINES:
            self.flush()

    def flush(self) -> None:
        if self._pieces:
            self.out.write("".join(self._pieces))
            self._pieces.clear()
            self._lines = 0
