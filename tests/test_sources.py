"""Live stream sources (stdin, TCP, MQTT), replay pacing, the reorder buffer
and the async API.  Network tests use 127.0.0.1 only, real servers (a TCP
server in a thread, a mosquitto broker process), bounded waits."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import subprocess
import sys
import threading
import time
from decimal import Decimal

import paho.mqtt.client as paho
import pytest

from brokers import EventServer, free_port, mosquitto, mosquitto_program, wait_until  # noqa: F401 (fixtures)
from helpers import A_THEN_B, EX, PREFIX, event, rows
from spaseq_plugin import Engine
from spaseq_plugin.runtime.aio import aiter_blocking, merge_async, open_source_async, reorder_async, run_async
from spaseq_plugin.errors import EventError, SpaseqError
from spaseq_plugin.events import Event
from spaseq_plugin.plugins import call_configure, stream_source
from spaseq_plugin.streams.mqtt import open_mqtt_source
from spaseq_plugin.streams.network import (
    TextReader, backoff_delay, open_stdin, open_tcp, read_text, sniff_format, split_location)
from spaseq_plugin.streams.reorder import ReorderBuffer, merge_arrival, parse_lateness, reorder
from spaseq_plugin.streams.replay import parse_rate, replay

S = "http://example.org/s"
T = "http://example.org/t"
PROV = "http://www.w3.org/ns/prov#generatedAtTime"
INT = "http://www.w3.org/2001/XMLSchema#integer"

QUERY = A_THEN_B

QUERY_TWO = PREFIX + """SELECT ?a ?b WITHIN 100 SECONDS
FROM STREAM S <http://example.org/s>
FROM STREAM T <http://example.org/t>
WHERE { SEQ (A ; B)
  DEFINE GPM A ON S { ?a :kind "a" }
  DEFINE GPM B ON T { ?b :kind "b" } }
"""


def trig(t, kind: str = "a", name: str | None = None) -> str:
    """One event as TriG (absolute IRIs, so each chunk stands alone)."""
    g = f"<{EX}{name or f'e{t}'}>"
    return (f'{g} <{PROV}> "{t}"^^<{INT}> .\n'
            f'{g} {{ <{EX}x{t}> <{EX}kind> "{kind}" . }}\n')


def nquads(t, kind: str = "a") -> str:
    g = f"<{EX}e{t}>"
    return (f'{g} <{PROV}> "{t}"^^<{INT}> .\n'
            f'<{EX}x{t}> <{EX}kind> "{kind}" {g} .\n')


def times(items) -> list:
    return [item.time if isinstance(item, Event) else "error" for item in items]


class Collector:
    """Iterates a source in a thread, keeping what it yields."""

    def __init__(self, source):
        self.source = source
        self.items: list = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            for item in self.source:
                self.items.append(item)
        except BaseException as e:     # noqa: BLE001
            self.error = e

    @property
    def events(self) -> list[Event]:
        return [i for i in self.items if isinstance(i, Event)]

    def wait_events(self, count: int, timeout: float = 10.0):
        wait_until(lambda: len(self.events) >= count, timeout, what=f"{count} events")

    def join(self, timeout: float = 10.0):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the source did not end"
        return self


# --------------------------------------------------------------------------
# Text reading and format sniffing
# --------------------------------------------------------------------------

@pytest.mark.parametrize("head, at_end, expected", [
    (b"@prefix : <http://e/> .\n", False, "TriG"),
    (b"PREFIX : <http://e/>\n", False, "TriG"),
    (b"<http://g> { <http://s> <http://p> <http://o> . }\n", False, "TriG"),
    (b"<http://s> <http://p> <http://o> <http://g> .\n", False, "N-Quads"),
    (b"# comment\n\n<http://s> <http://p> <http://o> .\n<http://s> <http://p> <http://o> <http://g> .\n",
     False, "N-Quads"),
    (b"<http://s> <http://p> <http://o> .\n", False, None),     # a triple: both formats
    (b"<http://s> <http://p> <http://o> .\n", True, "TriG"),
    (b"<http://s> <http://p> <http://o> <http://g> .", False, None),   # line not complete yet
    (b"", True, "TriG"),
])
def test_sniff_format(head, at_end, expected):
    found = sniff_format(head, at_end)
    assert (found.name if found is not None else None) == expected


def test_read_text_trig_and_nquads_with_positions():
    text = trig(1) + '<http://example/e2> { <http://example/x2> :oops . }\n' + trig(3, "b")
    items = read_text(text.encode(), "here", S)
    assert times(items) == [1, "error", 3]
    assert items[1].position == "here:3" and "syntax error" in items[1].message
    assert items[2].position == "here:5" and items[2].stream == S
    items = read_text((nquads(1) + "<http://bad> oops\n" + nquads(2, "b")).encode(), "nq", S)
    assert times(items) == [1, "error", 2]
    assert items[1].position == "nq:3"


def test_text_reader_pause_completes_the_event_being_read():
    out = []
    reader = TextReader("live", S)
    seen_at_pause = []

    def chunks():
        yield trig(1).encode()
        reader.idle()                       # the sender paused
        seen_at_pause.append(times(out))
        yield trig(2).encode()
    reader.run(chunks(), out.append)
    assert seen_at_pause == [[1]]           # event 1 did not wait for event 2
    assert times(out) == [1, 2]


def test_split_location_keeps_mqtt_wildcards():
    assert split_location("mqtt", "//127.0.0.1:1884/a/+/b/#?qos=0") == ("127.0.0.1", 1884, "a/+/b/#", {"qos": "0"})
    with pytest.raises(SpaseqError, match="no host"):
        split_location("tcp", "//:5000")


def test_backoff_is_exponential_and_bounded():
    assert [backoff_delay(n, 0.5, 3) for n in range(1, 6)] == [0.5, 1, 2, 3, 3]


def test_unknown_option_is_an_error():
    with pytest.raises(SpaseqError, match="unknown option 'retry'"):
        open_tcp("//127.0.0.1:1?retry=3", S)
    with pytest.raises(SpaseqError, match="max_events"):
        open_tcp("//127.0.0.1:1?max_events=0", S)


@pytest.mark.parametrize("option", ["connect_timeout=1e300", "backoff=1e300", "max_backoff=1e10",
                                    "idle_timeout=1e300", "idle_flush=1e300", "connect_timeout=nan"])
def test_a_wait_no_thread_can_wait_is_an_option_error(option):
    """Past threading.TIMEOUT_MAX seconds a wait raises OverflowError: connect_timeout
    and backoff did, as an internal error once the source had started (waits.py)."""
    with pytest.raises(SpaseqError, match=r"must be a number of seconds more than 0, at most 1e\+09"):
        open_tcp(f"//127.0.0.1:1?{option}", S)


def test_stop_reading_ends_a_source_waiting_to_reconnect():
    """It waited out its backoff (here a minute) before it saw the cut."""
    source = open_tcp(f"//127.0.0.1:{free_port()}?backoff=60&max_backoff=60&retries=3", S, report=lambda m: None)
    collected = Collector(source)
    wait_until(lambda: source.failures == 1, what="the first attempt to fail")
    started = time.monotonic()
    source.stop_reading("stopped")
    collected.join()
    assert collected.error is None and collected.items == []
    assert time.monotonic() - started < 1


def test_run_configuration_gives_live_defaults():
    try:
        call_configure({"max_events": 7, "idle_timeout": 2.5})
        source = open_tcp("//127.0.0.1:1", S)
        assert (source.options.max_events, source.options.idle_timeout) == (7, 2.5)
        assert open_tcp("//127.0.0.1:1?max_events=3", S).options.max_events == 3
    finally:
        call_configure({})
    assert open_tcp("//127.0.0.1:1", S).options.max_events is None


def test_sources_are_registered():
    assert {"stdin", "tcp", "mqtt"} <= {stream_source(s).scheme for s in ("stdin", "tcp", "mqtt")}


# --------------------------------------------------------------------------
# Standard input
# --------------------------------------------------------------------------

def test_stdin_events_arrive_before_the_input_ends():
    read_end, write_end = os.pipe()
    reports = []
    with os.fdopen(read_end, "rb", buffering=0) as reader, os.fdopen(write_end, "wb", buffering=0) as writer:
        source = open_stdin("?idle_timeout=10", S, fileobj=reader, report=reports.append)
        collected = Collector(source)
        writer.write(trig(1).encode())
        collected.wait_events(1)            # still open: the pause completed it
        writer.write((trig(2, "b") + trig(1, "b", name="late")).encode())
        writer.close()
        collected.join()
    assert times(collected.items) == [1, 2, "error"]
    assert "older than" in collected.items[2].message and collected.items[2].position == "stdin:6"
    assert source.events == 2 and source.rejected == 1


def test_stdin_explicit_format_and_max_events():
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb") as reader, os.fdopen(write_end, "wb", buffering=0) as writer:
        reports = []
        source = open_stdin("nq?max_events=2&idle_timeout=10", S, fileobj=reader, report=reports.append)
        writer.write((nquads(1) + nquads(2) + nquads(3)).encode())
        collected = Collector(source).join()    # ends after 2 events, stdin still open
    assert times(collected.items) == [1, 2]
    assert source.ended_because == "2 events read (max_events): ending"
    assert reports == ["stdin: 2 events read (max_events): ending"]
    with pytest.raises(SpaseqError, match="format must be"):
        open_stdin("turtle", S)


@pytest.mark.parametrize("text", [
    "@prefix : <http://example/> .\n" + trig(1) + trig(2, "b"),
    nquads(1) + nquads(2, "b"),
], ids=["trig", "nquads"])
def test_cli_reads_standard_input(tmp_path, text):
    (tmp_path / "q.rq").write_text(QUERY)
    done = subprocess.run([sys.executable, "-m", "spaseq_plugin", "run", str(tmp_path / "q.rq"),
                           "--stream", "S=-"], input=text + "<http://example/e9> { bad\n",
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert '"b": {"type": "uri", "value": "http://example/x2"}' in done.stdout
    assert "rejected event: stdin:" in done.stderr and "1 rejected" in done.stderr


# --------------------------------------------------------------------------
# TCP
# --------------------------------------------------------------------------

def test_tcp_client_reconnects_with_backoff_after_the_server_dies():
    server = EventServer().start()
    reports: list[str] = []
    source = open_tcp(f"//127.0.0.1:{server.port}?retries=30&backoff=0.05&max_backoff=0.2"
                      "&max_events=6&idle_timeout=20", S, report=reports.append)
    try:
        collected = Collector(source)
        server.wait_for_clients(1)
        server.send(trig(1) + trig(2) + trig(3, "b"))
        collected.wait_events(3)
        server.stop()                               # the server dies mid-stream
        wait_until(lambda: any("cannot connect" in r for r in reports), 10, what="a failed attempt")
        server.start()                              # and comes back on the same port
        server.wait_for_clients(2)
        server.send(trig(4) + trig(5, "b") + trig(6, "b"))
        collected.join(10)
    finally:
        source.close()
        server.stop()
    assert collected.error is None
    assert times(collected.items) == [1, 2, 3, 4, 5, 6]
    assert [e.position for e in collected.events] == [f"{source.name}#1:2", f"{source.name}#1:4",
                                                       f"{source.name}#1:6", f"{source.name}#2:2",
                                                       f"{source.name}#2:4", f"{source.name}#2:6"]
    assert source.reconnects == 1 and source.failures >= 2
    name = f"tcp://127.0.0.1:{server.port}"
    assert reports[0] == f"{name}: connection closed by the other side; retrying in 0.05 s (attempt 1 of 30, 1 failure so far)"
    assert reports[1].startswith(f"{name}: cannot connect: Connection refused; retrying in 0.1 s (attempt 2 of 30")
    assert f"{name}: reconnected (1 reconnect so far)" in reports
    assert reports[-1] == f"{name}: 6 events read (max_events): ending"


def test_tcp_client_gives_up_after_the_retries():
    server = EventServer().start()
    reports: list[str] = []
    source = open_tcp(f"//127.0.0.1:{server.port}?retries=2&backoff=0.05", S, report=reports.append)
    collected = Collector(source)
    server.wait_for_clients(1)
    server.send(trig(1) + trig(2))
    collected.wait_events(2)
    started = time.monotonic()
    server.stop()
    collected.join(10)
    assert time.monotonic() - started < 5
    assert collected.error is None and times(collected.items) == [1, 2]
    assert source.ended_because.endswith("giving up after 2 retries (0 reconnects so far)")
    assert len(reports) == 3 and source.failures == 3


def test_tcp_client_that_never_connects_is_an_error():
    source = open_tcp(f"//127.0.0.1:{free_port()}?retries=1&backoff=0.01", S, report=lambda m: None)
    with pytest.raises(SpaseqError, match=r"cannot connect: Connection refused \(gave up after 1 retry\)"):
        list(source)


def test_tcp_idle_timeout_ends_a_silent_stream():
    server = EventServer().start()
    try:
        source = open_tcp(f"//127.0.0.1:{server.port}?idle_timeout=0.3", S, report=lambda m: None)
        started = time.monotonic()
        assert list(source) == []
        assert 0.25 < time.monotonic() - started < 5
        assert source.ended_because == "no input for 0.3 s (idle_timeout): ending"
    finally:
        server.stop()


@pytest.mark.parametrize("fmt, half", [
    ("trig", f'<{EX}e2> <{PROV}> "2"^^<{INT}> .\n<{EX}e2> {{ <{EX}x2> <{EX}kind> "a" .\n'),
    ("nq", f'<{EX}e2> <{PROV}> "2"^^<{INT}> .\n<{EX}x2> <{EX}kind> "a" <{EX}e'),
])
def test_an_idle_timeout_rejects_the_event_a_sender_left_half_sent(fmt, half):
    """It was dropped without a word: the reader held the text when the source
    stopped reading, and nothing was said of it."""
    first = trig(1) if fmt == "trig" else nquads(1)
    server = EventServer(greeting=(first + half).encode()).start()
    try:
        source = open_tcp(f"//127.0.0.1:{server.port}?idle_timeout=0.5", S, report=lambda m: None)
        started = time.monotonic()
        items = list(source)
        assert time.monotonic() - started < 5
    finally:
        server.stop()
    assert times(items) == [1, "error"]
    assert items[1].reason == "truncated"
    assert items[1].message == "no input for 0.5 s (idle_timeout): the text from line 4 on is lost"
    assert items[1].position == f"{source.name}#1:4"
    assert items[1].text == half.splitlines(keepends=True)[1]   # (for the dead-letter file: to send it again)
    assert (source.events, source.rejected) == (1, 1)
    assert source.ended_because == "no input for 0.5 s (idle_timeout): ending"


def test_stop_reading_passes_on_everything_received_then_the_half_sent_event():
    """A graceful stop (``spaseq run`` on a signal): the source stops reading, and what
    it had received, queued ahead of a consumer that had not taken it, is not lost,
    however long the consumer takes over it (here 3 s, past the 2 s the producer has
    to hand over the rest)."""
    count = 2000
    server = EventServer(greeting=("".join(trig(t) for t in range(1, count + 1)) + trig(count + 1)[:70]).encode())
    server.start()
    try:
        source = open_tcp(f"//127.0.0.1:{server.port}", S, report=lambda m: None)
        source.start()
        assert wait_until(lambda: source._queue.qsize() >= count, timeout=30)
        source.stop_reading("the run was stopped (SIGTERM)")
        items = []
        for item in source:
            items.append(item)
            time.sleep(0.0015)
    finally:
        server.stop()
    assert times(items) == list(range(1, count + 1)) + ["error"]
    assert items[-1].reason == "truncated"
    assert items[-1].message == f"the run was stopped (SIGTERM): the text from line {2 * count + 1} on is lost"


def test_merge_arrival_stop_reading_ends_a_source_that_cannot_stop_itself():
    """An endless source without ``stop_reading`` ends after the item it is on; a
    live one passes on what it received; then the merge ends."""
    def endless():
        t = 0
        while True:
            t += 1
            yield ev(t, "t")
            time.sleep(0.01)

    server = EventServer(greeting=(trig(1) + trig(2)[:70]).encode()).start()
    try:
        live = open_tcp(f"//127.0.0.1:{server.port}", S, report=lambda m: None)
        merged = merge_arrival([endless(), live])
        first = [next(merged) for _ in range(5)]
        merged.stop_reading("stopped")
        started = time.monotonic()
        rest = list(merged)
        assert time.monotonic() - started < 5
    finally:
        server.stop()
    items = first + rest
    assert sum(1 for item in items if isinstance(item, Event) and item.stream == S) == 1
    errors = [item for item in items if not isinstance(item, Event)]
    assert [(e.reason, e.message) for e in errors] == [("truncated", "stopped: the text from line 3 on is lost")]


def test_a_connection_on_a_descriptor_past_1024_is_read():
    """select(2) fails on a descriptor of 1024 or more (FD_SETSIZE): with that many
    files open, each connection was 'lost' at once, its events with it."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the hard limit on open files here is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    server = EventServer(greeting=(trig(1) + trig(2)).encode()).start()
    try:
        source = open_tcp(f"//127.0.0.1:{server.port}?idle_timeout=0.5", S, report=lambda m: None)
        items = list(source)
    finally:
        server.stop()
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert times(items) == [1, 2] and source.failures == 0


def test_a_listening_source_reads_at_most_max_connections_at_once():
    """A thread per connection, without bound: a thousand idle connections starved
    the engine of the interpreter's lock (a stop took minutes).  Past the bound, a
    sender waits in the listen backlog until a connection closes."""
    source = open_tcp("//127.0.0.1:0?listen=1&max_connections=2&idle_timeout=3", S, report=lambda m: None)
    collected = Collector(source)
    producers = [socket.create_connection(("127.0.0.1", source.port), timeout=5) for _ in range(3)]
    try:
        wait_until(lambda: source.connection_count == 2, what="two connections accepted")
        time.sleep(0.5)
        assert source.connection_count == 2
        producers[0].close()
        wait_until(lambda: source.connection_count == 3, what="the third once the first closed")
    finally:
        for producer in producers:
            producer.close()
    collected.join()
    assert collected.error is None
    with pytest.raises(SpaseqError, match="max_connections= is for listen=1"):
        open_tcp("//127.0.0.1:1?max_connections=2", S)


def test_connection_idle_timeout_frees_the_slot_of_a_silent_connection():
    """With every max_connections slot held by connections that send nothing, the
    producers behind them were never read.  connection_idle_timeout closes such a
    connection, rejecting the event it left half sent."""
    reports: list[str] = []
    source = open_tcp("//127.0.0.1:0?listen=1&connections=2&max_connections=1&connection_idle_timeout=0.5",
                      S, report=reports.append)
    collected = Collector(source)
    silent = socket.create_connection(("127.0.0.1", source.port), timeout=5)
    silent.sendall((trig(1) + trig(2)[:40]).encode())
    wait_until(lambda: source.connection_count == 1, what="the silent connection accepted")
    behind = socket.create_connection(("127.0.0.1", source.port), timeout=5)
    behind.sendall(trig(3).encode())
    try:
        wait_until(lambda: source.connection_count == 2, what="the connection behind it accepted")
        behind.close()
        collected.join()
    finally:
        silent.close()
        behind.close()
    assert collected.error is None
    assert sorted(item.time for item in collected.items if isinstance(item, Event)) == [1, 3]
    errors = [item for item in collected.items if not isinstance(item, Event)]
    assert [(e.reason, e.message) for e in errors] == [
        ("truncated", "nothing sent for 0.5 s (connection_idle_timeout): the text from line 3 on is lost")]
    assert f"{source.name}: connection 1: nothing sent for 0.5 s (connection_idle_timeout): closed" in reports
    with pytest.raises(SpaseqError, match="connection_idle_timeout= is for listen=1"):
        open_tcp("//127.0.0.1:1?connection_idle_timeout=2", S)


def test_an_idle_timeout_after_whole_events_rejects_nothing():
    server = EventServer(greeting=(trig(1) + "# the sender pauses here\n\n# ").encode()).start()
    try:
        source = open_tcp(f"//127.0.0.1:{server.port}?idle_timeout=0.3", S, report=lambda m: None)
        assert times(list(source)) == [1]
        assert source.rejected == 0
    finally:
        server.stop()


def test_an_idle_timeout_rejects_half_sent_events_of_each_listened_connection():
    source = open_tcp("//127.0.0.1:0?listen=1&idle_timeout=0.5", S, report=lambda m: None)
    collected = Collector(source)
    producers = []
    for text in (trig(1) + trig(2)[:40], nquads(3) + nquads(4)[:-8]):
        producer = socket.create_connection(("127.0.0.1", source.port), timeout=5)
        producer.sendall(text.encode())
        producers.append(producer)
    try:
        collected.join()
    finally:
        for producer in producers:
            producer.close()
    assert collected.error is None
    errors = [item for item in collected.items if not isinstance(item, Event)]
    assert sorted(e.time for e in collected.events) == [1, 3]
    assert sorted((e.position, e.reason) for e in errors) == [
        (f"{source.name}#1:3", "truncated"), (f"{source.name}#2:4", "truncated")]


def test_tcp_retries_0_ends_when_the_server_hangs_up_and_rejects_bad_input():
    greeting = (trig(1) + "<http://example/e2> { <http://example/x2> :nope . }\n" + trig(3, "b")
                + trig(3, "b", name="again")).encode()
    server = EventServer(greeting=greeting).start()
    try:
        source = open_tcp(f"//127.0.0.1:{server.port}?retries=0&idle_timeout=10", S, report=lambda m: None)
        collected = Collector(source)
        server.wait_for_clients(1)
        collected.wait_events(2)
        server.hang_up()
        collected.join()
    finally:
        server.stop()
    items = collected.items
    assert times(items) == [1, "error", 3, "error"]
    assert items[1].position == f"{source.name}#1:3" and "syntax error" in items[1].message
    assert items[3].position == f"{source.name}#1:7" and "duplicate timestamp 3" in items[3].message
    assert source.ended_because == "connection closed by the other side: ending (retries=0)"


def test_tcp_listening_source_reads_producer_connections():
    reports: list[str] = []
    source = open_tcp("//127.0.0.1:0?listen=1&connections=2&idle_timeout=10", S, report=reports.append)
    port = source.port
    assert port != 0
    collected = Collector(source)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as producer:
        producer.sendall((nquads(1) + nquads(2, "b")).encode())     # N-Quads, sniffed
    wait_until(lambda: len(collected.events) == 2, 10, what="the first producer's events")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as producer:
        producer.sendall(("@prefix : <http://example/> .\n" + trig(2) + trig(3, "b")).encode())
    collected.join()
    assert times(collected.items) == [1, 2, "error", 3]     # time 2 again: a duplicate
    assert collected.items[2].position == f"tcp://127.0.0.1:{port}#2:3"
    assert reports[-1] == f"tcp://127.0.0.1:{port}: 2 connection(s) read (connections): ending"


def test_cli_reads_a_tcp_stream(tmp_path):
    (tmp_path / "q.rq").write_text(QUERY)
    server = EventServer(greeting=(trig(1) + trig(2, "b")).encode()).start()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "spaseq_plugin", "run", str(tmp_path / "q.rq"),
             "--stream", f"S=tcp://127.0.0.1:{server.port}?retries=0&idle_timeout=30"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        server.wait_for_clients(1, timeout=60)
        time.sleep(0.3)
        server.hang_up()
        out, err = process.communicate(timeout=60)
    finally:
        server.stop()
    assert process.returncode == 0, err
    assert '"b": {"type": "uri", "value": "http://example/x2"}' in out
    assert "connection closed by the other side: ending (retries=0)" in err


# --------------------------------------------------------------------------
# MQTT (a real mosquitto broker)
# --------------------------------------------------------------------------

def publisher(broker) -> paho.Client:
    client = paho.Client(paho.CallbackAPIVersion.VERSION2)
    client.reconnect_delay_set(0.05, 0.2)
    client.connect("127.0.0.1", broker.port)
    client.loop_start()
    wait_until(client.is_connected, 10, what="the publisher to connect")
    return client


def test_mqtt_source_one_event_per_message_and_reconnects_after_broker_restart(mosquitto):
    reports: list[str] = []
    source = open_mqtt_source(f"//127.0.0.1:{mosquitto.port}/sensors/+/events?backoff=0.05&max_backoff=0.2"
                              "&retries=50&max_events=5&idle_timeout=30", S, report=reports.append)
    collected = Collector(source)
    assert source.connected.wait(10)
    client = publisher(mosquitto)
    try:
        for t, kind in ((1, "a"), (2, "b")):
            client.publish("sensors/k1/events", trig(t, kind), qos=1).wait_for_publish(5)
        client.publish("sensors/k1/events", '{"not": "rdf"}', qos=1).wait_for_publish(5)
        client.publish("sensors/k2/events", nquads(3, "b"), qos=1).wait_for_publish(5)
        client.publish("other/topic", trig(99), qos=1).wait_for_publish(5)
        collected.wait_events(3)
        mosquitto.stop()                                    # the broker crashes
        wait_until(lambda: source.failures >= 2, 10, what="failed reconnection attempts")
        mosquitto.start()
        wait_until(lambda: source.reconnects == 1 and source.subscriptions == 2, 15, what="the new subscription")
        wait_until(client.is_connected, 15, what="the publisher to reconnect")
        for t in (4, 5):
            client.publish("sensors/k1/events", trig(t, "b"), qos=1).wait_for_publish(5)
        collected.join(15)
    finally:
        client.loop_stop()
        source.close()
    assert collected.error is None
    assert times(collected.items) == [1, 2, "error", 3, 4, 5]
    error = collected.items[2]
    assert error.position == f"{source.name}#3:1" and "syntax error" in error.message
    name = f"mqtt://127.0.0.1:{mosquitto.port}/sensors/+/events"
    assert reports[0].startswith(f"{name}: connection lost (")
    assert "retrying in 0.05 s (attempt 1 of 50, 1 failure so far)" in reports[0]
    assert any(r.startswith(f"{name}: cannot connect to the broker; retrying in 0.1 s (attempt 2 of 50")
               for r in reports)
    assert f"{name}: reconnected (1 reconnect so far)" in reports
    assert reports[-1] == f"{name}: 5 events read (max_events): ending"


def test_mqtt_source_gives_up_when_the_broker_is_gone(mosquitto):
    reports: list[str] = []
    source = open_mqtt_source(f"//127.0.0.1:{mosquitto.port}/ev?backoff=0.05&retries=2", S,
                              report=reports.append)
    collected = Collector(source)
    assert source.connected.wait(10)
    mosquitto.stop()
    collected.join(15)
    assert collected.error is None and collected.items == []
    assert source.ended_because.endswith("giving up after 2 retries (0 reconnects so far)")


def test_mqtt_source_that_never_connects_is_an_error(mosquitto_program):
    source = open_mqtt_source(f"//127.0.0.1:{free_port()}/ev?backoff=0.05&retries=1", S, report=lambda m: None)
    collected = Collector(source).join(15)
    assert isinstance(collected.error, SpaseqError)
    assert "cannot connect to the broker (gave up after 1 retry)" in str(collected.error)


def test_mqtt_options_are_checked():
    with pytest.raises(SpaseqError, match="no topic"):
        open_mqtt_source("//127.0.0.1:1883", S)
    with pytest.raises(SpaseqError, match="qos must be"):
        open_mqtt_source("//127.0.0.1:1883/t?qos=3", S)
    with pytest.raises(SpaseqError, match="needs a client_id"):
        open_mqtt_source("//127.0.0.1:1883/t?clean=0", S)
    for keepalive in (0, 65536):      # (65536 and over: a traceback in paho's thread, and no connection)
        with pytest.raises(SpaseqError, match="keepalive must be from 1 to 65535 seconds"):
            open_mqtt_source(f"//127.0.0.1:1883/t?keepalive={keepalive}", S)
    long = "x" * 65536                # (a traceback in paho's thread; a topic: no word at all)
    for location, name in ((f"//127.0.0.1:1883/t?client_id={long}", "client_id"), (f"//127.0.0.1:1883/{long}", "topic"),
                           ("//127.0.0.1:1883/t%00u", "topic")):
        with pytest.raises(SpaseqError, match=f"{name} must be at most 65535 bytes of UTF-8, without NUL"):
            open_mqtt_source(location, S)


# --------------------------------------------------------------------------
# Replay at the recorded pace
# --------------------------------------------------------------------------

class FakeClock:
    def __init__(self):
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


def paced(times_, rate):
    clock = FakeClock()
    items = [event("s", t, ":x :kind 'a' .") for t in times_]
    out = list(replay(items, rate, clock=clock, sleep=clock.sleep))
    assert out == items
    return clock.sleeps


def test_replay_sleeps_by_recorded_time():
    assert paced([10, 11, 13, 13, 20], 1.0) == [1.0, 2.0, 7.0]
    assert paced([10, 11, 13, 13, 20], 10) == [0.1, 0.2, 0.7]
    assert paced([Decimal("0.5"), 1, Decimal("1.25")], 0.5) == [1.0, 0.5]
    assert paced([1, 2, 3], None) == []


def test_replay_waits_a_long_gap_a_day_at_a_time():
    """A year at --rate 0.001 is a sleep of 3e10 s: time.sleep refused it (an internal
    error); at --rate 1e-300 the wait is endless (infinite), still without error."""
    assert paced([0, 365 * 86400], 0.001) == [86400.0] * 365000
    clock = FakeClock()

    def sleep(seconds):
        clock.sleep(seconds)
        if len(clock.sleeps) == 1000:
            raise InterruptedError("a thousand days later")
    with pytest.raises(InterruptedError):
        list(replay([event("s", t, ":x :kind 'a' .") for t in (0, 1)], 1e-300, clock=clock, sleep=sleep))
    assert set(clock.sleeps) == {86400.0}


def test_replay_catches_up_and_passes_errors_at_once():
    clock = FakeClock()
    items = [event("s", 1, ":x :kind 'a' ."), EventError("bad", "f:1"), event("s", 3, ":x :kind 'a' .")]

    def slow_consumer():
        for item in replay(items, 1.0, clock=clock, sleep=clock.sleep):
            clock.now += 1.5            # the consumer takes 1.5 s per item
            yield item
    assert list(slow_consumer()) == items
    assert clock.sleeps == []           # 2 s due, 3 s already spent


def test_replay_really_waits():
    items = [event("s", t, ":x :kind 'a' .") for t in (0, 1, 2)]
    started = time.monotonic()
    assert list(replay(items, 20.0)) == items
    assert 0.08 < time.monotonic() - started < 3


@pytest.mark.parametrize("text, rate", [("1", 1.0), ("10", 10.0), ("0.5", 0.5), ("max", None), ("inf", None)])
def test_parse_rate(text, rate):
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["0", "-1", "fast", "nan"])
def test_parse_rate_rejects(text):
    with pytest.raises(ValueError, match="--rate"):
        parse_rate(text)


# --------------------------------------------------------------------------
# Reorder buffer
# --------------------------------------------------------------------------

def ev(t, stream="s", kind="a", position=None):
    e = event(stream, t, f":x{t} :kind '{kind}' .")
    return Event(e.stream, e.time, e.triples, position=position or f"in:{t}")


def test_reorder_releases_in_time_order_after_the_watermark():
    buffer = ReorderBuffer(3)
    assert buffer.push(ev(5)) == [] and buffer.watermark == 2
    assert buffer.push(ev(4)) == []
    released = buffer.push(ev(8))               # watermark 5
    assert times(released) == [4, 5]
    assert times(buffer.push(ev(6))) == []      # 6 > 5: held
    assert times(buffer.push(ev(5, "t"))) == [5]  # 5 = watermark: in time, released at once
    assert times(buffer.flush()) == [6, 8]
    assert buffer.late == 0 and buffer.released == 5 and buffer.peak_held == 3


def test_reorder_rejects_late_events_with_position_and_counts_them():
    late = []
    buffer = ReorderBuffer("2", on_late=late.append)
    items = [ev(10, position="a.trig:3"), ev(9), ev(7, position="b.trig:12"), ev(12), ev(9, "t"),
             EventError("bad", "c:1"), ev(Decimal("8.5"))]
    out = list(reorder(items, 2, buffer=buffer))
    assert times(out) == ["error", 9, 10, "error", "error", "error", 12]
    first = out[0]
    assert isinstance(first, EventError) and first.position == "b.trig:12"
    assert first.message == ("late event on stream <http://example.org/s>: its time 7 is 3 s behind the latest "
                             "time seen, 10 (a.trig:3), more than the allowed lateness of 2 s (late events so far: 1)")
    assert "its time 8.5 is 3.5 s behind" in out[5].message
    assert buffer.late == 3 and out[4].message == "bad"


def test_reorder_with_zero_lateness_keeps_simultaneous_events():
    out = list(reorder([ev(1), ev(2), ev(2, "t"), ev(1, "t"), ev(3)], 0))
    assert times(out) == [1, 2, 2, "error", 3]


def test_reorder_ties_keep_arrival_order_and_datetimes_work():
    a, b = ev(5, "s"), ev(5, "t")
    assert list(reorder([ev(6), a, b], 1)) [:2] == [a, b]
    stamps = [Event(S, t, (), is_datetime=True) for t in (1_600_000_010, 1_600_000_005, 1_600_000_000)]
    out = list(reorder(stamps, 6))
    assert times(out) == ["error", 1_600_000_005, 1_600_000_010]
    assert "2020-09-13T12:26:40Z is 10 s behind" in out[0].message


@pytest.mark.parametrize("text, value", [("5", 5), ("2.5", Decimal("2.5")), ("500ms", Decimal("0.5")),
                                         ("2min", 120), ("1h", 3600), (0, 0),
                                         ("0.000001ms", Decimal("1E-9"))])
def test_parse_lateness(text, value):
    assert parse_lateness(text) == value


@pytest.mark.parametrize("text", ["-1", "soon", "5 weeks", "0.0000000001", "0.0000001ms"])
def test_parse_lateness_rejects(text):
    with pytest.raises(ValueError, match="--lateness"):
        parse_lateness(text)


def test_engine_over_shuffled_arrival_equals_time_order():
    rng = random.Random(7)
    events = [ev(t, "s" if t % 3 else "t", "a" if t % 2 else "b") for t in range(1, 60)]
    expected = rows(Engine(QUERY_TWO).run(events))
    assert expected
    shuffled = events[:]
    # arrival disorder of at most 4 positions (each event at most 4 s late)
    for i in range(0, len(shuffled) - 4, 4):
        block = shuffled[i:i + 4]
        rng.shuffle(block)
        shuffled[i:i + 4] = block
    engine = Engine(QUERY_TWO)
    assert engine.stats.rejected == 0
    assert rows(engine.run(reorder(shuffled, 4))) == expected
    assert engine.stats.rejected == 0
    # without the buffer, the engine rejects what comes out of order
    engine = Engine(QUERY_TWO)
    list(engine.run(shuffled))
    assert engine.stats.rejected > 0


def test_merge_arrival_reads_all_sources_without_waiting_for_a_silent_one():
    gate = threading.Event()

    def slow():
        gate.wait(10)                   # silent until the fast source is read
        yield ev(2, "t")

    def fast():
        yield ev(1)
        yield ev(3)

    merged = merge_arrival([slow(), fast()])
    assert times([next(merged), next(merged)]) == [1, 3]
    gate.set()
    assert times(list(merged)) == [2]
    assert times(reorder(merge_arrival([iter([ev(1), ev(4)]), iter([ev(2, "t"), ev(3, "t")])]), 10)) == [1, 2, 3, 4]


def test_merge_arrival_raises_a_source_error():
    def broken():
        yield ev(1)
        raise SpaseqError("boom")
    with pytest.raises(SpaseqError, match="boom"):
        list(merge_arrival([broken(), iter([ev(2, "t")])]))


# --------------------------------------------------------------------------
# Async API
# --------------------------------------------------------------------------

def test_run_async_over_an_async_iterator():
    async def events():
        for e in [ev(1, kind="a"), EventError("bad", "x:1"), ev(2, kind="b"), ev(3, kind="b")]:
            await asyncio.sleep(0)
            yield e

    async def main():
        engine = Engine(QUERY)
        results = [r async for r in run_async(engine, events())]
        return rows(results), engine.stats.rejected
    found, rejected = asyncio.run(asyncio.wait_for(main(), 30))
    assert found == rows(Engine(QUERY).run([ev(1, kind="a"), ev(2, kind="b"), ev(3, kind="b")]))
    assert len(found) == 1 and rejected == 1


def test_run_async_reads_a_blocking_live_source_in_a_thread():
    server = EventServer(greeting=(trig(1) + trig(2, "b")).encode()).start()
    ticks = []

    async def ticker():
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.02)

    async def main():
        tick = asyncio.ensure_future(ticker())
        source = open_source_async(f"tcp://127.0.0.1:{server.port}?retries=0&idle_timeout=0.5", S)
        results = [r async for r in run_async(Engine(QUERY), source)]
        tick.cancel()
        return results
    try:
        results = asyncio.run(asyncio.wait_for(main(), 30))
    finally:
        server.stop()
    assert [(r.time, r.bindings["b"].value) for r in results] == [(2, f"{EX}x2")]
    assert len(ticks) > 5               # the loop was not blocked while the source waited


def test_merge_async_and_reorder_async():
    async def source(values, stream, delay):
        for t in values:
            await asyncio.sleep(delay)
            yield ev(t, stream)

    async def main():
        merged = merge_async(source([1, 3, 5], "s", 0.01), source([2, 4], "t", 0.015), [ev(6)])
        return [item async for item in reorder_async(merged, 10)]
    out = asyncio.run(asyncio.wait_for(main(), 30))
    assert times(out) == [1, 2, 3, 4, 5, 6]


def test_aiter_blocking_closes_the_source_when_stopped_early():
    closed = []

    class Source:
        def __iter__(self):
            return self

        def __next__(self):
            return ev(1)

        def close(self):
            closed.append(True)

    async def main():
        async for _ in aiter_blocking(Source()):
            break
    asyncio.run(asyncio.wait_for(main(), 30))
    assert closed == [True]
