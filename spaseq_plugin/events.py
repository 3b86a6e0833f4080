"""Graph events and their timestamps (semantics.md section 1).

An event is ``(stream IRI, timestamp, RDF graph)``.  Timestamps are kept as
plain numbers of seconds so the runtime compares and subtracts them cheaply;
``is_datetime`` remembers whether they came from ``xsd:dateTime`` literals,
which decides how results print their time.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import re
from dataclasses import dataclass
from decimal import Decimal

import pyoxigraph as ox

try:
    import cython
except ImportError:     # interpreted, without Cython installed
    from .compiled import shadow as cython

XSD = "http://www.w3.org/2001/XMLSchema#"
PROV_GENERATED_AT = ox.NamedNode("http://www.w3.org/ns/prov#generatedAtTime")

# Integer types and the bounds of their value spaces (None: unbounded).
_INTEGER_TYPES: dict[str, tuple[int | None, int | None]] = {XSD + name: bounds for name, bounds in {
    "integer": (None, None), "nonNegativeInteger": (0, None), "positiveInteger": (1, None),
    "nonPositiveInteger": (None, 0), "negativeInteger": (None, -1),
    "long": (-2**63, 2**63 - 1), "int": (-2**31, 2**31 - 1), "short": (-2**15, 2**15 - 1),
    "byte": (-2**7, 2**7 - 1), "unsignedLong": (0, 2**64 - 1), "unsignedInt": (0, 2**32 - 1),
    "unsignedShort": (0, 2**16 - 1), "unsignedByte": (0, 2**8 - 1)}.items()}
_DECIMAL = XSD + "decimal"
_FLOATING_TYPES = {XSD + "double", XSD + "float"}
_DATETIME_TYPES = {XSD + "dateTime", XSD + "dateTimeStamp"}

# Exact: window edges (τ_last − τ_first ≤ ω) must not depend on binary rounding.
Time = int | Decimal

#: The representable timestamps.  An xsd:dateTime lies from
#: 0001-01-01T00:00:00Z (included) to 10000-01-01T00:00:00Z (excluded) once
#: its time zone is applied, so that it prints as one; a number of seconds
#: lies strictly between -10^15 and 10^15 (a count of milliseconds since 1970
#: fits).  Both have at most ``MAX_FRACTION_DIGITS`` digits after the point.
#: Every time, and every difference of two, then has at most 25 significant
#: digits: Decimal arithmetic (28 digits) stays exact.
MIN_DATETIME = -62_135_596_800
MAX_DATETIME = 253_402_300_800
MAX_NUMBER = 10 ** 15
MAX_FRACTION_DIGITS = 9
_DATETIME_LIMITS = "0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z"
_NUMBER_LIMITS = "numbers of seconds from -10^15 to 10^15, exclusive"


@dataclass(slots=True, eq=False)
class Event:
    """One graph event.

    ``triples`` is the event's graph; ``name`` the graph name it had in its
    file (or ``None``); ``position`` where it was read (``file:line``).
    Treat an event as immutable (``dataclasses.replace`` makes a changed
    copy); it is not frozen only because a frozen dataclass costs three
    times as much to build, once per event of the input.
    """

    stream: str
    time: Time
    triples: tuple[ox.Triple, ...]
    name: ox.NamedNode | ox.BlankNode | None = None
    position: str | None = None
    is_datetime: bool = False


@cython.ccall
@cython.locals(n=cython.Py_ssize_t, i=cython.Py_ssize_t, j=cython.Py_ssize_t)
def may_repeat(items: list | tuple) -> bool:
    """Whether two of ``items`` may be equal (more than 8 are not checked: True).
    An event's graph is a set, but a pyoxigraph term or triple hashes its whole
    text: a few items, which mostly differ at once, are compared pairwise instead."""
    n = len(items)
    if n > 8:
        return True
    for i in range(n):
        for j in range(i + 1, n):
            if items[i] == items[j]:
                return True
    return False


def distinct(triples: list | tuple) -> tuple:
    """``triples`` without repeats, in their order (an RDF graph is a set)."""
    return tuple(dict.fromkeys(triples)) if may_repeat(triples) else tuple(triples)


class Idle:
    """What a live input yields, besides events and rejections, when nothing
    has come for a while (``--idle-flush``): the pending timestamp can be
    closed.  There is one, :data:`IDLE`; a consumer that does not know it
    skips it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "IDLE"


IDLE = Idle()


# The XSD lexical forms (XML Schema 1.1 part 2), ASCII digits only.  Python's
# int() and Decimal() also take '8_000', non-ASCII digits and exponents.  (The number
# forms are also those the FILTER evaluation reads: evaluators/sparql_values.py.)
INTEGER_FORM = re.compile(r"[+-]?[0-9]+", re.ASCII)
DECIMAL_FORM = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.ASCII)
DOUBLE_FORM = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_DATETIME_FORM = re.compile(
    r"(-?[0-9]{4,})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?"
    r"(Z|[+-][0-9]{2}:[0-9]{2})?", re.ASCII)
_XSD_SPACE = " \t\n\r"                  # whitespace="collapse" trims only these
_MAX_LEXICAL = 64                       # longer numbers cannot be in range at that precision

_DAYS: dict[str, int] = {}              # 'YYYY-MM-DDT' -> its seconds at 00:00 (canonical UTC forms)
# The day of _DAYS that parse_timestamp met last, and its seconds: one tuple,
# replaced whole, so that a reader in another thread never sees half of a change.
_last_day: tuple[str, int] = ("\0", 0)
_DATETIME_NODE = ox.NamedNode(XSD + "dateTime")
_INTEGER_NODE = ox.NamedNode(XSD + "integer")


@cython.locals(text=str, h1=cython.Py_UCS4, h2=cython.Py_UCS4, m1=cython.Py_UCS4, m2=cython.Py_UCS4,
                s1=cython.Py_UCS4, s2=cython.Py_UCS4, hours=cython.Py_ssize_t, seconds=cython.Py_ssize_t,
                last=tuple)
def parse_timestamp(term: ox.Term) -> tuple[Time, bool]:
    """Read a timestamp literal: ``(seconds, is_datetime)``.

    Numbers (``xsd:integer`` and its subtypes, ``xsd:decimal``,
    ``xsd:double``, ``xsd:float``) are seconds; an ``xsd:dateTime`` without a
    time zone is UTC.  The lexical form must be one XSD allows (ASCII digits,
    no '_', no exponent in a decimal, no INF or NaN) and the value must be in
    the representable range (``MIN_TIME`` to ``MAX_TIME``, at most
    ``MAX_FRACTION_DIGITS`` digits after the point).  Raises ``ValueError``
    saying which rule the literal breaks.
    """
    global _last_day
    if type(term) is not ox.Literal:
        raise ValueError(f"timestamp is not a literal: {term}")
    node = term.datatype
    if node == _DATETIME_NODE:
        text = term.value
        # The common case, a canonical UTC time of a day already seen: that of the
        # time before (compiled, this allocates nothing), or another (one lookup).
        # Streams of one event a minute or rarer (sensors) meet a new minute each time.
        if len(text) == 20 and text[19] == "Z" and text[13] == ":" and text[16] == ":":
            h1, h2, m1, m2, s1, s2 = text[11], text[12], text[14], text[15], text[17], text[18]
            if "0" <= h1 <= "2" and "0" <= h2 <= "9" and "0" <= m1 <= "5" and "0" <= m2 <= "9" \
                    and "0" <= s1 <= "5" and "0" <= s2 <= "9":
                hours = (ord(h1) - 48) * 10 + (ord(h2) - 48)
                if hours < 24:
                    seconds = hours * 3600 + ((ord(m1) - 48) * 10 + (ord(m2) - 48)) * 60 \
                        + (ord(s1) - 48) * 10 + (ord(s2) - 48)
                    last = _last_day
                    if text.startswith(last[0]):
                        return last[1] + seconds, True
                    base = _DAYS.get(text[:11])
                    if base is not None:
                        _last_day = (text[:11], base)
                        return base + seconds, True
        return datetime_seconds(text), True
    if node == _INTEGER_NODE:
        # The common case of numbers: a count of seconds or milliseconds, digits only
        # (12 of them at most: within the representable range).
        text = term.value
        if text.isdigit() and text.isascii() and len(text) <= 12:
            return int(text), False
    datatype = node.value
    if datatype in _DATETIME_TYPES:
        return datetime_seconds(term.value, datatype == XSD + "dateTimeStamp"), True
    text = term.value.strip(_XSD_SPACE)
    bounds = _INTEGER_TYPES.get(datatype)
    if bounds is not None:
        if not (text.isdigit() and text.isascii() and len(text) <= 12):
            _check_form(INTEGER_FORM, text, "integer")
        value = int(text)
        low, high = bounds
        if (low is not None and value < low) or (high is not None and value > high):
            raise ValueError(f"{text} is not a valid <{datatype}>")
        return _in_range(value, text, False), False
    if datatype == _DECIMAL:
        form = DECIMAL_FORM
    elif datatype in _FLOATING_TYPES:
        form = DOUBLE_FORM
    else:
        raise ValueError(f"timestamp must be a number or xsd:dateTime, not <{datatype}>")
    if datatype != _DECIMAL and text.lstrip("+-") in ("INF", "NaN"):
        raise ValueError(f"timestamp must be finite: {text!r}")
    _check_form(form, text, datatype[len(XSD):])
    return _in_range(Decimal(text), text, False), False


def parse_time_text(text: str) -> tuple[Time, bool]:
    """A time written as plain text (``spaseq run --start``): an xsd:dateTime, or
    a number of seconds in an XSD form, read under the rules of
    :func:`parse_timestamp` (the range, at most ``MAX_FRACTION_DIGITS``
    digits after the point, no NaN or INF).  Raises ``ValueError`` saying
    which rule the text breaks."""
    text = text.strip(_XSD_SPACE)
    if "T" in text:
        return datetime_seconds(text), True
    for form, datatype in ((INTEGER_FORM, "integer"), (DECIMAL_FORM, "decimal"), (DOUBLE_FORM, "double")):
        if form.fullmatch(text):
            return parse_timestamp(ox.Literal(text, datatype=ox.NamedNode(XSD + datatype)))
    raise ValueError(f"not a number of seconds or an xsd:dateTime: {_show_text(text)}")


def start_time(value) -> tuple[Time, bool | None]:
    """A start time as a caller gives it (``Engine(start=...)``, ``--start``):
    (time, is_datetime).  Text is read by :func:`parse_time_text`; a
    ``datetime`` is an xsd:dateTime (UTC when naive); a number is a number
    of seconds, of no kind (``None``: the runtime's seconds, also those of
    an xsd:dateTime since 1970).  Raises ``ValueError`` for anything else,
    NaN, an infinity or a time outside the representable range: such a start
    would silently drop every event."""
    if isinstance(value, _dt.datetime):
        zone = value.utcoffset()
        text = value.replace(tzinfo=None).isoformat()
        return datetime_seconds(text if zone is None else text + _zone_text(zone)), True
    if isinstance(value, str):
        return parse_time_text(value)
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise ValueError(f"a number of seconds, an xsd:dateTime text or a datetime, not {type(value).__name__}")
    if not (math.isfinite(value) if isinstance(value, float) else
            value.is_finite() if isinstance(value, Decimal) else True):
        raise ValueError(f"a start time must be finite, not {value}")
    return _in_range(as_time(value), str(value), False), None


def _zone_text(offset: _dt.timedelta) -> str:
    minutes = int(offset.total_seconds()) // 60
    return f"{'-' if minutes < 0 else '+'}{abs(minutes) // 60:02}:{abs(minutes) % 60:02}"


def _check_form(form: re.Pattern, text: str, name: str) -> None:
    if not form.fullmatch(text):
        raise ValueError(f"not an XSD {name}: {_show_text(text)}")
    if len(text) > _MAX_LEXICAL:
        raise ValueError(f"timestamp {_show_text(text)} is longer than {_MAX_LEXICAL} characters: "
                         f"outside the representable range ({_NUMBER_LIMITS}) or finer than a nanosecond")


def datetime_seconds(text: str, zone_required: bool = False) -> Time:
    """Seconds since 1970-01-01T00:00:00Z of an xsd:dateTime lexical form
    (exact; without a time zone it is UTC).  Raises ``ValueError`` for a
    form XSD does not allow (``2024-02-30``, ``25:00:00``, a space for the
    ``T``...) or a time outside the representable range."""
    text = text.strip(_XSD_SPACE)
    match = _DATETIME_FORM.fullmatch(text) if len(text) <= _MAX_LEXICAL else None
    if match is None:
        raise ValueError(f"not an xsd:dateTime: {_show_text(text)}")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    if (len(year.lstrip("-")) > 4 and year.lstrip("-")[0] == "0") or year.lstrip("-") == "0000" \
            or not 1 <= int(month) <= 12 or not 1 <= int(day) <= 31:
        raise ValueError(f"not an xsd:dateTime: {text!r}")
    year_number = int(year)
    if not 1 <= year_number <= 9999:
        raise ValueError(f"timestamp {text} is outside the representable range ({_DATETIME_LIMITS})")
    try:
        days = _dt.date(year_number, int(month), int(day)).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        raise ValueError(f"not an xsd:dateTime: {text!r} (no such day)") from None
    hours, minutes, seconds = int(hour), int(minute), int(second)
    # (24:00:00 is allowed: the next day's 00:00:00)
    if (hours > 23 or minutes > 59 or seconds > 59) and not (
            hours == 24 and minutes == seconds == 0 and not (fraction or "0").strip(".0")):
        raise ValueError(f"not an xsd:dateTime: {text!r} (no such time of day)")
    offset = 0
    if zone is None:
        if zone_required:
            raise ValueError(f"an xsd:dateTimeStamp needs a time zone: {text!r}")
    elif zone != "Z":
        zone_hours, zone_minutes = int(zone[1:3]), int(zone[4:6])
        if zone_minutes > 59 or zone_hours * 60 + zone_minutes > 14 * 60:
            raise ValueError(f"not an xsd:dateTime: {text!r} (time zones go from -14:00 to +14:00)")
        offset = (zone_hours * 3600 + zone_minutes * 60) * (1 if zone[0] == "+" else -1)
    whole = days * 86400 + hours * 3600 + minutes * 60 + seconds - offset
    if fraction and fraction.rstrip("0") != ".":
        return _in_range(whole + Decimal(fraction), text, True)
    value = _in_range(whole, text, True)
    if zone == "Z" and len(text) == 20 and hours < 24:
        _remember_day(text[:11], days * 86400)
    return value


def _remember_day(day: str, seconds: int) -> None:
    if len(_DAYS) >= 4096:
        _DAYS.clear()
    _DAYS[day] = seconds


def _in_range(value: Time, text: str, is_datetime: bool) -> Time:
    """``value`` as an exact :data:`Time`, or ``ValueError`` when it is outside
    the representable range or finer than ``MAX_FRACTION_DIGITS``."""
    # (compared before anything else: int() of 1e999999999 would never end)
    if not (MIN_DATETIME <= value < MAX_DATETIME if is_datetime else -MAX_NUMBER < value < MAX_NUMBER):
        raise ValueError(f"timestamp {_show_text(text)} is outside the representable range "
                         f"({_DATETIME_LIMITS if is_datetime else _NUMBER_LIMITS})")
    if type(value) is int:
        return value
    exact = _exact(value)
    if finer_than_a_nanosecond(exact):
        raise ValueError(f"timestamp {_show_text(text)} has more than {MAX_FRACTION_DIGITS} digits "
                         "after the point (the finest time is a nanosecond)")
    return exact


def finer_than_a_nanosecond(time: Time) -> bool:
    """Whether an exact time (``as_time``) has more than ``MAX_FRACTION_DIGITS`` digits
    after the point: times, windows and delays are exact to the nanosecond."""
    return type(time) is not int and -time.as_tuple().exponent > MAX_FRACTION_DIGITS


def _show_text(text: str) -> str:
    """A literal's text in a message: quoted, escaped, cut when long."""
    return repr(text if len(text) <= 80 else text[:60] + "...") + (
        f" ({len(text)} characters)" if len(text) > 80 else "")


_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()


def _exact(value: Decimal) -> Time:
    return int(value) if value == value.to_integral_value() else value.normalize()


def as_time(number) -> Time:
    """A number of seconds (int, float, Decimal or text) as an exact :data:`Time`."""
    if isinstance(number, int):
        return number
    return _exact(Decimal(str(number)) if isinstance(number, float) else Decimal(number))


def format_time(time: Time, is_datetime: bool) -> int | float | str:
    """A timestamp as results print it: a JSON number, or an xsd:dateTime in
    UTC (``2024-01-01T10:00:00Z``; a fraction of a second with six digits,
    or all of them below a microsecond).  Any time prints, also one past
    the representable range, such as the end of a window after the last
    representable second."""
    if not is_datetime:
        return time if isinstance(time, int) else float(time)
    whole = time if type(time) is int else math.floor(time)
    text = _second_text(whole) if -_C_SECONDS < whole < _C_SECONDS else _any_second_text(whole)
    if whole == time:
        return text
    fraction = format(time - whole, "f")[1:].rstrip("0")
    return text[:-1] + fraction.ljust(7, "0") + "Z"


# A result writer formats each new timestamp: the date part changes once a day, and
# building the time of day from two-digit pieces is five times faster than six format
# specs.  Compiled, a second within +-2**62 is formatted in C integers.
_TWO_DIGITS = tuple(f"{i:02d}" for i in range(60))
_C_SECONDS = 1 << 62
# The day format_time met last and its text: one tuple, replaced whole (as _last_day).
_last_date: tuple[int, str] = (0, "1970-01-01T")


@cython.cfunc
@cython.locals(whole=cython.longlong, days=cython.longlong, last=tuple)
def _second_text(whole: int) -> str:
    """``YYYY-MM-DDThh:mm:ssZ`` of a whole second since the epoch, within +-2**62."""
    global _last_date
    days = whole // 86400
    last = _last_date
    if last[0] != days:
        last = _last_date = (days, _date_text(days))
    return _clock_text(last[1], whole - days * 86400)


def _any_second_text(whole: int) -> str:
    """``_second_text`` of any whole second (beyond +-2**62: far past the years datetime knows)."""
    days, seconds = divmod(whole, 86400)
    return _clock_text(_date_text(days), seconds)


@cython.cfunc
@cython.locals(seconds=cython.Py_ssize_t, minutes=cython.Py_ssize_t)
def _clock_text(date: str, seconds: int) -> str:
    minutes = seconds // 60
    return f"{date}{_TWO_DIGITS[minutes // 60]}:{_TWO_DIGITS[minutes % 60]}:{_TWO_DIGITS[seconds % 60]}Z"


@functools.lru_cache(maxsize=64)
def _date_text(days: int) -> str:
    """``YYYY-MM-DDT`` of a day counted from 1970-01-01."""
    year, month, day = _civil(days)
    return f"{year:04d}-{month:02d}-{day:02d}T"


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day counted from 1970-01-01, proleptic Gregorian,
    for any year (H. Hinnant's days_from_civil inverse)."""
    days += 719468
    era = days // 146097
    day_of_era = days - era * 146097
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36524 - day_of_era // 146096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted_month = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * shifted_month + 2) // 5 + 1
    month = shifted_month + 3 if shifted_month < 10 else shifted_month - 9
    return year_of_era + era * 400 + (month <= 2), month, day


def time_literal(time: Time, is_datetime: bool) -> ox.Literal:
    """A timestamp as an RDF literal (for CONSTRUCT output events), in a
    lexical form ``parse_timestamp`` reads back to the same time."""
    if is_datetime:
        return ox.Literal(format_time(time, True), datatype=ox.NamedNode(XSD + "dateTime"))
    if isinstance(time, int):
        return ox.Literal(str(time), datatype=ox.NamedNode(XSD + "integer"))
    return ox.Literal(format(time, "f"), datatype=ox.NamedNode(XSD + "decimal"))
