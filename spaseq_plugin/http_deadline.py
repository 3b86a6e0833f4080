"""HTTP requests that end: a deadline on the whole exchange.

urllib's ``timeout`` bounds each wait on the socket, not the answer: an
endpoint that sends its status line and headers a few bytes at a time, each
within the timeout, held a request, and the run, for ever.  :func:`opener`
builds a urllib opener whose connections are watched by the
:class:`Deadline` in force in the thread that opens them; when it passes, a
watchdog thread shuts those sockets down, so that the read waiting on them fails at
once (plain HTTP and HTTPS alike), and ``deadline.passed`` tells that
failure from the others.

    deadline_opener = opener(urllib.request.ProxyHandler({}))
    with Deadline(10) as deadline:
        try:
            with deadline_opener.open(request, timeout=10) as response:
                body = response.read(1 << 16)
        except OSError:
            if deadline.passed:
                ...     # no answer within 10 s
            raise
"""

from __future__ import annotations

import heapq
import http.client
import itertools
import socket
import threading
import time
import urllib.request

_local = threading.local()


class Deadline:
    """The time a request has, from entering the ``with`` block; the sockets
    opened meanwhile by an :func:`opener`'s connections are shut down when it
    passes (by the one watchdog thread: a thread per request cost 0.3 ms)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.passed = False
        self.finished = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def __enter__(self) -> Deadline:
        self._outer = getattr(_local, "deadline", None)
        _local.deadline = self
        _watchdog.add(time.monotonic() + self.seconds, self)
        return self

    def __exit__(self, *exc) -> None:
        self.finished = True
        _watchdog.finished()
        _local.deadline = self._outer

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if not self.passed:
                return
        _shut(sock)

    def pass_now(self) -> None:
        with self._lock:
            self.passed = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


class _Watchdog:
    """One daemon thread that passes the deadlines due: a heap of them by time,
    those finished dropped as they come up (or all at once, when they are most)."""

    def __init__(self):
        self._heap: list[tuple[float, int, Deadline]] = []
        self._finished = 0
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, when: float, deadline: Deadline) -> None:
        with self._wake:
            heapq.heappush(self._heap, (when, next(self._order), deadline))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="spaseq http deadlines")
                self._thread.start()
            elif self._heap[0][2] is deadline:
                self._wake.notify()

    def finished(self) -> None:
        with self._wake:
            self._finished += 1
            if self._finished > 64 and self._finished * 2 > len(self._heap):
                self._heap = [entry for entry in self._heap if not entry[2].finished]
                heapq.heapify(self._heap)
                self._finished = 0

    def _run(self) -> None:
        while True:
            with self._wake:
                while True:
                    while self._heap and self._heap[0][2].finished:
                        heapq.heappop(self._heap)
                        self._finished = max(0, self._finished - 1)
                    if self._heap and self._heap[0][0] <= time.monotonic():
                        due = heapq.heappop(self._heap)[2]
                        break
                    self._wake.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
            due.pass_now()


_watchdog = _Watchdog()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:         # (closed already)
        pass


def _watched(connection_class):
    class Watched(connection_class):
        def connect(self):
            super().connect()
            deadline = getattr(_local, "deadline", None)
            if deadline is not None:
                deadline.watch(self.sock)
    Watched.__name__ = f"Watched{connection_class.__name__}"
    return Watched


_HTTPConnection = _watched(http.client.HTTPConnection)
_HTTPSConnection = _watched(http.client.HTTPSConnection)


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(_HTTPConnection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):
        options = {"context": self._context}
        if hasattr(self, "_check_hostname"):            # (Python before 3.12)
            options["check_hostname"] = self._check_hostname
        return self.do_open(_HTTPSConnection, req, **options)


def opener(*handlers) -> urllib.request.OpenerDirector:
    """``urllib.request.build_opener(*handlers)`` whose HTTP and HTTPS connections
    are watched by the :class:`Deadline` in force when they open."""
    return urllib.request.build_opener(_HTTPHandler(), _HTTPSHandler(), *handlers)
