"""The JSON-lines result writer, the one ``spaseq run`` uses by default.

A hot module (compiled with the runtime: see ``compiled.py``): a
skip-till-any query writes several results per event, and writing them cost
as much as a third of the engine's time.  A line is never built as one
string: its pieces (the time head, made once per timestamp; each variable's
key, made once; each term's JSON, cached) go on a list that one ``join``
turns into text every ``BUFFERED_LINES`` lines, once the terms buffered
reach ``BUFFERED_CHARS`` characters (a result may hold a literal of megabytes,
and ``spaseq run`` over stream files leaves flushing to the writer), or at
:meth:`flush`.
"""

from __future__ import annotations

import json
from typing import IO

try:
    import cython
except ImportError:     # interpreted, without Cython installed
    from ..compiled import shadow as cython
if not cython.compiled:     # interpreted, with Cython installed too: declared attributes become slots
    from ..compiled import shadow as cython
from ..evaluators.sparql_values import RevisitedTermCache
from ..events import format_time
from ..runtime.results import Result, term_to_json
from .writer import events_json


@RevisitedTermCache
def _term_text(term) -> str:
    """A term's JSON text, remembered for the terms used last: results repeat their values
    (the same term objects: a run's value is in each of its matches)."""
    return json.dumps(term_to_json(term), ensure_ascii=False)


_term_json = _term_text.get          # (a bound C method: cheaper to call than the cache itself)
_BUFFERED_LINES = cython.declare(cython.Py_ssize_t, 512)
_BUFFERED_CHARS = cython.declare(cython.Py_ssize_t, 1 << 20)


@cython.cclass
class JsonLinesWriter:
    """One JSON object per line: ``{"time": T, "bindings": {var: term}}``.

    The line is the text ``json.dumps(row, ensure_ascii=False)`` gives.  A
    result with an ``id`` (``spaseq run --checkpoint``) shows it, unless
    ``with_ids`` is off (an output file written exactly once has no use for it).
    A :class:`~.writer.Writer`, typed: its attributes are C fields compiled."""
    out = cython.declare(object, visibility="public")
    variables = cython.declare(object, visibility="public")
    with_events = cython.declare(object, visibility="public")
    with_ids = cython.declare(object, visibility="public")
    _pieces = cython.declare(list)
    _lines = cython.declare(cython.Py_ssize_t)
    _chars = cython.declare(cython.Py_ssize_t)  # of the terms, triples and events buffered
    _keys = cython.declare(dict)                # variable -> '"name": '
    _time = cython.declare(object)              # the time and is_datetime of ``_head``
    _is_datetime = cython.declare(object)
    _head = cython.declare(object)              # '{"time": T, "bindings": {'

    BUFFERED_LINES = _BUFFERED_LINES
    BUFFERED_CHARS = _BUFFERED_CHARS

    def __init__(self, out: IO[str], variables: list[str], with_events: bool = False, with_ids: bool = True):
        self.out = out
        self.variables = variables
        self.with_events = with_events
        self.with_ids = with_ids
        self._pieces = []
        self._lines = 0
        self._chars = 0
        self._keys = {}
        self._time = None
        self._is_datetime = None
        self._head = ""

    @cython.locals(pieces=list, keys=dict, first=cython.bint, chars=cython.Py_ssize_t, text=str)
    def write(self, result: Result) -> None:
        time = result.time
        is_datetime = result.is_datetime
        # the same time object, as for every result of one event, or an equal one of the same type
        if not (time is self._time and is_datetime is self._is_datetime) and not (
                time == self._time and type(time) is type(self._time) and is_datetime == self._is_datetime):
            self._time, self._is_datetime = time, is_datetime
            shown = format_time(time, is_datetime)
            # (an xsd:dateTime's text has nothing JSON escapes: json.dumps took twice format_time's time)
            self._head = '{"time": ' + ('"' + shown + '"' if is_datetime else json.dumps(shown)) + ', "bindings": {'
        pieces = self._pieces
        keys = self._keys
        pieces.append(self._head)
        first = True
        chars = self._chars
        bindings = result.bindings
        if bindings:
            for name, term in bindings.items():
                key = keys.get(name)
                if key is None:
                    key = keys[name] = json.dumps(name, ensure_ascii=False) + ": "
                if not first:
                    pieces.append(", ")
                first = False
                pieces.append(key)
                text = _term_json(term)
                chars += len(text)
                pieces.append(text)
        pieces.append("}")
        if result.triples is not None:
            text = ', "triples": ' + json.dumps([str(t) + " ." for t in result.triples], ensure_ascii=False)
            chars += len(text)
            pieces.append(text)
        if self.with_events:
            text = ', "events": ' + json.dumps(events_json(result), ensure_ascii=False)
            chars += len(text)
            pieces.append(text)
        if result.id is not None and self.with_ids:
            pieces.append(', "id": "' + result.id + '"')
        pieces.append("}\n")
        self._lines += 1
        self._chars = chars
        if self._lines >= _BUFFERED_LINES or chars >= _BUFFERED_CHARS:
            self.flush()

    def flush(self) -> None:
        if self._pieces:
            self.out.write("".join(self._pieces))
            self._pieces.clear()
            self._lines = 0
            self._chars = 0

    def close(self) -> None:
        self.flush()
        self.out.flush()
