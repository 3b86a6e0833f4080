"""The background knowledge base (KB) that ``GRAPH`` clauses join.

It is held in a pyoxigraph Store.  Files load as semantics.md section 2
says: TriG and N-Quads keep their graph names; N-Triples and Turtle go to
the default graph, or to the named graph the user gives (``IRI=PATH``).
``oxigraph:DIR`` opens an on-disk store read-only.
"""

from __future__ import annotations

import gzip
import os

import pyoxigraph as ox

from .errors import SpaseqError

_FORMATS = {
    ".trig": ox.RdfFormat.TRIG, ".nq": ox.RdfFormat.N_QUADS, ".nt": ox.RdfFormat.N_TRIPLES,
    ".ttl": ox.RdfFormat.TURTLE, ".n3": ox.RdfFormat.TURTLE, ".rdf": ox.RdfFormat.RDF_XML,
    ".owl": ox.RdfFormat.RDF_XML, ".xml": ox.RdfFormat.RDF_XML,
}


class KnowledgeBase:
    """A read-only view of the KB: its store and its named graphs."""

    def __init__(self, store: ox.Store | None = None):
        self.store = store if store is not None else ox.Store()
        self.on_disk = False

    @classmethod
    def from_specs(cls, specs: list[str]) -> "KnowledgeBase":
        """Build a KB from ``--kb`` values: ``PATH``, ``IRI=PATH`` or ``oxigraph:DIR``."""
        disk = [s for s in specs if s.startswith("oxigraph:") and len(s) > len("oxigraph:")]
        if disk:
            if len(specs) > 1:
                raise SpaseqError("an on-disk Oxigraph KB cannot be combined with other --kb values")
            return cls.open_oxigraph(disk[0][len("oxigraph:"):])
        kb = cls()
        for spec in specs:
            if spec == "oxigraph:":
                continue
            graph, path = _split_spec(spec)
            kb.load(path, graph)
        return kb

    @classmethod
    def open_oxigraph(cls, path: str) -> "KnowledgeBase":
        if not os.path.isdir(path):
            raise SpaseqError(f"no Oxigraph store at {path}")
        try:
            store = ox.Store.read_only(path)
        except OSError as e:
            raise SpaseqError(f"cannot open the Oxigraph store at {path}: {e}") from None
        kb = cls(store)
        kb.on_disk = True
        return kb

    def load(self, path: str, graph: str | None = None) -> None:
        """Load an RDF file (optionally gzipped) into the KB."""
        name = path[:-3] if path.endswith(".gz") else path
        fmt = _FORMATS.get(os.path.splitext(name)[1].lower())
        if fmt is None:
            raise SpaseqError(f"{path}: unknown KB file type (use .trig .nq .nt .ttl .rdf, or .gz)")
        to_graph = ox.NamedNode(graph) if graph else None
        if graph and fmt in (ox.RdfFormat.TRIG, ox.RdfFormat.N_QUADS):
            raise SpaseqError(f"{path}: IRI=PATH puts triples into one graph; {fmt} files name their own")
        try:
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rb") as f:
                self.store.bulk_load(f, fmt, base_iri=None, to_graph=to_graph)
        except (OSError, SyntaxError, ValueError) as e:
            raise SpaseqError(f"cannot load KB file {path}: {e}") from None

    @property
    def graph_names(self) -> list[ox.NamedNode | ox.BlankNode]:
        return list(self.store.named_graphs())

    def missing_graphs(self, iris) -> list[str]:
        """The GRAPH IRIs of a query that this KB does not hold (a warning)."""
        held = {g.value for g in self.graph_names if isinstance(g, ox.NamedNode)}
        return sorted(set(iris) - held)


def _split_spec(spec: str) -> tuple[str | None, str]:
    """``IRI=PATH`` -> (IRI, PATH); ``PATH`` -> (None, PATH)."""
    if "=" in spec:
        graph, path = spec.split("=", 1)
        if ":" in graph and not os.path.exists(spec):
            return graph.strip("<>"), path
    return None, spec
