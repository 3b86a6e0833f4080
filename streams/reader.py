"""Reading a TriG or N-Quads text into events (semantics.md sections 1 and 10).

A stream text (a file, standard input, a TCP connection, an MQTT message)
holds one stream.  Each named graph is one event; its timestamp is the
object of ``<graph> prov:generatedAtTime τ`` in the default graph.  Other
default-graph triples are metadata and are ignored.  :class:`EventReader`
takes the text chunk by chunk, as it arrives, and gives the events (and
the rejections) in the text's order.

The streaming rule
------------------
A text is read as a stream, never whole, so an event must be judged
complete without seeing the rest of it:

* Events are kept in the order their graph first appears in the text.
* An event is **emitted** once its graph block and its timestamp have both
  been read *and* the reader has moved on to another graph (or reached the
  end of the text, or a live sender paused).  The timestamp may come
  before or after the graph.
* Later blocks of the same graph add to the event **only while it has not
  been emitted yet**; a block of a graph that was already emitted is
  rejected.  So a graph's blocks and its timestamp must be near each other.
* An event still without a timestamp when more than ``NEAR_GRAPHS`` other
  graphs have started after it, or at the end of the text, is rejected.
  Events behind it wait for it: output always follows the text's order
  (rejections included).
* A timestamp whose graph does not show up within ``NEAR_GRAPHS`` graphs is
  dropped silently: it may be metadata about something else.
* An empty graph block ``<g> { }`` is an event with no triples.
* An event's position is ``WHERE:LINE``, LINE being the line of the ``{``
  of its graph's first block (TriG) or of its graph's first quad (N-Quads).

Bad input
---------
Bad input never stops a text: each rejection is an ``EventError`` (position
``WHERE:LINE``, a ``reason``, and what was rejected) in the output, in place
of what it rejects, and every event before and after it is read.

* A syntax error rejects the statement it is in (N-Quads: the line; TriG:
  the top-level statement, that is a directive, a triples statement ending
  in ``.``, or a whole graph block ``{ ... }``) and reading resumes at the
  next statement.  A bad graph block rejects the whole event of its graph.
* A statement longer than ``MAX_STATEMENT_BYTES`` is rejected without being
  kept in memory (``too-large``); so is one holding a term (an IRI, a
  literal) over 16 MiB, which pyoxigraph cannot parse.
* An event, or a TriG statement, of more than ``MAX_EVENT_TRIPLES`` triples
  (``too-large``): the fast reading leaves such a piece to the careful one,
  which parses a statement only one quad past the limit and drops the rest
  of an event's graph once the event passes it.
* A graph without a timestamp, a timestamp that is not a valid number or
  ``xsd:dateTime`` in the representable range (``events.parse_timestamp``),
  two different timestamps for one graph, a block of a graph already read.
* After assembly (:class:`OrderCheck`): an event whose time equals
  (duplicate ``(stream, τ)``) or precedes (out of order) the previous
  accepted event of its stream, whose kind of time (number or
  ``xsd:dateTime``) differs from it, or which is more than the maximum time
  jump (``--max-time-jump``, a year by default) after it: one bad clock
  must not make every later event of the stream "out of order".

How: the fast and the careful readings
--------------------------------------
The **careful** reading is the reference.  TriG statements are found by a
light tokenizer (``_TrigSplitter``: it skips IRIs, strings and comments and
tracks braces, in time linear in the text) and each one is parsed alone by
pyoxigraph with the prefixes declared so far, so that a bad statement is
rejected alone; N-Quads lines are parsed one by one.  Each statement gives
the assembler (``_Assembler``) its quads and its line.

The **fast** reading gives exactly the same result for most of the text at
a fraction of the cost.  While the splitter is *idle* (nothing pending, at a
line start), the complete lines up to about ``FAST_BYTES`` are parsed in
one pyoxigraph call, with the same prefixes and base (the base only once the
text shows a relative IRI: ``_TrigParser.piece``).  That parse either
succeeds, and then the lines hold whole statements (a statement cut at a
line end does not parse: it lacks its final '.' or '}', or a long string is
left open), or it fails, and then the lines before the failing one are
tried alone (then half of them, and so on); what cannot be read so is read
carefully up to the next idle line start, and the fast reading goes on with
small pieces that grow back.  Of a parsed piece, the quads are grouped by
graph in one pass (``_group``): *runs* (consecutive quads of one named
graph) and *stamps* (default-graph ``prov:generatedAtTime`` quads).  The
piece is **regular** when

1. its runs can be placed: TriG: the number of ``{`` in the text, less the
   ``{|`` of annotations, equals the number of runs.  Every run lies in
   some graph block and every block in one run (quads of one block are
   consecutive and of one graph; IRIs and prefixed names cannot hold '{'),
   so with equal counts every counted '{' opens a block that is a run of
   its own, in order, and the line of the k-th '{' is that of the k-th
   run.  (A '{' in a string or a comment, an empty block, a block of the
   default graph or a graph written as two blocks in a row make the counts
   differ.)  N-Quads: the piece has as many quads as lines, each line then
   holding one (else the lines holding a statement are counted out);
2. and the assembler can take it without a rejection and without its
   rules on distance mattering (``_Assembler.take_chunk``): every run is a
   graph not seen before, every stamp is a valid timestamp and the only one
   for its graph, every run but the last finds its stamp in the piece (or
   an earlier one) within ``NEAR_GRAPHS`` graphs.

A regular piece is taken at once: the events it completes are built
directly, with the lines of 1.  Anything else is read carefully, so
rejections always come from the careful reading, with its positions.  On
the peers' stock stream (100k events of 2 triples and a timestamp) the
reading costs about 1.6 times the instructions of pyoxigraph's bare parse of
the same bytes (``spaseq bench --read FILE``; docs/bench.md has the figures):
what is left is building the Python objects of the events, their triples
and their timestamps.  A piece holds at most ``FAST_BYTES``; stream files
are fed in chunks of 64 KiB (``files._CHUNK_BYTES``), so that the events a
chunk completes, all made before the first is used, are still in the caches
when they are.  A graph block that the end of a chunk leaves open is not
left to the careful reading (which scans it token by token, then restarts
the fast reading with small pieces): the fast reading waits for its '}'.

Blank node labels are kept, so one label in one text is one blank node.
"""

from __future__ import annotations

import codecs
import dataclasses
import gc
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from itertools import islice

import pyoxigraph as ox

try:
    import cython
except ImportError:     # interpreted, without Cython installed
    from ..compiled import shadow as cython
if not cython.compiled:     # interpreted, with Cython installed too
    from ..compiled import shadow as cython

from ..errors import EventError
from ..events import PROV_GENERATED_AT, Event, Time, distinct, format_time, parse_timestamp, time_literal

__all__ = [
    "DEFAULT_MAX_TIME_JUMP",
    "DONE_MEMORY",
    "EventReader",
    "event_reader",
    "MAX_EVENT_TRIPLES",
    "MAX_STATEMENT_BYTES",
    "MAX_TERM_DEPTH",
    "NestingCheck",
    "NEAR_GRAPHS",
    "OrderCheck",
    "check_order",
    "event_text",
    "line_too_long",
    "parse_line_batch",
    "term_too_deep",
    "term_too_large",
    "TOO_LARGE_TERM",
]

#: How many other graphs may start between a graph's first block and its
#: timestamp (or its other blocks) before the event is judged.
NEAR_GRAPHS = 1000

#: How many finished graph names a reader remembers at most (and at least half
#: as many), to tell a late block or a late different timestamp of an already
#: emitted graph.  Bounded so that a very long text does not grow memory
#: without end.
DONE_MEMORY = 10_000

#: The longest statement (TriG) or line (N-Quads) read: a longer one is
#: rejected as it streams by, without being kept in memory (``--max-statement``).
DEFAULT_MAX_STATEMENT_BYTES = 32 << 20
MAX_STATEMENT_BYTES = DEFAULT_MAX_STATEMENT_BYTES

#: The most triples one event (or one TriG statement) may have: a larger one is
#: rejected as soon as it is seen to be (``--max-event-triples``).  Within the
#: statement limit alone, a short triple takes 8 bytes of text and 0.4-0.8 KB
#: while read: 32 MiB of them took the process past 2 GB.
DEFAULT_MAX_EVENT_TRIPLES = 1_000_000
MAX_EVENT_TRIPLES = DEFAULT_MAX_EVENT_TRIPLES

#: The deepest nesting of RDF 1.2 triple terms (``<<( s p <<( ... )>> )>>``) read
#: (``--max-term-depth``).  pyoxigraph parses and frees a triple term recursively:
#: about 17,000 levels, 600 KB of text, overflowed its stack and killed the process
#: (SIGSEGV); results, checkpoints and SPARQL VALUES write triple terms
#: recursively too.  A text that nests deeper never reaches pyoxigraph.
DEFAULT_MAX_TERM_DEPTH = 64
MAX_TERM_DEPTH = DEFAULT_MAX_TERM_DEPTH
MOST_TERM_DEPTH = 256        # what --max-term-depth may ask: the writers recurse into triple terms

#: How much of a rejected statement's text a rejection carries (for the
#: dead-letter file); its full length is given with it.
TEXT_LIMIT = 64 << 10

#: The default bound on how far one event's time may jump past the previous
#: accepted event of its stream (seconds): a year.
DEFAULT_MAX_TIME_JUMP = 365 * 86400

FAST_BYTES = 1 << 18                # the most a fast piece holds...
FAST_BYTES_AFTER_ERROR = 1 << 12    # ...and the least, after one that was not regular

#: Read with the fast reading where it can (see the module docstring); tests
#: turn it off to compare with the careful reading, which must give exactly
#: the same.
FAST = True
_BYTE_ORDER_MARK = codecs.BOM_UTF8
# The byte order marks of encodings that RDF text is never in (UTF-32 LE's begins
# with UTF-16 LE's, so it comes first); all the marks a text may start with.
_FOREIGN_MARKS = ((codecs.BOM_UTF32_LE, "UTF-32 (little-endian)"), (codecs.BOM_UTF32_BE, "UTF-32 (big-endian)"),
                  (codecs.BOM_UTF16_LE, "UTF-16 (little-endian)"), (codecs.BOM_UTF16_BE, "UTF-16 (big-endian)"))
_MARKS = (_BYTE_ORDER_MARK, *(mark for mark, _ in _FOREIGN_MARKS))
_LONGEST_MARK = 4

def _unmarked_encoding(head: bytes) -> str | None:
    """The UTF-16 or UTF-32 that ``head``, a text's first bytes, is in without a byte
    order mark; None: not one of them.  UTF-8 RDF text never starts with a NUL byte,
    and one right after its first character could only be in a comment, while in
    UTF-16 or UTF-32 every ASCII character has NUL bytes."""
    if len(head) >= 4 and head[0] and head[1:4] == b"\0\0\0":
        return "UTF-32 (little-endian)"
    if len(head) >= 4 and head[:3] == b"\0\0\0" and head[3]:
        return "UTF-32 (big-endian)"
    if len(head) >= 2 and head[0] and not head[1]:
        return "UTF-16 (little-endian)"
    if len(head) >= 2 and not head[0] and head[1]:
        return "UTF-16 (big-endian)"
    return None


_TOKEN_LIMIT = 16 << 20             # pyoxigraph's buffer: a longer term raises MemoryError


# --------------------------------------------------------------------------
# The reader
# --------------------------------------------------------------------------

def event_reader(where: str, stream: str, rdf_format: ox.RdfFormat, *, base: str | None = None,
                 first_line: int = 1, order: OrderCheck | None = None) -> EventReader:
    """An :class:`EventReader` of a TriG or N-Quads text.

    ``where`` names the text in positions (``WHERE:LINE``); ``stream`` is the
    IRI every event gets; ``base`` the base IRI of relative IRIs (TriG);
    ``first_line`` the number of the text's first line; ``order`` an
    :class:`OrderCheck` applied to the events (None: none).
    """
    kind = _NQuadsReader if rdf_format == ox.RdfFormat.N_QUADS else _TrigReader
    return kind(where, stream, base=base, first_line=first_line, order=order)


class EventReader:
    """Events (and rejections) of one text given chunk by chunk (``event_reader``).

    :meth:`feed` takes the next chunk and returns what it completes (only
    complete lines are read: a live text is read as it comes); :meth:`pause`
    says that a live sender paused, so that the event being read is
    complete; :meth:`finish` ends the text.
    """

    def __init__(self, where: str, stream: str, *, base: str | None = None, first_line: int = 1,
                 order: OrderCheck | None = None):
        self.where = where
        self.assembler = _Assembler(where, stream)
        self.order = order
        self.size = FAST_BYTES
        self.at_start = first_line == 1         # (a byte order mark may come first...)
        self.head = b""                         # (...split across chunks)
        self.refused = False                    # its mark says that the text is not UTF-8

    def feed(self, chunk: bytes) -> list[Event | EventError]:
        raise NotImplementedError

    def _text_of(self, chunk: bytes) -> bytes:
        """The text in ``chunk``: at the start, without a byte order mark (bytes that may
        begin one are held until the next chunk tells).  A text that starts with the
        mark of UTF-16 or UTF-32 is one rejection, and none of it is read: read as UTF-8,
        each of its statements would be a syntax error."""
        if not self.at_start:
            return chunk
        if self.refused:
            return b""
        head = self.head + chunk
        # (a newline is what the text's end adds: what is held is then all there is)
        if len(head) < _LONGEST_MARK and not head.endswith(b"\n") and (
                len(head) < 2 or b"\0" in head or any(mark.startswith(head) for mark in _MARKS)):
            self.head = head
            return b""
        self.head = b""
        encoding = next((name for mark, name in _FOREIGN_MARKS if head.startswith(mark)), None)
        if encoding is not None:
            return self._refuse(encoding, "by its byte order mark")
        encoding = _unmarked_encoding(head)
        if encoding is not None:
            return self._refuse(encoding, "without a byte order mark, by the NUL bytes between its first characters")
        self.at_start = False
        return without_byte_order_mark(head)

    def _refuse(self, encoding: str, evidence: str) -> bytes:
        self.refused = True
        self.assembler.take(EventError(
            f"the text is {encoding}, {evidence}: RDF text must be UTF-8, so none of "
            f"it is read (convert it, e.g. with iconv -f {encoding.split()[0]} -t UTF-8)",
            f"{self.where}:1", reason="encoding"))
        return b""

    def pause(self) -> list[Event | EventError]:
        """The sender paused: the graph being read is complete."""
        self._read(final=True)
        self.assembler.leave_graph()
        return self._out()

    def finish(self, truncated: str | None = None) -> list[Event | EventError]:
        """The end of the text.  ``truncated`` (a reason) says that it was cut
        short: the incomplete statement at its end is then dropped and the cut
        is one rejection (``truncated``)."""
        raise NotImplementedError

    def pending(self) -> bool:
        """Whether the text so far ends in a statement not complete yet (more than
        blanks and comments after the last one read): what a cut would lose.  Not
        a statement being dropped for a line too long: it is rejected already."""
        raise NotImplementedError

    def _read(self, final: bool = False) -> None:
        """Read what the text added so far holds; ``final``: no more text comes for now
        (a pause or the end), so nothing may wait for it."""
        raise NotImplementedError

    def _out(self) -> list[Event | EventError]:
        out = self.assembler.drain()
        if self.order is not None and out:
            out = self.order.filter(out)
        return out

    def _regular(self, runs: list, stamps: list, lines: list[int] | None, quads: int) -> bool:
        """Take a parsed piece of ``quads`` quads if it is regular (see the module
        docstring); one of more quads than an event may have is left to the careful
        reading, which rejects the event."""
        if lines is None or quads > MAX_EVENT_TRIPLES:
            return False
        return self.assembler.take_chunk(runs, stamps, lines)


class _TrigReader(EventReader):

    def __init__(self, where, stream, *, base=None, first_line=1, order=None):
        super().__init__(where, stream, base=base, first_line=first_line, order=order)
        self.splitter = _TrigSplitter(first_line)
        self.parser = _TrigParser(where, base)
        self.skipping = False       # dropping the rest of a line too long to keep

    def feed(self, chunk: bytes) -> list[Event | EventError]:
        chunk = self._text_of(chunk)
        if self.skipping:
            chunk = self._skip_long_line(chunk)
        if chunk:
            splitter = self.splitter
            splitter.add(chunk)
            _without_gc(self._read)
            tail = len(splitter.buf) - splitter.end
            if tail > MAX_STATEMENT_BYTES:
                # A line too long to keep: it, and the statement it is in, are rejected
                # at once (a line may never end) and dropped as they come; reading
                # goes on at the next line.  The complete lines before it are read
                # first: the fast reading may be waiting on them for the '}' of a
                # block they seem to open (a '{' in a string), which is not to come.
                if splitter.start < splitter.end:
                    self._read(final=True)
                line, label, head, _ = splitter.abandon()
                graph = self.parser.graph_name(label) if label is not None else None
                self._take([line_too_long(self.where, line, tail, head, graph)]
                           + ([_Unit(line, [], graph, rejected=True)] if graph is not None else []))
                self.skipping = True
        return self._out()

    def _skip_long_line(self, chunk: bytes) -> bytes:
        """Drop the rest of a line too long to keep, as it comes: the chunk's text after it."""
        newline = chunk.find(b"\n")
        if newline < 0:
            return b""
        self.skipping = False
        self.splitter.restart(self.splitter.line_no + 1)
        return chunk[newline + 1:]

    def finish(self, truncated: str | None = None) -> list[Event | EventError]:
        splitter = self.splitter
        if self.skipping:
            self._skip_long_line(b"\n")
        if truncated is None:
            # A last newline makes the last line complete; it changes nothing in TriG.
            splitter.add(self._text_of(b"\n"))
            self._read(final=True)
            if item := splitter.finish():
                self._take(self.parser.parse(item))
        else:
            self._read(final=True)
            lost = self.pending()
            line, label, head, length = splitter.abandon()
            graph = self.parser.graph_name(label) if label is not None else None
            self._take([EventError(f"{truncated}: the text from line {line} on is lost",
                                   f"{self.where}:{line}", reason="truncated",
                                   graph=None if graph is None else str(graph),
                                   **(_text_of(head, length) if lost else {}))]
                       + ([_Unit(line, [], graph, rejected=True)] if graph is not None else []))
        self.assembler.finish()
        return self._out()

    def pending(self) -> bool:
        splitter = self.splitter
        return not self.skipping and splitter.dropped is None and \
            _SPACE.match(splitter.buf, splitter.start).end() < len(splitter.buf)

    def _take(self, units) -> None:
        take = self.assembler.take
        for unit in units:
            take(unit)

    def _read(self, final: bool = False) -> None:
        splitter, parser = self.splitter, self.parser
        while True:
            while FAST and splitter.idle and splitter.start < splitter.end:
                taken = self._fast_piece(final)
                if taken is None:
                    return              # (a graph block open at the end of the text: its rest is to come)
                if not taken:
                    break
            # The careful reading, until idle again (past careful_to) or to the end
            # of the complete lines.
            for statement in splitter.statements(stop=FAST):
                self._take(parser.parse(statement))
            if not (FAST and splitter.idle and splitter.start < splitter.end):
                return

    def _fast_piece(self, final: bool) -> bool | None:
        """Read the lines at the splitter's start in one parse if they are
        regular: whether it did (else they are for the careful reading).  None:
        they are one graph block that the text so far leaves open (cut by the end
        of a chunk); unless ``final``, the fast reading waits for its '}' rather
        than leave the block to the careful reading, which scans it token by
        token and restarts the fast reading with small pieces.  (A brace in a
        string can make it wait for a '}' it need not, no longer.)"""
        splitter = self.splitter
        buf, pos, end = splitter.buf, splitter.start, splitter.end
        if splitter.unfinished:
            if not final and end - pos < FAST_BYTES and buf.find(b"}", pos + splitter.unfinished, end) < 0:
                return None
            splitter.unfinished = 0
        size = min(self.size, MAX_STATEMENT_BYTES)      # (so its statements are within the limit)
        if end - pos > size:
            stop = _statement_end(buf, pos, pos + size)
            if stop <= pos:
                stop = buf.rfind(b"\n", pos, pos + size) + 1 or buf.index(b"\n", pos) + 1
                if stop - pos > MAX_STATEMENT_BYTES:
                    return False                # (the careful reading rejects it)
        else:
            stop = end
        if stop == end and not final:
            # A graph block that the text leaves open would fail the parse (after
            # reading it all): the piece ends before it, or waits for its rest.
            block = _open_block_line(buf, pos, end)
            if block == pos and end - pos < FAST_BYTES:
                splitter.unfinished = end - pos
                return None
            if block > pos:
                stop = block
        text = bytes(buf[pos:stop])
        piece = self.parser.piece(text)
        while piece.error_line is not None:
            # The lines before the failing one (and, when it is the last one, up to
            # where a statement may end before it) may be whole statements.
            if piece.error_line < piece.lines:
                cut = _line_end(text, piece.error_line - 1)
            else:
                cut = _end_before_last_line(text)
            if not 0 < cut < len(text):
                break
            text = text[:cut]
            piece = self.parser.piece(text)
        if piece.error_line is not None or not self._regular(
                piece.runs, piece.stamps, _block_lines(text, piece.runs, splitter.line_no), piece.quads):
            self.size = FAST_BYTES_AFTER_ERROR
            splitter.careful_to = pos + len(text)
            return False
        self.parser.adopt(piece)
        splitter.skip(pos + len(text), piece.lines)
        self.size = min(2 * self.size, FAST_BYTES)
        return True


class _NQuadsReader(EventReader):

    def __init__(self, where, stream, *, base=None, first_line=1, order=None):
        super().__init__(where, stream, base=base, first_line=first_line, order=order)
        self.buf = bytearray()
        self.end = 0                    # the end of the complete lines in buf
        self.line = first_line          # the line of buf[0]
        self.skipping = False           # dropping the rest of a line too long to keep

    def feed(self, chunk: bytes) -> list[Event | EventError]:
        chunk = self._text_of(chunk)
        if self.skipping:
            chunk = self._skip_long_line(chunk)
        if chunk:
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                self.end = len(self.buf) + newline + 1
            self.buf += chunk
            _without_gc(self._read)
        return self._out()

    def finish(self, truncated: str | None = None) -> list[Event | EventError]:
        if self.skipping:
            self._skip_long_line(b"\n")
        if truncated is None:
            self.feed(b"\n")
        else:
            self._read()
            lost = _text_of(bytes(self.buf[:TEXT_LIMIT]), len(self.buf)) if self.pending() else {}
            self.buf.clear()
            self.assembler.take(EventError(f"{truncated}: the text from line {self.line} on is lost",
                                           f"{self.where}:{self.line}", reason="truncated", **lost))
        self.assembler.finish()
        return self._out()

    def pending(self) -> bool:
        return not self.skipping and _SPACE.match(self.buf).end() < len(self.buf)

    def _read(self, final: bool = False) -> None:
        buf, end = self.buf, self.end
        size = min(self.size, MAX_STATEMENT_BYTES)      # (so its lines are within the limit)
        start = 0
        while start < end:
            stop = buf.rfind(b"\n", start, start + size) + 1 if end - start > size else end
            if stop <= start:
                stop = buf.index(b"\n", start) + 1       # one line longer than the piece size
                if stop - start > MAX_STATEMENT_BYTES:
                    self.assembler.take(line_too_long(self.where, self.line, stop - start - 1,
                                                       bytes(buf[start:start + TEXT_LIMIT])))
                    self.line += 1
                    start = stop
                    continue
            self._piece(bytes(buf[start:stop]))
            start = stop
        del buf[:start]
        self.end = 0
        if len(buf) > MAX_STATEMENT_BYTES:
            # rejected at once (a line may never end), the rest dropped as it comes
            self.assembler.take(line_too_long(self.where, self.line, len(buf), bytes(buf[:TEXT_LIMIT])))
            self.skipping = True
            buf.clear()

    def _skip_long_line(self, chunk: bytes) -> bytes:
        """Drop the rest of a line too long to keep, as it comes: the chunk's text after it."""
        newline = chunk.find(b"\n")
        if newline < 0:
            return b""
        self.skipping = False
        self.line += 1
        return chunk[newline + 1:]

    def _piece(self, text: bytes) -> None:
        first = self.line
        lines = _newlines(text, 0, len(text))
        self.line += lines
        if FAST:
            try:
                if term_too_deep(text) >= 0:
                    raise SyntaxError("read line by line: a line nests triple terms too deep")
                runs, stamps, quads = _group(ox.parse(text, format=ox.RdfFormat.N_QUADS))
            except (SyntaxError, MemoryError):
                pass
            else:
                if quads == lines:
                    numbers = [first + run[2] for run in runs]
                else:
                    significant = [number for number, _ in _significant_lines(text, first)]
                    numbers = [significant[run[2]] for run in runs] if len(significant) == quads else None
                if self._regular(runs, stamps, numbers, quads):
                    self.size = min(2 * self.size, FAST_BYTES)
                    return
            self.size = FAST_BYTES_AFTER_ERROR
        take = self.assembler.take
        for item in parse_line_batch(_significant_lines(text, first), ox.RdfFormat.N_QUADS, self.where):
            take(item if isinstance(item, EventError) else _Unit(item[0], [item[1]]))


def without_byte_order_mark(start: bytes) -> bytes:
    """The start of a text without the UTF-8 byte order mark that may begin it: editors
    on Windows write one, and the RDF parsers take it for a term (every event of a TriG
    file behind its first statement was lost)."""
    return start[len(_BYTE_ORDER_MARK):] if start.startswith(_BYTE_ORDER_MARK) else start


def _without_gc(read) -> None:
    """``read()`` with the cycle collector paused.  Reading creates no cycles,
    but many objects that live on (the events' triples): each collection
    would traverse them all again, about a tenth of the reading's cost.  A
    call reads at most one chunk; collection resumes right after it."""
    if not gc.isenabled():
        read()
        return
    gc.disable()
    try:
        read()
    finally:
        gc.enable()


# --------------------------------------------------------------------------
# Grouping parsed quads (the fast reading)
# --------------------------------------------------------------------------

_DEFAULT_GRAPH = ox.DefaultGraph


@cython.locals(runs=list, stamps=list, triples=list, index=cython.Py_ssize_t, start=cython.Py_ssize_t)
def _group(quads: Iterable[ox.Quad]) -> tuple[list, list, int]:
    """``(runs, stamps, quad count)`` of parsed quads: a run is ``(graph,
    triples, index of its first quad)`` for consecutive quads of one named
    graph; a stamp ``(graph, time term, runs before it)`` for a default-graph
    ``prov:generatedAtTime`` quad.  (One loop, not itertools.groupby: a quad of
    the default graph is told by its type, where groupby compared its graph name
    with the named graph before it, a pyoxigraph comparison of two types that
    both sides decline; and a run's triples go straight into its list.)"""
    runs: list = []
    stamps: list = []
    index = 0
    stamp = PROV_GENERATED_AT
    current = None          # the graph of the run being read
    triples = None
    start = 0
    for quad in quads:
        graph = quad.graph_name
        if type(graph) is _DEFAULT_GRAPH:
            if current is not None:
                runs.append((current, tuple(triples), start))
                current = None
            if quad.predicate == stamp:
                stamps.append((quad.subject, quad.object, len(runs)))
        elif current is not None and graph == current:
            triples.append(quad.triple)
        else:
            if current is not None:
                runs.append((current, tuple(triples), start))
            current, triples, start = graph, [quad.triple], index
        index += 1
    if current is not None:
        runs.append((current, tuple(triples), start))
    return runs, stamps, index


def _block_lines(text: bytes, runs: list, first_line: int) -> list[int] | None:
    """The line of each run of a TriG piece, from the '{' of its block (rule 1
    of the module docstring), or None when they cannot be told so."""
    lines = []
    line, at = first_line, 0
    for _ in runs:
        brace = _next_block_brace(text, at)
        if brace < 0:
            return _scanned_block_lines(text, runs, first_line)
        line += _newlines(text, at, brace)
        lines.append(line)
        at = brace + 1
    if _next_block_brace(text, at) >= 0:
        # (a '{' in a string, a comment or an IRI: more braces than blocks)
        return _scanned_block_lines(text, runs, first_line)
    return lines


@cython.cfunc
@cython.locals(text=bytes, at=cython.Py_ssize_t, brace=cython.Py_ssize_t)
def _next_block_brace(text: bytes, at: int) -> int:
    """The first '{' from ``at`` that does not open an annotation ('{|'), or -1 (found
    at C speed: most pieces have one '{' per event, and long lines)."""
    brace = text.find(b"{", at)
    while 0 <= brace < len(text) - 1 and text[brace + 1] == 124:       # (124: '|')
        brace = text.find(b"{", brace + 1)
    return brace


@cython.cfunc
@cython.locals(start=cython.Py_ssize_t, end=cython.Py_ssize_t, i=cython.Py_ssize_t, j=cython.Py_ssize_t,
               stop=cython.Py_ssize_t, count=cython.Py_ssize_t, block=cython.uchar)
def _newlines(text: bytes, start: int, end: int) -> int:
    """``text.count(b"\\n", start, end)`` for 0 <= start <= end <= len(text).  Compiled, a
    loop the C compiler vectorises: CPython's count goes a byte at a time (it checks
    a limit at each match), and a piece of long lines is mostly bytes between them.
    The count goes by blocks of 255 bytes in a byte, 16 bytes an instruction or
    two: counted in a machine word, each byte was widened to one first."""
    if cython.compiled:
        data = cython.declare(cython.p_uchar, text)
        count = 0
        i = start
        while i < end:
            stop = i + 255 if end - i > 255 else end
            block = 0
            for j in range(i, stop):
                block += data[j] == 10
            count += block
            i = stop
        return count
    return text.count(b"\n", start, end)


def _scanned_block_lines(text: bytes, runs: list, first_line: int) -> list[int] | None:
    """``_block_lines`` when some '{' may be in a string or a comment (or a
    block is empty...): the blocks' braces are found by skipping strings,
    comments and IRIs."""
    braces = [match.end() - 1 for match in _NEXT_BLOCK.finditer(text)]
    if len(braces) != len(runs):
        return None
    lines, line, at = [], first_line, 0
    for brace in braces:
        line += _newlines(text, at, brace)
        lines.append(line)
        at = brace
    return lines


def _significant_lines(text: bytes, first: int) -> list[tuple[int, bytes]]:
    """(number, line) of the lines of an N-Quads text that are not blank or comments."""
    return [(first + number, line + b"\n") for number, line in enumerate(text.split(b"\n"))
            if (stripped := line.strip()) and stripped[0] != 35]        # (35: '#')


def _statement_end(text: bytes | bytearray, start: int, stop: int) -> int:
    """Where the last line in ``text[start:stop]`` that may end a TriG statement
    (a line ending in '.' or '}') ends, or ``start`` if there is none: where a
    piece is best cut.  (Not every such line end is a statement's end: the
    parse of the piece tells.)"""
    best = start
    for end in (b".\n", b"}\n", b".\r\n", b"}\r\n"):
        at = text.rfind(end, start, stop)
        if at >= 0 and at + len(end) > best:
            best = at + len(end)
    return best


def _end_before_last_line(text: bytes) -> int:
    """Where to cut a piece again whose parse failed at its last line: before the line
    of a graph block the piece leaves open (the '{' after the last '}'), else at the
    last line before that may end a statement.  Cutting an open block a statement at
    a time would parse the piece once per statement of the block."""
    block = _open_block_line(text, 0, len(text))
    return block if block >= 0 else _statement_end(text, 0, len(text) - 1)


def _open_block_line(text: bytes | bytearray, start: int, stop: int) -> int:
    """Where the line begins (at least ``start``) of the graph block that
    ``text[start:stop]`` leaves open (its last '{' comes after its last '}'), or -1."""
    opened = text.rfind(b"{", start, stop)
    if opened > text.rfind(b"}", start, stop):
        return text.rfind(b"\n", start, opened) + 1 or start
    return -1


def _line_end(text: bytes, count: int) -> int:
    """Where the first ``count`` lines of text end."""
    end = 0
    for _ in range(count):
        end = text.index(b"\n", end) + 1
    return end


def parse_line_batch(batch: list[tuple[int, bytes]], rdf_format: ox.RdfFormat,
                     where: str) -> Iterator[tuple[int, ox.Quad] | EventError]:
    """(line number, quad) per quad of N-Triples/N-Quads lines given as (number,
    text), or an ``EventError`` per bad line: one parse for the batch, and line
    by line only when that fails, to find the bad lines and keep the rest."""
    text = b"".join(line for _, line in batch)
    try:
        quads = list(ox.parse(input=text, format=rdf_format)) if term_too_deep(text) < 0 else None
    except (SyntaxError, MemoryError):
        quads = None
    if quads is not None and len(quads) == len(batch):   # one statement per line
        yield from zip((number for number, _ in batch), quads)
        return
    for number, line in batch:
        deep = term_too_deep(line)
        if deep >= 0:
            yield too_deep_error(where, number, line, deep)
            continue
        try:
            quads = list(ox.parse(input=line, format=rdf_format))
        except SyntaxError as error:
            yield _syntax_error(error, where, number, 0, 0, line)
            continue
        except MemoryError as error:
            if not term_too_large(error):
                raise       # (the process is out of memory: no line of the input is to blame)
            yield _too_large_term(where, number, line)
            continue
        yield from ((number, quad) for quad in quads)


_SYNTAX_DETAIL = re.compile(r"^Parser error (?:at|between) [^:]*: ")


def _syntax_error(error: SyntaxError, where: str, line: int, column0: int, header_lines: int,
                  text: bytes, graph: str | None = None) -> EventError:
    """An ``EventError`` for a pyoxigraph error in a statement starting at
    ``line`` (0-based column ``column0``) parsed after ``header_lines`` lines.
    A statement that is not UTF-8 says so, at its first bad byte: pyoxigraph's
    message does not tell where."""
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as bad:
        before = text[:bad.start]
        newlines = before.count(b"\n")
        column = len(before[before.rfind(b"\n") + 1:].decode("utf-8")) + 1 + (0 if newlines else column0)
        return EventError(f"not UTF-8 text (byte {text[bad.start]:#04x} at column {column}): RDF text "
                          "must be UTF-8", f"{where}:{line + newlines}", reason="syntax", graph=graph,
                          **_text_of(text))
    detail = _SYNTAX_DETAIL.sub("", error.msg or str(error))
    column = error.offset
    if error.lineno is not None and error.lineno > header_lines:
        offset = error.lineno - header_lines - 1
        if offset == 0 and column is not None:
            column += column0
        line += offset
    at = f" (column {column})" if column else ""
    return EventError(f"syntax error: {detail}{at}", f"{where}:{line}", reason="syntax", graph=graph,
                      **_text_of(text))


TOO_LARGE_TERM = f"a term (IRI or literal) is longer than {_TOKEN_LIMIT >> 20} MiB, the most the RDF parser takes"


def term_too_large(error: MemoryError) -> bool:
    """Whether pyoxigraph raised ``error`` for a term longer than its buffer, not
    for want of memory.  (A piece or batch that fails either way is read again
    statement by statement, or line by line, where the two are told apart.)"""
    return str(error).startswith("Reached the buffer maximal size")


def _too_large_term(where: str, line: int, text: bytes, graph: str | None = None) -> EventError:
    return EventError(TOO_LARGE_TERM, f"{where}:{line}", reason="too-large", graph=graph, **_text_of(text))


def term_too_deep(text: bytes) -> int:
    """Where in ``text`` (TriG, Turtle, N-Quads, N-Triples: from a statement's
    start) a triple term opens nested more than ``MAX_TERM_DEPTH`` deep, or -1:
    it can be given to pyoxigraph.  A text without '<<(' costs one search."""
    if text.find(b"<<(") < 0:
        return -1
    return _nesting(text, 0, None)[0]


def _nesting(text: bytes, depth: int, quote) -> tuple:
    """Scan ``text`` from nesting ``depth``, inside a long string of ``quote`` (34 or
    39) unless None: (where a triple term opens too deep or -1, the depth at the
    end, the quote of a long string left open at the end or None)."""
    at = 0
    while True:
        if quote is not None:
            body = _LONG_BODY[quote].match(text, at).end()
            if not text.startswith(_TRIPLE_QUOTES[quote], body):
                return -1, depth, quote
            at, quote = body + 3, None
        for match in _TERM_NESTING.finditer(text, at):
            kind = match.lastgroup
            if kind == "open":
                depth += 1
                if depth > MAX_TERM_DEPTH:
                    return match.start(), depth, None
            elif kind == "close":
                depth = max(depth - 1, 0)
            elif kind == "open_long":
                quote, at = text[match.start()], match.end()
                break
        else:
            return -1, depth, None


class NestingCheck:
    """:func:`term_too_deep` over a text that comes in chunks (a KB file that
    pyoxigraph parses whole): each line is scanned once it is complete, and a
    long string over several lines is followed from one to the next.  The start
    of a line is kept until its end comes."""

    def __init__(self):
        self.depth = 0
        self.quote = None               # in a long string left open: its quote
        self.line = 1                   # the first line not scanned yet ...
        self.rest: list[bytes] = []     # ... and what came of it

    def feed(self, chunk: bytes, final: bool = False) -> int | None:
        """The line where a triple term opens too deep, or None (so far)."""
        end = len(chunk) if final else chunk.rfind(b"\n") + 1
        if not end and not final:
            self.rest.append(chunk)
            return None
        text = b"".join(self.rest) + chunk[:end] if self.rest else chunk[:end]
        self.rest = [chunk[end:]] if end < len(chunk) else []
        at = -1
        if self.quote is not None or self.depth or text.find(b"<<(") >= 0 \
                or text.find(b'"""') >= 0 or text.find(b"'''") >= 0:      # (else nothing to follow)
            at, self.depth, self.quote = _nesting(text, self.depth, self.quote)
        if at >= 0:
            return self.line + text.count(b"\n", 0, at)
        self.line += text.count(b"\n")
        return None


def too_deep_error(where: str, line: int, text: bytes, at: int) -> EventError:
    """The rejection of ``text`` (from ``line``) whose triple terms nest too deep at ``at``."""
    deep_line = line + text.count(b"\n", 0, at)
    return EventError(f"a triple term nested more than {MAX_TERM_DEPTH} deep, at line {deep_line} "
                      "(--max-term-depth)", f"{where}:{line}", reason="too-large", **_text_of(text))


def line_too_long(where: str, line: int, length: int, head: bytes, graph=None) -> EventError:
    """The rejection of a line passing ``MAX_STATEMENT_BYTES``: ``length`` bytes read
    of it so far, ``head`` its first ``TEXT_LIMIT``.  It goes out when the line passes
    the limit, not at its end, which may never come (a stream of bytes without a
    newline): the rest of the line, and of the statement it is in, is then dropped."""
    return EventError(f"a line passed the limit of {MAX_STATEMENT_BYTES:,} bytes: its statement is skipped "
                      "to the end of the line", f"{where}:{line}", reason="too-large",
                      graph=None if graph is None else str(graph), **_text_of(head, length))


def _text_of(text: bytes, length: int | None = None) -> dict:
    """A rejected statement's text for its ``EventError``: cut at ``TEXT_LIMIT``;
    ``length``: its full length, when ``text`` is only its start."""
    return {"text": text[:TEXT_LIMIT].decode("utf-8", "replace"),
            "text_length": len(text) if length is None else length}


def event_text(event: Event) -> str:
    """An event as a TriG text that reads back as the same event (for the
    dead-letter file): its graph block and its timestamp, with full IRIs."""
    graph = event.name if event.name is not None else ox.NamedNode("urn:spaseq:rejected")
    quads = [ox.Quad(graph, PROV_GENERATED_AT, time_literal(event.time, event.is_datetime))]
    quads += [ox.Quad(t.subject, t.predicate, t.object, graph) for t in event.triples]
    return ox.serialize(quads, format=ox.RdfFormat.TRIG).decode()


# --------------------------------------------------------------------------
# Event assembly: from parsed statements to events
# --------------------------------------------------------------------------

class _Pending:
    """An event being read: the graph's triples so far and its timestamp."""

    __slots__ = ("name", "line", "index", "triples", "time")

    def __init__(self, name, line: int, index: int):
        self.name = name
        self.line = line
        self.index = index          # how many graphs started before this one
        self.triples: list[ox.Triple] = []
        self.time: tuple[Time, bool] | None = None


@dataclasses.dataclass(slots=True)
class _Unit:
    """One parsed statement (TriG) or line (N-Quads).

    ``graph`` is set for a graph block that yielded no quads: an empty graph
    (still an event), or one ``rejected`` for a syntax error (its whole
    event is dropped).
    """

    line: int
    quads: list[ox.Quad]
    graph: ox.NamedNode | ox.BlankNode | None = None
    rejected: bool = False


_ABSENT = object()


class _Assembler:
    """Turns statements into events following the module's streaming rule."""

    def __init__(self, where: str, stream: str):
        self.where = where
        self.stream = stream
        # Events being read, in text order, and errors waiting behind them
        # (an error's key is itself), so that output keeps the text's order.
        self.queue: OrderedDict[object, _Pending | EventError] = OrderedDict()
        self.orphans: OrderedDict[object, tuple[tuple[Time, bool], int]] = OrderedDict()
        self.done = _Finished(DONE_MEMORY)
        self.current = None         # the graph the reader is in
        self.pending: _Pending | None = None   # its event (None: dropping its triples)
        self.graphs = 0             # graphs started so far
        self.out: list[Event | EventError] = []

    def drain(self) -> list[Event | EventError]:
        out, self.out = self.out, []
        return out

    def take(self, item: _Unit | EventError) -> None:
        """One statement (or a rejection) of the careful reading."""
        if isinstance(item, EventError):
            self._error(item)
            return
        if item.graph is not None:
            if item.rejected:
                self._reject(item.graph)
            else:
                self._enter(item.graph, item.line)
        line = item.line
        # Each quad is dropped as its triple is made: a statement of a million
        # triples would otherwise hold both, 0.8 KB a triple (1.2 GB for a 20 MB block).
        quads, item.quads = item.quads, []
        quads.reverse()
        while quads:
            quad = quads.pop()
            graph = quad.graph_name
            if graph != self.current:
                if isinstance(graph, ox.DefaultGraph):
                    if quad.predicate == PROV_GENERATED_AT:
                        self._timestamp(quad.subject, quad.object, line)
                    continue
                self._enter(graph, line)
            pending = self.pending
            if pending is not None:
                pending.triples.append(quad.triple)
                if len(pending.triples) > MAX_EVENT_TRIPLES:
                    self._error(f"graph {pending.name} has more than {MAX_EVENT_TRIPLES:,} triples "
                                "(--max-event-triples)", line, "too-large", pending.name)
                    self._reject(pending.name)

    def take_chunk(self, runs: list, stamps: list, lines: list[int] | None) -> bool:
        """Take a parsed piece of the fast reading if it is regular: if the
        careful reading of it would give no rejection and would judge no event
        differently (rule 2 of the module docstring).  Whether it did;
        nothing changes when it did not.

        ``runs`` and ``stamps`` as ``_group`` gives them, ``lines`` the line
        of each run (None: unknown, so the piece is not regular).
        """
        queue, orphans, done = self.queue, self.orphans, self.done
        carried = self.pending          # the event being read when the piece starts
        if lines is None or len(queue) > (carried is not None):
            return False                # (events waiting for their timestamps, or errors behind them)
        more = None
        if carried is not None and runs and runs[0][0] == carried.name:
            # The piece goes on with the graph being read (N-Quads lines of one
            # graph, or a second block right after the first): more of its triples.
            more, runs, lines = runs[0][1], runs[1:], lines[1:]
            if len(carried.triples) + len(more) > MAX_EVENT_TRIPLES:
                return False            # (the careful reading rejects it)
            stamps = [(name, term, before - 1 if before else 0) for name, term, before in stamps]
        paired = self._take_paired(runs, stamps, lines, carried, more)
        if paired is not None:
            return paired
        first = self.graphs             # the index of the piece's first run
        # One time per graph, and when its first stamp came (runs before it).
        times: dict = {}
        for name, term, before in stamps:
            try:
                time = parse_timestamp(term)
            except ValueError:
                return False
            known = times.get(name)
            if known is None:
                times[name] = (time, before)
            elif known[0] != time:
                return False
        count = len(runs)
        if carried is not None:
            stamp = times.get(carried.name)
            if stamp is not None:
                if carried.time is not None and carried.time != stamp[0]:
                    return False
                if carried.time is None and first + stamp[1] - carried.index - 1 > NEAR_GRAPHS:
                    return False        # it would have been judged untimed first
            elif carried.time is None and count:
                return False            # it would wait for its timestamp, the runs behind it
        # Each run: a graph not seen yet, its time from an orphan (a stamp before
        # it) or a stamp after it, near enough; only the last may still lack one.
        names = set()
        run_times = []
        last = count - 1
        for index, (name, _, _) in enumerate(runs):
            if name in names or (carried is not None and name == carried.name) or \
                    done.get(name, _ABSENT) is not _ABSENT:
                return False
            names.add(name)
            stamp = times.get(name)
            orphan = orphans.get(name)
            if orphan is not None:
                if first + index - orphan[1] > NEAR_GRAPHS or (stamp is not None and stamp[0] != orphan[0]):
                    return False
                time = orphan[0]
            elif stamp is not None:
                if (index - stamp[1] if stamp[1] <= index else stamp[1] - index - 1) > NEAR_GRAPHS:
                    return False
                time = stamp[0]
            elif index < last:
                return False            # it would wait for a timestamp
            else:
                time = None
            run_times.append(time)
        # The other stamps: of finished graphs (the same time: nothing happens) or orphans.
        for name, (time, _) in times.items():
            if name in names or (carried is not None and name == carried.name):
                continue
            known = done.get(name, _ABSENT)
            if known is not _ABSENT:
                if known is not None and known != time:
                    return False        # a second timestamp for an emitted graph
                continue
            orphan = orphans.get(name)
            if orphan is not None and orphan[0] != time:
                return False
        # Regular: commit.
        if more:
            carried.triples.extend(more)
        if carried is not None and carried.time is None and carried.name in times:
            carried.time = times[carried.name][0]
        if count:
            out, stream, where, remember = self.out, self.stream, self.where, done.add
            if carried is not None:
                del queue[carried.name]
                self._emit(carried)
            for (name, triples, _), time, line in zip(runs[:last], run_times, lines):
                if orphans:
                    orphans.pop(name, None)
                remember(name, time)
                triples = distinct(triples)
                out.append(Event(stream, time[0], triples, name, f"{where}:{line}", time[1]))
            name, triples, _ = runs[last]
            orphans.pop(name, None)
            pending = self.pending = queue[name] = _Pending(name, lines[last], first + last)
            pending.triples = list(triples)
            pending.time = run_times[last]
            self.current = name
            self.graphs = first + count
        for name, (time, before) in times.items():
            if name not in names and name not in orphans and (carried is None or name != carried.name) \
                    and done.get(name, _ABSENT) is _ABSENT:
                orphans[name] = (time, first + before)
        if orphans:
            self._forget_old_orphans()
        return True

    @cython.locals(line=cython.Py_ssize_t)
    def _take_paired(self, runs: list, stamps: list, lines: list[int], carried: _Pending | None,
                     more) -> bool | None:
        """``take_chunk`` for the common piece, checked at C speed: one stamp
        per run, in the same order, each right before its run (or each right
        after it); the first run's stamp may have ended the piece before (an
        orphan), a stamp may end the piece (of a graph in the next one) and
        one may start it (for the graph being read).  None when the piece is
        not like that (the general rules decide)."""
        count = len(runs)
        if not count:
            return None
        orphans, done = self.orphans, self.done
        head = None
        if stamps and carried is not None and stamps[0][0] == carried.name and stamps[0][2] == 0:
            head, stamps = stamps[0], stamps[1:]
        names = [run[0] for run in runs]
        lead = orphans.get(names[0]) if orphans else None      # the first run's earlier stamp
        if lead is not None and self.graphs - lead[1] > NEAR_GRAPHS:
            return None
        paired = names[1:] if lead is not None else names
        tail = stamps[len(paired):]
        stamps = stamps[:len(paired)]
        if [stamp[0] for stamp in stamps] != paired:
            return None
        if stamps:
            start = count - len(paired)
            shift = stamps[0][2] - start
            if not 0 <= shift <= 1 or [stamp[2] for stamp in stamps] != list(range(start + shift, count + shift)):
                return None
        # (so every run has its stamp next to it: the distances are 0)
        unique = set(paired)
        if len(unique) != len(paired) or (lead is not None and names[0] in unique) \
                or (carried is not None and carried.name in names) \
                or not done.newer.keys().isdisjoint(unique) or not done.older.keys().isdisjoint(unique) \
                or (lead is not None and done.get(names[0], _ABSENT) is not _ABSENT):
            return False
        if orphans and not unique.isdisjoint(orphans):
            return None
        if lead is not None:
            unique.add(names[0])
        try:
            times = ([lead[0]] if lead is not None else []) + [parse_timestamp(stamp[1]) for stamp in stamps]
            head_time = parse_timestamp(head[1]) if head is not None else None
            tail = [(name, parse_timestamp(term), before) for name, term, before in tail]
        except ValueError:
            return False
        if carried is not None:
            if head_time is not None and carried.time is not None and head_time != carried.time:
                return False
            if carried.time is None and head_time is None:
                return False            # it would wait for its timestamp
        tail_names: set = set()
        for name, time, _ in tail:
            if name in unique or (carried is not None and name == carried.name) \
                    or done.get(name, _ABSENT) is not _ABSENT or name in orphans or name in tail_names:
                return None             # (the general rules decide: two stamps of one graph, say)
            tail_names.add(name)
        # Commit.
        first = self.graphs
        if carried is not None:
            if more:
                carried.triples.extend(more)
            if carried.time is None:
                carried.time = head_time
            del self.queue[carried.name]
            self._emit(carried)
        last = count - 1
        if lead is not None:
            del orphans[names[0]]
        done.add_all(names[:last], times)
        append, stream, where = self.out.append, self.stream, self.where
        for (name, triples, _), (time, is_datetime), line in zip(runs[:last], times, lines):
            if len(triples) > 2 or (len(triples) == 2 and triples[0] == triples[1]):
                triples = distinct(triples)     # (two, the common event, compared here)
            append(Event(stream, time, triples, name, f"{where}:{line}", is_datetime))
        name, triples, _ = runs[last]
        pending = self.pending = self.queue[name] = _Pending(name, lines[last], first + last)
        pending.triples = list(triples)
        pending.time = times[last]
        self.current = name
        self.graphs = first + count
        for name, time, before in tail:
            orphans[name] = (time, first + before)
        if orphans:
            self._forget_old_orphans()
        return True

    def leave_graph(self) -> None:
        """The reader is no longer in a graph (a live sender paused)."""
        self.current = self.pending = None
        self._flush()

    def finish(self) -> None:
        self.current = self.pending = None
        self._flush(at_end=True)

    def _error(self, error: EventError | str, line: int = 0, reason: str = "invalid",
               graph=None) -> None:
        if isinstance(error, str):
            error = EventError(error, f"{self.where}:{line}", reason=reason,
                               graph=None if graph is None else str(graph))
        if self.queue:
            self.queue[error] = error       # after the events read before it
        else:
            self.out.append(error)

    def _enter(self, name, line: int) -> None:
        """The reader moves on to (a block of) graph ``name``."""
        self.current = name
        pending = self.queue.get(name)          # (never an error: keys differ)
        if pending is None:
            done = self.done.get(name, _ABSENT)
            if done is not _ABSENT:
                if done is not None:
                    self._error(f"graph {name} was already read as an event; blocks of one "
                                "graph must not be split around other events", line, "split-graph", name)
            else:
                pending = _Pending(name, line, self.graphs)
                self.graphs += 1
                orphans = self.orphans
                if orphans:
                    orphan = orphans.pop(name, None)
                    if orphan is not None:
                        pending.time = orphan[0]
                    if orphans:
                        self._forget_old_orphans()
                self.queue[name] = pending
        self.pending = pending
        self._flush()

    def _timestamp(self, name, term, line: int) -> None:
        done = self.done.get(name, _ABSENT)
        if done is None:
            return                                  # already rejected
        try:
            time = parse_timestamp(term)
        except ValueError as error:
            self._error(f"unreadable timestamp for graph {name}: {error}", line, "bad-timestamp", name)
            self._reject(name)
            return
        pending = self.queue.get(name)
        if pending is not None:
            if pending.time is None:
                pending.time = time
                self._flush()                       # it may have been waiting for this
            elif pending.time != time:
                self._two_times(name, pending.time, time, line)
        elif done is not _ABSENT:
            if done != time:
                self._error(f"second timestamp {_show(time)} for graph {name}, which was read "
                            f"as an event at {_show(done)}", line, "two-timestamps", name)
        elif (orphan := self.orphans.get(name)) is not None:
            if orphan[0] != time:
                self._two_times(name, orphan[0], time, line)
        else:
            self.orphans[name] = (time, self.graphs)

    def _two_times(self, name, first, second, line: int) -> None:
        self._error(f"graph {name} has two different timestamps: {_show(first)} and {_show(second)}",
                    line, "two-timestamps", name)
        self._reject(name)

    def _reject(self, name) -> None:
        """Drop graph ``name``: its event, and anything more about it."""
        self.orphans.pop(name, None)
        if self.queue.pop(name, None) is not None and self.current == name:
            self.pending = None
        self.done.add(name, None)
        self._flush()

    def _flush(self, at_end: bool = False) -> None:
        """Emit (or reject) the events at the head of the queue that are ready."""
        queue, out = self.queue, self.out
        while queue:
            name = next(iter(queue))
            pending = queue[name]
            if type(pending) is not _Pending:       # an error
                queue.popitem(last=False)
                out.append(pending)
                continue
            if name == self.current:
                return                              # still being read
            if pending.time is None:
                if not at_end and self.graphs - pending.index - 1 <= NEAR_GRAPHS:
                    return                          # its timestamp may still come
                queue.popitem(last=False)
                self.done.add(name, None)
                out.append(EventError(
                    f"graph {name} has no timestamp (no '{name} {PROV_GENERATED_AT} τ' "
                    "in the default graph near it)", f"{self.where}:{pending.line}", reason="no-timestamp",
                    graph=str(name)))
                continue
            queue.popitem(last=False)
            self._emit(pending)

    def _emit(self, pending: _Pending) -> None:
        self.done.add(pending.name, pending.time)
        self.out.append(Event(self.stream, pending.time[0], distinct(pending.triples),
                              pending.name, f"{self.where}:{pending.line}", pending.time[1]))

    def _forget_old_orphans(self) -> None:
        orphans = self.orphans
        while orphans:
            _, (_, index) = next(iter(orphans.items()))
            if self.graphs - index <= NEAR_GRAPHS:
                return
            orphans.popitem(last=False)


class _Finished:
    """Finished graphs: name -> (time, is_datetime), or None for a rejected one.

    Two generations of at most ``limit / 2`` names each; when the newer one is
    full the older one is dropped whole.  So the last ``limit / 2`` names are
    always remembered, never more than ``limit``, and memory stays flat on an
    endless stream (an ordered dict evicting one name per event fragments)."""

    __slots__ = ("half", "newer", "older")

    def __init__(self, limit: int):
        self.half = max(1, limit // 2)
        self.newer: dict = {}
        self.older: dict = {}

    def get(self, name, default):
        found = self.newer.get(name, _ABSENT)
        return self.older.get(name, default) if found is _ABSENT else found

    def add(self, name, time) -> None:
        self.newer[name] = time
        if len(self.newer) >= self.half:
            self.older, self.newer = self.newer, {}

    def add_all(self, names: list, times: list) -> None:
        """``add`` for each pair, in order (the names are new and distinct)."""
        at = 0
        while at < len(names):
            room = self.half - len(self.newer)
            self.newer.update(zip(names[at:at + room], times[at:at + room]))
            at += room
            if len(self.newer) >= self.half:
                self.older, self.newer = self.newer, {}


def _show(time: tuple[Time, bool] | None) -> str:
    return "?" if time is None else str(format_time(*time))


# --------------------------------------------------------------------------
# Order: duplicates, older times, kinds of time, jumps
# --------------------------------------------------------------------------

class OrderCheck:
    """The per-stream order rules, applied to events in reading order.

    An event is rejected when its time equals (``duplicate``) or precedes
    (``out-of-order``) the previous accepted event of its stream, when its
    kind of time differs from it (``kind``), or when it is more than
    ``max_time_jump`` seconds after it (``time-jump``; None: no bound).
    """

    def __init__(self, max_time_jump: Time | None = DEFAULT_MAX_TIME_JUMP):
        self.max_time_jump = max_time_jump
        self.last: dict[str, Event] = {}

    def check(self, event: Event) -> EventError | None:
        """The rejection of ``event``, or None (then it is the stream's latest)."""
        previous = self.last.get(event.stream)
        if previous is not None:
            if event.is_datetime != previous.is_datetime or event.time <= previous.time:
                return _order_error(event, previous)
            jump = self.max_time_jump
            if jump is not None and event.time - previous.time > jump:
                return _rejected(event, f"time jump: timestamp {_show((event.time, event.is_datetime))} is "
                                 f"{_duration(event.time - previous.time)} after {_describe(previous)} at "
                                 f"{_show((previous.time, previous.is_datetime))}, more than the maximum "
                                 f"time jump of {_duration(jump)} (--max-time-jump)", "time-jump")
        self.last[event.stream] = event
        return None

    def filter(self, items: list[Event | EventError]) -> list[Event | EventError]:
        """``items`` with the events that break the rules rejected."""
        if len(items) > 2 and _in_order(items, self.last, self.max_time_jump):
            return items
        check = self.check
        return [item if type(item) is not Event else (check(item) or item) for item in items]


@cython.cfunc
@cython.locals(items=list, last=dict, i=cython.Py_ssize_t)
def _in_order(items: list, last: dict, jump) -> cython.bint:
    """Whether ``items`` are events of one stream and kind of time, each later than the
    one before (the stream's latest in ``last`` first) and at most ``jump`` after it: the
    common case, checked in one pass, after which the last item is the stream's latest.
    False: OrderCheck.check decides, event by event."""
    first = items[0]
    if type(first) is not Event:
        return False
    stream, kind = first.stream, first.is_datetime
    previous = last.get(stream)
    if previous is not None and previous.is_datetime != kind:
        return False
    before = None if previous is None else previous.time
    for i in range(len(items)):
        item = items[i]
        if type(item) is not Event or item.stream != stream or item.is_datetime != kind:
            return False
        time = item.time
        if before is not None and (time <= before or (jump is not None and time - before > jump)):
            return False
        before = time
    last[stream] = items[-1]
    return True


def check_order(items: Iterable[Event | EventError], order: OrderCheck | None = None
                ) -> Iterator[Event | EventError]:
    """``items`` with the events that break :class:`OrderCheck`'s rules rejected."""
    check = (order or OrderCheck()).check
    for item in items:
        if isinstance(item, Event):
            error = check(item)
            if error is not None:
                item = error
        yield item


def _order_error(item: Event, previous: Event) -> EventError:
    """Why ``item`` cannot follow ``previous`` (its time is of another kind, or not later)."""
    shown = _show((item.time, item.is_datetime))
    before = f"the previous event {_describe(previous)}"
    if item.is_datetime != previous.is_datetime:
        kinds = ("an xsd:dateTime", "a number")
        return _rejected(item, f"timestamp {shown} is {kinds[not item.is_datetime]} but "
                         f"{before} has {kinds[not previous.is_datetime]}", "kind")
    if item.time == previous.time:
        return _rejected(item, f"duplicate timestamp {shown} on stream <{item.stream}>: "
                         f"{before} has the same time", "duplicate")
    return _rejected(item, f"out of order: timestamp {shown} is older than "
                     f"{before} at {_show((previous.time, previous.is_datetime))}", "out-of-order")


def _rejected(event: Event, message: str, reason: str) -> EventError:
    return EventError(message, event.position, reason=reason, event=event,
                      graph=None if event.name is None else str(event.name))


def _describe(event: Event) -> str:
    name = f"{event.name} " if event.name is not None else ""
    return f"{name}({event.position})" if event.position else name.strip()


def _duration(seconds: Time) -> str:
    if seconds >= 86400 and seconds % 86400 == 0:
        return f"{seconds // 86400} days"
    if seconds >= 86400:
        return f"{seconds} s ({float(seconds) / 86400:.1f} days)"
    return f"{seconds} s"


# --------------------------------------------------------------------------
# TriG: top-level statements (the careful reading)
# --------------------------------------------------------------------------

# Pieces of TriG that may hold '.', '{', '}' or '#' without meaning them: the
# statement splitter skips them whole.  All loops are possessive, so a failed
# match never backtracks.
_IRI = rb'<(?:[^<>"{}|^`\\\x00-\x20]|\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})*+>'
# (as in the Turtle grammar: quotes inside a long string are followed by
# another character, so the first three quotes in a row close it)
_LONG_STRING = (rb'"""(?:"{0,2}(?:[^"\\]|\\.))*+"""'
                rb"|'''(?:'{0,2}(?:[^'\\]|\\.))*+'''")
_LONG_BODY = {34: re.compile(rb'(?:"{0,2}(?:[^"\\]|\\.))*+', re.S),
              39: re.compile(rb"(?:'{0,2}(?:[^'\\]|\\.))*+", re.S)}
# (a short string never starts with three quotes: that is a long string)
_SHORT_STRING = rb'"(?!"")(?:[^"\\\n]|\\.)*+"' rb"|'(?!'')(?:[^'\\\n]|\\.)*+'"
# A triple term opens with '<<(' and closes with ')>>' (no space inside either);
# IRIs, strings and comments, which may hold them as text, are skipped whole, and a
# long string the text leaves open is told (``NestingCheck`` resumes in it).
_TERM_NESTING = re.compile(rb"(?P<open><<\()|(?P<close>\)>>)|" + _IRI + rb"|" + _LONG_STRING
                           + rb"|(?P<open_long>\"\"\"|''')|" + _SHORT_STRING + rb"|#[^\r\n]*+", re.S)

# RDF 1.2 annotations {| ... |} are not graph blocks.
_SKIPPED = b"|".join([_IRI, _LONG_STRING, _SHORT_STRING, rb"#[^\r\n]*+", rb"\\.", rb"\{\||\|\}"])
# A '.' ends a statement unless, as pyoxigraph reads it, it is inside a
# prefixed name (ex:a.b) or starts or is inside a number (1.5, .5).
_NAME_CHAR = rb"[\w:%\\.\-\x80-\xff]"
_END_DOT = rb"\.(?!" + _NAME_CHAR + rb")|(?<!" + _NAME_CHAR + rb")\.(?![0-9])"
_INNER_DOT = rb"(?<=" + _NAME_CHAR + rb")\.(?=" + _NAME_CHAR + rb")|\.(?=[0-9])"
_SPARQL_DIRECTIVE = (rb"(?i:prefix)\s++[^\s:]*+:\s*+<[^>\s]*+>|(?i:base)\s++<[^>\s]*+>"
                     rb"|(?i:version)\s++(?:\"[^\"\r\n]*+\"|'[^'\r\n]*+')")

# Fast path: one whole statement, when it is well formed and complete.  A
# lone '<', '|' or quote (not an IRI, annotation or string) is plain content.
_ATOM = (rb"[^<\"'#{}.\\|]++|" + _SKIPPED
         + rb"|<|\||\"(?!\"\")|'(?!'')|" + _INNER_DOT)
_STATEMENT = re.compile(
    rb"(?:\s++|#[^\r\n]*+)*+(?P<text>" + _SPARQL_DIRECTIVE
    + rb"|(?:" + _ATOM + rb")*+(?:" + _END_DOT + rb"|(?P<brace>\{)(?:" + _ATOM + rb"|\.)*+\}))",
    re.S)
# Slow path: the tokens that matter, one at a time (statements cut by a chunk
# end, unclosed blocks, stray braces, unclosed strings).
_TOKEN = re.compile(
    rb"(?P<skip>" + _SKIPPED + rb")"
    rb"|(?P<open_long>\"\"\"|''')"          # a long string not closed (yet)
    rb"|(?P<open>\{)|(?P<close>\})"
    rb"|(?P<dot>" + _END_DOT + rb")"
    rb"|(?P<sparql>(?i:prefix|base|version)(?=\s))",   # SPARQL-style directives have no '.'
    re.S)
_SPACE = re.compile(rb"(?:\s++|#[^\r\n]*+)*+")
_SPARQL_DIRECTIVE_RE = re.compile(_SPARQL_DIRECTIVE)


@dataclasses.dataclass(slots=True)
class _Statement:
    line: int           # line of its first character
    column0: int        # 0-based column of its first character
    text: bytes
    brace: int | None   # offset of the '{' of a graph block
    unclosed: bool = False  # a graph block cut off before its '}'
    length: int | None = None   # the full length of a statement too long to keep (text: its start)


class _TrigSplitter:
    """Splits TriG text into top-level statements, given chunk by chunk.

    A statement ends at a '.' outside braces, at the '}' closing a graph
    block, or after a SPARQL-style ``PREFIX``/``BASE`` directive.  Only
    complete lines are scanned, so the only token a chunk can cut is a long
    string: the scan then stops in it and resumes there with more text.
    Most statements are matched whole by one regex; the token-by-token scan
    takes over where that fails, and also recovers from an unclosed graph
    block.  Text is kept in a ``bytearray`` that grows at its end and is cut
    at its front only when that frees as much as it keeps, so reading is
    linear in the text, long literals included.  A statement longer than
    ``MAX_STATEMENT_BYTES`` is dropped as it is scanned (its start is kept
    for the message).

    The splitter is *idle* when the text from ``start`` on begins a new
    statement at a line start (nothing before it is pending).  Then the
    lines from ``start`` may be read by other means and skipped with
    :meth:`skip`: what the splitter finds after them does not depend on
    whether it scanned them itself.  ``careful_to``: with ``stop``,
    :meth:`statements` does not stop before this offset (the reader wants
    the text up to it read statement by statement).
    """

    def __init__(self, first_line: int = 1):
        self.restart(first_line)

    def restart(self, line: int) -> None:
        """Start afresh at a line start (numbered ``line``) with nothing pending."""
        self.buf = bytearray()
        self.start = 0              # where the current statement begins in buf
        self.scan = 0               # where the token scan resumes (>= start)
        self.end = 0                # the end of the complete lines in buf
        self.depth = 0              # 1 inside a graph block
        self.brace = None           # offset in buf of the current block's '{'
        self.line_at, self.line_no = 0, line    # line_no is the line of buf[line_at]
        self.idle = True
        self.long_quote = None      # in a long string not closed yet: its quote (34 or 39)
        self.dropped: _Statement | None = None  # a statement too long, being dropped
        self.careful_to = 0
        self.unfinished = 0         # bytes from start that are a graph block not closed yet

    def add(self, chunk: bytes) -> None:
        """Add text, dropping the finished statements (keeping whole lines, for columns)."""
        buf = self.buf
        keep = buf.rfind(b"\n", 0, self.start) + 1
        if keep and 2 * keep >= len(buf):
            if self.line_at < keep:
                self.line_no += buf.count(b"\n", self.line_at, keep)
            del buf[:keep]
            self.start -= keep
            self.scan -= keep
            self.end -= keep
            self.careful_to = max(0, self.careful_to - keep)
            self.line_at = max(0, self.line_at - keep)
            if self.brace is not None:
                self.brace -= keep
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            self.end = len(buf) + newline + 1
        buf += chunk

    def statements(self, stop: bool = False) -> Iterator[_Statement]:
        """The statements in the complete lines added so far.  With ``stop``,
        ends early once the splitter is idle after a statement (``idle``),
        past ``careful_to``."""
        buf, end = self.buf, self.end
        self.idle = False
        while self.scan < end:
            if self.long_quote is not None:
                # Resume in a long string: its body, then its closing quotes.
                quote = self.long_quote
                body = _LONG_BODY[quote].match(buf, self.scan, end).end()
                if body + 3 <= end and buf.startswith(_TRIPLE_QUOTES[quote], body):
                    self.long_quote, self.scan = None, body + 3
                else:
                    self.scan = body
                    break
            if self.scan == self.start and self.dropped is None:
                match = _STATEMENT.match(buf, self.start, end)
                if match:
                    self.brace = match.start("brace") if match.group("brace") else None
                    item = self._cut(match.end(), match.start("text"))
                    self.brace = None
                    if item:
                        yield item
                    if stop and self._idle_after(end):
                        return
                    continue
            for match in _TOKEN.finditer(buf, self.scan, end):
                kind = match.lastgroup
                if kind == "skip":
                    continue
                if kind == "open_long":
                    self.long_quote, self.scan = buf[match.start()], match.end()
                    break
                if kind == "open":
                    if self.depth == 1:
                        # A '{' inside a graph block: that block was never
                        # closed.  Cut it off at the start of this line, most
                        # likely where the next graph's name begins.  (Of a
                        # statement too long, the lines before were dropped: what
                        # is left of it starts this line, whatever the chunks.)
                        cut = max(buf.rfind(b"\n", self.start, match.start()) + 1, self.start)
                        if (cut > self.start or self.dropped is not None) and \
                                (item := self._cut(cut, unclosed=True)):
                            yield item
                    self.depth, self.brace = 1, match.start()
                elif kind == "close" or (kind == "dot" and self.depth == 0):
                    item = self._cut(match.end())
                    self.depth, self.brace = 0, None
                    if item:
                        yield item
                    if stop and self._idle_after(end):
                        return
                    break
                elif (kind == "sparql" and self.depth == 0 and self.dropped is None
                      and _SPACE.match(buf, self.start).end() == match.start()):
                    directive = _SPARQL_DIRECTIVE_RE.match(buf, match.start(), end)
                    if directive:
                        if item := self._cut(directive.end()):
                            yield item
                        if stop and self._idle_after(end):
                            return
                        break
            else:
                self.scan = end
        if self.dropped is not None or (self.scan - self.start > MAX_STATEMENT_BYTES and
                                        self.scan - _SPACE.match(buf, self.start, self.scan).end()
                                        > MAX_STATEMENT_BYTES):
            self._drop()                        # (counted from its first character, as _cut does)
        elif self.depth == 0 and self.long_quote is None and \
                _SPACE.match(buf, self.start, self.end).end() == self.end:
            self._idle_at(self.end)             # only space and comments left

    def _drop(self) -> None:
        """The pending statement is too long: keep its start (for the message
        and its graph's name) and forget what was scanned of it."""
        buf = self.buf
        if self.dropped is None:
            first = _SPACE.match(buf, self.start, self.scan).end()
            self.line_no += buf.count(b"\n", self.line_at, first)
            column0 = first - (buf.rfind(b"\n", 0, first) + 1)
            head = bytes(buf[first:first + TEXT_LIMIT])
            brace = self.brace - first if self.brace is not None and self.brace - first < len(head) else None
            self.dropped = _Statement(self.line_no, column0, head, brace, length=0)
            self.line_at = self.start = first
        # (line_at is the statement's start: the dropped text's lines are counted now)
        self.line_no += buf.count(b"\n", self.start, self.scan)
        self.dropped.length += self.scan - self.start
        del buf[self.start:self.scan]
        self.end -= self.scan - self.start
        self.careful_to = max(self.start, self.careful_to - (self.scan - self.start))
        self.scan = self.start
        self.brace = None

    def finish(self) -> _Statement | None:
        """What is left at the end of the text: an unclosed block or long
        string, a missing '.' (None if only space is left)."""
        return self._cut(len(self.buf), unclosed=self.depth == 1 and self.long_quote is None)

    def abandon(self) -> tuple[int, bytes | None, bytes, int]:
        """Forget the statement being read and the rest of the text (cut short,
        or a line too long): the statement's first line (or the line where
        the text is cut), its graph block's label if it is one, its first
        ``TEXT_LIMIT`` bytes and the length of what the splitter holds of it.
        The splitter then waits at the line after the last complete one."""
        buf = self.buf
        if self.dropped is not None:
            line, head = self.dropped.line, self.dropped.text
            label = head[:self.dropped.brace] if self.dropped.brace is not None else None
            length = len(head)
        else:
            first = _SPACE.match(buf, self.start).end()
            length = len(buf) - first
            line = self.line_no + buf.count(b"\n", self.line_at, first)
            head = bytes(buf[first:first + TEXT_LIMIT])
            if self.depth == 1 and self.brace is not None:
                label = bytes(buf[first:self.brace])
            else:                           # (not scanned yet: a block's label on its first line?)
                block = _BLOCK_START.match(head)
                label = block.group(1) if block else None
        self.restart(self.line_no + buf.count(b"\n", self.line_at, self.end))
        return line, label, head, length

    def skip(self, to: int, lines: int) -> None:
        """The ``lines`` lines up to ``to`` were read by other means (the
        splitter was idle at their start)."""
        self.line_no += lines
        self.line_at = self.start = self.scan = to
        self.unfinished = 0

    def _cut(self, end: int, first: int | None = None, unclosed: bool = False) -> _Statement | None:
        # Cut buf[start:end] as a statement (None if it is only space).
        buf = self.buf
        dropped = self.dropped
        if dropped is not None:
            self.dropped = None
            dropped.length += end - self.start
            self.line_no += buf.count(b"\n", self.line_at, end)
            self.line_at = self.start = self.scan = end
            return dropped
        if first is None:
            first = _SPACE.match(buf, self.start, end).end()
        self.start = self.scan = end
        if first >= end:
            return None
        self.line_no += buf.count(b"\n", self.line_at, first)
        self.line_at = first
        column0 = first - (buf.rfind(b"\n", 0, first) + 1)
        brace = None if self.brace is None else self.brace - first
        if end - first > MAX_STATEMENT_BYTES:           # whole, but too long: only its start is kept
            head = bytes(buf[first:first + TEXT_LIMIT])
            return _Statement(self.line_no, column0, head, brace if brace is not None and brace < len(head)
                              else None, length=end - first)
        # (rstrip: a statement cut short should fail at its own last line)
        return _Statement(self.line_no, column0, bytes(buf[first:end].rstrip()), brace, unclosed)

    def _idle_after(self, end: int) -> bool:
        """After a statement: when only space and comments follow it up to a
        line end, the splitter is idle from the next line on (and the reader
        may take over there, past ``careful_to``)."""
        buf = self.buf
        newline = buf.rfind(b"\n", self.start, _SPACE.match(buf, self.start, end).end())
        if newline < 0:
            return False
        self._idle_at(newline + 1)
        if newline + 1 >= self.careful_to:
            return True
        self.idle = False
        return False

    def _idle_at(self, at: int) -> None:
        self.line_no += self.buf.count(b"\n", self.line_at, at)
        self.line_at = self.start = self.scan = at
        self.idle = True


_TRIPLE_QUOTES = {34: b'"""', 39: b"'''"}
_BLOCK_START = re.compile(rb"((?:(?i:graph)\s+)?(?:<[^<>\s]*>|[^\s<>{}\"'.]+))\s*\{")
# A '{' outside strings, comments and IRIs that is not an annotation's '{|'.
_NEXT_BLOCK = re.compile(rb"(?:[^\"'#<{\\]++|" + _SKIPPED + rb"|<|[\"'\\])*+\{(?!\|)", re.S)


@dataclasses.dataclass(slots=True)
class _Piece:
    """Lines of TriG parsed at once: runs and stamps (``_group``), or the line
    (1-based, in the piece) where the parse failed."""

    lines: int
    runs: list = dataclasses.field(default_factory=list)
    stamps: list = dataclasses.field(default_factory=list)
    quads: int = 0
    error_line: int | None = None
    prefixes: dict | None = None
    base: str | None = None


_RELATIVE_IRI = "No scheme found"     # pyoxigraph's error on a relative IRI parsed without a base
_WHOLE_HEADER = 8 << 10         # prefix declarations parsed whole before each text up to this size
MAX_PREFIXES = 10_000           # prefixes one text may declare (kept, and parsed again, for all it says after)
# what may stand before the ':' of a prefixed name (a superset: only declared names count)
_PREFIX_NAME = re.compile(rb"([^\s:<>\"'{}()\[\],;]*):")


def _declarations(prefixes: dict[str, str]) -> bytes:
    """``prefixes`` as TriG ``@prefix`` lines, one each (a header to parse a text after)."""
    return b"".join(f"@prefix {name}: <{iri}> .\n".encode() for name, iri in prefixes.items())


class _TrigParser:
    """Parses TriG statements one by one, and pieces of lines at once,
    remembering prefixes and base."""

    _PROBE = b" { <urn:x-spaseq:probe> <urn:x-spaseq:probe> <urn:x-spaseq:probe> }"

    def __init__(self, where: str, base: str | None):
        self.where = where
        self.base = base
        self.relative = False       # the text has relative IRIs: pieces are parsed with the base
        self.prefixes: dict[str, str] = {}
        self.header = b""           # the prefixes declared so far, as TriG
        self.header_lines = 0

    def parse(self, statement: _Statement) -> list[_Unit | EventError]:
        text = statement.text
        if statement.length is not None:
            return self._reject(statement, EventError(
                f"statement of {statement.length:,} bytes is longer than the limit of "
                f"{MAX_STATEMENT_BYTES:,} bytes", f"{self.where}:{statement.line}", reason="too-large",
                text=text.decode("utf-8", "replace"), text_length=statement.length))
        if statement.unclosed:
            return self._reject(statement, EventError(
                "syntax error: graph block not closed (no '}' before the next graph "
                "or the end of the text)", f"{self.where}:{statement.line}", reason="syntax",
                **_text_of(text)))
        deep = term_too_deep(text)
        if deep >= 0:
            return self._reject(statement, too_deep_error(self.where, statement.line, text, deep))
        header, header_lines, used = self._header(text)
        try:
            parser = ox.parse(input=header + text, format=ox.RdfFormat.TRIG, base_iri=self.base)
            quads = list(islice(parser, MAX_EVENT_TRIPLES + 1))
        except SyntaxError as error:
            return self._reject(statement, _syntax_error(
                error, self.where, statement.line, statement.column0, header_lines, text))
        except MemoryError as error:
            if not term_too_large(error):
                raise       # (the process is out of memory: no statement of the input is to blame)
            return self._reject(statement, _too_large_term(self.where, statement.line, text))
        if len(quads) > MAX_EVENT_TRIPLES:
            return self._reject(statement, EventError(
                f"statement of more than {MAX_EVENT_TRIPLES:,} triples (--max-event-triples)",
                f"{self.where}:{statement.line}", reason="too-large", **_text_of(text)))
        prefixes = self._prefixes_after(parser.prefixes, used)
        if (prefixes is not self.prefixes and prefixes != self.prefixes) or parser.base_iri != self.base:
            if len(prefixes) > MAX_PREFIXES:
                return self._reject(statement, EventError(
                    f"more than {MAX_PREFIXES:,} prefixes declared in one text (each is kept for every "
                    "later statement)", f"{self.where}:{statement.line}", reason="too-large", **_text_of(text)))
            self._remember(prefixes, parser.base_iri)       # (a directive, maybe after a '.')
        line = statement.line
        if statement.brace is not None:
            line += text.count(b"\n", 0, statement.brace)       # the line of its '{'
            if not quads:
                # An empty graph block: still an event, with no triples.
                return [_Unit(line, quads, self.graph_name(text[:statement.brace]))]
        return [_Unit(line, quads)]

    def piece(self, text: bytes) -> _Piece:
        """Lines parsed at once (see the module docstring).

        Given a base, pyoxigraph resolves every IRI against it, absolute ones too,
        building each anew: about a tenth of the parse's instructions on the peers'
        stream.  An absolute IRI resolves to itself (tests/test_stream_files.py
        holds pyoxigraph to that), so a piece is parsed without the base first; a
        relative IRI then fails that parse, and the piece is parsed again with the
        base, as are all later pieces of the text (``relative``).  Another error is
        the one the parse with the base would meet first, at the same place."""
        lines = _newlines(text, 0, len(text))
        deep = term_too_deep(text)
        if deep >= 0:       # (the lines before it may be read so; the careful reading rejects it)
            return _Piece(lines, error_line=1 + text.count(b"\n", 0, deep))
        header, header_lines, used = self._header(text)
        data = header + text
        try:
            parsed = None
            if not self.relative and self.base is not None:
                try:
                    parser = ox.parse(input=data, format=ox.RdfFormat.TRIG)
                    parsed = _group(parser)
                except SyntaxError as error:
                    if _RELATIVE_IRI not in str(error):
                        raise
                    self.relative = True
            if parsed is None:
                parser = ox.parse(input=data, format=ox.RdfFormat.TRIG, base_iri=self.base)
                parsed = _group(parser)
        except SyntaxError as error:
            return _Piece(lines, error_line=max(1, (error.lineno or 1) - header_lines))
        except MemoryError:
            return _Piece(lines, error_line=lines)
        runs, stamps, quads = parsed
        prefixes = self._prefixes_after(parser.prefixes, used)
        if len(prefixes) > MAX_PREFIXES:
            return _Piece(lines, error_line=1)      # (read statement by statement: parse rejects it)
        return _Piece(lines, runs, stamps, quads, prefixes=prefixes, base=parser.base_iri or self.base)

    def adopt(self, piece: _Piece) -> None:
        """The prefixes and base at the end of a piece that was read."""
        if (piece.prefixes is not self.prefixes and piece.prefixes != self.prefixes) or piece.base != self.base:
            self._remember(piece.prefixes, piece.base)

    def _reject(self, statement: _Statement, error: EventError) -> list[_Unit | EventError]:
        """The error, and for a bad graph block the rejection of its whole event
        (when its name can be read)."""
        if statement.brace is not None:
            graph = self.graph_name(statement.text[:statement.brace])
            if graph is not None:
                error.graph = str(graph)
                return [error, _Unit(statement.line, [], graph, rejected=True)]
        return [error]

    def graph_name(self, label: bytes) -> ox.NamedNode | ox.BlankNode | None:
        """The graph a block label (``<g>``, ``ex:g``, ``GRAPH _:b``...) names."""
        if not label.strip():
            return None                 # '{ ... }' is the default graph
        if term_too_deep(label) >= 0:
            return None                 # (not a graph name, and never for the parser)
        try:
            quads = list(ox.parse(input=self._header(label)[0] + label + self._PROBE,
                                  format=ox.RdfFormat.TRIG, base_iri=self.base))
        except (SyntaxError, MemoryError):
            return None
        graph = quads[0].graph_name if quads else None
        return None if isinstance(graph, ox.DefaultGraph) else graph

    def _header(self, text: bytes) -> tuple[bytes, int, dict | None]:
        """The prefix declarations to parse ``text`` after: (them, their lines, the
        prefixes they declare, or None for all of them).  Past _WHOLE_HEADER bytes, only
        those whose names ``text`` shows: a sender that declared a hundred thousand
        prefixes made every later statement parse them all again (352 events/s)."""
        if len(self.header) <= _WHOLE_HEADER:
            return self.header, self.header_lines, None
        used = {}
        for name in set(_PREFIX_NAME.findall(text)):
            key = name.decode("utf-8", "replace")
            iri = self.prefixes.get(key)
            if iri is not None:
                used[key] = iri
        return _declarations(used), len(used), used

    def _prefixes_after(self, parsed: dict[str, str], used: dict | None) -> dict[str, str]:
        """The prefixes in force after a text parsed with the header of ``used``."""
        if used is None or parsed == used:
            return parsed if used is None else self.prefixes
        return {**self.prefixes, **parsed}      # (a directive in the text)

    def _remember(self, prefixes: dict[str, str], base: str | None) -> None:
        if base:
            self.base = base
        self.prefixes = dict(prefixes)
        self.header = _declarations(prefixes)
        self.header_lines = len(prefixes)
