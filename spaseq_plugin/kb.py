"""The background knowledge base (KB) that ``GRAPH`` clauses join.

A KB is read-only for queries.  Backends (Oxigraph in memory or on disk,
rdflib stores, SPARQL endpoints, third-party stores) implement
:class:`KnowledgeBase` and are registered by URI scheme through the
``spaseq_kb_stores`` hook; ``--kb`` values pick them:

* ``PATH`` or ``IRI=PATH``: RDF files loaded into an in-memory Oxigraph KB
  (TriG and N-Quads keep their graph names; N-Triples and Turtle go to the
  default graph, or to the named graph ``IRI``: semantics.md section 2);
* ``SCHEME:LOCATION``: the backend registered for ``SCHEME``, e.g.
  ``oxigraph:DIR``, ``rdflib:Memory``, ``sparql:http://host/sparql``.
"""

from __future__ import annotations

import os
from typing import Iterable, Iterator, Mapping

import pyoxigraph as ox

from .errors import SpaseqError

Solution = Mapping[str, object]


class KnowledgeBase:
    """What the engine asks of a KB backend."""

    #: shown by ``spaseq explain`` and ``spaseq plugins``
    description = "knowledge base"

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
        from .plugins import kb_store
        files = [s for s in specs if not _scheme(s)]
        backends = [s for s in specs if _scheme(s)]
        if backends and (files or len(backends) > 1):
            raise SpaseqError("a KB store (SCHEME:LOCATION) cannot be combined with other --kb values")
        if backends:
            scheme, location = backends[0].split(":", 1)
            return kb_store(scheme).open(location)
        kb = kb_store("oxigraph").open("")
        for spec in files:
            graph, path = split_graph_spec(spec)
            kb.load(path, graph)
        return kb


def _scheme(spec: str) -> str | None:
    """``oxigraph:DIR`` -> ``oxigraph``; paths, ``IRI=PATH`` and Windows drives -> None."""
    head, sep, _ = spec.partition(":")
    if not sep or "=" in head or "/" in head or len(head) < 2 or os.path.exists(spec):
        return None
    return head


def split_graph_spec(spec: str) -> tuple[str | None, str]:
    """``IRI=PATH`` -> (IRI, PATH); ``PATH`` -> (None, PATH)."""
    if "=" in spec and not os.path.exists(spec):
        graph, path = spec.split("=", 1)
        return graph.strip("<>"), path
    return None, spec
