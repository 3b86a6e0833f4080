"""The reference's own reading of query text (semantics.md section 11).

A SPASEQ query is a skeleton (prologue, SELECT or CONSTRUCT, WITHIN,
PARTITION BY, FROM STREAM, SEQ, DEFINE GPM) around SPARQL source text (GPM
bodies, the CONSTRUCT template).  The skeleton is read here by a small
recursive-descent scanner; the SPARQL text is kept as written and only
looked at lexically: which variables it mentions, where its FILTERs are and
what their ``&&`` conjuncts read.  Everything SPARQL means is left to
pyoxigraph (``sparql.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from urllib.parse import urljoin

from ..errors import QueryError

KLEENE, OPTIONAL, NEGATION = "+", "?", "!"
OPERATORS = (",", ";", ":")
AGGREGATES = ("COUNT", "SUM", "AVG", "MIN", "MAX", "SAMPLE", "GROUP_CONCAT")
UNITS = {**dict.fromkeys(("ms", "millisecond", "milliseconds"), Fraction(1, 1000)),
         **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1),
         **dict.fromkeys(("min", "mins", "minute", "minutes"), 60),
         **dict.fromkeys(("h", "hour", "hours"), 3600), **dict.fromkeys(("day", "days"), 86400)}

_IRI = re.compile(r'<[^<>"{}|^`\\\x00-\x20]*>')
_STRING = re.compile(r'"""(?:.|\n)*?"""|\'\'\'(?:.|\n)*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'')
_COMMENT = re.compile(r"#[^\n]*")
# SPARQL 1.1's names (productions PN_CHARS_BASE to PN_LOCAL_ESC), up to U+FFFF as Oxigraph
_BASE = "A-Za-z\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u02FF\u0370-\u037D\u037F-\u1FFF\u200C-\u200D" \
        "\u2070-\u218F\u2C00-\u2FEF\u3001-\uD7FF\uF900-\uFDCF\uFDF0-\uFFFD"
_LATER = "_0-9\u00B7\u0300-\u036F\u203F-\u2040"          # PN_CHARS_U and VARNAME's other characters
_PN_CHARS = f"[{_BASE}{_LATER}-]"
_PLX = r"(?:%[0-9A-Fa-f]{2}|\\[_~.\-!$&'()*+,;=/?#@%])"
_PN_PREFIX = f"[{_BASE}](?:(?:{_PN_CHARS}|\\.)*{_PN_CHARS})?"
_PN_LOCAL = f"(?:[{_BASE}_:0-9]|{_PLX})(?:(?:{_PN_CHARS}|[.:]|{_PLX})*(?:{_PN_CHARS}|:|{_PLX}))?"
_VARIABLE = re.compile(f"[?$]([{_BASE}_0-9][{_BASE}{_LATER}]*)")
_NAME = re.compile(f"[{_BASE}_][{_BASE}{_LATER}]*")         # stream and GPM names, keywords
_PREFIX = re.compile(f"({_PN_PREFIX})?:")
_PNAME = re.compile(f"({_PN_PREFIX})?:({_PN_LOCAL})?")
_LOCAL_ESCAPE = re.compile(r"\\(.)")
_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")
_UNIT = re.compile(r"(milliseconds?|ms|seconds?|secs?|s|minutes?|mins?|hours?|h|days?)\b", re.I)
_FILTER = re.compile(r"(?<![\w:?$])filter\b", re.I)


# -- SPARQL text, lexically --------------------------------------------------------

def blanked(text: str) -> str:
    """``text`` with strings, IRIs and comments replaced by spaces (same length):
    what is left holds the variables, keywords, braces and parentheses.  An escape
    in a prefixed name (``ex:it\\'s``, ``ex:a\\?b``) becomes ``__``: the name stays
    one word."""
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        match = None
        if c in "\"'":
            match = _STRING.match(text, i)
        elif c == "<":
            match = _IRI.match(text, i)          # else `<` is an operator
        elif c == "#":
            match = _COMMENT.match(text, i)
        elif c == "\\" and i + 1 < len(text):
            out.append("__")
            i += 2
            continue
        if match:
            out.append(re.sub(r"[^\n]", " ", match.group()))
            i = match.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def variables(text: str) -> set[str]:
    """The variables written in SPARQL text (not in its strings, IRIs or comments)."""
    return set(_VARIABLE.findall(blanked(text)))


def _closing(plain: str, at: int, pairs=(("(", ")"), ("{", "}"))) -> int:
    """The index after the bracket closing the one at ``at`` (``plain``: blanked text)."""
    closers = dict(pairs)
    depth = []
    for i in range(at, len(plain)):
        c = plain[i]
        if c in closers:
            depth.append(closers[c])
        elif c in closers.values():
            if not depth or depth.pop() != c:
                raise ValueError("unbalanced brackets")
            if not depth:
                return i + 1
    raise ValueError("unbalanced brackets")


@dataclass(frozen=True)
class FilterSpan:
    """``FILTER constraint`` in a body: where it is and the constraint's text."""
    start: int
    end: int
    constraint: str


def filters(body: str, top_level: bool) -> list[FilterSpan]:
    """The FILTERs of a group pattern body: all of them, or those outside nested groups."""
    plain = blanked(body)
    out = []
    for match in _FILTER.finditer(plain):
        if top_level and _depth(plain, match.start()) != 0:
            continue
        i = match.end()
        while i < len(plain) and plain[i].isspace():
            i += 1
        if i < len(plain) and plain[i] == "(":
            end = _closing(plain, i)
        else:                      # a built-in or function call: NAME(...), NOT EXISTS {...}
            opener = min((p for p in (plain.find("(", i), plain.find("{", i)) if p >= 0), default=-1)
            if opener < 0:
                continue
            end = _closing(plain, opener)
        out.append(FilterSpan(match.start(), end, body[i:end]))
    return out


def _depth(plain: str, at: int) -> int:
    return plain.count("{", 0, at) - plain.count("}", 0, at)


def conjuncts(expression: str) -> list[str]:
    """The ``&&`` conjuncts of a FILTER constraint, outer parentheses removed."""
    text = expression.strip()
    plain = blanked(text)
    while plain.startswith("(") and _closing(plain, 0) == len(plain):
        text = text[1:-1].strip()
        plain = blanked(text)
    parts, depth, start = [], 0, 0
    i = 0
    while i < len(plain):
        c = plain[i]
        if c in "({":
            depth += 1
        elif c in ")}":
            depth -= 1
        elif depth == 0 and plain.startswith("&&", i):
            parts.append(text[start:i])
            start = i + 2
            i += 1
        i += 1
    parts.append(text[start:])
    if len(parts) == 1:
        return [text]
    return [c for part in parts for c in conjuncts(part)]


def read_variables(constraint: str) -> set[str]:
    """The variables a FILTER constraint reads (those of EXISTS patterns are the pattern's)."""
    plain = blanked(constraint)
    kept = []
    depth = 0
    for c in plain:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif depth == 0:
            kept.append(c)
    return set(_VARIABLE.findall("".join(kept)))


# -- the skeleton -------------------------------------------------------------------

@dataclass
class Aggregate:
    function: str
    var: str | None                   # None: COUNT(*)
    distinct: bool
    separator: str | None
    alias: str


@dataclass
class Atom:
    """One atom of SEQ: ``names`` (one for a plain atom), ``kind`` '' '&' or '|', its suffix."""
    index: int
    names: list[str]
    kind: str
    suffix: str
    line: int
    column: int


@dataclass
class Gpm:
    name: str
    streams: list[str]               # aliases
    body: str
    line: int
    column: int


@dataclass
class ParsedQuery:
    text: str
    prefixes: dict[str, str] = field(default_factory=dict)
    base: str | None = None
    select: list[str | Aggregate] | None = None    # None: SELECT * (or CONSTRUCT)
    distinct: bool = False
    template: str | None = None                    # CONSTRUCT
    window: Fraction | None = None
    tumbling: bool = False
    partition_by: list[str] = field(default_factory=list)
    streams: dict[str, str] = field(default_factory=dict)     # alias -> IRI
    atoms: list[Atom] = field(default_factory=list)
    operators: list[str] = field(default_factory=list)       # operators[i] links atoms i and i+1
    gpms: dict[str, Gpm] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def prologue(self) -> str:
        lines = [f"BASE <{self.base}>"] if self.base else []
        return " ".join(lines + [f"PREFIX {p}: <{iri}>" for p, iri in self.prefixes.items()])


class _Scanner:
    def __init__(self, text: str):
        self.text = text
        self.plain = blanked(text)
        self.at = 0

    def where(self, at: int | None = None) -> tuple[int, int]:
        at = self.at if at is None else at
        line = self.text.count("\n", 0, at) + 1
        return line, at - (self.text.rfind("\n", 0, at) + 1) + 1

    def fail(self, message: str, at: int | None = None):
        raise QueryError(message, *self.where(at))

    def space(self) -> None:
        while self.at < len(self.text):
            if self.text[self.at].isspace():
                self.at += 1
            elif self.text[self.at] == "#":
                end = self.text.find("\n", self.at)
                self.at = len(self.text) if end < 0 else end
            else:
                return

    def word(self, *words: str) -> str | None:
        """The next token if it is one of ``words`` (case-insensitive), consumed."""
        self.space()
        match = _NAME.match(self.text, self.at)
        if match and match.group().upper() in words:
            self.at = match.end()
            return match.group().upper()
        return None

    def expect_word(self, word: str) -> None:
        if not self.word(word):
            self.fail(f"expected {word}")

    def char(self, chars: str) -> str | None:
        self.space()
        if self.at < len(self.text) and self.text[self.at] in chars:
            self.at += 1
            return self.text[self.at - 1]
        return None

    def expect_char(self, c: str) -> None:
        if not self.char(c):
            self.fail(f"expected '{c}'")

    def regex(self, pattern: re.Pattern, what: str):
        self.space()
        match = pattern.match(self.text, self.at)
        if not match:
            self.fail(f"expected {what}")
        self.at = match.end()
        return match

    def name(self) -> str:
        return self.regex(_NAME, "a name").group()

    def variable(self) -> str:
        return self.regex(_VARIABLE, "a variable").group(1)

    def braced(self) -> str:
        """The source text between ``{`` and its matching ``}``."""
        self.space()
        if self.at >= len(self.text) or self.text[self.at] != "{":
            self.fail("expected '{'")
        try:
            end = _closing(self.plain, self.at, (('{', '}'),))
        except ValueError:
            self.fail("unbalanced braces")
        body = self.text[self.at + 1:end - 1]
        self.at = end
        return body


def parse(text: str) -> ParsedQuery:
    """Read SPASEQ text into a :class:`ParsedQuery` (no semantic checks)."""
    q = ParsedQuery(text)
    s = _Scanner(text)
    while True:
        if s.word("PREFIX"):
            prefix = s.regex(_PREFIX, "a prefix name").group()[:-1]
            q.prefixes[prefix] = s.regex(_IRI, "an IRI").group()[1:-1]
        elif s.word("BASE"):
            q.base = s.regex(_IRI, "an IRI").group()[1:-1]
        else:
            break
    if s.word("SELECT"):
        q.distinct = bool(s.word("DISTINCT"))
        if not s.char("*"):
            q.select = []
            while True:
                s.space()
                if s.text.startswith(("?", "$"), s.at):
                    q.select.append(s.variable())
                elif s.char("("):
                    q.select.append(_aggregate(s))
                else:
                    break
            if not q.select:
                s.fail("expected a variable, an aggregate or '*'")
    elif s.word("CONSTRUCT"):
        q.template = s.braced()
    else:
        s.fail("expected SELECT or CONSTRUCT")
    while True:
        if s.word("WITHIN"):
            if q.window is not None:
                s.fail("WITHIN is given twice")
            number = Fraction(s.regex(_NUMBER, "a number").group())
            q.window = number * UNITS[s.regex(_UNIT, "a time unit").group().lower()]
            if q.window <= 0:
                s.fail("the WITHIN window must be longer than zero")
            q.tumbling = bool(s.word("TUMBLING"))
        elif s.word("PARTITION"):
            s.expect_word("BY")
            if q.partition_by:
                s.fail("PARTITION BY is given twice")
            if s.char("("):
                q.partition_by.append(s.variable())
                while s.char(","):
                    q.partition_by.append(s.variable())
                s.expect_char(")")
            else:
                q.partition_by.append(s.variable())
                while True:
                    s.space()
                    if not s.text.startswith(("?", "$"), s.at):
                        break
                    q.partition_by.append(s.variable())
        elif s.word("FROM"):
            s.expect_word("STREAM")
            at = s.at
            alias = s.name()
            if alias in q.streams:
                s.fail(f"stream {alias} is declared twice", at)
            q.streams[alias] = _iri(s, q)
        else:
            break
    s.expect_word("WHERE")
    if s.char("{"):
        _sequence(s, q)
        _definitions(s, q)
        s.expect_char("}")
    else:
        _sequence(s, q)
        s.expect_char("{")
        _definitions(s, q)
        s.expect_char("}")
    s.space()
    if s.at != len(text):
        s.fail("unexpected text after the query")
    return q


def _aggregate(s: _Scanner) -> Aggregate:
    function = s.name().upper()
    if function not in AGGREGATES:
        s.fail(f"unknown aggregate {function}")
    s.expect_char("(")
    distinct = bool(s.word("DISTINCT"))
    var = None if s.char("*") else s.variable()
    if var is None and function != "COUNT":
        s.fail(f"{function}(*) is not allowed")
    separator = None
    if s.char(";"):
        s.expect_word("SEPARATOR")
        s.expect_char("=")
        literal = s.regex(_STRING, "a string").group()
        separator = bytes(literal[1:-1], "utf-8").decode("unicode_escape")
    s.expect_char(")")
    s.expect_word("AS")
    alias = s.variable()
    s.expect_char(")")
    return Aggregate(function, var, distinct, separator, alias)


def _iri(s: _Scanner, q: ParsedQuery) -> str:
    s.space()
    match = _IRI.match(s.text, s.at)
    if match:
        s.at = match.end()
        iri = match.group()[1:-1]
        return urljoin(q.base, iri) if q.base else iri
    at = s.at
    match = s.regex(_PNAME, "an IRI")
    prefix = match.group(1) or ""
    if prefix not in q.prefixes:
        s.fail(f"prefix {prefix}: is not declared", at)
    return q.prefixes[prefix] + _LOCAL_ESCAPE.sub(r"\1", match.group(2) or "")


def _sequence(s: _Scanner, q: ParsedQuery) -> None:
    s.expect_word("SEQ")
    s.expect_char("(")
    q.atoms.append(_atom(s, 0))
    while True:
        op = s.char("".join(OPERATORS))
        if op is None:
            break
        s.space()
        if s.text.startswith(")", s.at):
            q.warnings.append(f"trailing {op} before ')' ignored")
            break
        q.operators.append(op)
        q.atoms.append(_atom(s, len(q.atoms)))
    s.expect_char(")")


def _atom(s: _Scanner, index: int) -> Atom:
    s.space()
    line, column = s.where()
    if s.char("("):
        names = [s.name()]
        kind = s.char("&|") or ""
        if kind:
            names.append(s.name())
            while s.char(kind):
                names.append(s.name())
            s.expect_char(")")
            return Atom(index, names, kind, "", line, column)
        suffix = s.char("+?!") or ""
        s.expect_char(")")
        return Atom(index, names, "", suffix, line, column)
    name = s.name()
    return Atom(index, [name], "", s.char("+?!") or "", line, column)


def _definitions(s: _Scanner, q: ParsedQuery) -> None:
    while s.word("DEFINE"):
        line, column = s.where(s.at - len("DEFINE"))
        s.expect_word("GPM")
        name = s.name()
        if name in q.gpms:
            s.fail(f"GPM {name} is defined twice")
        s.expect_word("ON")
        streams = [s.name()]
        while s.char(","):
            streams.append(s.name())
        q.gpms[name] = Gpm(name, streams, s.braced(), line, column)
    if not q.gpms:
        s.fail("expected DEFINE GPM")
