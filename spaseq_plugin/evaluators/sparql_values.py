"""SPARQL term semantics in Python, for the fast GPM path's FILTERs.

FILTER expressions are compiled into Python closures over *native values*
(ints, Decimals, floats, strings, ...), so a filter costs a few Python
calls instead of a SPARQL query.  The rules are SPARQL 1.1's as Oxigraph
implements them (the fallback evaluator, and the reference): numeric type
promotion, simple literals equal to xsd:string, errors for comparisons of
incomparable terms, errors inside FILTER meaning false, the error-tolerant
``&&`` and ``||``.

Where a value falls outside what this module is sure about (an ill-typed
literal, an unknown datatype compared by order, a language-tagged string in
an ordering, mixed time zones), it raises :class:`Unsupported` and the
caller evaluates that GPM with Oxigraph instead, so answers stay exact.

Literals are also *canonicalised* as Oxigraph stores them ("01"^^xsd:integer
is "1"), because the fallback evaluator's joins and results see canonical
forms; the canonical form comes from Oxigraph itself and is cached.
"""

from __future__ import annotations

import datetime
import functools
import math
import operator
import re
from decimal import ROUND_DOWN, ROUND_FLOOR, Context, Decimal, InvalidOperation

import pyoxigraph as ox

from ..events import DECIMAL_FORM, DOUBLE_FORM, INTEGER_FORM
try:
    import cython
except ImportError:     # interpreted, without Cython installed
    from ..compiled import shadow as cython
if not cython.compiled:
    from ..compiled import shadow as cython

XSD = "http://www.w3.org/2001/XMLSchema#"
XSD_STRING = XSD + "string"
_XSD_FLOAT = XSD + "float"
RDF_LANG_STRING = "http://www.w3.org/1999/02/22-rdf-syntax-ns#langString"
_INTEGER_TYPES = frozenset(XSD + t for t in (
    "integer", "int", "long", "short", "byte", "nonNegativeInteger", "positiveInteger",
    "negativeInteger", "nonPositiveInteger", "unsignedInt", "unsignedLong", "unsignedShort",
    "unsignedByte"))
INTEGER, DECIMAL, DOUBLE = 0, 1, 2          # numeric promotion order (xsd:float is left to Oxigraph)


class SparqlError(Exception):
    """A SPARQL expression error: a FILTER that raises it is false."""


class Unsupported(Exception):
    """A value this module does not model exactly: ask Oxigraph."""


# -- native values -------------------------------------------------------------
# A native value is a tuple (category, payload):
#   ("num", (kind, number))   kind: INTEGER | DECIMAL | DOUBLE
#   ("str", text)              simple literal / xsd:string
#   ("lang", (text, tag))      language-tagged string (tag lower-cased)
#   ("bool", bool)
#   ("dt", datetime)           xsd:dateTime
#   ("iri", text) / ("bnode", text)
#   ("lit", term)              any other literal: only identity is known

# Term caches (`term_cache`): a bounded working set (about the terms of the runs in one
# window), so memory follows the window, not the stream's length.  They keep no term
# whose N-Triples text is longer than MAX_CACHED_TERM_CHARS: a stream of distinct large
# literals (payloads, documents) would otherwise keep CACHE_LIMIT of them alive in each
# cache, a term and a copy of its text per entry.  Such a term is computed at each use.
CACHE_LIMIT = 4_096
MAX_CACHED_TERM_CHARS = 1_024
_GENERATION = cython.declare(cython.Py_ssize_t, CACHE_LIMIT // 2)
_MISSING = object()


class _Large:
    """A large term's value, computed but not kept (see above)."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


@cython.cclass
class _KeptByValue:
    """``function`` of a term, kept by value for the terms asked last: two generations
    of at most CACHE_LIMIT / 2 terms each, the older dropped whole when the newer is
    full (a term found in the older moves to the newer).  A term found costs one dict
    lookup: a pyoxigraph term hashes its whole text at each lookup, and
    functools.lru_cache added a key tuple, its hash and its list's upkeep."""
    function = cython.declare(object)
    newer = cython.declare(dict)
    older = cython.declare(dict)

    def __init__(self, function):
        self.function = function
        self.newer = {}
        self.older = {}

    @cython.ccall
    def get(self, term):
        value = self.lookup(term)
        return value.value if type(value) is _Large else value

    @cython.cfunc
    def lookup(self, term):
        """The value, or a _Large holding it when the term is too large to keep."""
        value = self.newer.get(term, _MISSING)
        if value is not _MISSING:
            return value
        value = self.older.get(term, _MISSING)
        if value is _MISSING:
            value = self.function(term)
            if len(str(term)) > MAX_CACHED_TERM_CHARS:
                return _Large(value)
        self.newer[term] = value
        if len(self.newer) >= _GENERATION:
            self.older = self.newer
            self.newer = {}
        return value


def term_cache(function):
    """``function`` of one term, remembered for the terms used last but large ones:
    a stream's values repeat, and a lookup costs a fraction of the work."""
    get = _KeptByValue(function).get

    @functools.wraps(function)
    def lookup(term):
        return get(term)
    return lookup


_IDENTITY_SLOTS = cython.declare(cython.Py_ssize_t, CACHE_LIMIT)


@cython.cclass
class RevisitedTermCache:
    """``term_cache`` for a function asked about the same term objects again and
    again (a run's value is tested against every event it may extend, an event's
    value against every run): an identity lookup in front of the by-value cache.  A
    pyoxigraph term hashes its whole text (SipHash over the IRI or lexical form
    and datatype), most of a by-value lookup's cost; an object's address costs
    nothing.  The identity level is direct-mapped: CACHE_LIMIT slots, a term's
    slot picked by its address, a newcomer taking the slot over.  The entry keeps
    its term alive, so no other object can have that address while it is there.
    (A function asked once per term object, as for each new event's literals,
    only pays for it.)  Neither level keeps a term longer than
    MAX_CACHED_TERM_CHARS.  Called like the function; compiled code of this module
    calls :meth:`get`, a C method."""
    by_value = cython.declare(_KeptByValue)
    by_id = cython.declare(list)

    def __init__(self, function):
        self.by_value = _KeptByValue(function)
        self.by_id = [None] * _IDENTITY_SLOTS      # slot -> (term, value), or None

    @cython.ccall
    @cython.locals(slot=cython.Py_ssize_t)
    def get(self, term):
        if cython.compiled:     # the address itself (id() is a Python call from C)
            slot = (cython.cast(cython.Py_ssize_t, cython.cast(cython.p_void, term)) >> 4) % _IDENTITY_SLOTS
        else:
            slot = (id(term) >> 4) % _IDENTITY_SLOTS
        entry = self.by_id[slot]
        if entry is not None and entry[0] is term:
            return entry[1]
        value = self.by_value.lookup(term)
        if type(value) is _Large:
            return value.value
        self.by_id[slot] = (term, value)
        return value

    def __call__(self, term):
        return self.get(term)


def _native(term) -> tuple:
    if isinstance(term, ox.NamedNode):
        return ("iri", term.value)
    if isinstance(term, ox.BlankNode):
        return ("bnode", term.value)
    if not isinstance(term, ox.Literal):
        raise Unsupported(f"term {term!r}")
    if term.language:
        return ("lang", (term.value, term.language.lower()))
    dt = term.datatype.value
    text = term.value
    try:
        if dt == XSD_STRING:
            return ("str", text)
        if dt in _INTEGER_TYPES:
            if not (text.isdigit() and text.isascii()) and not INTEGER_FORM.fullmatch(text):
                raise Unsupported(text)
            return checked_number(INTEGER, int(text))
        if dt == XSD + "decimal":
            if not DECIMAL_FORM.fullmatch(text):
                raise Unsupported(text)
            value = Decimal(text)
            whole, _, fraction = text.partition(".")
            if len(whole) <= 20 and len(fraction) <= 18:
                return ("num", (DECIMAL, value))        # within Oxigraph's range at a glance
            return checked_number(DECIMAL, value)
        if dt == XSD + "double":
            return ("num", (DOUBLE, _double(text)))
        if dt == _XSD_FLOAT:
            # Oxigraph keeps it in single precision, and promotes a decimal to it:
            # "0.1"^^xsd:float = 0.1 holds, "0.1"^^xsd:float = 0.1e0 does not
            raise Unsupported("xsd:float")
        if dt == XSD + "boolean":
            if text in ("true", "1"):
                return ("bool", True)
            if text in ("false", "0"):
                return ("bool", False)
            raise Unsupported(text)
        if dt == XSD + "dateTime":
            if not _DATETIME_FORM.fullmatch(text):
                raise Unsupported(text)
            return ("dt", datetime.datetime.fromisoformat(text.replace("Z", "+00:00")))
    except (ValueError, InvalidOperation):
        raise Unsupported(f"ill-typed literal {term}") from None
    return ("lit", term)


native = RevisitedTermCache(_native)
_native_values = cython.declare(RevisitedTermCache, native)     # (typed: C calls to get())


def _double(text: str) -> float:
    if text in ("INF", "+INF"):
        return math.inf
    if text == "-INF":
        return -math.inf
    if text == "NaN":
        return math.nan
    if not DOUBLE_FORM.fullmatch(text):
        raise ValueError(text)
    return float(text)


# The lexical forms read here (numbers: XSD's, events.py); any other is left to Oxigraph
# (Unsupported).  Python's int(), Decimal() and float() also take spaces, '_' and
# non-ASCII digits ("١"), and datetime.fromisoformat() forms XSD does not have
# ("2020-01-01 00:00", week dates) and fractions finer than a microsecond, which it
# rounds: Oxigraph rejects or keeps those.  So the dateTime form here is narrower than
# a timestamp's (events.py): what a Python datetime holds exactly.
_DATETIME_FORM = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?"
                            r"(?:Z|[+-](?:(?:0[0-9]|1[0-3]):[0-5][0-9]|14:00))?")


# -- canonical literals ----------------------------------------------------------

# (no "-0": Oxigraph stores it as "0")
_CANONICAL_INTEGER = re.compile(r"0|-?[1-9][0-9]*")
_CANONICAL_DECIMAL = re.compile(r"0|-?(?:[1-9][0-9]*(?:\.[0-9]*[1-9])?|0\.[0-9]*[1-9])")
_P = ox.NamedNode("urn:spaseq:canonical")
# An in-memory Oxigraph store keeps what was once added to it (its string
# dictionary and removed quads), so the scratch store is replaced every
# _SCRATCH_USES literals: memory must not grow with the number of distinct values.
_SCRATCH_USES = 500
_scratch = [ox.Store(), 0]


# Lexical forms that are canonical already, by datatype (None: any form is).
_CANONICAL_FORMS = {
    XSD_STRING: None,
    XSD + "integer": _CANONICAL_INTEGER,
    XSD + "decimal": _CANONICAL_DECIMAL,
    XSD + "boolean": re.compile("true|false"),
}


def canonical(term):
    """The term as Oxigraph stores it (literals of known types in canonical form)."""
    return canonical_literal(term) if isinstance(term, ox.Literal) else term


@term_cache
def canonical_literal(term: ox.Literal) -> ox.Literal:
    """``canonical`` of a term known to be a literal."""
    if term.language:
        return term
    dt = term.datatype.value
    if dt in _CANONICAL_FORMS:
        form = _CANONICAL_FORMS[dt]
        if form is None or form.fullmatch(term.value):
            return term
    elif not dt.startswith(XSD):
        return term
    quad = ox.Quad(_P, _P, term)
    store = _scratch[0]
    store.add(quad)
    found = next(iter(store.quads_for_pattern(_P, _P, None))).object
    store.remove(quad)      # (clear() costs 40x more)
    _scratch[1] += 1
    if _scratch[1] >= _SCRATCH_USES:
        _scratch[:] = [ox.Store(), 0]
    return found


# Oxigraph's numbers: an xsd:integer (any subtype) is 64 bits, an xsd:decimal a
# 128-bit count of 10^-18.  A value beyond them, in a literal or as a result, is an
# error there (a FILTER reading it is false); Python's numbers have no such bounds,
# so such a value is left to Oxigraph's evaluation of the GPM (Unsupported).
_INTEGER_MIN, _INTEGER_MAX = -(1 << 63), (1 << 63) - 1
_EXACT = Context(prec=80)   # exact on decimals in that range (39 digits), their sums and products
_EIGHTEEN = Decimal("1e-18")
_HALF = Decimal("0.5")
_DECIMAL_MAX = _EXACT.scaleb(Decimal((1 << 127) - 1), -18)


def decimal_round(value: Decimal) -> Decimal:
    """SPARQL ROUND of a decimal (halves towards positive infinity), exactly: Python's
    default context would round ``value + 0.5`` to 28 digits before the floor."""
    return _EXACT.add(value, _HALF).to_integral_value(rounding=ROUND_FLOOR)


def checked_number(kind: int, value) -> tuple:
    """The native value ``("num", (kind, value))``, or Unsupported when Oxigraph's
    ``kind`` does not hold ``value`` exactly (see above)."""
    if kind == INTEGER:
        if not _INTEGER_MIN <= value <= _INTEGER_MAX:
            raise Unsupported("an integer beyond 64 bits")
    elif kind == DECIMAL:
        magnitude = value.adjusted()       # (below 10^20: within the range)
        if not value.is_finite() or magnitude > 20 or (magnitude == 20 and abs(value) > _DECIMAL_MAX):
            raise Unsupported("a decimal beyond Oxigraph's range")
        if _EXACT.quantize(value, _EIGHTEEN) != value:
            raise Unsupported("a decimal with more than 18 digits after the point")
    return ("num", (kind, value))


# -- operators ------------------------------------------------------------------

def _promote(a, b):
    """Two numerics as Python numbers of their promoted SPARQL type."""
    (ka, va), (kb, vb) = a, b
    kind = max(ka, kb)
    if kind == DOUBLE:
        return kind, float(va), float(vb)
    if kind == DECIMAL:
        return kind, Decimal(va), Decimal(vb)
    return kind, va, vb


def equal(a: tuple, b: tuple) -> bool:
    """SPARQL ``=`` on native values (raises SparqlError / Unsupported)."""
    ca, cb = a[0], b[0]
    if ca == cb:
        if ca == "num":
            _, x, y = _promote(a[1], b[1])
            return x == y
        if ca == "dt":
            return _dt_compare(a[1], b[1]) == 0
        if ca == "lit":
            if a[1] == b[1]:
                return True
            raise Unsupported("= on literals of unknown datatypes")
        return a[1] == b[1]
    if ca == "lit" or cb == "lit":
        raise Unsupported("= with a literal of unknown datatype")
    return False


def equality_key(term):
    """A hashable key that every term SPARQL ``=`` may find equal to ``term`` shares,
    so that terms of other keys are certainly not equal to it; None when this module
    cannot say (such a term may equal any).  Numbers go by their value as a double:
    ``=`` promotes to the wider type, and equal values round to the same double
    (1, 1.0 and "01"^^xsd:integer share one key).  Not keyed: xsd:float, literals of
    other datatypes and dateTimes without a time zone (Oxigraph decides their ``=``),
    and ill-typed literals."""
    try:
        category, payload = native(term)
    except Unsupported:
        return None
    if category == "num":
        return "num", float(payload[1])
    if category == "lit" or (category == "dt" and payload.tzinfo is None):
        return None
    return category, payload


@cython.ccall
def compare(a: tuple, b: tuple) -> int:
    """SPARQL ordering for ``<`` ``>`` ``<=`` ``>=``: -1, 0, 1 (or an error).

    As in Oxigraph, a term is ordered equal to itself whatever its kind
    (an IRI, an unknown literal, even NaN).
    """
    ca, cb = a[0], b[0]
    if ca == "num" and cb == "num":
        x, y = a[1], b[1]
        if x[0] != DOUBLE and y[0] != DOUBLE:
            # integers and decimals (never NaN): Python compares int and Decimal exactly,
            # without promoting one to the other's type
            return _order(x[1], y[1])
    if a is b or a == b or (_is_nan(a) and _is_nan(b)):
        return 0
    if ca != cb:
        if "lit" in (ca, cb) or "lang" in (ca, cb):
            raise Unsupported("ordering of an unmodelled literal")
        raise SparqlError("incomparable terms")
    if ca == "num":
        _, x, y = _promote(a[1], b[1])
        if x != x or y != y:             # NaN has no order (Oxigraph: an error)
            raise SparqlError("NaN has no order")
        return _order(x, y)
    if ca == "str":
        return _order(a[1], b[1])
    if ca == "bool":                     # Oxigraph orders a boolean only equal to itself
        raise SparqlError("booleans of different values have no order")
    if ca == "dt":
        return _dt_compare(a[1], b[1])
    if ca in ("lang", "lit"):
        raise Unsupported("ordering of language-tagged or unknown literals")
    raise SparqlError("IRIs and blank nodes have no order")


def ordering_test(name: str, other: str | None, constant: tuple | None, kept: tuple):
    """``row -> bool`` for ``FILTER(?name op ?other)``, or ``FILTER(?name op constant)``
    when ``other`` is None, keeping the rows whose ``compare()`` result is in ``kept``
    (see language/filters.py).  Made here so that, compiled, the closure's native
    values and comparison are C calls."""
    if other is not None:
        @cython.locals(row=dict)
        def keep(row) -> bool:
            a = row.get(name)
            if a is None:
                return False            # an unbound variable is an error: false
            b = row.get(other)
            if b is None:
                return False
            try:
                return compare(_native_values.get(a), _native_values.get(b)) in kept
            except SparqlError:
                return False
        return keep

    # Python compares a Decimal with an int by making a Decimal of the int each
    # time, most of the test's cost: an integer constant is kept as a decimal too,
    # for the decimal values (both orders are exact, so they are the same).
    as_decimal = ("num", (DECIMAL, Decimal(constant[1][1]))) \
        if constant[0] == "num" and constant[1][0] == INTEGER else None

    @cython.locals(row=dict, value=tuple)
    def keep_constant(row) -> bool:
        a = row.get(name)
        if a is None:
            return False
        value = _native_values.get(a)
        try:
            return compare(value, as_decimal if as_decimal is not None and value[0] == "num"
                           and value[1][0] == DECIMAL else constant) in kept
        except SparqlError:
            return False
    return keep_constant


def _is_nan(value: tuple) -> bool:
    return value[0] == "num" and value[1][0] == DOUBLE and value[1][1] != value[1][1]


def _dt_compare(x, y) -> int:
    if (x.tzinfo is None) != (y.tzinfo is None):
        raise Unsupported("dateTimes with and without time zone")
    return _order(x, y)


@cython.cfunc
def _order(x, y):
    """-1, 0 or 1 as ``x`` is below, equal to or above ``y`` (one comparison when it is
    above: a Decimal compared with an int converts the int at each comparison)."""
    if x > y:
        return 1
    return -1 if x < y else 0


def ebv(value: tuple) -> bool:
    """Effective boolean value."""
    cat, payload = value
    if cat == "bool":
        return payload
    if cat == "num":
        number = payload[1]
        return not (number == 0 or number != number)
    if cat == "str":
        return payload != ""
    if cat in ("lit", "lang"):
        raise Unsupported("EBV of an unmodelled literal")
    raise SparqlError("no effective boolean value")


# + - * on integers and doubles, and on decimals (exact: Python's default context
# would round beyond 28 digits)
_RING_OPERATORS = {"+": (operator.add, _EXACT.add), "-": (operator.sub, _EXACT.subtract),
                   "*": (operator.mul, _EXACT.multiply)}


def arithmetic(op: str, a: tuple, b: tuple) -> tuple:
    if a[0] != "num" or b[0] != "num":
        if "lit" in (a[0], b[0]):
            raise Unsupported("arithmetic on an unknown literal")
        raise SparqlError("arithmetic on a non-number")
    kind, x, y = _promote(a[1], b[1])
    operations = _RING_OPERATORS.get(op)
    if operations is not None:
        return checked_number(kind, operations[kind == DECIMAL](x, y))
    if kind == DOUBLE:
        if y == 0:
            return ("num", (DOUBLE, math.nan if x == 0 or x != x else math.copysign(math.inf, x) * math.copysign(1, y)))
        return ("num", (DOUBLE, x / y))
    if y == 0:
        raise SparqlError("division by zero")
    # Oxigraph's xsd:decimal keeps 18 fractional digits and truncates
    quotient = _EXACT.divide(Decimal(x), Decimal(y)).quantize(_EIGHTEEN, rounding=ROUND_DOWN, context=_EXACT)
    return checked_number(DECIMAL, quotient)


def number(value: tuple):
    if value[0] != "num":
        raise SparqlError("not a number")
    return value[1]
