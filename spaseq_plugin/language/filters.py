"""FILTER expressions (rdflib algebra) -> Python closures over a binding row.

A compiled expression is ``f(row) -> native value`` (see sparql_values);
it raises SparqlError for a SPARQL error and Unsupported for what only
Oxigraph should judge.  ``compile_expression`` raises ``NotCompilable`` for
expressions outside the supported set, and the GPM then takes the Oxigraph
path as a whole.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from rdflib.plugins.sparql.parserutils import CompValue
from rdflib.term import Literal, URIRef, Variable

from ..rdflib_terms import rdflib_to_ox, unalias
from ..evaluators.sparql_values import (
    DECIMAL, DOUBLE, INTEGER, SparqlError, Unsupported, arithmetic, canonical, checked_number, compare,
    decimal_round, ebv, equal, native, ordering_test,
)

TRUE, FALSE = ("bool", True), ("bool", False)


class NotCompilable(Exception):
    """The expression uses something the fast path does not evaluate."""


def conjuncts(expr) -> list:
    """Top-level ``&&`` operands: FILTER(a && b) keeps a row iff both hold."""
    if isinstance(expr, CompValue) and expr.name == "ConditionalAndExpression":
        out = conjuncts(expr.expr)
        for other in expr.other or ():
            out += conjuncts(other)
        return out
    return [expr]


def variables(expr) -> set[str]:
    if isinstance(expr, Variable):
        return {str(expr)}
    if isinstance(expr, (list, tuple)):
        return set().union(*(variables(e) for e in expr)) if expr else set()
    if isinstance(expr, CompValue):
        return set().union(*(variables(v) for k, v in expr.items() if not k.startswith("_"))) \
            if expr else set()
    return set()


def compile_filter(expr):
    """``row -> bool``: the FILTER keeps the row; errors are false."""
    keep = _ordering_filter(expr)
    if keep is not None:
        return keep
    value = compile_expression(expr)

    def keep(row) -> bool:
        try:
            return ebv(value(row))
        except SparqlError:
            return False
    return keep


_ORDERINGS = {"<": (-1,), "<=": (-1, 0), ">": (1,), ">=": (0, 1)}    # compare() results kept


def _ordering_filter(expr):
    """``FILTER(?a op ?b)`` or ``FILTER(?a op constant)`` (either way round) with op one of
    < <= > >=, the commonest CEP filter, as one closure: the general path's closure per
    operand, for the test and for the boolean costs as much again.  None for others."""
    if not (isinstance(expr, CompValue) and expr.name == "RelationalExpression" and expr.op in _ORDERINGS):
        return None
    kept = _ORDERINGS[expr.op]
    left, right = expr.expr, expr.other
    if not isinstance(left, Variable):
        left, right, kept = right, left, tuple(-k for k in kept)   # compare(b, a) == -compare(a, b)
    if not isinstance(left, Variable):
        return None
    if isinstance(right, Variable):
        return ordering_test(str(left), str(right), None, kept)
    if not isinstance(right, (URIRef, Literal)):
        return None
    return ordering_test(str(left), None, compile_expression(right)(None), kept)


def compile_expression(expr):
    if isinstance(expr, Variable):
        name = str(expr)

        def var(row):
            term = row.get(name)
            if term is None:
                raise SparqlError(f"?{name} is unbound")
            return native(term)
        return var
    if isinstance(expr, (URIRef, Literal)):
        term = rdflib_to_ox(URIRef(unalias(str(expr))) if isinstance(expr, URIRef) else expr)
        try:
            constant = native(canonical(term))
        except Unsupported:
            raise NotCompilable(f"constant {term}") from None
        return lambda row: constant
    if not isinstance(expr, CompValue):
        raise NotCompilable(repr(expr))
    handler = _HANDLERS.get(expr.name)
    if handler is None:
        raise NotCompilable(expr.name)
    return handler(expr)


def _relational(expr):
    left = compile_expression(expr.expr)
    op = expr.op
    if op in ("IN", "NOT IN"):
        options = [compile_expression(o) for o in expr.other]

        def member(row):
            value = left(row)
            error = None
            for option in options:
                try:
                    if equal(value, option(row)):
                        return FALSE if op == "NOT IN" else TRUE
                except SparqlError as e:
                    error = e
            if error is not None:
                raise error
            return TRUE if op == "NOT IN" else FALSE
        return member
    right = compile_expression(expr.other)
    if op == "=":
        return lambda row: TRUE if equal(left(row), right(row)) else FALSE
    if op == "!=":
        return lambda row: FALSE if equal(left(row), right(row)) else TRUE
    kept = _ORDERINGS[op]
    return lambda row: TRUE if compare(left(row), right(row)) in kept else FALSE


def _and(expr):
    parts = [compile_expression(e) for e in [expr.expr] + list(expr.other or ())]

    def conjunction(row):
        error = None
        for part in parts:
            try:
                if not ebv(part(row)):
                    return FALSE
            except SparqlError as e:
                error = e
        if error is not None:
            raise error
        return TRUE
    return conjunction


def _or(expr):
    parts = [compile_expression(e) for e in [expr.expr] + list(expr.other or ())]

    def disjunction(row):
        error = None
        for part in parts:
            try:
                if ebv(part(row)):
                    return TRUE
            except SparqlError as e:
                error = e
        if error is not None:
            raise error
        return FALSE
    return disjunction


def _additive(expr):
    first = compile_expression(expr.expr)
    rest = [(op, compile_expression(o)) for op, o in zip(expr.op, expr.other)]

    def combine(row):
        value = first(row)
        for op, other in rest:
            value = arithmetic(op, value, other(row))
        return value
    return combine


def _not(expr):
    inner = compile_expression(expr.expr)
    return lambda row: FALSE if ebv(inner(row)) else TRUE


def _bound(expr):
    name = str(expr.arg)
    return lambda row: TRUE if row.get(name) is not None else FALSE


def _category_test(*categories):
    def build(expr):
        inner = compile_expression(expr.arg)
        return lambda row: TRUE if inner(row)[0] in categories else FALSE
    return build


def _str(expr):
    inner = compile_expression(expr.arg)

    def lexical(row):
        cat, payload = inner(row)
        if cat in ("iri", "str"):
            return ("str", payload)
        if cat == "lang":
            return ("str", payload[0])
        if cat == "bnode":
            raise SparqlError("STR of a blank node")
        raise Unsupported("STR of a typed literal")   # canonical lexical forms are Oxigraph's
    return lexical


def _lang(expr):
    inner = compile_expression(expr.arg)

    def language(row):
        cat, payload = inner(row)
        if cat == "lang":
            return ("str", payload[1])
        if cat in ("str", "num", "bool", "dt", "lit"):
            return ("str", "")
        raise SparqlError("LANG of a non-literal")
    return language


def _string_arg(value) -> str:
    cat, payload = value
    if cat == "str":
        return payload
    if cat == "lang":
        raise Unsupported("string function on a language-tagged literal")
    raise SparqlError("not a string")


# Python's regular expressions backtrack: over an event's literal, "^(a+)+$" takes
# exponential time and "a*b" quadratic (on 1 MB of 'a's, hours).  Oxigraph's engine is
# linear.  A pattern is compiled here only if it repeats nothing (no * + {n,m}, no
# quantified group, no backreference) and has few choices (each '?' or '|' at most
# doubles the ways to try: at most 2^8 of them, each costing the pattern's length, at
# each position of the text); any other sends its GPM to the Oxigraph evaluator.
# (Conservative: an escaped \* or \| counts too.)
_REPEATS = re.compile(r"[*+{]|\)\?|\\[1-9]")
MAX_REGEX_CHOICES = 8


# Oxigraph's REGEX is Rust's regex crate, not XPath's and not Python's: the three
# read much the same text differently ("\\Z", "\\<", "[[:alpha:]]", "[a-z&&[^b]]",
# "[a-z-[aeiou]]" are each valid in one and an error or other characters in
# another).  A pattern is compiled here only if it is made of what both read alike
# (``_plain_pattern``); any other sends its GPM to the Oxigraph evaluator.
_PLAIN_ESCAPES = frozenset("\\.^$|()[]{}*+?-/ntr")     # \x for these x: the same in both


def _plain_pattern(pattern: str) -> bool:
    """Whether ``pattern`` holds only literal characters, escapes of ``_PLAIN_ESCAPES``,
    ``.``, ``^``, ``$``, ``|``, ``?``, plain groups and classes of characters, ranges
    and such escapes (no class inside a class, no ``&&``, ``--`` or ``~~``)."""
    at, depth = 0, 0
    while at < len(pattern):
        char = pattern[at]
        if char == "\\":
            if pattern[at + 1:at + 2] not in _PLAIN_ESCAPES:        # ("" at the end)
                return False
            at += 2
            continue
        if char == "[":
            end = at + 1 + (pattern[at + 1:at + 2] == "^")
            start = end
            while end < len(pattern) and pattern[end] != "]":
                if pattern[end] == "\\":
                    if pattern[end + 1:end + 2] not in _PLAIN_ESCAPES:
                        return False
                    end += 2
                    continue
                if pattern[end] == "[" or pattern[end:end + 2] in ("&&", "--", "~~"):
                    return False
                end += 1
            if end >= len(pattern) or end == start:
                return False            # unclosed, or empty ("[]" and "[^]" differ too)
            at = end + 1
            continue
        if char == "(":
            if pattern[at + 1:at + 2] == "?":
                return False
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                return False
        elif char in "]{}":
            return False
        at += 1
    return depth == 0


def _regex(expr):
    text = compile_expression(expr.text)
    if not isinstance(expr.pattern, Literal) or (expr.flags is not None and not isinstance(expr.flags, Literal)):
        raise NotCompilable("REGEX with a computed pattern")
    pattern = str(expr.pattern)
    flags_text = str(expr.flags) if expr.flags is not None else ""
    if set(flags_text) - set("ism") or not _plain_pattern(pattern):
        raise NotCompilable("REGEX flags or syntax that Oxigraph's engine and Python's read differently")
    if _REPEATS.search(pattern) or pattern.count("?") + pattern.count("|") > MAX_REGEX_CHOICES:
        raise NotCompilable("REGEX with repetition or many choices: Python's engine backtracks on it, "
                            "Oxigraph's does not")
    flags = (re.I if "i" in flags_text else 0) | (re.S if "s" in flags_text else 0) | (re.M if "m" in flags_text else 0)
    try:
        compiled = re.compile(pattern if "m" in flags_text else _end_at_end(pattern), flags)
    except re.error:
        raise NotCompilable("REGEX pattern") from None
    search = compiled.search
    if "i" not in flags_text:
        return lambda row: TRUE if search(_string_arg(text(row))) else FALSE

    def search_folded(row):
        value = _string_arg(text(row))
        if "\u0130" in value or "\u0131" in value:
            # Python folds İ and ı to i; Oxigraph (Unicode's simple case folding) does not
            raise Unsupported("REGEX ignoring case over a dotted or dotless i")
        return TRUE if search(value) else FALSE
    return search_folded


def _end_at_end(pattern: str) -> str:
    """``pattern`` with each ``$`` anchor (not escaped, not in a class) written ``\\Z``:
    the end of the text, as in XPath.  Python's ``$`` also matches before a final newline."""
    out = []
    at, in_class = 0, False
    while at < len(pattern):
        char = pattern[at]
        if char == "\\":
            out.append(pattern[at:at + 2])
            at += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            char = "\\Z"
        out.append(char)
        at += 1
    return "".join(out)


def _strlen(expr):
    inner = compile_expression(expr.arg)
    return lambda row: ("num", (INTEGER, len(_string_arg(inner(row)))))


def _string_test(test):
    def build(expr):
        left, right = compile_expression(expr.arg1), compile_expression(expr.arg2)
        return lambda row: TRUE if test(_string_arg(left(row)), _string_arg(right(row))) else FALSE
    return build


def _case(upper: bool):
    def build(expr):
        inner = compile_expression(expr.arg)
        return lambda row: ("str", _string_arg(inner(row)).upper() if upper else _string_arg(inner(row)).lower())
    return build


def _numeric(function, operand: str = "arg"):
    """A numeric function of one argument (``operand``: where the algebra keeps it)."""
    def build(expr):
        inner = compile_expression(expr[operand])

        def apply(row):
            value = inner(row)
            if value[0] != "num":
                raise SparqlError("not a number")
            kind, number = value[1]
            return checked_number(kind, function(kind, number))
        return apply
    return build


def _round(kind, x):
    if kind == DOUBLE:
        if math.isinf(x) or x != x:
            return x
        return float(math.floor(x + 0.5))
    if kind == DECIMAL:
        return decimal_round(x)
    return x


def _integral(function):
    def apply(kind, x):
        if kind == DOUBLE:
            return float(function(x)) if not (math.isinf(x) or x != x) else x
        if kind == DECIMAL:
            return Decimal(function(x))
        return x
    return apply


_HANDLERS = {
    "RelationalExpression": _relational,
    "ConditionalAndExpression": _and,
    "ConditionalOrExpression": _or,
    "AdditiveExpression": _additive,
    "MultiplicativeExpression": _additive,
    "UnaryNot": _not,
    "UnaryMinus": _numeric(lambda kind, x: -x, "expr"),
    "UnaryPlus": _numeric(lambda kind, x: x, "expr"),
    "Builtin_BOUND": _bound,
    "Builtin_isIRI": _category_test("iri"),
    "Builtin_isURI": _category_test("iri"),
    "Builtin_isBLANK": _category_test("bnode"),
    "Builtin_isLITERAL": _category_test("str", "lang", "num", "bool", "dt", "lit"),
    "Builtin_isNUMERIC": _category_test("num"),
    "Builtin_STR": _str,
    "Builtin_LANG": _lang,
    "Builtin_REGEX": _regex,
    "Builtin_STRLEN": _strlen,
    "Builtin_CONTAINS": _string_test(lambda a, b: b in a),
    "Builtin_STRSTARTS": _string_test(lambda a, b: a.startswith(b)),
    "Builtin_STRENDS": _string_test(lambda a, b: a.endswith(b)),
    "Builtin_UCASE": _case(True),
    "Builtin_LCASE": _case(False),
    "Builtin_ABS": _numeric(lambda kind, x: abs(x)),
    "Builtin_CEIL": _numeric(_integral(math.ceil)),
    "Builtin_FLOOR": _numeric(_integral(math.floor)),
    "Builtin_ROUND": _numeric(_round),
}
