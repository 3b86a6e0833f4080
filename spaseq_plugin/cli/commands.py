"""The ``spaseq`` command line.

``spaseq run QUERY --stream ALIAS=PATH ...`` evaluates a query over stream
files; ``spaseq explain QUERY`` shows the compiled automaton.  Exit status:
0 done (rejected events are counted, not fatal), 2 bad query or arguments,
1 any other failure.  No traceback reaches the user.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import IO

from .. import __version__
from ..language.compiler import CompiledQuery, compile_query
from ..runtime.engine import Engine, query_warnings
from ..errors import EventError, QueryError, SpaseqError
from ..events import as_time, datetime_seconds, format_time
from ..evaluators.spectra import SpectraEvaluator
from ..bench.runner import add_bench_parser
from ..kb import KnowledgeBase
from .kb_commands import add_kb_parser
from ..language.nfa import automaton_svg
from ..output.formats import FORMATS
from ..plugins import call_configure, plugin_list, registry, result_sink, stream_source
from ..streams.files import merge_streams, read_manifest_streams
from ..streams.reorder import merge_arrival, parse_lateness, reorder
from ..streams.replay import parse_rate, replay


class UsageError(SpaseqError):
    """Bad command-line arguments (exit status 2)."""


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        call_configure({k: v for k, v in vars(args).items() if k != "func"})
        return args.func(args)
    except QueryError as e:
        where = f"{args.query}: " if getattr(args, "query", None) else ""
        print(f"spaseq: query error: {where}{e}", file=sys.stderr)
        return 2
    except UsageError as e:
        print(f"spaseq: {e}", file=sys.stderr)
        return 2
    except SpaseqError as e:
        print(f"spaseq: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("spaseq: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:
        print(f"spaseq: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a bug: say so plainly, without a traceback
        print(f"spaseq: internal error: {type(e).__name__}: {e} "
              "(please report it; SPASEQ_DEBUG=1 shows the traceback)", file=sys.stderr)
        if os.environ.get("SPASEQ_DEBUG"):
            raise
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spaseq", description="SPASEQ: complex event processing over RDF graph streams.")
    parser.add_argument("--version", action="version", version=f"spaseq {__version__}")
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="evaluate a query over stream files",
                         description="Evaluate a SPASEQ query over stream files and print its results.")
    run.add_argument("query", help="the query file (or - for standard input)")
    run.add_argument("--stream", action="append", default=[], metavar="ALIAS=LOCATION",
                     help="the input of the stream ALIAS of FROM STREAM (or its IRI): a file (.trig, .nq, "
                          "optionally .gz), a glob or a folder; '-' for stdin; tcp://HOST:PORT; "
                          "mqtt://HOST:PORT/TOPIC; or any SCHEME: a plugin provides; repeat for several")
    run.add_argument("--manifest", action="append", default=[], metavar="FILE",
                     help="a stream manifest of the SPASEQ reference implementation "
                          "(lines '<stream IRI> <file.nt> N')")
    run.add_argument("--kb", action="append", default=[], metavar="PATH|IRI=PATH|oxigraph:DIR",
                     help="background knowledge base for GRAPH clauses; repeat to load several files")
    run.add_argument("--format", choices=FORMATS, default=None,
                     help="output format (default: jsonl for SELECT, trig for CONSTRUCT)")
    run.add_argument("--output", "-o", metavar="FILE", help="write results here instead of stdout")
    run.add_argument("--sink", action="append", default=[], metavar="NAME:LOCATION",
                     help="also send results to a sink plugin (e.g. mqtt:..., webhook:...); see 'spaseq plugins'")
    run.add_argument("--events", action="store_true", help="jsonl: add each result's events")
    run.add_argument("--dead-letter", metavar="FILE", help="write rejected events here (JSON lines)")
    run.add_argument("--start", metavar="TIME",
                     help="TUMBLING windows start here (a number or an xsd:dateTime) "
                          "instead of at the first event")
    run.add_argument("--rate", metavar="R",
                     help="replay at R times the recorded pace (1 = real time; default: full speed)")
    run.add_argument("--lateness", metavar="SECONDS",
                     help="reorder events arriving out of order across streams, up to this late "
                          "(e.g. 5, 500ms, 2min); later ones are rejected")
    run.add_argument("--max-events", type=int, metavar="N",
                     help="live sources (stdin, tcp, mqtt) end after N events")
    run.add_argument("--idle-timeout", type=float, metavar="SECONDS",
                     help="live sources end after this long without input")
    run.add_argument("--engine", choices=["stream", "spark"], default="stream",
                     help="stream (default): one process reads the input as a stream; spark: evaluate "
                          "archived stream files in parallel on Spark (cut by time or PARTITION BY key)")
    run.add_argument("--spark-master", metavar="URL",
                     help="--engine spark: the Spark master (default: $SPARK_MASTER, else local[*])")
    run.add_argument("--spark-pieces", type=int, metavar="N",
                     help="--engine spark: cut the input into at most N pieces (default: 4 per core)")
    run.add_argument("--kb-materialized", metavar="DIR",
                     help="use GRAPH-pattern solutions materialised by 'spaseq kb materialize' as the KB")
    run.add_argument("--quiet", "-q", action="store_true", help="no warnings, progress or summary")
    run.set_defaults(func=_run)

    explain = sub.add_parser("explain", help="show the compiled automaton",
                             description="Show the NFA_scep automaton a query compiles to.")
    explain.add_argument("query", help="the query file (or - for standard input)")
    explain.add_argument("--dot", action="store_true", help="Graphviz dot instead of text")
    explain.add_argument("--svg", metavar="FILE", help="also draw the automaton as an SVG picture into FILE")
    explain.add_argument("--kb", action="append", default=[], metavar="PATH|IRI=PATH|oxigraph:DIR",
                         help="the KB, to show how GRAPH clauses will be joined")
    explain.set_defaults(func=_explain)

    add_kb_parser(sub)
    add_bench_parser(sub)

    plugins = sub.add_parser("plugins", help="list the loaded plugins and what they provide",
                             description="List the loaded plugins (built in and from the 'spaseq' "
                                         "entry-point group), their versions and what they provide.")
    plugins.add_argument("--json", action="store_true", help="as JSON")
    plugins.set_defaults(func=_plugins)
    return parser


def _plugins(args) -> int:
    listing = plugin_list()
    if args.json:
        print(json.dumps(listing, indent=1))
        return 0
    for plugin in listing:
        print(f"{plugin['name']}  ({plugin['package']} {plugin['version']})")
        for item in plugin["provides"]:
            print(f"  {item}")
    return 0


def _read_query(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise UsageError(f"cannot read query {path}: {e.strerror}") from None


def _explain(args) -> int:
    compiled = compile_query(_read_query(args.query))
    for warning in compiled.warnings:
        print(f"spaseq: warning: {warning}", file=sys.stderr)
    if args.svg:
        with open(args.svg, "w", encoding="utf-8") as f:
            f.write(automaton_svg(compiled.automaton))
    if args.dot:
        print(compiled.automaton.to_dot())
    else:
        kb = KnowledgeBase.from_specs(args.kb) if args.kb else None
        _check_kb(kb, compiled)
        print(compiled.explain(SpectraEvaluator(kb)))
    return 0


def _check_kb(kb: KnowledgeBase | None, compiled: CompiledQuery) -> None:
    """A KB that can only answer some GRAPH blocks (materialized:) says so before a run."""
    check = getattr(kb, "check_query", None)
    if check is not None:
        check(compiled.gpms.values())


def _stream_sources(compiled: CompiledQuery, specs: list[str], manifests: list[str],
                    lateness: str | None = None):
    sources = []
    for spec in specs:
        iri, path = _stream_spec(compiled, spec)
        scheme, location = _source_scheme(path)
        if scheme == "file" and not _exists(location):
            raise UsageError(f"--stream {spec}: no such file {location}")
        sources.append(stream_source(scheme).open(location, iri))
    for manifest in manifests:
        if not os.path.exists(manifest):
            raise UsageError(f"--manifest {manifest}: no such file")
        sources.extend(read_manifest_streams(manifest).values())
    if not sources:
        raise UsageError("no input: give --stream ALIAS=PATH (or --manifest FILE)")
    if lateness is not None:
        try:
            allowed = parse_lateness(lateness)
        except ValueError as e:
            raise UsageError(f"--lateness {lateness}: {e}") from None
        return reorder(merge_arrival(sources), allowed)
    return merge_streams(sources)


def _stream_spec(compiled: CompiledQuery, spec: str) -> tuple[str, str]:
    """``ALIAS=LOCATION`` (or ``IRI=LOCATION``) -> (stream IRI, LOCATION)."""
    if "=" not in spec:
        raise UsageError(f"--stream {spec}: expected ALIAS=PATH")
    name, path = spec.split("=", 1)
    name = name.strip("<>")
    iri = compiled.stream_iris.get(name, name)
    if iri not in set(compiled.stream_iris.values()):
        known = ", ".join(f"{a} <{i}>" for a, i in compiled.stream_iris.items())
        raise UsageError(f"--stream {spec}: the query has no stream {name} (it has {known})")
    return iri, path


def _source_scheme(location: str) -> tuple[str, str]:
    """``tcp://host:port`` or ``mqtt:...`` -> its scheme; ``-`` -> stdin; a path -> file."""
    if location == "-":
        return "stdin", ""
    head, sep, rest = location.partition(":")
    if sep and len(head) > 1 and "/" not in head and not os.path.exists(location) and head in registry().sources:
        return head, rest
    return "file", location


def _exists(path: str) -> bool:
    import glob
    return os.path.exists(path) or bool(glob.glob(path))


def _run(args) -> int:
    query_text = _read_query(args.query)
    compiled = compile_query(query_text)
    kb_specs = list(args.kb)
    if args.kb_materialized:
        kb_specs.append(f"materialized:{args.kb_materialized}")
    kb = KnowledgeBase.from_specs(kb_specs) if kb_specs else None
    start = _parse_start(args.start) if args.start else None
    dead = open(args.dead_letter, "w", encoding="utf-8") if args.dead_letter else None

    def on_reject(error: EventError) -> None:
        if dead is not None:
            dead.write(json.dumps({"position": error.position, "error": error.message}) + "\n")
        if not args.quiet:
            progress.clear()
            print(f"spaseq: rejected event: {error}", file=sys.stderr)

    if args.engine == "spark":
        engine = spark = _spark_run(args, compiled, query_text, kb_specs, start, on_reject)
        warnings = query_warnings(compiled, kb)
        if kb is not None:
            _check_kb(kb, compiled)      # here, not in every piece
            kb.close()                   # the pieces open their own
        results = spark.results()
    else:
        engine = Engine(compiled, kb=kb, start=start, on_reject=on_reject)
        warnings = engine.warnings
        items = _stream_sources(compiled, args.stream, args.manifest, args.lateness)
        try:
            items = replay(items, parse_rate(args.rate))
        except ValueError as e:
            raise UsageError(f"--rate {args.rate}: {e}") from None
    if not args.quiet:
        for warning in warnings:
            print(f"spaseq: warning: {warning}", file=sys.stderr)
    fmt = args.format or ("trig" if compiled.query.construct is not None else "jsonl")
    if fmt == "trig" and compiled.query.construct is None:
        raise UsageError("--format trig is for CONSTRUCT queries")
    variables = [v if isinstance(v, str) else v.alias for v in compiled.projection]
    out: IO[str] = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    progress = _Progress(engine, enabled=not args.quiet and sys.stderr.isatty() and args.engine == "stream")
    started = time.perf_counter()
    try:
        writers = [result_sink(fmt).open(out, variables, {"with_events": args.events})]
        for spec in args.sink:
            name, _, location = spec.partition(":")
            writers.append(result_sink(name).open(location, variables, {}))
        if args.engine == "stream":
            results = engine.run(progress.counting(items))
        for result in results:
            for writer in writers:
                writer.write(result)
        for writer in writers:
            writer.close()
    finally:
        if out is not sys.stdout:
            out.close()
        if dead is not None:
            dead.close()
    progress.done()
    if not args.quiet:
        s = engine.stats
        elapsed = time.perf_counter() - started
        rate = s.events / elapsed if elapsed > 0 else 0
        print(f"spaseq: {s.events} events ({s.triples} triples) in {elapsed:.2f} s, "
              f"{rate:,.0f} events/s; {s.rejected} rejected; {s.matches} matches, "
              f"{s.results} results; peak {s.peak_runs} active runs", file=sys.stderr)
    return 0


def _spark_run(args, compiled: CompiledQuery, query_text: str, kb_specs: list[str], start, on_reject):
    """The Spark evaluation of archived stream files (``--engine spark``)."""
    from ..spark.engine import SparkRun, archived_sources
    live = [flag for flag, value in (("--rate", args.rate), ("--lateness", args.lateness),
                                     ("--max-events", args.max_events), ("--idle-timeout", args.idle_timeout))
            if value is not None]
    if live:
        raise UsageError(f"{', '.join(live)}: for live input; --engine spark reads archived stream files")
    if args.spark_pieces is not None and args.spark_pieces < 1:
        raise UsageError("--spark-pieces must be at least 1")
    streams = []
    for spec in args.stream:
        name, location = _stream_spec(compiled, spec)
        if _source_scheme(location)[0] != "file":
            raise UsageError(f"--stream {spec}: --engine spark reads archived stream files, not live sources")
        if not _exists(location):
            raise UsageError(f"--stream {spec}: no such file {location}")
        streams.append((name, location))
    for manifest in args.manifest:
        if not os.path.exists(manifest):
            raise UsageError(f"--manifest {manifest}: no such file")
    if not streams and not args.manifest:
        raise UsageError("no input: give --stream ALIAS=PATH (or --manifest FILE)")
    try:
        sources = archived_sources(compiled, streams, args.manifest)
    except FileNotFoundError as e:
        raise UsageError(str(e)) from None

    def progress(text: str) -> None:
        if not args.quiet:
            print(f"spaseq: spark: {text}", file=sys.stderr, flush=True)
    return SparkRun(compiled, query_text, sources, kb_specs, master=args.spark_master,
                    pieces=args.spark_pieces, start=start, on_reject=on_reject, progress=progress)


def _parse_start(text: str):
    try:
        return as_time(text) if "T" not in text else datetime_seconds(text)
    except (ArithmeticError, ValueError):
        raise UsageError(f"--start {text}: not a number or an xsd:dateTime") from None


class _Progress:
    """A one-line progress display on a terminal's stderr, refreshed twice a second."""

    def __init__(self, engine: Engine, enabled: bool):
        self.engine = engine
        self.enabled = enabled
        self.last = 0.0
        self.shown = False

    def counting(self, items):
        if not self.enabled:
            yield from items
            return
        for n, item in enumerate(items):
            if n % 256 == 0:
                self.tick()
            yield item

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.last < 0.5:
            return
        self.last = now
        s = self.engine.stats
        at = self.engine.current_time
        shown = format_time(at, self.engine.is_datetime) if at is not None else "-"
        sys.stderr.write(f"\r{s.events:,} events, at {shown}, {s.results:,} results, "
                         f"{self.engine.runtime.active_runs:,} active runs, {s.rejected:,} rejected ")
        sys.stderr.flush()
        self.shown = True

    def clear(self) -> None:
        if self.enabled and self.shown:
            sys.stderr.write("\r\033[K")

    def done(self) -> None:
        if self.enabled and self.shown:
            sys.stderr.write("\n")

