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
Between the two it times :func:`group_files`, the *grouping floor*: the least
any reader built on pyoxigraph's Python objects does (parse, group the quads
of each graph into an ``Event`` with its triples and its timestamp), with
none of the checks a stream reader owes its users (positions, order, repeated
or split graphs, rejections).  The reader can come near it, never above.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Iterable
from itertools import groupby
from operator import attrgetter

import pyoxigraph as ox

from ..errors import EventError
from ..events import PROV_GENERATED_AT, Event, parse_timestamp
from ..streams.files import read_stream_file, stream_file_format
from .workloads import Source


def _parser_inputs(paths: Iterable[str]) -> list[dict]:
    """``pyoxigraph.parse`` arguments for each file (a gzipped one read and unpacked now)."""
    inputs = []
    for path in paths:
        if path.lower().endswith(".gz"):
            with gzip.open(path, "rb") as f:
                inputs.append({"input": f.read(), "format": stream_file_format(path)})
        else:
            inputs.append({"path": path, "format": stream_file_format(path)})
    return inputs


def parse_files(paths: Iterable[str]) -> tuple[int, float]:
    """(quads, seconds) of a bare ``pyoxigraph.parse`` loop over the files
    (a gzipped one is read and unpacked before the clock starts)."""
    inputs = _parser_inputs(paths)
    quads = 0
    started = time.perf_counter()
    for arguments in inputs:
        for _ in ox.parse(**arguments):
            quads += 1
    return quads, time.perf_counter() - started


_GRAPH_NAME = attrgetter("graph_name")
_TRIPLE = attrgetter("triple")


def group_files(paths: Iterable[str], stream: str = "urn:spaseq:bench") -> tuple[int, float]:
    """(events, seconds) of the grouping floor over the files: one ``pyoxigraph.parse``
    call per file, consecutive quads of a named graph made one ``Event`` with the
    time of the ``prov:generatedAtTime`` stamp read before them (0 without one),
    each event dropped once built.  No position, order, repetition or error is
    looked at: a stream reader must do all that on top."""
    inputs = _parser_inputs(paths)
    default_graph, stamp, events = ox.DefaultGraph, PROV_GENERATED_AT, 0
    started = time.perf_counter()
    for arguments in inputs:
        times: dict = {}
        for graph, quads in groupby(ox.parse(**arguments), _GRAPH_NAME):
            if type(graph) is default_graph:
                for quad in quads:
                    if quad.predicate == stamp:
                        times[quad.subject] = quad.object
            else:
                term = times.pop(graph, None)
                time_, is_datetime = (0, False) if term is None else parse_timestamp(term)
                Event(stream, time_, tuple(map(_TRIPLE, quads)), graph, None, is_datetime)
                events += 1
    return events, time.perf_counter() - started


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
    """The reader against the bare parse of the same files and the grouping floor,
    in turns, the fastest of ``repeat`` runs each: events, quads, the three rates
    in events per second and their ratios to the bare parse (``ratio``:
    ``read_eps / bare_eps``; ``floor_ratio``: ``floor_eps / bare_eps``)."""
    bare = floor = read = None
    for _ in range(max(1, repeat)):
        quads, seconds = parse_files(paths)
        bare = (quads, seconds) if bare is None or seconds < bare[1] else bare
        _, seconds = group_files(paths)
        floor = seconds if floor is None else min(floor, seconds)
        attempt = read_files(paths)
        read = attempt if read is None or attempt["seconds"] < read["seconds"] else read
    events = read["events"]
    bare_eps, floor_eps, read_eps = (events / seconds if seconds > 0 else None
                                     for seconds in (bare[1], floor, read["seconds"]))
    return {"files": list(paths), "events": events, "triples": read["triples"], "rejected": read["rejected"],
            "quads": bare[0], "bare_seconds": bare[1], "floor_seconds": floor, "read_seconds": read["seconds"],
            "bare_eps": bare_eps, "floor_eps": floor_eps, "read_eps": read_eps,
            "floor_ratio": floor_eps / bare_eps if bare_eps and floor_eps else None,
            "ratio": read_eps / bare_eps if bare_eps and read_eps else None}
