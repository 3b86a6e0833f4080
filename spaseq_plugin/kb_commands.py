"""``spaseq kb load`` and ``spaseq kb query``: fill a KB store, look into it.

::

    spaseq kb load kb.trig people.nt --into oxigraph:kb-store
    spaseq kb load sensors.ttl --into oxigraph:kb-store --graph http://kb/sensors
    spaseq kb load kb.trig --into rdflib:Oxigraph:kb-store
    spaseq kb load kb.trig --into rdflib:BerkeleyDB:kb-bdb       (where berkeleydb is installed)
    spaseq kb query oxigraph:kb-store 'SELECT ?g (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } } GROUP BY ?g'
    spaseq kb query sparql:http://localhost:8890/sparql 'SELECT ...' --format json

``--into`` takes a ``--kb``-style store spec.  ``oxigraph:DIR`` (and
``rdflib:Oxigraph:DIR``, the same on-disk format) creates or opens a writable
Oxigraph store and bulk-loads; other persistent rdflib stores are written
through rdflib.  N-Triples and Turtle files go to the default graph, or to
``--graph IRI``; TriG and N-Quads keep their graph names (GRAPH clauses see
named graphs only: semantics.md section 2).  Progress and a summary (triples
loaded, time) go to stderr.  A bad file is an error naming the file and line.

``kb query`` opens the store as ``--kb`` would (read-only) and prints the
answer as a table, or with ``--format json|xml|csv|tsv`` through pyoxigraph's
result serialisers; CONSTRUCT and DESCRIBE answers print as N-Triples.

The lead wires :func:`add_kb_parser` into ``spaseq``'s subcommands.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import sys
import time
from typing import IO, Callable

import pyoxigraph as ox

from .errors import SpaseqError
from .kb import KnowledgeBase, _scheme

RESULT_FORMATS = {
    "json": ox.QueryResultsFormat.JSON, "xml": ox.QueryResultsFormat.XML,
    "csv": ox.QueryResultsFormat.CSV, "tsv": ox.QueryResultsFormat.TSV,
}
PROGRESS_EVERY = 1_000_000


def add_kb_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``kb`` (with ``load`` and ``query``) to ``spaseq``'s subcommands."""
    kb = subparsers.add_parser("kb", help="load files into a KB store, or query one",
                               description="Manage knowledge-base stores for --kb.")
    kb.set_defaults(func=lambda args: _help(kb))
    sub = kb.add_subparsers(dest="kb_command")

    load = sub.add_parser(
        "load", help="bulk-load RDF files into a store",
        description="Load RDF files (.trig .nq .nt .ttl .rdf, optionally .gz) into a KB store. "
                    "TriG and N-Quads keep their graph names; N-Triples and Turtle go to the "
                    "default graph or to --graph IRI (GRAPH clauses only see named graphs).")
    load.add_argument("files", nargs="+", metavar="FILE", help="RDF files to load")
    load.add_argument("--into", required=True, metavar="STORE",
                      help="the store: oxigraph:DIR, rdflib:Oxigraph:DIR, rdflib:BerkeleyDB:DIR, ...")
    load.add_argument("--graph", metavar="IRI",
                      help="put the triples of N-Triples/Turtle/RDF-XML files into this named graph")
    load.add_argument("--quiet", "-q", action="store_true", help="no progress, only errors")
    load.set_defaults(func=cmd_load)

    query = sub.add_parser(
        "query", help="run a SPARQL query on a store",
        description="Run a SPARQL query on a KB store (any --kb value) and print the answer.")
    query.add_argument("store", metavar="STORE", help="a --kb value: oxigraph:DIR, rdflib:..., "
                                                       "sparql:URL, or RDF files")
    query.add_argument("sparql", metavar="SPARQL", help="the query text, or @FILE to read it from a file")
    query.add_argument("--format", "-f", choices=["table", *RESULT_FORMATS], default="table",
                       help="output format (default: table)")
    query.set_defaults(func=cmd_query)
    return kb


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


# -- kb load ------------------------------------------------------------------------------

class OxigraphLoader:
    """Bulk-loads files into an on-disk Oxigraph store (created when missing)."""

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
        except OSError as e:
            if "lock" in str(e).lower():
                raise SpaseqError(f"the Oxigraph store at {path} is open for writing in another process "
                                  "(a running 'spaseq kb load' or another program); wait for it to finish "
                                  "(queries may read it meanwhile: --kb oxigraph:DIR opens it read-only)") \
                    from None
            raise SpaseqError(f"cannot open the Oxigraph store at {path} for writing: {e}") from None

    def load(self, path: str, graph: str | None = None,
             progress: Callable[[int, float], None] | None = None) -> int:
        reader = RdfFileReader(path, graph, progress)
        try:
            self.store.bulk_extend(reader)
        except OSError as e:
            raise SpaseqError(f"{path}: cannot load into {self.path}: {e}") from None
        return reader.count

    def close(self) -> None:
        try:
            self.store.flush()
        except OSError:
            pass
        del self.store


class RdfFileReader:
    """The quads of one RDF file (optionally gzipped), by pyoxigraph's parsers: N-Triples,
    Turtle and RDF/XML into the default graph or ``graph``; TriG and N-Quads with their own
    graphs.  Blank nodes are renamed apart per file.  ``count`` counts the quads read; a
    syntax error is a SpaseqError naming file, line and column."""

    def __init__(self, path: str, graph: str | None = None,
                 progress: Callable[[int, float], None] | None = None, *, atomic: bool = False):
        from .stores.oxigraph import rdf_format
        self.format = rdf_format(path)
        if graph and self.format in (ox.RdfFormat.TRIG, ox.RdfFormat.N_QUADS):
            raise SpaseqError(f"{path}: --graph puts triples into one graph; this file names its own graphs")
        if not os.path.isfile(path):
            raise SpaseqError(f"{path}: no such file" if not os.path.isdir(path)
                              else f"{path} is a directory: give the RDF files in it")
        self.path = path
        self.graph = ox.NamedNode(graph) if graph else None
        self.progress = progress
        self.atomic = atomic            # the caller adds nothing from a file with an error
        self.count = 0

    def __iter__(self):
        started = time.monotonic()
        target, progress = self.graph, self.progress
        try:
            opener = gzip.open if self.path.endswith(".gz") else open
            with opener(self.path, "rb") as stream:
                for quad in ox.parse(stream, self.format, rename_blank_nodes=True):
                    if target is not None:
                        quad = ox.Quad(quad.subject, quad.predicate, quad.object, target)
                    self.count += 1
                    if progress and self.count % PROGRESS_EVERY == 0:
                        progress(self.count, time.monotonic() - started)
                    yield quad
        except SyntaxError as e:
            loaded = "nothing was loaded" if self.atomic or not self.count else \
                f"the {_triples(self.count)} before it were loaded"
            raise SpaseqError(f"{self.path}:{_where(e)} {_syntax_message(e)} ({loaded})") from None
        except (OSError, EOFError, ValueError) as e:     # unreadable, or a broken .gz
            raise SpaseqError(f"{self.path}: cannot read it: {e}") from None


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


def open_loader(spec: str):
    """The loader for ``--into STORE``."""
    scheme = _scheme(spec)
    if scheme is None:
        raise SpaseqError(f"--into {spec}: give a store, e.g. oxigraph:{spec} (an on-disk Oxigraph store)")
    location = spec.split(":", 1)[1]
    if scheme == "oxigraph":
        if not location:
            raise SpaseqError("--into oxigraph: needs a directory: oxigraph:DIR")
        return OxigraphLoader(location)
    if scheme == "rdflib":
        from .stores.rdflib_store import open_for_load
        return open_for_load(location)
    if scheme == "sparql":
        raise SpaseqError("spaseq kb load does not write to SPARQL endpoints: use the server's own loader "
                          "(Virtuoso: ld_dir and rdf_loader_run, or SPARQL UPDATE)")
    from .plugins import kb_store
    kb_store(scheme)            # an unknown scheme: the registry's error lists the known ones
    raise SpaseqError(f"spaseq kb load cannot write to {scheme}: stores (it loads oxigraph: and rdflib: stores)")


def cmd_load(args, err: IO[str] | None = None) -> int:
    err = err or sys.stderr
    quiet = getattr(args, "quiet", False)
    for path in args.files:
        if not os.path.isfile(path):
            raise SpaseqError(f"{path}: no such file" if not os.path.isdir(path)
                              else f"{path} is a directory: give the RDF files in it")
    graph = args.graph.strip("<>") if args.graph else None
    loader = open_loader(args.into)
    started = time.monotonic()
    total = 0
    try:
        for path in args.files:
            if not quiet:
                print(f"spaseq: loading {path} ...", file=err, flush=True)

            def progress(n, seconds, path=path):
                if not quiet:
                    print(f"spaseq:   {path}: {_triples(n)} ({seconds:.1f} s)", file=err, flush=True)
            file_started = time.monotonic()
            count = loader.load(path, graph, progress)
            total += count
            if not quiet:
                seconds = time.monotonic() - file_started
                print(f"spaseq:   {path}: {_triples(count)} in {seconds:.2f} s{_rate(count, seconds)}",
                      file=err, flush=True)
    finally:
        loader.close()
    seconds = time.monotonic() - started
    where = f" (graph <{graph}>)" if graph else ""
    if not quiet:
        print(f"spaseq: loaded {_triples(total)} from {len(args.files)} file{'s' * (len(args.files) != 1)} "
              f"into {args.into}{where} in {seconds:.2f} s{_rate(total, seconds)}", file=err, flush=True)
    return 0


def _rate(count: int, seconds: float) -> str:
    return f" ({count / seconds:,.0f} triples/s)" if seconds > 0.5 and count else ""


# -- kb query ------------------------------------------------------------------------------

def read_query_text(text: str) -> str:
    if text.startswith("@"):
        path = text[1:]
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except OSError as e:
            raise SpaseqError(f"cannot read the query file {path}: {e.strerror or e}") from None
    return text


def run_query(kb: KnowledgeBase, sparql: str):
    """A query's answer: ``("solutions", variables, rows_or_QuerySolutions)``,
    ``("boolean", bool)`` or ``("graph", triples)``."""
    native = getattr(kb, "query_results", None)
    store = getattr(kb, "store", None)
    if native is not None:
        result = native(sparql)
    elif isinstance(store, ox.Store):
        try:
            result = store.query(sparql)
        except SyntaxError as e:
            raise SpaseqError(f"SPARQL syntax error: {e}") from None
        except (OSError, ValueError, RuntimeError) as e:
            raise SpaseqError(f"the query failed: {e}") from None
    else:
        rows = list(kb.select(sparql))
        names = list(dict.fromkeys(name for row in rows for name in row))
        return "solutions", [ox.Variable(n) for n in names], rows
    if isinstance(result, (bool, ox.QueryBoolean)):
        return "boolean", bool(result)
    if isinstance(result, tuple):
        return "solutions", result[0], result[1]
    if isinstance(result, (list, ox.QueryTriples)):
        return "graph", list(result)
    return "solutions", list(result.variables), result


def cmd_query(args, out: IO[str] | None = None) -> int:
    out = out or sys.stdout
    sparql = read_query_text(args.sparql)
    kb = KnowledgeBase.from_specs([args.store])
    try:
        kind, *payload = run_query(kb, sparql)
        fmt = getattr(args, "format", "table")
        if kind == "boolean":
            value = payload[0]
            if fmt == "table":
                print("true" if value else "false", file=out)
            else:
                boolean = ox.parse_query_results(b'{"head":{},"boolean":%s}' % (b"true" if value else b"false"),
                                                 ox.QueryResultsFormat.JSON)
                _write_bytes(out, boolean.serialize(format=RESULT_FORMATS[fmt]))
            return 0
        if kind == "graph":
            _write_bytes(out, ox.serialize(payload[0], format=ox.RdfFormat.N_TRIPLES) or b"")
            print(f"spaseq: {len(payload[0])} triples", file=sys.stderr)
            return 0
        variables, rows = payload
        if fmt == "table":
            count = write_table(out, variables, rows)
            print(f"spaseq: {count} solution{'s' * (count != 1)}", file=sys.stderr)
        else:
            _write_bytes(out, serialize(variables, rows, RESULT_FORMATS[fmt]))
        return 0
    finally:
        kb.close()


def serialize(variables, rows, fmt: ox.QueryResultsFormat) -> bytes:
    """Solutions in a SPARQL results format, by pyoxigraph's serialisers."""
    if isinstance(rows, ox.QuerySolutions) or hasattr(rows, "serialize"):
        try:
            return rows.serialize(format=fmt)
        except (OSError, ValueError) as e:
            raise SpaseqError(f"the query failed: {e}") from None
    from .stores.sparql_endpoint import serialize_solutions
    return serialize_solutions(variables, list(rows), None, fmt)


def write_table(out: IO[str], variables, rows) -> int:
    """An aligned text table of solutions (terms in N-Triples syntax, unbound empty)."""
    names = [v.value for v in variables]
    table = []
    for row in rows:
        if isinstance(row, dict):
            table.append([_cell(row.get(n)) for n in names])
        else:
            table.append([_cell(row[n]) for n in names])
    widths = [max([len(n) + 1] + [len(r[i]) for r in table]) for i, n in enumerate(names)]
    if names:
        print(" | ".join(("?" + n).ljust(w) for n, w in zip(names, widths)).rstrip(), file=out)
        print("-+-".join("-" * w for w in widths), file=out)
    for r in table:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip(), file=out)
    return len(table)


def _cell(term) -> str:
    return "" if term is None else str(term)


def _write_bytes(out: IO[str], data: bytes) -> None:
    buffer = getattr(out, "buffer", None)
    if buffer is not None:
        out.flush()
        buffer.write(data)
        if data and not data.endswith(b"\n"):
            buffer.write(b"\n")
        buffer.flush()
    else:
        text = data.decode("utf-8")
        out.write(text if not text or text.endswith("\n") else text + "\n")
