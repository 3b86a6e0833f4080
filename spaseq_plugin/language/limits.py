"""What a query may do, and how big it may be: checked before any parser sees the text.

SPARQL parsers recurse: pyoxigraph's overflows the native stack (the
process dies with SIGSEGV) at about 2,200 nested braces, 850 nested
``FILTER EXISTS``, 950 nested function calls, and at 2,600 to 6,900 for
long chains of ``OPTIONAL``, ``BIND``, ``MINUS``, ``UNION`` or ``+``,
because a chain ``a + b + c`` is a tree as deep as it is long.  rdflib's
parser raises RecursionError much earlier, and takes seconds on thousands
of ``&&``.  So the nesting of every text is measured here first, by a
scanner that knows SPARQL's strings, IRIs and comments and nothing else:

* the whole query: its brackets ``{ ( [`` (before the SPASEQ grammar reads it);
* each GPM body and CONSTRUCT template: its brackets, plus, in each
  bracket, the operators and keywords chained there (``&& || + - * / |``,
  the ``.`` between triple patterns, ``OPTIONAL MINUS UNION BIND FILTER
  GRAPH SERVICE VALUES``, and a group ``{ }`` after another one), each one
  level, since parsers build a chain of n of them as n nested nodes (rdflib
  raised RecursionError at about 100 triple patterns in a row, and the GPM
  went to Oxigraph, whose planning of 3,000 took ten minutes an event).

A text deeper than :attr:`QueryLimits.max_nesting` is refused with a
:class:`QueryError` at the line and column where the limit is passed.
The same scan finds ``SERVICE``, which sends requests to other endpoints:
it is refused unless :attr:`QueryLimits.allow_service` is set
(``docs/limits.md`` lists every limit).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from decimal import Decimal

from ..errors import QueryError, UsageError
from ..waits import wait_seconds
from .syntax import Pos

DEFAULT_MAX_NESTING = 100
# Above this, some shapes come within a factor of two of pyoxigraph's stack overflow.
MAX_NESTING_CEILING = 500
DEFAULT_SERVICE_TIMEOUT = 30.0
# GPMs a SEQ expression names (each operand of a conjunction or disjunction counts): compiling
# takes about 2 ms and 10 KB for each GPM, most of it rdflib reading the GPM's body.
DEFAULT_MAX_ATOMS = 10_000
# Optional atoms in a row: each can be skipped, so the automaton has an edge from every
# one to every later one, and each edge names the atoms it skips (cubic: 500 took 700 MB).
MAX_OPTIONAL_RUN = 32
# The longest WITHIN window: about 31,700 years, beyond any stream's span; longer ones
# only risk overflows when windows are added to timestamps or shown as floats.
MAX_WINDOW_SECONDS = 10 ** 12
# The longest query file read: a query is text a person writes (/dev/zero filled the memory).
MAX_QUERY_BYTES = 16 << 20


@dataclass(frozen=True)
class QueryLimits:
    """What a query may do when it is compiled and run.

    ``max_nesting``: the deepest nesting a text may have (see the module
    docstring), 1 to :data:`MAX_NESTING_CEILING`.  ``allow_service``: GPMs
    may use ``SERVICE`` (requests to other SPARQL endpoints), each
    evaluation of such a GPM then failing after ``service_timeout`` seconds.
    ``max_atoms``: the most GPMs the SEQ expression may name (each operand of
    a conjunction or disjunction counts), checked before any GPM is read.
    """

    max_nesting: int = DEFAULT_MAX_NESTING
    allow_service: bool = False
    service_timeout: float = DEFAULT_SERVICE_TIMEOUT
    max_atoms: int = DEFAULT_MAX_ATOMS

    def __post_init__(self):
        if isinstance(self.max_nesting, bool) or not isinstance(self.max_nesting, int) \
                or not 1 <= self.max_nesting <= MAX_NESTING_CEILING:
            raise ValueError(f"max_nesting must be an integer from 1 to {MAX_NESTING_CEILING}, "
                             f"not {self.max_nesting!r}")
        if isinstance(self.max_atoms, bool) or not isinstance(self.max_atoms, int) or self.max_atoms < 1:
            raise ValueError(f"max_atoms must be an integer of 1 or more, not {self.max_atoms!r}")
        timeout = self.service_timeout
        try:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise ValueError("must be a number of seconds")
            wait_seconds(timeout)
        except ValueError as e:
            raise ValueError(f"service_timeout {e}, not {timeout!r}") from None


_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>\"\"\"(?:[^"\\]|\\.|"(?!""))*\"\"\" | '''(?:[^'\\]|\\.|'(?!''))*'''
              | "(?:[^"\\\n]|\\.)*" | '(?:[^'\\\n]|\\.)*')
  | (?P<iri><[^<>"{}|^`\\\x00-\x20]*>)
  | (?P<var>[?$][\w\u00B7]*)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<word>[^\W\d][\w.\-\u00B7]*(?::(?:[\w.\-:%\u00B7]|\\[_~.\-!$&'()*+,;=/?#@%])*)?
             |:(?:[\w.\-:%\u00B7]|\\[_~.\-!$&'()*+,;=/?#@%])*)
  | (?P<chain>&&|\|\||[-+*/|.])
  | (?P<open>[{(\[])
  | (?P<close>[})\]])
  | (?P<other>.)
""", re.X | re.S)

_CHAIN_KEYWORDS = frozenset(("optional", "minus", "union", "bind", "filter", "graph", "service", "values"))


def check_query_text(text: str, limits: QueryLimits) -> None:
    """What can be refused in a query's text before the SPASEQ grammar reads it, which
    takes seconds a megabyte: its brackets (:func:`check_nesting`, without chains),
    each GPM body's nesting with its chains (as :func:`~.gpm.analyse_gpm` measures
    it), and more than ``max_atoms`` names in the SEQ, or GPMs defined (each one
    defined must be named): every name in the SEQ's brackets is a GPM's, each
    operand of a conjunction or disjunction counting."""
    check_nesting(text, limits.max_nesting, chains=False)
    lines = _Lines(text)
    depth = 0
    seq = None          # "seq": after the keyword; then the depth of its "(", then "done"
    named = defined = define_at = 0
    gpm = None          # "define", "gpm" after the keywords, then the GPM's name till its "{"
    body = None         # (offset, depth) of the GPM body being skipped
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        if kind == "space" or kind == "comment":
            continue
        if body is not None:            # in a GPM body: its end, then its nesting with chains
            if kind == "open":
                depth += 1
            elif kind == "close":
                depth -= 1
                if depth < body[1]:
                    check_nesting(text[body[0]:match.start()], limits.max_nesting, lines.at(body[0]),
                                  what=f"GPM {gpm}")
                    body = gpm = None
            continue
        token = match.group()
        word = token.lower() if kind == "word" else None
        if kind == "open":
            depth += 1
            if token == "(" and seq == "seq":
                seq = depth
            elif token == "{" and gpm not in (None, "define", "gpm"):
                body = (match.end(), depth)
                continue
        elif kind == "close":
            depth -= 1
            if type(seq) is int and depth < seq:
                seq = "done"
        elif type(seq) is int and word is not None:
            # (a name cannot hold ':', a separator: "A:B" is two names, ":" none)
            for part in _NAME_PART.finditer(token):
                named += 1
                if named > limits.max_atoms:
                    at = lines.at(match.start() + part.start())
                    raise QueryError(f"the SEQ expression names more than {limits.max_atoms:,} GPMs (each "
                                     "operand of a conjunction or disjunction counts; see --max-atoms)",
                                     at.line, at.column)
        if seq == "seq" and kind != "open":
            seq = "seq" if word == "seq" else None      # ("seq" and no "(": a name)
        elif seq is None and word == "seq":
            seq = "seq"
        if gpm == "define":
            gpm = "gpm" if word == "gpm" else None
            if gpm is not None:
                defined += 1
                if defined > limits.max_atoms:
                    at = lines.at(define_at)
                    raise QueryError(f"the query defines more than {limits.max_atoms:,} GPMs, and its SEQ "
                                     "may name at most as many (see --max-atoms)", at.line, at.column)
        elif gpm == "gpm":
            gpm = token if word is not None else None
        elif word == "define" and gpm is None:
            gpm, define_at = "define", match.start()


class _Lines:
    """Line and column of offsets of one text, asked in increasing order: counted from
    the last one asked, so that a scan's positions cost one pass over the text."""

    def __init__(self, text: str):
        self.text, self.offset, self.line, self.line_start = text, 0, 1, 0

    def at(self, offset: int) -> Pos:
        newlines = self.text.count("\n", self.offset, offset)
        if newlines:
            self.line += newlines
            self.line_start = self.text.rfind("\n", self.offset, offset) + 1
        self.offset = offset
        return Pos(self.line, offset - self.line_start + 1)


def check_nesting(text: str, limit: int, origin: Pos = Pos(1, 1), *, chains: bool = True,
                  what: str = "the query") -> Pos | None:
    """Raise QueryError where ``text`` nests deeper than ``limit``; else return where
    its first ``SERVICE`` keyword is (or None).

    ``origin`` is where ``text`` starts in the query (for line and column).
    With ``chains`` (a SPARQL body: the text inside a pair of braces, which
    count as its first level), chained operators count too; without (the
    SPASEQ skeleton, whose grammar does not recurse on its lists), brackets
    only.
    """
    chained: list[int] = [0] if chains else []     # per open bracket: operators chained in it
    groups: list[int] = [0] if chains else []      # per open bracket: groups { } opened in it
    depth = len(chained)         # open brackets + the operators chained in them
    service: Pos | None = None
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        if kind in _IGNORED:
            continue
        if kind == "close":
            if chained:
                depth -= 1 + chained.pop()
                groups.pop()
            continue
        token = match.group()
        if kind == "word":
            word = token.lower()
            if word == "service" and service is None:
                service = _position(text, match.start(), origin)
            chain = word in _CHAIN_KEYWORDS
        elif kind == "open":
            chain = False
            if token == "{" and groups:
                groups[-1] += 1
                chain = groups[-1] > 1           # a group after a group: a join
        else:                                    # an operator
            chain = True
        if chain and chains and chained:
            chained[-1] += 1
            depth += 1
        if kind == "open":
            chained.append(0)
            groups.append(0)
            depth += 1
        if depth > limit:
            at = _position(text, match.start(), origin)
            raise QueryError(f"{what} nests too deeply: {depth} levels here, more than the limit of "
                             f"{limit} (each bracket is a level, and so is each operator, keyword or "
                             "'.' between triple patterns chained with others inside a bracket; see "
                             "--max-nesting)",
                             at.line, at.column)
    return service


_NAME_PART = re.compile("[^:]+")
_IGNORED = frozenset(("space", "comment", "string", "iri", "var", "number", "other"))


def _position(text: str, offset: int, origin: Pos) -> Pos:
    before = text[:offset]
    newlines = before.count("\n")
    if newlines:
        return Pos(origin.line + newlines, offset - before.rfind("\n"))
    return Pos(origin.line, origin.column + offset)


def check_window(number: str, scale, pos: Pos) -> None:
    """Refuse a WITHIN length (``number`` in units of ``scale`` seconds) beyond
    :data:`MAX_WINDOW_SECONDS`, before any arithmetic on it."""
    if Decimal(number) > Decimal(MAX_WINDOW_SECONDS) / Decimal(scale):
        raise QueryError(f"the WITHIN window is too long: at most {MAX_WINDOW_SECONDS:,} seconds "
                         "(about 31,700 years)", pos.line, pos.column)


def read_query_file(path: str) -> str:
    """A query's text from the file ``path`` (``-``: standard input), at most
    MAX_QUERY_BYTES: UsageError when it cannot be read or is longer, QueryError at
    the line and column of a byte that is not UTF-8."""
    try:
        if path == "-":
            stream = getattr(sys.stdin, "buffer", sys.stdin)      # (or a text stream put in its place)
            data = stream.read(MAX_QUERY_BYTES + 1)
        else:
            with open(path, "rb") as f:
                data = f.read(MAX_QUERY_BYTES + 1)
    except OSError as e:
        raise UsageError(f"cannot read query {path}: {e.strerror or e}") from None
    if len(data) > MAX_QUERY_BYTES:
        raise UsageError(f"cannot read query {path}: longer than {MAX_QUERY_BYTES >> 20} MiB")
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        before = data[:e.start].decode("utf-8")
        raise QueryError(f"the query is not UTF-8 text (byte {data[e.start]:#04x})",
                         before.count("\n") + 1, len(before) - before.rfind("\n")) from None
