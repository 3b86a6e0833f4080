"""Oxigraph KB store: in memory, or on disk (``oxigraph:DIR``), read-only for queries.

A built-in plugin: it registers the ``oxigraph`` scheme through the same
``spaseq_kb_stores`` hook third-party stores use.
"""

from __future__ import annotations

import bz2
import gzip
import os

import pyoxigraph as ox

from ..errors import SpaseqError
from ..hookspecs import KbStore, hookimpl
from ..kb import KnowledgeBase
from ..streams import reader
from ..streams.reader import TOO_LARGE_TERM, NestingCheck, term_too_large

RESERVED = "urn:spaseq:event"

RDF_FORMATS = {
    ".trig": ox.RdfFormat.TRIG, ".nq": ox.RdfFormat.N_QUADS, ".nt": ox.RdfFormat.N_TRIPLES,
    ".ttl": ox.RdfFormat.TURTLE, ".n3": ox.RdfFormat.TURTLE, ".rdf": ox.RdfFormat.RDF_XML,
    ".owl": ox.RdfFormat.RDF_XML, ".xml": ox.RdfFormat.RDF_XML,
}
COMPRESSED = {".gz": gzip.open, ".bz2": bz2.open}


def rdf_format(path: str) -> ox.RdfFormat:
    """The RDF syntax of a file, by its extension (``.gz`` and ``.bz2`` looked through)."""
    name, compression = os.path.splitext(path)
    if compression.lower() not in COMPRESSED:
        name = path
    fmt = RDF_FORMATS.get(os.path.splitext(name)[1].lower())
    if fmt is None:
        raise SpaseqError(f"{path}: unknown RDF file type (use .trig .nq .nt .ttl .rdf, or .gz, .bz2)")
    return fmt


def open_rdf_file(path: str):
    """A binary stream of an RDF file, decompressed when it ends in .gz or .bz2, past
    the UTF-8 byte order mark that may start it (editors on Windows write one, and
    pyoxigraph takes it for a term)."""
    opener = COMPRESSED.get(os.path.splitext(path)[1].lower(), open)
    stream = opener(path, "rb")
    if stream.peek(len(_BYTE_ORDER_MARK))[:len(_BYTE_ORDER_MARK)] == _BYTE_ORDER_MARK:
        stream.read(len(_BYTE_ORDER_MARK))
    return stream


_BYTE_ORDER_MARK = "\ufeff".encode()


class NestingChecked:
    """A binary stream checked as pyoxigraph reads it: a triple term nested deeper
    than ``--max-term-depth`` is an error before the parser, which recurses into
    triple terms, gets it (streams/reader.py's ``NestingCheck``)."""

    def __init__(self, stream, path: str):
        self.stream = stream
        self.path = path
        self.check = NestingCheck()

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        line = self.check.feed(data, final=not data)
        if line is not None:
            raise SpaseqError(f"{self.path}:{line}: a triple term nested more than {reader.MAX_TERM_DEPTH} "
                              "deep (--max-term-depth): the file is not read, as the RDF parser recurses "
                              "into triple terms")
        return data


def read_only_store(path: str) -> ox.Store:
    """The Oxigraph store in directory ``path``, opened read-only."""
    if not os.path.isdir(path):
        raise SpaseqError(f"no Oxigraph store at {path}")
    try:
        return ox.Store.read_only(path)
    except (OSError, RuntimeError) as e:       # (RuntimeError: RocksDB finds the store corrupt)
        raise SpaseqError(f"cannot open the Oxigraph store at {path}: {e}") from None


class OxigraphKB(KnowledgeBase):
    """A KB in a pyoxigraph Store."""

    canonical_literals = True

    def __init__(self, store: ox.Store | None = None, *, path: str | None = None):
        self.store = store if store is not None else ox.Store()
        self.path = path
        self.description = f"Oxigraph store at {path} (read-only)" if path else "Oxigraph in memory"

    @classmethod
    def open_dir(cls, path: str) -> "OxigraphKB":
        """An on-disk store, opened read-only: several queries (processes) may share it."""
        return cls(read_only_store(path), path=path)

    def load(self, path: str, graph: str | None = None) -> None:
        """Load an RDF file (optionally gzipped) into this (in-memory) KB."""
        if self.path:
            raise SpaseqError("an on-disk KB is read-only here; load it with 'spaseq kb load'")
        fmt = rdf_format(path)
        if graph and fmt in (ox.RdfFormat.TRIG, ox.RdfFormat.N_QUADS):
            raise SpaseqError(f"{path}: IRI=PATH puts triples into one graph; this file names its own")
        try:
            with open_rdf_file(path) as f:
                self.store.bulk_load(NestingChecked(f, path), fmt, to_graph=ox.NamedNode(graph) if graph else None)
        except (OSError, SyntaxError, ValueError, EOFError) as e:
            raise SpaseqError(f"cannot load KB file {path}: {e}") from None
        except MemoryError as e:
            if not term_too_large(e):
                raise
            raise SpaseqError(f"cannot load KB file {path}: {TOO_LARGE_TERM} ('spaseq kb load' rejects "
                              "such a line of an N-Triples or N-Quads file and loads the rest)") from None

    def graph_names(self) -> list[str]:
        # evaluators put events into reserved urn:spaseq: graphs of an in-memory KB's store
        return [g.value for g in self.store.named_graphs()
                if isinstance(g, ox.NamedNode) and not g.value.startswith(RESERVED)]

    def select(self, sparql: str):
        solutions = self.store.query(sparql)
        names = [v.value for v in solutions.variables]
        for solution in solutions:
            # a solution iterates its terms in the order of ``variables``, None where unbound:
            # three times faster than looking each name up (materialising a GRAPH block)
            yield {name: term for name, term in zip(names, solution) if term is not None}

    def quads(self, graph: str | None = None):
        if graph is not None:
            return self.store.quads_for_pattern(None, None, None, ox.NamedNode(graph))
        return (q for q in self.store.quads_for_pattern(None, None, None, None)
                if isinstance(q.graph_name, ox.NamedNode) and not q.graph_name.value.startswith(RESERVED))

    def working_store(self) -> ox.Store | None:
        return None if self.path else self.store


@hookimpl
def spaseq_kb_stores():

    def open_location(location: str) -> OxigraphKB:
        return OxigraphKB.open_dir(location) if location else OxigraphKB()
    return [KbStore("oxigraph", open_location,
                    "Oxigraph: 'oxigraph:' in memory, 'oxigraph:DIR' an on-disk store (read-only)")]
