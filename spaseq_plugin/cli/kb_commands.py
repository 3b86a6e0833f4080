"""``spaseq kb load`` and ``spaseq kb query``: fill a KB store, look into it.

::

    spaseq kb load kb.trig people.nt --into oxigraph:kb-store
    spaseq kb load sensors.ttl --into oxigraph:kb-store --graph http://kb/sensors
    spaseq kb load 'dumps/*.nt.gz' more-dumps/ dump.nq.bz2 --into oxigraph:kb-store
    spaseq kb load dumps/ --into oxigraph:kb-store --only-for q1.rq q2.rq
    spaseq kb load dumps/ --into oxigraph:kb-store --spark --spark-master 'local[2]'
    spaseq kb load kb.trig --into rdflib:Oxigraph:kb-store
    spaseq kb load kb.trig --into rdflib:BerkeleyDB:kb-bdb       (where berkeleydb is installed)
    spaseq kb query oxigraph:kb-store 'SELECT ?g (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } } GROUP BY ?g'
    spaseq kb query sparql:http://localhost:8890/sparql 'SELECT ...' --format json

``--into`` takes a ``--kb``-style store spec.  ``oxigraph:DIR`` (and
``rdflib:Oxigraph:DIR``, the same on-disk format) creates or opens a writable
Oxigraph store and bulk-loads; other persistent rdflib stores are written
through rdflib.  Inputs are files (plain, ``.gz`` or ``.bz2``), directories
(their RDF files, recursively) and globs.  N-Triples and Turtle go to the
default graph, or to ``--graph IRI``; TriG and N-Quads keep their graph names
(GRAPH clauses see named graphs only: semantics.md section 2).

N-Triples and N-Quads are parsed in chunks of lines: a bad line is rejected
(``FILE:LINE:COLUMN: MESSAGE<TAB>LINE`` in the ``--rejects`` file, by default
the store's path + ``.rejects``), counted, and the load goes on.  Turtle, TriG
and RDF/XML cannot be resumed after a syntax error (what follows depends on
what came before): an error in one stops the load, naming file, line and
column.  Blank node labels are file-scoped: each is named after a hash of its
file's absolute path and its label, so loading the same files again (or with
``--spark``) gives the same store content.  ``--only-for QUERY...`` keeps only
the quads the queries' GRAPH patterns can match.  The reading, parsing and
filtering are :mod:`spaseq_plugin.stores.loading`'s; ``--spark`` parses with
Spark (:mod:`spaseq_plugin.spark.load`).  Progress and a summary
(triples read, rejected, kept, duplicates, time per stage) go to stderr.

``kb query`` opens the store as ``--kb`` would (read-only) and prints the
answer as a table, or with ``--format json|xml|csv|tsv`` through pyoxigraph's
result serialisers; CONSTRUCT and DESCRIBE answers print as N-Triples.

:func:`add_kb_parser` wires these into ``spaseq``'s subcommands.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import IO

import pyoxigraph as ox

from ..errors import LimitError, QueryError, SpaseqError, UsageError, as_usage_error
from ..evaluators.protocol import term_text
from ..kb import KnowledgeBase, store_scheme
from ..language.limits import (DEFAULT_MAX_NESTING, DEFAULT_SERVICE_TIMEOUT, MAX_NESTING_CEILING, QueryLimits,
                               check_nesting, read_query_file)
from ..stores.loading import (QUAD_FORMATS, OxigraphLoader, RejectsFile, _rate, expand_inputs,
                              keep_filter_for, load_in_process)
from ..spark.session import require_pyspark
from ..streams.reader import DEFAULT_MAX_TERM_DEPTH, MOST_TERM_DEPTH
from .arguments import add_service_flags, byte_size, whole_number
from .paths import check_writes
from ..stores.oxigraph import rdf_format
from ..stores.sparql_endpoint import EndpointHttpError, query_form, serialize_solutions
from ..waits import NoAnswer, within

RESULT_FORMATS = {
    "json": ox.QueryResultsFormat.JSON, "xml": ox.QueryResultsFormat.XML,
    "csv": ox.QueryResultsFormat.CSV, "tsv": ox.QueryResultsFormat.TSV,
}


def add_kb_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``kb`` (with ``load`` and ``query``) to ``spaseq``'s subcommands."""
    kb = subparsers.add_parser("kb", help="load files into a KB store, or query one",
                               description="Manage knowledge-base stores for --kb.")
    kb.set_defaults(func=lambda args: _help(kb))
    sub = kb.add_subparsers(dest="kb_command")

    load = sub.add_parser(
        "load", help="bulk-load RDF dumps into a store",
        description="Load RDF files (.nt .nq .trig .ttl .rdf, plain, .gz or .bz2; directories and globs "
                    "too) into a KB store. TriG and N-Quads keep their graph names; N-Triples and Turtle "
                    "go to the default graph or to --graph IRI (GRAPH clauses only see named graphs). "
                    "Bad N-Triples/N-Quads lines are rejected and the load goes on; a syntax error in "
                    "Turtle, TriG or RDF/XML stops it.")
    load.add_argument("files", nargs="+", metavar="DUMP", help="RDF files, directories or globs")
    load.add_argument("--into", required=True, metavar="STORE",
                      help="the store: oxigraph:DIR, rdflib:Oxigraph:DIR, rdflib:BerkeleyDB:DIR, ...")
    load.add_argument("--graph", metavar="IRI",
                      help="put the triples of N-Triples/Turtle/RDF-XML files into this named graph")
    load.add_argument("--only-for", nargs="+", action="extend", metavar="QUERY",
                      help="keep only the quads these SPASEQ query files' GRAPH patterns can match")
    load.add_argument("--rejects", metavar="FILE",
                      help="where rejected lines go (default: the store's path + .rejects)")
    load.add_argument("--spark", action="store_true",
                      help="parse and deduplicate with Spark, then bulk-load the result")
    load.add_argument("--spark-master", metavar="URL",
                      help="Spark master (default: $SPARK_MASTER, else local[*])")
    load.add_argument("--max-statement", metavar="SIZE", type=byte_size,
                      help="reject an N-Triples or N-Quads line longer than this, skipping it as it streams by "
                           "(e.g. 64MiB; default 32MiB)")
    load.add_argument("--max-term-depth", metavar="N", type=whole_number("levels", MOST_TERM_DEPTH),
                      help="reject a line (N-Triples, N-Quads) or refuse a file (Turtle, TriG) nesting RDF 1.2 "
                           f"triple terms <<( ... )>> more than N deep (default {DEFAULT_MAX_TERM_DEPTH}, "
                           f"at most {MOST_TERM_DEPTH}: the RDF parser recurses into them)")
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
    query.add_argument("--max-nesting", type=int, default=DEFAULT_MAX_NESTING, metavar="N",
                       help="refuse a query nested deeper than N levels, as spaseq run does: the SPARQL "
                            f"parsers recurse (default {DEFAULT_MAX_NESTING}; at most {MAX_NESTING_CEILING})")
    add_service_flags(query, "the query")
    query.set_defaults(func=cmd_query)
    from ..spark.materialize import add_materialize_parser      # (it imports pyspark only when run)
    add_materialize_parser(sub)
    return kb


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def open_loader(spec: str):
    """The loader for ``--into STORE``: ``add(quads)``, ``add_nquads_file(path)``, ``size()``, ``close()``."""
    scheme = store_scheme(spec)
    if scheme is None:
        head, sep, _ = spec.partition(":")
        if sep and len(head) > 1 and "/" not in head:
            raise UsageError(f"--into {spec}: no KB store is called {head!r} "
                             "(kb load writes to oxigraph:DIR and rdflib:NAME:DIR)")
        raise UsageError(f"--into {spec}: give a store, e.g. oxigraph:{spec} (an on-disk Oxigraph store)")
    location = spec.split(":", 1)[1]
    if scheme == "oxigraph":
        if not location:
            raise UsageError("--into oxigraph: needs a directory: oxigraph:DIR")
        return OxigraphLoader(location)
    if scheme == "rdflib":
        from ..stores.rdflib_store import RdflibTarget, open_for_load
        loader = open_for_load(location)
        return loader if isinstance(loader, OxigraphLoader) else RdflibTarget(loader)
    if scheme == "sparql":
        raise UsageError("--into sparql:...: spaseq kb load does not write to SPARQL endpoints: use the "
                         "server's own loader (Virtuoso: ld_dir and rdf_loader_run, or SPARQL UPDATE)")
    raise UsageError(f"--into {spec}: spaseq kb load cannot write to {scheme}: stores "
                     "(it loads oxigraph: and rdflib: stores)")


def default_rejects_path(spec: str) -> str:
    """``oxigraph:DIR`` and ``rdflib:NAME:DIR`` -> ``DIR.rejects``, beside the store."""
    location = spec.split(":", 1)[1]
    if store_scheme(spec) == "rdflib":
        location = location.partition(":")[2] or location
    return location.rstrip("/\\") + ".rejects"


def cmd_load(args, err: IO[str] | None = None) -> int:
    err = err or sys.stderr
    quiet = getattr(args, "quiet", False)

    def say(text: str) -> None:
        if not quiet:
            print(f"spaseq: {text}", file=err, flush=True)
    spark = getattr(args, "spark", False)
    if spark:
        for flag, value, default in (("--max-term-depth", getattr(args, "max_term_depth", None),
                                      DEFAULT_MAX_TERM_DEPTH), ("--max-statement", getattr(args, "max_statement", None),
                                                                "32 MiB")):
            if value is not None:
                raise UsageError(f"{flag}: for loading without --spark (its workers keep the default, {default})")
        require_pyspark("spaseq kb load --spark")
    with as_usage_error(""):                # (the messages name the DUMP)
        files = expand_inputs(args.files)
    graph = args.graph.strip("<>") if args.graph is not None else None
    if graph is not None:
        with as_usage_error(f"--graph {args.graph}"):
            if not graph.strip():
                raise UsageError("give the IRI of a graph (without --graph, triples go to the default graph)")
            ox.NamedNode(graph)         # (an IRI pyoxigraph refuses, named here rather than mid-load)
        for path in files:
            if rdf_format(path) in QUAD_FORMATS:
                raise UsageError(f"--graph {args.graph}: {path} names its own graphs "
                                 "(--graph puts the triples of N-Triples and Turtle files into one graph)")
    if getattr(args, "rejects", None):        # (the default, STORE.rejects, is no RDF file)
        check_writes([(f"--rejects {args.rejects}", args.rejects)], [(f"the dump {path}", path) for path in files]
                     + [(f"--only-for {query}", query) for query in getattr(args, "only_for", None) or ()])
    keep = None
    if getattr(args, "only_for", None):
        with as_usage_error("--only-for"):
            keep = keep_filter_for(args.only_for)
        say(f"--only-for keeps {keep.describe()}")
    with as_usage_error(f"--into {args.into}"):
        loader = open_loader(args.into)
    rejects = RejectsFile(getattr(args, "rejects", None) or default_rejects_path(args.into))
    started = time.monotonic()
    try:
        size_before = loader.size()
        # a file that cannot be read stops the load: the user's input, so a usage error
        with as_usage_error(""):
            if spark:
                from ..spark.load import spark_load
                stats = spark_load(files, loader, graph=graph, keep=keep, rejects=rejects,
                                   master=getattr(args, "spark_master", None), say=say,
                                   work_dir=os.path.dirname(os.path.abspath(default_rejects_path(args.into))))
            else:
                stats = load_in_process(files, loader, graph=graph, keep=keep, rejects=rejects, say=say)
        counting = time.monotonic()
        stats.added = loader.size() - size_before
        stats.seconds["count"] = time.monotonic() - counting
    finally:
        loader.close()
        rejects.close()
    seconds = time.monotonic() - started
    where = f" (graph <{graph}>)" if graph else ""
    say(f"{args.into}{where}: {stats.added:,} new triple{'s' * (stats.added != 1)} from {stats.files} "
        f"file{'s' * (stats.files != 1)} in {seconds:.2f} s{_rate(stats.read, seconds)}")
    counts = [f"{stats.read:,} read"]
    if stats.rejected:
        counts.append(f"{stats.rejected:,} bad line{'s' * (stats.rejected != 1)} rejected (see {rejects.path})")
    counts.append(f"{stats.kept:,} kept" + (" by --only-for" if keep is not None else ""))
    counts.append(f"{stats.duplicates:,} duplicate{'s' * (stats.duplicates != 1)} (in the files or "
                  "already in the store)")
    counts.append(f"{stats.added:,} new")
    say("  triples: " + ", ".join(counts))
    say("  time: " + ", ".join(f"{stage} {s:.2f} s" for stage, s in stats.seconds.items()))
    return 0

# -- kb query ------------------------------------------------------------------------------


def read_query_text(text: str) -> str:
    if text.startswith("@"):
        return read_query_file(text[1:])
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
            raise QueryError(f"SPARQL syntax error: {e}") from None
        except (OSError, ValueError, RuntimeError) as e:
            raise SpaseqError(f"the query failed: {e}") from None
    else:
        rows = list(kb.select(sparql))
        names = list(dict.fromkeys(name for row in rows for name in row))
        return "solutions", [ox.Variable(n) for n in names], rows
    if isinstance(result, (bool, ox.QueryBoolean)):
        return "boolean", bool(result)
    if isinstance(result, tuple):
        return "solutions", in_query_order(sparql, result[0]), result[1]
    if isinstance(result, (list, ox.QueryTriples)):
        return "graph", list(result)
    return "solutions", in_query_order(sparql, list(result.variables)), result


def read_answer(kb: KnowledgeBase, sparql: str):
    """:func:`run_query`'s answer read whole: pyoxigraph's solutions are read as
    they are iterated, and SERVICE requests sent then."""
    kind, *payload = run_query(kb, sparql)
    if kind == "solutions":
        variables, rows = payload
        payload = [variables, [{v.value: row[v] for v in variables if row[v] is not None} for row in rows]]
    return kind, *payload


_SELECT_STAR = re.compile(r"\bSELECT\s+(?:DISTINCT\s+|REDUCED\s+)?\*", re.IGNORECASE)
# what may hold a '?' or '$' that is not a variable: IRIs, strings, comments
_NOT_VARIABLES = re.compile(r"<[^<>\s]*>|\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''|"
                            r"\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|#[^\n]*")
_VARIABLE = re.compile(r"[?$]([A-Za-z0-9_\u00B7-\uFFFF]+)")


def in_query_order(sparql: str, variables: list) -> list:
    """``SELECT *``'s variables in the order they first appear in the query (pyoxigraph
    sorts them by name); an explicit projection keeps its own order."""
    text = _NOT_VARIABLES.sub(" ", sparql)
    if not _SELECT_STAR.search(text):
        return variables
    order: dict[str, int] = {}
    for match in _VARIABLE.finditer(text):
        order.setdefault(match.group(1), len(order))
    return sorted(variables, key=lambda v: order.get(v.value, len(order)))


def cmd_query(args, out: IO[str] | None = None) -> int:
    out = out or sys.stdout
    sparql = read_query_text(args.sparql)
    nesting = getattr(args, "max_nesting", DEFAULT_MAX_NESTING)
    allow_service = getattr(args, "allow_service", False)
    timeout = getattr(args, "service_timeout", DEFAULT_SERVICE_TIMEOUT)
    with as_usage_error("--max-nesting"):
        QueryLimits(max_nesting=nesting, allow_service=allow_service, service_timeout=timeout)
    service = check_nesting(sparql, nesting)     # (pyoxigraph's parser overflowed its stack: SIGSEGV)
    if service is not None and not allow_service:
        raise QueryError("SERVICE sends requests to another SPARQL endpoint (allow it with --allow-service)",
                         service.line, service.column)
    fmt = getattr(args, "format", "table")
    form = query_form(sparql)
    if fmt != "table" and form in ("CONSTRUCT", "DESCRIBE"):
        raise UsageError(f"--format {fmt}: the answer of a {form} query is a graph, which prints as N-Triples "
                         "(leave --format out)")
    with as_usage_error("spaseq kb query", (args.store,)):
        kb = KnowledgeBase.from_specs([args.store])
    try:
        try:
            if service is None:
                kind, *payload = run_query(kb, sparql)
            else:           # (pyoxigraph's and rdflib's SERVICE requests have no time limit)
                kind, *payload = within(timeout, lambda: read_answer(kb, sparql), "spaseq kb query SERVICE")
        except NoAnswer:
            raise LimitError(f"the query's SERVICE did not answer within {timeout:g} s "
                             "(--service-timeout)") from None
        except EndpointHttpError as e:
            if e.status == 400:             # Bad Request: the endpoint could not read the query
                raise QueryError(str(e)) from None
            raise
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
    return "" if term is None else term_text(term)


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
