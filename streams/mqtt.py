"""MQTT: a stream source and a result sink (paho-mqtt 2.x).

Source: ``mqtt://HOST[:PORT]/TOPIC[?options]``
-------------------------------------------------
spaseq subscribes to TOPIC (MQTT wildcards ``+`` and ``#`` allowed; the
port defaults to 1883).  **One message is one event**: its payload is the
TriG or N-Quads of the event, graph and timestamp both, exactly as in a
stream file::

    <http://ex/e1> <http://www.w3.org/ns/prov#generatedAtTime> "5"^^<http://www.w3.org/2001/XMLSchema#integer> .
    <http://ex/e1> { <http://ex/a1> <http://ex/kind> "a" . }

(A message may hold several graphs: each is one event.)  The event time is
therefore the producer's ``prov:generatedAtTime``, not the time the broker
got the message: it is the same on every run and through any broker, MQTT
3.1.1 messages have no time of their own, and it is exactly what a
CONSTRUCT query's MQTT sink publishes, so that one engine's output feeds
another's input.  A payload that is not TriG/N-Quads, or has no graph, is
rejected (position ``mqtt://HOST:PORT/TOPIC#N:LINE``, N the message count);
an empty payload (a retained message being cleared) is skipped.

Options: ``format`` (trig, nq, auto: sniffed per message), ``qos`` (0, 1 or
2; default 1), ``client_id``, ``clean`` (1; 0 keeps the session on the
broker, so that it queues messages while spaseq is away: needs
``client_id``), ``keepalive`` (60 s), and the options every live source has
(``max_events``, ``idle_timeout``, ``retries``, ``backoff``,
``max_backoff``, ``connect_timeout``: see ``streams/network.py``).

A lost connection is retried with exponential backoff (``backoff`` doubled
up to ``max_backoff``, at most ``retries`` failed attempts in a row), each
drop, retry and reconnection reported with its count; the subscription is
made again on every connection.  With ``clean=1`` (the default), messages
published while spaseq is disconnected are lost.  Redelivered QoS 1
messages are rejected as duplicate (stream, τ), as semantics.md section 10
says.

With ``spaseq run --checkpoint DIR`` (docs/checkpoints.md) the session is
persistent: ``clean`` is 0 and ``client_id`` defaults to one made from DIR
and the topic, so a restarted run takes the same session back; ``qos`` 0 is
refused.  A message is acknowledged to the broker only once a checkpoint
holds what its events did (``commit``), so the broker sends again, after a
restart, every message the last checkpoint does not cover; the run asks for
a checkpoint when ``ACK_BATCH`` messages wait for their acknowledgement or
the input goes quiet (a broker sends a client only so many unacknowledged
messages at once: mosquitto's ``max_inflight_messages``, 20 by default).

Sink: ``--sink mqtt://HOST[:PORT]/TOPIC[?options]``
-------------------------------------------------
Each result is one message on TOPIC: a SELECT result as its JSON line
(``{"time": ..., "bindings": {...}}``, as ``--format jsonl``); the CONSTRUCT
results of one match time as one TriG event (as ``--format trig``), sent
once they are final, ready for another engine's MQTT source.  Options: ``qos`` (1), ``retain`` (0), ``client_id``,
``keepalive``, ``retries``, ``backoff``, ``max_backoff``, ``connect_timeout``
and ``flush_timeout`` (10 s: how long closing waits for the broker to
confirm the last QoS 1/2 messages).  Results published while the broker is
away are kept and sent on reconnection (QoS 1 and 2).  Opening the sink
waits for the first connection (an error if the attempts run out); after
giving up on a lost broker, writing a result is an error.
"""

from __future__ import annotations

import collections
import hashlib
import io
import os
import threading
import time
import uuid

import paho.mqtt.client as paho

from ..errors import EventError, SpaseqError
from ..hookspecs import ResultSink, StreamSource, hookimpl
from ..waits import wait_seconds
from .network import LiveOptions, LiveSource, Reconnecting, _show_host, _why, read_text, split_location

__all__ = ["MqttSink", "MqttSource", "open_mqtt_sink", "open_mqtt_source"]

DEFAULT_PORT = 1883

#: With checkpoints: consumed messages waiting for their acknowledgement that make
#: the run take a checkpoint (half of mosquitto's default in-flight window).
ACK_BATCH = 10

# The run's checkpoint directory (spaseq_configure), or None: sessions then are as asked.
_SETTINGS: dict[str, str | None] = {"checkpoint": None}


@hookimpl
def spaseq_configure(config):
    """``checkpoint`` (``--checkpoint DIR``): sources keep a persistent session and
    acknowledge messages after the checkpoints (see the module docstring)."""
    _SETTINGS["checkpoint"] = config.get("checkpoint")


class _Link:
    """A paho client kept connected by paho's network thread, with the retry
    bookkeeping and reports of its owner (a source or a sink).

    paho waits the backoff itself (``reconnect_delay_set``: the same doubling
    sequence as ``backoff_delay``); the callbacks count the attempts and give
    up after ``retries`` failures in a row.
    """

    def __init__(self, owner: Reconnecting, host: str, port: int, *, client_id: str, clean: bool,
                 keepalive: int, subscribe: tuple[str, int] | None = None, on_message=None,
                 on_publish=None, manual_ack: bool = False):
        self.owner = owner
        self.host, self.port, self.keepalive = host, port, keepalive
        self.subscription = subscribe
        self.handle_message = on_message
        self.handle_publish = on_publish
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id,
                                  clean_session=clean, protocol=paho.MQTTv311, manual_ack=manual_ack)
        self.client.suppress_exceptions = True
        options = owner.options
        self.client.reconnect_delay_set(options.backoff, options.max_backoff)
        self.client.connect_timeout = options.connect_timeout
        self.client.on_connect = self._on_connect
        self.client.on_connect_fail = self._on_connect_fail
        self.client.on_disconnect = self._on_disconnect
        self.client.on_subscribe = self._on_subscribe
        if on_message is not None:
            self.client.on_message = self._on_message
        if on_publish is not None:
            self.client.on_publish = lambda client, userdata, mid, reason, properties: on_publish(mid)
        self.attempts = 0
        self.subscriptions = 0      # subscriptions granted (one per connection)
        self.ever = False           # connected at least once
        self.up = False             # connected now
        self.closing = False
        self.refused: str | None = None
        self.done = threading.Event()  # gave up (or closed)
        self.error: BaseException | None = None

    def start(self) -> None:
        self.client.connect_async(self.host, self.port, self.keepalive)
        self.client.loop_start()

    def stop(self) -> None:
        self.closing = True
        self.done.set()
        try:
            self.client.disconnect()
        except Exception:       # noqa: BLE001 - closing anyway
            pass
        self.client.loop_stop()

    # -- paho callbacks (paho's thread) -------------------------------------

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        if reason_code.is_failure:
            self.refused = f"the broker refused the connection: {reason_code}"
            return
        self.refused = None
        if self.ever:
            self.owner.reconnected()
        self.ever = self.up = True
        self.attempts = 0
        if self.subscription is not None:
            client.subscribe(*self.subscription)
        else:
            self.owner.connected.set()

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties) -> None:
        failed = [str(code) for code in reason_codes if code.is_failure]
        if failed:
            self.owner.report(f"the broker refused the subscription: {', '.join(failed)}")
        else:
            self.subscriptions += 1
        self.owner.connected.set()

    def _on_connect_fail(self, client, userdata) -> None:
        self._failure("cannot connect to the broker")

    def _on_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        if self.closing:
            return
        if self.up:
            self.up = False
            self.attempts = 0
            self._failure(f"connection lost ({reason_code})")
        else:
            self._failure(self.refused or f"connection failed ({reason_code})")

    def _failure(self, reason: str) -> None:
        if self.closing or self.done.is_set():
            return
        self.attempts += 1
        try:
            delay = self.owner.failed(self.attempts, reason, self.ever)
        except SpaseqError as error:
            self.error = error
            delay = None
        if delay is None:
            self.done.set()
            self.closing = True
            self.client.disconnect()            # ends paho's loop

    def _on_message(self, client, userdata, message) -> None:
        try:
            self.handle_message(message)
        except Exception as error:      # noqa: BLE001 - never kill paho's thread
            self.owner.report(f"message not handled: {_why(error)}")


def _mqtt_where(host: str, port: int, topic: str) -> str:
    return f"mqtt://{_show_host(host)}:{port}/{topic}"


def _split(location: str, extra: tuple[str, ...]):
    host, port, topic, query = split_location("mqtt", location)
    port = port or DEFAULT_PORT
    where = _mqtt_where(host, port, topic)
    if not topic:
        raise SpaseqError(f"{where}: no topic (expected mqtt://HOST:PORT/TOPIC)")
    options = LiveOptions.from_query(query, where, extra_keys=extra)
    extra_values = options.extra
    try:
        qos = int(extra_values.pop("qos", "1"))
        if qos not in (0, 1, 2):
            raise ValueError("qos must be 0, 1 or 2")
        keepalive = int(extra_values.pop("keepalive", "60"))
        if not 1 <= keepalive <= 65535:         # (two bytes in MQTT's CONNECT packet)
            raise ValueError("keepalive must be from 1 to 65535 seconds")
        for name, value in (("topic", topic), ("client_id", extra_values.get("client_id"))):
            # (an MQTT string: its length in two bytes; longer, paho failed in its thread)
            if value is not None and (len(value.encode("utf-8")) > 65535 or "\0" in value):
                raise ValueError(f"{name} must be at most 65535 bytes of UTF-8, without NUL")
    except ValueError as e:
        raise SpaseqError(f"{where}: {e}") from None
    return host, port, topic, where, options, qos, keepalive


class MqttSource(LiveSource):
    """Events from an MQTT topic, one message at a time (see the module doc)."""

    def __init__(self, host: str, port: int, topic: str, stream: str, options: LiveOptions, *,
                 qos: int = 1, client_id: str | None = None, clean: bool = True, keepalive: int = 60,
                 acknowledge_on_commit: bool = False):
        super().__init__(_mqtt_where(host, port, topic), stream, options)
        self.host, self.port, self.topic = host, port, topic
        self.qos = qos
        self.client_id = client_id or f"spaseq-{uuid.uuid4().hex[:12]}"
        self.clean = clean
        self.keepalive = keepalive
        self.messages = 0
        self._link: _Link | None = None
        # acknowledge_on_commit: (mid, qos, items emitted up to the message's last) of the
        # messages not yet acknowledged, oldest first (appended by paho's thread)
        self.acknowledge_on_commit = acknowledge_on_commit
        self._unacknowledged: collections.deque = collections.deque()
        self._emitted = 0
        self.acknowledged = 0

    def consumed_unacknowledged(self) -> int:
        """Messages whose every item the consumer has taken, not acknowledged yet."""
        consumed = self.events + self.rejected
        count = 0
        for _, _, last in self._unacknowledged:
            if last > consumed:
                break
            count += 1
        return count

    def wants_checkpoint(self, idle: bool) -> bool:
        """Whether messages wait for a checkpoint to be acknowledged: ``ACK_BATCH`` of
        them, or any once the input is quiet (the broker may be waiting for them)."""
        if not self.acknowledge_on_commit or not self._unacknowledged:
            return False
        count = self.consumed_unacknowledged()
        return count >= ACK_BATCH or (idle and count > 0)

    def commit(self) -> None:
        """A checkpoint holds what the consumer has taken: acknowledge its messages."""
        if not self.acknowledge_on_commit or self._link is None:
            return
        consumed = self.events + self.rejected
        pending = self._unacknowledged
        while pending and pending[0][2] <= consumed:
            mid, qos, _ = pending.popleft()
            if qos:
                self._link.client.ack(mid, qos)
            self.acknowledged += 1

    def produce(self) -> None:
        link = self._link = _Link(self, self.host, self.port, client_id=self.client_id, clean=self.clean,
                                  keepalive=self.keepalive, subscribe=(self.topic, self.qos),
                                  on_message=self._message, manual_ack=self.acknowledge_on_commit)
        link.start()
        try:
            while not self.stopping and not link.done.is_set():
                link.done.wait(0.2)
        finally:
            link.stop()
        if link.error is not None and not self.stopping:
            raise link.error

    @property
    def subscriptions(self) -> int:
        """How many times the broker granted the subscription (once per connection)."""
        return self._link.subscriptions if self._link is not None else 0

    def _message(self, message) -> None:
        if message.payload:
            self.messages += 1
            where = f"{self.name}#{self.messages}"
            items = read_text(message.payload, where, self.stream, self.options.rdf_format, base=self.name)
            if not items:
                items = [EventError(f"message on {message.topic} has no event (no named graph)", f"{where}:1")]
            for item in items:
                self.emit(item)
            self._emitted += len(items)
        if self.acknowledge_on_commit:
            self._unacknowledged.append((message.mid, message.qos, self._emitted))

    def _closing(self) -> None:
        pass        # produce() stops the link when it sees the stop flag


def open_mqtt_source(location: str, stream: str, *, report=None) -> MqttSource:
    """``//HOST[:PORT]/TOPIC[?options]`` (the part after ``mqtt:``) -> a source."""
    host, port, topic, where, options, qos, keepalive = _split(
        location, ("qos", "client_id", "clean", "keepalive"))
    if report is not None:
        options.report = report
    checkpoint = _SETTINGS["checkpoint"]
    clean = options.extra.pop("clean", "0" if checkpoint else "1").lower() not in ("0", "no", "false")
    client_id = options.extra.pop("client_id", None)
    if checkpoint:
        if clean or qos == 0:
            raise SpaseqError(f"{where}: with --checkpoint, the session must be kept (clean=0) and messages "
                              "confirmed (qos 1 or 2), or what comes while spaseq is away is lost")
        if not client_id:       # the same run (directory and topic) takes its session back
            seed = f"{os.path.abspath(checkpoint)}\n{where}".encode("utf-8")
            client_id = "spaseq-" + hashlib.sha256(seed).hexdigest()[:16]
    if not clean and not client_id:
        raise SpaseqError(f"{where}: clean=0 needs a client_id (the broker keeps the session under it)")
    return MqttSource(host, port, topic, stream, options, qos=qos, client_id=client_id, clean=clean,
                      keepalive=keepalive, acknowledge_on_commit=bool(checkpoint))


# --------------------------------------------------------------------------
# The sink
# --------------------------------------------------------------------------

class MqttSink(Reconnecting):
    """Publishes each result as one message (a JSON line), or each match time's
    CONSTRUCT results as one (a TriG event)."""

    def __init__(self, host: str, port: int, topic: str, options: LiveOptions, *, qos: int = 1,
                 retain: bool = False, client_id: str | None = None, keepalive: int = 60,
                 flush_timeout: float = 10.0, with_events: bool = False):
        super().__init__(_mqtt_where(host, port, topic), options)
        from ..output.formats import JsonLinesWriter
        from ..runtime.results import ConstructedEvents
        self.topic, self.qos, self.retain = topic, qos, retain
        self.flush_timeout = flush_timeout
        self.published = 0          # messages handed to the client
        self.confirmed = 0          # ... and confirmed by the broker (QoS 0: sent)
        self._buffer = io.StringIO()
        self._json = JsonLinesWriter(self._buffer, [], with_events)
        self._constructed = ConstructedEvents()
        self._lock = threading.Lock()
        self._pending: set[int] = set()
        self._early: set[int] = set()   # confirmed before publish() returned
        self._link = _Link(self, host, port, client_id=client_id or f"spaseq-{uuid.uuid4().hex[:12]}",
                           clean=True, keepalive=keepalive, on_publish=self._confirmed)
        self._link.start()
        while not self.connected.wait(0.1):
            if self._link.done.is_set():
                self._link.stop()
                raise self._link.error or SpaseqError(f"{self.name}: cannot connect to the broker")

    def payload(self, result) -> bytes:
        """A result as a message: TriG for CONSTRUCT, a JSON line for SELECT."""
        self._buffer.seek(0)
        self._buffer.truncate()
        if result.triples is not None:
            from ..output.formats import trig_event
            self._buffer.write(trig_event(result))
        else:
            self._json.write(result)
            self._json.flush()
        return self._buffer.getvalue().rstrip("\n").encode("utf-8")

    def write(self, result) -> None:
        if result.triples is not None:
            # CONSTRUCT: one event per match time (``flush`` sends the last one).
            result = self._constructed.add(result)
            if result is not None:
                self._publish(result)
        else:
            self._publish(result)

    def flush(self) -> None:
        """Send the CONSTRUCT event being collected (its results are final)."""
        if (result := self._constructed.flush()) is not None:
            self._publish(result)

    def _publish(self, result) -> None:
        if self._link.done.is_set():
            raise SpaseqError(f"{self.name}: the broker is unreachable: {self.ended_because or 'closed'}")
        info = self._link.client.publish(self.topic, self.payload(result), qos=self.qos, retain=self.retain)
        if info.rc == paho.MQTTErrorCode.MQTT_ERR_QUEUE_SIZE:
            raise SpaseqError(f"{self.name}: too many results waiting for the broker")
        self.published += 1
        with self._lock:
            if info.mid in self._early:
                self._early.discard(info.mid)
            else:
                self._pending.add(info.mid)

    def _confirmed(self, mid: int) -> None:
        with self._lock:
            self.confirmed += 1
            if mid in self._pending:
                self._pending.discard(mid)
            else:
                self._early.add(mid)

    @property
    def unconfirmed(self) -> int:
        with self._lock:
            return len(self._pending)

    def close(self) -> None:
        """Wait (``flush_timeout`` at most) for the broker to confirm, then disconnect."""
        self.flush()
        deadline = time.monotonic() + self.flush_timeout
        while self.unconfirmed and time.monotonic() < deadline and not self._link.done.is_set():
            time.sleep(0.05)
        left = self.unconfirmed
        self._link.stop()
        if left:
            self.report(f"{left} of {self.published} results not confirmed by the broker")


def open_mqtt_sink(target: str, variables, options: dict) -> MqttSink:
    """``--sink mqtt://HOST[:PORT]/TOPIC[?options]``: the target is what follows ``mqtt:``."""
    host, port, topic, where, live, qos, keepalive = _split(
        target, ("qos", "retain", "client_id", "keepalive", "flush_timeout"))
    if "+" in topic or "#" in topic:
        raise SpaseqError(f"{where}: a topic to publish to has no wildcards (+, #)")
    live.report = options.get("report", live.report)
    retain = live.extra.pop("retain", "0").lower() not in ("0", "no", "false")
    try:
        flush_timeout = wait_seconds(live.extra.pop("flush_timeout", "10"))
    except ValueError as e:
        raise SpaseqError(f"{where}: flush_timeout {e}") from None
    if live.max_events is not None or live.idle_timeout is not None:
        live.max_events = live.idle_timeout = None      # (source options; harmless here)
    return MqttSink(host, port, topic, live, qos=qos, retain=retain, client_id=live.extra.pop("client_id", None),
                    keepalive=keepalive, flush_timeout=flush_timeout,
                    with_events=bool(options.get("with_events")))


@hookimpl
def spaseq_stream_sources():
    return [StreamSource("mqtt", open_mqtt_source,
                         "mqtt://HOST:PORT/TOPIC: one TriG/N-Quads event per message (paho-mqtt); "
                         "reconnects with backoff")]


@hookimpl
def spaseq_result_sinks():
    return [ResultSink("mqtt", open_mqtt_sink,
                       "mqtt://HOST:PORT/TOPIC: each result as a message (JSON line for SELECT, "
                       "TriG event for CONSTRUCT)", file_like=False)]
