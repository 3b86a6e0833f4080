"""Replaying recorded streams at their recorded pace (``--rate``).

:func:`replay` wraps any time-ordered input (files, merged streams) and
sleeps so that events come out as they were recorded: with ``rate`` 1.0 an
event τ seconds after the first one is passed on τ seconds after the replay
started; with ``rate`` 10, τ/10 seconds after; ``rate`` None (or ``max``)
passes everything on at full speed.  The schedule is fixed at the first
event, so a slow consumer catches up instead of drifting.  Rejected items
(``EventError``) and events that are not later than the ones before pass
at once.

The command line (``spaseq run ... --rate R``)::

    rate = parse_rate(args.rate)             # UsageError on ValueError
    items = replay(items, rate)              # after the merge, before engine.run
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator

from ..errors import EventError
from ..events import IDLE, Event
from ..waits import LONGEST_WAIT, PLAIN_NUMBER

__all__ = ["parse_rate", "replay"]


def parse_rate(text: str | float | None) -> float | None:
    """``--rate``: a positive number (1 = real time, 10 = ten times faster),
    or ``max``/``inf`` for full speed (None).  Raises ``ValueError``."""
    if text is None:
        return None
    if isinstance(text, str) and text.strip().lower() in ("max", "inf", "infinity", "full"):
        return None
    try:
        rate = float(text) if not isinstance(text, str) or PLAIN_NUMBER.fullmatch(text) else float("not a number")
    except ValueError:
        raise ValueError(f"--rate {text}: expected a positive number (1 = real time) or max") from None
    if math.isinf(rate) and rate > 0:
        return None
    if not rate > 0 or math.isnan(rate):
        raise ValueError(f"--rate {text}: must be more than 0 (1 = real time, 10 = ten times faster)")
    if rate < 1 / LONGEST_WAIT:
        raise ValueError(f"--rate {text}: must be at least {1 / LONGEST_WAIT:g}: slower, a second of the stream "
                         f"would take more than {LONGEST_WAIT:g} s, the longest wait")
    return rate


def replay(items: Iterable[Event | EventError], rate: float | None, *,
           clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep,
           idle_flush: float | None = None) -> Iterator[Event | EventError]:
    """Pass ``items`` on at ``rate`` times their recorded pace (None: at once).
    With ``idle_flush`` (seconds), a wait longer than that yields ``IDLE``
    once it has lasted that long, as a live input that went quiet does."""
    if rate is None:
        return iter(items)
    if not rate > 0:
        raise ValueError("rate must be more than 0")
    return _paced(items, rate, clock, sleep, idle_flush)


# time.sleep refuses much longer waits (OverflowError, or EINVAL from the system):
# a slow --rate over a long gap (a year at 0.001) waits a day at a time.
_LONGEST_SLEEP = 86400.0


def _paced(items: Iterable[Event | EventError], rate: float, clock: Callable[[], float],
           sleep: Callable[[float], None], idle_flush: float | None) -> Iterator[Event | EventError]:
    start_wall = start_time = None
    for item in items:
        if isinstance(item, Event):
            if start_wall is None:
                start_wall, start_time = clock(), item.time
            else:
                due = start_wall + float(item.time - start_time) / rate
                delay = due - clock()
                if idle_flush is not None and delay > idle_flush:
                    sleep(min(idle_flush, _LONGEST_SLEEP))
                    yield IDLE
                    delay = due - clock()
                while delay > 0:
                    sleep(min(delay, _LONGEST_SLEEP))
                    delay = due - clock()
        yield item
