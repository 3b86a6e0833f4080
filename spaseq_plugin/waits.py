"""Seconds a user gives for a wait: timeouts, backoffs, flush and stop times.

A wait longer than the system can count fails where it happens, not where the
option was given: ``threading`` and sockets raise OverflowError past
``threading.TIMEOUT_MAX`` (about 292 years), ``time.sleep`` EINVAL well
before.  So every such option is a positive number of seconds up to
``LONGEST_WAIT`` (a billion seconds, about 31 years), and an error naming the
option otherwise.

>>> wait_seconds("2.5")
2.5
>>> wait_seconds("1e300")
Traceback (most recent call last):
...
ValueError: must be a number of seconds more than 0, at most 1e+09
"""

from __future__ import annotations

import re
import threading
from typing import Callable, TypeVar

LONGEST_WAIT = 1e9
#: a number as a user writes it, in ASCII: Python's float() and int() also take
#: "1_000" and other scripts' digits, which no other option or tool does
PLAIN_NUMBER = re.compile(r"\s*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*")
T = TypeVar("T")


def wait_seconds(value: str | float, *, zero: bool = False) -> float:
    """``value`` (a number, or its text) as seconds to wait; ValueError saying the
    bounds when it is not a number in (0, LONGEST_WAIT], or [0, ...] with ``zero``."""
    try:
        seconds = float(value) if not isinstance(value, str) or PLAIN_NUMBER.fullmatch(value) else float("nan")
    except (TypeError, ValueError):
        seconds = float("nan")
    if not (0 <= seconds if zero else 0 < seconds) or not seconds <= LONGEST_WAIT:
        raise ValueError(f"must be a number of seconds {'from 0' if zero else 'more than 0'}, "
                         f"at most {LONGEST_WAIT:g}")
    return seconds


class NoAnswer(Exception):
    """A call given to :func:`within` did not return in time."""


def within(seconds: float, work: Callable[[], T], name: str) -> T:
    """``work()``'s result, or its exception, or :class:`NoAnswer` once ``seconds``
    have passed.  For calls that take no time limit of their own (pyoxigraph's
    and rdflib's SERVICE, rdflib's SPARQLStore): ``work`` runs in a thread
    (``name``), and one still waiting after the deadline is left behind, a
    daemon that cannot keep the process alive."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append((True, work()))
        except BaseException as error:      # handed to the caller's thread
            outcome.append((False, error.with_traceback(None)))

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join(seconds)
    if not outcome:
        raise NoAnswer(f"no answer within {seconds:g} s")
    done, value = outcome[0]
    if not done:
        raise value
    return value
