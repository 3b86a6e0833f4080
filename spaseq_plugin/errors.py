"""Errors users see: every one carries the position that explains it."""


class SpaseqError(Exception):
    """Base class of the errors this package reports to users."""


class QueryError(SpaseqError):
    """A query that cannot run: syntax or a compile-time check failed.

    The message names line and column (1-based) of the offending text.
    """

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.message = message
        self.line = line
        self.column = column
        where = f"line {line}, column {column}: " if line is not None else ""
        super().__init__(where + message)


class EventError(SpaseqError):
    """A rejected input event: malformed, untimed, duplicate or out of order.

    ``position`` is where it came from, e.g. ``power.trig:12``.
    """

    def __init__(self, message: str, position: str | None = None):
        self.message = message
        self.position = position
        super().__init__(f"{position}: {message}" if position else message)
