"""What every result writer shares: the :class:`Writer` protocol, and a result's events as JSON."""

from __future__ import annotations

import os
from typing import IO

import pyoxigraph as ox

from ..errors import OutputError
from ..events import format_time
from ..runtime.results import Result


class Writer:
    """Writes results one at a time; :meth:`close` completes the document.

    :meth:`flush` hands what a writer holds back to ``out``: the command line
    calls it before it waits for more input, so buffering never delays a
    result past the moment the engine has nothing more to say."""

    def __init__(self, out: IO[str], variables: list[str], with_events: bool = False):
        self.out = out
        self.variables = variables
        self.with_events = with_events

    def write(self, result: Result) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.flush()
        self.out.flush()


class NamedOutput:
    """A text file the command line writes to, named in the error a failed write
    raises (:class:`OutputError`: ``cannot write the results to out.jsonl: No
    space left on device``), where Python's own would not say which file it was.
    A broken pipe stays a ``BrokenPipeError``: the reader of a pipe may stop."""

    def __init__(self, file: IO[str], what: str):
        self.file = file
        self.what = what                # "the results to out.jsonl", ...
        self.name = getattr(file, "name", None)

    def write(self, text: str) -> int:
        return self._named(self.file.write, text)

    def flush(self) -> None:
        self._named(self.file.flush)

    def close(self) -> None:
        self._named(self.file.close)

    def sync(self) -> None:
        """Flush, and wait until what was written is on disk."""
        self._named(self.file.flush)
        self._named(os.fsync, self.file.fileno())

    @property
    def closed(self) -> bool:
        return self.file.closed

    def fileno(self) -> int:
        return self.file.fileno()

    def _named(self, action, *args):
        try:
            return action(*args)
        except BrokenPipeError:
            raise
        except OSError as error:
            raise OutputError(f"cannot write {self.what}: {error.strerror or error}") from None


def events_json(result: Result) -> list[dict]:
    """The events of a result; stream and graph are both written as plain IRIs."""
    return [{"stream": e.stream, "time": format_time(e.time, e.is_datetime),
             **({"graph": plain_value(e.name)} if e.name is not None else {})} for e in result.events]


def plain_value(term) -> str:
    """A term's value as CSV shows it: blank nodes as ``_:label``, a triple term as
    its three plain values with a space between them (as pyoxigraph writes CSV
    results), nothing for None."""
    if term is None:
        return ""
    if isinstance(term, ox.BlankNode):
        return "_:" + term.value
    if isinstance(term, ox.Triple):
        return " ".join([plain_value(term.subject), plain_value(term.predicate), plain_value(term.object)])
    return term.value


class StagedFiles:
    """Output files that appear only whole: each is written as ``FILE.partial`` beside
    it and renamed over ``FILE`` by :meth:`commit`; :meth:`discard` removes what was
    not committed.  A process killed before the end (``kill -9``, the OOM killer)
    leaves ``FILE`` as it was and a ``FILE.partial`` that says what it is (the next
    run writes it again).  Anything but a regular file (``/dev/null``, a pipe) is
    written directly; a symbolic link keeps pointing where it did (the file it
    points to is replaced)."""

    SUFFIX = ".partial"

    def __init__(self):
        self.staged: list[tuple[str, str, str]] = []       # (partial, final, as given)

    def open(self, path: str) -> IO[str]:
        target = os.path.realpath(path)
        if os.path.exists(target) and not os.path.isfile(target):
            return open(path, "w", encoding="utf-8")
        partial = target + self.SUFFIX
        file = open(partial, "w", encoding="utf-8")
        self.staged.append((partial, target, path))
        return file

    def commit(self) -> None:
        """Put every staged file in its place (each must be closed)."""
        for partial, final, _ in self.staged:
            with open(partial, "rb") as written:        # on disk before the rename makes it final
                os.fsync(written.fileno())
            os.replace(partial, final)
        self.staged = []

    def discard(self) -> list[str]:
        """Remove the staged files not committed; their paths as given (left as they were)."""
        given = []
        for partial, _, path in self.staged:
            try:
                os.remove(partial)
            except OSError:
                pass
            given.append(path)
        self.staged = []
        return given
