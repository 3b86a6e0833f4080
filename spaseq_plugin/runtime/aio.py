"""The async API: feed an engine from async iterators, get results with ``async for``.

>>> import asyncio
>>> from spaseq_plugin import Engine
>>> from spaseq_plugin.runtime.aio import run_async
>>> from spaseq_plugin.events import Event
>>> import pyoxigraph as ox
>>> engine = Engine('''PREFIX : <http://example/>
...   SELECT ?x WITHIN 10 SECONDS FROM STREAM S <http://example.org/s>
...   WHERE { SEQ (A) DEFINE GPM A ON S { ?x :kind "a" } }''')
>>> kind = ox.NamedNode("http://example/kind")
>>> async def events():
...     for t in (1, 2):
...         yield Event("http://example.org/s", t, (ox.Triple(ox.NamedNode(f"http://example/a{t}"), kind, ox.Literal("a")),))
>>> async def main():
...     return [(r.time, r.bindings["x"].value) async for r in run_async(engine, events())]
>>> asyncio.run(main())
[(1, 'http://example/a1'), (2, 'http://example/a2')]

* :func:`run_async` takes an async iterable of ``Event | EventError``, or a
  plain iterable: a list or tuple is read inline, any other iterable (a file
  or live source, which may block) is read in a worker thread so that the
  event loop keeps running.  Evaluation itself runs in the event loop: each
  event's results are yielded before the next event is read.
* :func:`aiter_blocking` turns a blocking iterator into an async one.
* :func:`open_source_async` opens a stream source by location, as
  ``--stream`` does (``tcp://...``, ``mqtt://...``, ``-``, a file), and
  reads it in a worker thread.
* :func:`merge_async` merges async iterables in arrival order (pass the
  result through :func:`reorder_async` for time order with a lateness).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable

from ..errors import EventError
from ..events import IDLE, Event, Time
from .results import Result

__all__ = ["aiter_blocking", "merge_async", "open_source_async", "reorder_async", "run_async"]

_END = object()


async def aiter_blocking(iterable: Iterable) -> AsyncIterator:
    """Items of a (possibly blocking) iterable, each read in a worker thread.

    When the consumer stops early, the iterator's ``close()`` is called
    (live sources then stop reading).
    """
    iterator = iter(iterable)
    loop = asyncio.get_running_loop()
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="spaseq aio")
    try:
        while True:
            item = await loop.run_in_executor(executor, next, iterator, _END)
            if item is _END:
                return
            yield item
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            try:
                if hasattr(iterator, "gi_running"):     # a generator: close it in its own thread
                    await loop.run_in_executor(executor, close)
                else:
                    close()
            except Exception:       # noqa: BLE001 - closing anyway
                pass
        executor.shutdown(wait=False)


def _as_async(source) -> AsyncIterator:
    if hasattr(source, "__aiter__"):
        return source.__aiter__()
    if isinstance(source, (list, tuple)):
        return _inline(source)
    return aiter_blocking(source)


async def _inline(items) -> AsyncIterator:
    for item in items:
        yield item


async def run_async(engine, events, *, close: bool = True, checkpoint=None) -> AsyncIterator[Result]:
    """Evaluate ``engine`` over ``events`` (async or plain iterable of
    ``Event | EventError``), yielding results as they become final; with
    ``close`` (the default) the engine is closed at the end of the input and
    its last results are yielded too.

    ``checkpoint`` (a :class:`~spaseq_plugin.runtime.checkpoint.Checkpointer`)
    makes the run resumable (docs/checkpoints.md): the engine, new, is
    restored from the last checkpoint and the items of ``events`` it had read
    are skipped (``events`` must give the same items again: a file, a
    replayable log); checkpoints are taken as the input is read, each once the
    results before it have been taken from this iterator.  Results after the
    last checkpoint may come again after a restart, with the same ``id``.
    """
    count = 0
    skip = position = 0
    if checkpoint is not None:
        found = checkpoint.load()
        if found is not None and found[0].get("finished"):
            return
        if found is not None:
            engine.restore(found[1])
            skip = position = found[1]["sources"][0]
        engine.result_ids = checkpoint.query
        checkpoint.start(engine.stats.events)
    async for item in _as_async(events):
        if skip:
            skip -= 1
            continue
        if checkpoint is not None and checkpoint.due(engine.stats.events) and engine.can_snapshot:
            started = time.perf_counter()
            body = engine.snapshot()
            body["sources"] = [position]
            checkpoint.save(body, engine.stats.events, since=started)
        position += 1
        if isinstance(item, Event):
            results = engine.push_event(item)
        elif item is IDLE:
            results = engine.idle()
        else:
            engine.reject(item)
            continue
        for result in results:
            yield result
        count += 1
        if count % 256 == 0:
            await asyncio.sleep(0)      # let other tasks run on a fast input
    if close:
        # As Engine.run: every result is yielded before the plugins' stop hook, whose
        # failure then costs none of them.
        for result in engine._finish():
            yield result
        if checkpoint is not None:
            checkpoint.save({"sources": [position]}, engine.stats.events, finished=True)
        engine._stopped()


def open_source_async(location: str, stream_iri: str) -> AsyncIterator[Event | EventError]:
    """A stream source by location, read in a worker thread: ``-`` (stdin),
    ``tcp://...``, ``mqtt://...``, ``stdin:FORMAT``, or a file path."""
    from ..plugins import registry, stream_source
    if location == "-":
        scheme, rest = "stdin", ""
    else:
        head, sep, rest = location.partition(":")
        if sep and len(head) > 1 and "/" not in head and not os.path.exists(location) \
                and head in registry().sources:
            scheme = head
        else:
            scheme, rest = "file", location
    return aiter_blocking(stream_source(scheme).open(rest, stream_iri))


async def merge_async(*sources) -> AsyncIterator[Event | EventError]:
    """Items of several async (or plain) iterables in arrival order."""
    iterators = [_as_async(source) for source in sources]
    pending = {asyncio.ensure_future(anext(it, _END)): it for it in iterators}
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for future in done:
                iterator = pending.pop(future)
                item = future.result()
                if item is _END:
                    continue
                pending[asyncio.ensure_future(anext(iterator, _END))] = iterator
                yield item
    finally:
        for future in pending:
            future.cancel()


async def reorder_async(events: AsyncIterable, lateness: Time | float | str) -> AsyncIterator[Event | EventError]:
    """:func:`spaseq_plugin.streams.reorder.reorder` for an async iterable."""
    from ..streams.reorder import ReorderBuffer
    buffer = ReorderBuffer(lateness)
    async for item in _as_async(events):
        for out in buffer.push(item):
            yield out
    for out in buffer.flush():
        yield out
