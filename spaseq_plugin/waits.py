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

LONGEST_WAIT = 1e9


def wait_seconds(value: str | float, *, zero: bool = False) -> float:
    """``value`` (a number, or its text) as seconds to wait; ValueError saying the
    bounds when it is not a number in (0, LONGEST_WAIT], or [0, ...] with ``zero``."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not (0 <= seconds if zero else 0 < seconds) or not seconds <= LONGEST_WAIT:
        raise ValueError(f"must be a number of seconds {'from 0' if zero else 'more than 0'}, "
                         f"at most {LONGEST_WAIT:g}")
    return seconds
