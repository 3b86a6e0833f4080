"""Differential tests: the NFA engine against the brute-force reference.

Hypothesis draws small random streamsets (one or two streams, sometimes
events of a stream the query does not read, up to SPASEQ_DIFF_MAX_EVENTS
(default 7) events over a tiny vocabulary, timestamp ties across streams,
sometimes subjects shared between events) and random valid queries (one to
four atoms; suffixes + ? !; conjunction and disjunction groups; reused GPMs;
joins on ?l ?v ?x; cross-GPM FILTERs; OPTIONAL in GPM bodies; the operators
, ; :; WITHIN spans, TUMBLING windows (with or without a start) or none;
PARTITION BY (?l); SELECT *, projections, aggregates, DISTINCT, CONSTRUCT)
and checks that ``Engine`` and ``reference_evaluate`` give the same results
as multisets of (time, bindings) (CONSTRUCT: (time, triples) with blank
nodes normalised).

Profiles (tests/conftest.py): ``ci`` by default, ``thorough`` with
SPASEQ_HYPOTHESIS_PROFILE=thorough.  The number of examples each property
ran is printed at the end of the module and kept in pytest's cache under
``spaseq/differential``.

The tests at the end are minimal disagreements this found once: window
arithmetic done in binary floating point with non-integer timestamps or
window sizes (the property tests use integer timestamps).  Times are exact
now; they stay as regression tests.
"""

from __future__ import annotations

import collections
import os
import re
from dataclasses import dataclass

import pyoxigraph as ox
import pytest
from hypothesis import assume, given, note
from hypothesis import strategies as st

from spaseq_plugin import Engine, QueryError, compile_query
from spaseq_plugin.events import Event, as_time
from spaseq_plugin.reference import reference_evaluate

EX = "http://example/"
STREAMS = ("http://example.org/s1", "http://example.org/s2", "http://example.org/other")
KIND, LOC, VAL = (ox.NamedNode(EX + p) for p in ("kind", "loc", "val"))
XSD = "http://www.w3.org/2001/XMLSchema#"

RUN_COUNTS: collections.Counter = collections.Counter()
MAX_EVENTS = int(os.environ.get("SPASEQ_DIFF_MAX_EVENTS", "7"))     # larger: slower, deeper


# -- events ------------------------------------------------------------------

@dataclass(frozen=True)
class Ev:
    """A generated event: ``:eN :kind "k" ; :loc :L ; :val v`` on a stream.

    ``subject`` is None for a fresh subject ``:eN``, else ``:pK`` (shared
    with other events, so GPMs can join on the subject across events)."""
    stream: int
    time: int
    kind: str
    loc: str | None
    val: int | tuple[str, str] | None      # an xsd:integer, or (lexical form, XSD datatype)
    loc2: str | None = None
    subject: int | None = None

    def __repr__(self) -> str:
        parts = [f"S{self.stream + 1}@{self.time}", self.kind]
        if self.subject is not None:
            parts.insert(1, f"p{self.subject}")
        if self.loc:
            parts.append(self.loc + (f"+{self.loc2}" if self.loc2 else ""))
        if self.val is not None:
            parts.append(f"v{self.val}")
        return "Ev(" + " ".join(parts) + ")"


def to_events(evs: list[Ev]) -> list[Event]:
    out = []
    for n, ev in enumerate(sorted(evs, key=lambda e: (e.time, e.stream)), 1):
        s = ox.NamedNode(f"{EX}e{n}" if ev.subject is None else f"{EX}p{ev.subject}")
        triples = [ox.Triple(s, KIND, ox.Literal(ev.kind))]
        for loc in (ev.loc, ev.loc2):
            if loc:
                triples.append(ox.Triple(s, LOC, ox.NamedNode(EX + loc)))
        if isinstance(ev.val, int):
            triples.append(ox.Triple(s, VAL, ox.Literal(str(ev.val), datatype=ox.NamedNode(XSD + "integer"))))
        elif ev.val is not None:
            lexical, datatype = ev.val
            triples.append(ox.Triple(s, VAL, ox.Literal(lexical, datatype=ox.NamedNode(XSD + datatype))))
        out.append(Event(STREAMS[ev.stream], ev.time, tuple(triples), ox.NamedNode(f"{EX}g{n}")))
    return out


@st.composite
def streamsets(draw, n_streams: int, shared_subjects: bool = False, foreign: bool = False):
    """Events of the query's streams (and of one it does not read, if ``foreign``)."""
    slots = draw(st.lists(st.tuples(st.integers(0, n_streams - (0 if foreign else 1)), st.integers(1, MAX_EVENTS + 2)),
                          min_size=2, max_size=MAX_EVENTS, unique=True))
    evs = []
    for stream, time in slots:
        loc = draw(st.sampled_from(["L1", "L1", "L1", "L2", "L2", "L2", None]))
        loc2 = draw(st.sampled_from([None] * 9 + ["L2" if loc == "L1" else "L1"])) if loc else None
        subject = draw(st.sampled_from([1, 2, None])) if shared_subjects else None
        evs.append(Ev(stream, time, draw(st.sampled_from("aabbc")), loc,
                      draw(st.sampled_from([2, 1, 3, 4, None])), loc2, subject))
    return sorted(evs, key=lambda e: (e.time, e.stream))


# -- queries -----------------------------------------------------------------

@dataclass
class G:
    """A generated GPM: index i, its name, streams and body parts."""
    i: int
    streams: tuple[int, ...]
    kind: str | None           # a literal; None: ?k_i; "?k": shared
    subject: str               # "own" (?e_i) or "shared" (?x)
    loc: str | None            # "shared" (?l), "own" (?l_i), "const" (:L1), None
    val: str | None            # "own" (?v_i), "shared" (?v), "opt" (OPTIONAL ?v_i), None
    filt: tuple | None = None  # ("gt", ?var): FILTER(val > ?var); ("ge", n): FILTER(val >= n)

    @property
    def name(self) -> str:
        return "ABCDEFGHIJKL"[self.i]

    @property
    def s(self) -> str:
        return f"?e{self.i}" if self.subject == "own" else "?x"

    @property
    def v(self) -> str | None:
        return {"own": f"?v{self.i}", "opt": f"?v{self.i}", "shared": "?v"}.get(self.val)

    def variables(self) -> list[str]:
        out = [self.s]
        if self.loc == "shared":
            out.append("?l")
        elif self.loc == "own":
            out.append(f"?l{self.i}")
        if self.v:
            out.append(self.v)
        return out

    def body(self) -> str:
        s = self.s
        kind = "?k" if self.kind == "?k" else f'"{self.kind}"' if self.kind else f"?k{self.i}"
        parts = [f"{s} :kind {kind} ."]
        if self.loc == "shared":
            parts.append(f"{s} :loc ?l .")
        elif self.loc == "own":
            parts.append(f"{s} :loc ?l{self.i} .")
        elif self.loc == "const":
            parts.append(f"{s} :loc :L1 .")
        if self.val == "opt":
            parts.append(f"OPTIONAL {{ {s} :val {self.v} }}")
        elif self.val:
            parts.append(f"{s} :val {self.v} .")
        if self.filt and self.filt[0] == "gt":
            parts.append(f"FILTER({self.v} > {self.filt[1]})")
        elif self.filt:
            parts.append(f"FILTER({self.v} >= {self.filt[1]})")
        return " ".join(parts)

    def define(self) -> str:
        on = ", ".join(f"S{s + 1}" for s in self.streams)
        return f"  DEFINE GPM {self.name} ON {on} {{ {self.body()} }}"


@dataclass
class Scenario:
    query: str
    events: list[Ev]
    start: int | None

    def __repr__(self) -> str:
        return f"Scenario(start={self.start}, events={self.events!r},\nquery=\n{self.query})"


@st.composite
def scenarios(draw, force: str | None = None):
    n_streams = draw(st.sampled_from([1, 2]))
    partition = force == "partition" or draw(st.integers(0, 5)) == 0
    shared_subjects = draw(st.integers(0, 4)) == 4
    n_atoms = draw(st.sampled_from([1, 2, 2, 3, 3, 4]))
    gpms: list[G] = []

    def new_gpm() -> G:
        i = len(gpms)
        streams = draw(st.sampled_from([(0,), (1,), (0, 1)][: 1 if n_streams == 1 else 3]))
        kind = draw(st.sampled_from(["a", "b", None, None, "?k"]))
        subject = "shared" if shared_subjects and draw(st.booleans()) else "own"
        loc = "shared" if partition else draw(st.sampled_from(["shared", "shared", "own", "const", None]))
        val = draw(st.sampled_from([None, None, "own", "shared", "opt"]))
        g = G(i, streams, kind, subject, loc, val)
        if val and draw(st.integers(0, 3)) == 3:
            others = [o.v for o in gpms if o.v and o.v != g.v]
            if others and draw(st.booleans()):
                g.filt = ("gt", draw(st.sampled_from(others)))
            else:
                g.filt = ("ge", draw(st.integers(2, 3)))
        gpms.append(g)
        return g

    atoms: list[str] = []
    kleene: list[G] = []
    for n in range(n_atoms):
        shape = draw(st.sampled_from(["single"] * 6 + ["and", "or", "reuse"]))
        if shape in ("single", "reuse"):
            g = draw(st.sampled_from(gpms)) if shape == "reuse" and gpms else new_gpm()
            suffix = draw(st.sampled_from(["", "", "+", "?"] + (["!"] if n else [])))
            if suffix == "+":
                kleene.append(g)
            atoms.append(g.name + suffix)
        else:
            names = [new_gpm().name for _ in range(draw(st.sampled_from([2, 2, 2, 3])))]
            atoms.append("(" + (" & " if shape == "and" else " | ").join(names) + ")")
    if force == "kleene" and not kleene:
        g = new_gpm()
        kleene.append(g)
        atoms.insert(draw(st.integers(0, len(atoms))), g.name + "+")
    if force == "negation" and not any(a[-1] in "!?" for a in atoms):
        for _ in range(draw(st.sampled_from([1, 1, 2]))):
            g = new_gpm()
            atoms.insert(draw(st.integers(1, len(atoms))), g.name + draw(st.sampled_from("!?")))
    ops = [draw(st.sampled_from([",", ";", ":"])) for _ in atoms[1:]]
    seq = atoms[0] + "".join(f" {op} {a}" for op, a in zip(ops, atoms[1:]))

    window_kind = draw(st.sampled_from(["span", "span", "tumbling", "span", "tumbling", "none"]))
    if force == "tumbling":
        window_kind = "tumbling"
    if force == "negation" and window_kind == "none":
        window_kind = "span"
    within = ""
    if window_kind != "none":
        size = draw(st.sampled_from([4, 6, 2, 9, 3, 1] if window_kind == "span" else [5, 3, 7, 2]))
        within = f"WITHIN {size} SECONDS" + (" TUMBLING" if window_kind == "tumbling" else "")
    start = draw(st.sampled_from([None, None, 0, 2])) if window_kind == "tumbling" else None

    proj = draw(st.sampled_from(["star", "vars", "vars", "distinct", "agg", "construct"]))
    bindable = sorted({v for g in gpms for v in g.variables()})
    if proj == "star":
        head = "SELECT *"
    elif proj in ("vars", "distinct"):
        chosen = draw(st.lists(st.sampled_from(bindable), min_size=1, max_size=3, unique=True))
        head = "SELECT " + ("DISTINCT " if proj == "distinct" else "") + " ".join(chosen)
    elif proj == "agg":
        target = kleene[0] if kleene and draw(st.booleans()) else draw(st.sampled_from(gpms))
        agg = draw(st.sampled_from(["COUNT({s})", "COUNT(*)", "SUM({v})", "MAX({v})",
                                    "GROUP_CONCAT({s})", "COUNT(DISTINCT {s})"]))
        agg = agg.format(s=target.s, v=target.v or "?nothing")
        head = f"SELECT {gpms[0].s} ({agg} AS ?agg)"
    else:
        a, b = draw(st.sampled_from(gpms)), draw(st.sampled_from(gpms))
        head = f"CONSTRUCT {{ {a.s} :before {b.s} . _:m :at ?l . _:m :first {gpms[0].s} }}"

    lines = ["PREFIX : <http://example/>", head]
    if within:
        lines.append(within)
    if partition:
        lines.append("PARTITION BY (?l)")
    lines += [f"FROM STREAM S{s + 1} <{STREAMS[s]}>" for s in range(n_streams)]
    lines += ["WHERE {", f"  SEQ ({seq})"] + [g.define() for g in gpms] + ["}"]
    query = "\n".join(lines)
    events = draw(streamsets(n_streams, shared_subjects, foreign=draw(st.integers(0, 7)) == 7))
    return Scenario(query, events, start)


# -- comparison ----------------------------------------------------------------

_BNODE = re.compile(r"_:[A-Za-z0-9_\-.]+")


def result_key(result):
    if result.triples is not None:
        return (result.time, "construct",
                tuple(sorted(_BNODE.sub("_:b", str(t)) for t in result.triples)))
    return (result.time, tuple(sorted((k, str(v)) for k, v in result.bindings.items())))


def compiled_scenario(scenario: Scenario):
    """The scenario's query compiled (hypothesis discards a scenario whose query does not)."""
    note(repr(scenario))
    try:
        return compile_query(scenario.query)
    except QueryError:
        assume(False)


def compare(scenario: Scenario, label: str) -> None:
    compiled = compiled_scenario(scenario)
    events = to_events(scenario.events)
    expected = collections.Counter(
        result_key(r) for r in reference_evaluate(compiled, events, start=scenario.start))
    got = collections.Counter(
        result_key(r) for r in Engine(compiled, start=scenario.start).run(events))
    RUN_COUNTS[label] += 1
    RUN_COUNTS[label + " (non-empty)"] += bool(expected)
    missing, extra = expected - got, got - expected
    assert not missing and not extra, (
        f"engine differs from the reference\n  missing from the engine: {sorted(missing.elements())}"
        f"\n  extra in the engine: {sorted(extra.elements())}")


@pytest.fixture(scope="module", autouse=True)
def _report_counts(pytestconfig):
    yield
    if RUN_COUNTS:
        line = "differential examples run: " + ", ".join(f"{k}={v}" for k, v in sorted(RUN_COUNTS.items()))
        reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
        capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
        if reporter is not None and capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line("\n" + line)
        cache = getattr(pytestconfig, "cache", None)
        if cache is not None:
            cache.set("spaseq/differential", dict(RUN_COUNTS))


@given(scenarios())
def test_engine_equals_reference(scenario):
    compare(scenario, "general")


@given(scenarios(force="kleene"))
def test_engine_equals_reference_kleene(scenario):
    compare(scenario, "kleene")


@given(scenarios(force="negation"))
def test_engine_equals_reference_negation_optional(scenario):
    compare(scenario, "negation")


@given(scenarios(force="partition"))
def test_engine_equals_reference_partition(scenario):
    compare(scenario, "partition")


@given(scenarios(force="tumbling"))
def test_engine_equals_reference_tumbling(scenario):
    compare(scenario, "tumbling")


# Values of mixed numeric types (ties across types, a float that rounds), a
# NaN and a string: the runtime's sorted run index must agree with FILTER.
MIXED_VALUES = [1, 2, 3, 2, ("2.0", "decimal"), ("2.5", "decimal"), ("2.5E0", "double"), ("0.1", "decimal"),
                ("0.1", "double"), ("NaN", "double"), ("x", "string"), ("-1", "integer")]


@st.composite
def indexed_scenarios(draw):
    """Many runs waiting on the same join values (one or two locations) with
    stateful comparisons between GPMs: what the runtime indexes runs by."""
    n_atoms = draw(st.sampled_from([2, 2, 3]))
    defines, atoms = [], []
    for i in range(n_atoms):
        name = "ABC"[i]
        body = f'?e{i} :kind "{draw(st.sampled_from("ab"))}" ; :loc ?l ; :val ?v{i} .'
        if i and draw(st.integers(0, 4)):
            other = f"?v{draw(st.integers(0, i - 1))}"
            op = draw(st.sampled_from(["<", "<=", ">", ">="]))
            mine = f"?v{i}"
            left, right = (mine, other) if draw(st.booleans()) else (other, mine)
            extra = draw(st.sampled_from(["", "", f" && ?v{i} != 3"]))
            body += f" FILTER({left} {op} {right}{extra})"
        defines.append(f"  DEFINE GPM {name} ON S1 {{ {body} }}")
        atoms.append(name + (draw(st.sampled_from(["", "", "+"])) if i else ""))
    ops = [draw(st.sampled_from([",", ";", ";", ":"])) for _ in atoms[1:]]
    seq = atoms[0] + "".join(f" {op} {a}" for op, a in zip(ops, atoms[1:]))
    within = draw(st.sampled_from(["", "WITHIN 5 SECONDS", "WITHIN 3 SECONDS"]))
    query = "\n".join(["PREFIX : <http://example/>", "SELECT *", within,
                        f"FROM STREAM S1 <{STREAMS[0]}>", "WHERE {", f"  SEQ ({seq})", *defines, "}"])
    times = draw(st.lists(st.integers(1, MAX_EVENTS + 5), min_size=2, max_size=MAX_EVENTS + 3, unique=True))
    events = [Ev(0, t, draw(st.sampled_from("aab")), draw(st.sampled_from(["L1", "L1", "L2"])),
                 draw(st.sampled_from(MIXED_VALUES))) for t in sorted(times)]
    return Scenario(query, events, None)


@given(indexed_scenarios())
def test_engine_equals_reference_indexed_runs(scenario):
    compare(scenario, "indexed runs")


# -- disagreements found: the engine breaks the settled rules ------------------------

def _kind_event(time, name: str, kind: str, is_datetime: bool = False) -> Event:
    s = ox.NamedNode(EX + name)
    return Event(STREAMS[0], as_time(time), (ox.Triple(s, KIND, ox.Literal(kind)),), is_datetime=is_datetime)


def _a_then_b(within: str) -> str:
    return ("PREFIX : <http://example/>\nSELECT ?a ?b WITHIN " + within +
            f"\nFROM STREAM S1 <{STREAMS[0]}>\nWHERE {{ SEQ (A ; B)\n"
            '  DEFINE GPM A ON S1 { ?a :kind "a" . }\n'
            '  DEFINE GPM B ON S1 { ?b :kind "b" . } }')


def _both(query: str, events, start=None):
    compiled = compile_query(query)
    want = collections.Counter(result_key(r) for r in reference_evaluate(compiled, events, start=start))
    got = collections.Counter(result_key(r) for r in Engine(compiled, start=start).run(events))
    return want, got


def test_span_window_edge_with_decimal_timestamps():
    # SEQ(A ; B) WITHIN 300 MILLISECONDS, a@0.1 b@0.4: τ_last − τ_first = 0.3 ≤ ω
    events = [_kind_event(0.1, "a1", "a"), _kind_event(0.4, "b1", "b")]
    want, got = _both(_a_then_b("300 MILLISECONDS"), events)
    assert sum(want.values()) == 1
    assert got == want


def test_span_window_edge_with_datetime_milliseconds():
    from spaseq_plugin.events import datetime_seconds
    t1 = datetime_seconds("2024-01-01T00:00:00.100Z")
    t2 = datetime_seconds("2024-01-01T00:00:00.400Z")
    events = [_kind_event(t1, "a1", "a", True), _kind_event(t2, "b1", "b", True)]
    want, got = _both(_a_then_b("300 MILLISECONDS"), events)
    assert sum(want.values()) == 1
    assert got == want


def test_tumbling_boundary_with_decimal_timestamps():
    # WITHIN 0.1 SECONDS TUMBLING, t0 = 0: a@0.3 and b@0.35 are both in [0.3, 0.4)
    events = [_kind_event(0, "x", "x"), _kind_event(0.3, "a1", "a"), _kind_event(0.35, "b1", "b")]
    want, got = _both(_a_then_b("0.1 SECONDS TUMBLING"), events)
    assert sum(want.values()) == 1
    assert got == want


def test_millisecond_window_size_is_inexact():
    # WITHIN 700 MILLISECONDS TUMBLING, t0 = 0: a@0.7 and b@1.05 are both in [0.7, 1.4)
    events = [_kind_event(0, "x", "x"), _kind_event(0.7, "a1", "a"), _kind_event(1.05, "b1", "b")]
    want, got = _both(_a_then_b("700 MILLISECONDS TUMBLING"), events)
    assert sum(want.values()) == 1
    assert got == want


def test_trailing_negation_deadline_with_decimal_timestamps():
    # SEQ(A ; N!) WITHIN 0.1 SECONDS, a@0.7 n@0.8: n at the deadline 0.8 kills the match
    query = ("PREFIX : <http://example/>\nSELECT ?a WITHIN 0.1 SECONDS\n"
             f"FROM STREAM S1 <{STREAMS[0]}>\nWHERE {{ SEQ (A ; N)\n".replace("N)", "N!)") +
             '  DEFINE GPM A ON S1 { ?a :kind "a" . }\n'
             '  DEFINE GPM N ON S1 { ?n :kind "n" . } }')
    events = [_kind_event(0.7, "a1", "a"), _kind_event(0.8, "n1", "n")]
    want, got = _both(query, events)
    assert sum(want.values()) == 0
    assert got == want
