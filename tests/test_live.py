"""Live sources answer promptly (streams/network.py, runtime/engine.py):
``spaseq run`` over TCP as a user runs it, with producers that stay
connected.  A result comes out as soon as its timestamp is complete (every
stream of the query has delivered it or a later one), or when the input
goes quiet (``--idle-flush``), not when the next event or the end of the
input comes; in listen mode every connection is read at once and merged in
time order.  Bounded waits everywhere; 127.0.0.1 only."""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import threading
import time

from brokers import free_port, wait_until
from helpers import A_THEN_B, EX, PREFIX
from spaseq_plugin.events import IDLE, Event
from spaseq_plugin.streams.network import open_tcp
from spaseq_plugin.streams.reorder import ReorderBuffer, merge_arrival
from spaseq_plugin.streams.replay import replay

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
INT = "http://www.w3.org/2001/XMLSchema#integer"
ONE = A_THEN_B
BOTH = PREFIX + """SELECT ?a ?b ?c WITHIN 100 SECONDS
FROM STREAM S <http://example.org/s>
FROM STREAM T <http://example.org/t>
WHERE { SEQ (A ; (B & C))
  DEFINE GPM A ON S { ?a :kind "a" }
  DEFINE GPM B ON S { ?b :kind "b" }
  DEFINE GPM C ON T { ?c :kind "c" } }
"""


def trig(t, kind: str, name: str | None = None) -> bytes:
    g = f"<{EX}{name or f'e{t}'}>"
    return (f'{g} <{PROV}> "{t}"^^<{INT}> .\n{g} {{ <{EX}x{t}> <{EX}kind> "{kind}" . }}\n').encode()


class Run:
    """``spaseq run`` in the background, its stdout lines read as they come."""

    def __init__(self, tmp_path, query: str, *streams: str, extra=()):
        (tmp_path / "q.rq").write_text(query)
        args = [sys.executable, "-m", "spaseq_plugin", "run", str(tmp_path / "q.rq"), *extra]
        for stream in streams:
            args += ["--stream", stream]
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.put((time.monotonic(), json.loads(line)))

    def result(self, timeout: float = 10):
        """(when it came, the result)."""
        return self.lines.get(timeout=timeout)

    def none_within(self, seconds: float) -> bool:
        try:
            self.lines.get(timeout=seconds)
        except queue.Empty:
            return True
        return False

    def stop(self):
        self.process.kill()
        self.process.wait(30)


def connect(port: int) -> socket.socket:
    deadline = time.monotonic() + 60
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_the_last_result_comes_out_while_the_producer_stays_connected(tmp_path):
    port = free_port()
    run = Run(tmp_path, ONE, f"S=tcp://127.0.0.1:{port}?listen=1", extra=["--idle-flush", "60000"])
    try:
        with connect(port) as producer:
            producer.sendall(trig(1, "a") + trig(2, "b"))
            sent = time.monotonic()
            came, result = run.result(timeout=30)       # the producer is still connected
            assert result["time"] == 2 and result["bindings"]["b"]["value"] == f"{EX}x2"
            assert came - sent < 5                      # (not waiting for the 60 s idle flush)
    finally:
        run.stop()


def test_a_quiet_stream_is_flushed_after_idle_flush(tmp_path):
    # T has delivered 1: S's 2 and 3 are complete only when T moves on, or goes quiet.
    port_s, port_t = free_port(), free_port()
    run = Run(tmp_path, BOTH, f"S=tcp://127.0.0.1:{port_s}?listen=1", f"T=tcp://127.0.0.1:{port_t}?listen=1",
              extra=["--idle-flush", "1000"])
    try:
        with connect(port_s) as s, connect(port_t) as t:
            t.sendall(trig(1, "c", "t1"))
            s.sendall(trig(2, "a"))
            t.sendall(trig(3, "c", "t3"))
            time.sleep(0.2)
            s.sendall(trig(3, "b"))
            came, result = run.result(timeout=30)       # 3 is complete: both streams are at 3
            assert result["time"] == 3
            # Now S at 4 with B and T quiet: the idle flush closes 4 (no C: no result), and a
            # late C at 4 is rejected.
            s.sendall(trig(4, "b"))
            assert run.none_within(2.5)
            t.sendall(trig(4, "c", "t4"))
            assert run.none_within(1.0)
    finally:
        run.stop()
    assert "late: timestamp 4 was closed when the input went quiet" in run.process.stderr.read()


def test_listen_mode_reads_connections_at_once_in_time_order(tmp_path):
    port = free_port()
    run = Run(tmp_path, ONE, f"S=tcp://127.0.0.1:{port}?listen=1")
    try:
        with connect(port) as idle_client, connect(port) as first, connect(port) as second:
            idle_client.sendall(b"# connected, and sends nothing\n")
            first.sendall(trig(1, "a") + trig(3, "a"))
            second.sendall(trig(2, "b") + trig(4, "b"))
            # merged in time order, 1 a, 2 b, 3 a, 4 b, whatever the arrival order
            # (the idle client holds nothing back for long)
            results = [run.result(timeout=30)[1] for _ in range(2)]
            assert [(r["time"], r["bindings"]["a"]["value"], r["bindings"]["b"]["value"]) for r in results] == [
                (2, f"{EX}x1", f"{EX}x2"), (4, f"{EX}x3", f"{EX}x4")]
    finally:
        run.stop()


def test_the_reorder_buffer_merges_channels_by_time():
    merge = ReorderBuffer(None, quiet_after=0.5)
    e = {t: Event("s", t, ()) for t in range(1, 9)}
    merge.open_channel(1, now=0)
    merge.open_channel(2, now=0)
    assert merge.push(e[1], 1, now=0) == []             # channel 2 has sent nothing yet
    assert merge.push(e[2], 2, now=0.1) == [e[1]]
    assert merge.push(e[5], 1, now=0.2) == [e[2]]
    assert merge.push(e[3], 2, now=0.3) == [e[3]]
    assert merge.release_quiet(now=0.4) == []
    assert merge.release_quiet(now=0.9) == [e[5]]       # channel 2 quiet: 1 goes on alone
    assert [x.reason for x in merge.push(e[4], 2, now=1.0)] == ["late"]
    assert merge.push(e[6], 1, now=1.1) == [e[6]]       # (2 is still quiet)
    assert merge.close_channel(2) == []
    assert merge.push(e[8], 1, now=1.2) == [e[8]]
    assert merge.push(e[7], 1, now=1.3)[0].reason == "late"
    assert merge.push(IDLE) == [IDLE]


def test_a_channel_that_holds_the_others_back_cannot_fill_the_memory():
    """A connection that keeps sending times a little after its first one (never
    quiet, never ahead) held back every other connection's events without bound.
    Past ``max_held`` the oldest go on early, in time order; what the slow channel
    sends behind them is late, and says why."""
    merge = ReorderBuffer(None, quiet_after=0.5, max_held=10)
    merge.open_channel("slow", now=0)
    merge.open_channel("fast", now=0)
    assert merge.push(Event("s", 1, ()), "slow", now=0) == []
    out = []
    for t in range(2, 102):
        out += merge.push(Event("s", t, ()), "fast", now=t / 1000)
        out += merge.push(Event("s", 1 + t / 1000, ()), "slow", now=t / 1000) if t % 10 == 0 else []
        assert merge.held <= 10
    times = [x.time for x in out if type(x) is Event]
    assert times == sorted(times) and len(times) + merge.held + merge.late == 101 + 10
    assert merge.passed_early >= 80 and merge.late == len(out) - len(times) >= 1
    late = merge.push(Event("s", 1.5, ()), "slow", now=0.2)
    assert late[0].reason == "late" and "at most 10 are held, --max-held" in late[0].message


def test_idle_markers_from_merged_and_replayed_inputs():
    # merged sources: IDLE only when nothing came from any of them for idle_flush
    gate = threading.Event()

    def slow():
        yield Event("s", 1, ())
        gate.wait(5)
        yield Event("s", 2, ())

    items = merge_arrival([slow(), iter([Event("t", 1, ())])], idle_flush=0.2, poll=0.05)
    got = [next(items), next(items), next(items)]
    gate.set()
    got += list(items)
    assert [item if item is IDLE else item.time for item in got] == [1, 1, IDLE, 2]
    # a replay: a wait longer than idle_flush
    clock = [0.0]
    paced = replay([Event("s", 0, ()), Event("s", 10, ())], 1.0, clock=lambda: clock[0],
                   sleep=lambda s: clock.__setitem__(0, clock[0] + s), idle_flush=0.5)
    assert [item if item is IDLE else item.time for item in paced] == [0, IDLE, 10]


def test_a_tcp_source_yields_idle_when_quiet():
    source = open_tcp("//127.0.0.1:0?listen=1&idle_flush=200&idle_timeout=20", "http://example.org/s")
    items: list = []
    threading.Thread(target=lambda: items.extend(source), daemon=True).start()
    try:
        with connect(source.port) as producer:
            producer.sendall(trig(1, "a"))
            wait_until(lambda: IDLE in items, 10, what="IDLE")
            assert isinstance(items[0], Event) and items[1] is IDLE
    finally:
        source.close()


def test_the_async_api_closes_the_pending_timestamp_on_idle():
    import asyncio

    from helpers import event
    from spaseq_plugin import Engine
    from spaseq_plugin.runtime.aio import run_async

    engine = Engine(BOTH)
    items = [event("t", 1, ':c0 :kind "c" .'), event("s", 2, ':a1 :kind "a" .'),
             event("s", 3, ':b1 :kind "b" .'), event("t", 3, ':c1 :kind "c" .'),
             event("s", 4, ':b2 :kind "b" .'), IDLE, event("t", 4, ':c2 :kind "c" .')]

    async def main():
        return [r.time async for r in run_async(engine, items)]
    assert asyncio.run(main()) == [3]
    assert engine.stats.rejected_by_reason == {"late": 1}
