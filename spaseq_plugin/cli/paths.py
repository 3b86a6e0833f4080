"""Files a command reads and files it writes must differ: opened for writing,
an output is emptied before anything reads it, so a typo (``--output`` naming
the stream file) would erase the input.  :func:`check_writes` refuses such a
command line before anything is opened."""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Callable, Iterable

from ..errors import UsageError, as_usage_error


def same_file(first: str, second: str) -> bool:
    """Whether two paths name one regular file, or one file not made yet (symlinks
    and relative paths resolved; devices such as /dev/null may be shared)."""
    try:
        if os.path.exists(first) and os.path.exists(second):
            return os.path.samefile(first, second) and os.path.isfile(first)
    except OSError:
        return False
    return os.path.abspath(first) == os.path.abspath(second)


def check_writes(outputs: Iterable[tuple[str, str]], inputs: Iterable[tuple[str, str]]) -> None:
    """Raise ``UsageError`` if an output (``(argument, path)``, the argument as written:
    ``--output out.jsonl``) is one of the inputs (``(what, path)``) or an earlier output."""
    taken = list(inputs)
    for argument, path in outputs:
        for other, used in taken:
            if same_file(path, used):
                raise UsageError(f"{argument}: that is also {other}: give another file")
        taken.append((f"the file of {argument}", path))


def check_not_collected(outputs: Iterable[tuple[str, str]], locations: Iterable[tuple[str, str]],
                        collected: Callable[[str], bool]) -> None:
    """Raise ``UsageError`` if an output (``(argument, path)``) lies where a folder or
    glob input (``(what, location)``) picks up files, and is a file it would take
    (``collected(name)``): the next run would read the results as input."""
    for argument, path in outputs:
        for what, location in locations:
            if os.path.isdir(location):
                inside = os.path.dirname(os.path.abspath(path)) == os.path.abspath(location) \
                    and collected(os.path.basename(path))
            else:
                inside = glob.has_magic(location) and \
                    fnmatch.fnmatch(os.path.abspath(path), os.path.abspath(location))
            if inside:
                raise UsageError(f"{argument}: {what} would read it as input (in a later run, "
                                 "or in this one): give a file elsewhere")


def check_writable(argument: str, path: str) -> None:
    """Raise ``UsageError`` naming ``argument`` (``--json out.json``) unless ``path`` can be
    opened for writing: for a file a long command writes only at its end.  The file is
    left as it was (not made, not emptied)."""
    existed = os.path.lexists(path)
    with as_usage_error(argument):
        open(path, "a", encoding="utf-8").close()
    if not existed:
        os.remove(path)
