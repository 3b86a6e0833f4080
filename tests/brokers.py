"""Real servers for the network tests, all on 127.0.0.1: a mosquitto MQTT
broker, a TCP server that sends events, an HTTP server that receives
webhooks.  Every wait is bounded; each server can be stopped and started
again on the same port (to test reconnection).

The ``mosquitto`` fixture finds the broker program (Debian's ``mosquitto``);
the tests never install it: where it is missing, the MQTT tests are skipped
with the reason, and fail under CI (``CI=true``), where ``.ci/run`` installs it.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from helpers import server_unavailable

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_until(condition, timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.2):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------
# mosquitto
# --------------------------------------------------------------------------

def find_mosquitto() -> str | None:
    return shutil.which("mosquitto") or next(
        (p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if os.access(p, os.X_OK)), None)


def mosquitto_version(path: str) -> str:
    try:
        out = subprocess.run([path, "-h"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    first = out.strip().splitlines()[0] if out.strip() else "?"
    return first.removeprefix("mosquitto version ").strip()


class Mosquitto:
    """A mosquitto broker on 127.0.0.1:port, anonymous, no persistence."""

    def __init__(self, program: str, directory: Path, port: int | None = None):
        self.program = program
        self.port = port or free_port()
        self.config = directory / f"mosquitto-{self.port}.conf"
        self.log = directory / f"mosquitto-{self.port}.log"
        self.config.write_text(f"listener {self.port} {HOST}\nallow_anonymous true\npersistence false\n"
                               f"log_dest file {self.log}\n")
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 10.0) -> Mosquitto:
        deadline = time.monotonic() + timeout
        while True:     # the port may still be held for a moment after a stop
            self.process = subprocess.Popen([self.program, "-c", str(self.config)],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                wait_until(lambda: port_open(self.port) or self.process.poll() is not None, timeout=5,
                           what=f"mosquitto on port {self.port}")
            except AssertionError:
                self.stop()
                raise
            if self.process.poll() is None:
                return self
            error = self.process.stderr.read().decode(errors="replace")
            if time.monotonic() > deadline:
                raise RuntimeError(f"mosquitto did not start on port {self.port}: {error}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Kill the broker (as a crash would: no goodbye to clients)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        if self.process is not None and self.process.stderr:
            self.process.stderr.close()
        self.process = None

    def url(self, topic: str, **options) -> str:
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return f"mqtt://{HOST}:{self.port}/{topic}" + (f"?{query}" if query else "")


@pytest.fixture(scope="session")
def mosquitto_program():
    path = find_mosquitto()
    if path is None:
        server_unavailable("no MQTT broker for the tests: mosquitto is not installed "
                           "(Debian: apt-get install mosquitto)")
    return path


@pytest.fixture
def mosquitto(mosquitto_program, tmp_path):
    broker = Mosquitto(mosquitto_program, tmp_path).start()
    yield broker
    broker.stop()


# --------------------------------------------------------------------------
# A TCP server that sends events
# --------------------------------------------------------------------------

class EventServer:
    """Accepts connections on 127.0.0.1:port and sends them what the test
    gives with :meth:`send` (to every open connection); :meth:`stop` closes
    everything, :meth:`start` listens again on the same port."""

    def __init__(self, port: int | None = None, greeting: bytes = b""):
        self.port = port or free_port()
        self.greeting = greeting
        self.connections: list[socket.socket] = []
        self.accepted = 0
        self._server: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._running = False

    def start(self) -> EventServer:
        deadline = time.monotonic() + 10
        while True:
            try:
                self._server = socket.create_server((HOST, self.port))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self._server.settimeout(0.1)
        self._running = True
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()
        return self

    def _accept(self) -> None:
        while self._running:
            try:
                conn, _ = self._server.accept()
            except (TimeoutError, OSError):
                continue
            if self.greeting:
                conn.sendall(self.greeting)
            with self._lock:
                self.connections.append(conn)
                self.accepted += 1

    def wait_for_clients(self, count: int = 1, timeout: float = 10.0) -> None:
        wait_until(lambda: self.accepted >= count, timeout, what=f"{count} client connection(s)")

    def send(self, data: bytes | str) -> None:
        if isinstance(data, str):
            data = data.encode()
        with self._lock:
            for conn in self.connections:
                conn.sendall(data)

    def hang_up(self) -> None:
        """Close the open connections, keep listening."""
        with self._lock:
            for conn in self.connections:
                conn.close()
            self.connections.clear()

    def stop(self) -> None:
        self._running = False
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._server is not None:
            self._server.close()
        self.hang_up()


# --------------------------------------------------------------------------
# An HTTP server that receives webhooks
# --------------------------------------------------------------------------

class WebhookServer:
    """http.server on 127.0.0.1: records each POST's path and JSON body;
    answers ``fail_first`` requests with 500 (then 200)."""

    def __init__(self, fail_first: int = 0, status: int = 200):
        self.received: list[dict] = []
        self.paths: list[str] = []
        self.requests = 0
        self.fail_first = fail_first
        self.status = status
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                owner.requests += 1
                if owner.requests <= owner.fail_first:
                    code = 500
                else:
                    code = owner.status
                    if code < 300:
                        owner.received.append(json.loads(body))
                        owner.paths.append(self.path)
                        owner.content_type = self.headers.get("Content-Type")
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
        self.port = self.server.server_address[1]
        self.content_type = None
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    def url(self, path: str = "/hook") -> str:
        return f"http://{HOST}:{self.port}{path}"

    def __enter__(self) -> WebhookServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)


class HostileHttpServer:
    """An HTTP endpoint that answers each request with ``200 OK`` and then, for
    ever, a header line every ``drip`` seconds (each read of the client's comes
    within its timeout, the answer never), or an endless body when ``drip`` is
    None.  Counts what it sent (``sent``: chunks)."""

    def __init__(self, drip: float | None = 0.1):
        self.drip = drip
        self.sent = 0
        self._server = socket.create_server((HOST, 0))
        self.port = self._server.getsockname()[1]
        self._stop = threading.Event()

    def url(self, path: str = "/") -> str:
        return f"http://{HOST}:{self.port}{path}"

    def _answer(self, connection: socket.socket) -> None:
        with connection:
            try:
                connection.recv(1 << 16)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n")
                if self.drip is None:
                    connection.sendall(b"\r\n")
                while not self._stop.is_set():
                    if self.drip is None:
                        connection.sendall(b"x" * (1 << 16))
                    else:
                        connection.sendall(b"X-Drip: a\r\n")
                        time.sleep(self.drip)
                    self.sent += 1
            except OSError:             # the client shut the connection
                pass

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def __enter__(self) -> HostileHttpServer:
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._server.close()
