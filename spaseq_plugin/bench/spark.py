"""``spaseq bench --engine spark``: what Spark buys on archived streams.

On the stock workload (the paper's V-shape query Q4, ``spaseq bench``'s
``stock-v``) written as an archive of N-Quads files (one file per slice of
time, as rotated stream archives are), each size is evaluated by the
single-process streaming engine and by ``--engine spark`` on each master
(default ``local[1]`` and ``local[2]``), all in one run on the same files,
and the results are checked to be equal.  Spark's session start-up is
measured once per master and reported apart: the table's Spark times are
for a warm session, and "pays from" says from which size Spark beats the
single process, warm and counting the start-up too::

    spaseq bench --engine spark --spark-sizes 5000,20000,80000
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field

from .digest import canonical_result
from ..language.compiler import compile_query
from ..runtime.engine import Engine
from ..streams.files import merge_streams, read_stream_file
from .workloads import SMD_STREAM, q4_v_shape, stock_events, write_nquads
from ..spark.engine import SparkRun, archived_sources
from ..spark.session import running_master, spark_session, stop_spark

DEFAULT_SIZES = (5_000, 20_000, 80_000)
DEFAULT_MASTERS = ("local[1]", "local[2]")


@dataclass
class SizeResult:
    events: int
    results: int
    single_seconds: float
    digest: str
    spark_seconds: dict[str, float] = field(default_factory=dict)
    pieces: dict[str, int] = field(default_factory=dict)


def write_archive(events: int, folder: str, files: int) -> list[str]:
    """The stock stream as ``files`` N-Quads files, each a consecutive slice of time."""
    os.makedirs(folder, exist_ok=True)
    per_file = -(-events // files)
    stream = list(stock_events(events))
    paths = []
    for k in range(files):
        part = stream[k * per_file:(k + 1) * per_file]
        if part:
            paths.append(os.path.join(folder, f"stocks-{k:03d}.nq"))
            write_nquads(part, paths[-1])
    return paths


def _digest(results) -> tuple[int, str]:
    lines = sorted(canonical_result(r) for r in results)
    return len(lines), hashlib.sha256("\n".join(lines).encode()).hexdigest()


def run_spark_bench(sizes=DEFAULT_SIZES, masters=DEFAULT_MASTERS, *, window: int = 60, strategy: str = ";",
                    files: int = 8, log=None) -> dict:
    """Measure every size on the single-process engine and on every master."""
    log = log or (lambda text: None)
    query = q4_v_shape(strategy, window)
    compiled = compile_query(query)
    rows: dict[int, SizeResult] = {}
    startup: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="spaseq-bench-spark-") as root:
        archives = {n: write_archive(n, os.path.join(root, str(n)), files) for n in sizes}
        for master in masters:
            if running_master() == master:
                startup[master] = None           # already running: nothing to measure
            else:
                stop_spark()
                started = time.perf_counter()
                spark_session(master).sparkContext.parallelize([0]).count()    # JVM and first worker
                startup[master] = time.perf_counter() - started
                log(f"{master}: session started in {startup[master]:.1f} s")
            for n in sizes:
                # the single process is measured next to each Spark run (best of them), so
                # that both see the same machine
                started = time.perf_counter()
                events = merge_streams([read_stream_file(p, SMD_STREAM) for p in archives[n]])
                count, digest = _digest(Engine(compiled).run(events))
                single = time.perf_counter() - started
                row = rows.setdefault(n, SizeResult(n, count, single, digest))
                row.single_seconds = min(row.single_seconds, single)
                sources = archived_sources(compiled, [(SMD_STREAM, p) for p in archives[n]], [])
                started = time.perf_counter()
                run = SparkRun(compiled, query, sources, [], master=master)
                count, digest = _digest(run.results())
                row.spark_seconds[master] = time.perf_counter() - started
                row.pieces[master] = run.report.pieces
                if digest != row.digest:
                    raise AssertionError(f"{master} gives other results than the single process "
                                         f"on {n} events ({count} vs {row.results})")
                log(f"{n:,} events: single process {single:.2f} s, {master} {row.spark_seconds[master]:.2f} s "
                    f"({run.report.pieces} pieces), {count:,} results")
    measured = [seconds for seconds in startup.values() if seconds is not None]
    return {"workload": "stock-v (Q4 V-shape)", "window": window, "strategy": strategy, "files": files,
            "cores": os.cpu_count(), "startup_seconds": startup,
            "cold_start_seconds": measured[0] if measured else None,    # the first one starts the JVM
            "sizes": [{"events": r.events, "results": r.results, "single_seconds": r.single_seconds,
                       "spark_seconds": r.spark_seconds, "pieces": r.pieces} for r in rows.values()]}


def pays_from(report: dict, master: str, with_startup: bool) -> int | None:
    """The smallest measured size at which ``master`` beats the single process."""
    # what a user pays per 'spaseq run --engine spark': a JVM started from nothing
    extra = (report["cold_start_seconds"] or 0.0) if with_startup else 0.0
    for size in report["sizes"]:
        if size["spark_seconds"][master] + extra < size["single_seconds"]:
            return size["events"]
    return None


def format_report(report: dict) -> str:
    masters = list(report["startup_seconds"])
    head = ["events", "results", "single s"] + [f"{m} s" for m in masters]
    if len(masters) >= 2:
        head.append(f"{masters[-1]}/{masters[0]}")
    head.append(f"{masters[-1]}/single")
    lines = [f"spark bench: {report['workload']}, WITHIN {report['window']} s, strategy "
             f"'{report['strategy']}', {report['files']} files per archive, {report['cores']} cores",
             "  ".join(f"{h:>16}" for h in head)]
    for size in report["sizes"]:
        times = [size["spark_seconds"][m] for m in masters]
        cells = [f"{size['events']:,}", f"{size['results']:,}", f"{size['single_seconds']:.2f}"]
        cells += [f"{t:.2f}" for t in times]
        if len(masters) >= 2:
            cells.append(f"{times[0] / times[-1]:.2f}x")
        cells.append(f"{size['single_seconds'] / times[-1]:.2f}x")
        lines.append("  ".join(f"{c:>16}" for c in cells))
    cold = report["cold_start_seconds"]
    if cold is not None:
        lines.append(f"Spark start-up (JVM and session): {cold:.1f} s")
    for master in masters:
        warm, started = pays_from(report, master, False), pays_from(report, master, True)
        counted = f", {_size(started)} counting the start-up" if cold is not None else ""
        lines.append(f"{master} beats the single process from {_size(warm)} events in a running session{counted}")
    return "\n".join(lines)


def _size(n: int | None) -> str:
    return f"{n:,}" if n is not None else "none of the measured"


def cmd_spark_bench(args) -> int:
    try:
        sizes = tuple(int(n) for n in args.spark_sizes.split(",")) if args.spark_sizes else DEFAULT_SIZES
    except ValueError:
        print(f"spaseq bench: --spark-sizes {args.spark_sizes}: give numbers of events, e.g. 5000,20000",
              file=sys.stderr)
        return 2
    masters = tuple(args.spark_masters.split(",")) if args.spark_masters else DEFAULT_MASTERS
    quiet = args.quiet

    def log(text: str) -> None:
        if not quiet:
            print(f"spaseq: bench: {text}", file=sys.stderr, flush=True)
    report = run_spark_bench(sizes, masters, window=args.spark_window, files=args.spark_files, log=log)
    print(format_report(report))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0
