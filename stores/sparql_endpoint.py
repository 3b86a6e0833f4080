"""A remote SPARQL endpoint as the KB (``--kb sparql:URL``), over the SPARQL 1.1 protocol.

Queries go out as HTML-form POSTs (``query=...``), or as GETs with
``method=GET``; results come back as SPARQL JSON (or XML with
``format=xml``) and are parsed by :func:`pyoxigraph.parse_query_results`.
Options follow the URL as a fragment, which is never sent to the server::

    sparql:http://localhost:8890/sparql
    sparql:http://localhost:8890/sparql#timeout=5&method=GET&format=xml
    sparql:http://user:secret@host/sparql#graph=http://kb/a&graph=http://kb/b

``graph=IRI`` (repeatable) restricts the KB's named graphs to those listed:
``GRAPH ?g`` then ranges over them only (some servers keep system graphs,
e.g. Virtuoso's ``virtrdf#``).  :meth:`quads` of every graph (what the
Oxigraph evaluator copies when it starts) refuses to copy more than
``copy-limit`` triples (default 1,000,000), with an error that says to
name the graphs the query needs.  User and password in the URL are sent with
HTTP Basic or Digest authentication, whichever the server asks for.

An answer may not be longer than ``max-bytes`` (default 512 MiB), nor take
longer than ten times ``timeout`` (each read waits at most ``timeout``
seconds, default 30) to arrive, headers included (``http_deadline.py``): a
server cannot fill the memory or hold a run forever.  Reaching one of these limits (or ``copy-limit``) is a
:class:`~spaseq_plugin.errors.LimitError`; a connection failure, an HTTP
error, or results the client cannot read or that do not have the expected
shape are :class:`~spaseq_plugin.errors.SpaseqError`\\ s; both name the URL.
Results a server cuts at its row limit (Virtuoso says so in the
``X-SPARQL-MaxRows`` header) are an error for :meth:`select` rather than a
silently smaller answer; :meth:`quads` pages through them.

A built-in plugin: it registers the ``sparql`` scheme through the
``spaseq_kb_stores`` hook, like :mod:`spaseq_plugin.stores.oxigraph`.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Iterator

import pyoxigraph as ox

from ..errors import LimitError, SpaseqError
from ..hookspecs import KbStore, hookimpl
from ..kb import KnowledgeBase, solution_count
from ..runtime.results import term_to_json
from ..http_deadline import Deadline, opener
from ..streams import reader
from ..streams.reader import TOO_LARGE_TERM, term_too_deep, term_too_large
from ..waits import wait_seconds

JSON_RESULTS = "application/sparql-results+json"
XML_RESULTS = "application/sparql-results+xml"
TSV_RESULTS = "text/tab-separated-values"
RDF_TYPES = {
    "application/n-triples": ox.RdfFormat.N_TRIPLES,
    "text/plain": ox.RdfFormat.N_TRIPLES,             # old servers' N-Triples
    "text/turtle": ox.RdfFormat.TURTLE,
    "application/x-turtle": ox.RdfFormat.TURTLE,
    "application/rdf+xml": ox.RdfFormat.RDF_XML,
    "application/n-quads": ox.RdfFormat.N_QUADS,
    "application/trig": ox.RdfFormat.TRIG,
}
_BNODE_OK = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*\Z")
DEFAULT_MAX_BYTES = 512 * 1024 * 1024
_CHUNK = 1 << 20
_PROLOGUE = re.compile(r"\s*(?:#[^\n]*\n|PREFIX\s+[^:\s]*:\s*<[^>]*>|BASE\s*<[^>]*>)", re.IGNORECASE)


def query_form(sparql: str) -> str:
    """``SELECT``, ``ASK``, ``CONSTRUCT`` or ``DESCRIBE``: the form of a query, by its first keyword."""
    position = 0
    while True:
        m = _PROLOGUE.match(sparql, position)
        if not m or m.end() == position:
            break
        position = m.end()
    word = re.match(r"\s*([A-Za-z]+)", sparql[position:])
    return word.group(1).upper() if word else ""


class EndpointHttpError(SpaseqError):
    """The endpoint answered with an HTTP error status."""

    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


class SparqlEndpointKB(KnowledgeBase):
    """The named graphs of a remote SPARQL endpoint (see the module docstring)."""

    def __init__(self, url: str, *, timeout: float = 30.0, method: str = "POST",
                 results: str = "json", graphs: list[str] | None = None,
                 user: str | None = None, password: str | None = None, copy_limit: int = 1_000_000,
                 max_bytes: int = DEFAULT_MAX_BYTES):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SpaseqError(f"not an http(s) SPARQL endpoint URL: {url!r} (use sparql:http://host/path)")
        if parts.username and user is None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
        netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        if parts.port:
            netloc += f":{parts.port}"
        self.url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
        if method.upper() not in ("POST", "GET"):
            raise SpaseqError(f"sparql:{self.url}: method must be GET or POST, not {method!r}")
        if results not in ("json", "xml"):
            raise SpaseqError(f"sparql:{self.url}: format must be json or xml, not {results!r}")
        self.timeout = timeout
        self.copy_limit = copy_limit
        self.max_bytes = max_bytes
        self.method = method.upper()
        self.accept = JSON_RESULTS if results == "json" else XML_RESULTS
        self.restricted = list(dict.fromkeys(graphs)) if graphs else None
        self._graphs: list[str] | None = list(self.restricted) if self.restricted else None
        handlers = []
        if user is not None:
            manager = urllib.request.HTTPPasswordMgrWithDefaultRealm()
            manager.add_password(None, self.url, user, password or "")
            handlers = [urllib.request.HTTPBasicAuthHandler(manager),
                        urllib.request.HTTPDigestAuthHandler(manager)]
        self._opener = opener(*handlers)
        self.description = f"SPARQL endpoint {self.url}"
        self.requests = 0

    @classmethod
    def from_location(cls, location: str) -> "SparqlEndpointKB":
        """``URL[#option=value&...]`` (options: timeout, method, format, graph, copy-limit, max-bytes)."""
        url, _, fragment = location.partition("#")
        options: dict = {"graphs": []}
        for key, value in urllib.parse.parse_qsl(fragment, keep_blank_values=True):
            if key == "timeout":
                try:
                    options["timeout"] = wait_seconds(value)
                except ValueError as e:
                    raise SpaseqError(f"sparql:{url}: timeout {value!r}: {e}") from None
            elif key == "method":
                options["method"] = value
            elif key == "format":
                options["results"] = value
            elif key == "graph":
                options["graphs"].append(value.strip("<>"))
            elif key in ("copy-limit", "max-bytes"):
                try:
                    options[key.replace("-", "_")] = int(value)
                except ValueError:
                    raise SpaseqError(f"sparql:{url}: {key} must be a whole number, not {value!r}") from None
            else:
                raise SpaseqError(f"sparql:{url}: unknown option {key!r} "
                                  "(timeout, method, format, graph, copy-limit, max-bytes)")
        return cls(url, **options)

    # -- the SPARQL protocol --------------------------------------------------------------

    def request(self, sparql: str, accept: str | None = None) -> tuple[bytes, str, dict]:
        """Send a query; (body, media type, headers) of the answer."""
        accept = accept or self.accept
        form = urllib.parse.urlencode({"query": sparql})
        method = self.method
        for attempt in (1, 2):
            if method == "POST":
                req = urllib.request.Request(
                    self.url, data=form.encode("utf-8"), method="POST",
                    headers={"Accept": accept, "Content-Type": "application/x-www-form-urlencoded"})
            else:
                separator = "&" if "?" in self.url else "?"
                req = urllib.request.Request(self.url + separator + form, method="GET",
                                             headers={"Accept": accept})
            self.requests += 1
            try:
                # (the whole exchange within ten times the timeout: an endpoint dripping its
                # headers held the run for ever, each byte within the timeout of a read)
                with Deadline(10 * self.timeout) as deadline, \
                        self._opener.open(req, timeout=self.timeout) as response:
                    body = self._read(response)
                    if deadline.passed:             # (its socket shut: the body read may be cut)
                        raise TimeoutError
                    media = response.headers.get_content_type()
                    return body, media, dict(response.headers.items())
            except urllib.error.HTTPError as e:
                if e.code in (405, 501) and method == "POST" and attempt == 1:
                    method = "GET"             # a server without form POSTs: once more as a GET
                    continue
                raise EndpointHttpError(e.code, f"the SPARQL endpoint {self.url} answered HTTP {e.code} "
                                                f"{e.reason}{_error_text(e)}") from None
            except (OSError, http.client.HTTPException) as e:      # (URLError is an OSError)
                if deadline.passed:
                    raise LimitError(f"the SPARQL endpoint {self.url} took more than {10 * self.timeout:g} s "
                                      "to answer (ten times its timeout)") from None
                reason = e.reason if isinstance(e, urllib.error.URLError) else e
                if isinstance(reason, (socket.timeout, TimeoutError)):
                    raise LimitError(f"the SPARQL endpoint {self.url} did not answer within "
                                      f"{self.timeout:g} s") from None
                if isinstance(e, urllib.error.URLError):
                    raise SpaseqError(f"cannot reach the SPARQL endpoint {self.url}: {reason}") from None
                raise SpaseqError(f"lost the connection to the SPARQL endpoint {self.url}: {e}") from None
        raise AssertionError("unreachable")

    def _read(self, response) -> bytes:
        """The answer's body, at most ``max_bytes`` long."""
        chunks, size = [], 0
        while True:
            chunk = response.read1(_CHUNK)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > self.max_bytes:
                raise LimitError(f"the SPARQL endpoint {self.url} sent an answer longer than "
                                  f"{self.max_bytes:,} bytes (raise the limit with #max-bytes=N)")
            chunks.append(chunk)

    def results(self, sparql: str) -> ox.QuerySolutions | ox.QueryBoolean:
        """The answer to a SELECT or ASK query, as pyoxigraph results (read completely)."""
        body, media, headers = self.request(sparql)
        return self._parse_results(body, media)

    def _parse_results(self, body: bytes, media: str):
        fmt = {JSON_RESULTS: ox.QueryResultsFormat.JSON, "application/json": ox.QueryResultsFormat.JSON,
               XML_RESULTS: ox.QueryResultsFormat.XML, "application/xml": ox.QueryResultsFormat.XML,
               TSV_RESULTS: ox.QueryResultsFormat.TSV}.get(media)
        if fmt is None:
            raise SpaseqError(f"the SPARQL endpoint {self.url} sent {media or 'no media type'}, "
                              "not SPARQL results (JSON, XML or TSV)")
        if fmt == ox.QueryResultsFormat.JSON and not _json_nesting_at_most(body, 2 * reader.MAX_TERM_DEPTH + 4) \
                or fmt == ox.QueryResultsFormat.TSV and term_too_deep(body) >= 0:
            raise self._too_deep()
        try:
            return _read_results(body, fmt)
        except SyntaxError as e:
            if "bnode" not in str(e).lower() and "blank node" not in str(e).lower():
                raise SpaseqError(f"cannot read the results of the SPARQL endpoint {self.url}: {e}") from None
        except MemoryError as e:
            raise self._too_large(e) from None
        # Blank node labels pyoxigraph refuses (Virtuoso's "nodeID://b10000"): relabel them.
        try:
            return _read_results(_relabel_blank_nodes(body, fmt), fmt)
        except (SyntaxError, ValueError, AttributeError, TypeError) as e:   # (JSON of another shape)
            raise SpaseqError(f"cannot read the results of the SPARQL endpoint {self.url}: {e}") from None

    def query_results(self, sparql: str):
        """Any query's answer as pyoxigraph objects: QuerySolutions, QueryBoolean, or a list of Triples."""
        if query_form(sparql) in ("CONSTRUCT", "DESCRIBE"):
            body, media, _ = self.request(sparql, "application/n-triples, text/turtle;q=0.9, "
                                                  "application/rdf+xml;q=0.5")
            fmt = RDF_TYPES.get(media)
            if fmt is None:
                raise SpaseqError(f"the SPARQL endpoint {self.url} sent {media} for a {query_form(sparql)} query")
            if term_too_deep(body) >= 0:
                raise self._too_deep()
            try:
                return [q.triple for q in ox.parse(body, fmt)]
            except SyntaxError as e:
                raise SpaseqError(f"cannot read the graph the SPARQL endpoint {self.url} sent: {e}") from None
            except MemoryError as e:
                raise self._too_large(e) from None
        return self.results(sparql)

    def _too_large(self, error: MemoryError) -> Exception:
        """pyoxigraph's MemoryError on an answer: a term over its buffer, said so; else itself."""
        if not term_too_large(error):
            return error
        return SpaseqError(f"cannot read the answer of the SPARQL endpoint {self.url}: {TOO_LARGE_TERM}")

    def _too_deep(self) -> SpaseqError:
        return SpaseqError(f"the SPARQL endpoint {self.url} answered with triple terms nested more than "
                           f"{reader.MAX_TERM_DEPTH} deep (--max-term-depth): not read, as the RDF parser "
                           "recurses into them")

    # -- KnowledgeBase ---------------------------------------------------------------------

    def select(self, sparql: str) -> Iterator[dict[str, object]]:
        body, media, headers = self.request(sparql)
        limit = _row_limit(headers)
        results = self._parse_results(body, media)
        if isinstance(results, ox.QueryBoolean):
            raise SpaseqError(f"the SPARQL endpoint {self.url} answered a SELECT query with a boolean")
        names = [v.value for v in results.variables]
        rows = [{n: s[n] for n in names if s[n] is not None} for s in results]
        if limit is not None and len(rows) >= limit:
            raise SpaseqError(f"the SPARQL endpoint {self.url} cut a KB query's results at {limit} rows "
                              "(X-SPARQL-MaxRows); raise its result limit (Virtuoso: ResultSetMaxRows "
                              "in the [SPARQL] section of virtuoso.ini)")
        return iter(rows)

    def graph_names(self) -> list[str]:
        if self._graphs is None:
            try:
                names, complete = self._graph_query("SELECT DISTINCT ?g WHERE { GRAPH ?g { } }")
            except EndpointHttpError:
                complete = False               # a server that does not take the empty pattern
            if not complete:
                # Virtuoso answers the empty pattern with one unbound row: ask for graphs with triples
                names, _ = self._graph_query("SELECT DISTINCT ?g WHERE { GRAPH ?g { ?s ?p ?o } }")
            self._graphs = sorted(names)
        return list(self._graphs)

    def _graph_query(self, text: str) -> tuple[list[str], bool]:
        names, complete = [], True
        for row in self.select(text):
            g = row.get("g")
            if isinstance(g, ox.NamedNode):
                names.append(g.value)
            elif g is None:
                complete = False
        return names, complete and bool(names)

    def missing_graphs(self, iris) -> list[str]:
        iris = set(iris)
        if self.restricted:
            return sorted(iris - set(self.restricted))
        if not iris:
            return []
        # ask about the query's graphs only: listing every graph of a big endpoint is slow
        values = " ".join(f"<{iri}>" for iri in sorted(iris))
        present = {row["g"].value for row in self.select(
            f"SELECT DISTINCT ?g WHERE {{ VALUES ?g {{ {values} }} GRAPH ?g {{ ?s ?p ?o }} }}")
            if isinstance(row.get("g"), ox.NamedNode)}
        return sorted(iris - present)

    def quads(self, graph: str | None = None) -> Iterator[ox.Quad]:
        if graph is not None:
            yield from self._graph_quads(graph)
            return
        names = self.graph_names()
        sizes = {name: self._count(name) for name in names}
        total = sum(sizes.values())
        if total > self.copy_limit:
            biggest = ", ".join(f"<{n}> ({sizes[n]:,})" for n in sorted(names, key=lambda n: -sizes[n])[:3])
            raise LimitError(
                f"the SPARQL endpoint {self.url} holds {total:,} triples in {len(names)} named graphs "
                f"(largest: {biggest}): more than the {self.copy_limit:,} this KB copies for queries "
                "that need every graph; name the graphs the query uses (sparql:URL#graph=IRI&graph=IRI) "
                "or raise the limit (#copy-limit=N)")
        for name in names:
            yield from self._graph_quads(name)

    def _count(self, graph: str) -> int:
        return solution_count(self.select(f"SELECT (COUNT(*) AS ?n) WHERE {{ GRAPH <{graph}> {{ ?s ?p ?o }} }}"),
                              "n", f"the SPARQL endpoint {self.url}")

    def _graph_quads(self, graph: str) -> Iterator[ox.Quad]:
        g = ox.NamedNode(graph)
        text = f"SELECT ?s ?p ?o WHERE {{ GRAPH <{graph}> {{ ?s ?p ?o }} }}"
        offset, page = 0, None
        while True:
            paged = text if page is None else f"{text} LIMIT {page} OFFSET {offset}"
            body, media, headers = self.request(paged)
            limit = _row_limit(headers)
            results = self._parse_results(body, media)
            rows = 0
            for solution in results:
                rows += 1
                try:
                    quad = ox.Quad(solution["s"], solution["p"], solution["o"], g)
                except (KeyError, TypeError, ValueError):
                    raise SpaseqError(f"the SPARQL endpoint {self.url} answered a query for the triples "
                                      f"of <{graph}> with a solution that is not a triple") from None
                yield quad
            if page is None and (limit is None or rows < limit):
                return
            if page is None:
                page = limit                    # the server cut the answer: page through it
            offset += rows
            if rows < page:
                break
        expected = self._count(graph)
        if expected != offset:
            raise SpaseqError(f"the SPARQL endpoint {self.url} gave {offset} of the {expected} triples "
                              f"of graph <{graph}> when paging through them")


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+"')
_NOT_BRACES = bytes(c for c in range(256) if c not in b"{}")


def _json_nesting_at_most(body: bytes, most: int) -> bool:
    """Whether the objects of a JSON text nest at most ``most`` deep (a triple term in
    SPARQL JSON results is two objects in its parent's): each pass over the text's
    braces, its strings taken out, takes away the innermost pairs, at C speed."""
    if body.count(b"{") <= most:
        return True
    braces = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACES)
    for _ in range(most):
        if b"{}" not in braces:
            return True
        braces = braces.replace(b"{}", b"")
    return b"{}" not in braces


def _read_results(body: bytes, fmt: ox.QueryResultsFormat):
    results = ox.parse_query_results(body, fmt)
    if isinstance(results, ox.QuerySolutions):
        # read them all now, so that a bad value is an error here, not in the caller's loop
        variables = results.variables
        solutions = list(results)
        return _Solutions(variables, solutions)
    return results


class _Solutions:
    """Read QuerySolutions: ``variables`` and the solutions, iterable more than once,
    serialisable like pyoxigraph's."""

    def __init__(self, variables, solutions):
        self.variables = variables
        self._solutions = solutions

    def __iter__(self):
        return iter(self._solutions)

    def __len__(self):
        return len(self._solutions)

    def serialize(self, output=None, format=ox.QueryResultsFormat.JSON):
        return serialize_solutions(self.variables, self._solutions, output, format)


def serialize_solutions(variables, solutions, output=None, format=ox.QueryResultsFormat.JSON):
    """Serialise solutions with pyoxigraph's writers: the rows become SPARQL JSON that
    pyoxigraph parses back into QuerySolutions, which it then writes in ``format``."""
    bindings = []
    for solution in solutions:
        row = {}
        for v in variables:
            term = solution[v] if not isinstance(solution, dict) else solution.get(v.value)
            if term is not None:
                row[v.value] = term_to_json(term)
        bindings.append(row)
    data = json.dumps({"head": {"vars": [v.value for v in variables]},
                       "results": {"bindings": bindings}}).encode("utf-8")
    return ox.parse_query_results(data, ox.QueryResultsFormat.JSON).serialize(output, format)


def blank_label(label: str) -> str:
    """A blank node label pyoxigraph accepts, the same for the same server label."""
    if _BNODE_OK.match(label) and not label.endswith("."):
        return label
    return "x" + label.encode("utf-8").hex()


def _relabel_blank_nodes(body: bytes, fmt: ox.QueryResultsFormat) -> bytes:
    if fmt == ox.QueryResultsFormat.JSON:
        data = json.loads(body)

        def fix(term):
            if isinstance(term, dict):
                if term.get("type") == "bnode":
                    term["value"] = blank_label(term["value"].removeprefix("_:"))
                elif term.get("type") == "triple" and isinstance(term.get("value"), dict):
                    for part in term["value"].values():
                        fix(part)
        for row in data.get("results", {}).get("bindings", []):
            for term in row.values():
                fix(term)
        return json.dumps(data).encode("utf-8")
    if fmt == ox.QueryResultsFormat.XML:
        return re.sub(rb"<bnode>([^<]*)</bnode>",
                      lambda m: b"<bnode>" + blank_label(m.group(1).decode("utf-8")).encode() + b"</bnode>",
                      body)
    if fmt == ox.QueryResultsFormat.TSV:
        return re.sub(rb"(?<![^\t\n])_:([^\t\n]*)",
                      lambda m: b"_:" + blank_label(m.group(1).decode("utf-8")).encode(), body)
    return body


def _row_limit(headers: dict) -> int | None:
    for key, value in headers.items():
        if key.lower() == "x-sparql-maxrows":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _error_text(error: urllib.error.HTTPError) -> str:
    try:
        text = error.read(2000).decode("utf-8", "replace").strip()
    except Exception:
        return ""
    if not text:
        return ""
    lines = [line for line in text.splitlines() if line.strip()][:3]
    return ": " + " / ".join(lines)[:400]


@hookimpl
def spaseq_kb_stores():
    return [KbStore("sparql", SparqlEndpointKB.from_location,
                    "a SPARQL 1.1 endpoint: 'sparql:http://host/sparql[#timeout=S&method=GET&format=xml"
                    "&graph=IRI&copy-limit=N]'")]
