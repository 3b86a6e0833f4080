"""Argument types for the command line's numbers: a bad value is a usage error
naming the flag (argparse exits with status 2), never a silent default."""

from __future__ import annotations

import argparse
import re

from ..language.limits import DEFAULT_SERVICE_TIMEOUT
from ..waits import PLAIN_NUMBER, wait_seconds


def whole_number(unit: str, most: int | None = None):
    """An argument type: a whole number of ``unit``, at least 1 (and at most ``most``)."""
    def parse(text: str) -> int:
        try:
            value = int(text) if PLAIN_NUMBER.fullmatch(text) else int("not a number")
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
            value = kind(text) if PLAIN_NUMBER.fullmatch(text) else kind("not a number")
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


_SIZE = re.compile(r"\s*([0-9]+)\s*(|B|KiB|K|MiB|M|GiB|G)\s*", re.I)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
               "g": 1 << 30, "gib": 1 << 30}


def byte_size(text: str) -> int:
    """An argument type: a number of bytes, maybe with a unit (KiB, MiB, GiB; K, M, G alike)."""
    match = _SIZE.fullmatch(text)
    if not match or int(match.group(1)) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size such as 64MiB or 1000000")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


def add_service_flags(command: argparse.ArgumentParser, who: str) -> None:
    """``--allow-service`` and ``--service-timeout``: SERVICE sends requests to other
    endpoints, refused unless allowed, and then bounded in time (``who`` uses it)."""
    command.add_argument("--allow-service", action="store_true",
                         help=f"let {who} use SERVICE, which sends requests to other SPARQL endpoints "
                              "(refused by default)")
    command.add_argument("--service-timeout", type=seconds, default=DEFAULT_SERVICE_TIMEOUT, metavar="SECONDS",
                         help=f"with --allow-service: {who} waiting longer than this on SERVICE endpoints "
                              f"fails (default {DEFAULT_SERVICE_TIMEOUT:g})")
