"""What checkpoints cost (docs/checkpoints.md, "What a checkpoint costs").

``python -m spaseq_plugin.bench.checkpoints`` prints two tables:

* **size and time against active runs**: a skip-till-any query whose every
  event starts a run that stays (``SEQ (A : B)`` within 30 days, no B), pushed
  N events, then snapshotted (``Engine.snapshot``), written as a checkpoint
  (JSON, fsync, rename) and restored into a new engine;
* **throughput overhead on the bench workloads**: each default workload of
  ``spaseq bench`` run over ``--events`` events in this process, taking a
  checkpoint every ``--every`` events (at a point the command would: between
  two items, no result held back), timing the checkpoints alone; the overhead
  of an interval of I seconds is then the mean checkpoint time over I (one
  checkpoint per interval), given beside the overhead measured in the run
  (time spent checkpointing over the run's time).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import pyoxigraph as ox

from ..events import Event
from ..runtime.checkpoint import DEFAULT_INTERVAL, parse_interval, write_checkpoint
from ..runtime.engine import Engine
from ..runtime.nfa_runtime import StateLimits
from .workloads import DEFAULT_WORKLOADS, WORKLOADS

_QUERY = """PREFIX : <http://ex/>
SELECT ?a ?b WITHIN 30 DAYS FROM STREAM S <http://ex/s>
WHERE { SEQ (A : B)
  DEFINE GPM A ON S { ?a :kind "a" ; :v ?v . }
  DEFINE GPM B ON S { ?b :kind "b" ; :v ?w . FILTER (?w > ?v) } }"""
_KIND, _V = ox.NamedNode("http://ex/kind"), ox.NamedNode("http://ex/v")
_INT = ox.NamedNode("http://www.w3.org/2001/XMLSchema#integer")


def _runs_engine(n: int) -> Engine:
    engine = Engine(_QUERY, state_limits=StateLimits(max_runs=None, max_state_bytes=None))
    for t in range(1, n + 1):
        a = ox.NamedNode(f"http://ex/a{t}")
        engine.push_event(Event("http://ex/s", t, (ox.Triple(a, _KIND, ox.Literal("a")),
                                                   ox.Triple(a, _V, ox.Literal(str(t), datatype=_INT)))))
    engine.idle()
    return engine


def size_and_time(counts: list[int], directory: str) -> list[dict]:
    rows = []
    for n in counts:
        engine = _runs_engine(n)
        started = time.perf_counter()
        snapshot = engine.snapshot()
        snapshotted = time.perf_counter()
        size = write_checkpoint(directory, {"query": "", "arguments": ""}, snapshot)
        written = time.perf_counter()
        again = Engine(_QUERY, state_limits=StateLimits(max_runs=None, max_state_bytes=None))
        again.restore(json.loads(json.dumps(snapshot)))
        restored = time.perf_counter()
        assert again.runtime.active_runs == engine.runtime.active_runs
        rows.append({"runs": engine.runtime.active_runs, "snapshot_ms": 1000 * (snapshotted - started),
                     "write_ms": 1000 * (written - snapshotted), "bytes": size,
                     "restore_ms": 1000 * (restored - written)})
    return rows


def overhead(names: list[str], events: int, every: int, directory: str) -> list[dict]:
    rows = []
    for name in names:
        workload = WORKLOADS[name]
        items = list(workload.events(events))
        kb = workload.kb()
        engine = Engine(workload.query(), kb=kb)
        spent = 0.0
        taken = 0
        sizes = 0
        started = time.perf_counter()
        for number, event in enumerate(items, 1):
            engine.push_event(event)
            if number % every == 0 and engine.can_snapshot:
                before = time.perf_counter()
                sizes += write_checkpoint(directory, {"query": "", "arguments": ""}, engine.snapshot())
                spent += time.perf_counter() - before
                taken += 1
        engine.close()
        total = time.perf_counter() - started
        rows.append({"workload": name, "events_per_s": len(items) / (total - spent), "peak_runs": engine.stats.peak_runs,
                     "checkpoints": taken, "mean_ms": 1000 * spent / taken if taken else 0.0,
                     "mean_bytes": sizes / taken if taken else 0, "in_run": spent / total})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spaseq_plugin.bench.checkpoints", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="1000,10000,100000", help="active runs to snapshot (comma-separated)")
    parser.add_argument("--workload", nargs="*", default=list(DEFAULT_WORKLOADS))
    parser.add_argument("--events", type=int, default=20000, help="events per workload (default 20000)")
    parser.add_argument("--every", type=int, default=1000, help="a checkpoint every N events (default 1000)")
    args = parser.parse_args(argv)
    interval = parse_interval(DEFAULT_INTERVAL)[0]
    with tempfile.TemporaryDirectory() as directory:
        print("| active runs | snapshot | write (JSON, fsync, rename) | size | bytes per run | restore |")
        print("|---:|---:|---:|---:|---:|---:|")
        for row in size_and_time([int(n) for n in args.runs.split(",")], directory):
            print(f"| {row['runs']:,} | {row['snapshot_ms']:,.1f} ms | {row['write_ms']:,.1f} ms | "
                  f"{row['bytes'] / 1e6:,.2f} MB | {row['bytes'] / max(row['runs'], 1):,.0f} | "
                  f"{row['restore_ms']:,.1f} ms |", flush=True)
        print()
        print(f"| workload | events/s | peak runs | checkpoints | mean checkpoint | mean size | "
              f"in the run (every {args.every} events) | at --checkpoint-every {DEFAULT_INTERVAL} |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for row in overhead(args.workload, args.events, args.every, directory):
            print(f"| {row['workload']} | {row['events_per_s']:,.0f} | {row['peak_runs']:,} | {row['checkpoints']} | "
                  f"{row['mean_ms']:,.2f} ms | {row['mean_bytes'] / 1e3:,.1f} kB | {100 * row['in_run']:.2f} % | "
                  f"{100 * row['mean_ms'] / 1000 / interval:.3f} % |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
