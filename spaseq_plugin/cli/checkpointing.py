"""``spaseq run --checkpoint DIR``: resuming a killed run (docs/checkpoints.md).

A run with ``--checkpoint`` takes a checkpoint (``runtime/checkpoint.py``)
every ``--checkpoint-every`` (10 s by default, or a number of events), at a
point where the engine holds no result back and every result so far is
written and flushed: the engine's snapshot, each stream file source's
position (the items it passed on), and the length of the ``--output`` and
``--dead-letter`` files, fsynced first.  Started again with the same
arguments, the run restores the engine, cuts the two files back to their
recorded lengths and goes on writing after them, and reads each stream file
again from the start, dropping the items before its position: the output
file ends exactly as the uninterrupted run's.  Other sinks may get the
results after the checkpoint twice; each carries a deterministic ``id``.

When stream files have been read to their end and the outputs closed, a
last checkpoint says so: a run started again then has nothing to do.  A live
run (mqtt, tcp) that ends (``--max-events``, ``--idle-timeout``) checkpoints
its state before the engine closes: started again, it goes on with what the
sources send next, and what closing wrote is cut back.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from typing import IO

from ..errors import UsageError
from ..events import IDLE
from ..output.writer import NamedOutput
from ..runtime.checkpoint import DEFAULT_INTERVAL, Checkpointer, CheckpointError
from ..runtime.engine import Engine

log = logging.getLogger(__name__)

# The run's arguments that change its results (or where they go): a checkpoint taken
# with other values is refused.  (Not --rate, --idle-flush, --progress, -v, --quiet,
# --checkpoint-every: they change how the run goes, not what it finds.)
LOCK_FILE = "lock"          # in the checkpoint directory: the process that runs on it

_RESULT_ARGUMENTS = ("stream", "manifest", "kb", "kb_materialized", "events", "output", "dead_letter",
                     "sink", "start", "lateness", "max_statement", "max_event_triples", "max_time_jump",
                     "max_nesting", "allow_service", "service_timeout", "max_runs", "max_partition_runs",
                     "max_state_memory", "on_limit", "engine")
# Added since: in the hash only when given, so that the checkpoints of earlier versions resume.
_RESULT_ARGUMENTS_WHEN_GIVEN = ("max_term_depth", "max_held", "max_join_steps", "max_distinct")


class RunCheckpoints:
    """The checkpoints of one ``spaseq run`` (see the module docstring)."""

    def __init__(self, args, query_text: str, fmt: str):
        if args.engine != "stream":
            raise UsageError("--checkpoint is for --engine stream (a Spark run reads archived files: run it "
                             "again)")
        if fmt == "json":
            raise UsageError("--checkpoint: --format json writes one document, whole only when the run ends; "
                             "use jsonl, csv or tsv, which a restarted run can go on writing")
        arguments = {name: getattr(args, name, None) for name in _RESULT_ARGUMENTS}
        arguments.update({name: getattr(args, name) for name in _RESULT_ARGUMENTS_WHEN_GIVEN
                          if getattr(args, name, None) is not None})
        arguments["format"] = fmt
        try:
            self.checkpointer = Checkpointer(args.checkpoint, query_text, arguments,
                                             args.checkpoint_every or DEFAULT_INTERVAL)
        except ValueError as error:
            raise UsageError(f"--checkpoint-every {error}") from None
        try:
            found = self.checkpointer.load()
            self.lock = _hold(args.checkpoint)
        except OSError as error:
            raise UsageError(f"--checkpoint {args.checkpoint}: {error.strerror or error}") from None
        self.header, self.body = found if found is not None else (None, None)
        self.output_path = args.output
        self.dead_letter_path = args.dead_letter
        self.delivered: list[int] | None = None       # per stream file source: items passed on
        self.sources: list = []                        # a live one may wait for checkpoints (commit)
        self.asking: list = []
        self.output: NamedOutput | None = None
        self.dead_letter: NamedOutput | None = None
        self.engine: Engine | None = None
        if self.body is not None:
            log.info("resuming from the checkpoint in %s (taken %s)", args.checkpoint, self.header.get("created"))

    @property
    def finished(self) -> bool:
        """Whether the checkpoint is of a run that read its input to the end."""
        return bool(self.header and self.header.get("finished"))

    def positions(self, count: int) -> list[int] | None:
        """Per source: the items to skip (None: a new run)."""
        if self.body is None:
            return None
        positions = self.body.get("sources")
        if positions is None or len(positions) != count:
            raise CheckpointError(f"the checkpoint in {self.checkpointer.directory} has "
                                  f"{'no' if positions is None else len(positions)} source positions, "
                                  f"this run has {count} stream sources")
        return positions

    def open_file(self, path: str, which: str) -> tuple[IO[str], bool]:
        """The ``--output`` or ``--dead-letter`` file (``which``): a new one, or the
        one of the checkpoint cut back to its committed length.  Also whether the
        file goes on (a writer's header is then already in it)."""
        committed = None if self.body is None else self.body["outputs"].get(which)
        if committed is None:
            return open(path, "w", encoding="utf-8"), False
        if type(committed) is not int or committed < 0:
            raise CheckpointError(f"the checkpoint in {self.checkpointer.directory} records no readable "
                                  f"length for {path} ({committed!r}); remove the directory to start over")
        try:
            size = os.path.getsize(path)
        except OSError:
            size = -1
        if size < committed:
            raise CheckpointError(f"{path} is shorter ({max(size, 0):,} bytes) than the checkpoint in "
                                  f"{self.checkpointer.directory} recorded ({committed:,} bytes): it was changed "
                                  "or replaced; remove the checkpoint directory to start over")
        os.truncate(path, committed)
        return open(path, "a", encoding="utf-8"), committed > 0

    def restore(self, engine: Engine, ids: bool) -> None:
        """Restore ``engine`` from the checkpoint (if there is one); with ``ids``, its
        results carry ids (they go where they may come twice: stdout, sinks)."""
        self.engine = engine
        if ids:
            engine.result_ids = self.checkpointer.query
        if self.body is not None:
            try:
                engine.restore(self.body)
            except ValueError as error:
                raise CheckpointError(f"the checkpoint in {self.checkpointer.directory} cannot be restored: "
                                      f"{error}") from None
        self.checkpointer.start(engine.stats.events)

    def after_item(self, item) -> None:
        """Between two input items, once the writers are flushed: a checkpoint when one is
        due, or when a source waits for one (an mqtt source's unacknowledged messages)."""
        engine = self.engine
        if not engine.can_snapshot:
            return
        if self.checkpointer.due(engine.stats.events) or self.asking and any(
                source.wants_checkpoint(item is IDLE) for source in self.asking):
            self.save()

    def watch(self, sources: list) -> None:
        """The run's sources: those that wait for checkpoints (``wants_checkpoint``,
        ``commit``: an mqtt source) are asked after each item and told of each one."""
        self.sources = list(sources)
        self.asking = [source for source in sources if hasattr(source, "wants_checkpoint")]

    def input_ended(self) -> None:
        """The input ended, the engine is about to close (or a graceful stop evaluated
        what the input had received): a live run (which ends on ``--max-events``,
        ``--idle-timeout`` or a stop signal) saves its state here, so that a run
        started again goes on with what the sources send next (what closing wrote
        is then cut back); a run of stream files is checkpointed as finished once
        its outputs are closed."""
        if self.delivered is None and self.engine.can_snapshot:
            self.save()

    def finish(self) -> None:
        """The run ended and its outputs are closed: stream files read to their end
        are checkpointed as finished (a live run saved its state in :meth:`input_ended`)."""
        if self.delivered is not None:
            self.save(finished=True)

    def save(self, finished: bool = False) -> None:
        started = time.perf_counter()
        body = {} if finished else self.engine.snapshot()
        if self.delivered is not None:
            body["sources"] = list(self.delivered)
        body["outputs"] = {"output": _committed(self.output), "dead_letter": _committed(self.dead_letter)}
        self.checkpointer.save(body, self.engine.stats.events, finished=finished, since=started)
        for source in self.sources:
            commit = getattr(source, "commit", None)
            if commit is not None:
                commit()
        log.debug("checkpoint %d: %s bytes", self.checkpointer.taken, f"{self.checkpointer.last_size:,}")


def _hold(directory: str) -> IO[str]:
    """The checkpoint directory's lock, held while the run lives (the system lets it go
    when the process ends, kill -9 included): two runs on one directory would write
    one output twice, interleaved."""
    file = open(os.path.join(directory, LOCK_FILE), "a+", encoding="utf-8")
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        file.seek(0)
        holder = file.read().strip()
        file.close()
        raise UsageError(f"--checkpoint {directory}: another run uses it"
                         f"{f' (process {holder})' if holder.isdigit() else ''}; wait for it to end, "
                         "or give another directory") from None
    file.seek(0)
    file.truncate()
    file.write(f"{os.getpid()}\n")
    file.flush()
    return file


def _committed(file: NamedOutput | None) -> int | None:
    """The length of a file once what was written is on disk (None: no file)."""
    if file is None:
        return None
    if not file.closed:
        file.sync()
    return os.path.getsize(file.name)


class HeaderDiscarded:
    """Stands for the output file while a writer is made, when the file goes on
    from a checkpoint: what the writer writes then (its header) is already there."""

    def __init__(self, file: IO[str]):
        self.file = file
        self.discarding = True

    def write(self, text: str) -> int:
        return len(text) if self.discarding else self.file.write(text)

    def flush(self) -> None:
        self.file.flush()
