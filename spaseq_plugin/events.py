"""Graph events and their timestamps (semantics.md section 1).

An event is ``(stream IRI, timestamp, RDF graph)``.  Timestamps are kept as
plain numbers of seconds so the runtime compares and subtracts them cheaply;
``is_datetime`` remembers whether they came from ``xsd:dateTime`` literals,
which decides how results print their time.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import pyoxigraph as ox

XSD = "http://www.w3.org/2001/XMLSchema#"
PROV_GENERATED_AT = ox.NamedNode("http://www.w3.org/ns/prov#generatedAtTime")

_INTEGER_TYPES = {XSD + t for t in (
    "integer", "int", "long", "short", "byte", "nonNegativeInteger", "positiveInteger",
    "negativeInteger", "nonPositiveInteger", "unsignedInt", "unsignedLong",
    "unsignedShort", "unsignedByte")}
_REAL_TYPES = {XSD + "decimal", XSD + "double", XSD + "float"}
_DATETIME_TYPES = {XSD + "dateTime", XSD + "dateTimeStamp"}

# Exact: window edges (τ_last − τ_first ≤ ω) must not depend on binary rounding.
Time = int | Decimal


@dataclass(frozen=True, slots=True, eq=False)
class Event:
    """One graph event.

    ``triples`` is the event's graph; ``name`` the graph name it had in its
    file (or ``None``); ``position`` where it was read (``file:line``).
    """

    stream: str
    time: Time
    triples: tuple[ox.Triple, ...]
    name: ox.NamedNode | ox.BlankNode | None = None
    position: str | None = None
    is_datetime: bool = False


def parse_timestamp(term: ox.Term) -> tuple[Time, bool]:
    """Read a timestamp literal: ``(seconds, is_datetime)``.

    Numbers (integer, decimal, double) are seconds; an ``xsd:dateTime``
    without a time zone is UTC.  Raises ``ValueError`` on anything else.
    """
    if not isinstance(term, ox.Literal):
        raise ValueError(f"timestamp is not a literal: {term}")
    dt = term.datatype.value
    text = term.value.strip()
    if dt in _INTEGER_TYPES:
        return int(text), False
    if dt in _REAL_TYPES:
        try:
            value = Decimal(text)
        except InvalidOperation:
            raise ValueError(f"not a number: {text!r}") from None
        if not value.is_finite():
            raise ValueError(f"timestamp must be finite: {text!r}")
        return _exact(value), False
    if dt in _DATETIME_TYPES:
        return datetime_seconds(text), True
    raise ValueError(f"timestamp must be a number or xsd:dateTime, not <{dt}>")


def datetime_seconds(text: str) -> Time:
    """Seconds since the epoch of an ISO 8601 / xsd:dateTime lexical form (exact)."""
    moment = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.timezone.utc)
    delta = moment - _EPOCH
    seconds = delta.days * 86400 + delta.seconds
    if not delta.microseconds:
        return seconds
    return _exact(Decimal(seconds) + Decimal(delta.microseconds) / 1000000)


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def _exact(value: Decimal) -> Time:
    return int(value) if value == value.to_integral_value() else value.normalize()


def as_time(number) -> Time:
    """A number of seconds (int, float, Decimal or text) as an exact :data:`Time`."""
    if isinstance(number, int):
        return number
    return _exact(Decimal(str(number)) if isinstance(number, float) else Decimal(number))


def format_time(time: Time, is_datetime: bool) -> int | float | str:
    """A timestamp as results print it: a JSON number, or an ISO 8601 string in UTC."""
    if not is_datetime:
        return time if isinstance(time, int) else float(time)
    whole = int(time // 1)
    moment = _EPOCH + _dt.timedelta(seconds=whole, microseconds=int((time - whole) * 1000000))
    return moment.isoformat().replace("+00:00", "Z")


def time_literal(time: Time, is_datetime: bool) -> ox.Literal:
    """A timestamp as an RDF literal (for CONSTRUCT output events)."""
    if is_datetime:
        return ox.Literal(format_time(time, True), datatype=ox.NamedNode(XSD + "dateTime"))
    if isinstance(time, int):
        return ox.Literal(str(time), datatype=ox.NamedNode(XSD + "integer"))
    return ox.Literal(str(time), datatype=ox.NamedNode(XSD + "decimal"))
