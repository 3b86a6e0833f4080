"""Hostile queries: deep nesting, SERVICE, huge windows, string escapes, long
FILTERs, hostile KB endpoints and bad Engine.push arguments (docs/limits.md).

Each case is run as a user would: the spaseq command in a subprocess where a
crash would kill the process (a signal is a negative return code), the
Python API elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyoxigraph as ox
import pytest
import rdflib

from spaseq_plugin import Engine, KnowledgeBase, LimitError, QueryError, QueryLimits, SpaseqError, compile_query
from spaseq_plugin.language.limits import DEFAULT_MAX_NESTING, MAX_NESTING_CEILING

from helpers import EX, event, rows

SPASEQ = [sys.executable, "-m", "spaseq_plugin"]
TESTS = os.path.dirname(os.path.abspath(__file__))
POSITION = re.compile(r"line \d+, column \d+: ")

QUERY = """PREFIX : <http://example/>
SELECT {select}
WITHIN {within}
FROM STREAM S <http://example.org/s>
WHERE {{ SEQ (A ; B+)
  DEFINE GPM A ON S {{ ?a :kind "a" }}
  DEFINE GPM B ON S {{ ?b :kind "b" ; :label ?l .
    {body}
  }}
}}
"""

STREAM = """@prefix : <http://example/> .
:e1 { :a1 :kind "a" . }
:e2 { :b1 :kind "b" ; :label "x" . }
:e3 { :b2 :kind "b" ; :label "y" . }
"""
TIMES = {":e1": 1, ":e2": 2, ":e3": 3}


def query(body: str = "", select: str = "?a ?b", within: str = "1 MINUTE") -> str:
    return QUERY.format(body=body, select=select, within=within)


def events():
    return [event("s", 1, ':a1 :kind "a" .'), event("s", 2, ':b1 :kind "b" ; :label "x" .'),
            event("s", 3, ':b2 :kind "b" ; :label "y" .')]


def spaseq(*args, cwd=None, timeout=120):
    return subprocess.run(SPASEQ + list(args), capture_output=True, text=True, cwd=cwd, timeout=timeout)


def stream_file(tmp_path):
    lines = [STREAM.splitlines()[0]]
    lines.append("@prefix prov: <http://www.w3.org/ns/prov#> .")
    for name, t in TIMES.items():
        lines.append(f"{name} prov:generatedAtTime {t} .")
    lines += STREAM.splitlines()[1:]
    (tmp_path / "s.trig").write_text("\n".join(lines) + "\n")
    return "S=s.trig"


def assert_query_error(p, pattern: str):
    """Exit 2 with one line naming line and column: no traceback, no signal."""
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spaseq: query error: "), p.stderr[-2000:]
    assert POSITION.search(lines[0]) and re.search(pattern, lines[0]), lines[0]


# -- deep nesting ---------------------------------------------------------------------------

# Shapes that overflowed pyoxigraph's stack (SIGSEGV) at these sizes, each inside a GPM body.
CRASHING = {
    "braces": lambda n: "{ " * n + "?x :p ?y" + " }" * n,                                   # ~2,200
    "optional": lambda n: "?x :p ?y " + "OPTIONAL { ?x :p ?y " * n + "}" * n,              # ~2,700
    "filter parens": lambda n: "FILTER(" + "(" * n + "?l" + ")" * n + ")",                  # ~4,700
    "union": lambda n: "{ ?x :p ?y }" + " UNION { ?x :p ?y }" * n,                          # ~6,600
    "plus": lambda n: "FILTER(?l = 1" + " + 1" * n + ")",                                   # ~6,900
    "and": lambda n: "FILTER(?l = 1" + " && ?l = 1" * n + ")",                              # 10 s in rdflib
    "exists": lambda n: "FILTER EXISTS { " * n + "?x :p ?y" + " }" * n,                     # ~850
    "calls": lambda n: "FILTER(" + "STR(" * n + "?l" + ")" * n + ")",                       # ~950
    "bind": lambda n: "".join(f" BIND(1 AS ?v{i})" for i in range(n)),                      # ~2,600
}


@pytest.mark.parametrize("shape", ["braces", "optional", "union", "plus"])
def test_deep_nesting_is_refused_by_explain_and_run(shape, tmp_path):
    (tmp_path / "q.rq").write_text(query(CRASHING[shape](9000)))
    assert_query_error(spaseq("explain", "q.rq", cwd=tmp_path), "nests too deeply.*limit of 100")
    assert_query_error(spaseq("run", "q.rq", "--stream", stream_file(tmp_path), cwd=tmp_path),
                       "nests too deeply")


@pytest.mark.parametrize("shape", sorted(CRASHING))
def test_deep_nesting_is_refused_by_the_python_api(shape):
    text = query(CRASHING[shape](9000))
    with pytest.raises(QueryError, match="nests too deeply") as error:
        Engine(text)
    # the position is where the limit is passed, inside the GPM body
    assert error.value.line == 8 and error.value.column > 4


def test_nesting_position_and_flag(tmp_path):
    body = "FILTER(\n" + "(" * 120 + "?l" + ")" * 120 + ")"
    (tmp_path / "q.rq").write_text(query(body))
    p = spaseq("explain", "q.rq", cwd=tmp_path)
    # WHERE's brace is level 1, GPM B's level 2, FILTER's parenthesis level 3: the 98th
    # parenthesis of line 9 takes the query past 100
    assert_query_error(p, r"line 9, column 98: the query nests too deeply: 101 levels")
    assert spaseq("explain", "q.rq", "--max-nesting", "130", cwd=tmp_path).returncode == 0
    p = spaseq("explain", "q.rq", "--max-nesting", "5000", cwd=tmp_path)
    assert p.returncode == 2 and "--max-nesting: must be an integer from 1 to 500" in p.stderr


def test_triple_patterns_in_a_row_count_as_chained():
    """rdflib's parser recursed once per '.': at about 100 patterns the GPM went to
    Oxigraph, whose planning of a chain of 3,000 took ten minutes an event."""
    def chain(n):
        return " ".join(f"?x{i} :p ?x{i + 1} ." for i in range(n))
    with pytest.raises(QueryError, match="nests too deeply: 101 levels") as error:
        compile_query(query(chain(3000)))
    assert error.value.line == 8
    compiled = compile_query(query(chain(60)))
    assert [gpm.algebra is not None for gpm in compiled.gpms.values()] == [True, True]   # rdflib reads it
    star = "?x0 " + " ; ".join(f":p{i} ?v{i}" for i in range(300)) + " ."      # ';' lists rdflib reads flat
    compile_query(query(star))


def test_kb_query_measures_the_nesting_of_its_sparql(tmp_path):
    """5,000 nested braces killed ``spaseq kb query`` (SIGSEGV in pyoxigraph's parser)."""
    (tmp_path / "kb.nt").write_text("<http://x> <http://p> <http://o> .\n")
    store = f"{tmp_path / 'kb.nt'}"
    for n, flags, status in [(5000, [], 2), (150, [], 2), (150, ["--max-nesting", "500"], 0)]:
        (tmp_path / "q.rq").write_text("SELECT * WHERE " + "{ " * n + "?s ?p ?o" + " }" * n)
        p = spaseq("kb", "query", store, f"@{tmp_path / 'q.rq'}", *flags, cwd=tmp_path)
        assert p.returncode == status, p.stderr
        if status == 2:
            assert "line 1, column 212: the query nests too deeply" in p.stderr, p.stderr
        else:
            assert "<http://o>" in p.stdout


def test_the_skeleton_is_measured_before_the_grammar_reads_it(tmp_path):
    text = query().replace("SEQ (A ; B+)", "SEQ " + "(" * 5000 + "A ; B+" + ")" * 5000)
    (tmp_path / "q.rq").write_text(text)
    assert_query_error(spaseq("explain", "q.rq", cwd=tmp_path), r"line 5, column 112: the query nests too deeply")


@pytest.mark.parametrize("shape", sorted(CRASHING))
def test_nesting_up_to_the_ceiling_compiles_and_runs(shape):
    """At the highest limit the flag takes, every shape is measured in levels that keep
    the parsers and the evaluator far from their stack's end: the largest body that
    passes compiles and runs (in a process of its own: a crash is a signal there),
    one more level is refused."""
    script = f"""
import sys
sys.path.insert(0, {TESTS!r})
from spaseq_plugin import Engine, QueryError
from spaseq_plugin.language.limits import QueryLimits, check_nesting
from spaseq_plugin.language.parser import parse_query
from test_hostile_queries import CRASHING, events, query
shape, ceiling = {shape!r}, {MAX_NESTING_CEILING}

def passes(n):              # the measures of compile_query, without the rest
    try:
        parse_query(query(CRASHING[shape](n)), ceiling)
        check_nesting('?b :kind "b" ; :label ?l .' + CRASHING[shape](n), ceiling)     # (GPM B's body)
        return True
    except QueryError:
        return False
low, high = 1, ceiling
while low < high:
    n = (low + high + 1) // 2
    low, high = (n, high) if passes(n) else (low, n - 1)
limits = QueryLimits(max_nesting=ceiling)
list(Engine(query(CRASHING[shape](low)), limits=limits).run(events()))
try:
    Engine(query(CRASHING[shape](low + 1)), limits=limits)
except QueryError as e:
    assert "nests too deeply" in str(e), e
else:
    raise AssertionError("not refused")
print(low)
"""
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.returncode, p.stderr[-3000:])
    assert int(p.stdout) >= MAX_NESTING_CEILING // 4


def test_nesting_rdflib_cannot_parse_falls_back_to_oxigraph():
    """rdflib's parser raises RecursionError at about 50 nested braces: that GPM is
    evaluated by Oxigraph, with a warning, and gives the right answers."""
    body = "{ " * 60 + '?b :label ?l FILTER(?l = "y")' + " }" * 60
    engine = Engine(query(body))
    assert any("nests too deeply for rdflib's parser" in w for w in engine.warnings)
    assert [r[1] for r in rows(engine.run(events()))] == [(("a", ":a1"), ("b", ":b2"))]


def test_deep_construct_template_is_a_query_error():
    text = query().replace("SELECT ?a ?b", "CONSTRUCT { ?a :p " + "(" * 200 + "1" + ")" * 200 + " }")
    with pytest.raises(QueryError, match="line 2, column 118: the query nests too deeply"):
        compile_query(text)
    text = query().replace("SELECT ?a ?b", "CONSTRUCT { ?a :p " + "(" * 95 + "1" + ")" * 95 + " }")
    with pytest.raises(QueryError, match="CONSTRUCT template: it nests too deeply for rdflib's parser"):
        compile_query(text)


def test_limits_reject_bad_values():
    for bad in (0, MAX_NESTING_CEILING + 1, 2.5, True):
        with pytest.raises(ValueError, match="max_nesting"):
            QueryLimits(max_nesting=bad)
    for bad in (0, -1, float("nan"), float("inf"), "5", 1e300):   # (1e300: OverflowError in the wait)
        with pytest.raises(ValueError, match="service_timeout"):
            QueryLimits(service_timeout=bad)
    assert QueryLimits().max_nesting == DEFAULT_MAX_NESTING


# -- SERVICE ----------------------------------------------------------------------------------

class SilentServer:
    """Accepts connections and never answers; counts them."""

    def __init__(self):
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}/sparql"
        self.accepted = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.accepted.append(connection)

    def close(self):
        self.socket.close()
        for c in self.accepted:
            c.close()


@pytest.fixture
def silent():
    server = SilentServer()
    yield server
    server.close()


class Endpoint:
    """A SPARQL 1.1 protocol endpoint over a pyoxigraph store, or one answering with
    ``reply(query) -> (status, media type, bytes)`` when given one."""

    def __init__(self, store: ox.Store | None = None, reply=None):
        outer = self
        self.store = store or ox.Store()
        self.reply = reply
        self.queries: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).get("query", [""])[0]
                self._answer(query)

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                if self.headers.get("Content-Type", "").startswith("application/sparql-query"):
                    query = body
                else:
                    query = urllib.parse.parse_qs(body).get("query", [""])[0]
                self._answer(query)

            def _answer(self, query):
                outer.queries.append(query)
                status, media, data = (outer.reply or outer._evaluate)(query)
                self.send_response(status)
                self.send_header("Content-Type", media)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/sparql"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _evaluate(self, query):
        try:
            results = self.store.query(query)
        except SyntaxError as e:
            return 400, "text/plain", str(e).encode()
        if isinstance(results, ox.QueryBoolean):
            return 200, "application/sparql-results+json", json.dumps({"head": {}, "boolean": bool(results)}).encode()
        return 200, "application/sparql-results+json", results.serialize(format=ox.QueryResultsFormat.JSON)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def service_query(url: str, silent: bool = False) -> str:
    return query(f"SERVICE {'SILENT ' if silent else ''}<{url}> {{ ?b :remote ?r }}", select="?a ?b ?r")


def test_service_is_refused_by_default(silent, tmp_path):
    (tmp_path / "q.rq").write_text(service_query(silent.url))
    assert_query_error(spaseq("explain", "q.rq", cwd=tmp_path), r"line 8, column 5: GPM B: SERVICE is refused")
    assert_query_error(spaseq("run", "q.rq", "--stream", stream_file(tmp_path), cwd=tmp_path), "SERVICE is refused")
    with pytest.raises(QueryError, match="SERVICE is refused") as error:
        Engine(service_query(silent.url))
    assert (error.value.line, error.value.column) == (8, 5)
    # a name or a string that merely says "service" is no SERVICE
    Engine(query('?b :service ?service . FILTER(?l != "SERVICE")'))
    assert silent.accepted == []


def test_a_service_after_an_escaped_hash_or_quote_is_refused(silent):
    # :a\# and :a\' are prefixed names: what follows them is no comment or string
    # (the SERVICE after :a\# was once taken for a comment, and not refused)
    for name in (":a\\#", ":it\\'s"):
        with pytest.raises(QueryError, match="SERVICE is refused"):
            Engine(query(f"?b {name} ?r . SERVICE <{silent.url}> {{ ?b :remote ?r }}"))
    assert silent.accepted == []


def test_explain_never_executes_a_service(silent, tmp_path):
    (tmp_path / "q.rq").write_text(service_query(silent.url))
    p = spaseq("explain", "q.rq", "--allow-service", cwd=tmp_path, timeout=60)
    assert p.returncode == 0, p.stderr
    Engine(service_query(silent.url), limits=QueryLimits(allow_service=True))
    time.sleep(0.2)
    assert silent.accepted == []


def test_a_silent_service_fails_after_the_timeout(silent, tmp_path):
    (tmp_path / "q.rq").write_text(service_query(silent.url))
    started = time.monotonic()
    p = spaseq("run", "q.rq", "--stream", stream_file(tmp_path), "--allow-service", "--service-timeout", "1",
               cwd=tmp_path, timeout=60)
    assert p.returncode == 3 and "GPM B: SERVICE did not answer within 1 s (--service-timeout)" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and time.monotonic() - started < 30
    engine = Engine(service_query(silent.url), limits=QueryLimits(allow_service=True, service_timeout=0.5))
    with pytest.raises(LimitError, match="did not answer within 0.5 s"):
        list(engine.run(events()))
    assert silent.accepted


def test_an_allowed_service_is_evaluated():
    store = ox.Store()
    store.add(ox.Quad(ox.NamedNode(EX + "b2"), ox.NamedNode(EX + "remote"), ox.Literal("r2"), ox.DefaultGraph()))
    endpoint = Endpoint(store)
    try:
        engine = Engine(service_query(endpoint.url), limits=QueryLimits(allow_service=True, service_timeout=20))
        assert [r[1] for r in rows(engine.run(events()))] == [(("a", ":a1"), ("b", ":b2"), ("r", '"r2"'))]
        assert endpoint.queries
    finally:
        endpoint.close()


@pytest.mark.parametrize("status, media, body", [
    (500, "text/plain", b"broken"),
    (200, "application/sparql-results+json", b"garbage"),
    (200, "application/sparql-results+json", b'{"head": {"vars": ["r"]}, "results": {"bindings": [{"r": {}}]}}'),
    (200, "text/html", b"<html>"),
])
def test_a_failing_service_is_a_clear_error(status, media, body):
    endpoint = Endpoint(reply=lambda q: (status, media, body))
    try:
        engine = Engine(service_query(endpoint.url), limits=QueryLimits(allow_service=True, service_timeout=20))
        with pytest.raises(SpaseqError, match="GPM B: SERVICE failed"):
            list(engine.run(events()))
    finally:
        endpoint.close()


def test_an_allowed_service_reads_no_file(tmp_path):
    secret = tmp_path / "secret.ttl"
    secret.write_text(f"<{EX}b2> <{EX}remote> \"secret\" .\n")
    engine = Engine(service_query(secret.as_uri()), limits=QueryLimits(allow_service=True, service_timeout=20))
    with pytest.raises(SpaseqError, match="GPM B: SERVICE failed"):
        list(engine.run(events()))


def test_spark_refuses_other_limits(tmp_path):
    (tmp_path / "q.rq").write_text(query())
    p = spaseq("run", "q.rq", "--stream", stream_file(tmp_path), "--engine", "spark", "--allow-service", cwd=tmp_path)
    assert p.returncode == 2 and "are for --engine stream" in p.stderr, p.stderr


# -- WITHIN, GROUP_CONCAT, long FILTERs ---------------------------------------------------------

def test_huge_within_is_a_query_error(tmp_path):
    (tmp_path / "q.rq").write_text(query(within="9" * 400 + " DAYS"))
    for command in (["explain", "q.rq"], ["run", "q.rq", "--stream", stream_file(tmp_path)]):
        assert_query_error(spaseq(*command, cwd=tmp_path), r"line 3, column 8: the WITHIN window is too long")
    with pytest.raises(QueryError, match="too long"):
        compile_query(query(within="9" * 1_000_000 + " MS"))
    assert compile_query(query(within="1000000000000 SECONDS")).window == 10 ** 12
    assert compile_query(query(within="11574074 DAYS")).window == 11574074 * 86400
    with pytest.raises(QueryError, match="too long"):
        compile_query(query(within="11574075 DAYS"))


def test_a_within_finer_than_a_nanosecond_is_a_query_error():
    """Times are exact to the nanosecond; a finer window (or a tiny one, '0.' and
    a million zeros) would end between two of them, rounded."""
    for within in ("0.0000000001 SECONDS", "0." + "0" * 1_000_000 + "1 SECONDS", "0.0000001 MS"):
        with pytest.raises(QueryError, match="finer than a nanosecond"):
            compile_query(query(within=within))
    assert compile_query(query(within="0.000000001 SECONDS")).window == Decimal("1E-9")
    assert compile_query(query(within="1.0000000001 MINUTES")).window == Decimal("60.000000006")


SEPARATOR_EVENTS = [event("s", 1, ':a1 :kind "a" .'), event("s", 2, ':b1 :kind "b" ; :label "x" .'),
                    event("s", 3, ':b2 :kind "b" ; :label "y" .')]


@pytest.mark.parametrize("written, meant", [
    ('"é–"', "é–"), (r'"\t"', "\t"), (r'"\u00e9\U0001F600"', "é\U0001F600"), (r'"\n"', "\n"),
    (r'"\\\""', '\\"'), ("'\\''", "'"), ('"""a\nb"""', "a\nb"), ('"\\\\u0041"', "\\u0041"),
])
def test_group_concat_separator_escapes(written, meant):
    text = query(select=f"?a (GROUP_CONCAT(?l; SEPARATOR={written}) AS ?all)").replace(
        "SEQ (A ; B+)", "SEQ (A ; B+)").replace("WITHIN 1 MINUTE", "WITHIN 3 SECONDS")
    results = list(Engine(text).run(SEPARATOR_EVENTS))
    assert [r.bindings["all"].value for r in results] == ["x", "x" + meant + "y"]


@pytest.mark.parametrize("written, column, message", [
    (r'"\x"', 40, r"\\x is not a SPARQL string escape"),
    (r'"\N"', 40, r"\\N is not a SPARQL string escape"),
    (r'"\u12"', 40, r"\\u needs 4 hexadecimal digits"),
    (r'"ab\U0011FFFF"', 42, r"\\U0011FFFF is not a character"),
    (r'"\uD800"', 40, r"\\uD800 is not a character"),
])
def test_group_concat_separator_bad_escapes(written, column, message, tmp_path):
    (tmp_path / "q.rq").write_text(query(select=f"?a (GROUP_CONCAT(?l; SEPARATOR={written}) AS ?all)"))
    assert_query_error(spaseq("explain", "q.rq", cwd=tmp_path), rf"line 2, column {column}: {message}")


def test_thousands_of_conjuncts_are_refused_at_once():
    with pytest.raises(QueryError, match="GPM B nests too deeply"):
        compile_query(query("FILTER(?l != 1" + " && ?l != 1" * 9000 + ")"))
    # within the limit, a long FILTER compiles and evaluates
    text = query('FILTER(?l != "z"' + ' && ?l != "z"' * 90 + ")")
    assert len(rows(Engine(text).run(events()))) == 2


def test_functions_are_checked_without_being_called():
    with pytest.raises(QueryError, match=r"line 7, column 22: GPM B: The custom function <http://example/nope> "
                                         r"is not supported \(see 'spaseq plugins'\)"):
        compile_query(query("FILTER(:nope(?l))"))
    with pytest.raises(QueryError, match="requires between 1 and 1 arguments, but 2 were given"):
        compile_query(query("FILTER(xsd:integer(?l, 1))").replace("PREFIX :", "PREFIX xsd: "
                      "<http://www.w3.org/2001/XMLSchema#>\nPREFIX :"))


def test_text_that_is_not_unicode_is_a_query_error(tmp_path):
    (tmp_path / "q.rq").write_bytes(query().encode().replace(b"?a ?b", b"?a \xff?b", 1))
    assert_query_error(spaseq("explain", "q.rq", cwd=tmp_path), r"line 2, column 11: the query is not UTF-8 text")
    with pytest.raises(QueryError, match="line 2, column 11: the text holds a lone surrogate"):
        compile_query(query().replace("?a ?b", "?a \udc80?b", 1))


# -- KB endpoints -------------------------------------------------------------------------------

def kb_store() -> ox.Store:
    store = ox.Store()
    for b, owner in (("b1", "o1"), ("b2", "o2")):
        store.add(ox.Quad(ox.NamedNode(EX + b), ox.NamedNode(EX + "owner"), ox.NamedNode(EX + owner),
                          ox.NamedNode(EX + "kb")))
    return store


def test_kb_endpoint_count_query_does_not_clash_with_user_variables():
    endpoint = Endpoint(kb_store())
    try:
        kb = KnowledgeBase.from_specs([f"sparql:{endpoint.url}"])
        for name in ("n", "count"):
            text = query(f"GRAPH <{EX}kb> {{ ?b :owner ?{name} }}", select=f"?b ?{name}")
            results = rows(Engine(text, kb=kb).run(events()))
            assert [r[1] for r in results] == [(("b", ":b1"), (name, ":o1")), (("b", ":b2"), (name, ":o2"))]
        assert any("COUNT(*) AS ?count_)" in q for q in endpoint.queries)
    finally:
        endpoint.close()


@pytest.mark.parametrize("answer, message", [
    (b'{"head": {"vars": ["x"]}, "results": {"bindings": [{"x": {"type": "literal", "value": "1"}}]}}',
     "answered a COUNT query without a count"),
    (b'{"head": {"vars": ["count"]}, "results": {"bindings": [{"count": {"type": "literal", "value": "many"}}]}}',
     "answered a COUNT query without a count"),
    (b'[1, 2]', "cannot read the results"),
    (b'{"head": {"vars": ["count"]}, "results": {"bindings": 5}}', "cannot read the results"),
])
def test_kb_endpoint_bad_replies_are_clear_errors(answer, message):
    endpoint = Endpoint(reply=lambda q: (200, "application/sparql-results+json", answer))
    try:
        kb = KnowledgeBase.from_specs([f"sparql:{endpoint.url}"])
        with pytest.raises(SpaseqError, match=message):
            Engine(query(f"GRAPH <{EX}kb> {{ ?b :owner ?o }}"), kb=kb).run(events()).__next__()
    finally:
        endpoint.close()


def _nested_json(levels: int) -> str:
    term = '{"type": "uri", "value": "http://b"}'
    for _ in range(levels):
        term = ('{"type": "triple", "value": {"subject": {"type": "uri", "value": "http://a"}, '
                f'"predicate": {{"type": "uri", "value": "http://p"}}, "object": {term}}}}}')
    return term


@pytest.mark.parametrize("media, answer", [
    ("application/sparql-results+json",
     '{"head": {"vars": ["o"]}, "results": {"bindings": [{"o": %s}]}}' % _nested_json(100)),
    ("text/tab-separated-values", "?o\n" + "<<( <http://a> <http://p> " * 100 + "<http://b>" + " )>>" * 100 + "\n"),
    ("application/n-triples", "<http://x> <http://p> " + "<<( <http://a> <http://p> " * 100 + "<http://b>"
     + " )>>" * 100 + " .\n"),
])
def test_kb_endpoint_answers_nesting_triple_terms_too_deep_are_not_parsed(media, answer):
    """Some 17,000 levels crash pyoxigraph's parsers (100 do not: a failing check fails here, not the process)."""
    _endpoint_answer_refused(media, answer, "answered with triple terms nested more than 64 deep")
    shallow = answer.replace("<<( <http://a> <http://p> " * 100, "<<( <http://a> <http://p> " * 64) \
        .replace(" )>>" * 100, " )>>" * 64).replace(_nested_json(100), _nested_json(64))
    endpoint = Endpoint(reply=lambda q: (200, media, shallow.encode()))
    try:
        kb = KnowledgeBase.from_specs([f"sparql:{endpoint.url}"])
        if media == "application/n-triples":
            assert len(kb.query_results("CONSTRUCT WHERE { ?s ?p ?o }")) == 1
        elif media.endswith("json"):        # (TSV results cannot nest triple terms: pyoxigraph refuses them)
            assert len(list(kb.select("SELECT ?o WHERE { ?s ?p ?o }"))) == 1
    finally:
        endpoint.close()


def test_kb_endpoint_rows_that_do_not_bind_the_pattern_are_a_clear_error():
    def reply(q):
        if "COUNT" in q:
            return 200, "application/sparql-results+json", \
                b'{"head": {"vars": ["count"]}, "results": {"bindings": [{"count": {"type": "literal", "value": "1"}}]}}'
        return 200, "application/sparql-results+json", \
            b'{"head": {"vars": ["b"]}, "results": {"bindings": [{"b": {"type": "uri", "value": "http://example/b1"}}]}}'
    endpoint = Endpoint(reply=reply)
    try:
        kb = KnowledgeBase.from_specs([f"sparql:{endpoint.url}"])
        with pytest.raises(SpaseqError, match=r"a solution that does not bind \?o"):
            list(Engine(query(f"GRAPH <{EX}kb> {{ ?b :owner ?o }}"), kb=kb).run(events()))
    finally:
        endpoint.close()


def test_kb_endpoint_reply_bytes_and_time_are_bounded():
    big = b" " * 3_000_000 + b'{"head": {"vars": []}, "results": {"bindings": []}}'
    endpoint = Endpoint(reply=lambda q: (200, "application/sparql-results+json", big))
    try:
        kb = KnowledgeBase.from_specs([f"sparql:{endpoint.url}#max-bytes=1000000"])
        with pytest.raises(LimitError, match="sent an answer longer than 1,000,000 bytes"):
            list(kb.select("SELECT * WHERE { ?s ?p ?o }"))
        assert list(KnowledgeBase.from_specs([f"sparql:{endpoint.url}"]).select("SELECT * WHERE { ?s ?p ?o }")) == []
    finally:
        endpoint.close()
    with pytest.raises(SpaseqError, match="max-bytes must be a whole number"):
        KnowledgeBase.from_specs(["sparql:http://localhost/sparql#max-bytes=lots"])

    with socket.socket() as dripping:            # sends its headers, then a byte every 0.1 s
        dripping.bind(("127.0.0.1", 0))
        dripping.listen(4)

        def drip():
            connection, _ = dripping.accept()
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/sparql-results+json\r\n"
                               b"Content-Length: 100000\r\n\r\n")
            try:
                for _ in range(600):
                    connection.sendall(b" ")
                    time.sleep(0.1)
            except OSError:
                pass
            connection.close()
        threading.Thread(target=drip, daemon=True).start()
        kb = KnowledgeBase.from_specs([f"sparql:http://127.0.0.1:{dripping.getsockname()[1]}/sparql#timeout=0.2"])
        started = time.monotonic()
        with pytest.raises(LimitError, match=r"took more than 2 s to answer \(ten times its timeout\)"):
            list(kb.select("SELECT * WHERE { ?s ?p ?o }"))
        assert time.monotonic() - started < 20


# -- Engine.push ----------------------------------------------------------------------------------

TRIPLES = [ox.Triple(ox.NamedNode(EX + "a1"), ox.NamedNode(EX + "kind"), ox.Literal("a"))]


@pytest.mark.parametrize("stream, at, triples, message", [
    ("http://example.org/s", float("nan"), TRIPLES, "time must be a finite number of seconds, not nan"),
    ("http://example.org/s", float("-inf"), TRIPLES, "time must be a finite number of seconds, not -inf"),
    ("http://example.org/s", Decimal("NaN"), TRIPLES, "time must be a finite number"),
    ("http://example.org/s", Decimal("Infinity"), TRIPLES, "time must be a finite number"),
    ("http://example.org/s", "12", TRIPLES, "time must be a number of seconds .* not str '12'"),
    ("http://example.org/s", None, TRIPLES, "time must be a number of seconds"),
    ("http://example.org/s", True, TRIPLES, "time must be a number of seconds .* not bool"),
    ("http://example.org/s", Decimal("1e999999"), TRIPLES, r"time must be within 10\^18 seconds"),
    ("http://example.org/s", 10 ** 30, TRIPLES, r"time must be within 10\^18 seconds"),
    (None, 1, TRIPLES, "stream must be the stream's IRI"),
    ("", 1, TRIPLES, "stream must be the stream's IRI"),
    (b"http://example.org/s", 1, TRIPLES, "stream must be the stream's IRI"),
    ("http://example.org/s", 1, 5, "triples must be pyoxigraph Triples or an rdflib Graph, not int"),
    ("http://example.org/s", 1, "a b c", "triples must be pyoxigraph Triples"),
    ("http://example.org/s", 1, [("s", "p", "o")], r"triples: item 0 is a tuple \('s', 'p', 'o'\), not a pyoxigraph Triple"),
    ("http://example.org/s", 1, TRIPLES + [ox.Quad(*TRIPLES[0], ox.DefaultGraph())], "triples: item 1 is a Quad"),
])
def test_push_validates_its_arguments(stream, at, triples, message):
    engine = Engine(query())
    with pytest.raises(ValueError, match=message):
        engine.push(stream, at, triples)
    assert engine.stats.events == 0 and engine.stats.rejected == 0
    assert engine.push("http://example.org/s", 1, TRIPLES) == []      # the engine goes on


def test_push_takes_numbers_iris_and_graphs():
    engine = Engine(query())
    graph = rdflib.Graph()
    graph.add((rdflib.URIRef(EX + "b1"), rdflib.URIRef(EX + "kind"), rdflib.Literal("b")))
    graph.add((rdflib.URIRef(EX + "b1"), rdflib.URIRef(EX + "label"), rdflib.Literal("x")))
    engine.push(ox.NamedNode("http://example.org/s"), Decimal("1.5"), TRIPLES)
    results = engine.push("http://example.org/s", 2.25, graph)      # (final at once: one stream)
    results += engine.close()
    assert [(r.time, r.bindings["b"].value) for r in results] == [(Decimal("2.25"), EX + "b1")]


REGEX_QUERY = """PREFIX : <http://example/>
SELECT ?x WITHIN 10 SECONDS FROM STREAM S <http://example.org/s>
WHERE {{ SEQ (A) DEFINE GPM A ON S {{ ?s :text ?x . FILTER(REGEX(?x, "{pattern}")) }} }}
"""


@pytest.mark.parametrize("pattern, text, matches", [
    ("^(a+)+$", "a" * 40 + "b", False),              # exponential when it backtracks
    ("a*b", "a" * 300_000, False),                   # quadratic
    ("^(a|aa)(a|aa)(a|aa)(a|aa)(a|aa)(a|aa)(a|aa)(a|aa)(a|aa)(a|aa)$", "a" * 15, True),
    ("^(a+)+$", "aaa", True),
])
def test_a_backtracking_regex_over_a_hostile_literal_ends_at_once(pattern, text, matches):
    """Python's regular expressions backtrack (the first text took minutes, the second
    hours); such a pattern goes to Oxigraph's linear engine.  The answer is the same."""
    engine = Engine(REGEX_QUERY.format(pattern=pattern))
    assert engine.evaluator.describe(engine.compiled.gpms["A"]).startswith("oxigraph (REGEX with repetition")
    started = time.monotonic()
    got = list(engine.run([event("s", 1, f':s :text "{text}" .')]))
    assert time.monotonic() - started < 10
    assert len(got) == (1 if matches else 0)


@pytest.mark.parametrize("pattern", ["^Smith", "son$", "a.c", "^(Ann|Bob)$", "colou?r"])
def test_a_regex_that_cannot_backtrack_far_keeps_the_fast_path(pattern):
    engine = Engine(REGEX_QUERY.format(pattern=pattern))
    assert engine.evaluator.describe(engine.compiled.gpms["A"]).startswith("spectra")


_HUGE = "x" * (17 << 20)        # past pyoxigraph's 16 MiB buffer for one term


@pytest.mark.parametrize("media, answer", [
    ("application/sparql-results+json",
     '{"head": {"vars": ["o"]}, "results": {"bindings": [{"o": {"type": "literal", "value": "%s"}}]}}' % _HUGE),
    ("text/tab-separated-values", f'?o\n"{_HUGE}"\n'),
    ("application/n-triples", f'<http://x> <http://p> "{_HUGE}" .\n'),
])
def test_kb_endpoint_answers_with_a_term_over_16_mib_are_clear_errors(media, answer):
    """pyoxigraph raises MemoryError on such a term: the run ended 'out of memory',
    telling the user to lower --max-runs."""
    _endpoint_answer_refused(media, answer, "cannot read the answer of the SPARQL endpoint .*: a term "
                                            r"\(IRI or literal\) is longer than 16 MiB")


def _endpoint_answer_refused(media: str, answer: str, message: str) -> None:
    """A KB query (CONSTRUCT for a graph's media type, else SELECT) to an endpoint
    answering ``answer`` raises SpaseqError matching ``message``."""
    endpoint = Endpoint(reply=lambda q: (200, media, answer.encode()))
    try:
        kb = KnowledgeBase.from_specs([f"sparql:{endpoint.url}"])
        with pytest.raises(SpaseqError, match=message):
            if media == "application/n-triples":
                kb.query_results("CONSTRUCT WHERE { ?s ?p ?o }")
            else:
                list(kb.select("SELECT ?o WHERE { ?s ?p ?o }"))
    finally:
        endpoint.close()
