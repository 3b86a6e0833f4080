"""``spaseq kb load --spark``: parse and deduplicate KB dumps with Spark, then bulk-load.

::

    spaseq kb load dumps/ --into oxigraph:kb-store --spark
    spaseq kb load 'dumps/*.nt.bz2' --into oxigraph:kb-store --spark --spark-master 'local[2]'
    spaseq kb load dump.nq.gz --into rdflib:Oxigraph:kb-store --spark --only-for q1.rq q2.rq

From Python::

    from spaseq_plugin.cli.kb_commands import open_loader
    from spaseq_plugin.stores.loading import RejectsFile, expand_inputs
    from spaseq_plugin.spark.load import spark_load
    loader = open_loader("oxigraph:kb-store")
    try:
        stats = spark_load(expand_inputs(["dumps/"]), loader, rejects=RejectsFile("kb.rejects"))
    finally:
        loader.close()

The stages:

1. *read+parse*: Spark's text input reads N-Triples and N-Quads files (plain
   and ``.bz2`` files in parallel splits, a ``.gz`` file in one task) and each
   partition is parsed by pyoxigraph in chunks of lines exactly as the
   in-process loader does (:func:`~spaseq_plugin.stores.loading.parse_lines`,
   :class:`~spaseq_plugin.stores.loading.QuadRewriter`): the same blank node
   names, the same rejects, the same ``--graph`` and ``--only-for``.  Turtle,
   TriG and RDF/XML cannot be split: each such file is parsed whole in one
   task, and a syntax error in one stops the load before the store is written.
2. *dedupe+write parts*: the quads, as canonical N-Quads lines, are made
   distinct and written as part files into a work directory beside the store.
   Rejects and per-partition counts travel in the same records, tagged, so the
   dumps are read once.  (Spark runs deduplication and writing in one stage.)
3. *bulk load*: one writer (RocksDB admits only one) loads the part files,
   natively for Oxigraph stores; the work directory is then removed.

A partition only knows its lines' positions within itself: it reports its
line count, and the driver numbers a rejected line by adding the counts of
its file's earlier partitions (Spark's splits of a file are in file order).

The inputs are local paths (``file://``): on a cluster every executor must
see them, and the store's parent directory, at the same place.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import tempfile
import threading
import time
from itertools import islice
from typing import Callable, Iterator

import pyoxigraph as ox

from ..errors import SpaseqError
from ..stores.loading import (BATCH, CHUNK_BYTES, LINE_FORMATS, KeepFilter, LoadStats, QuadRewriter, RdfFileReader, Reject,
                           RejectsFile, parse_lines)
from ..stores.oxigraph import open_rdf_file, rdf_format
from .session import spark_session

QUAD, REJECT, PARTITION, FAILED = "q", "r", "p", "e"     # the kinds of records a partition yields
WHOLE = -1                  # a partition holding a whole file, of a format that cannot be split
CHUNK_LINES = 20_000        # lines per pyoxigraph call
PROGRESS_SECONDS = 10.0


def spark_load(files: list[str], loader, *, graph: str | None = None, keep: KeepFilter | None = None,
               rejects: RejectsFile, master: str | None = None, work_dir: str | None = None,
               say: Callable[[str], None] = lambda text: None) -> LoadStats:
    """Load ``files`` into ``loader`` (:func:`~spaseq_plugin.cli.kb_commands.open_loader`) through
    Spark; rejected lines go to ``rejects``.  ``work_dir``: where the part files go for the
    time of the load (default: the system's temporary directory)."""
    stats = LoadStats(files=len(files))
    started = time.monotonic()
    session = spark_session(master)
    from pyspark.sql.functions import explode, split
    stats.seconds["spark start"] = time.monotonic() - started
    context = session.sparkContext
    paths = [os.path.abspath(f) for f in files]
    inputs, plan = [], []
    for index, path in enumerate(paths):
        if rdf_format(path) in LINE_FORMATS:
            _check_compressed(path)
            lines = context.textFile(_hadoop_path(path))
            plan += [(index, split) for split in range(lines.getNumPartitions())]
            inputs.append(lines)
    whole = [i for i, path in enumerate(paths) if rdf_format(path) not in LINE_FORMATS]
    if whole:
        inputs.append(context.parallelize(whole, len(whole)))
        plan += [(i, WHOLE) for i in whole]
    say(f"spark: parsing {len(files)} file{'s' * (len(files) != 1)} in {len(plan)} partitions "
        f"(master {context.master})")

    def parse(partition: int, rows: Iterator) -> Iterator[tuple[str, str]]:
        return _parse_partition(plan[partition], paths, graph, keep, rows)
    records = context.union(inputs).mapPartitionsWithIndex(parse)
    work = tempfile.mkdtemp(prefix="spaseq-load-", dir=work_dir)
    try:
        job_started = time.monotonic()
        with _progress(context, say):
            try:
                # literals' line breaks are escaped in N-Quads: "\n" only ends lines
                (session.createDataFrame(records, "kind string, text string")
                 .select("kind", explode(split("text", "\n")).alias("text")).distinct()
                 .write.partitionBy("kind").mode("overwrite").text(_hadoop_path(os.path.join(work, "out"))))
            except Exception as e:          # a Py4J error: say what went wrong, briefly
                raise SpaseqError(f"the Spark job failed: {_failure(e)}") from None
        job_seconds = time.monotonic() - job_started
        out = os.path.join(work, "out")
        partitions = [json.loads(r) for r in _records(out, PARTITION)]
        failures = [json.loads(r) for r in _records(out, FAILED)]
        if failures:
            raise SpaseqError(min(failures)[1])       # the first file's
        parsing = max(p["end"] for p in partitions) - min(p["start"] for p in partitions)
        stats.seconds["read+parse"] = parsing
        stats.seconds["dedupe+write parts"] = max(0.0, job_seconds - parsing)
        stats.read = sum(p["read"] for p in partitions)
        stats.kept = sum(p["kept"] for p in partitions)
        _write_rejects(out, partitions, files, rejects)
        stats.rejected = rejects.count
        loading = time.monotonic()
        parts = sorted(glob.glob(os.path.join(out, f"kind={QUAD}", "part-*")))
        say(f"spark: {stats.read:,} quads read, {stats.rejected:,} bad lines; "
            f"bulk-loading {len(parts)} part files ...")
        for part in parts:
            loader.add_nquads_file(part)
        stats.seconds["bulk load"] = time.monotonic() - loading
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return stats


def _parse_partition(part: tuple[int, int], paths: list[str], graph: str | None, keep: KeepFilter | None,
                     rows: Iterator) -> Iterator[tuple[str, str]]:
    """An executor's work on one partition: tagged records of quads (N-Quads lines), rejects
    and, last, the partition's counts."""
    started = time.time()
    file_index, split = part
    path = paths[file_index]
    counts = {"file": file_index, "split": split, "lines": 0, "read": 0, "kept": 0}
    if split == WHOLE:
        for file_index in rows:             # this partition's one file
            yield from _parse_whole_file(file_index, paths[file_index], graph, keep, counts)
    else:
        fmt = rdf_format(path)
        rewrite = QuadRewriter(path, graph, keep)
        while chunk := list(islice(rows, CHUNK_LINES)):
            quads, rejects = parse_lines(chunk, fmt, counts["lines"] + 1)
            for r in rejects:
                yield REJECT, json.dumps([file_index, split, r.line, r.column, r.message, r.text])
            kept = rewrite(quads, any("_:" in line for line in chunk))
            counts["lines"] += len(chunk)
            counts["read"] += len(quads)
            counts["kept"] += len(kept)
            yield from _quad_records(kept)
    counts.update(start=started, end=time.time())
    yield PARTITION, json.dumps(counts)


def _parse_whole_file(file_index: int, path: str, graph, keep, counts: dict) -> Iterator[tuple[str, str]]:
    reader = RdfFileReader(path, graph, atomic=True, keep=keep)
    quads = iter(reader)
    try:
        while batch := list(islice(quads, BATCH)):
            yield from _quad_records(batch)
    except SpaseqError as e:            # names file, line and column
        yield FAILED, json.dumps([file_index, str(e)])
    counts["read"] += reader.count
    counts["kept"] += reader.kept


def _quad_records(quads: list[ox.Quad]) -> Iterator[tuple[str, str]]:
    """One record of N-Quads lines: handing Spark a row per quad would cost more than parsing."""
    if quads:
        yield QUAD, ox.serialize(quads, format=ox.RdfFormat.N_QUADS).decode("utf-8").rstrip("\n")


def _records(out: str, kind: str) -> Iterator[str]:
    for part in sorted(glob.glob(os.path.join(out, f"kind={kind}", "part-*"))):
        with open(part, encoding="utf-8") as f:
            for line in f:
                yield line.rstrip("\n")


def _write_rejects(out: str, partitions: list[dict], files: list[str], rejects: RejectsFile) -> None:
    """The rejects, numbered by line in their file, in the order of the files and lines."""
    lines_before: dict[tuple[int, int], int] = {}
    by_file: dict[int, list[dict]] = {}
    for p in partitions:
        if p["split"] != WHOLE:
            by_file.setdefault(p["file"], []).append(p)
    for file_index, splits in by_file.items():
        total = 0
        for p in sorted(splits, key=lambda p: p["split"]):
            lines_before[file_index, p["split"]] = total
            total += p["lines"]
    found = []
    for record in _records(out, REJECT):
        file_index, split, line, column, message, text = json.loads(record)
        found.append((file_index, lines_before[file_index, split] + line, column, message, text))
    for file_index, line, column, message, text in sorted(found):
        rejects.add(files[file_index], Reject(line, column, message, text))


def _hadoop_path(path: str) -> str:
    """A local path as a Hadoop path: its glob characters and commas escaped."""
    return "file://" + re.sub(r"([\\,{}\[\]*?])", r"\\\1", path)


class _progress:
    """Reports the running Spark stages' tasks every PROGRESS_SECONDS, from a thread."""

    def __init__(self, context, say: Callable[[str], None]):
        self.context, self.say = context, say
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def _watch(self) -> None:
        while not self.stop.wait(PROGRESS_SECONDS):
            tracker = self.context.statusTracker()
            for stage in filter(None, map(tracker.getStageInfo, tracker.getActiveStageIds())):
                self.say(f"spark:   stage {stage.stageId}: {stage.numCompletedTasks}/{stage.numTasks} tasks done")


def _check_compressed(path: str) -> None:
    """Spark reads a .gz or .bz2 file cut short or corrupt as a failed job, with an
    EOFException that names neither the file nor the cause: the file is inflated
    once here first, as the load without Spark reads it, for the same error."""
    if not path.lower().endswith((".gz", ".bz2")):
        return
    try:
        with open_rdf_file(path) as stream:
            while stream.read(CHUNK_BYTES):
                pass
    except (OSError, EOFError, ValueError) as e:
        raise SpaseqError(f"{path}: cannot read it: {e}") from None


def _failure(error: Exception) -> str:
    """The Python error in a failed Spark job's message, else its last Java cause
    (``Caused by: java.io.IOException: ...``), else its first line."""
    text = str(error)
    errors = re.findall(r"^\s*(?:Caused by: )?([\w.$]+(?:Error|Exception): .*)$", text, re.M)
    python = [e for e in errors if not e.startswith(("org.", "java.", "py4j", "Py4J"))]
    return (python or errors or [text.splitlines()[0] if text else type(error).__name__])[-1].strip()
