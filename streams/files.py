"""Reading graph streams from files (semantics.md sections 1 and 10).

A stream file is TriG (``.trig``) or N-Quads (``.nq``), optionally gzipped
(``.trig.gz``, ``.nq.gz``), and holds one stream.  Each named graph is one
event; its timestamp is the object of ``<graph> prov:generatedAtTime τ`` in
the default graph.  Files are read as a stream, never loaded whole, in
chunks given to an ``EventReader`` (``streams/reader.py``: the streaming
rule, what is rejected, and the fast and careful readings).  Relative IRIs
are resolved against the file's own ``file:`` IRI unless the file sets
``@base``.

A gzipped file cut short (its end marker missing) is read up to there:
every complete event before the cut is read, and the cut is one rejection
(``truncated``), the incomplete statement at the cut included.  A corrupt
one is not read at all (``_Chunks``).

The order rules of ``reader.OrderCheck`` (duplicate, older, other kind of
time, a jump of more than the maximum time jump) apply per file, and across
the files of one stream (a glob or a folder, merged by time).  The maximum
time jump is ``--max-time-jump`` (``spaseq_configure``: ``max_time_jump``),
a year by default.

The SPASEQ authors' reference implementation describes its streams in a
manifest (``read_manifest``): N-Triples files in which every N consecutive
triples form one event, timestamped 1, 2, 3, ... in arrival order
(``read_ntriples_chunks``).
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import heapq
import math
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyoxigraph as ox

from ..errors import EventError, UsageError
from ..events import Event, Time
from ..hookspecs import StreamSource, hookimpl
from . import reader, reorder
from .reader import (DEFAULT_MAX_TIME_JUMP, DONE_MEMORY, NEAR_GRAPHS, OrderCheck,
                     check_order, event_reader, parse_line_batch, term_too_deep)

__all__ = [
    "DONE_MEMORY",
    "NEAR_GRAPHS",
    "merge_streams",
    "open_stream",
    "order_check",
    "read_manifest",
    "read_manifest_streams",
    "read_ntriples_chunks",
    "read_stream_file",
    "nquads_spans",
    "skip_items",
    "stream_file_format",
    "stream_file_paths",
]

# The events a chunk completes are all made before the first is used: in smaller chunks
# more of them are still in the caches then.  At 64 KiB rather than 256 KiB, reading the
# peers' 100k events took 7-15 % less CPU time, the strict V-shape 6 % less, skip-till-any
# (whose runs want the caches too) from 1 % less to 3 % more (docs/bench.md).
_CHUNK_BYTES = 1 << 16
_NTRIPLES_BATCH_LINES = 2000

_FORMATS = {".trig": ox.RdfFormat.TRIG, ".nq": ox.RdfFormat.N_QUADS}

# The run's maximum time jump (seconds, None: no bound), set by spaseq_configure.
_SETTINGS: dict[str, Time | None] = {"max_time_jump": DEFAULT_MAX_TIME_JUMP}


@hookimpl
def spaseq_configure(config):
    """``max_time_jump`` (``--max-time-jump``: seconds, or infinity for no
    bound; absent or None: a year), ``max_statement`` (``--max-statement``:
    bytes; absent or None: 32 MiB), ``max_event_triples`` (``--max-event-triples``;
    absent or None: a million), ``max_term_depth`` (``--max-term-depth``; absent
    or None: 64) for every stream of the run, and ``max_held`` (``--max-held``;
    absent or None: 100,000) for every reordering buffer."""
    jump = config.get("max_time_jump")
    _SETTINGS["max_time_jump"] = DEFAULT_MAX_TIME_JUMP if jump is None else (
        None if jump == float("inf") else jump)
    reader.MAX_STATEMENT_BYTES = config.get("max_statement") or reader.DEFAULT_MAX_STATEMENT_BYTES
    reader.MAX_EVENT_TRIPLES = config.get("max_event_triples") or reader.DEFAULT_MAX_EVENT_TRIPLES
    reader.MAX_TERM_DEPTH = config.get("max_term_depth") or reader.DEFAULT_MAX_TERM_DEPTH
    reorder.MAX_HELD = config.get("max_held") or reorder.DEFAULT_MAX_HELD


def order_check() -> OrderCheck:
    """The order rules with the run's maximum time jump."""
    return OrderCheck(_SETTINGS["max_time_jump"])


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------

def read_stream_file(path: str, stream: str | None, *, default_stream_for_graphs: str | None = None,
                     span: tuple[int, int, int] | None = None) -> Iterator[Event | EventError]:
    """Events of one stream file, in file order, with ``EventError`` for rejects.

    ``stream`` is the stream IRI every event gets (one file holds one stream);
    when it is ``None``, ``default_stream_for_graphs`` is used instead.
    ``span`` (uncompressed N-Quads only) reads just the lines from byte
    ``span[0]`` (a line start, numbered ``span[2]``) to byte ``span[1]``.
    Raises ``ValueError`` for an unknown file extension and
    ``FileNotFoundError`` for a missing file, right away (not on iteration).
    """
    stream = stream or default_stream_for_graphs
    if not stream:
        raise ValueError("read_stream_file needs a stream IRI")
    rdf_format = stream_file_format(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"stream file not found: {path}")
    if span is not None and (rdf_format != ox.RdfFormat.N_QUADS or path.lower().endswith(".gz")):
        raise ValueError(f"{path}: only uncompressed N-Quads files are read in spans")
    reader = event_reader(path, stream, rdf_format, base=Path(path).resolve().as_uri(),
                          first_line=span[2] if span is not None else 1, order=order_check())
    return _read(path, reader, span)


def _read(path: str, reader, span) -> Iterator[Event | EventError]:
    chunks = _Chunks(path, span)
    feed = reader.feed
    for chunk in chunks:
        if out := feed(chunk):
            yield from out
    yield from reader.finish(chunks.truncated)


def stream_file_format(path: str) -> ox.RdfFormat:
    """The RDF format of a stream file name (``.trig``/``.nq``, maybe ``.gz``)."""
    name = path.lower().removesuffix(".gz")
    rdf_format = _FORMATS.get(os.path.splitext(name)[1])
    if rdf_format is None:
        raise ValueError(f"{path}: a stream file must end in .trig, .nq, .trig.gz or .nq.gz")
    return rdf_format


def open_stream(spec_path: str, stream: str) -> Iterator[Event | EventError]:
    """Events of one stream given as a file, a glob pattern or a directory.

    Several files feeding one stream are merged by time, and the duplicate
    and out-of-order checks apply across them.
    """
    paths = stream_file_paths(spec_path)
    if len(paths) == 1:
        return read_stream_file(paths[0], stream)
    return check_order(merge_streams([read_stream_file(p, stream) for p in paths]), order_check())


def stream_file_paths(spec_path: str) -> list[str]:
    """The files a stream location names: the file itself, the stream files of a
    directory, or the files a glob matches (sorted).  Raises ``FileNotFoundError``
    when there are none."""
    if os.path.isdir(spec_path):
        paths = sorted(str(p) for p in Path(spec_path).iterdir()
                       if p.is_file() and is_stream_file(p.name))
        if not paths:
            raise FileNotFoundError(f"no .trig/.nq(.gz) stream file in directory {spec_path}")
        return paths
    if glob.has_magic(spec_path):
        paths = sorted(p for p in glob.glob(spec_path) if os.path.isfile(p))
        if not paths:
            raise FileNotFoundError(f"no file matches {spec_path}")
        return paths
    return [spec_path]


def merge_streams(sources: list[Iterator[Event | EventError]], delivered: list[int] | None = None
                  ) -> Iterator[Event | EventError]:
    """Merge time-ordered sources into one non-decreasing sequence.

    Stable: for equal times, events keep the order of ``sources`` (and their
    order within one source).  ``EventError`` items have no time: each one is
    passed on as soon as it is read, so it neither waits for nor reorders the
    events.  Each source is read only as far as the merge needs.

    ``delivered`` (one count per source) counts the items of each source
    passed on so far, not those read ahead: the sources' positions for a
    checkpoint (``skip_items`` resumes them).
    """
    if len(sources) == 1 and delivered is None:
        return iter(sources[0])         # (one source is in order already: no layer per event)
    return _merged(sources, delivered)


def _merged(sources: list[Iterator[Event | EventError]], delivered: list[int] | None
            ) -> Iterator[Event | EventError]:
    iterators = [iter(source) for source in sources]
    # The top of the heap goes out, then its source's next event takes its place: one
    # sift per event, and no generator per event.  Each source starts with a placeholder
    # before any time, so that it is read to its first event before any event goes out.
    heap: list[tuple[Time, int, Event | None]] = [(-math.inf, index, None) for index in range(len(iterators))]
    while heap:
        _, index, event = heap[0]
        if event is not None:
            if delivered is not None:
                delivered[index] += 1
            yield event
        for item in iterators[index]:
            if isinstance(item, EventError):
                if delivered is not None:
                    delivered[index] += 1
                yield item
                continue
            heapq.heapreplace(heap, (item.time, index, item))
            break
        else:
            heapq.heappop(heap)


def skip_items(source: Iterable[Event | EventError], count: int, name: str = "a stream input"
               ) -> Iterator[Event | EventError]:
    """A stream file source resumed at a checkpoint's position: its items after
    the first ``count``.  Those are read again and dropped: the reader's state
    at a byte offset (the prefixes and base in force, the graph being read, the
    graphs already finished, the order check) is what reading up to it builds,
    so reading is the one way to rebuild it exactly, gzip or not.  A source
    that ends before ``count`` items has become shorter since the checkpoint:
    a ``UsageError`` (its items after the position would be silently lost)."""
    if type(count) is not int or count < 0:
        raise UsageError(f"{name}: the checkpoint records no readable position for it ({count!r})")
    items = iter(source)
    for read in range(count):
        if next(items, None) is None:
            raise UsageError(f"{name} has become shorter since the checkpoint: it now ends after "
                                  f"{read:,} items, the checkpoint had read {count:,}; remove the checkpoint "
                                  "directory to start over")
    yield from items


_MANIFEST_LINE = re.compile(r"<([^<>\s]+)>\s+<([^<>]+)>\s+(\d+)(?:\s+#.*)?")
MANIFEST_CHARS = 16 << 20       # the longest manifest read (it names files: /dev/zero filled the memory)


def read_manifest(path: str) -> list[tuple[str, str, int]]:
    """Parse a reference-implementation stream manifest.

    Each line is ``<stream IRI> <path> N``: the path (in angle brackets) is
    relative to the manifest's folder or, when not found there, to the
    current directory (the authors' own manifests are written that way); N
    is the number of triples per event.  Blank lines and ``#`` comments are
    ignored.  A malformed line, or one naming a missing file, raises
    ``EventError`` with ``FILE:LINE``.
    """
    base = os.path.dirname(path)
    entries = []
    with open(path, encoding="utf-8-sig") as f:       # (-sig: past a byte order mark)
        whole = f.read(MANIFEST_CHARS + 1)
        if len(whole) > MANIFEST_CHARS:
            raise EventError(f"manifest longer than {MANIFEST_CHARS:,} characters: a manifest names "
                             "stream files, a line each", path)
        for number, text in enumerate(whole.splitlines(), start=1):
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            match = _MANIFEST_LINE.fullmatch(text.strip())
            position = f"{path}:{number}"
            if match is None:
                raise EventError("malformed manifest line, expected '<stream IRI> <path> N': "
                                 f"{text.strip()!r}", position)
            stream, file_path, count = match.group(1), match.group(2), int(match.group(3))
            if count < 1:
                raise EventError(f"triples per event must be at least 1, not {count}", position)
            if count > reader.MAX_EVENT_TRIPLES:        # (each event is held whole while it is read)
                raise EventError(f"triples per event must be at most {reader.MAX_EVENT_TRIPLES:,} "
                                 f"(--max-event-triples), not {count:,}", position)
            beside = os.path.normpath(os.path.join(base, file_path))
            if os.path.isfile(beside):
                file_path = beside
            elif not os.path.isfile(file_path):
                raise EventError(f"stream file not found: {file_path} (looked in "
                                 f"{base or '.'} and in the current directory)", position)
            entries.append((stream, file_path, count))
    return entries


def read_manifest_streams(path: str) -> dict[str, Iterator[Event | EventError]]:
    """Each stream IRI of a manifest mapped to its events.

    Several lines for one stream are merged by time (that is, interleaved in
    arrival order) and then renumbered 1, 2, 3, ... so that the stream still
    has one event per timestamp.
    """
    files: dict[str, list[tuple[str, int]]] = {}
    for stream, file_path, count in read_manifest(path):
        files.setdefault(stream, []).append((file_path, count))
    streams = {}
    for stream, entries in files.items():
        readers = [read_ntriples_chunks(p, stream, n) for p, n in entries]
        streams[stream] = readers[0] if len(readers) == 1 else _renumber(merge_streams(readers))
    return streams


def read_ntriples_chunks(path: str, stream: str, triples_per_event: int) -> Iterator[Event | EventError]:
    """Events of N-Triples file cut every ``triples_per_event`` triples.

    The k-th event (1-based) has time k.  Comment and blank lines are
    skipped; a malformed line is rejected and does not count.  Left-over
    triples at the end of the file, too few for an event, are rejected.
    Raises ``FileNotFoundError`` right away for a missing file.
    """
    if triples_per_event < 1:
        raise ValueError("triples_per_event must be at least 1")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"stream file not found: {path}")
    return _ntriples_chunks(path, stream, triples_per_event)


def _renumber(items: Iterable[Event | EventError]) -> Iterator[Event | EventError]:
    """Give events arrival-order times 1, 2, 3, ..."""
    count = 0
    for item in items:
        if isinstance(item, Event):
            count += 1
            item = dataclasses.replace(item, time=count, is_datetime=False)
        yield item


# --------------------------------------------------------------------------
# Reading bytes and lines
# --------------------------------------------------------------------------

def is_stream_file(name: str) -> bool:
    try:
        stream_file_format(name)
    except ValueError:
        return False
    return True


def _open(path: str):
    return gzip.open(path, "rb") if path.lower().endswith(".gz") else open(path, "rb")


class _Chunks:
    """The bytes of a file (of ``span``: (start, end, first line)), chunk by
    chunk.  A gzipped file that ends before its end marker ends there, and
    ``truncated`` then says why.

    A gzipped file is checked whole before any of it is read: deflate data
    damaged in the middle often still inflates, to other bytes, and only the
    CRC at the end of the member tells.  Events made of those bytes would be
    wrong results, so a corrupt file gives no chunk at all (``truncated``
    says so).  The check inflates the file once more, a small cost next to
    parsing it."""

    def __init__(self, path: str, span: tuple[int, int, int] | None = None):
        self.path = path
        self.span = span
        self.truncated: str | None = None

    def _corruption(self) -> str | None:
        with gzip.open(self.path, "rb") as f:
            try:
                while f.read1(_CHUNK_BYTES):
                    pass
            except EOFError:
                return None         # cut short: read up to the cut
            except (gzip.BadGzipFile, zlib.error) as error:
                return f"the gzip data is corrupt ({error}), so none of the file is read"
        return None

    def __iter__(self) -> Iterator[bytes]:
        if self.path.lower().endswith(".gz"):
            self.truncated = self._corruption()
            if self.truncated is not None:
                return
        with _open(self.path) as f:
            left = None
            if self.span is not None:
                f.seek(self.span[0])
                left = self.span[1] - self.span[0]
            # (read1: a read that ends in an error keeps nothing of what it had read)
            read = getattr(f, "read1", f.read)
            while left is None or left > 0:
                try:
                    chunk = read(_CHUNK_BYTES if left is None else min(_CHUNK_BYTES, left))
                except EOFError:
                    self.truncated = "the gzip file is truncated (it ends before its end marker)"
                    return
                except (gzip.BadGzipFile, zlib.error) as error:
                    self.truncated = f"the gzip data is corrupt ({error})"
                    return
                if not chunk:
                    return
                if left is not None:
                    left -= len(chunk)
                yield chunk


def _lines(path: str, where: str, span: tuple[int, int, int] | None = None
           ) -> Iterator[tuple[int, bytes] | EventError]:
    """(number, line) of a file's lines that are not blank or comments, or an
    ``EventError`` for a line longer than ``reader.MAX_STATEMENT_BYTES`` (skipped
    without being kept) or a gzip file cut short."""
    chunks = _Chunks(path, span)
    number = span[2] if span is not None else 1
    rest = b""
    skipping = False        # dropping the rest of a line too long to keep
    for chunk in chunks:
        if number == 1 and not rest:
            chunk = reader.without_byte_order_mark(chunk)
        if skipping:
            newline = chunk.find(b"\n")
            if newline < 0:
                continue
            number, skipping, chunk = number + 1, False, chunk[newline + 1:]
        *complete, rest = (rest + chunk).split(b"\n")
        for line in complete:
            stripped = line.strip()
            if stripped and stripped[0] != 35:          # (35: '#')
                yield number, line + b"\n"
            number += 1
        if len(rest) > reader.MAX_STATEMENT_BYTES:
            # rejected at once (a line may never end), the rest dropped as it comes
            yield reader.line_too_long(where, number, len(rest), rest[:reader.TEXT_LIMIT])
            skipping, rest = True, b""
    if not skipping:
        if chunks.truncated is not None:
            yield EventError(f"{chunks.truncated}: the text from line {number} on is lost", f"{where}:{number}",
                             reason="truncated")
        elif rest.strip() and rest.strip()[0] != 35:
            yield number, rest + b"\n"


def nquads_spans(path: str, size: int) -> list[tuple[int, int, int]]:
    """Cut an N-Quads file into spans of about ``size`` bytes, each ``(start byte,
    end byte, number of the first line)``, at lines where the event changes (the
    graph of a quad, the subject of a default-graph line: a timestamp), so that
    no event is cut as long as its lines are together.  The reader of the spans
    checks that they were (see spark.engine)."""
    total = os.path.getsize(path)
    spans: list[tuple[int, int, int]] = []
    start, first, lines = 0, 1, 0
    with open(path, "rb") as f:
        while True:
            block = f.read(min(_CHUNK_BYTES, max(size, 4096)))
            if not block:
                break
            lines += block.count(b"\n")
            if f.tell() - start < size or f.tell() >= total:
                continue
            lines += f.readline().count(b"\n")     # to the next line start
            previous = None
            for _ in range(NEAR_GRAPHS):
                at = f.tell()
                line = f.readline()
                if not line:
                    break
                owner = _line_owner(line)
                if previous is not None and owner is not None and owner != previous:
                    spans.append((start, at, first))
                    start, first = at, lines + 1
                    f.seek(at)
                    break
                previous = owner if owner is not None else previous
                lines += line.count(b"\n")
    spans.append((start, total, first))
    return spans


def _line_owner(line: bytes):
    """The event an N-Quads line belongs to: its graph, or a default-graph line's subject."""
    if term_too_deep(line) >= 0:
        return None
    try:
        quads = list(ox.parse(input=line, format=ox.RdfFormat.N_QUADS))
    except (SyntaxError, MemoryError):      # (MemoryError: a term over 16 MiB; the reader rejects the line)
        return None
    if len(quads) != 1:
        return None
    quad = quads[0]
    return quad.subject if isinstance(quad.graph_name, ox.DefaultGraph) else quad.graph_name


def _parse_lines(path: str, rdf_format: ox.RdfFormat) -> Iterator[tuple[int, ox.Quad] | EventError]:
    """(line number, quad) per line, or an ``EventError`` for a bad line.

    Lines are parsed a batch at a time; only a batch with an error is
    parsed again line by line, to find the bad lines and keep the rest.
    """
    batch: list[tuple[int, bytes]] = []
    for item in _lines(path, path):
        if isinstance(item, EventError):
            yield from parse_line_batch(batch, rdf_format, path)
            batch.clear()
            yield item
            continue
        batch.append(item)
        if len(batch) >= _NTRIPLES_BATCH_LINES:
            yield from parse_line_batch(batch, rdf_format, path)
            batch.clear()
    if batch:
        yield from parse_line_batch(batch, rdf_format, path)


def _ntriples_chunks(path: str, stream: str, size: int) -> Iterator[Event | EventError]:
    triples: list[ox.Triple] = []
    first_line = 0
    count = 0
    for item in _parse_lines(path, ox.RdfFormat.N_TRIPLES):
        if isinstance(item, EventError):
            yield item
            continue
        number, quad = item
        if not triples:
            first_line = number
        triples.append(quad.triple)
        if len(triples) == size:
            count += 1
            yield Event(stream=stream, time=count, triples=tuple(triples),
                        position=f"{path}:{first_line}")
            triples = []
    if triples:
        yield EventError(f"incomplete event at the end of the file: {len(triples)} of "
                         f"{size} triples", f"{path}:{first_line}")


@hookimpl
def spaseq_stream_sources():
    return [StreamSource("file", open_stream,
                         "TriG or N-Quads files, optionally .gz; a glob or a folder feeds one stream")]
