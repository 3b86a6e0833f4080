"""Result sinks: HTTP POST webhook (a real http.server on 127.0.0.1), Python
callbacks, MQTT publish (a real mosquitto broker), and the CONSTRUCT chain
of two engines through the broker.  Bounded waits everywhere."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import paho.mqtt.client as paho
import pytest

from brokers import HostileHttpServer, WebhookServer, free_port, mosquitto, mosquitto_program, wait_until  # noqa: F401,E501 (fixtures)
from helpers import EX, PREFIX, event
from spaseq_plugin import Engine
from spaseq_plugin.errors import SpaseqError
from spaseq_plugin.events import Event
from spaseq_plugin.plugins import result_sink
from spaseq_plugin.output.sinks import CallbackSink, WebhookSink, load_function, result_json
from spaseq_plugin.streams.mqtt import MqttSink, open_mqtt_sink, open_mqtt_source

S = "http://example.org/s"
DERIVED = "http://example.org/derived"

SELECT = PREFIX + """SELECT ?a ?b WITHIN 100 SECONDS
FROM STREAM S <http://example.org/s>
WHERE { SEQ (A : B)
  DEFINE GPM A ON S { ?a :kind "a" }
  DEFINE GPM B ON S { ?b :kind "b" } }
"""

CONSTRUCT = PREFIX + """CONSTRUCT { ?a :before ?b . ?b :kind "pair" } WITHIN 100 SECONDS
FROM STREAM S <http://example.org/s>
WHERE { SEQ (A ; B)
  DEFINE GPM A ON S { ?a :kind "a" }
  DEFINE GPM B ON S { ?b :kind "b" } }
"""

# Reads the first engine's output: pairs followed by a later pair.
SECOND = PREFIX + """SELECT ?x ?y WITHIN 100 SECONDS
FROM STREAM D <http://example.org/derived>
WHERE { SEQ (P ; Q)
  DEFINE GPM P ON D { ?x :kind "pair" }
  DEFINE GPM Q ON D { ?y :kind "pair" } }
"""


def events() -> list[Event]:
    kinds = ["a", "b", "a", "b", "b"]
    return [event("s", t, f":x{t} :kind '{k}' .") for t, k in enumerate(kinds, start=1)]


def results(query: str = SELECT):
    return list(Engine(query).run(events()))


def quiet(message: str) -> None:
    pass


# --------------------------------------------------------------------------
# Webhook
# --------------------------------------------------------------------------

def test_webhook_posts_each_result_as_json():
    expected = [result_json(r) for r in results()]
    assert len(expected) == 5
    with WebhookServer() as server:
        sink = result_sink("webhook").open(server.url("/hook?key=1"), ["a", "b"], {})
        engine = Engine(SELECT, on_result=sink.write)
        list(engine.run(events()))
        sink.close()
    assert server.received == expected
    assert server.paths == ["/hook?key=1"] * 5
    assert server.content_type == "application/json"
    assert expected[0] == {"time": 2, "bindings": {"a": {"type": "uri", "value": f"{EX}x1"},
                                                   "b": {"type": "uri", "value": f"{EX}x2"}}}


def test_webhook_retries_server_errors_with_backoff():
    reports, sleeps = [], []
    with WebhookServer(fail_first=2) as server:
        sink = WebhookSink(server.url(), retries=3, backoff=0.01, report=reports.append,
                           sleep=lambda s: (sleeps.append(s), time.sleep(s)))
        for result in results():
            sink.write(result)
        sink.close()
    assert len(server.received) == 5 and server.requests == 7
    assert sink.sent == 5 and sink.retried == 2 and sink.failed == 0
    assert sleeps == [0.01, 0.02]
    assert reports == [f"webhook {server.url()}: HTTP 500 Internal Server Error; retrying in 0.01 s (attempt 1 of 3)",
                       f"webhook {server.url()}: HTTP 500 Internal Server Error; retrying in 0.02 s (attempt 2 of 3)"]


def test_webhook_gives_up_after_bounded_retries():
    url = f"http://127.0.0.1:{free_port()}/hook"        # nobody listens
    sink = result_sink("webhook").open(url + "#retries=2&backoff=0.01&timeout=2", [], {"report": quiet})
    started = time.monotonic()
    with pytest.raises(SpaseqError, match=r"result not delivered: Connection refused after 2 retries"):
        sink.write(results()[0])
    assert time.monotonic() - started < 5
    assert sink.retried == 2 and sink.failed == 1


def test_webhook_can_skip_what_it_cannot_deliver():
    reports = []
    with WebhookServer(status=400) as server:
        sink = WebhookSink(server.url(), on_error="skip", backoff=0.01, report=reports.append)
        for result in results():
            sink.write(result)
        sink.close()
    assert server.requests == 5                 # a 4xx is not retried
    assert sink.failed == 5 and sink.sent == 0
    assert reports[0] == f"webhook {server.url()}: result not delivered: HTTP 400 Bad Request (1 not delivered so far)"
    assert reports[-1] == f"webhook {server.url()}: 0 results delivered, 5 not delivered"


def test_webhook_options_are_checked():
    with pytest.raises(SpaseqError, match="unknown option 'retry'"):
        result_sink("webhook").open("http://127.0.0.1:1/#retry=2", [], {})
    with pytest.raises(SpaseqError, match="expected an http"):
        result_sink("webhook").open("ftp://127.0.0.1/", [], {})
    with pytest.raises(SpaseqError, match="on_error must be"):
        result_sink("webhook").open("http://127.0.0.1:1/#on_error=later", [], {})
    # (1e300 and nan were internal errors: OverflowError and ValueError in the socket's timeout)
    for option, words in (("timeout=1e300", "timeout must be a number of seconds more than 0"),
                          ("timeout=nan", "timeout must be a number of seconds more than 0"),
                          ("max_backoff=1e300", "max_backoff must be a number of seconds from 0"),
                          ("backoff=-1", "backoff must be a number of seconds from 0")):
        with pytest.raises(SpaseqError, match=words):
            result_sink("webhook").open(f"http://127.0.0.1:1/#{option}", [], {})
    with pytest.raises(SpaseqError, match=r"a topic to publish to has no wildcards \(\+, #\)"):
        result_sink("mqtt").open("//127.0.0.1:1/a/+/b", [], {})
    with pytest.raises(SpaseqError, match="topic must be at most 65535 bytes"):       # (was an internal error)
        result_sink("mqtt").open("//127.0.0.1:1/" + "x" * 65536, [], {})
    for flush_timeout in ("1e300", "nan", "-5"):
        with pytest.raises(SpaseqError, match="flush_timeout must be a number of seconds more than 0"):
            result_sink("mqtt").open(f"//127.0.0.1:1/t?flush_timeout={flush_timeout}", [], {})


def test_cli_sends_results_to_a_webhook(tmp_path):
    (tmp_path / "q.rq").write_text(SELECT)
    (tmp_path / "s.trig").write_text(
        "@prefix : <http://example/> .\n@prefix prov: <http://www.w3.org/ns/prov#> .\n"
        + "".join(f":e{t} prov:generatedAtTime {t} .\n:e{t} {{ :x{t} :kind \"{k}\" . }}\n"
                  for t, k in enumerate("abab", start=1)))
    with WebhookServer() as first, WebhookServer() as second:
        done = subprocess.run(
            [sys.executable, "-m", "spaseq_plugin", "run", str(tmp_path / "q.rq"), "--stream",
             f"S={tmp_path / 's.trig'}", "--sink", f"webhook:{first.url()}#retries=1",
             "--sink", second.url("/other")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert first.received == lines == second.received and len(lines) == 3
    assert second.paths == ["/other"] * 3


def test_a_webhook_reply_without_end_is_read_no_further_than_its_start():
    """An endpoint that answers 200 with an endless body: the sink read it all, into
    memory (4.7 GB within 15 s).  A reply is now read up to 64 KiB and dropped."""
    with HostileHttpServer(drip=None) as server:
        sink = WebhookSink(server.url("/hook"), retries=0)
        started = time.monotonic()
        sink.post({"time": "t", "bindings": {}})
        assert sink.sent == 1 and time.monotonic() - started < 30
        assert server.sent < 1000        # (64 MiB: the kernel's buffers, not the sink's reads)


def test_deadlines_finished_do_not_pile_up():
    """The one watchdog thread keeps a heap of deadlines: those finished long before
    their time must leave it (a request a millisecond, each with ten times 30 s)."""
    from spaseq_plugin.http_deadline import Deadline, _watchdog
    for _ in range(5000):
        with Deadline(300):
            pass
    assert len(_watchdog._heap) < 200
    with Deadline(0.1) as deadline:
        time.sleep(0.5)
    assert deadline.passed


def test_a_webhook_endpoint_dripping_its_headers_is_given_the_timeout_in_all():
    """Each header line came within the timeout of a read, the answer never: the run
    waited for ever.  The whole exchange now has the timeout (http_deadline.py)."""
    with HostileHttpServer(drip=0.1) as server:
        sink = WebhookSink(server.url("/hook"), retries=1, backoff=0.01, timeout=0.5, report=lambda m: None)
        started = time.monotonic()
        with pytest.raises(SpaseqError, match=r"result not delivered: no answer within 0.5 s after 1 retry"):
            sink.post({"time": "t", "bindings": {}})
        assert time.monotonic() - started < 5


# --------------------------------------------------------------------------
# Callbacks
# --------------------------------------------------------------------------

seen_by_callback: list = []


def remember(result) -> None:
    seen_by_callback.append(result)


def test_callback_sink_calls_a_function():
    got = []
    sink = result_sink("callback").open(got.append, ["a", "b"], {})
    for result in results():
        sink.write(result)
    sink.close()
    assert [r.time for r in got] == [2, 4, 4, 5, 5]
    rows = []
    sink = CallbackSink(rows.append, as_json=True)
    sink.write(results()[0])
    assert rows == [result_json(results()[0])]


def test_callback_sink_by_name():
    seen_by_callback.clear()
    sink = result_sink("callback").open("test_sinks:remember", [], {})
    for result in results():
        sink.write(result)
    assert len(seen_by_callback) == 5
    assert load_function("json.dumps") is json.dumps
    with pytest.raises(SpaseqError, match="cannot import"):
        load_function("no_such_module_here:f")
    with pytest.raises(SpaseqError, match="has no nothing"):
        load_function("json:nothing")


# --------------------------------------------------------------------------
# MQTT (a real mosquitto broker)
# --------------------------------------------------------------------------

class Subscriber:
    """A plain paho subscriber that keeps the payloads it gets."""

    def __init__(self, broker, topic: str):
        self.payloads: list[bytes] = []
        self.ready = threading.Event()
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2)
        self.client.on_message = lambda c, u, m: self.payloads.append(m.payload)
        self.client.on_subscribe = lambda *args: self.ready.set()
        self.client.on_connect = lambda c, *args: c.subscribe(topic, 1)
        self.client.connect("127.0.0.1", broker.port)
        self.client.loop_start()
        assert self.ready.wait(10), "subscriber not ready"

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


def test_mqtt_sink_publishes_select_results_as_json_lines(mosquitto):
    subscriber = Subscriber(mosquitto, "results")
    try:
        sink = result_sink("mqtt").open(f"//127.0.0.1:{mosquitto.port}/results?qos=1", ["a", "b"],
                                        {"report": quiet})
        engine = Engine(SELECT, on_result=sink.write)
        list(engine.run(events()))
        sink.close()
        assert sink.published == sink.confirmed == 5 and sink.unconfirmed == 0
        wait_until(lambda: len(subscriber.payloads) == 5, 10, what="5 messages")
    finally:
        subscriber.close()
    assert [json.loads(p) for p in subscriber.payloads] == [result_json(r) for r in results()]
    assert all(not p.endswith(b"\n") for p in subscriber.payloads)


def test_construct_output_of_one_engine_feeds_another_through_mqtt(mosquitto):
    """Compositionality (semantics.md section 9): engine 1's CONSTRUCT results,
    published as TriG events, are engine 2's input stream."""
    source = open_mqtt_source(f"//127.0.0.1:{mosquitto.port}/derived?idle_timeout=30&max_events=2",
                              DERIVED, report=quiet)
    second = Engine(SECOND)
    found = []
    consumer = threading.Thread(target=lambda: found.extend(second.run(source)), daemon=True)
    consumer.start()
    assert source.connected.wait(10)
    sink = open_mqtt_sink(f"//127.0.0.1:{mosquitto.port}/derived", [], {"report": quiet})
    first = Engine(CONSTRUCT, on_result=sink.write)
    produced = list(first.run(events()))
    sink.close()
    consumer.join(20)
    assert not consumer.is_alive()
    # what went over the broker: engine 1's two CONSTRUCT events, as TriG
    assert [r.time for r in produced] == [2, 4] and sink.confirmed == 2
    assert second.stats.events == 2 and second.stats.rejected == 0
    assert [(r.time, r.bindings["x"].value, r.bindings["y"].value) for r in found] == [(4, f"{EX}x2", f"{EX}x4")]
    # and it is the same as reading engine 1's --format trig output from a file
    from io import StringIO
    from spaseq_plugin.output.formats import TrigWriter
    from spaseq_plugin.streams.network import read_text
    text = StringIO()
    writer = TrigWriter(text, [])
    for result in produced:
        writer.write(result)
    writer.close()
    offline = list(Engine(SECOND).run(read_text(text.getvalue().encode(), "file", DERIVED)))
    assert [(r.time, r.bindings["y"].value) for r in offline] == [(r.time, r.bindings["y"].value) for r in found]


def test_mqtt_sink_reconnects_after_the_broker_restarts(mosquitto):
    reports: list[str] = []
    source = open_mqtt_source(f"//127.0.0.1:{mosquitto.port}/out?backoff=0.05&max_backoff=0.2&retries=50"
                              "&idle_timeout=30&max_events=3", DERIVED, report=quiet)
    received = []
    consumer = threading.Thread(target=lambda: received.extend(source), daemon=True)
    consumer.start()
    assert source.connected.wait(10)
    sink = open_mqtt_sink(f"//127.0.0.1:{mosquitto.port}/out?backoff=0.05&max_backoff=0.2&retries=50",
                          [], {"report": reports.append})
    assert isinstance(sink, MqttSink)
    produced = list(Engine(CONSTRUCT).run(events() + [event("s", 6, ":x6 :kind 'a' ."),
                                                      event("s", 7, ":x7 :kind 'b' .")]))
    assert [r.time for r in produced] == [2, 4, 7]
    try:
        sink.write(produced[0])
        sink.write(produced[1])
        sink.flush()                            # (a CONSTRUCT event goes when its time is final)
        wait_until(lambda: len(received) == 2, 10, what="the first two messages")
        mosquitto.stop()
        wait_until(lambda: sink.failures >= 2 and source.failures >= 2, 10, what="both to notice")
        mosquitto.start()
        wait_until(lambda: sink.reconnects == 1 and source.subscriptions == 2, 15, what="both to reconnect")
        sink.write(produced[2])
        sink.close()
        consumer.join(15)
    finally:
        source.close()
    assert [e.time for e in received] == [2, 4, 7]
    name = f"mqtt://127.0.0.1:{mosquitto.port}/out"
    assert reports[0].startswith(f"{name}: connection lost (")
    assert f"{name}: reconnected (1 reconnect so far)" in reports


def test_mqtt_sink_keeps_results_while_the_broker_is_down(mosquitto):
    """QoS 1: a result written while the broker is away is sent, and
    confirmed, once the sink has reconnected."""
    reports: list[str] = []
    sink = open_mqtt_sink(f"//127.0.0.1:{mosquitto.port}/kept?backoff=0.05&max_backoff=0.2&retries=50",
                          [], {"report": reports.append})
    produced = results()
    sink.write(produced[0])
    wait_until(lambda: sink.confirmed == 1, 10, what="the first confirmation")
    mosquitto.stop()
    wait_until(lambda: sink.failures >= 1, 10, what="the sink to notice")
    sink.write(produced[1])                     # queued by the client
    assert sink.unconfirmed == 1
    mosquitto.start()
    wait_until(lambda: sink.unconfirmed == 0, 15, what="the queued result to be confirmed")
    sink.close()
    assert sink.reconnects == 1 and sink.published == sink.confirmed == 2


def test_mqtt_sink_cannot_connect_is_an_error(mosquitto_program):
    started = time.monotonic()
    with pytest.raises(SpaseqError, match="cannot connect to the broker"):
        open_mqtt_sink(f"//127.0.0.1:{free_port()}/out?retries=1&backoff=0.05", [], {"report": quiet})
    assert time.monotonic() - started < 10


def test_cli_publishes_construct_results_to_mqtt(mosquitto, tmp_path):
    (tmp_path / "q.rq").write_text(CONSTRUCT)
    (tmp_path / "s.trig").write_text(
        "@prefix : <http://example/> .\n@prefix prov: <http://www.w3.org/ns/prov#> .\n"
        + "".join(f":e{t} prov:generatedAtTime {t} .\n:e{t} {{ :x{t} :kind \"{k}\" . }}\n"
                  for t, k in enumerate("abab", start=1)))
    subscriber = Subscriber(mosquitto, "cli/out")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "spaseq_plugin", "run", str(tmp_path / "q.rq"), "--stream",
             f"S={tmp_path / 's.trig'}", "--sink", f"mqtt://127.0.0.1:{mosquitto.port}/cli/out"],
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        wait_until(lambda: len(subscriber.payloads) == 2, 10, what="2 messages")
    finally:
        subscriber.close()
    from spaseq_plugin.streams.network import read_text
    messages = [read_text(p, "m", DERIVED) for p in subscriber.payloads]
    assert [[e.time for e in m] for m in messages] == [[2], [4]]
    # each message is exactly the TriG that --format trig printed for that result
    assert b"".join(p + b"\n" for p in subscriber.payloads).decode() == done.stdout


def test_sinks_are_registered():
    for name in ("webhook", "http", "https", "callback", "mqtt"):
        assert result_sink(name).file_like is False
