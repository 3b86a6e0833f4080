"""``spaseq bench --latency``: how long a live event takes to come out as a result.

``spaseq run`` is started as a user starts it, reading a TCP source in
listen mode (``tcp://127.0.0.1:PORT?listen=1``) with a query whose GPM
matches every event (``SEQ (A)``, one stream: each timestamp is complete as
soon as its event is read).  One producer connection sends ``events``
events at ``rate`` per second, each one TriG graph with its timestamp, and
notes when each was sent; a thread reads the results from the run's
standard output and notes when each line came.  The latency of an event is
the time from the end of its ``send`` to its result's line being read: the
socket, the reader, the engine, the JSON writer and the pipe.  The figures
are the median, the 99th percentile and the maximum, in milliseconds.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

__all__ = ["measure_latency"]

_QUERY = """PREFIX : <http://example/>
SELECT ?x
FROM STREAM S <http://example.org/s>
WHERE { SEQ (A) DEFINE GPM A ON S { ?x :kind "a" } }
"""


def _event(t: int) -> bytes:
    g = f"<http://example/e{t}>"
    return (f'{g} <http://www.w3.org/ns/prov#generatedAtTime> "{t}"^^<http://www.w3.org/2001/XMLSchema#integer> .\n'
            f'{g} {{ <http://example/x{t}> <http://example/kind> "a" . }}\n').encode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure_latency(events: int = 2000, rate: float = 500.0, timeout: float = 120.0) -> dict:
    """Send ``events`` events at ``rate`` per second to a running ``spaseq run``
    over TCP; the latency of each result, summed up (milliseconds)."""
    port = _free_port()
    with tempfile.TemporaryDirectory() as folder:
        query = os.path.join(folder, "latency.rq")
        with open(query, "w", encoding="utf-8") as f:
            f.write(_QUERY)
        process = subprocess.Popen(
            [sys.executable, "-m", "spaseq_plugin", "run", query, "-q",
             "--stream", f"S=tcp://127.0.0.1:{port}?listen=1&connections=1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        came: dict[int, float] = {}

        def read_results() -> None:
            for line in process.stdout:
                came[json.loads(line)["time"]] = time.monotonic()

        reader = threading.Thread(target=read_results, daemon=True)
        reader.start()
        try:
            sent = _produce(port, events, rate, timeout)
            deadline = time.monotonic() + timeout
            while len(came) < events and time.monotonic() < deadline and process.poll() is None:
                time.sleep(0.01)
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
    latencies = sorted((came[t] - sent[t]) * 1000 for t in sent if t in came)
    if not latencies:
        return {"events": events, "results": 0, "error": process.stderr.read() if process.stderr else "no results"}
    return {"events": events, "rate": rate, "results": len(latencies),
            "p50_ms": statistics.median(latencies),
            "p99_ms": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "max_ms": latencies[-1]}


def _produce(port: int, events: int, rate: float, timeout: float) -> dict[int, float]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    sent: dict[int, float] = {}
    with sock:
        start = time.monotonic()
        for t in range(1, events + 1):
            due = start + (t - 1) / rate
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            sock.sendall(_event(t))
            sent[t] = time.monotonic()
        time.sleep(0.5)         # (the last results come out while the connection is open)
    return sent
