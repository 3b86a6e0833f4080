"""Out-of-order arrival: a reorder buffer with an allowed lateness (``--lateness``).

Live sources deliver events in arrival order, which across sources (and
across the network) is not quite time order.  :class:`ReorderBuffer` holds
events back and releases them in time order:

* the **watermark** is the latest event time seen so far minus the allowed
  lateness L;
* an event is held until the watermark reaches its time, then released;
  held events come out sorted by time, ties in arrival order;
* an event that arrives with a time already below the watermark (more than
  L behind the latest time seen) is **late**: it is rejected, as
  semantics.md section 10 says for an event older than what was processed,
  with an ``EventError`` naming its position, its time, how far behind it
  is and the lateness allowed, and counted (``late``);
* at the end of the input every held event is released, in time order;
* ``EventError`` items (rejections from the sources) pass through at once.

L = 0 releases every event at once and rejects any event older than the
latest one (events of the same time, from several streams, still pass).
Times are the events' seconds (``xsd:dateTime`` timestamps too), so L is
in seconds.

:func:`merge_arrival` reads several sources at once (a thread each) and
yields their items in arrival order: the input the buffer is made for.
Unlike ``files.merge_streams`` it never waits for a silent source.

The command line (``spaseq run ... --lateness L``)::

    lateness = parse_lateness(args.lateness)          # UsageError on ValueError
    items = reorder(merge_arrival(sources), lateness)  # instead of merge_streams(sources)
"""

from __future__ import annotations

import heapq
import itertools
import queue
import re
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal, InvalidOperation

from ..errors import EventError
from ..events import IDLE, Event, Time, as_time, finer_than_a_nanosecond, format_time

__all__ = ["ReorderBuffer", "merge_arrival", "parse_lateness", "reorder"]


_UNITS = {"": 1, "s": 1, "sec": 1, "ms": Decimal("0.001"), "m": 60, "min": 60, "h": 3600, "d": 86400}
_LATENESS = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-z]*)\s*", re.I)


def parse_lateness(text: str | int | float | Decimal) -> Time:
    """``--lateness``: seconds (``5``, ``2.5``) or with a unit (``500ms``,
    ``30s``, ``2min``, ``1h``, ``1d``).  Raises ``ValueError``."""
    if not isinstance(text, str):
        value = as_time(text)
    else:
        match = _LATENESS.fullmatch(text)
        unit = match and _UNITS.get(match.group(2).lower())
        if not match or unit is None:
            raise ValueError(f"--lateness {text}: expected seconds, or a number with ms, s, min, h or d")
        try:
            value = as_time(Decimal(match.group(1)) * unit)
        except InvalidOperation:
            raise ValueError(f"--lateness {text}: not a number") from None
    if value < 0:
        raise ValueError(f"--lateness {text}: must not be negative")
    if finer_than_a_nanosecond(value):
        raise ValueError(f"--lateness {text}: finer than a nanosecond (times are exact to the nanosecond)")
    return value


_ALL = object()

#: The most events a buffer holds back (``--max-held``).  Past it the oldest are
#: passed on early, and an event older than them that comes later is late: a
#: connection of a listening source that kept sending times a little after its
#: first one held back every other connection's events, without bound.
DEFAULT_MAX_HELD = 100_000
MAX_HELD = DEFAULT_MAX_HELD


class ReorderBuffer:
    """Holds events until the watermark passes them (see the module doc).

    :meth:`push` takes one item and returns what it releases; :meth:`flush`
    releases the rest.  Counters: ``late`` (rejected), ``released``,
    ``held`` (waiting now), ``peak_held``.

    **Channels** (several inputs of one stream, such as the connections of
    a TCP source in listen mode): an event is also released once every
    *active* channel has delivered its time or a later one, so that inputs
    that keep up are merged in time order without waiting for the
    lateness; a channel is active from :meth:`open_channel` to
    :meth:`close_channel`, unless nothing has come from it for
    ``quiet_after`` seconds (then it no longer holds the others back, and
    what it sends older than what was released is late).  ``lateness``
    None: only the channels (and :meth:`idle`) release events.
    :meth:`idle` (the whole input went quiet) releases everything held.
    At most ``max_held`` events (``MAX_HELD`` unless given) are held: past it
    the oldest are released early (``passed_early`` counts them).
    """

    def __init__(self, lateness: Time | float | str | None, on_late: Callable[[EventError], None] | None = None,
                 quiet_after: float | None = None, max_held: int | None = None):
        self.lateness = None if lateness is None else parse_lateness(lateness)
        self.on_late = on_late
        self.quiet_after = quiet_after
        self.max_held = MAX_HELD if max_held is None else max_held
        self.passed_early = 0
        self.max_time: Time | None = None
        self.late = 0
        self.released = 0
        self.peak_held = 0
        self._heap: list[tuple[Time, int, Event]] = []
        self._order = itertools.count()
        self._latest: Event | None = None
        self._floor: Time | None = None                 # the highest time released up to
        self._channels: dict[object, list] = {}         # channel -> [latest time or None, last arrival]

    @property
    def watermark(self) -> Time | None:
        """Latest time seen minus the lateness (None before the first event)."""
        if self.max_time is None or self.lateness is None:
            return None
        return self.max_time - self.lateness

    @property
    def held(self) -> int:
        return len(self._heap)

    def open_channel(self, channel, now: float | None = None) -> None:
        self._channels[channel] = [None, time.monotonic() if now is None else now]

    def close_channel(self, channel) -> list[Event | EventError]:
        self._channels.pop(channel, None)
        return self._release(self._limit(time.monotonic()))

    def push(self, item: Event | EventError, channel=None, now: float | None = None) -> list[Event | EventError]:
        if item is IDLE:
            return self.idle() + [IDLE]
        if isinstance(item, EventError):
            return [item]
        floor = self._floor
        if floor is not None and item.time < floor:
            return [self._reject(item)]
        if channel is not None:
            now = time.monotonic() if now is None else now
            state = self._channels.setdefault(channel, [None, now])
            state[0], state[1] = item.time, now
        heapq.heappush(self._heap, (item.time, next(self._order), item))
        self.peak_held = max(self.peak_held, len(self._heap))
        if self.max_time is None or item.time > self.max_time:
            self.max_time = item.time
            self._latest = item
        out = self._release(self._limit(now))
        while len(self._heap) > self.max_held:
            early = self._release(self._heap[0][0])
            self.passed_early += len(early)
            out += early
        return out

    def release_quiet(self, now: float | None = None) -> list[Event | EventError]:
        """What channels that went quiet no longer hold back."""
        return self._release(self._limit(time.monotonic() if now is None else now)) if self._heap else []

    def idle(self) -> list[Event | EventError]:
        """The input went quiet: everything held, in time order."""
        return self._release(self.max_time)

    def flush(self) -> list[Event | EventError]:
        """End of input: everything held, in time order."""
        return self._release(_ALL)

    def _limit(self, now: float | None) -> Time | None:
        """The time up to which events can be released now (None: nothing)."""
        limit = self.watermark
        if self._channels and self._heap:
            quiet = self.quiet_after
            latest = [state[0] for state in self._channels.values()
                      if quiet is None or now is None or now - state[1] < quiet]
            if not latest:
                together = self.max_time                # every channel is quiet
            elif None in latest:
                together = None                         # one has sent nothing yet
            else:
                together = min(latest)
            if together is not None and (limit is None or together > limit):
                limit = together
        return limit

    def _release(self, up_to) -> list[Event | EventError]:
        """The held events up to ``up_to`` (None: none; ``_ALL``: all)."""
        if up_to is None:
            return []
        out: list[Event | EventError] = []
        heap = self._heap
        while heap and (up_to is _ALL or heap[0][0] <= up_to):
            out.append(heapq.heappop(heap)[2])
        self.released += len(out)
        if up_to is not _ALL and (self._floor is None or up_to > self._floor):
            self._floor = up_to
        return out

    def _reject(self, event: Event) -> EventError:
        self.late += 1
        latest = self._latest
        behind = self.max_time - event.time

        def show(time: Time) -> str:
            return str(format_time(time, event.is_datetime))

        where = f" ({latest.position})" if latest is not None and latest.position else ""
        allowed = (f"more than the allowed lateness of {self.lateness} s" if self.lateness is not None
                   else "older than the events already passed on")
        if self.passed_early:
            allowed += f" (or behind events passed on early: at most {self.max_held:,} are held, --max-held)"
        error = EventError(
            f"late event on stream <{event.stream}>: its time {show(event.time)} is {behind} s behind "
            f"the latest time seen, {show(self.max_time)}{where}, {allowed} (late events so far: {self.late})",
            event.position, reason="late", event=event,
            graph=None if event.name is None else str(event.name))
        if self.on_late is not None:
            self.on_late(error)
        return error


def reorder(items: Iterable[Event | EventError], lateness: Time | float | str, *,
            buffer: ReorderBuffer | None = None) -> Iterator[Event | EventError]:
    """``items`` in time order, within the allowed lateness (late ones rejected).

    Pass your own ``buffer`` (a :class:`ReorderBuffer`) to read its counters.
    """
    buffer = buffer if buffer is not None else ReorderBuffer(lateness)
    for item in items:
        yield from buffer.push(item)         # (IDLE: what is held, then IDLE)
    yield from buffer.flush()


def merge_arrival(sources: list[Iterable[Event | EventError]], *, buffer: int = 1000,
                  poll: float = 0.2, idle_flush: float | None = None,
                  order: ReorderBuffer | None = None) -> ArrivalMerge:
    """The items of several sources as they arrive (a thread each).

    Without ``order``, in arrival order.  With ``order`` (a
    :class:`ReorderBuffer`), in time order: each source is a channel of it,
    so an event is passed on once every source that is not quiet has
    delivered its time or a later one (or the lateness has passed).  With
    ``idle_flush`` (seconds), ``IDLE`` comes once nothing has arrived from
    any source for that long (the sources' own ``IDLE`` items are dropped:
    one quiet source is not a quiet input), after what ``order`` held.

    Ends when every source has ended; an exception in a source is raised
    here.  Closing the iterator stops the threads (they end at their next
    item; live sources are closed at once).  :meth:`ArrivalMerge.stop_reading`
    ends it without losing what was read (a graceful stop).
    """
    return ArrivalMerge(sources, buffer=buffer, poll=poll, idle_flush=idle_flush, order=order)


class ArrivalMerge:
    """The iterator :func:`merge_arrival` returns."""

    def __init__(self, sources: list[Iterable[Event | EventError]], *, buffer: int, poll: float,
                 idle_flush: float | None, order: ReorderBuffer | None):
        self.sources = sources
        self.reading_stopped = False
        self._items = self._merged(buffer, poll, idle_flush, order)

    def __iter__(self) -> ArrivalMerge:
        return self

    def __next__(self) -> Event | EventError:
        return next(self._items)

    def close(self) -> None:
        self._items.close()

    def stop_reading(self, reason: str) -> None:
        """Stop reading, losing nothing read: a source that can stop so
        (``stop_reading(reason)``: live sources) passes on what it received,
        any other ends after the item it is on; the merge then passes on what
        it holds and ends."""
        self.reading_stopped = True     # (a flag: this runs in a signal handler)
        for source in self.sources:
            stop = getattr(source, "stop_reading", None)
            if stop is not None:
                stop(reason)

    def _merged(self, buffer: int, poll: float, idle_flush: float | None,
                order: ReorderBuffer | None) -> Iterator[Event | EventError]:
        sources = self.sources
        if len(sources) == 1:
            source = sources[0]
            stops_itself = hasattr(source, "stop_reading")
            if order is not None:
                order.open_channel(0)
            for item in source:
                if order is None:
                    yield item
                else:
                    yield from order.push(item, 0) if isinstance(item, Event) else order.push(item)
                if self.reading_stopped and not stops_itself:
                    break
            if order is not None:
                yield from order.flush()
            return
        channel: queue.Queue = queue.Queue(maxsize=buffer)
        stop = threading.Event()

        def put(message) -> bool:
            while not stop.is_set():
                try:
                    channel.put(message, timeout=poll)
                    return True
                except queue.Full:
                    continue
            return False

        def pump(index: int, source) -> None:
            stops_itself = hasattr(source, "stop_reading")
            try:
                for item in source:
                    if not put(("item", item, index)):
                        return
                    if self.reading_stopped and not stops_itself:
                        return
            except BaseException as error:      # handed to the consumer
                put(("error", error, index))
            finally:
                put(("done", None, index))

        threads = [threading.Thread(target=pump, args=(index, source), daemon=True, name="spaseq merge")
                   for index, source in enumerate(sources)]
        if order is not None:
            for index in range(len(sources)):
                order.open_channel(index)
        for thread in threads:
            thread.start()
        try:
            running = len(threads)
            last, flushed = time.monotonic(), True
            while running:
                wait = poll
                if idle_flush is not None and not flushed:
                    wait = max(0.0, min(poll, last + idle_flush - time.monotonic()))
                try:
                    kind, value, index = channel.get(timeout=wait)
                except queue.Empty:
                    if idle_flush is not None and not flushed and time.monotonic() - last >= idle_flush:
                        flushed = True
                        if order is not None:
                            yield from order.idle()
                        yield IDLE
                    elif order is not None:
                        yield from order.release_quiet()
                    continue
                if kind == "item":
                    if value is IDLE:
                        continue
                    last, flushed = time.monotonic(), False
                    if order is None:
                        yield value
                    else:
                        yield from order.push(value, index if isinstance(value, Event) else None)
                elif kind == "done":
                    running -= 1
                    if order is not None:
                        yield from order.close_channel(index)
                else:
                    raise value
            if order is not None:
                yield from order.flush()
        finally:
            stop.set()
            for source in sources:
                close = getattr(source, "close", None)
                if close is not None and not isinstance(source, types.GeneratorType):
                    try:
                        close()
                    except Exception:       # noqa: BLE001 - closing anyway
                        pass
