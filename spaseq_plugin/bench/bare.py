"""The floor under every reader: pyoxigraph's bare parse of the stream files.

``bare parse`` rows time ``pyoxigraph.parse`` over the same bytes the engine
reads, every quad produced and dropped, nothing built: no events, no
timestamps, no engine.  The engine's rate divided by this one (``x bare``)
is the fraction of the physical floor it reaches (the targets of the
throughput issue are written that way).
"""

from __future__ import annotations

import time

import pyoxigraph as ox

from ..streams.files import stream_file_format
from .workloads import Source


def bare_parse(source: Source, events: int) -> dict:
    """Parse every file of ``source`` (which holds ``events`` events) and time it."""
    if source.kind != "files":
        return {"error": f"no bare parse for a {source.kind!r} source (only stream files)"}
    quads = 0
    started = time.perf_counter()
    for paths in source.paths.values():
        for path in paths:
            for _ in ox.parse(path=path, format=stream_file_format(path)):
                quads += 1
    seconds = time.perf_counter() - started
    return {"events": events, "triples": quads, "rejected": 0, "seconds": seconds,
            "eps": events / seconds if seconds > 0 else None, "tps": quads / seconds if seconds > 0 else None}
