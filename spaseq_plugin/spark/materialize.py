"""``spaseq kb materialize``: a query's GRAPH blocks, evaluated over KB dumps with Spark.

::

    spaseq kb materialize query.rq --dump kb.nq.gz --out kb-blocks
    spaseq run query.rq --stream S1=power.trig --kb materialized:kb-blocks
    spaseq kb materialize query.rq --dump a.nq b.nt.gz --out kb-blocks --spark-master spark://host:7077

Spark reads the dumps (N-Quads or N-Triples, plain or gzipped, one
statement a line; N-Triples triples and N-Quads without a graph go to the
default graph, which GRAPH clauses never see), keeps the quads whose graph
and predicate some block names, and evaluates each ``GRAPH <iri> { BGP }``
block of the query's GPMs as DataFrame joins: one filtered projection per
triple pattern (a variable repeated in a pattern is an equality), joined on
shared variables in a connected order, distinct.  Each block's solutions go
to ``OUT/blocks/N/`` as Spark text part files of tab-separated N-Triples
terms; ``OUT/manifest.json`` (stores/materialized.py describes it) says
which block is where.  ``--kb materialized:OUT`` then answers the run's
GRAPH clauses from these tables alone.

Terms are compared as Oxigraph stores them, so the answers are the ones a
store loaded from the same dumps gives: literals of XSD types in canonical
form ("01"^^xsd:integer is "1"), language tags in lower case, escapes
resolved (those rows are rewritten by pyoxigraph in the executors; the
others stay in the JVM).  Blank nodes are renamed apart per dump
(``_:b1`` of the second dump is ``_:d1_b1``).

A block that is not a basic graph pattern with constant predicates on a
constant graph (OPTIONAL or FILTER inside it, ``GRAPH ?g``, a property path)
cannot be materialised: the command says which GPM and why, exit status 2.
With a cluster master, OUT must be on a file system the driver and the
executors share.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import shutil
import sys
import time
from typing import IO

from ..errors import QueryError, SpaseqError, as_usage_error
from ..language.limits import read_query_file
from ..stores.materialized import FORMAT, MANIFEST, GraphBlock, graph_blocks
from .session import require_pyspark

DUMP_SUFFIXES = (".nq", ".nt", ".nq.gz", ".nt.gz")

# One N-Triples/N-Quads statement, in Java regex syntax (possessive loops: long literals
# must not overflow the matcher's stack).  Groups: subject, predicate, object, graph.
_IRI = r'<[^<>"{}|^`\\\x00-\x20]*+(?:\\(?:u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8})[^<>"{}|^`\\\x00-\x20]*+)*+>'
_BNODE = r'_:[^\s<>"]*[^\s<>".]'
_LITERAL = (r'"[^"\\\r\n]*+(?:\\(?:[tbnrf"\'\\]|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8})[^"\\\r\n]*+)*+"'
            r'(?:@[a-zA-Z]++(?:-[a-zA-Z0-9]++)*+|\^\^' + _IRI + ')?')
STATEMENT = (rf'^[ \t]*({_IRI}|{_BNODE})[ \t]*({_IRI})[ \t]*({_IRI}|{_BNODE}|{_LITERAL})'
             rf'[ \t]*({_IRI}|{_BNODE})?[ \t]*\.[ \t]*(?:#.*)?$')
NOTHING = r'^[ \t]*(?:#.*)?$'             # blank lines and comments
# Terms Oxigraph may store differently from their text: escapes and control characters
# in any term; language tags with capitals and XSD-typed literals (non-canonical forms).
ESCAPES = r'\\|[\x00-\x1F\x7F]'
OBJECT_TO_CANONICALISE = r'"@[a-zA-Z0-9-]*[A-Z][a-zA-Z0-9-]*$|"\^\^<http://www\.w3\.org/2001/XMLSchema#(?!string>)'


def add_materialize_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``materialize`` to the ``kb`` subcommands."""
    parser = subparsers.add_parser(
        "materialize", help="evaluate a query's GRAPH blocks over KB dumps with Spark",
        description="Evaluate every GRAPH <iri> { ... } block of a query's GPMs over N-Quads/N-Triples "
                    "dumps (optionally .gz) with Spark, and write the solutions and a manifest to DIR "
                    "for 'spaseq run --kb materialized:DIR'.")
    parser.add_argument("query", metavar="QUERY", help="the SPASEQ query file")
    parser.add_argument("--dump", required=True, nargs="+", action="extend", metavar="DUMP",
                        help="KB dumps: .nq or .nt, optionally .gz (N-Triples go to the default graph, "
                             "which GRAPH clauses never see)")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the block tables and the manifest go")
    parser.add_argument("--spark-master", metavar="URL",
                        help="Spark master (default: SPARK_MASTER, else local[*])")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress, only errors")
    parser.set_defaults(func=cmd_materialize)
    return parser


def cmd_materialize(args, err: IO[str] | None = None) -> int:
    err = err or sys.stderr

    def say(text: str) -> None:
        if not args.quiet:
            print(f"spaseq: {text}", file=err, flush=True)
    text = read_query_file(args.query)
    with as_usage_error(""):            # bad dumps, an --out that is not ours: the messages name them
        manifest = materialize(text, args.dump, args.out, args.spark_master, say, query_name=args.query)
    tables = len(manifest["blocks"])
    say(f"wrote {tables} block table{'s' * (tables != 1)} and {MANIFEST} to {args.out} "
        f"in {manifest['seconds']:.1f} s")
    return 0


def materialize(query: str, dumps: list[str], out: str, master: str | None = None,
                say=lambda text: None, query_name: str = "") -> dict:
    """Write the tables of ``query``'s GRAPH blocks over ``dumps`` into ``out``; the manifest."""
    require_pyspark("spaseq kb materialize")
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    from ..language.compiler import compile_query
    from .session import spark_session

    started = time.monotonic()
    blocks = _query_blocks(compile_query(query).gpms.values())
    for path in dumps:
        _check_dump(path)
    _prepare_out(out)
    spark = spark_session(master)
    try:
        quads, per_graph = _relevant_quads(spark, dumps, list(blocks))
        say(f"{sum(per_graph.values()):,} quads of the dumps are in the blocks' graphs and predicates")
        graphs = sorted(_present_graphs(spark, dumps, set(per_graph), {b.graph for b in blocks}))
        entries = []
        for number, (block, gpms) in enumerate(blocks.items()):
            block_started = time.monotonic()
            folder = os.path.join("blocks", str(number))
            _block_frame(quads, block).write.mode("overwrite").text(os.path.join(out, folder))
            files = sorted(os.path.relpath(p, out) for p in glob.glob(os.path.join(out, folder, "part-*")))
            rows = sum(_count_lines(os.path.join(out, f)) for f in files)
            entries.append({"graph": block.graph, "triples": [list(t) for t in block.triples],
                            "text": block.text, "gpms": gpms, "columns": block.columns,
                            "files": files, "rows": rows})
            say(f"GPM {', '.join(gpms)}: {block.text}: {rows:,} solutions "
                f"({time.monotonic() - block_started:.1f} s)")
        quads.unpersist()
    except (PySparkException, Py4JError) as e:
        raise SpaseqError(f"Spark failed: {_spark_message(e)}") from None
    manifest = {"format": FORMAT, "query": query_name, "dumps": [os.path.abspath(d) for d in dumps],
                "graphs": graphs, "blocks": entries, "seconds": round(time.monotonic() - started, 3)}
    # written last, and whole: a DIR without it is no materialised KB
    partial = os.path.join(out, MANIFEST + ".partial")
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
    os.replace(partial, os.path.join(out, MANIFEST))
    return manifest


def _query_blocks(gpms) -> dict[GraphBlock, list[str]]:
    """Distinct blocks of the query -> the GPMs that have them."""
    blocks: dict[GraphBlock, list[str]] = {}
    keys: dict[tuple, GraphBlock] = {}
    for gpm in gpms:
        for block in graph_blocks(gpm):
            same = keys.setdefault(block.key, block)
            if gpm.name not in blocks.setdefault(same, []):
                blocks[same].append(gpm.name)
    if not blocks:
        raise QueryError("the query has no GRAPH <iri> { ... } block: there is nothing to materialise")
    return blocks


def _check_dump(path: str) -> None:
    if not os.path.isfile(path):
        raise SpaseqError(f"--dump {path}: no such file" if not os.path.isdir(path)
                          else f"--dump {path} is a directory: give the dump files in it")
    if not path.lower().endswith(DUMP_SUFFIXES):
        raise SpaseqError(f"--dump {path}: give N-Quads or N-Triples (.nq .nt, optionally .gz); "
                          "'spaseq kb load' reads other syntaxes into a store for --kb")


def _prepare_out(out: str) -> None:
    """An empty directory, or one a previous materialisation wrote (its tables are replaced)."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise SpaseqError(f"--out {out} is a file: give a directory")
    if os.path.isdir(out) and os.listdir(out):
        if not os.path.exists(os.path.join(out, MANIFEST)):
            raise SpaseqError(f"--out {out} is a directory that 'spaseq kb materialize' did not write: "
                              "give a new or empty one")
        os.remove(os.path.join(out, MANIFEST))
        shutil.rmtree(os.path.join(out, "blocks"), ignore_errors=True)
    os.makedirs(out, exist_ok=True)


def _relevant_quads(spark, dumps: list[str], blocks: list[GraphBlock]):
    """The dumps' quads in a (graph, predicate) some block names, as Oxigraph stores them,
    cached (columns s, p, o, g of N-Triples terms), and how many there are per graph.  A line
    that is no statement is an error."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    wanted: dict[str, set[str]] = {}
    for block in blocks:
        wanted.setdefault(block.graph, set()).update(p for _, p, _ in block.triples)
    line = F.col("line")
    # a cheap substring test first: the regular expression only runs on likely lines
    hint = _any(line.contains(f"<{g}>") & _any(line.contains(p) for p in preds)
                for g, preds in wanted.items()) | line.contains("\\")
    lines = None
    for index, path in enumerate(dumps):
        frame = spark.read.text(path).select(F.col("value").alias("line"), F.lit(index).alias("dump"))
        lines = frame if lines is None else lines.unionByName(frame)
    candidates = lines.filter(hint | ~(line.rlike(STATEMENT) | line.rlike(NOTHING))) \
                      .persist(StorageLevel.MEMORY_AND_DISK)
    bad = candidates.filter(~line.rlike(STATEMENT) & ~line.rlike(NOTHING)).limit(1).collect()
    if bad:
        candidates.unpersist()
        path = dumps[bad[0]["dump"]]
        raise SpaseqError(f"{path}:{_line_number(path, bad[0]['line'])}: not an N-Triples/N-Quads statement: "
                          f"{bad[0]['line'][:120]}")
    in_blocks = _any((F.col("g") == f"<{g}>") & F.col("p").isin(sorted(preds)) for g, preds in wanted.items())
    parts = candidates.filter(line.rlike(STATEMENT)).select(
        *(F.regexp_extract(line, STATEMENT, n).alias(name) for n, name in enumerate("spog", 1)), "dump") \
        .filter(in_blocks | F.concat("g", "p").contains("\\"))         # (escapes: may be in a block)
    rewrite = F.concat_ws(" ", "s", "p", "o", "g").rlike(ESCAPES) | F.col("o").rlike(OBJECT_TO_CANONICALISE)
    # the rows to rewrite apart: a Python UDF under a condition would still see every row
    rewritten = parts.filter(rewrite).select(
        F.udf(_as_oxigraph_stores, "struct<s:string,p:string,o:string,g:string>", useArrow=False)(
            "s", "p", "o", "g").alias("t"),
        "dump").select("t.*", "dump")
    quads = parts.filter(~rewrite).unionByName(rewritten).filter(in_blocks)
    # blank nodes are local to their dump
    apart = {c: F.when(F.col(c).startswith("_:"),
                       F.concat(F.lit("_:d"), F.col("dump").cast("string"), F.lit("_"), F.expr(f"substring({c}, 3)")))
                 .otherwise(F.col(c)) for c in ("s", "o")}
    quads = quads.select(apart["s"].alias("s"), "p", apart["o"].alias("o"), "g") \
                 .persist(StorageLevel.MEMORY_AND_DISK)
    per_graph = {row["g"][1:-1]: row["count"] for row in quads.groupBy("g").count().collect()}
    candidates.unpersist()
    return quads, per_graph


def _as_oxigraph_stores(s, p, o, g):
    """One quad's terms as Oxigraph would store and write them (runs in the executors;
    no type hints: PySpark would read them as a pandas UDF's)."""
    import pyoxigraph as ox

    from spaseq_plugin.evaluators.sparql_values import canonical
    quad = next(ox.parse(f"{s} {p} {o} {g} .".encode(), ox.RdfFormat.N_QUADS))
    return str(quad.subject), str(quad.predicate), str(canonical(quad.object)), str(quad.graph_name)


def _present_graphs(spark, dumps: list[str], present: set[str], graphs: set[str]) -> set[str]:
    """Which of ``graphs`` hold a quad in the dumps (the KB's graph names), knowing that
    ``present`` do."""
    from pyspark.sql import functions as F

    present = set(present)
    for graph in sorted(graphs - present):
        for path in dumps:          # quads outside the blocks' predicates: one is enough
            found = spark.read.text(path).filter(F.col("value").contains(f"<{graph}>")) \
                .filter(F.regexp_extract("value", STATEMENT, 4) == f"<{graph}>").limit(1).count()
            if found:
                present.add(graph)
                break
    return present


def _block_frame(quads, block: GraphBlock):
    """The block's solutions: one line of tab-separated terms per solution, in column order."""
    from pyspark.sql import functions as F

    names = {c: f"c{i}" for i, c in enumerate(block.columns)}     # Spark's names ignore case
    frames = []
    for s, p, o in block.triples:
        frame = quads.filter((F.col("g") == f"<{block.graph}>") & (F.col("p") == p))
        for position, term in (("s", s), ("o", o)):
            if term not in names:
                frame = frame.filter(F.col(position) == term)
        if s in names and s == o:                      # ?x :p ?x
            frame = frame.filter(F.col("s") == F.col("o")).select(F.col("s").alias(names[s]))
        else:
            frame = frame.select(*(F.col(position).alias(names[term])
                                   for position, term in (("s", s), ("o", o)) if term in names))
        frames.append(frame)
    joined = None
    for index in _join_order(block):
        frame = frames[index]
        if joined is None:
            joined = frame
        else:
            shared = [c for c in frame.columns if c in joined.columns]
            joined = joined.join(frame, shared) if shared else joined.crossJoin(frame)
    columns = [names[c] for c in block.columns]
    return joined.select(*columns).distinct().select(F.concat_ws("\t", *columns).alias("value")) \
        if columns else joined.limit(1).select(F.lit("").alias("value"))


def _join_order(block: GraphBlock) -> list[int]:
    """The most constrained pattern first, then always one sharing a variable with those before."""
    variables = set(block.columns)

    def columns(i):
        return set(block.triples[i]) & variables
    remaining = list(range(len(block.triples)))
    order: list[int] = []
    bound: set[str] = set()
    while remaining:
        connected = [i for i in remaining if columns(i) & bound] or remaining
        best = min(connected, key=lambda i: (len(columns(i) - bound), i))
        order.append(best)
        bound |= columns(best)
        remaining.remove(best)
    return order


def _spark_message(error: Exception) -> str:
    """What went wrong, without the JVM's stack: a Py4J error names the Java exception on its
    second line (the first says which call failed)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    java = [line[1:].strip() for line in lines if line.startswith(":")]
    return (java or lines or [type(error).__name__])[0]


def _any(conditions):
    from functools import reduce
    return reduce(lambda a, b: a | b, conditions)


def _count_lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def _line_number(path: str, text: str) -> str:
    """Where a line is in a dump (Spark does not keep line numbers): found again by reading."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if line.rstrip("\r\n") == text:
                return str(number)
    return "?"
