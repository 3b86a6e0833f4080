"""Errors users see: every one carries the position that explains it.

The command line's exit status follows the class: ``QueryError`` and
``UsageError`` 2, ``LimitError`` 3, any other error 1 (README, "Exit status").
"""

from __future__ import annotations

import contextlib
import re


class SpaseqError(Exception):
    """Base class of the errors this package reports to users."""


class QueryError(SpaseqError):
    """A query that cannot run: syntax or a compile-time check failed.

    The message names line and column (1-based) of the offending text.
    """

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.message = message
        self.line = line
        self.column = column
        where = f"line {line}, column {column}: " if line is not None else ""
        super().__init__(where + message)


class EventError(SpaseqError):
    """A rejected input event: malformed, untimed, duplicate or out of order.

    ``position`` is where it came from, e.g. ``power.trig:12``; ``reason``
    a short code saying which rule it breaks (``syntax``, ``encoding``, ``too-large``,
    ``truncated``, ``bad-timestamp``, ``no-timestamp``, ``two-timestamps``,
    ``split-graph``, ``duplicate``, ``out-of-order``, ``kind``,
    ``time-jump``, ``late``; ``invalid`` for anything else).  What was
    rejected, for the dead-letter file: ``text`` (the statement as read,
    cut at a limit, ``text_length`` long in full) or ``event`` (an event
    that was read but breaks an order rule), and ``graph`` (the event's
    graph name).  Control characters from the input are escaped in the
    message and the position, so that a message is one line of plain text.
    """

    def __init__(self, message: str, position: str | None = None, *, reason: str = "invalid",
                 graph: str | None = None, text: str | None = None, text_length: int | None = None,
                 event=None):
        self.message = escape_controls(message)
        self.position = escape_controls(position) if position else position
        self.reason = reason
        self.graph = graph
        self.text = text
        self.text_length = len(text) if text_length is None and text is not None else text_length
        self.event = event
        super().__init__(f"{self.position}: {self.message}" if self.position else self.message)


# C0 and C1 controls, DEL, and the bidirectional overrides that can make a
# terminal show text other than what it is.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def escape_controls(text: str) -> str:
    """``text`` with control characters written as ``\\xNN`` / ``\\uNNNN`` escapes."""
    if _CONTROLS.search(text) is None:
        return text
    return _CONTROLS.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}",
                         text)


class UsageError(SpaseqError):
    """A command-line argument or API option that cannot be used: a file that
    does not exist or cannot be written, a value out of range, an optional
    dependency that is not installed.  The message names the argument; the
    command exits with status 2."""


class OutputError(SpaseqError):
    """An output the run writes to (results, dead letters) failed: a full disk, a
    closed device.  The message names the output."""


class PluginError(SpaseqError):
    """A third-party plugin failed: it cannot be loaded or registered, it implements a hook
    that does not exist, it raised in a hook, or a hook returned what the hook does not
    return.  The message names the plugin (entry point, module, package) and the hook;
    the command exits with status 1.  So is an error that a stream source, result sink or
    KB store of a third-party plugin raises when spaseq calls it (unless it is a
    :class:`SpaseqError`: the plugin's own report, passed on as it is).

    ``results``: raised by :meth:`Engine.close() <spaseq_plugin.runtime.engine.Engine.close>`
    (a ``spaseq_query_stopped`` hook failed), the results ``close()`` would have returned;
    otherwise ``None``."""

    results: list | None = None


class LimitError(SpaseqError):
    """A documented limit was reached (a cap on runs, on memory, on time...).
    The message names the limit and the flag that raises it; the command
    exits with status 3."""


class StateLimitError(LimitError):
    """A cap on a query's runs was reached under the ``fail`` policy (``--max-runs``,
    ``--max-partition-runs``, ``--max-state-memory``); the command names the query."""


@contextlib.contextmanager
def as_usage_error(label: str, values: tuple[str, ...] = ()):
    """Errors met while opening what an argument names become usage errors naming it:
    ``--output out/x.csv: No such file or directory`` (not a query error, a limit, or a
    plugin's failure, which names the plugin).  A message that starts with one
    of ``values`` (``kb.ttl: ...``) follows the label: ``--kb kb.ttl: ...``."""
    try:
        yield
    except (QueryError, LimitError, PluginError):    # (a plugin's failure is not the argument's)
        raise
    except OSError as e:
        strerror = e.strerror or str(e)
        shown = e.filename if e.filename is not None and str(e.filename) not in label else None
        raise UsageError(_labelled(label, f"{shown}: {strerror}" if shown else strerror, values)) from None
    except (SpaseqError, ValueError) as e:
        raise UsageError(_labelled(label, str(e), values)) from None


def _labelled(label: str, message: str, values: tuple[str, ...]) -> str:
    if not label or message.startswith("--"):       # it names its argument already
        return message
    if any(message.startswith(f"{value}:") for value in values):
        return f"{label} {message}"
    return f"{label}: {message}"
