"""Bulk loading of KB dumps: the files, their parsing, ``--only-for`` and the Oxigraph loader.

``spaseq kb load`` (:mod:`spaseq_plugin.cli.kb_commands`) and its Spark
variant (:mod:`spaseq_plugin.spark.load`) share what is here:

* inputs: files (plain, ``.gz`` or ``.bz2``), directories (their RDF files,
  recursively) and globs (:func:`expand_inputs`);
* parsing: N-Triples and N-Quads are parsed in chunks of lines, a bad line is
  rejected (``FILE:LINE:COLUMN: MESSAGE<TAB>LINE`` in the rejects file),
  counted, and the load goes on (:func:`parse_lines`); Turtle, TriG and
  RDF/XML cannot be resumed after a syntax error, so an error in one stops the
  load, naming file, line and column (:class:`RdfFileReader`).  Blank node
  labels are file-scoped: each is named after a hash of its file's absolute
  path and its label (:class:`QuadRewriter`), so loading the same files again
  (or with ``--spark``) gives the same store content;
* ``--only-for QUERY...`` keeps only the quads the queries' GRAPH patterns
  can match (:class:`KeepFilter`);
* :class:`OxigraphLoader` bulk-loads into an on-disk Oxigraph store, and
  :func:`load_in_process` drives a load in this process.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import time
from dataclasses import dataclass, field
from typing import IO, Callable, Iterable, Iterator, NamedTuple

import pyoxigraph as ox

from ..errors import QueryError, SpaseqError
from ..language.compiler import compile_query
from ..language.limits import read_query_file
from ..streams import reader
from ..streams.reader import TOO_LARGE_TERM, term_too_deep, term_too_large
from .oxigraph import NestingChecked, open_rdf_file, rdf_format

PROGRESS_EVERY = 1_000_000
LINE_FORMATS = frozenset({ox.RdfFormat.N_TRIPLES, ox.RdfFormat.N_QUADS})
QUAD_FORMATS = frozenset({ox.RdfFormat.N_QUADS, ox.RdfFormat.TRIG})
CHUNK_BYTES = 4 << 20       # lines per pyoxigraph call: a call per line would be several times slower
RETRY_LINES = 64            # after a bad line, lines per call, doubling: dense errors stay cheap
BATCH = 10_000              # quads per batch from the formats parsed whole


# -- inputs --------------------------------------------------------------------------------

def expand_inputs(specs: list[str]) -> list[str]:
    """The files that DUMP arguments name: files, directories (their RDF files, recursively,
    skipping hidden and ``_``-prefixed ones such as Spark's ``_SUCCESS``) and globs; in the
    order given, each file once."""
    files: dict[str, str] = {}
    for spec in specs:
        if os.path.isdir(spec):
            found = _rdf_files_under(spec)
            if not found:
                raise SpaseqError(f"{spec}: a directory without RDF files (.nt .nq .trig .ttl .rdf, .gz, .bz2)")
        elif os.path.isfile(spec):
            rdf_format(spec)                # an unknown file type is an error when named
            found = [spec]
        elif any(c in spec for c in "*?["):
            found = [f for match in sorted(glob.glob(spec, recursive=True))
                     for f in (_rdf_files_under(match) if os.path.isdir(match) else [match])
                     if _is_rdf_file(f)]
            if not found:
                raise SpaseqError(f"{spec}: matches no RDF file")
        else:
            raise SpaseqError(f"{spec}: no such file")
        for path in found:
            files.setdefault(os.path.abspath(path), path)
    return list(files.values())


def _rdf_files_under(directory: str) -> list[str]:
    found = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        found.extend(os.path.join(root, n) for n in sorted(names)
                     if not n.startswith((".", "_")) and _is_rdf_file(n))
    return found


def _is_rdf_file(path: str) -> bool:
    try:
        rdf_format(path)
    except SpaseqError:
        return False
    return True


def blank_node_prefix(path: str) -> str:
    """What a file's blank node labels are prefixed with: labels are scoped to their file, so a
    hash of its absolute path keeps files apart, and every reader of the file (a Spark partition
    or the in-process loader) names a blank node alike."""
    return "f" + hashlib.sha1(os.path.abspath(path).encode("utf-8")).hexdigest()[:12] + "_"


# -- parsing -------------------------------------------------------------------------------

class Reject(NamedTuple):
    """A line the parser refused: its number (1-based), column, the message and the text."""
    line: int
    column: int | None
    message: str
    text: str

    def describe(self, path: str) -> str:
        """``FILE:LINE[:COLUMN]: MESSAGE<TAB>LINE`` (one line)."""
        where = f"{self.line}:{self.column}" if self.column else f"{self.line}"
        return f"{path}:{where}: {self.message}\t{self.text}"


def parse_lines(lines: list, fmt: ox.RdfFormat, first_line: int = 1) -> tuple[list[ox.Quad], list[Reject]]:
    """The quads of N-Triples or N-Quads lines (str or bytes, without line ends), and a
    Reject per bad line.  pyoxigraph stops at the first error of its input, and reports a
    missing dot on the line after the culprit: so the lines before the reported one's
    predecessor are parsed again as a block, those two one by one, and parsing resumes
    after them."""
    separator = b"\n" if lines and isinstance(lines[0], bytes) else "\n"
    quads: list[ox.Quad] = []
    rejects: list[Reject] = []
    start, window = 0, len(lines)
    while start < len(lines):
        end = min(len(lines), start + window)
        text = separator.join(lines[start:end])
        parsed = None
        try:    # into a list of its own: what precedes an error is parsed again below
            if term_too_deep(_as_bytes(text)) < 0:
                parsed = list(ox.parse(text, fmt))
        except SyntaxError as error:
            reported = min(max(start + (getattr(error, "lineno", None) or 1) - 1, start), end - 1)
            suspect = max(reported - 1, start)
            if suspect > start:                  # the parser went past these lines: they are good
                good, bad = parse_lines(lines[start:suspect], fmt, first_line + start)
                quads.extend(good)
                rejects.extend(bad)
            for index in range(suspect, reported + 1):
                _parse_line(lines[index], fmt, first_line + index, quads, rejects)
            start, window = reported + 1, RETRY_LINES
            continue
        except MemoryError as error:
            if not term_too_large(error):
                raise
        if parsed is None:      # a line nests triple terms too deep, or holds a term too large
            for index in range(start, end):         # (each line alone: those rejected, the rest kept)
                _parse_line(lines[index], fmt, first_line + index, quads, rejects)
            start, window = end, RETRY_LINES
            continue
        quads.extend(parsed)
        start, window = end, window * 2
    return quads, rejects


def _parse_line(line, fmt: ox.RdfFormat, number: int, quads: list, rejects: list) -> None:
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    deep = term_too_deep(_as_bytes(line))
    if deep >= 0:
        rejects.append(Reject(number, None, f"a triple term nested more than {reader.MAX_TERM_DEPTH} deep "
                              "(--max-term-depth)", text.rstrip("\r")))
        return
    try:
        parsed = list(ox.parse(line, fmt))
    except SyntaxError as error:
        rejects.append(Reject(number, getattr(error, "offset", None), _syntax_message(error),
                              text.rstrip("\r")))
        return
    except MemoryError as error:
        if not term_too_large(error):
            raise
        rejects.append(Reject(number, None, TOO_LARGE_TERM, text[:200] + "..."))
        return
    quads.extend(parsed)


def _skip_line(stream) -> None:
    """Read past the end of the current line, a chunk at a time."""
    while (piece := stream.readline(CHUNK_BYTES)) and not piece.endswith(b"\n"):
        pass


def _as_bytes(text) -> bytes:
    return text.encode("utf-8") if isinstance(text, str) else text


class QuadRewriter:
    """What a file's quads become in the store: blank nodes named per file
    (:func:`blank_node_prefix`), triples put into ``graph``, and only what ``keep`` keeps."""

    def __init__(self, path: str, graph: str | None = None, keep: "KeepFilter | None" = None):
        self.prefix = blank_node_prefix(path)
        self.graph = ox.NamedNode(graph) if graph else None
        self.keep = keep

    def __call__(self, quads: list[ox.Quad], blank_nodes: bool = True) -> list[ox.Quad]:
        """``blank_nodes``: the quads may hold some (False saves looking)."""
        if blank_nodes:
            quads = [self._renamed(q) for q in quads]
        if self.graph is not None:
            graph = self.graph
            quads = [ox.Quad(q.subject, q.predicate, q.object, graph) for q in quads]
        if self.keep is not None:
            quads = [q for q in quads if self.keep(q)]
        return quads

    def _renamed(self, quad: ox.Quad) -> ox.Quad:
        subject, obj, graph = quad.subject, quad.object, quad.graph_name
        if not (type(subject) is ox.BlankNode or type(obj) is ox.BlankNode or type(graph) is ox.BlankNode):
            return quad
        prefix = self.prefix
        if type(subject) is ox.BlankNode:
            subject = ox.BlankNode(prefix + subject.value)
        if type(obj) is ox.BlankNode:
            obj = ox.BlankNode(prefix + obj.value)
        if type(graph) is ox.BlankNode:
            graph = ox.BlankNode(prefix + graph.value)
        return ox.Quad(subject, quad.predicate, obj, graph)


class RdfFileReader:
    """The quads of one RDF file (plain, .gz or .bz2), by pyoxigraph's parsers: N-Triples,
    Turtle and RDF/XML into the default graph or ``graph``; TriG and N-Quads with their own
    graphs; blank nodes named per file and only what ``keep`` keeps (:class:`QuadRewriter`).

    N-Triples and N-Quads are parsed in chunks of lines (:func:`parse_lines`): a bad line
    goes to ``on_reject`` and the file goes on; without ``on_reject`` it is an error, as a
    syntax error in the other formats always is.  ``count``: quads read; ``kept``: those
    yielded; ``rejected``: bad lines; ``parse_seconds``: time spent reading and parsing."""

    def __init__(self, path: str, graph: str | None = None,
                 progress: Callable[[int, float], None] | None = None, *, atomic: bool = False,
                 keep: "KeepFilter | None" = None, on_reject: Callable[[Reject], None] | None = None):
        self.format = rdf_format(path)
        if graph and self.format in QUAD_FORMATS:
            raise SpaseqError(f"{path}: --graph puts triples into one graph; this file names its own graphs")
        if not os.path.isfile(path):
            raise SpaseqError(f"{path}: no such file" if not os.path.isdir(path)
                              else f"{path} is a directory: give the RDF files in it")
        self.path = path
        self.rewrite = QuadRewriter(path, graph, keep)
        self.progress = progress
        self.atomic = atomic            # the caller adds nothing from a file with an error
        self.on_reject = on_reject
        self.count = self.kept = self.rejected = 0
        self.parse_seconds = 0.0
        self.started = time.monotonic()

    def __iter__(self) -> Iterator[ox.Quad]:
        self.started = time.monotonic()
        try:
            with open_rdf_file(self.path) as stream:
                batches = self._line_batches(stream) if self.format in LINE_FORMATS else \
                    self._whole_file_batches(stream)
                for quads in batches:
                    yield from quads
        except SyntaxError as e:
            raise SpaseqError(f"{self.path}:{_where(e)} {_syntax_message(e)} ({self._loaded()})") from None
        except MemoryError as e:
            if not term_too_large(e):
                raise
            raise SpaseqError(f"{self.path}: {TOO_LARGE_TERM} ({self._loaded()})") from None
        except (OSError, EOFError, ValueError) as e:     # unreadable, or a broken .gz/.bz2
            raise SpaseqError(f"{self.path}: cannot read it: {e}") from None

    def _line_batches(self, stream) -> Iterator[list[ox.Quad]]:
        line = 1
        while True:
            started = time.perf_counter()
            block = stream.read(CHUNK_BYTES)
            if not block:
                return
            too_long = None
            if not block.endswith(b"\n"):
                start = block.rfind(b"\n") + 1
                block += stream.readline(max(reader.MAX_STATEMENT_BYTES - (len(block) - start), 0) + 1)
                if not block.endswith(b"\n") and len(block) - start > reader.MAX_STATEMENT_BYTES:
                    # (a gzip file of 600 KB held a line of 600 MB: read whole, it took the memory)
                    block, too_long = block[:start], block[start:]
            lines = block.split(b"\n")
            if not lines[-1]:
                lines.pop()
            quads, rejects = parse_lines(lines, self.format, line)
            line += len(lines)
            if too_long is not None:
                rejects.append(Reject(line, None, f"a line longer than {reader.MAX_STATEMENT_BYTES:,} bytes "
                                      "(--max-statement), skipped", too_long[:200].decode("utf-8", "replace") + "..."))
                _skip_line(stream)
                line += 1
            for reject in rejects:
                self._reject(reject)
            yield self._finish(quads, b"_:" in block, started)

    def _whole_file_batches(self, stream) -> Iterator[list[ox.Quad]]:
        started = time.perf_counter()
        batch: list[ox.Quad] = []
        try:
            for quad in ox.parse(NestingChecked(stream, self.path), self.format):
                batch.append(quad)
                if len(batch) == BATCH:
                    yield self._finish(batch, True, started)
                    batch = []
                    started = time.perf_counter()
        except SyntaxError:
            if batch and not self.atomic:       # what came before the error is loaded
                yield self._finish(batch, True, started)
            raise
        yield self._finish(batch, True, started)

    def _finish(self, quads: list[ox.Quad], blank_nodes: bool, started: float) -> list[ox.Quad]:
        before = self.count
        self.count += len(quads)
        kept = self.rewrite(quads, blank_nodes)
        self.kept += len(kept)
        self.parse_seconds += time.perf_counter() - started
        if self.progress and self.count // PROGRESS_EVERY > before // PROGRESS_EVERY:
            self.progress(self.count, time.monotonic() - self.started)
        return kept

    def _reject(self, reject: Reject) -> None:
        if self.on_reject is None:
            where = f"{reject.line}:{reject.column}:" if reject.column else f"{reject.line}:"
            raise SpaseqError(f"{self.path}:{where} {reject.message} ({self._loaded()})")
        self.rejected += 1
        self.on_reject(reject)

    def _loaded(self) -> str:
        return "nothing was loaded" if self.atomic or not self.kept else \
            f"the {_triples(self.kept)} before it were loaded"


def _triples(n: int) -> str:
    return f"{n:,} triple" + "s" * (n != 1)


def _where(error: SyntaxError) -> str:
    line, column = getattr(error, "lineno", None), getattr(error, "offset", None)
    if line:
        return f"{line}:{column}:" if column else f"{line}:"
    return ""


def _syntax_message(error: SyntaxError) -> str:
    text = error.msg if getattr(error, "msg", None) else str(error)
    if getattr(error, "lineno", None):                 # the position is given already
        text = re.sub(r"^Parser error (?:between|at) line .*?: ", "", text)
    return text.replace("\n", " ")


# -- --only-for ----------------------------------------------------------------------------

@dataclass(frozen=True)
class KeepFilter:
    """The quads ``--only-for`` keeps: those in a named graph that a GRAPH pattern of the
    queries can match (the default graph never is: semantics.md section 2).  A pattern in
    ``GRAPH <g>`` keeps its predicates of graph g, all of g when a predicate is a variable
    or a negated property set; in ``GRAPH ?g`` its predicates in every named graph."""

    everything: bool = False                          # GRAPH ?g { ?s ?p ?o }
    graphs: frozenset[str] = frozenset()              # whole graphs
    predicates: frozenset[str] = frozenset()          # in every named graph
    graph_predicates: frozenset[tuple[str, str]] = frozenset()

    @classmethod
    def of_pairs(cls, pairs: Iterable[tuple[str | None, str | None]]) -> "KeepFilter":
        """From (graph, predicate) pairs, None for "any"."""
        pairs = set(pairs)
        graphs = frozenset(g for g, p in pairs if g is not None and p is None)
        return cls(everything=(None, None) in pairs, graphs=graphs,
                   predicates=frozenset(p for g, p in pairs if g is None and p is not None),
                   graph_predicates=frozenset((g, p) for g, p in pairs
                                              if g is not None and p is not None and g not in graphs))

    def __call__(self, quad: ox.Quad) -> bool:
        graph = quad.graph_name
        if type(graph) is not ox.NamedNode:
            return self.everything and type(graph) is ox.BlankNode
        if self.everything:
            return True
        g, p = graph.value, quad.predicate.value
        return g in self.graphs or p in self.predicates or (g, p) in self.graph_predicates

    def describe(self) -> str:
        if self.everything:
            return "every named graph (a GRAPH ?g pattern with a variable predicate)"
        parts = [f"all of <{g}>" for g in sorted(self.graphs)]
        by_graph: dict[str, list[str]] = {}
        for g, p in sorted(self.graph_predicates):
            by_graph.setdefault(g, []).append(p)
        parts += [f"<{g}>: {', '.join(f'<{p}>' for p in ps)}" for g, ps in by_graph.items()]
        if self.predicates:
            parts.append(f"any graph: {', '.join(f'<{p}>' for p in sorted(self.predicates))}")
        return "; ".join(parts) or "nothing (the queries have no GRAPH pattern)"


def keep_filter_for(query_paths: list[str]) -> KeepFilter:
    """The :class:`KeepFilter` of SPASEQ query files, from their GPMs' GRAPH patterns."""
    pairs: set[tuple[str | None, str | None]] = set()
    for path in query_paths:
        text = read_query_file(path)
        try:
            compiled = compile_query(text)
        except QueryError as e:
            raise SpaseqError(f"--only-for {path}: {e}") from None
        for gpm in compiled.gpms.values():
            if gpm.algebra is None:             # rdflib could not analyse it: keep what it might use
                pairs.add((None, None))
            else:
                _graph_patterns(gpm.algebra, _OUTSIDE, pairs)
    return KeepFilter.of_pairs(pairs)


_OUTSIDE = object()     # not inside a GRAPH clause


def _graph_patterns(node, graph, pairs: set) -> None:
    """Adds the (graph, predicate) pairs of the triple patterns in GRAPH clauses under an
    rdflib algebra node (None: a variable graph or predicate).  FILTER EXISTS patterns stay
    parse trees in the algebra: GraphGraphPattern and TriplesBlock are their GRAPH and BGP."""
    from rdflib.plugins.sparql.parserutils import CompValue
    from rdflib.term import URIRef

    from ..rdflib_terms import unalias
    if isinstance(node, CompValue):
        if node.name in ("Graph", "GraphGraphPattern"):
            inner = unalias(str(node.term)) if isinstance(node.term, URIRef) else None
            _graph_patterns(node.p if node.name == "Graph" else node.graph, inner, pairs)
            return
        if node.name in ("BGP", "TriplesBlock") and graph is not _OUTSIDE:
            pairs.update((graph, p) for triple in node.triples for p in _path_iris(triple[1]))
            return
        for key, value in node.items():
            if not key.startswith("_"):
                _graph_patterns(value, graph, pairs)
    elif isinstance(node, (list, tuple)):
        for item in node:
            _graph_patterns(item, graph, pairs)


def _path_iris(term) -> list[str | None]:
    """The predicates a predicate position (an IRI, a variable, a property path as rdflib's
    Path or as a parse tree) can match: its IRIs, or [None] for any."""
    from rdflib.paths import AlternativePath, InvPath, MulPath, SequencePath
    from rdflib.plugins.sparql.parserutils import CompValue
    from rdflib.term import URIRef

    from ..rdflib_terms import unalias
    if isinstance(term, URIRef):
        return [unalias(str(term))]
    if isinstance(term, (SequencePath, AlternativePath)):
        return [iri for part in term.args for iri in _path_iris(part)]
    if isinstance(term, MulPath):
        return _path_iris(term.path)
    if isinstance(term, InvPath):
        return _path_iris(term.arg)
    if isinstance(term, CompValue) and term.name != "PathNegatedPropertySet":
        parts = [v for k, v in term.items() if not k.startswith("_")]
        found = [iri for part in parts for item in (part if isinstance(part, list) else [part])
                 if isinstance(item, (URIRef, CompValue)) for iri in _path_iris(item)]
        return found or [None]
    return [None]                   # a variable, or a negated property set


# -- stores --------------------------------------------------------------------------------

class OxigraphLoader:
    """Bulk-loads quads into an on-disk Oxigraph store (created when missing)."""

    def __init__(self, path: str):
        self.path = path
        self.description = f"Oxigraph store at {path}"
        if os.path.exists(path) and not os.path.isdir(path):
            raise SpaseqError(f"{path} is a file, not an Oxigraph store directory")
        if os.path.isdir(path) and os.listdir(path) and not os.path.exists(os.path.join(path, "CURRENT")):
            raise SpaseqError(f"{path} is a directory that is not an Oxigraph store; "
                              "give a new or an Oxigraph store directory")
        try:
            os.makedirs(path, exist_ok=True)
            self.store = ox.Store(path)
        except (OSError, RuntimeError) as e:       # (RuntimeError: RocksDB finds the store corrupt)
            if "lock" in str(e).lower():
                raise SpaseqError(f"the Oxigraph store at {path} is open for writing in another process "
                                  "(a running 'spaseq kb load' or another program); wait for it to finish "
                                  "(queries may read it meanwhile: --kb oxigraph:DIR opens it read-only)") \
                    from None
            raise SpaseqError(f"cannot open the Oxigraph store at {path} for writing: {e}") from None

    def add(self, quads: Iterable[ox.Quad]) -> None:
        try:
            self.store.bulk_extend(quads)
        except OSError as e:
            raise SpaseqError(f"cannot load into {self.path}: {e}") from None

    def add_nquads_file(self, path: str) -> None:
        """Load an N-Quads file known to be valid.  Not by ``bulk_load``: it renames blank nodes."""
        self.add(ox.parse(path=path, format=ox.RdfFormat.N_QUADS, lenient=True))

    def size(self) -> int:
        if next(self.store.quads_for_pattern(None, None, None, None), None) is None:
            return 0                                # counting costs a scan of the store
        return len(self.store)

    def close(self) -> None:
        try:
            self.store.flush()
        except OSError:
            pass
        del self.store


class RejectsFile:
    """Rejected lines, one per line (:meth:`Reject.describe`); the file is (re)written when
    a load rejects its first line."""

    def __init__(self, path: str):
        self.path = path
        self.count = 0
        self._file: IO[str] | None = None

    def add(self, source: str, reject: Reject) -> None:
        if self._file is None:
            try:
                self._file = open(self.path, "w", encoding="utf-8")
            except OSError as e:
                raise SpaseqError(f"cannot write the rejects file {self.path}: {e.strerror or e}") from None
        try:
            self._file.write(reject.describe(source) + "\n")
        except OSError as e:
            raise SpaseqError(f"cannot write the rejects file {self.path}: {e.strerror or e}") from None
        self.count += 1

    def close(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            try:
                file.close()
            except OSError as e:        # (a full disk shows when the buffer is written)
                raise SpaseqError(f"cannot write the rejects file {self.path}: {e.strerror or e}") from None


# -- kb load -------------------------------------------------------------------------------

@dataclass
class LoadStats:
    """What a load did: quads ``read`` from ``files``, lines ``rejected``, quads ``kept`` (by
    --only-for), ``added`` to the store; ``seconds`` per stage, in order."""
    files: int = 0
    read: int = 0
    rejected: int = 0
    kept: int = 0
    added: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def duplicates(self) -> int:
        """Kept quads the store holds once: repeated in the dumps or there before."""
        return self.kept - self.added


def load_in_process(files: list[str], loader, *, graph: str | None, keep: KeepFilter | None,
                    rejects: RejectsFile, say: Callable[[str], None]) -> LoadStats:
    """Parse the files here, one after the other, straight into the store."""
    stats = LoadStats(files=len(files))
    parsing = storing = 0.0
    for path in files:
        say(f"loading {path} ...")
        reader = RdfFileReader(path, graph, lambda n, s, path=path: say(f"  {path}: {_triples(n)} ({s:.1f} s)"),
                               keep=keep, on_reject=lambda reject, path=path: rejects.add(path, reject))
        file_started = time.monotonic()
        loader.add(reader)
        seconds = time.monotonic() - file_started
        parsing += reader.parse_seconds
        storing += seconds - reader.parse_seconds
        stats.read += reader.count
        stats.rejected += reader.rejected
        stats.kept += reader.kept
        extra = "".join([f", {reader.rejected:,} bad lines" if reader.rejected else "",
                         f", {reader.kept:,} kept" if keep is not None else ""])
        say(f"  {path}: {_triples(reader.count)}{extra} in {seconds:.2f} s{_rate(reader.count, seconds)}")
    stats.seconds.update({"read+parse": parsing, "store": storing})
    return stats


def _rate(count: int, seconds: float) -> str:
    return f" ({count / seconds:,.0f} triples/s)" if seconds > 0.5 and count > seconds else ""
