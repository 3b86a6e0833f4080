"""Result sinks that are not files: an HTTP POST webhook and Python callbacks.

(The MQTT publish sink is in ``streams/mqtt.py``, beside the MQTT source.)

Webhook: ``--sink webhook:URL`` (or ``--sink http://...``, ``https://...``)
------------------------------------------------------------------------------
Each result is POSTed to URL as one JSON object (``Content-Type:
application/json``), the same object as a line of ``--format jsonl``:
``{"time": T, "bindings": {var: term}}``, plus ``"triples"`` for CONSTRUCT
and ``"events"`` with the ``with_events`` option.  Results are sent one at a
time, in order, as they are found.

A failed POST (no connection, a timeout, HTTP 5xx, 408 or 429) is retried
with exponential backoff: ``backoff`` seconds (0.5) doubled up to
``max_backoff`` (10), at most ``retries`` times (3); each retry is reported
(a warning of this module's logger, on standard error from the command line).  Other HTTP errors (4xx) are not retried.  When a result
cannot be delivered, ``on_error=stop`` (the default) raises ``SpaseqError``
(the command stops with status 1, saying why); ``on_error=skip`` reports it,
counts it (``failed``) and goes on with the next result.

Options go in the URL's fragment, which is never sent to the server
(``webhook:http://127.0.0.1:8000/hook#retries=5&timeout=2&on_error=skip``),
or in the API's ``options`` dict: ``retries``, ``backoff``, ``max_backoff``,
``timeout`` (seconds per request, 10), ``on_error``, ``with_events``,
``headers`` (dict, API only), ``report`` (callable, API only).

Callbacks: ``--sink callback:MODULE:FUNCTION``
----------------------------------------------
Calls a Python function with each :class:`~spaseq_plugin.runtime.results.Result`
(or, with the option ``as_json``, with its JSON object as above).  From the
API, pass the function itself: ``result_sink("callback").open(function,
variables, {})`` or ``CallbackSink(function)``.
"""

from __future__ import annotations

import http.client
import importlib
import io
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from urllib.parse import parse_qsl, urldefrag, urlsplit

from ..errors import OutputError, SpaseqError
from ..hookspecs import ResultSink, hookimpl
from ..http_deadline import Deadline, opener
from ..waits import wait_seconds
from .formats import JsonLinesWriter

__all__ = ["CallbackSink", "WebhookSink", "open_callback_sink", "open_webhook_sink", "result_json"]


def result_json(result, with_events: bool = False) -> dict:
    """A result as the JSON object of its ``--format jsonl`` line."""
    buffer = io.StringIO()
    writer = JsonLinesWriter(buffer, [], with_events)
    writer.write(result)
    writer.flush()
    return json.loads(buffer.getvalue())


log = logging.getLogger(__name__)


def _report(message: str) -> None:
    log.warning(message)


# --------------------------------------------------------------------------
# Webhook
# --------------------------------------------------------------------------

_RETRYABLE_STATUS = {408, 429}
_REPLY_BYTES = 64 << 10         # of an endpoint's reply, read and dropped (an endless one filled the memory)


class WebhookSink:
    """POSTs each result as JSON to a URL, retrying failures (bounded)."""

    def __init__(self, url: str, *, retries: int = 3, backoff: float = 0.5, max_backoff: float = 10.0,
                 timeout: float = 10.0, on_error: str = "stop", with_events: bool = False,
                 headers: dict[str, str] | None = None, report: Callable[[str], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        if not url.lower().startswith(("http://", "https://")):
            raise SpaseqError(f"webhook {url!r}: expected an http:// or https:// URL")
        if not urlsplit(url).hostname:
            raise SpaseqError(f"webhook {url}: the URL names no host")
        if on_error not in ("stop", "skip"):
            raise SpaseqError(f"webhook {url}: on_error must be stop or skip, not {on_error!r}")
        if retries < 0:
            raise SpaseqError(f"webhook {url}: retries must be 0 or more")
        for name, seconds, zero in (("backoff", backoff, True), ("max_backoff", max_backoff, True),
                                    ("timeout", timeout, False)):
            try:
                wait_seconds(seconds, zero=zero)
            except ValueError as e:
                raise SpaseqError(f"webhook {url}: {name} {e}") from None
        self.url = url
        self.retries, self.backoff, self.max_backoff = retries, backoff, max_backoff
        self.timeout = timeout
        self.on_error = on_error
        self.with_events = with_events
        self.headers = {"Content-Type": "application/json", "User-Agent": "spaseq", **(headers or {})}
        self.report = report or _report
        self.sleep = sleep
        # A proxy cannot reach this machine's loopback: talk to it directly.
        host = (urlsplit(url).hostname or "").lower()
        loopback = host == "localhost" or host == "::1" or host.startswith("127.")
        self._open = opener(urllib.request.ProxyHandler({})).open if loopback else opener().open
        self.sent = 0           # results delivered
        self.failed = 0         # results given up on
        self.retried = 0        # retries made, in all

    def write(self, result) -> None:
        self.post(result_json(result, self.with_events))

    def post(self, document: dict) -> None:
        data = json.dumps(document, ensure_ascii=False).encode("utf-8")
        attempt = 0
        while True:
            request = urllib.request.Request(self.url, data=data, headers=self.headers, method="POST")
            try:
                # (the whole exchange within the timeout: an endpoint dripping its headers
                # held the run for ever, each byte within the timeout of a read)
                with Deadline(self.timeout) as deadline, self._open(request, timeout=self.timeout) as response:
                    response.read(_REPLY_BYTES)
                    if deadline.passed:         # (its socket shut: the reply read may be cut)
                        raise TimeoutError
                self.sent += 1
                return
            except urllib.error.HTTPError as error:
                error.close()
                retryable = error.code >= 500 or error.code in _RETRYABLE_STATUS
                reason = f"HTTP {error.code} {error.reason}"
            except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
                retryable = True
                cause = getattr(error, "reason", None) or error
                reason = f"no answer within {self.timeout:g} s" if deadline.passed else \
                    getattr(cause, "strerror", None) or str(cause) or type(cause).__name__
            attempt += 1
            if not retryable or attempt > self.retries:
                self.failed += 1
                tries = f" after {self.retries} retr{'y' if self.retries == 1 else 'ies'}" \
                    if retryable and self.retries else ""
                message = f"webhook {self.url}: result not delivered: {reason}{tries}"
                if self.on_error == "stop":
                    raise SpaseqError(message)
                self.report(f"{message} ({self.failed} not delivered so far)")
                return
            self.retried += 1
            delay = min(self.backoff * 2 ** (attempt - 1), self.max_backoff)
            self.report(f"webhook {self.url}: {reason}; retrying in {delay:.3g} s "
                        f"(attempt {attempt} of {self.retries})")
            self.sleep(delay)

    def close(self) -> None:
        if self.failed:
            self.report(f"webhook {self.url}: {self.sent} results delivered, {self.failed} not delivered")


def _webhook_options(url: str, options: dict) -> tuple[str, dict]:
    url, fragment = urldefrag(url)
    kwargs = {}
    for key, value in list(parse_qsl(fragment, keep_blank_values=True)) + list(options.items()):
        key = key.replace("-", "_")
        try:
            if key == "retries":
                kwargs[key] = int(value)
            elif key in ("backoff", "max_backoff", "timeout"):
                kwargs[key] = float(value)
            elif key == "on_error":
                kwargs[key] = str(value)
            elif key == "with_events":
                kwargs[key] = value if isinstance(value, bool) else str(value).lower() not in ("0", "no", "false")
            elif key in ("headers", "report", "sleep"):
                kwargs[key] = value
            else:
                raise SpaseqError(f"webhook {url}: unknown option {key!r} (known: retries, backoff, "
                                  "max_backoff, timeout, on_error, with_events)")
        except (TypeError, ValueError):
            raise SpaseqError(f"webhook {url}: option {key}={value!r} is not a number") from None
    return url, kwargs


def open_webhook_sink(target: str, variables, options: dict) -> WebhookSink:
    """``--sink webhook:URL[#options]``."""
    url, kwargs = _webhook_options(target, options)
    return WebhookSink(url, **kwargs)


def _open_http(scheme: str):
    def open_sink(target: str, variables, options: dict) -> WebhookSink:
        return open_webhook_sink(f"{scheme}:{target}", variables, options)
    return open_sink


# --------------------------------------------------------------------------
# Callbacks
# --------------------------------------------------------------------------

class CallbackSink:
    """Calls ``function`` with each result (its JSON object with ``as_json``).

    A function named on the command line (``spec``) that raises is the
    user's error, an ``OutputError`` naming it; a function given from Python
    raises its own exception to its caller."""

    def __init__(self, function: Callable, *, as_json: bool = False, with_events: bool = False,
                 on_close: Callable[[], None] | None = None, spec: str | None = None):
        if not callable(function):
            raise SpaseqError(f"callback sink: {function!r} is not callable")
        self.function = function
        self.as_json = as_json
        self.with_events = with_events
        self.on_close = on_close
        self.spec = spec
        self.calls = 0

    def write(self, result) -> None:
        self.calls += 1
        try:
            self.function(result_json(result, self.with_events) if self.as_json else result)
        except Exception as error:
            if self.spec is None or isinstance(error, SpaseqError):     # (a LimitError is meant: exit 3)
                raise
            raise OutputError(f"callback {self.spec} raised {type(error).__name__}: {error} "
                              f"(on result {self.calls})") from error

    def close(self) -> None:
        if self.on_close is not None:
            self.on_close()


def load_function(spec: str) -> Callable:
    """``package.module:function`` (or ``package.module.function``) -> the function."""
    module_name, sep, attribute = spec.partition(":")
    if not sep:
        module_name, _, attribute = spec.rpartition(".")
    if not module_name or not attribute:
        raise SpaseqError(f"callback {spec!r}: expected MODULE:FUNCTION")
    try:
        target = importlib.import_module(module_name)
    except ImportError as e:
        raise SpaseqError(f"callback {spec}: cannot import {module_name}: {e}") from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise SpaseqError(f"callback {spec}: {module_name} has no {attribute}") from None
    if not callable(target):
        raise SpaseqError(f"callback {spec}: not callable")
    return target


def open_callback_sink(target, variables, options: dict) -> CallbackSink:
    """``--sink callback:MODULE:FUNCTION``, or a callable from the API."""
    function = load_function(target) if isinstance(target, str) else target
    return CallbackSink(function, as_json=bool(options.get("as_json")),
                        with_events=bool(options.get("with_events")), on_close=options.get("on_close"),
                        spec=target if isinstance(target, str) else None)


@hookimpl
def spaseq_result_sinks():
    return [
        ResultSink("webhook", open_webhook_sink,
                   "webhook:URL: POST each result as JSON (retries with backoff)", file_like=False),
        ResultSink("http", _open_http("http"), "http://...: as webhook:http://...", file_like=False),
        ResultSink("https", _open_http("https"), "https://...: as webhook:https://...", file_like=False),
        ResultSink("callback", open_callback_sink,
                   "callback:MODULE:FUNCTION: call a Python function with each result", file_like=False),
    ]
