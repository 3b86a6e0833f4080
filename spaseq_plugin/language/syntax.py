"""The parsed form of a SPASEQ query: what the parser produces and the
compiler consumes.  Plain data; every node keeps its source position so
compile-time checks can name line and column."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

STRICT, NEXT, ANY = ",", ";", ":"
STRATEGY_NAMES = {STRICT: "strict contiguity", NEXT: "skip-till-next", ANY: "skip-till-any"}

KLEENE, OPTIONAL, NEGATION = "+", "?", "!"

_MS = Decimal("0.001")
TIME_UNITS = {
    "ms": _MS, "millisecond": _MS, "milliseconds": _MS,
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600,
    "day": 86400, "days": 86400,
}


@dataclass(frozen=True)
class Pos:
    line: int
    column: int


@dataclass
class GpmRef:
    """A GPM name in the sequence, with its suffix: '' or + ? !"""
    name: str
    suffix: str
    pos: Pos


@dataclass
class Conjunction:
    """``(A & B & ...)``: one atom, all operands at one timestamp."""
    names: list[str]
    pos: Pos
    name_pos: list[Pos]


@dataclass
class Disjunction:
    """``(A | B | ...)``: one atom, one event matching any operand."""
    names: list[str]
    pos: Pos
    name_pos: list[Pos]


Atom = GpmRef | Conjunction | Disjunction


@dataclass
class Sequence:
    """``SEQ(X1 op1 X2 ... Xn)``: ``ops[i]`` links ``atoms[i]`` and ``atoms[i+1]``."""
    atoms: list[Atom]
    ops: list[str]
    pos: Pos


@dataclass
class GpmDef:
    """``DEFINE GPM name ON S1, S2 { body }``; ``body`` is SPARQL source text."""
    name: str
    streams: list[str]
    body: str
    pos: Pos
    body_pos: Pos
    stream_pos: list[Pos]


@dataclass
class Aggregate:
    """``(FUNC([DISTINCT] ?var) AS ?alias)`` in the projection."""
    function: str
    var: str | None          # None for COUNT(*)
    distinct: bool
    separator: str
    alias: str
    pos: Pos


@dataclass
class Window:
    seconds: int | Decimal
    tumbling: bool
    pos: Pos


@dataclass
class StreamDecl:
    alias: str
    iri: str
    pos: Pos


@dataclass
class Query:
    prefixes: dict[str, str]
    base: str | None
    # projection: exactly one of select / construct
    select: list[str | Aggregate] | None        # None for SELECT * or CONSTRUCT
    select_star: bool
    distinct: bool
    construct: str | None                       # template source text
    construct_pos: Pos | None
    window: Window | None
    partition_by: list[str]
    partition_pos: Pos | None
    streams: dict[str, StreamDecl]
    sequence: Sequence
    gpms: dict[str, GpmDef]
    text: str
    warnings: list[str] = field(default_factory=list)

    def prologue(self) -> str:
        """PREFIX/BASE lines, for the SPARQL texts built from GPM bodies."""
        lines = [f"BASE <{self.base}>"] if self.base else []
        lines += [f"PREFIX {p}: <{iri}>" for p, iri in self.prefixes.items()]
        return " ".join(lines)
