"""Query text -> :class:`~spaseq_plugin.language.syntax.Query`.

lark parses the SPASEQ skeleton (``spaseq.lark``); GPM bodies and CONSTRUCT
templates are kept as source text for SPARQL.  Syntax errors become
:class:`QueryError` with line and column.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from decimal import Decimal
from functools import lru_cache
from urllib.parse import urljoin
from importlib import resources

import lark
from lark import Token, Tree

from ..errors import QueryError
from ..events import MAX_FRACTION_DIGITS, as_time, finer_than_a_nanosecond
from .limits import DEFAULT_MAX_ATOMS, DEFAULT_MAX_NESTING, QueryLimits, check_query_text, check_window
from .syntax import (
    TIME_UNITS, Aggregate, Conjunction, Disjunction, GpmDef, GpmRef, Pos, Query,
    Sequence, StreamDecl, Window,
)


@lru_cache(maxsize=1)
def _lark() -> lark.Lark:
    grammar = resources.files(__package__).joinpath("spaseq.lark").read_text()
    return lark.Lark(grammar, parser="lalr", lexer="contextual", propagate_positions=True,
                     maybe_placeholders=False, lexer_callbacks={kind: _checked_name for kind in _NAME_STARTS})


_TOKEN_NAMES = {
    "SEP": "a sequence operator (, ; :)", "NAME": "a name", "VAR": "a variable",
    "IRIREF": "an IRI", "LPAR": "'('", "RPAR": "')'", "LBRACE": "'{'", "RBRACE": "'}'",
    "_WHERE": "WHERE", "_FROM": "FROM STREAM", "_WITHIN": "WITHIN", "_SEQ": "SEQ",
    "_DEFINE": "DEFINE GPM", "_SELECT": "SELECT", "_CONSTRUCT": "CONSTRUCT",
    "NUMBER": "a number", "TIME_UNIT": "a time unit (SECONDS, MINUTES, ...)",
    "AMPERSAND": "'&'", "VBAR": "'|'", "SUFFIX": "+ ? or !", "PNAME_NS": "a prefix name",
    "_PREFIX": "PREFIX", "_PARTITION": "PARTITION BY", "STAR": "'*'", "_ON": "ON",
    "_DISTINCT": "DISTINCT", "_AS": "AS", "_BY": "BY", "_STREAM": "STREAM", "_GPM": "GPM",
    "_BASE": "BASE", "_TUMBLING": "TUMBLING", "_SEPARATOR": "SEPARATOR", "AGG_NAME": "an aggregate",
    "COMMA": "','", "SEMICOLON": "';'", "EQUAL": "'='", "PNAME": "a prefixed name",
    "BODY_TOKEN": "SPARQL", "STRING": "a string", "LONG_STRING": "a string",
}


def _expected(names) -> str:
    shown = sorted({_TOKEN_NAMES.get(n, n) for n in names})
    return ", ".join(shown[:8]) + (" ..." if len(shown) > 8 else "")


def parse_query(text: str, max_nesting: int = DEFAULT_MAX_NESTING, max_atoms: int = DEFAULT_MAX_ATOMS) -> Query:
    """Parse SPASEQ text.  Raises :class:`QueryError` naming line and column.

    Brackets and GPM bodies nested deeper than ``max_nesting``, and a SEQ naming
    more than ``max_atoms`` GPMs, are refused before the grammar reads the text
    (:func:`~spaseq_plugin.language.limits.check_query_text`).
    """
    if text.startswith(_BYTE_ORDER_MARK):    # (Windows editors write one; it is not text)
        text = text[1:]
    surrogate = _SURROGATE.search(text)
    if surrogate is not None:         # (only from Python: files are read as UTF-8)
        before = text[:surrogate.start()]
        raise QueryError(f"the text holds a lone surrogate {surrogate.group()!r}, which is not a character",
                         before.count("\n") + 1, len(before) - before.rfind("\n"))
    check_query_text(text, QueryLimits(max_nesting=max_nesting, max_atoms=max_atoms))
    try:
        tree = _lark().parse(text)
    except lark.UnexpectedCharacters as e:
        character = text[e.pos_in_stream]
        raise QueryError(f"unexpected character {character!r}{_beyond_bmp(character)}; expected "
                         f"{_expected(e.allowed)}", e.line, e.column) from None
    except lark.UnexpectedToken as e:
        if e.token.type == "$END":
            raise QueryError("the query ends too early; expected " + _expected(e.expected),
                             e.line if e.line != -1 else text.count("\n") + 1,
                             e.column if e.column != -1 else 1) from None
        raise QueryError(f"unexpected {e.token.value!r}{_beyond_bmp(e.token.value)}; expected "
                         f"{_expected(e.expected)}", e.line, e.column) from None
    except lark.UnexpectedEOF as e:
        raise QueryError("the query ends too early; expected " + _expected(e.expected),
                         text.count("\n") + 1, 1) from None
    return _Builder(text).build(tree)


_SURROGATE = re.compile("[\ud800-\udfff]")
_BYTE_ORDER_MARK = "\ufeff"
_BEYOND_BMP = re.compile("[\U00010000-\U0010FFFF]")


def _beyond_bmp(token: str) -> str:
    """Why ``token`` is no name when SPARQL would take it as one."""
    if _BEYOND_BMP.search(token) is None:
        return ""
    return " (names take no character beyond U+FFFF: Oxigraph, which reads the GPMs, does not)"


@lru_cache(maxsize=None)
def _terminal(name: str) -> re.Pattern:
    return re.compile(_lark().get_terminal(name).pattern.to_regexp())


def is_prefix_name(name: str) -> bool:
    """Whether ``name`` can be declared with ``PREFIX name:`` (SPARQL's PN_PREFIX, or empty)."""
    return _terminal("PNAME_NS").fullmatch(name + ":") is not None and _name_error("PNAME_NS", name + ":") is None


# The characters beyond ASCII that SPARQL 1.1 takes in names (the grammar takes any
# up to U+FFFF): PN_CHARS_BASE's, which may start a name or a local part, and those
# PN_CHARS adds, which may not.  Inclusive ranges, in order.
_LETTERS = ((0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x2FF), (0x370, 0x37D), (0x37F, 0x1FFF), (0x200C, 0x200D),
            (0x2070, 0x218F), (0x2C00, 0x2FEF), (0x3001, 0xD7FF), (0xF900, 0xFDCF), (0xFDF0, 0xFFFD))
_LETTER_STARTS = [low for low, _ in _LETTERS]
_MARKS = ((0xB7, 0xB7), (0x300, 0x36F), (0x203F, 0x2040))
# where a name part starts in a token of each kind: after the variable's ? or $,
# and in a prefixed name at its start and after its first ':'
_NAME_STARTS = {"NAME": "a name", "VAR": "a variable name", "PNAME_NS": "a prefix name", "PNAME": "a prefixed name"}


def _is_letter(code: int) -> bool:
    i = bisect_right(_LETTER_STARTS, code) - 1
    return i >= 0 and code <= _LETTERS[i][1]


def _name_error(kind: str, text: str) -> tuple[int, str] | None:
    """The first character beyond ASCII that SPARQL does not take where it is in
    ``text``, a token of ``kind``: (its offset, what is wrong); None: none."""
    if text.isascii():
        return None
    starts = {1} if kind == "VAR" else {0, text.find(":") + 1} if kind.startswith("PNAME") else {0}
    for i, character in enumerate(text):
        code = ord(character)
        if code < 0x80 or _is_letter(code):
            continue
        if i not in starts and any(low <= code <= high for low, high in _MARKS):
            continue
        where = "start" if i in starts else "be in"
        return i, f"{character!r} (U+{code:04X}) cannot {where} {_NAME_STARTS[kind]}, as SPARQL reads names"
    return None


def _checked_name(token: Token) -> Token:
    error = _name_error(token.type, token.value)
    if error is not None:
        raise QueryError(error[1], token.line, token.column + error[0])
    return token


def is_variable_name(name: str) -> bool:
    """Whether ``?name`` is a variable (SPARQL's VARNAME)."""
    return _terminal("VAR").fullmatch("?" + name) is not None


_LOCAL_ESCAPE = re.compile(r"\\(.)")


def local_name(escaped: str) -> str:
    """The IRI text of a prefixed name's local part: its backslash escapes
    (``ex:a\\.b``) stand for the character alone; ``%`` escapes stay as written."""
    return _LOCAL_ESCAPE.sub(r"\1", escaped)


def _pos(node: Tree | Token) -> Pos:
    if isinstance(node, Token):
        return Pos(node.line, node.column)
    return Pos(node.meta.line, node.meta.column)


class _Builder:
    def __init__(self, text: str):
        self.text = text
        self.prefixes: dict[str, str] = {}
        self.base: str | None = None
        self.warnings: list[str] = []

    def build(self, tree: Tree) -> Query:
        prologue, projection, *clauses, where = tree.children
        for decl in prologue.children:
            if decl.data == "prefix_decl":
                self.prefixes[str(decl.children[0])[:-1]] = str(decl.children[1])[1:-1]
            else:
                self.base = str(decl.children[0])[1:-1]
        select, star, distinct, construct, construct_pos = self._projection(projection.children[0])
        window, partition, partition_pos, streams = None, [], None, {}
        for clause in clauses:
            if clause.data == "within":
                if window is not None:
                    raise QueryError("WITHIN is given twice", *self._lc(clause))
                window = self._window(clause)
            elif clause.data == "partition":
                if partition_pos is not None:
                    raise QueryError("PARTITION BY is given twice", *self._lc(clause))
                partition = [str(v)[1:] for v in clause.children]
                partition_pos = _pos(clause)
            else:
                alias, iri = clause.children
                if str(alias) in streams:
                    raise QueryError(f"stream {alias} is declared twice", alias.line, alias.column)
                streams[str(alias)] = StreamDecl(str(alias), self._iri(iri), _pos(alias))
        seq_tree = where.children[0]
        gpms: dict[str, GpmDef] = {}
        for gdef in where.children[1:]:
            gpm = self._gpm(gdef)
            if gpm.name in gpms:
                raise QueryError(f"GPM {gpm.name} is defined twice", gpm.pos.line, gpm.pos.column)
            gpms[gpm.name] = gpm
        return Query(
            prefixes=self.prefixes, base=self.base, select=select, select_star=star,
            distinct=distinct, construct=construct, construct_pos=construct_pos,
            window=window, partition_by=partition, partition_pos=partition_pos,
            streams=streams, sequence=self._sequence(seq_tree), gpms=gpms, text=self.text,
            warnings=self.warnings)

    @staticmethod
    def _lc(node) -> tuple[int, int]:
        p = _pos(node)
        return p.line, p.column

    def _iri(self, token: Token) -> str:
        if token.type == "IRIREF":
            return urljoin(self.base, str(token)[1:-1]) if self.base else str(token)[1:-1]
        prefix, _, local = str(token).partition(":")
        if prefix not in self.prefixes:
            raise QueryError(f"prefix {prefix}: is not declared", token.line, token.column)
        return self.prefixes[prefix] + local_name(local)

    def _projection(self, node: Tree):
        if node.data == "construct":
            braced = node.children[0]
            body, body_pos = self._braced_text(braced)
            return None, False, False, body, body_pos
        distinct = False
        items: list = []
        star = False
        for child in node.children:
            if isinstance(child, Tree) and child.data == "distinct":
                distinct = True
            elif isinstance(child, Token) and child.type == "STAR":
                star = True
            else:
                items.append(self._select_item(child))
        return (None if star else items), star, distinct, None, None

    def _select_item(self, item: Tree) -> str | Aggregate:
        first = item.children[0]
        if isinstance(first, Token):
            return str(first)[1:]
        agg, alias = item.children
        func = str(agg.children[0]).upper()
        distinct = any(isinstance(c, Tree) and c.data == "distinct" for c in agg.children)
        target = next(c for c in agg.children[1:] if isinstance(c, Token))
        separator = " "
        for c in agg.children:
            if isinstance(c, Tree) and c.data == "separator":
                separator = sparql_string(c.children[0])
        if target.type == "STAR" and func != "COUNT":
            raise QueryError(f"{func}(*) is not allowed; only COUNT(*)", target.line, target.column)
        return Aggregate(func, None if target.type == "STAR" else str(target)[1:], distinct,
                         separator, str(alias)[1:], _pos(item))

    def _window(self, node: Tree) -> Window:
        number, unit = node.children[0], node.children[1]
        scale = TIME_UNITS[str(unit).lower()]
        check_window(str(number), scale, _pos(number))
        seconds = as_time(Decimal(str(number)) * scale)
        if seconds <= 0:
            raise QueryError("the WITHIN window must be longer than zero", number.line, number.column)
        if finer_than_a_nanosecond(seconds):
            # (times are exact to the nanosecond: a finer window would round where it ends)
            raise QueryError(f"the WITHIN window is finer than a nanosecond (at most {MAX_FRACTION_DIGITS} "
                             "digits after the point, in seconds)", number.line, number.column)
        return Window(seconds, len(node.children) > 2, _pos(node))

    def _sequence(self, node: Tree) -> Sequence:
        body = node.children[0]
        atoms, ops = [], []
        for child in body.children:
            if isinstance(child, Token):          # SEP
                ops.append(str(child))
            elif child.data == "trailing_sep":
                tok = child.children[0]
                self.warnings.append(
                    f"line {tok.line}, column {tok.column}: trailing {tok} before ')' ignored")
            else:
                atoms.append(self._atom(child))
        return Sequence(atoms, ops, _pos(node))

    def _atom(self, node: Tree):
        if node.data == "gpm_ref":
            name = node.children[0].children[0]
            suffix = str(node.children[1]) if len(node.children) > 1 else ""
            return GpmRef(str(name), suffix, _pos(name))
        names = [c.children[0] for c in node.children]
        cls = Conjunction if node.data == "conjunction" else Disjunction
        return cls([str(n) for n in names], _pos(node), [_pos(n) for n in names])

    def _gpm(self, node: Tree) -> GpmDef:
        name, *streams, braced = node.children
        body, body_pos = self._braced_text(braced)
        return GpmDef(str(name), [str(s) for s in streams], body, _pos(node), body_pos,
                      [_pos(s) for s in streams])

    def _braced_text(self, braced: Tree) -> tuple[str, Pos]:
        """Source text between a braced run's braces, and where it starts."""
        start, end = braced.meta.start_pos, braced.meta.end_pos
        return self.text[start + 1:end - 1], Pos(braced.meta.line, braced.meta.column + 1)


_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|([tbnrf\"'\\]))|\\")
_ECHAR = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'", "\\": "\\"}


def sparql_string(token: Token) -> str:
    """The value of a SPARQL string literal token: quotes removed, escapes
    (ECHAR ``\\t \\n ...`` and UCHAR ``\\uXXXX \\UXXXXXXXX``) replaced; anything else
    after a backslash is an error at its line and column."""
    text = str(token)
    quote = 3 if text[:3] in ('"""', "'''") else 1
    body = text[quote:-quote]

    def replace(match: re.Match) -> str:
        code = match.group(1) or match.group(2)
        if code is not None:
            point = int(code, 16)
            if point <= 0x10FFFF and not 0xD800 <= point <= 0xDFFF:
                return chr(point)
            problem = f"{match.group()} is not a character"
        elif match.group(3) is not None:
            return _ECHAR[match.group(3)]
        elif body[match.end():match.end() + 1] in ("u", "U"):
            letter = body[match.end()]
            problem = f"\\{letter} needs {4 if letter == 'u' else 8} hexadecimal digits"
        else:
            problem = (f"\\{body[match.end():match.end() + 1]} is not a SPARQL string escape "
                       "(those are \\t \\b \\n \\r \\f \\\" \\' \\\\ \\uXXXX \\UXXXXXXXX)")
        before = text[:quote + match.start()]
        line = token.line + before.count("\n")
        column = token.column + len(before) if "\n" not in before else len(before) - before.rfind("\n")
        raise QueryError(problem, line, column)

    return _ESCAPE.sub(replace, body)
