"""``spaseq bench``: throughput, latency and memory of the engine on the
paper's workloads, against the plain baselines, with a results check.

For every (workload, strategy, window, evaluator) configuration the input
is first written to stream files (or, for the credit cards, read from the
real N-Triples file), and each measurement runs in a **fresh process**
(``multiprocessing``, spawn) that reads those files with the project's own
stream readers and pushes every event into an :class:`~spaseq_plugin.Engine`:

* ``parse``     reading and building the events only: the floor;
* ``spectra``   the engine with ``SpectraEvaluator`` (when it exists);
* ``oxigraph``  the engine with ``OxigraphEvaluator``;
* ``rdflib``    the engine with ``RdflibEvaluator``, the naive baseline; it is
                slow, so it reads only the first ``--rdflib-events`` events
                and its *rates* are compared (the others are also timed on
                that same prefix, for the ``x rdflib`` ratio).

Every evaluator must give the same multiset of results (time, bindings,
events) on the same input: the bench checks it on every configuration and
fails loudly (exit status 1) when they differ.

See docs/bench.md for the columns and the workloads.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..cli.arguments import more_than_zero, seconds
from ..cli.paths import check_writable
from ..errors import UsageError
from ..output.formats import JsonLinesWriter
from .bare import bare_parse, compare_reading
from .digest import Digest, canonical_result
from .writer import Discard
from .workloads import DEFAULT_WORKLOADS, STRATEGIES, WORKLOADS, Source, open_source

EVALUATORS = ("spectra", "oxigraph", "rdflib")
_STRATEGY_LABEL = {",": "SC", ";": "STN", ":": "STA"}
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600}


# =============================================================================
# Command line
# =============================================================================

def add_bench_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``bench`` subcommand to ``spaseq``'s subparsers."""
    p = subparsers.add_parser(
        "bench", help="benchmark the engine on the paper's workloads",
        description="Measure throughput, per-event latency, memory and active runs of the "
                    "engine on the SPASEQ paper's workloads (Q1-Q6), against a parse-only floor, "
                    "the Oxigraph evaluator and a plain rdflib evaluator, and check that every "
                    "evaluator gives the same results. See docs/bench.md.")
    p.add_argument("--workload", "-w", nargs="+", metavar="NAME", default=None,
                   help=f"workloads to run (default: {' '.join(DEFAULT_WORKLOADS)}; "
                        f"all: {' '.join(WORKLOADS)}; 'all' runs every one)")
    p.add_argument("--events", "-n", type=more_than_zero(int), default=None, metavar="N",
                   help="events per configuration (default 5000; --quick: 150)")
    p.add_argument("--windows", metavar="LIST", default=None,
                   help="window sizes, comma-separated, in seconds or with a unit "
                        "(60,300 or 1m,5m,1h; default: each workload's own three)")
    p.add_argument("--strategies", metavar="LIST", default=None,
                   help="selection strategies, comma-separated: strict (,) next (;) any (:) "
                        "(default: strict,next; 'any' runs only on windows up to the workload's "
                        "limit, it is exponential)")
    p.add_argument("--evaluators", metavar="LIST", default=",".join(EVALUATORS),
                   help="GPM evaluators, comma-separated, from spectra, oxigraph, rdflib "
                        "(default: all three; a missing one is skipped with a note)")
    p.add_argument("--rdflib-events", type=more_than_zero(int), default=None, metavar="N",
                   help="events the rdflib baseline reads at most (default 1000; --quick: 100)")
    p.add_argument("--rdflib-seconds", type=seconds, default=None, metavar="SEC",
                   help="stop feeding the rdflib baseline after SEC seconds (default 30; --quick: 5); "
                        "the results check runs every evaluator on the prefix rdflib read")
    p.add_argument("--kb-sizes", metavar="LIST", default=None,
                   help="background KB sizes in triples for workloads with a KB, comma-separated "
                        "(e.g. 10000,100000,1000000; default: each workload's own)")
    p.add_argument("--latency", action="store_true",
                   help="only measure the latency of live events: spaseq run reading a TCP source, "
                        "--events events (default 2000) sent at --latency-rate per second; p50, p99, max")
    p.add_argument("--latency-rate", type=more_than_zero(float), default=500.0, metavar="R",
                   help="--latency: events per second (default 500)")
    p.add_argument("--read", nargs="+", metavar="FILE", default=None,
                   help="only compare reading these stream files (.trig, .nq, maybe .gz) with pyoxigraph's "
                        "bare parse of the same bytes, in one run (best of --repeat, at least 3)")
    p.add_argument("--no-parse", action="store_true", help="skip the parse-only baseline")
    p.add_argument("--json", metavar="FILE", help="write every measurement as JSON here")
    p.add_argument("--plot", metavar="DIR",
                   help="write PNG charts (throughput and p50/p99 latency against window size) "
                        "into DIR; needs matplotlib")
    p.add_argument("--rss-scaling", action="store_true",
                   help="also run each workload's first configuration at 1x and 10x events and "
                        "report the ratio of peak RSS")
    p.add_argument("--repeat", type=more_than_zero(int), default=1, metavar="K",
                   help="run each configuration K times and keep the median (default 1)")
    p.add_argument("--timeout", type=seconds, default=900, metavar="SEC",
                   help="give up on one configuration after SEC seconds (default 900)")
    p.add_argument("--format", choices=("trig", "nq"), default="trig", dest="input_format",
                   help="stream file format the generated input is written in (default trig)")
    p.add_argument("--data-dir", metavar="DIR",
                   help="write the prepared stream and KB files here and keep them "
                        "(default: a temporary folder, removed at the end)")
    p.add_argument("--inline", action="store_true",
                   help="measure in this process instead of a fresh one per configuration "
                        "(faster; no RSS figures)")
    p.add_argument("--quick", action="store_true",
                   help="tiny scale (150 events, one window, small KBs): a smoke test")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.add_argument("--writer", action="store_true",
                   help="measure only the JSON-lines result writer (results/s, against json.dumps "
                        "per result; --events results, default 200000)")
    spark = p.add_argument_group("--engine spark", "what Spark buys on archived streams (docs/spark.md)")
    spark.add_argument("--engine", choices=("stream", "spark"), default="stream",
                       help="spark: time 'spaseq run --engine spark' on each master against the "
                            "single-process engine on the stock workload (Q4), checking equal results")
    spark.add_argument("--spark-sizes", metavar="LIST", default=None,
                       help="archive sizes in events, comma-separated (default 5000,20000,80000)")
    spark.add_argument("--spark-masters", metavar="LIST", default=None,
                       help="Spark masters to compare, comma-separated (default local[1],local[2])")
    spark.add_argument("--spark-window", type=more_than_zero(int), default=60, metavar="SEC",
                       help="the query's window (default 60 s: one event per second)")
    spark.add_argument("--spark-files", type=more_than_zero(int), default=8, metavar="N",
                       help="files the archive is written as (default 8; one reading task each)")
    p.set_defaults(func=run_bench)
    return p


def _read_bench(args: argparse.Namespace) -> int:
    """``spaseq bench --read FILE...``: the reader against the bare parse, per file."""
    from ..streams.files import stream_file_format
    head = ["file", "events", "quads", "rejected", "bare parse ev/s", "floor ev/s", "floor / bare",
            "reader ev/s", "reader / bare"]
    rows, report = [], []
    for path in args.read:
        try:
            stream_file_format(path)
            result = compare_reading([path], repeat=max(3, args.repeat))
        except (OSError, ValueError) as e:
            print(f"spaseq bench: --read {path}: {e}", file=sys.stderr)
            return 2
        except (SyntaxError, MemoryError) as e:     # (the bare parse and the floor read the file whole)
            why = e.msg if isinstance(e, SyntaxError) else f"a term too long for its buffer: {e}"
            print(f"spaseq bench: --read {path}: pyoxigraph cannot parse it ({why}): the bare parse "
                  "and the floor need a file without errors", file=sys.stderr)
            return 2
        report.append(result)
        rows.append([path, _fmt(result["events"]), _fmt(result["quads"]), _fmt(result["rejected"]),
                     _fmt(result["bare_eps"]), _fmt(result["floor_eps"]), _fmt(result["floor_ratio"], ".2f"),
                     _fmt(result["read_eps"]), _fmt(result["ratio"], ".2f")])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    for cells in [head, ["-" * w for w in widths], *rows]:
        print("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                        for i, (c, w) in enumerate(zip(cells, widths))).rstrip())
    print("bare parse: pyoxigraph.parse over the file's bytes, doing nothing with the quads; floor: the "
          "same parse, each graph's quads grouped into an Event with its timestamp, nothing checked; "
          "reader: the stream reader (events, timestamps, positions, order and every check), no engine; "
          "each the fastest of "
          f"{max(3, args.repeat)} runs, in turns, in this process.")
    if getattr(args, "json", None):
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


class BenchError(Exception):
    """Bad bench arguments."""


def run_bench(args: argparse.Namespace) -> int:
    """Run the benchmark ``args`` describe; 0 when every check passed, 1 when
    evaluators disagreed or a configuration failed, 2 for bad arguments."""
    if getattr(args, "json", None):         # (written at the end: a bench can take hours)
        try:
            check_writable(f"--json {args.json}", args.json)
        except UsageError as e:
            print(f"spaseq bench: {e}", file=sys.stderr)
            return 2
    if getattr(args, "engine", "stream") == "spark":
        from .spark import cmd_spark_bench
        return cmd_spark_bench(args)
    if getattr(args, "read", None):
        return _read_bench(args)
    if getattr(args, "latency", False):
        from .live import measure_latency
        result = measure_latency(args.events or 2000, args.latency_rate)
        if "error" in result:
            print(f"spaseq bench: --latency: no results: {result['error']}", file=sys.stderr)
            return 1
        print(f"live latency over TCP: {result['results']:,} of {result['events']:,} events at "
              f"{result['rate']:g}/s: p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, "
              f"max {result['max_ms']:.1f} ms (from the end of the event's send to its result's "
              "line on spaseq run's standard output)")
        return 0
    if getattr(args, "writer", False):
        from .writer import writer_report
        line = writer_report(args.events or 200_000)
        print(line)
        return 1 if "OUTPUT DIFFERS" in line else 0
    try:
        plan = _plan(args)
    except BenchError as e:
        print(f"spaseq bench: {e}", file=sys.stderr)
        return 2
    log = _Log(not getattr(args, "quiet", False))
    if getattr(args, "plot", None) and not _have_matplotlib():
        plan.notes.append("--plot needs matplotlib, which is not installed: no charts will be written "
                          "(pip install matplotlib, or the 'bench' extra)")
    for note in plan.notes:
        log.note(note)
    keep = getattr(args, "data_dir", None)
    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="spaseq-bench-"))
    try:
        report = _execute(plan, root, log)
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    print(format_table(report))
    for line in report.messages:
        print(line)
    if getattr(args, "json", None):
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report.to_json(plan), f, indent=1, default=str)
        log.note(f"wrote {args.json}")
    if getattr(args, "plot", None):
        written = plot(report, args.plot)
        if written is None:
            print("spaseq bench: --plot needs matplotlib, which is not installed "
                  "(pip install matplotlib, or the 'bench' extra); no charts written", file=sys.stderr)
        else:
            log.note(f"wrote {len(written)} chart(s) into {args.plot}")
    if report.failed:
        problems = [m for m in report.messages if not m.startswith(("note:", "  "))]
        print(f"spaseq bench: FAILED: {len(problems)} problem(s); see above", file=sys.stderr)
        return 1
    return 0


# =============================================================================
# Planning
# =============================================================================

@dataclass
class Plan:
    workloads: list[str]
    events: int
    rdflib_events: int
    rdflib_seconds: float
    windows: list[int] | None
    strategies: list[str] | None      # None: each workload's own
    evaluators: list[str]
    kb_sizes: list[int] | None
    parse: bool
    repeat: int
    timeout: float
    fmt: str
    inline: bool
    quick: bool
    rss_scaling: bool
    notes: list[str] = field(default_factory=list)

    def windows_for(self, name: str) -> list[int]:
        w = WORKLOADS[name]
        if self.windows:
            return self.windows
        return [w.windows[0]] if self.quick else list(w.windows)

    def strategies_for(self, name: str) -> list[str]:
        return self.strategies or list(WORKLOADS[name].strategies)

    def kb_sizes_for(self, name: str) -> list[int | None]:
        w = WORKLOADS[name]
        if w.make_kb is None:
            return [None]
        if self.kb_sizes:
            return list(self.kb_sizes)
        return [min(w.kb_size, 2_000)] if self.quick else [w.kb_size]


def _plan(args) -> Plan:
    quick = bool(getattr(args, "quick", False))
    names = getattr(args, "workload", None) or list(DEFAULT_WORKLOADS)
    if "all" in names:
        names = list(WORKLOADS)
    for name in names:
        if name not in WORKLOADS:
            raise BenchError(f"unknown workload {name!r} (known: {', '.join(WORKLOADS)})")
    events = getattr(args, "events", None) or (150 if quick else 5000)
    rdflib_events = getattr(args, "rdflib_events", None) or (100 if quick else 1000)
    rdflib_seconds = getattr(args, "rdflib_seconds", None) or (5.0 if quick else 30.0)
    windows = _parse_windows(args.windows) if getattr(args, "windows", None) else None
    strategies = _parse_strategies(args.strategies) if getattr(args, "strategies", None) else None
    notes: list[str] = []
    evaluators = []
    for name in _split(getattr(args, "evaluators", None) or ",".join(EVALUATORS)):
        if name not in EVALUATORS:
            raise BenchError(f"unknown evaluator {name!r} (use {', '.join(EVALUATORS)})")
        problem = evaluator_problem(name)
        if problem:
            notes.append(f"skipping the {name} evaluator: {problem}")
            continue
        if name not in evaluators:
            evaluators.append(name)
    if not evaluators and getattr(args, "no_parse", False):
        raise BenchError("nothing to measure: no evaluator available and --no-parse")
    kb_sizes = None
    if getattr(args, "kb_sizes", None):
        try:
            kb_sizes = [int(float(x)) for x in _split(args.kb_sizes)]
        except (ValueError, OverflowError):     # (OverflowError: inf)
            raise BenchError(f"--kb-sizes {args.kb_sizes}: expected numbers of triples") from None
        if min(kb_sizes, default=1) < 1:
            raise BenchError(f"--kb-sizes {args.kb_sizes}: must be positive")
    repeat = max(1, int(getattr(args, "repeat", 1) or 1))
    return Plan(names, events, min(rdflib_events, events), rdflib_seconds, windows, strategies, evaluators, kb_sizes,
                not getattr(args, "no_parse", False), repeat, float(getattr(args, "timeout", 900) or 900),
                getattr(args, "input_format", "trig") or "trig", bool(getattr(args, "inline", False)),
                quick, bool(getattr(args, "rss_scaling", False)), notes)


def _split(text: str) -> list[str]:
    return [x.strip() for x in text.replace(" ", ",").split(",") if x.strip()]


def _parse_windows(text: str) -> list[int]:
    out = []
    for item in _split(text):
        number = item.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = item[len(number):] or "s"
        if unit not in _UNITS:
            raise BenchError(f"--windows {item}: unknown unit {unit!r} (use ms, s, m, h)")
        try:
            seconds = float(number) * _UNITS[unit]
        except ValueError:
            raise BenchError(f"--windows {item}: not a number") from None
        if seconds <= 0:
            raise BenchError(f"--windows {item}: must be positive")
        out.append(int(seconds) if seconds == int(seconds) else seconds)
    return out


def _parse_strategies(text: str) -> list[str]:
    """``strict,next,any`` (or sc, stn, sta), or the operators themselves
    written together: ``';:'``, ``,``."""
    text = text.strip()
    if text and not any(ch.isalpha() for ch in text):
        items = [ch for ch in text if not ch.isspace()]
    else:
        items = _split(text)
    out = []
    for item in items:
        op = STRATEGIES.get(item.lower())
        if op is None:
            raise BenchError(f"--strategies: unknown strategy {item!r} (use strict, next, any, or , ; :)")
        if op not in out:
            out.append(op)
    if not out:
        raise BenchError("--strategies: no strategy given")
    return out


def evaluator_problem(name: str) -> str | None:
    """Why evaluator ``name`` cannot be used here (``None``: it can)."""
    if name != "spectra":
        return None
    try:
        module = importlib.import_module("spaseq_plugin.evaluators.spectra")
    except ModuleNotFoundError as e:
        if e.name and e.name.endswith("evaluators.spectra"):
            return "spaseq_plugin.evaluators.spectra does not exist yet"
        return f"cannot import spaseq_plugin.evaluators.spectra: {e}"
    except Exception as e:  # noqa: BLE001 - any import failure means: skip it
        return f"cannot import spaseq_plugin.evaluators.spectra: {type(e).__name__}: {e}"
    if not hasattr(module, "SpectraEvaluator"):
        return "spaseq_plugin.evaluators.spectra has no SpectraEvaluator"
    return None


def make_evaluator(name: str, kb):
    """A GPM evaluator by bench name (``spectra``, ``oxigraph``, ``rdflib``)."""
    if name == "oxigraph":
        from ..evaluators.oxigraph import OxigraphEvaluator
        return OxigraphEvaluator(kb)
    if name == "rdflib":
        from ..evaluators.rdflib import RdflibEvaluator
        return RdflibEvaluator(kb)
    if name == "spectra":
        from ..evaluators.spectra import SpectraEvaluator     # type: ignore[import-not-found]
        return SpectraEvaluator(kb=kb)
    raise ValueError(f"unknown evaluator {name!r}")


# =============================================================================
# One measurement (runs in a fresh process)
# =============================================================================

@dataclass
class Task:
    workload: str
    strategy: str | None          # None: parse-only
    window: int | None
    evaluator: str                # "parse", "spectra", "oxigraph", "rdflib"
    query: str | None
    source: Source
    limit: int
    kb: list[str]
    kb_size: int | None
    check_limit: int | None       # also digest the results of this many events
    progress: bool = True
    time_budget: float | None = None   # stop reading after this many seconds
    write_results: bool = False        # write each result as a JSON line (into a discarding sink)


class _Histogram:
    """Per-event latencies in geometric buckets (2 % wide): constant memory."""

    _SCALE = 50.0

    def __init__(self):
        self.counts: Counter = Counter()
        self.n = 0
        self.total = 0

    def add(self, ns: int) -> None:
        self.counts[int(math.log(ns) * self._SCALE) if ns > 1 else 0] += 1
        self.n += 1
        self.total += ns

    def quantile(self, q: float) -> float | None:
        """The q-quantile in microseconds (bucket midpoint)."""
        if not self.n:
            return None
        rank = q * (self.n - 1)
        seen = 0
        for bucket in sorted(self.counts):
            seen += self.counts[bucket]
            if seen > rank:
                return math.exp((bucket + 0.5) / self._SCALE) / 1000.0
        return None


def _current_rss_kb() -> int | None:
    """The process's resident set now (Linux /proc), or None."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


class _RssSampler:
    """Peak resident set above a baseline: sampled from /proc every 256
    events and at the end; ``getrusage`` peaks where /proc is missing."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.base = _current_rss_kb() if enabled else None
        self.base_max = _rss_kb() if enabled else None
        self.peak = self.base
        self.count = 0

    def sample(self) -> None:
        self.count += 1
        if self.base is not None and not self.count & 255:
            now = _current_rss_kb()
            if now is not None and now > self.peak:
                self.peak = now

    def result(self) -> tuple[float | None, float | None]:
        """(peak above the baseline, absolute peak) in MB."""
        if not self.enabled:
            return None, None
        top = _rss_kb()
        if self.base is not None:
            now = _current_rss_kb()
            if now is not None and now > self.peak:
                self.peak = now
            above = (self.peak - self.base) / 1024
        else:
            above = (top - self.base_max) / 1024 if top is not None and self.base_max is not None else None
        return above, (top / 1024 if top is not None else None)


def _rss_kb() -> int | None:
    try:
        import resource
    except ImportError:            # not on this platform
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss // 1024 if sys.platform == "darwin" else rss


def measure(task: Task, measure_rss: bool = True) -> dict:
    """Run one configuration here and now; a dict of metrics."""
    # everything the run needs is imported before the RSS baseline
    from ..language.compiler import compile_query
    from ..runtime.engine import Engine, prepare_collector
    from ..errors import EventError
    from ..kb import KnowledgeBase
    from ..evaluators import oxigraph as _oxigraph, rdflib as _rdflib  # noqa: F401
    if task.evaluator == "spectra":
        importlib.import_module("spaseq_plugin.evaluators.spectra")
    rss = _RssSampler(measure_rss)
    out: dict = {"workload": task.workload, "strategy": task.strategy, "window": task.window,
                 "evaluator": task.evaluator, "kb_size": task.kb_size, "limit": task.limit}
    label = f"{task.workload} {_STRATEGY_LABEL.get(task.strategy, '')} {task.window or ''} {task.evaluator}"
    progress = _WorkerProgress(label, task.progress)

    if task.evaluator == "bare":
        out.update(bare_parse(task.source, task.limit))
    else:
        reading = task.evaluator == "parse"
        compiled = None if reading else compile_query(task.query)
        started_kb = time.perf_counter()
        kb = KnowledgeBase.from_specs(task.kb) if task.kb else None
        out["kb_load_seconds"] = time.perf_counter() - started_kb

        def run(limit: int, progress, budget: float | None = None) -> dict:
            # parse-only goes through this very loop, with an engine that does
            # nothing: x parse then measures the engine alone, not the bench's own
            # per-event work (unsubtracted clocks, the caches its bookkeeping uses)
            engine = _Reading() if reading else Engine(compiled, kb=kb,
                                                        evaluator=make_evaluator(task.evaluator, kb))
            writer = JsonLinesWriter(Discard(), [v if isinstance(v, str) else v.alias
                                                 for v in compiled.projection]) if task.write_results else None
            hist, digest = _Histogram(), Digest()
            runs_sum = runs_peak = 0
            # The bench's own bookkeeping (latency histogram, results check, memory
            # sampling, progress) is timed and left out of the rate: the results
            # check alone costs more per result than the engine and the writer.
            apparatus = 0
            clock = time.perf_counter_ns
            prepare_collector()     # as `spaseq run` does before its loop
            started = time.perf_counter()
            deadline = clock() + int(budget * 1e9) if budget else None
            for item in open_source(task.source, limit):
                if isinstance(item, EventError):
                    engine.reject(item)
                    continue
                if deadline is not None and clock() > deadline:
                    break
                t0 = clock()
                results = engine.push_event(item)
                t1 = clock()
                if writer is not None:
                    for r in results:
                        writer.write(r)
                t2 = clock()
                hist.add(t1 - t0)
                active = engine.runtime.active_runs
                runs_sum += active
                if active > runs_peak:
                    runs_peak = active
                for r in results:
                    digest.add(r)
                rss.sample()
                progress.tick(hist.n, active)
                apparatus += clock() - t2
            t0 = clock()
            results = engine.close()
            close_ns = clock() - t0
            if writer is not None:
                for r in results:
                    writer.write(r)
                writer.close()
            t2 = clock()
            for r in results:
                digest.add(r)
            apparatus += clock() - t2
            seconds = time.perf_counter() - started - apparatus / 1e9
            s = engine.stats
            return {"events": s.events, "triples": s.triples, "rejected": s.rejected,
                    "matches": s.matches, "results": s.results, "seconds": seconds,
                    "engine_seconds": (hist.total + close_ns) / 1e9, "apparatus_seconds": apparatus / 1e9,
                    "eps": s.events / seconds if seconds > 0 else None,
                    "tps": s.triples / seconds if seconds > 0 else None,
                    "p50_us": hist.quantile(0.5), "p99_us": hist.quantile(0.99),
                    "mean_us": hist.total / hist.n / 1000 if hist.n else None,
                    "peak_runs": max(runs_peak, s.peak_runs),
                    "mean_runs": runs_sum / hist.n if hist.n else 0.0,
                    "digest": digest.to_json()}

        measured = run(task.limit, progress, task.time_budget)
        if reading:
            measured = {k: measured[k] for k in _READING_METRICS}
        out.update(measured)
        out["rss_mb"], out["peak_rss_mb"] = rss.result()
        if not reading:
            checked = out if task.check_limit is None or task.check_limit >= task.limit else \
                run(task.check_limit, _WorkerProgress(label + " (check prefix)", False))
            out["check"] = {k: checked[k] for k in ("events", "digest", "eps", "seconds")}
        progress.done()
        return out
    out["rss_mb"], out["peak_rss_mb"] = rss.result()
    progress.done()
    return out


_READING_METRICS = ("events", "triples", "rejected", "seconds", "apparatus_seconds", "eps", "tps")


class _Reading:
    """The engine of a parse-only measurement: takes each event, does nothing."""

    def __init__(self):
        from ..runtime.engine import RunStats
        self.stats = RunStats()
        self.runtime = self             # (active_runs, as the bench reads it off a runtime)
        self.active_runs = 0

    def push_event(self, event) -> list:
        self.stats.events += 1
        self.stats.triples += len(event.triples)
        return []

    def reject(self, error) -> None:
        self.stats.rejected += 1

    def close(self) -> list:
        return []


class _WorkerProgress:
    """A line on stderr every 10 s of a long measurement."""

    def __init__(self, label: str, enabled: bool):
        self.label = label
        self.enabled = enabled
        self.start = self.last = time.monotonic()
        self.count = 0
        self.shown = False

    def tick(self, events: int, runs: int | None) -> None:
        if not self.enabled:
            return
        self.count += 1
        if self.count & 255:
            return
        now = time.monotonic()
        if now - self.last < 10:
            return
        self.last = now
        rate = events / (now - self.start)
        extra = f", {runs:,} active runs" if runs is not None else ""
        print(f"spaseq bench:   ... {self.label}: {events:,} events, {rate:,.0f} ev/s{extra}",
              file=sys.stderr, flush=True)
        self.shown = True

    def done(self) -> None:
        pass


def _worker(task: Task, conn) -> None:
    try:
        conn.send(("ok", measure(task)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        import traceback
        conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}"))
    finally:
        conn.close()


def run_task(task: Task, inline: bool, timeout: float) -> dict:
    """Measure ``task`` in a fresh spawned process (or here with ``inline``)."""
    if inline:
        try:
            return measure(task, measure_rss=False)
        except Exception as e:  # noqa: BLE001
            return _failed(task, f"{type(e).__name__}: {e}")
    import multiprocessing
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_worker, args=(task, sender), daemon=True)
    process.start()
    sender.close()
    try:
        if receiver.poll(timeout):
            status, payload = receiver.recv()
        else:
            status, payload = "error", f"timeout after {timeout:.0f} s"
    except EOFError:
        status, payload = "error", "the measuring process died"
    except KeyboardInterrupt:               # Ctrl-C, SIGTERM: the measurement stops with the bench
        process.terminate()
        raise
    finally:
        receiver.close()
        process.join(5)
        if process.is_alive():
            process.terminate()
            process.join(5)
    if status == "ok":
        return payload
    return _failed(task, payload if process.exitcode in (0, None) or "timeout" in payload
                   else f"{payload} (exit status {process.exitcode})")


def _failed(task: Task, message: str) -> dict:
    return {"workload": task.workload, "strategy": task.strategy, "window": task.window,
            "evaluator": task.evaluator, "kb_size": task.kb_size, "limit": task.limit,
            "error": message.strip()}


# =============================================================================
# Running the plan
# =============================================================================

@dataclass
class Report:
    rows: list[dict] = field(default_factory=list)
    parse: dict[tuple, dict] = field(default_factory=dict)        # (workload, kb_size) -> parse row
    bare: dict[tuple, dict] = field(default_factory=dict)         # (workload, kb_size) -> bare parse row
    checks: list[dict] = field(default_factory=list)
    rss_scaling: list[dict] = field(default_factory=list)
    inputs: dict[str, dict] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    failed: bool = False
    seconds: float = 0.0

    def to_json(self, plan: Plan) -> dict:
        import pyoxigraph
        import rdflib
        return {
            "meta": {"python": sys.version.split()[0], "platform": platform.platform(),
                     "cpus": os.cpu_count(), "pyoxigraph": pyoxigraph.__version__,
                     "rdflib": rdflib.__version__, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                     "seconds": self.seconds},
            "plan": {k: v for k, v in dataclasses.asdict(plan).items()},
            "inputs": {k: {kk: vv for kk, vv in v.items() if kk != "source"} for k, v in self.inputs.items()},
            "parse": list(self.parse.values()),
            "bare_parse": list(self.bare.values()),
            "results": self.rows,
            "checks": self.checks,
            "rss_scaling": self.rss_scaling,
            "messages": self.messages,
            "failed": self.failed,
        }


class _Log:
    def __init__(self, enabled: bool):
        self.enabled = enabled

    def note(self, text: str) -> None:
        if self.enabled:
            print(f"spaseq bench: {text}", file=sys.stderr, flush=True)


def _windows(plan: Plan, name: str, strategy: str) -> list[int]:
    """The windows a strategy runs on: skip-till-any only up to the workload's
    limit (the largest allowed window when none of the asked ones is)."""
    windows = plan.windows_for(name)
    if strategy != ":":
        return windows
    limit = WORKLOADS[name].any_max_window
    return [w for w in windows if w <= limit] or [limit]


def _configs(plan: Plan) -> list[tuple[str, str, int, int | None]]:
    out = []
    for name in plan.workloads:
        for kb_size in plan.kb_sizes_for(name):
            for strategy in plan.strategies_for(name):
                for window in _windows(plan, name, strategy):
                    out.append((name, strategy, window, kb_size))
    return out


def _execute(plan: Plan, root: Path, log: _Log) -> Report:
    report = Report()
    started = time.perf_counter()
    configs = _configs(plan)
    skipped_any = sorted({n for n in plan.workloads
                          if ":" in plan.strategies_for(n) and _windows(plan, n, ":") != plan.windows_for(n)})
    if skipped_any:
        report.messages.append("note: skip-till-any (STA) is exponential in the window: it ran only on "
                               "windows up to " + ", ".join(f"{WORKLOADS[n].any_max_window} s ({n})"
                                                            for n in skipped_any))
    inputs_read = {(c[0], c[3]) for c in configs}
    total = len(configs) * len(plan.evaluators) + (
        len(inputs_read) + sum(WORKLOADS[n].writes_stream_files() for n, _ in inputs_read) if plan.parse else 0)
    if plan.rss_scaling:        # each workload once, 1x and 10x, parse-only and every engine evaluator
        total += 2 * len({c[0] for c in configs}) * (
            int(plan.parse) + sum(e != "rdflib" for e in plan.evaluators))
    done = 0
    inputs: dict[tuple, dict] = {}

    def prepared(name: str, kb_size: int | None, events: int) -> dict:
        key = (name, kb_size, events)
        if key not in inputs:
            log.note(f"preparing {name}: {events:,} events" + (f", KB of {kb_size:,} triples" if kb_size else ""))
            folder = root / f"{name}-{events}" / (f"kb{kb_size}" if kb_size else "")
            inputs[key] = WORKLOADS[name].prepare(events, folder, plan.fmt, kb_size)
            report.inputs[f"{name} {events} {kb_size or ''}".strip()] = inputs[key]
        return inputs[key]

    def run(task: Task, paired: Task | None = None) -> dict:
        """``task`` measured ``plan.repeat`` times: the median run.  With ``paired``
        (the workload's parse-only task), each run comes right after a run of it,
        and x parse is the median of the pairs' ratios: this machine's speed
        drifts by more than the 25 % that x parse is about, between runs made
        a minute apart."""
        nonlocal done
        done += 1
        what = f"[{done}/{total}] {task.workload} " + (
            f"{_STRATEGY_LABEL[task.strategy]} {task.window}s " if task.strategy else "") + (
            f"KB {task.kb_size:,} " if task.kb_size else "") + task.evaluator
        log.note(what + " ...")
        rows, pairs = [], []
        for _ in range(plan.repeat):
            before = run_task(paired, plan.inline, plan.timeout) if paired is not None else {}
            rows.append(run_task(task, plan.inline, plan.timeout))
            if before.get("eps") and rows[-1].get("eps"):
                pairs.append(before["eps"] / rows[-1]["eps"])
        good = [r for r in rows if "error" not in r]
        if not good:
            row = rows[0]
            log.note(f"{what}: FAILED: {row['error'].splitlines()[0]}")
            return row
        good.sort(key=lambda r: r.get("eps") or 0)
        row = good[len(good) // 2]
        if plan.repeat > 1:
            row["repeats_eps"] = [r.get("eps") for r in good]
        if pairs:
            row["x_parse"] = statistics.median(pairs)
            row["x_parse_pairs"] = pairs
        log.note(f"{what}: {row['events']:,} events in {row['seconds']:.2f} s, "
                 f"{row['eps'] or 0:,.0f} ev/s" + (f", {row['matches']:,} matches" if "matches" in row else ""))
        return row

    def parse_task(name: str, kb_size: int | None, info: dict) -> Task:
        return Task(name, None, None, "parse", None, info["source"], plan.events, [], kb_size, None, log.enabled)

    seen_parse = set()
    for name, strategy, window, kb_size in configs:
        w = WORKLOADS[name]
        info = prepared(name, kb_size, plan.events)
        if plan.parse and (name, kb_size) not in seen_parse:
            seen_parse.add((name, kb_size))
            row = run(parse_task(name, kb_size, info))
            report.parse[(name, kb_size)] = row
            if "error" in row:
                report.failed = True
                report.messages.append(f"FAILED: {name} parse-only: {row['error']}")
            if info["source"].kind == "files":
                report.bare[(name, kb_size)] = run(Task(name, None, None, "bare", None, info["source"],
                                                        info["events"], [], kb_size, None, log.enabled))
        query = w.query(strategy, window)
        check_limit = plan.events
        group = []
        # rdflib first: the others are checked on the prefix it managed to read
        for evaluator in sorted(plan.evaluators, key=lambda e: e != "rdflib"):
            if evaluator == "rdflib":
                task = Task(name, strategy, window, evaluator, query, info["source"], plan.rdflib_events,
                            info["kb"], kb_size, None, log.enabled, plan.rdflib_seconds)
            else:
                task = Task(name, strategy, window, evaluator, query, info["source"], plan.events, info["kb"],
                            kb_size, check_limit, log.enabled, write_results=w.write_results)
            parse = report.parse.get((name, kb_size))
            row = run(task, parse_task(name, kb_size, info) if evaluator == "spectra" and parse
                      and "error" not in parse else None)
            if evaluator == "rdflib" and "error" not in row:
                check_limit = min(plan.events, row["events"])
            row["paper"] = w.paper
            row["real"] = info["real"]
            group.append(row)
            if "error" in row:
                report.failed = True
                report.messages.append(f"FAILED: {name} {_STRATEGY_LABEL[strategy]} {window}s "
                                       f"{evaluator}: {row['error']}")
        group.sort(key=lambda r: EVALUATORS.index(r["evaluator"]))
        report.rows.extend(group)
        _ratios(group, report.parse.get((name, kb_size)), report.bare.get((name, kb_size)))
        check = _check(group, name, strategy, window, kb_size)
        if check:
            report.checks.append(check)
            if not check["equal"]:
                report.failed = True
                report.messages.extend(_explain_mismatch(check, query, info, plan))
    if plan.rss_scaling:
        report.rss_scaling = _rss_scaling(plan, configs, prepared, run, report)
    report.seconds = time.perf_counter() - started
    return report


def _ratios(group: list[dict], parse: dict | None, bare: dict | None = None) -> None:
    by = {r["evaluator"]: r for r in group if "error" not in r}
    ox = by.get("oxigraph")
    rd = by.get("rdflib")
    for r in by.values():
        if ox and ox.get("eps") and r.get("eps"):
            r["x_oxigraph"] = r["eps"] / ox["eps"]
        if rd and rd.get("eps") and r.get("check", {}).get("eps"):
            r["x_rdflib"] = (r["eps"] if r["evaluator"] == "rdflib" else r["check"]["eps"]) / rd["eps"]
        if parse and parse.get("eps") and r.get("eps") and "x_parse" not in r:     # (not paired)
            r["x_parse"] = parse["eps"] / r["eps"]
        if bare:
            r["x_bare"] = _ratio(r, bare)


def _ratio(row: dict | None, floor: dict | None) -> float | None:
    """``row``'s ev/s over ``floor``'s."""
    if not row or not floor or not row.get("eps") or not floor.get("eps"):
        return None
    return row["eps"] / floor["eps"]


def _check(group: list[dict], name: str, strategy: str, window: int, kb_size) -> dict | None:
    digests = {r["evaluator"]: r["check"] for r in group if "error" not in r and "check" in r}
    if len(digests) < 2:
        return None
    values = {(d["events"], d["digest"]["count"], d["digest"]["hash"]) for d in digests.values()}
    return {"workload": name, "strategy": strategy, "window": window, "kb_size": kb_size,
            "equal": len(values) == 1,
            "events": {e: d["events"] for e, d in digests.items()},
            "results": {e: d["digest"]["count"] for e, d in digests.items()},
            "hashes": {e: d["digest"]["hash"] for e, d in digests.items()}}


def _explain_mismatch(check: dict, query: str, info: dict, plan: Plan) -> list[str]:
    lines = [f"RESULTS DIFFER: {check['workload']} {_STRATEGY_LABEL[check['strategy']]} {check['window']}s: "
             + ", ".join(f"{e} {n} results on {check['events'][e]} events" for e, n in check["results"].items())]
    try:
        limit = min(check["events"].values())
        evaluators = list(check["results"])
        collected = {e: collect_results(query, info["source"], info["kb"], e, limit) for e in evaluators}
        first = evaluators[0]
        for other in evaluators[1:]:
            only_a = collected[first] - collected[other]
            only_b = collected[other] - collected[first]
            for label, diff in ((f"only {first}", only_a), (f"only {other}", only_b)):
                for text, n in list(diff.items())[:5]:
                    lines.append(f"  {label} (x{n}): {text}")
    except Exception as e:  # noqa: BLE001 - the mismatch itself is already reported
        lines.append(f"  (could not list the differences: {type(e).__name__}: {e})")
    return lines


def collect_results(query: str, source: Source, kb_files: list[str], evaluator: str, limit: int) -> Counter:
    """The multiset of canonical results of one evaluator on the first ``limit`` events."""
    from ..runtime.engine import Engine
    from ..kb import KnowledgeBase
    kb = KnowledgeBase.from_specs(kb_files) if kb_files else None
    engine = Engine(query, kb=kb, evaluator=make_evaluator(evaluator, kb))
    return Counter(canonical_result(r) for r in engine.run(open_source(source, limit)))


def _rss_scaling(plan: Plan, configs, prepared, run, report: Report) -> list[dict]:
    """Each workload's first configuration at 1x and 10x events, with every
    engine evaluator but rdflib: the ratio of peak RSS above the baseline."""
    engines = ["parse"] if plan.parse else []       # the input reader's own growth, for comparison
    engines += [e for e in plan.evaluators if e != "rdflib"]
    out = []
    done = set()
    for name, strategy, window, kb_size in configs:
        if name in done:
            continue
        done.add(name)
        w = WORKLOADS[name]
        for evaluator in engines:
            rows = []
            for n in (plan.events, plan.events * 10):
                info = prepared(name, kb_size, n)
                if evaluator == "parse":
                    task = Task(name, None, None, "parse", None, info["source"], n, [], kb_size, None, True)
                else:
                    task = Task(name, strategy, window, evaluator, w.query(strategy, window),
                                info["source"], n, info["kb"], kb_size, None, True)
                rows.append(run(task))
            entry = {"workload": name, "strategy": strategy, "window": window, "evaluator": evaluator,
                     "events": [r.get("events") for r in rows], "rss_mb": [r.get("rss_mb") for r in rows],
                     "peak_rss_mb": [r.get("peak_rss_mb") for r in rows],
                     "peak_runs": [r.get("peak_runs") for r in rows], "eps": [r.get("eps") for r in rows],
                     "errors": [r["error"] for r in rows if "error" in r]}
            a, b = entry["rss_mb"]
            entry["ratio"] = (b / a) if a and b is not None and a > 0 else None
            out.append(entry)
    return out


# =============================================================================
# Output
# =============================================================================

def _fmt(value, spec: str = ",.0f", none: str = "-") -> str:
    if value is None:
        return none
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def format_table(report: Report) -> str:
    """The results as a plain-text table, one line per measurement."""
    head = ["workload", "Q", "strat", "window", "KB", "evaluator", "events", "matches", "ev/s",
            "triples/s", "p50 us", "p99 us", "RSS MB", "runs pk", "runs avg", "x rdflib", "x oxigraph",
            "x parse", "x bare"]
    lines = []
    shown_parse = set()
    for row in report.rows:
        key = (row["workload"], row.get("kb_size"))
        parse = report.parse.get(key)
        bare = report.bare.get(key)
        if parse is not None and key not in shown_parse:
            shown_parse.add(key)
            lines.append([row["workload"], WORKLOADS[row["workload"]].paper, "", "",
                          _fmt(row.get("kb_size")), "parse-only",
                          _fmt(parse.get("events")), "", _fmt(parse.get("eps")), _fmt(parse.get("tps")),
                          "", "", _fmt(parse.get("rss_mb"), ".1f"), "", "", "", "", "1.0",
                          _fmt(_ratio(parse, bare), ".3f")]
                         if "error" not in parse else
                         [row["workload"], "", "", "", "", "parse-only", "FAILED"] + [""] * 12)
            if bare is not None:
                lines.append([row["workload"], "", "", "", _fmt(row.get("kb_size")), "bare parse",
                              _fmt(bare.get("events")), "", _fmt(bare.get("eps")), _fmt(bare.get("tps")),
                              "", "", "", "", "", "", "", "", "1.0"]
                             if "error" not in bare else
                             [row["workload"], "", "", "", "", "bare parse", "FAILED"] + [""] * 12)
        if "error" in row:
            lines.append([row["workload"], row.get("paper", ""), _STRATEGY_LABEL.get(row["strategy"], ""),
                          _fmt(row["window"]), _fmt(row.get("kb_size")), row["evaluator"],
                          "FAILED: " + row["error"].splitlines()[0][:60]] + [""] * 12)
            continue
        lines.append([
            row["workload"], row.get("paper", ""), _STRATEGY_LABEL[row["strategy"]], _fmt(row["window"]),
            _fmt(row.get("kb_size")), row["evaluator"], _fmt(row["events"]), _fmt(row["matches"]),
            _fmt(row["eps"]), _fmt(row["tps"]), _fmt(row["p50_us"], ",.0f"), _fmt(row["p99_us"], ",.0f"),
            _fmt(row.get("rss_mb"), ".1f"), _fmt(row["peak_runs"]), _fmt(row["mean_runs"], ",.1f"),
            _fmt(row.get("x_rdflib"), ",.1f"), _fmt(row.get("x_oxigraph"), ".2f"), _fmt(row.get("x_parse"), ",.2f"),
            _fmt(row.get("x_bare"), ".3f"),
        ])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)] if lines else [len(h) for h in head]
    right = set(range(6, len(head))) | {3, 4}

    def render(cells):
        out = []
        for i, (cell, width) in enumerate(zip(cells, widths)):
            out.append(str(cell).rjust(width) if i in right else str(cell).ljust(width))
        return "  ".join(out).rstrip()

    text = [render(head), render(["-" * w for w in widths])]
    previous = None
    for cells in lines:
        if previous is not None and cells[0] != previous:
            text.append("")
        previous = cells[0]
        text.append(render(cells))
    text.append("")
    text.append("ev/s, triples/s: whole input (reading the stream files + engine); p50/p99: time per pushed "
                "event; RSS: peak above the process baseline; x rdflib: speed-up over the rdflib evaluator "
                "on the same prefix; x oxigraph: ev/s over the oxigraph evaluator's; x parse: times slower "
                "than parse-only (spectra: the median over its runs of each against a parse-only run made "
                "just before it); x bare: ev/s as a fraction of pyoxigraph's bare parse of the same files. "
                "rdflib rows read only the first events (column events).")
    if report.checks:
        equal = sum(c["equal"] for c in report.checks)
        text.append(f"results check: {equal}/{len(report.checks)} configurations give the same results "
                    f"with every evaluator" + ("" if equal == len(report.checks) else "  <-- MISMATCH"))
    for entry in report.rss_scaling:
        a, b = entry["rss_mb"]
        what = "parse-only" if entry["evaluator"] == "parse" else \
            f"{_STRATEGY_LABEL[entry['strategy']]} {entry['window']}s {entry['evaluator']}"
        text.append(f"RSS scaling: {entry['workload']} {what}: {_fmt(entry['events'][0])} events {_fmt(a, '.1f')} MB, "
                    f"{_fmt(entry['events'][1])} events {_fmt(b, '.1f')} MB: ratio {_fmt(entry['ratio'], '.2f')} "
                    + (f"(peak runs {_fmt(entry['peak_runs'][0])} / {_fmt(entry['peak_runs'][1])}, "
                       if entry["evaluator"] != "parse" else "(")
                    + f"ev/s {_fmt(entry['eps'][0])} / {_fmt(entry['eps'][1])})"
                    + (f" FAILED: {entry['errors'][0].splitlines()[0]}" if entry["errors"] else ""))
    for key, info in report.inputs.items():
        if info.get("real"):
            text.append(f"data {key}: {info.get('note')}" + (" (repeated)" if info.get("cycled") else ""))
    text.append(f"total {report.seconds:.0f} s")
    return "\n".join(text)


def plot(report: Report, directory: str) -> list[str] | None:
    """PNG charts like the paper's Fig. 15/16: per workload and strategy,
    throughput (triples/s) and p50/p99 latency against window size, one line
    per evaluator.  ``None`` when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    os.makedirs(directory, exist_ok=True)
    groups: dict[tuple, list[dict]] = {}
    for row in report.rows:
        if "error" not in row:
            groups.setdefault((row["workload"], row["strategy"], row.get("kb_size")), []).append(row)
    written = []
    for (name, strategy, kb_size), rows in sorted(groups.items(), key=lambda kv: str(kv[0])):
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
        for index, evaluator in enumerate(EVALUATORS):
            mine = sorted((r for r in rows if r["evaluator"] == evaluator), key=lambda r: r["window"])
            if not mine:
                continue
            windows = [r["window"] for r in mine]
            color = f"C{index}"
            ax1.plot(windows, [r["tps"] for r in mine], marker="o", color=color, label=evaluator)
            ax2.plot(windows, [r["p50_us"] for r in mine], marker="o", color=color, label=f"{evaluator} p50")
            ax2.plot(windows, [r["p99_us"] for r in mine], marker="x", linestyle="--", color=color,
                     label=f"{evaluator} p99")
        parse = report.parse.get((name, kb_size))
        if parse and parse.get("tps"):
            ax1.axhline(parse["tps"], color="grey", linestyle=":", label="parse-only")
        title = f"{name} ({WORKLOADS[name].paper}), {_STRATEGY_LABEL[strategy]}" + (f", KB {kb_size:,}" if kb_size else "")
        ax1.set(title=f"{title}: throughput", xlabel="window (s)", ylabel="triples/s", yscale="log")
        ax2.set(title=f"{title}: latency per event", xlabel="window (s)", ylabel="µs", yscale="log")
        ax1.legend(fontsize=8)
        ax2.legend(fontsize=8)
        fig.tight_layout()
        path = os.path.join(directory, f"{name}-{_STRATEGY_LABEL[strategy]}" + (f"-kb{kb_size}" if kb_size else "")
                            + ".png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """``python -m spaseq_plugin.bench ...`` (the same as ``spaseq bench ...``)."""
    parser = argparse.ArgumentParser(prog="spaseq")
    sub = parser.add_subparsers(dest="command")
    add_bench_parser(sub)
    args = parser.parse_args(["bench", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)
