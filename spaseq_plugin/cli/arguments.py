"""Argument types for the command line's numbers: a bad value is a usage error
naming the flag (argparse exits with status 2), never a silent default."""

from __future__ import annotations

import argparse

from ..waits import wait_seconds


def whole_number(unit: str, most: int | None = None):
    """An argument type: a whole number of ``unit``, at least 1 (and at most ``most``)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of {unit}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
        if most is not None and value > most:
            raise argparse.ArgumentTypeError(f"{text!r}: must be at most {most:,}")
        return value
    return parse


def more_than_zero(kind):
    """An argument type: a number of ``kind`` (int or float) above 0, and finite."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a number") from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number more than 0")
        return value
    return parse


def seconds(text: str) -> float:
    """An argument type: seconds to wait, more than 0 and at most ``waits.LONGEST_WAIT``."""
    try:
        return wait_seconds(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
