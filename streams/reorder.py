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
import types
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal, InvalidOperation

from ..errors import EventError
from ..events import Event, Time, as_time, format_time

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
    return value


class ReorderBuffer:
    """Holds events until the watermark passes them (see the module doc).

    :meth:`push` takes one item and returns what it releases; :meth:`flush`
    releases the rest.  Counters: ``late`` (rejected), ``released``,
    ``held`` (waiting now), ``peak_held``.
    """

    def __init__(self, lateness: Time | float | str, on_late: Callable[[EventError], None] | None = None):
        self.lateness = parse_lateness(lateness)
        self.on_late = on_late
        self.max_time: Time | None = None
        self.late = 0
        self.released = 0
        self.peak_held = 0
        self._heap: list[tuple[Time, int, Event]] = []
        self._order = itertools.count()
        self._latest: Event | None = None

    @property
    def watermark(self) -> Time | None:
        """Latest time seen minus the lateness (None before the first event)."""
        return None if self.max_time is None else self.max_time - self.lateness

    @property
    def held(self) -> int:
        return len(self._heap)

    def push(self, item: Event | EventError) -> list[Event | EventError]:
        if isinstance(item, EventError):
            return [item]
        watermark = self.watermark
        if watermark is not None and item.time < watermark:
            return [self._reject(item)]
        heapq.heappush(self._heap, (item.time, next(self._order), item))
        self.peak_held = max(self.peak_held, len(self._heap))
        if self.max_time is None or item.time > self.max_time:
            self.max_time = item.time
            self._latest = item
        return self._release(self.watermark)

    def flush(self) -> list[Event | EventError]:
        """End of input: everything held, in time order."""
        return self._release(None)

    def _release(self, up_to: Time | None) -> list[Event | EventError]:
        out: list[Event | EventError] = []
        heap = self._heap
        while heap and (up_to is None or heap[0][0] <= up_to):
            out.append(heapq.heappop(heap)[2])
        self.released += len(out)
        return out

    def _reject(self, event: Event) -> EventError:
        self.late += 1
        latest = self._latest
        behind = self.max_time - event.time

        def show(time: Time) -> str:
            return str(format_time(time, event.is_datetime))

        where = f" ({latest.position})" if latest is not None and latest.position else ""
        error = EventError(
            f"late event on stream <{event.stream}>: its time {show(event.time)} is {behind} s behind "
            f"the latest time seen, {show(self.max_time)}{where}, more than the allowed lateness of "
            f"{self.lateness} s (late events so far: {self.late})", event.position)
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
        yield from buffer.push(item)
    yield from buffer.flush()


def merge_arrival(sources: list[Iterable[Event | EventError]], *, buffer: int = 1000,
                  poll: float = 0.2) -> Iterator[Event | EventError]:
    """The items of several sources in the order they arrive (a thread each).

    Ends when every source has ended; an exception in a source is raised
    here.  Closing the iterator stops the threads (they end at their next
    item; live sources are closed at once).
    """
    if len(sources) == 1:
        yield from sources[0]
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

    def pump(source) -> None:
        try:
            for item in source:
                if not put(("item", item)):
                    return
        except BaseException as error:      # handed to the consumer
            put(("error", error))
        finally:
            put(("done", None))

    threads = [threading.Thread(target=pump, args=(source,), daemon=True, name="spaseq merge")
               for source in sources]
    for thread in threads:
        thread.start()
    try:
        running = len(threads)
        while running:
            try:
                kind, value = channel.get(timeout=poll)
            except queue.Empty:
                continue
            if kind == "item":
                yield value
            elif kind == "done":
                running -= 1
            else:
                raise value
    finally:
        stop.set()
        for source in sources:
            close = getattr(source, "close", None)
            if close is not None and not isinstance(source, types.GeneratorType):
                try:
                    close()
                except Exception:       # noqa: BLE001 - closing anyway
                    pass
