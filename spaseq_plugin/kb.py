"""The background knowledge base (KB) that ``GRAPH`` clauses join.

A KB is read-only for queries.  Backends (Oxigraph in memory or on disk,
rdflib stores, SPARQL endpoints, third-party stores) implement
:class:`KnowledgeBase` and are registered by URI scheme through the
``spaseq_kb_stores`` hook; ``--kb`` values pick them:

* ``PATH``: an RDF file loaded into an in-memory Oxigraph KB (TriG and
  N-Quads keep their graph names; N-Triples and Turtle go to the default
  graph, which GRAPH clauses do not see: semantics.md section 2);
* ``IRI=PATH`` (or ``<IRI>=PATH``, needed when the IRI holds a ``=``): a
  Turtle or N-Triples file into the named graph ``IRI``, e.g.
  ``http://example/grid/kb=kb.ttl`` or ``urn:x:kb=kb.nt``;
* ``SCHEME:LOCATION``, where ``SCHEME`` is the name of a registered store
  (``spaseq plugins`` lists them): that backend, e.g. ``oxigraph:DIR``,
  ``rdflib:Memory``, ``sparql:http://host/sparql``.

:func:`parse_kb_spec` tells them apart; errors name the value
(``kb.ttl: no such file``) and are :class:`~spaseq_plugin.errors.UsageError`.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Iterable, Iterator, Mapping, NamedTuple

import pyoxigraph as ox

from .errors import SpaseqError, UsageError

log = logging.getLogger(__name__)

Solution = Mapping[str, object]


class KnowledgeBase:
    """What the engine asks of a KB backend."""

    #: shown by ``spaseq explain`` and ``spaseq plugins``
    description = "knowledge base"
    #: whether the store keeps literals in Oxigraph's canonical form (``"01"^^xsd:integer``
    #: as ``"1"``), so that a query with a canonical literal finds every written form of it
    canonical_literals = False

    def graph_names(self) -> list[str]:
        """IRIs of the KB's named graphs."""
        raise NotImplementedError

    def select(self, sparql: str) -> Iterator[dict[str, object]]:
        """Solutions of a SPARQL SELECT over the KB dataset, as dicts of pyoxigraph terms."""
        raise NotImplementedError

    def quads(self, graph: str | None = None) -> Iterator[ox.Quad]:
        """The quads of one named graph (or of every named graph), as pyoxigraph Quads."""
        raise NotImplementedError

    def working_store(self) -> ox.Store | None:
        """An in-memory pyoxigraph Store holding the KB that evaluators may add a graph to,
        or ``None`` (they then copy :meth:`quads` into their own)."""
        return None

    def close(self) -> None:
        """Release the backend (files, connections)."""

    def missing_graphs(self, iris: Iterable[str]) -> list[str]:
        """The GRAPH IRIs of a query that this KB does not hold (a warning)."""
        return sorted(set(iris) - set(self.graph_names()))

    @classmethod
    def from_specs(cls, specs: list[str]) -> "KnowledgeBase":
        """Open the KB that ``--kb`` values describe (see the module docstring)."""
        from .plugins import guard_of, kb_store
        parsed = [(spec, parse_kb_spec(spec)) for spec in specs]
        stores = [spec for spec, kind in parsed if kind.store]
        if stores and len(specs) > 1:
            raise UsageError(f"{stores[0]}: a KB store (SCHEME:LOCATION) cannot be combined with other "
                             "--kb values")
        if stores:
            kind = parsed[0][1]
            store = kb_store(kind.store)
            kb = store.open(kind.path)
            guard = guard_of(store)             # (a third-party plugin's: its errors name it)
            return PluginKnowledgeBase(kb, guard) if guard is not None and isinstance(kb, KnowledgeBase) else kb
        kb = kb_store("oxigraph").open("")
        for spec, kind in parsed:
            if not os.path.exists(kind.path):
                kb.close()
                raise UsageError(f"{spec}: {_missing(kind.path)}")
            try:
                kb.load(kind.path, kind.graph)
            except SpaseqError as e:
                kb.close()
                raise UsageError(f"{spec}: {str(e).removeprefix(kind.path + ': ')}") from None
            log.info("KB: loaded %s%s", kind.path, f" into <{kind.graph}>" if kind.graph else "")
        return kb


class PluginKnowledgeBase(KnowledgeBase):
    """The knowledge base of a third-party plugin's KB store: its attributes are the
    plugin's object's, and an error its methods raise is a
    :class:`~spaseq_plugin.errors.PluginError` naming the plugin and the method
    (``guard``: ``plugins.guard_of``); :class:`SpaseqError` passes as it is."""

    def __init__(self, kb: KnowledgeBase, guard):
        self._target = kb
        self._guard = guard

    def __getattr__(self, name: str):       # (block_solutions, check_query, ...)
        if name in ("_target", "_guard"):     # (not set yet: copy, pickle)
            raise AttributeError(name)
        return self._guard.attribute(self._target, name)

    def __repr__(self) -> str:
        return f"<knowledge base of plugin {self._guard.plugin}: {self._target!r}>"

    @property
    def description(self) -> str:
        return getattr(self._target, "description", KnowledgeBase.description)

    def graph_names(self) -> list[str]:
        return self._guard.call(self._target.graph_names, "graph_names()")

    def select(self, sparql: str) -> Iterator[dict[str, object]]:
        return self._guard.items(self._guard.call(self._target.select, "select()", sparql), "select()")

    def quads(self, graph: str | None = None) -> Iterator[ox.Quad]:
        return self._guard.items(self._guard.call(self._target.quads, "quads()", graph), "quads()")

    def working_store(self) -> ox.Store | None:
        return self._guard.call(self._target.working_store, "working_store()")

    def close(self) -> None:
        return self._guard.call(self._target.close, "close()")

    def missing_graphs(self, iris: Iterable[str]) -> list[str]:
        return self._guard.call(self._target.missing_graphs, "missing_graphs()", iris)


def solution_count(rows: Iterable[Solution], var: str, source: str) -> int:
    """The number a ``SELECT (COUNT(*) AS ?var)`` query answered, checked: a KB
    store, remote ones above all, may answer anything."""
    row = next(iter(rows), None)
    term = row.get(var) if isinstance(row, Mapping) else None
    try:
        count = int(term.value) if isinstance(term, ox.Literal) else -1
    except ValueError:
        count = -1
    if count < 0:
        raise SpaseqError(f"{source} answered a COUNT query without a count "
                          f"(?{var} is {term if term is not None else 'unbound'})")
    return count


def checked_rows(rows: Iterable[Solution], variables: Iterable[str], source: str) -> list[Solution]:
    """The solutions of a KB query, each checked to bind ``variables`` to RDF terms
    (the query's pattern binds them all: a store that says otherwise is broken)."""
    variables = tuple(variables)
    out = list(rows)
    for row in out:
        for var in variables:
            if not isinstance(row.get(var), (ox.NamedNode, ox.BlankNode, ox.Literal, ox.Triple)):
                raise SpaseqError(f"{source} answered a query with a solution that does not bind ?{var}")
    return out


class KbSpec(NamedTuple):
    """A ``--kb`` value: a registered ``store`` and its location (``path``), or a file
    ``path`` and the named ``graph`` its triples go to (None: the file's own graphs)."""
    store: str | None
    path: str
    graph: str | None = None


_ABSOLUTE_IRI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[^\s<>\"{}|^`\\]*")


def parse_kb_spec(spec: str) -> KbSpec:
    """``SCHEME:LOCATION`` of a registered store, ``IRI=PATH``, ``<IRI>=PATH`` or ``PATH``
    (an existing file of that name is always a path)."""
    if spec.startswith("<") and not os.path.exists(spec):
        iri, sep, path = spec[1:].partition(">=")
        if not sep:
            raise UsageError(f"{spec}: expected <IRI>=PATH")
        return KbSpec(None, path, _graph_iri(iri, spec))
    scheme = store_scheme(spec)
    if scheme is not None:
        return KbSpec(scheme, spec.split(":", 1)[1])
    if "=" in spec and not os.path.exists(spec):
        iri, path = spec.split("=", 1)
        return KbSpec(None, path, _graph_iri(iri, spec))
    return KbSpec(None, spec)


def store_scheme(spec: str) -> str | None:
    """``oxigraph:DIR`` -> ``oxigraph``: the scheme when it names a registered KB store."""
    from .plugins import registry
    head, sep, _ = spec.partition(":")
    if not sep or os.path.exists(spec):
        return None
    return head if head in registry().stores else None


def _graph_iri(iri: str, spec: str) -> str:
    if not _ABSOLUTE_IRI.fullmatch(iri):
        raise UsageError(f"{spec}: {iri!r} is not an absolute IRI (IRI=PATH loads the file PATH into the "
                         "named graph IRI, e.g. http://example.org/kb=kb.ttl)")
    return iri


def _missing(path: str) -> str:
    """Why a ``--kb`` value names nothing: no such file, or maybe a misspelt store."""
    from .plugins import registry
    head, sep, _ = path.partition(":")
    if sep and len(head) > 1 and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", head):
        known = ", ".join(sorted(registry().stores))
        return f"no such file, and no KB store is called {head!r} (the stores: {known})"
    return "no such file"
