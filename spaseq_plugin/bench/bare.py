"""The floor under every reader: pyoxigraph's bare parse of the stream files.

``bare parse`` rows time ``pyoxigraph.parse`` over the same bytes the engine
reads, every quad produced and dropped, nothing built: no events, no
timestamps, no engine.  The engine's rate divided by this one (``x bare``)
is the fraction of the physical floor it reaches (the targets of the
throughput issue are written that way).

:func:`compare_reading` (``spaseq bench --read FILE...``) sets the stream
reader alone (``streams/files.py``: events, timestamps, order checks, no
engine) against the bare parse of the same files, in turns in one process,
the fastest of a few runs each, so that the machine's load moves both alike.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Iterable

import pyoxigraph as ox

from ..errors import EventError
from ..streams.files import read_stream_file, stream_file_format
from .workloads import Source


def parse_files(paths: Iterable[str]) -> tuple[int, float]:
    """(quads, seconds) of a bare ``pyoxigraph.parse`` loop over the files
    (a gzipped one is read and unpacked before the clock starts)."""
    inputs = []
    for path in paths:
        if path.lower().endswith(".gz"):
            with gzip.open(path, "rb") as f:
                inputs.append({"input": f.read(), "format": stream_file_format(path)})
        else:
            inputs.append({"path": path, "format": stream_file_format(path)})
    quads = 0
    started = time.perf_counter()
    for arguments in inputs:
        for _ in ox.parse(**arguments):
            quads += 1
    return quads, time.perf_counter() - started


def bare_parse(source: Source, events: int) -> dict:
    """Parse every file of ``source`` (which holds ``events`` events) and time it."""
    if source.kind != "files":
        return {"error": f"no bare parse for a {source.kind!r} source (only stream files)"}
    quads, seconds = parse_files(path for paths in source.paths.values() for path in paths)
    return {"events": events, "triples": quads, "rejected": 0, "seconds": seconds,
            "eps": events / seconds if seconds > 0 else None, "tps": quads / seconds if seconds > 0 else None}


def read_files(paths: Iterable[str], stream: str = "urn:spaseq:bench") -> dict:
    """``{"events", "triples", "rejected", "seconds"}`` of reading the files as
    stream files, one after the other."""
    events = triples = rejected = 0
    started = time.perf_counter()
    for path in paths:
        for item in read_stream_file(path, stream):
            if isinstance(item, EventError):
                rejected += 1
            else:
                events += 1
                triples += len(item.triples)
    return {"events": events, "triples": triples, "rejected": rejected,
            "seconds": time.perf_counter() - started}


def compare_reading(paths: list[str], repeat: int = 3) -> dict:
    """The reader against the bare parse of the same files, in turns, the
    fastest of ``repeat`` runs each: events, quads, both rates in events per
    second and their ratio (``read_eps / bare_eps``)."""
    bare = read = None
    for _ in range(max(1, repeat)):
        quads, seconds = parse_files(paths)
        bare = (quads, seconds) if bare is None or seconds < bare[1] else bare
        attempt = read_files(paths)
        read = attempt if read is None or attempt["seconds"] < read["seconds"] else read
    events = read["events"]
    bare_eps = events / bare[1] if bare[1] > 0 else None
    read_eps = events / read["seconds"] if read["seconds"] > 0 else None
    return {"files": list(paths), "events": events, "triples": read["triples"], "rejected": read["rejected"],
            "quads": bare[0], "bare_seconds": bare[1], "read_seconds": read["seconds"],
            "bare_eps": bare_eps, "read_eps": read_eps,
            "ratio": read_eps / bare_eps if bare_eps and read_eps else None}
