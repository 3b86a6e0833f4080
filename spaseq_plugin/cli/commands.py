"""The ``spaseq`` command line.

``spaseq run QUERY --stream ALIAS=PATH ...`` evaluates a query over stream
files; ``spaseq explain QUERY`` shows the compiled automaton.  No traceback
reaches the user; the exit status follows one rule (README, "Exit status"):

====  =====================================================================
0     done (rejected events are counted in the summary, not fatal)
2     a usage, query or input error: one line naming the argument
3     a limit was reached (:class:`~spaseq_plugin.errors.LimitError`)
1     anything else: a failure the command did not expect
130   interrupted (Ctrl-C): what was read is summarised
143   stopped by SIGTERM (129: SIGHUP), as Ctrl-C stops a run (cli/stopping.py)
====  =====================================================================

Library code raises :class:`~spaseq_plugin.errors.UsageError`,
:class:`~spaseq_plugin.errors.QueryError` or :class:`LimitError`;
:func:`~spaseq_plugin.errors.as_usage_error` turns any other error met while
opening what an argument names (a file, a store, a source, a sink) into a
``UsageError`` naming it.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import itertools
import json
import logging
import os
import re
import signal
import stat
import sys
import threading
import time

from .. import __version__
from ..compiled import describe as describe_build
from ..language.compiler import CompiledQuery, compile_query
from ..language.limits import DEFAULT_MAX_ATOMS, DEFAULT_MAX_NESTING, QueryLimits, read_query_file
from ..runtime.engine import Engine, prepare_collector, query_warnings
from ..runtime.nfa_runtime import (DEFAULT_MAX_DISTINCT, DEFAULT_MAX_JOIN_STEPS, DEFAULT_MAX_RUNS, DEFAULT_MAX_STATE_BYTES, POLICIES,
                                   StateLimits)
from ..errors import EventError, LimitError, PluginError, QueryError, SpaseqError, StateLimitError, UsageError, as_usage_error
from ..events import format_time, parse_time_text
from ..evaluators.spectra import SpectraEvaluator
from ..bench.runner import add_bench_parser
from ..kb import KnowledgeBase
from .arguments import add_service_flags, byte_size, seconds, whole_number
from .checkpointing import HeaderDiscarded, RunCheckpoints
from .paths import check_not_collected, check_writes
from .stopping import (OUTPUT_TIMEOUT, STOP_TIMEOUT, GracefulStop, Terminated, at_most, interrupted_status,
                       stopped, stopping_on_signals)
from .kb_commands import add_kb_parser
from ..language.nfa import automaton_svg
from ..output.formats import FORMATS, check_format
from ..output.writer import NamedOutput, StagedFiles
from ..plugins import call_configure, plugin_list, plugin_problems, registry, result_sink, stream_source
from ..spark.session import require_pyspark
from ..runtime.checkpoint import DEFAULT_INTERVAL, parse_interval
from ..streams.files import (is_stream_file, merge_streams, read_manifest, read_manifest_streams, skip_items,
                             stream_file_format)
from ..streams.network import LiveOptions, StdinSource, parse_format
from ..streams.reader import DEFAULT_MAX_TERM_DEPTH, MOST_TERM_DEPTH, event_text
from ..streams.reorder import DEFAULT_MAX_HELD, ReorderBuffer, merge_arrival, parse_lateness
from ..streams.replay import parse_rate, replay

log = logging.getLogger(__name__)

# Rejected events printed on stderr before they are only counted (a stream of
# bad events must not flood the terminal; -v prints all, --dead-letter keeps all).
REJECTIONS_PRINTED = 100

DEAD_LETTER_LIMIT = 1 << 30    # bytes of --dead-letter (--dead-letter-limit)

# Memory a run keeps aside to close its outputs and report, should it run out.
MEMORY_RESERVE = 16 << 20
OUT_OF_MEMORY = ("out of memory: lower --max-state-memory or --max-runs (docs/limits.md), "
                 "or give the process more memory")

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_LIMIT = 0, 1, 2, 3    # (130 and 128 + N: cli/stopping.py)
ERROR_CHARS = 2000      # an error line longer than this keeps its start and its end
#: seconds between two progress lines when standard error is not a terminal
PROGRESS_INTERVAL = 5.0
LOG_LEVELS = ("debug", "info", "warning", "error")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)          # bad syntax: argparse says so and exits with 2
    _configure_logging(args)
    if not getattr(args, "command", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        with stopping_on_signals(getattr(args, "stop_timeout", None) or STOP_TIMEOUT):
            return _command(args)
    except KeyboardInterrupt as stop:       # (a signal while the handlers are set up or taken down)
        return stopped(stop)


def _command(args: argparse.Namespace) -> int:
    """Run the command; each kind of failure becomes its message and exit status."""
    try:
        if args.func is not _plugins:       # (it lists the plugins even when one is broken)
            call_configure(_configuration(args))
        return args.func(args)
    except QueryError as e:
        where = f"{args.query}: " if isinstance(getattr(args, "query", None), str) else ""
        _error(f"query error: {where}{e}")
        return EXIT_USAGE
    except UsageError as e:
        _error(str(e))
        return EXIT_USAGE
    except LimitError as e:
        query = getattr(args, "query", None)
        where = f"query {query}: " if isinstance(e, StateLimitError) and isinstance(query, str) else ""
        _error(f"limit reached: {where}{e}")
        return EXIT_LIMIT
    except MemoryError:
        # (the state limits are flags of run and explain: other commands hold no runs)
        _error("limit reached: " + (OUT_OF_MEMORY if hasattr(args, "max_runs") else
                                    "out of memory: give the process more memory"))
        return EXIT_LIMIT
    except KeyboardInterrupt as stop:
        return stopped(stop)
    except BrokenPipeError:                 # e.g. piped into head: the reader has what it wanted
        _silence_stdout()
        return EXIT_OK
    except SpaseqError as e:
        _error(f"error: {e}")
        return EXIT_FAILED
    except OSError as e:
        _error(f"error: {_os_message(e)}")
        return EXIT_FAILED
    except Exception as e:  # a bug: say so plainly, without a traceback
        _error(f"internal error: {type(e).__name__}: {e} "
               "(please report it; SPASEQ_DEBUG=1 shows the traceback)")
        if os.environ.get("SPASEQ_DEBUG"):
            raise
        return EXIT_FAILED


def _configuration(args: argparse.Namespace) -> dict:
    """What ``spaseq_configure`` is given: the parsed options."""
    return {k: v for k, v in vars(args).items() if k != "func"}


def _error(message: str) -> None:
    one_line = re.sub(r"\s*\n\s*", " ", message.strip())
    if len(one_line) > ERROR_CHARS:         # (an argument of megabytes, named twice)
        keep = ERROR_CHARS // 2
        one_line = f"{one_line[:keep]} [... {len(one_line) - 2 * keep:,} characters ...] {one_line[-keep:]}"
    print(f"spaseq: {one_line}", file=sys.stderr)


def _silence_stdout() -> None:
    # Python flushes stdout again at exit, which would fail on the closed pipe.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _os_message(error: OSError) -> str:
    """``No such file or directory: 'x'`` rather than ``[Errno 2] ...``."""
    if error.strerror is None:
        return str(error)
    name = f": {error.filename}" if error.filename is not None else ""
    return f"{error.strerror}{name}"


class _LogFormatter(logging.Formatter):
    """``spaseq: warning: ...``, as the command's own messages."""

    def format(self, record: logging.LogRecord) -> str:
        kind = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        where = f"[{record.name}] " if record.levelno <= logging.DEBUG else ""
        return f"spaseq: {kind}{where}{record.getMessage()}"


class _StderrHandler(logging.Handler):
    """Writes to the current ``sys.stderr`` (not the one of the handler's creation),
    first clearing the live progress line."""

    progress: "_Progress | None" = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self.progress is not None:
                self.progress.say(self.format(record))
            else:
                sys.stderr.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


_log_handler = _StderrHandler()
_log_handler.setFormatter(_LogFormatter())


def _configure_logging(args) -> None:
    """``--log-level``, else ``-v`` (info) / ``-vv`` (debug), else warnings (errors with --quiet)."""
    level = getattr(args, "log_level", None)
    if level is None:
        verbose = getattr(args, "verbose", 0) or 0
        level = "debug" if verbose >= 2 else "info" if verbose else \
            "error" if getattr(args, "quiet", False) else "warning"
    package = logging.getLogger(__name__.split(".")[0])
    if _log_handler not in package.handlers:
        package.addHandler(_log_handler)
    package.setLevel(level.upper())
    _log_handler.progress = None


def _add_logging_flags(parser: argparse.ArgumentParser) -> None:
    """``-v`` and ``--log-level`` on ``spaseq`` and every subcommand (``spaseq -v run`` and
    ``spaseq run -v`` alike: SUPPRESS keeps a subcommand from resetting the main parser's)."""
    parser.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help="say more on stderr: -v what is read and opened, -vv debugging details")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default=argparse.SUPPRESS,
                        help="the least important messages shown (default: warning; error with --quiet)")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _add_logging_flags(child)


_EPILOG = """\
exit status: 0 done (rejected events are counted, not fatal); 2 a usage, query or input error
(one line naming the argument); 3 a limit was reached; 1 an unexpected failure; 130 interrupted;
143 stopped by SIGTERM (129: SIGHUP), as Ctrl-C stops a run (live input stops reading first and
what it received is evaluated: --stop-timeout).

environment: SPASEQ_DEBUG=1 shows the Python traceback of an internal error;
SPARK_MASTER is the default --spark-master; JAVA_HOME a Java 17+ for Spark."""


def _flushing(items, writers, out=None, after=None, end=None):
    """The input items, with the writers flushed before each next item is read: a live
    source may make that read wait, and the results so far must not wait with it.  With
    ``out`` (a live input, or a terminal: ``_results_awaited``), that stream is flushed
    too, so that the results reach their reader at once.  ``after(item)`` is called
    once they are, and ``end()`` after the last item, before the engine closes
    (``--checkpoint``).  Without any of the three (stream files read into a file or a
    pipe, no checkpoints), the writers flush when their buffers fill and at the end,
    like any tool writing to a file: no layer per item."""
    if out is None and after is None and end is None:
        return items
    return _flushed(items, writers, out, after, end)


def _results_awaited(live: bool, out) -> bool:
    """Whether results must reach ``out`` as soon as they are final: on a live input,
    whose next read may wait, and on a terminal, which a person watches (stream files
    read into a file or a pipe are written in blocks)."""
    if live:
        return True
    try:
        return out.file.isatty()
    except (AttributeError, ValueError, OSError):      # (no file, or a closed one)
        return False


def _flushed(items, writers, out, after, end):
    flushes = [writer.flush for writer in writers if hasattr(writer, "flush")]
    if out is not None:
        flushes.append(out.flush)
    for item in items:
        yield item
        for flush in flushes:
            flush()
        if after is not None:
            after(item)
    if end is not None:
        end()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spaseq", description="SPASEQ: complex event processing over RDF graph streams.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"spaseq {__version__} ({describe_build()})")
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="evaluate a query over stream files",
                         description="Evaluate a SPASEQ query over stream files and print its results.",
                         epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("query", help="the query file (or - for standard input)")
    run.add_argument("--stream", action="append", default=[], metavar="ALIAS=LOCATION",
                     help="the input of the stream ALIAS of FROM STREAM (or its IRI): a file (.trig, .nq, "
                          "optionally .gz), a glob or a folder; '-' for stdin; a pipe or device such as "
                          "/dev/stdin or /dev/fd/3 (read as it arrives); tcp://HOST:PORT; "
                          "mqtt://HOST:PORT/TOPIC; or any SCHEME: a plugin provides; repeat for several")
    run.add_argument("--manifest", action="append", default=[], metavar="FILE",
                     help="a stream manifest of the SPASEQ reference implementation: lines "
                          "'<stream IRI> <file.nt> N', each N-Triples file cut into events of N triples")
    run.add_argument("--kb", action="append", default=[], metavar="PATH|IRI=PATH|oxigraph:DIR",
                     help="background knowledge base for GRAPH clauses: an RDF file (TriG and N-Quads keep "
                          "their graphs), IRI=PATH (a Turtle or N-Triples file into the named graph IRI; "
                          "<IRI>=PATH when the IRI has a '='), or a store (oxigraph:DIR, rdflib:..., "
                          "sparql:URL; see 'spaseq plugins'); repeat to load several files")
    run.add_argument("--format", choices=FORMATS, default=None,
                     help="output format (default: jsonl for SELECT, trig for CONSTRUCT)")
    run.add_argument("--output", "-o", metavar="FILE", help="write results here instead of stdout (- is stdout)")
    run.add_argument("--sink", action="append", default=[], metavar="NAME:LOCATION",
                     help="also send results to a sink plugin (e.g. mqtt:..., webhook:...), or write them to "
                          "a file in a format too (csv:FILE, jsonl:FILE...); see 'spaseq plugins'")
    run.add_argument("--events", action="store_true",
                     help="add each result's events (stream, time, graph): a key in jsonl, "
                          "a last column 'events' (JSON) in csv, tsv and json")
    run.add_argument("--dead-letter", metavar="FILE",
                     help="write rejected events here, one JSON line each: position, reason, error, graph, "
                          "and the rejected text (cut past 64 KiB, with its length), ready to fix and feed again")
    run.add_argument("--dead-letter-limit", metavar="SIZE", type=byte_size, default=DEAD_LETTER_LIMIT,
                     help="the most the --dead-letter file may hold (default 1GiB; past it rejections are "
                          "counted, not written: an event rejected as TriG with full IRIs can be many "
                          "times the text it came from)")
    run.add_argument("--max-statement", metavar="SIZE", type=byte_size, default=None,
                     help="reject a TriG statement or N-Quads line longer than this, skipping it as it "
                          "streams by (e.g. 64MiB; default 32MiB)")
    run.add_argument("--max-event-triples", metavar="N", type=whole_number("triples"), default=None,
                     help="reject an event (or TriG statement) of more than N triples as soon as it is seen "
                          "to be, dropping the rest of its graph (default 1000000: about 0.5 GB while read)")
    run.add_argument("--max-term-depth", metavar="N", type=whole_number("levels", MOST_TERM_DEPTH), default=None,
                     help="reject a statement (or N-Quads line) nesting RDF 1.2 triple terms <<( ... )>> more "
                          f"than N deep (default {DEFAULT_MAX_TERM_DEPTH}, at most {MOST_TERM_DEPTH}: the RDF "
                          "parser recurses into them)")
    run.add_argument("--max-time-jump", metavar="DURATION", type=_time_jump, default=None,
                     help="reject an event more than this after the previous event of its stream, so that one "
                          "bad clock does not make the rest of the stream out of order (e.g. 1d, 12h; "
                          "default 365d; none: no bound)")
    run.add_argument("--start", metavar="TIME",
                     help="TUMBLING windows start here (a number of seconds or an xsd:dateTime, "
                          "with the rules of stream timestamps) instead of at the first event")
    run.add_argument("--rate", metavar="R",
                     help="replay at R times the recorded pace (1 = real time, 10 = ten times faster; "
                          "max, the default: as fast as it can)")
    run.add_argument("--lateness", metavar="SECONDS",
                     help="reorder events arriving out of order across streams, up to this late "
                          "(e.g. 5, 500ms, 2min); later ones are rejected")
    run.add_argument("--max-held", type=whole_number("events"), metavar="N",
                     help="the most events --lateness (and a listening tcp source's connections) hold back "
                          f"to put them in time order (default {DEFAULT_MAX_HELD:,}); past it the oldest go on "
                          "early, and one older than them that comes later is late")
    run.add_argument("--max-events", type=whole_number("events"), metavar="N",
                     help="live sources (stdin, tcp, mqtt) end after N events")
    run.add_argument("--idle-flush", type=whole_number("milliseconds"), default=200, metavar="MS",
                     help="live input (and --rate replays): when nothing has come for this long, close the "
                          "pending timestamp and write its results (default 200; a timestamp is also "
                          "complete as soon as every stream has delivered it or a later one)")
    run.add_argument("--idle-timeout", type=seconds, metavar="SECONDS",
                     help="live sources end after this long without input")
    run.add_argument("--stop-timeout", type=seconds, metavar="SECONDS",
                     help="live input, on SIGTERM, SIGHUP or Ctrl-C: the run stops reading and evaluates "
                          "what it received, for at most this long, then stops (default "
                          f"{STOP_TIMEOUT:g}; the same signal again stops it at once); any run that has "
                          "not taken the signal this long after it came, held in a call that does not "
                          "return to Python (an Oxigraph evaluation), stops at once")
    run.add_argument("--engine", choices=["stream", "spark"], default="stream",
                     help="stream (default): one process reads the input as a stream; spark: evaluate "
                          "archived stream files in parallel on Spark (cut by time or PARTITION BY key)")
    run.add_argument("--spark-master", metavar="URL",
                     help="--engine spark: the Spark master (default: $SPARK_MASTER, else local[*])")
    run.add_argument("--spark-pieces", type=whole_number("pieces"), metavar="N",
                     help="--engine spark: cut the input into at most N pieces (default: 4 per core)")
    run.add_argument("--kb-materialized", metavar="DIR",
                     help="use GRAPH-pattern solutions materialised by 'spaseq kb materialize' as the KB")
    run.add_argument("--progress", choices=["auto", "always", "never"], default="auto",
                     help="auto (default): a live counter on a terminal, else a line every "
                          f"{PROGRESS_INTERVAL:g} s on long runs, a live input that sends nothing included; "
                          "always: the same even with --quiet; never")
    run.add_argument("--quiet", "-q", action="store_true", help="no warnings, progress or summary")
    run.add_argument("--checkpoint", metavar="DIR",
                     help="keep checkpoints in DIR; started again with the same arguments, the run resumes "
                          "from the last one: stream files from where they were, --output and --dead-letter "
                          "cut back to what was committed (exactly once), other sinks at least once "
                          "(docs/checkpoints.md); not with standard input")
    run.add_argument("--checkpoint-every", metavar="SECONDS|EVENTS", type=_checkpoint_interval, default=None,
                     help=f"with --checkpoint: how often, in seconds (10s, 500ms, 2min) or events "
                          f"(50000events) (default {DEFAULT_INTERVAL})")
    _add_limit_options(run)
    run.set_defaults(func=_run)

    explain = sub.add_parser("explain", help="show the compiled automaton",
                             description="Show the NFA_scep automaton a query compiles to.")
    explain.add_argument("query", help="the query file (or - for standard input)")
    explain.add_argument("--dot", action="store_true", help="Graphviz dot instead of text")
    explain.add_argument("--svg", metavar="FILE", help="also draw the automaton as an SVG picture into FILE")
    explain.add_argument("--kb", action="append", default=[], metavar="PATH|IRI=PATH|oxigraph:DIR",
                         help="the KB, to show how GRAPH clauses will be joined")
    _add_limit_options(explain)
    explain.set_defaults(func=_explain)

    add_kb_parser(sub)
    add_bench_parser(sub)

    plugins = sub.add_parser("plugins", help="list the loaded plugins and what they provide",
                             description="List the loaded plugins (built in and from the 'spaseq' "
                                         "entry-point group), their versions and what they provide.")
    plugins.add_argument("--json", action="store_true", help="as JSON")
    plugins.set_defaults(func=_plugins)
    _add_logging_flags(parser)
    return parser


def _add_limit_options(command: argparse.ArgumentParser) -> None:
    """What a query may be and do (docs/limits.md)."""
    command.add_argument("--max-nesting", type=int, default=DEFAULT_MAX_NESTING, metavar="N",
                         help="refuse queries nested deeper than N levels: brackets, and the operators, "
                              "keywords and '.' between triple patterns chained inside one "
                              f"(default {DEFAULT_MAX_NESTING}; at most 500)")
    command.add_argument("--max-atoms", type=int, default=DEFAULT_MAX_ATOMS, metavar="N",
                         help="refuse queries whose SEQ names more than N GPMs, each operand of a "
                              f"conjunction or disjunction counted (default {DEFAULT_MAX_ATOMS:,})")
    add_service_flags(command, "GPMs")
    command.add_argument("--max-runs", metavar="N", default=str(DEFAULT_MAX_RUNS),
                         help=f"active runs (partial matches) of the query at most, and solutions of one GPM on one "
                              f"event (default {DEFAULT_MAX_RUNS:,}; 'none' lifts it)")
    command.add_argument("--max-partition-runs", metavar="N", default="none",
                         help="active runs of one PARTITION BY key at most (default: only --max-runs)")
    command.add_argument("--max-state-memory", metavar="SIZE", default=f"{DEFAULT_MAX_STATE_BYTES >> 20}M",
                         help="estimated memory of the active runs at most, e.g. 200MiB, 2G (a bare number: bytes) "
                              f"(default {DEFAULT_MAX_STATE_BYTES >> 20}M; 'none' lifts it)")
    command.add_argument("--max-join-steps", metavar="N",
                         help="rows a GPM's join may try on one event, so that an event whose triples "
                              "make a vast product that a FILTER rejects does not hold the run for hours; "
                              "and the pending matches, or buffered events, a negation's guard may be tried on "
                              f"(default {DEFAULT_MAX_JOIN_STEPS:,}, a few seconds; 'none' lifts it)")
    command.add_argument("--max-distinct", metavar="N",
                         help="rows SELECT DISTINCT keeps, each for the query's lifetime so that a later equal "
                              f"one is dropped; past it the run stops (exit status 3) (default "
                              f"{DEFAULT_MAX_DISTINCT:,}, about 100 MB; 'none' lifts it)")
    command.add_argument("--on-limit", choices=POLICIES, default=POLICIES[0],
                         help="when --max-runs, --max-partition-runs, --max-state-memory or --max-join-steps "
                              "is reached: fail "
                              "(default: stop, exit status 3), drop-newest (do not keep the new partial match) or "
                              "drop-oldest (drop those that started first); the summary counts what was dropped")


def _limits(args) -> QueryLimits:
    try:
        return QueryLimits(max_nesting=args.max_nesting, allow_service=args.allow_service,
                           service_timeout=args.service_timeout, max_atoms=args.max_atoms)
    except ValueError as e:             # "max_nesting must be ..."
        name, _, problem = str(e).partition(" ")
        raise UsageError(f"--{name.replace('_', '-')}: {problem}") from None


def _checkpoint_interval(text: str) -> str:
    """``--checkpoint-every``, checked whether --checkpoint is given or not."""
    try:
        parse_interval(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _time_jump(text: str):
    """``--max-time-jump``: a duration (as ``--lateness``), or none/off (no bound: infinity)."""
    if text.strip().lower() in ("none", "off", "inf"):
        return float("inf")
    try:
        value = parse_lateness(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a duration (seconds, or with ms, s, min, h or d) or none") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0 (or none for no bound)")
    return value


class _DeadLetter:
    """The ``--dead-letter`` file: one JSON line per rejection, with what was
    rejected as text (a TriG or N-Quads statement as read, or the event as
    TriG with full IRIs), cut past ``TEXT_LIMIT`` characters, up to ``limit``
    bytes in all.  Opened only once the run's arguments have been checked (a
    usage error leaves an existing file alone)."""

    TEXT_LIMIT = 64 << 10

    def __init__(self, path: str | None, opener=None, limit: int = DEAD_LETTER_LIMIT):
        self.path = path
        self.file: NamedOutput | None = None
        self.opener = opener            # path -> file (--checkpoint: maybe one that goes on)
        self.limit = limit
        self.size = 0                   # bytes in the file
        self.full = False

    def open(self) -> None:
        if self.path is not None and self.file is None:
            file = self.opener(self.path) if self.opener else open(self.path, "w", encoding="utf-8")
            self.size = file.tell()
            self.file = NamedOutput(file, f"the rejected events to {self.path}")

    def write(self, error: EventError) -> None:
        if self.path is None:
            return
        self.open()
        record = {"position": error.position, "reason": error.reason, "error": error.message}
        if error.graph is not None:
            record["graph"] = error.graph
        text, length = error.text, error.text_length
        if text is None and error.event is not None:
            text = event_text(error.event)
            length = len(text)
        if text is not None:
            record["text"] = text[:self.TEXT_LIMIT]
            record["length"] = length
            if length is not None and length > len(record["text"]):
                record["truncated"] = True
        elif length is not None:
            record["length"] = length            # (too long to keep at all)
        line = json.dumps(record, ensure_ascii=False) + "\n"
        size = len(line.encode("utf-8"))
        if self.size + size > self.limit:
            if not self.full:
                self.full = True
                log.warning("--dead-letter %s holds %s bytes, the most --dead-letter-limit allows: further "
                            "rejections are counted, not written", self.path, f"{self.size:,}")
            return
        self.size += size
        self.file.write(line)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def _state_limits(args) -> StateLimits:
    return StateLimits(_limit_value("--max-runs", args.max_runs),
                       _limit_value("--max-partition-runs", args.max_partition_runs),
                       _limit_value("--max-state-memory", args.max_state_memory, size=True), args.on_limit,
                       DEFAULT_MAX_JOIN_STEPS if args.max_join_steps is None else
                       _limit_value("--max-join-steps", args.max_join_steps),
                       DEFAULT_MAX_DISTINCT if args.max_distinct is None else
                       _limit_value("--max-distinct", args.max_distinct))


def _limit_value(flag: str, text: str, size: bool = False) -> int | None:
    """A count, or a size (``size``: ``500MiB``, ``2G``); ``none``: no limit."""
    if text.strip().lower() == "none":
        return None
    if size:
        try:
            return byte_size(text)
        except argparse.ArgumentTypeError:
            raise UsageError(f"{flag} {text}: expected a size such as 500MiB or 2G, or none") from None
    body = text.strip().replace("_", "").replace(",", "")
    if not (body.isascii() and body.isdigit()) or int(body) < 1 or len(body) > 18:
        raise UsageError(f"{flag} {text}: expected a whole number of at least 1, or none")
    return int(body)


def _plugins(args) -> int:
    """The plugins and what they provide; a broken one is listed with what is wrong with
    it, named on stderr, and the exit status is 1."""
    problems = plugin_problems()
    if not problems:                    # (a plugin's configure hook may fail too)
        try:
            call_configure(_configuration(args))
        except PluginError as e:
            problems = [str(e)]
    listing = plugin_list()
    if args.json:
        print(json.dumps(listing, indent=1))
    else:
        for plugin in listing:
            print(f"{plugin['name']}  ({plugin['package']} {plugin['version']})")
            for item in plugin["provides"]:
                by = plugin["replaced"].get(item)
                print(f"  {item}  (replaced by {by})" if by else f"  {item}")
            for problem in plugin["problems"]:
                print(f"  BROKEN: {problem}")
    for problem in problems:
        _error(f"error: {problem}")
    return EXIT_FAILED if problems else EXIT_OK


def _explain(args) -> int:
    state_limits = _state_limits(args)
    compiled = compile_query(read_query_file(args.query), _limits(args))
    kb = _open_kb(args.kb, compiled) if args.kb else None
    for warning in (query_warnings(compiled, kb) if kb is not None else compiled.warnings):
        log.warning(warning)
    if args.svg:
        if args.query != "-":
            check_writes([(f"--svg {args.svg}", args.svg)], [("the query", args.query)])
        with as_usage_error(f"--svg {args.svg}"):
            with open(args.svg, "w", encoding="utf-8") as f:
                f.write(automaton_svg(compiled.automaton))
    if args.dot:
        print(compiled.automaton.to_dot())
    else:
        print(compiled.explain(SpectraEvaluator(kb)))
        print(state_limits.describe())
    return 0


def _open_kb(specs: list[str], compiled: CompiledQuery, flag: str = "--kb") -> KnowledgeBase:
    """The KB of ``--kb`` values; a KB that can only answer some GRAPH blocks
    (materialized:) says so here, before a run."""
    with as_usage_error(flag, tuple(specs)):
        kb = KnowledgeBase.from_specs(specs)
        check = getattr(kb, "check_query", None)
        if check is not None:
            check(compiled.gpms.values())
    log.info("KB: %s", getattr(kb, "description", type(kb).__name__))
    return kb


def _stream_sources(compiled: CompiledQuery, specs: list[str], manifests: list[str],
                    lateness: str | None, opened: contextlib.ExitStack, idle_flush: float | None = None,
                    checkpoints: RunCheckpoints | None = None):
    """The merged input of ``--stream`` and ``--manifest`` (each source is closed by
    ``opened``), the IRIs of the streams that have an input, and whether it is live
    (a source that is not a stream file).  With ``checkpoints``, stream files resume
    at their positions and count what they pass on."""
    sources = []
    names: list[str] = []       # (what the user called each source, for messages)
    fed = set()
    live = files = False
    for spec in specs:
        iri, location = _stream_spec(compiled, spec)
        scheme, path = _source_scheme(location)
        if checkpoints is not None and (scheme == "stdin" or scheme == "file" and _file_kind(path) == "special"):
            raise UsageError(f"--checkpoint: --stream {spec} cannot be read again after a restart (standard "
                             "input, a pipe or a device): give a file, or a live source that keeps what it "
                             "sends (mqtt with a persistent session, tcp: docs/checkpoints.md)")
        with as_usage_error(f"--stream {spec}"):
            source = _open_source(location, iri, opened)
        files = files or scheme == "file"
        live = live or scheme != "file" or _file_kind(path) == "special"
        opened.callback(_close_source, source)
        sources.append(source)
        names.append(f"--stream {spec}")
        fed.add(iri)
    for manifest in manifests:
        if not os.path.exists(manifest):
            raise UsageError(f"--manifest {manifest}: no such file")
        with as_usage_error(f"--manifest {manifest}"):
            streams = read_manifest_streams(manifest)
        for iri, source in streams.items():
            opened.callback(_close_source, source)
            sources.append(source)
            names.append(f"stream <{iri}> of --manifest {manifest}")
            fed.add(iri)
    if not sources:
        raise UsageError("no input: give --stream ALIAS=PATH (or --manifest FILE)")
    files = files or bool(manifests)
    if checkpoints is not None and files and (live or lateness is not None):
        raise UsageError("--checkpoint: stream files mixed with live sources, or read with --lateness, are "
                         "merged as they arrive, in an order a restart cannot repeat; checkpoint stream "
                         "files alone, without --lateness")
    if checkpoints is not None:
        checkpoints.watch(sources)
        if live and len(sources) > 1 and any(hasattr(source, "commit") for source in sources):
            raise UsageError("--checkpoint: an mqtt source acknowledges what a checkpoint holds only when "
                             "it is the run's one input (several live inputs are merged as they arrive)")
    if checkpoints is not None and not live:
        positions = checkpoints.positions(len(sources))
        if positions is not None:
            sources = [skip_items(source, count, name) for source, count, name
                       in zip(sources, positions, names)]
        checkpoints.delivered = [0] * len(sources) if positions is None else list(positions)
        return merge_streams(sources, checkpoints.delivered), fed, live
    allowed = None
    if lateness is not None:
        with as_usage_error(f"--lateness {lateness}"):
            allowed = parse_lateness(lateness)
    if live or allowed is not None:
        # In time order as they arrive: a source waits for the others unless it is
        # quiet (or the lateness has passed).
        order = ReorderBuffer(allowed, quiet_after=idle_flush)
        return merge_arrival(sources, idle_flush=idle_flush, order=order), fed, live
    return merge_streams(sources), fed, live


UNFED_SHOWN = 5         # streams without input warned about one by one; the others in one line


def _unfed_warnings(compiled: CompiledQuery, fed: set[str]) -> list[str]:
    """A FROM STREAM without input: the GPMs that read only streams without input can
    never match (say which; past UNFED_SHOWN streams, one line names the others)."""
    out = []
    for alias, iri in compiled.stream_iris.items():
        if iri in fed:
            continue
        blind = [g.name for g in compiled.gpms.values() if iri in g.streams and not g.streams & fed]
        what = f"GPM {', '.join(blind)} can never match" if blind else "every GPM on it reads another stream too"
        out.append((alias, f"stream {alias} <{iri}> has no input (no --stream {alias}=...): {what}"))
    if len(out) <= UNFED_SHOWN:
        return [message for _, message in out]
    rest = [alias for alias, _ in out[UNFED_SHOWN:]]
    named = ", ".join(rest[:20]) + (", ..." if len(rest) > 20 else "")
    return [message for _, message in out[:UNFED_SHOWN]] + [f"{len(rest)} more streams have no input: {named}"]


def _close_source(source) -> None:
    close = getattr(source, "close", None)
    if close is not None:
        close()


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


def _open_source(location: str, iri: str, opened: contextlib.ExitStack):
    """A source for one ``--stream`` location: a scheme's plugin (stdin, tcp, mqtt, ...);
    a regular stream file, folder or glob; or a pipe or device, read as it arrives."""
    scheme, location = _source_scheme(location)
    if scheme != "file":
        log.info("reading <%s> from %s:%s", iri, scheme, location)
        return stream_source(scheme).open(location, iri)
    kind = _file_kind(location)
    log.info("reading <%s> from %s", iri, location)
    if kind == "special":
        fmt = os.path.basename(location).lower().removesuffix(".gz").rpartition(".")[2]
        options = LiveOptions.from_query({}, location)
        options.rdf_format = parse_format(fmt) if fmt in ("trig", "nq") else None
        if not os.access(location, os.R_OK):
            raise UsageError(f"--stream {location}: cannot read it (permission denied)")
        return StdinSource(iri, options, name=location, path=location)
    if kind == "file":
        try:
            stream_file_format(location)
        except ValueError:
            raise UsageError(f"{location} is not a stream file: stream files are TriG (.trig) or "
                             "N-Quads (.nq), optionally gzipped (.gz), one event per named graph") from None
    return stream_source("file").open(location, iri)


def _file_kind(location: str) -> str:
    """``file``, ``folder``, ``glob`` or ``special`` (a pipe, a device, /dev/stdin...);
    a UsageError when nothing is there."""
    if os.path.isdir(location):
        return "folder"
    try:
        mode = os.stat(location).st_mode
    except FileNotFoundError:
        if glob.has_magic(location):
            if glob.glob(location):
                return "glob"
            raise UsageError(f"no file matches {location}") from None
        raise UsageError(f"no such file {location}") from None
    if stat.S_ISREG(mode) and not location.startswith(("/dev/", "/proc/")):
        return "file"
    return "special"


def _source_scheme(location: str) -> tuple[str, str]:
    """``tcp://host:port`` or ``mqtt:...`` -> its scheme; ``-`` -> stdin; a path -> file."""
    if location == "-":
        return "stdin", ""
    head, sep, rest = location.partition(":")
    if sep and len(head) > 1 and "/" not in head and not os.path.exists(location) and head in registry().sources:
        return head, rest
    return "file", location


def _run(args) -> int:
    query_text = read_query_file(args.query)
    limits = _limits(args)
    state_limits = _state_limits(args)
    compiled = compile_query(query_text, limits)
    construct = compiled.query.construct is not None
    fmt = args.format or ("trig" if construct else "jsonl")
    variables = [v if isinstance(v, str) else v.alias for v in compiled.projection]
    with as_usage_error(f"--format {fmt}"):
        check_format(fmt, construct=construct, variables=variables, with_events=args.events)
    if args.output == "-":          # (the convention: standard output)
        args.output = None
    _check_outputs(args, construct, variables)
    start = _parse_start(args.start) if args.start is not None else None
    if args.checkpoint_every is not None and not args.checkpoint:
        log.warning("--checkpoint-every %s: without --checkpoint it changes nothing", args.checkpoint_every)
    if start is not None and not compiled.automaton.tumbling:
        log.warning("--start %s: the query has no TUMBLING window; --start changes nothing", args.start)
    checkpoints = RunCheckpoints(args, query_text, fmt) if args.checkpoint else None
    if checkpoints is not None and checkpoints.finished:
        if not args.quiet:
            _error(f"the run checkpointed in {args.checkpoint} read its input to the end: nothing to do "
                   "(remove that directory to run it again)")
        return EXIT_OK
    if args.engine == "spark":
        require_pyspark("--engine spark")
        if limits != QueryLimits():
            raise UsageError("--max-nesting, --max-atoms, --allow-service and --service-timeout are for "
                             "--engine stream "
                             "(Spark's workers compile the query with the default limits)")
    kb_specs = list(args.kb)
    if args.kb_materialized:
        kb_specs.append(f"materialized:{args.kb_materialized}")
    graceful = None
    # A Spark run writes its results only at its end: its files appear then, whole, when it
    # completes (a run killed before leaves FILE.partial, never a FILE that looks complete;
    # one stopped by a signal, a limit or a failure leaves FILE as it was).
    staged = StagedFiles() if args.engine == "spark" else None
    running = ended = False     # (ended: complete, not stopped by a signal, a limit or a failure)
    with contextlib.ExitStack() as opened:
        if staged is not None:
            opened.callback(lambda: staged.commit() if ended else
                            _not_written(staged.discard(), args.quiet or not running))
        open_output = staged.open if staged is not None else \
            (lambda path: open(path, "w", encoding="utf-8"))
        kb = _open_kb(kb_specs, compiled, "--kb" if args.kb else "--kb-materialized") if kb_specs else None
        warnings = query_warnings(compiled, kb)
        if args.engine == "spark":
            if kb is not None:
                kb.close()                  # the pieces open their own
                kb = None
            archived = _spark_input(args, compiled)
            if not args.manifest:
                warnings += _unfed_warnings(compiled, {_stream_spec(compiled, spec)[0] for spec in args.stream})
        else:
            if kb is not None:
                opened.callback(kb.close)
            idle_flush = args.idle_flush / 1000
            items, fed, live = _stream_sources(compiled, args.stream, args.manifest, args.lateness, opened,
                                               idle_flush, checkpoints)
            # (a live input stops reading on a signal, and what it read is evaluated first)
            graceful = GracefulStop(items, args.stop_timeout or STOP_TIMEOUT) \
                if hasattr(items, "stop_reading") else None
            with as_usage_error(f"--rate {args.rate}"):
                rate = parse_rate(args.rate)
            items = replay(items, rate, idle_flush=idle_flush)
            if graceful is not None:
                items = graceful.items(items)
                opened.enter_context(graceful.armed())
            live = live or rate is not None
            warnings += _unfed_warnings(compiled, fed)
        out = NamedOutput(sys.stdout, "the results to standard output")
        going_on = False
        if args.output:
            with as_usage_error(f"--output {args.output}"):
                if checkpoints is None:
                    file = open_output(args.output)
                else:
                    file, going_on = checkpoints.open_file(args.output, "output")
            out = NamedOutput(file, f"the results to {args.output}")
            opened.callback(out.close)
            if checkpoints is not None:
                checkpoints.output = out
        target = HeaderDiscarded(out) if going_on else out
        options = {"with_events": args.events}
        if args.output:
            options["with_ids"] = False          # (exactly once: no duplicate to tell apart)
        writers = [result_sink(fmt).open(target, variables, options)]
        if going_on:
            target.discarding = False
        for spec in args.sink:
            name, _, location = spec.partition(":")
            with as_usage_error(f"--sink {spec}"):
                sink = result_sink(name)
                if sink.file_like:          # (a format: --sink csv:FILE writes FILE too)
                    file = NamedOutput(open_output(location), f"the results to {location}")
                    opened.callback(file.close)
                    writers.append(sink.open(file, variables, {"with_events": args.events}))
                else:
                    writers.append(sink.open(location, variables, {}))
        # (last: a usage error must leave an existing dead-letter file alone)
        dead = _DeadLetter(args.dead_letter, staged.open if staged is not None else None if checkpoints is None else
                           lambda path: checkpoints.open_file(path, "dead_letter")[0], args.dead_letter_limit)
        with as_usage_error(f"--dead-letter {args.dead_letter}"):
            dead.open()
        opened.callback(dead.close)
        if checkpoints is not None:
            checkpoints.dead_letter = dead.file
        for warning in warnings:
            log.warning(warning)
        progress = _Progress(args.progress if args.engine == "stream" else "never", args.quiet)

        printed = itertools.count()

        def on_reject(error: EventError) -> None:
            dead.write(error)
            if args.quiet:
                return
            shown = next(printed)
            if shown < REJECTIONS_PRINTED or log.isEnabledFor(logging.INFO):
                progress.say(f"spaseq: rejected event: {error}")
            elif shown == REJECTIONS_PRINTED:
                where = f"all are in {args.dead_letter}" if args.dead_letter else "--dead-letter FILE keeps them"
                progress.say(f"spaseq: more rejected events are counted, not printed (-v prints every one; {where})")

        if args.engine == "spark":
            engine = _spark_run(args, compiled, query_text, archived, kb_specs, start, on_reject, state_limits)
        else:
            engine = progress.engine = Engine(compiled, kb=kb, start=start, on_reject=on_reject,
                                              state_limits=state_limits)
            for gpm in compiled.gpms.values():
                log.debug("GPM %s on %s: %s", gpm.name, ", ".join(sorted(gpm.streams)),
                          engine.evaluator.describe(gpm))
            if checkpoints is not None:
                checkpoints.restore(engine, ids=not args.output or bool(args.sink))
        prepare_collector()
        running = True
        started = time.perf_counter()
        interrupted: KeyboardInterrupt | None = None
        stopped: LimitError | PluginError | None = None
        reserve = bytearray(MEMORY_RESERVE)     # given back on running out of memory (below)
        try:
            results = (engine.run(_flushing(progress.counting(items), writers,
                                            out if _results_awaited(live, out) else None,
                                            checkpoints and checkpoints.after_item,
                                            checkpoints and checkpoints.input_ended))
                       if args.engine == "stream" else engine.results())
            for result in results:
                for writer in writers:
                    writer.write(result)
        except KeyboardInterrupt as stop:
            interrupted = stop
            if checkpoints is not None and graceful is not None and graceful.drained:
                checkpoints.input_ended()   # (a live source sends none of it again)
        except (LimitError, PluginError) as e:
            stopped = e             # the results before it are written out whole, and summarised
        except MemoryError:
            # The run's state is lost; give back the reserve and the state, so that
            # the outputs can still be closed whole and the stop reported.
            del reserve
            if args.engine == "stream":
                engine.drop_state()
            stopped = LimitError(OUT_OF_MEMORY)
        finally:
            progress.done()
        for writer in writers:
            try:
                if interrupted is None:
                    writer.close()
                else:
                    _close_after_stop(writer, interrupted, graceful, args.stop_timeout or STOP_TIMEOUT)
            except PluginError as e:        # (a plugin's sink: the other outputs are closed still)
                stopped = stopped or e
        if checkpoints is not None and not interrupted and stopped is None:
            checkpoints.finish()
        ended = interrupted is None and stopped is None
    if not args.quiet:
        _summary(engine, time.perf_counter() - started, interrupted, args.on_limit)
    if stopped is not None:
        raise stopped
    return interrupted_status(interrupted) if interrupted else EXIT_OK


def _not_written(paths: list[str], quiet: bool) -> None:
    """Say which files a Spark run that did not complete left as they were."""
    if paths and not quiet:
        print(f"spaseq: not written (the run did not complete): {', '.join(paths)}", file=sys.stderr)


def _close_after_stop(writer, stop: KeyboardInterrupt, graceful: GracefulStop | None, timeout: float) -> None:
    """Close an output after a stop, within what is left of the stop's timeout (at least
    OUTPUT_TIMEOUT).  One that takes nothing that long is let go: its descriptor goes to
    /dev/null, so that what it holds is dropped, not waited for (here or at exit)."""
    since = graceful.since if graceful is not None and graceful.since is not None else time.monotonic()
    seconds = max(OUTPUT_TIMEOUT, timeout - (time.monotonic() - since))
    try:
        with at_most(seconds, getattr(stop, "signum", signal.SIGINT)):
            writer.close()
    except KeyboardInterrupt:
        log.warning("an output took nothing for %.3g s after the stop: what it had not taken is dropped",
                    seconds)
        with contextlib.suppress(AttributeError, OSError, ValueError):
            fileno = writer.out.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fileno)
            os.close(devnull)


def _check_outputs(args, construct: bool, variables: list[str]) -> None:
    """File sinks (``--sink csv:FILE``) must be in a format for the query's results;
    they, ``--output`` and ``--dead-letter`` must be neither a file the run reads
    nor each other (``paths.check_writes``)."""
    for flag, path in (("--output", args.output), ("--dead-letter", args.dead_letter)):
        if path is not None and not path.strip():
            raise UsageError(f"{flag}: give a file name" + (" (or - for standard output)" if flag == "--output"
                                                            else ""))
    outputs = [(f"{flag} {path}", path) for flag, path in (("--output", args.output),
                                                           ("--dead-letter", args.dead_letter)) if path]
    for spec in args.sink:
        name, _, location = spec.partition(":")
        with as_usage_error(f"--sink {spec}"):
            if result_sink(name).file_like:
                try:
                    check_format(name, construct=construct, variables=variables, with_events=args.events)
                except UsageError as error:     # (it names --format)
                    raise UsageError(f"--sink {spec}: {error}") from None
                if args.checkpoint:
                    raise UsageError(f"--sink {spec}: a file sink is not cut back to a checkpoint when the run "
                                     "starts again; with --checkpoint, write the file with --output")
                if not location.strip():
                    raise UsageError(f"--sink {spec}: give a file: --sink {name}:FILE")
                outputs.append((f"--sink {spec}", location))
    if not outputs:
        return
    inputs = [] if args.query == "-" else [("the query", args.query)]
    inputs += [(f"--stream {spec}", spec.partition("=")[2]) for spec in args.stream]
    inputs += [(f"--kb {spec}", spec.rpartition("=")[2]) for spec in args.kb]
    for manifest in args.manifest:
        inputs.append((f"--manifest {manifest}", manifest))
        with contextlib.suppress(SpaseqError, OSError, ValueError):     # (reading it later says what is wrong)
            inputs += [(f"a stream file of --manifest {manifest}", path) for _, path, _ in read_manifest(manifest)]
    check_writes(outputs, inputs)
    check_not_collected(outputs, [(f"--stream {spec}", spec.partition("=")[2]) for spec in args.stream],
                        is_stream_file)


def _summary(engine, elapsed: float, interrupted: KeyboardInterrupt | None, policy: str) -> None:
    s = engine.stats
    rate = s.events / elapsed if elapsed > 0 else 0
    ignored = getattr(s, "ignored", 0)
    keys = f", {s.live_keys:,} live keys (peak {s.peak_keys:,})" if engine.compiled.partition_by else ""
    dropped = f"; {s.dropped_runs:,} partial matches dropped (--on-limit {policy})" if s.dropped_runs else ""
    stopped = "" if interrupted is None else \
        f"terminated ({interrupted}) after " if isinstance(interrupted, Terminated) else "interrupted after "
    print(f"spaseq: {stopped}{s.events} events ({s.triples} triples) "
          f"in {elapsed:.2f} s, {rate:,.0f} events/s; {s.rejected} rejected{_by_reason(s)}; "
          + (f"{ignored} of streams the query does not read; " if ignored else "")
          + (f"{s.before_start:,} before --start; " if s.before_start else "")
          + f"{s.matches} matches, {s.results} results; peak {s.peak_runs} active runs{keys}{dropped}",
          file=sys.stderr)


def _by_reason(stats) -> str:
    """`` (2 syntax, 1 duplicate)``: the rejections counted by reason."""
    counts = getattr(stats, "rejected_by_reason", None)
    if not counts:
        return ""
    return " (" + ", ".join(f"{count} {reason}" for reason, count in counts.most_common()) + ")"


def _spark_input(args, compiled: CompiledQuery):
    """The archived stream files of ``--engine spark`` (checked before Spark starts)."""
    from ..spark.engine import archived_sources
    live = [flag for flag, value in (("--rate", args.rate), ("--lateness", args.lateness),
                                     ("--max-held", args.max_held),
                                     ("--max-events", args.max_events), ("--idle-timeout", args.idle_timeout),
                                     ("--stop-timeout", args.stop_timeout))
            if value is not None]
    if live:
        raise UsageError(f"{', '.join(live)}: for live input; --engine spark reads archived stream files")
    for flag, value, default in (("--max-time-jump", args.max_time_jump, "a year"),
                                 ("--max-statement", args.max_statement, "32 MiB"),
                                 ("--max-event-triples", args.max_event_triples, "1,000,000"),
                                 ("--max-term-depth", args.max_term_depth, str(DEFAULT_MAX_TERM_DEPTH))):
        if value is not None:
            raise UsageError(f"{flag}: for --engine stream (--engine spark keeps the default, {default})")
    streams = []
    for spec in args.stream:
        name, location = _stream_spec(compiled, spec)
        with as_usage_error(f"--stream {spec}"):
            if _source_scheme(location)[0] != "file" or _file_kind(location) == "special":
                raise UsageError(f"--stream {spec}: --engine spark reads archived stream files, "
                                 "not live sources, pipes or devices")
        streams.append((name, location))
    for manifest in args.manifest:
        if not os.path.exists(manifest):
            raise UsageError(f"--manifest {manifest}: no such file")
    if not streams and not args.manifest:
        raise UsageError("no input: give --stream ALIAS=PATH (or --manifest FILE)")
    with as_usage_error("--manifest" if args.manifest else "--stream"):
        return archived_sources(compiled, streams, args.manifest)


def _spark_run(args, compiled: CompiledQuery, query_text: str, sources, kb_specs: list[str], start, on_reject,
               state_limits: StateLimits):
    """The Spark evaluation of archived stream files (``--engine spark``)."""
    from ..spark.engine import SparkRun

    def progress(text: str) -> None:
        if not args.quiet:
            print(f"spaseq: spark: {text}", file=sys.stderr, flush=True)
    return SparkRun(compiled, query_text, sources, kb_specs, master=args.spark_master,
                    pieces=args.spark_pieces, start=start, on_reject=on_reject, progress=progress,
                    limits=state_limits)


def _parse_start(text: str) -> str:
    """``--start``, checked: a time as stream timestamps are written (``events.parse_time_text``).
    The engines take the text, whose kind they check against the stream's."""
    try:
        parse_time_text(text)
    except ValueError as error:
        raise UsageError(f"--start: {error}") from None     # (the error quotes the text)
    return text


class _Progress:
    """Progress on stderr (``--progress``): on a terminal, one line refreshed twice a
    second; elsewhere (a log file, a CI job), a line every PROGRESS_INTERVAL seconds,
    so that short runs print none.  Lines come from a thread of their own (see
    :meth:`counting`)."""

    def __init__(self, mode: str, quiet: bool):
        self.engine: Engine | None = None           # set once the engine exists
        shown = mode == "always" or (mode == "auto" and not quiet)
        self.live = shown and sys.stderr.isatty()
        self.enabled = shown
        self.interval = 0.5 if self.live else PROGRESS_INTERVAL
        self.started = time.monotonic()
        self.next = self.started + (0 if self.live else self.interval)
        self.shown = False
        self.lock = threading.Lock()                # one writer of stderr at a time
        self.stopped = threading.Event()
        _log_handler.progress = self

    def counting(self, items):
        """``items``, as they are: the lines come from a thread of their own, so that the
        loop pays nothing per item and a run that waits (a live input that sends nothing,
        one long batch) still shows it is alive."""
        if self.enabled:
            threading.Thread(target=self._ticking, daemon=True, name="spaseq progress").start()
        return items

    def _ticking(self) -> None:
        """A line whenever one is due, a tenth of an interval late at most."""
        late = self.interval / 10
        while not self.stopped.wait(late):
            if time.monotonic() >= self.next:
                with self.lock:
                    if self.stopped.is_set():
                        return
                    try:
                        self.tick()
                    except AttributeError:      # (the state let go on running out of memory)
                        return

    def say(self, text: str) -> None:
        """A line of the command's own on stderr, below the live line."""
        with self.lock:
            self.clear()
            sys.stderr.write(text + "\n")

    def tick(self) -> None:
        now = time.monotonic()
        self.next = now + self.interval
        s = self.engine.stats
        at = self.engine.current_time
        shown = format_time(at, self.engine.is_datetime) if at is not None else "-"
        runtime = self.engine.runtime
        keys = f"{runtime.live_keys:,} live keys, " if self.engine.compiled.partition_by else ""
        text = (f"{s.events:,} events, at {shown}, {s.results:,} results, "
                f"{runtime.active_runs:,} active runs, {keys}{s.rejected:,} rejected")
        if self.live:
            sys.stderr.write(f"\r{text} ")
            self.shown = True
        else:
            rate = s.events / (now - self.started) if now > self.started else 0
            sys.stderr.write(f"spaseq: progress: {text}; {now - self.started:,.0f} s, {rate:,.0f} events/s\n")
        sys.stderr.flush()

    def clear(self) -> None:
        if self.live and self.shown:
            sys.stderr.write("\r\033[K")
            self.shown = False

    def done(self) -> None:
        with self.lock:
            self.stopped.set()
            if self.live and self.shown:
                sys.stderr.write("\n")
                self.shown = False
        _log_handler.progress = None
