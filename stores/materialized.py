"""Materialised GRAPH blocks as the KB (``--kb materialized:DIR``).

``spaseq kb materialize`` (:mod:`spaseq_plugin.spark.materialize`) evaluates
every ``GRAPH <iri> { ... }`` block of a query's GPMs over KB dumps with
Spark and writes each block's solutions into DIR, with a manifest.  This
store answers a run from those tables alone, without the KB::

    spaseq kb materialize query.rq --dump kb.nq.gz --out kb-blocks
    spaseq run query.rq --stream S1=power.trig --kb materialized:kb-blocks

* The SPECTRA evaluator takes a block's solutions directly
  (:meth:`MaterializedKB.block_solutions`) and indexes them as it would a
  store's answer.
* Everything else (the Oxigraph evaluator, for GPMs with OPTIONAL and the
  like) sees a sub-dataset of the KB: each block's triple patterns
  instantiated by each of its solutions.  Basic graph patterns are
  monotone, so every materialised block has exactly the same solutions on
  that sub-dataset as on the whole KB.  It is built in memory when first
  needed.

A block is known by its graph IRI and its sorted triple patterns, written
as in :func:`block_key`; :func:`graph_blocks` lists a GPM's blocks that way
for the materialiser and for the check that a query's blocks are all in
DIR (made when a run starts: a missing one is an error naming the block).

``DIR/manifest.json``::

    {"format": "spaseq-materialized-kb 1", "query": ..., "dumps": [...],
     "graphs": [block graphs present in the dumps],
     "blocks": [{"graph": IRI, "triples": [[s, p, o], ...], "text": "GRAPH <g> { ... }",
                 "gpms": ["A"], "columns": ["?h", "?n"], "files": ["blocks/0/part-....txt"],
                 "rows": 2}, ...]}

Each file holds solutions as lines of tab-separated N-Triples terms, one
column per entry of ``columns`` (``?name`` a variable, ``_:bN`` a blank node
of the pattern); with ``?c0 ?c1 ...`` as a header they are SPARQL TSV results.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property

import pyoxigraph as ox
from rdflib.plugins.sparql.parserutils import CompValue
from rdflib.term import BNode, Literal, URIRef, Variable

from ..errors import QueryError, SpaseqError
from ..language.gpm import GpmPattern
from ..hookspecs import KbStore, hookimpl
from ..kb import KnowledgeBase
from ..rdflib_terms import rdflib_to_ox, unalias
from ..evaluators.sparql_values import canonical
from .oxigraph import OxigraphKB

MANIFEST = "manifest.json"
FORMAT = "spaseq-materialized-kb 1"

Triple = tuple[str, str, str]

# rdflib algebra node -> the SPARQL a user wrote
_SPARQL_NAMES = {"Filter": "FILTER", "LeftJoin": "OPTIONAL", "Union": "UNION", "Minus": "MINUS",
                 "Extend": "BIND", "ToMultiSet": "VALUES", "values": "VALUES", "Join": "a nested group",
                 "Graph": "a nested GRAPH", "Project": "a subquery", "Group": "a subquery"}


def block_key(graph: str, patterns) -> tuple:
    """How a block is known: its graph and its triple patterns (``"?s <p> ?o"``), sorted."""
    return graph, tuple(sorted(patterns))


@dataclass(frozen=True)
class GraphBlock:
    """One ``GRAPH <graph> { BGP }`` block: triple patterns as N-Triples terms, ``?name``
    for variables, ``_:bN`` for the pattern's blank nodes (variables SELECT * does not show)."""
    graph: str
    triples: tuple[Triple, ...]

    @property
    def patterns(self) -> list[str]:
        return [" ".join(t) for t in self.triples]

    @property
    def key(self) -> tuple:
        return block_key(self.graph, self.patterns)

    @property
    def text(self) -> str:
        return f"GRAPH <{self.graph}> {{ {' . '.join(sorted(self.patterns))} }}"

    @property
    def columns(self) -> list[str]:
        """The pattern's variables and blank nodes, in order of appearance."""
        return list(dict.fromkeys(t for triple in self.triples for t in triple if _is_column(t)))


def graph_blocks(gpm: GpmPattern) -> list[GraphBlock]:
    """A GPM's GRAPH blocks, wherever they are in its pattern (OPTIONAL, UNION, EXISTS...).

    A block must be a basic graph pattern with constant predicates on a
    constant graph; any other is a QueryError saying which and why.
    """
    blocks: list[GraphBlock] = []
    _collect(gpm, gpm.algebra, blocks)
    return blocks


def _collect(gpm: GpmPattern, node, blocks: list[GraphBlock]) -> None:
    if isinstance(node, (list, tuple)):
        for item in node:
            _collect(gpm, item, blocks)
    elif isinstance(node, CompValue):
        if node.name == "Graph":
            blocks.append(_block(gpm, node))
            return
        for key, value in node.items():
            if not key.startswith("_"):
                _collect(gpm, value, blocks)


def _block(gpm: GpmPattern, node: CompValue) -> GraphBlock:
    if not isinstance(node.term, URIRef):
        raise _not_materializable(gpm, f"GRAPH {node.term.n3()}", "its graph is a variable")
    graph = unalias(str(node.term))
    body = node.p
    if not (isinstance(body, CompValue) and body.name == "BGP"):
        name = body.name if isinstance(body, CompValue) else type(body).__name__
        raise _not_materializable(gpm, f"GRAPH <{graph}>", f"{_SPARQL_NAMES.get(name, name)} inside the block")
    if not body.triples:
        raise _not_materializable(gpm, f"GRAPH <{graph}>", "the block is empty")
    blank_nodes: dict[BNode, str] = {}
    triples = []
    for s, p, o in body.triples:
        if not isinstance(p, URIRef):
            raise _not_materializable(gpm, f"GRAPH <{graph}>", "a variable predicate or a property path")
        triples.append((_text(s, blank_nodes), _text(p, blank_nodes), _text(o, blank_nodes)))
    return GraphBlock(graph, tuple(triples))


def _text(term, blank_nodes: dict[BNode, str]) -> str:
    """A pattern term as the SPECTRA evaluator writes it (constants canonical, as Oxigraph stores them)."""
    if isinstance(term, Variable):
        return "?" + str(term)
    if isinstance(term, BNode):          # rdflib's labels are random: number them in order
        return blank_nodes.setdefault(term, f"_:b{len(blank_nodes)}")
    if isinstance(term, URIRef):
        return str(ox.NamedNode(unalias(str(term))))
    if isinstance(term, Literal):
        return str(canonical(rdflib_to_ox(term)))
    raise QueryError(f"unexpected term {term!r} in a GRAPH block")


def _is_column(term: str) -> bool:
    return term.startswith(("?", "_:"))


def _not_materializable(gpm: GpmPattern, block: str, why: str) -> QueryError:
    return QueryError(f"GPM {gpm.name}: {block} cannot be materialised: {why} (materialisation takes "
                      "GRAPH <iri> { triple patterns with constant predicates }; "
                      "use a KB store, --kb, for this query)", gpm.pos.line, gpm.pos.column)


class MaterializedKB(KnowledgeBase):
    """The KB as ``spaseq kb materialize`` left it in a directory (see the module docstring)."""

    def __init__(self, directory: str):
        self.directory = directory
        path = os.path.join(directory, MANIFEST)
        try:
            with open(path, encoding="utf-8") as f:
                manifest = json.load(f)
        except FileNotFoundError:
            raise SpaseqError(f"{directory}: no {MANIFEST}; write one with 'spaseq kb materialize'") from None
        except (OSError, ValueError) as e:
            raise SpaseqError(f"cannot read {path}: {e}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise SpaseqError(f"{path} is not a manifest of 'spaseq kb materialize' ({FORMAT})")
        self.manifest = manifest
        self._blocks = {block_key(b["graph"], (" ".join(t) for t in b["triples"])): b
                        for b in manifest["blocks"]}
        self._rows: dict[tuple, list[tuple]] = {}
        self.description = f"materialised GRAPH blocks in {directory} ({_blocks(len(self._blocks))})"

    # -- what the evaluators ask -----------------------------------------------------------

    def block_solutions(self, graph: str, patterns: list[str]) -> list[dict[str, object]] | None:
        """The solutions of ``GRAPH <graph> { patterns }`` (patterns as ``"?s <p> ?o"``), or
        None when the block is not materialised here."""
        key = block_key(graph, patterns)
        block = self._blocks.get(key)
        if block is None:
            return None
        named = [(i, c[1:]) for i, c in enumerate(block["columns"]) if c.startswith("?")]
        return [{name: row[i] for i, name in named} for row in self._block_rows(key)]

    def check_query(self, gpms) -> None:
        """A SpaseqError unless every GRAPH block of these GPMs is materialised here."""
        for gpm in gpms:
            for block in graph_blocks(gpm):
                if block.key not in self._blocks:
                    raise SpaseqError(
                        f"GPM {gpm.name}: {block.text} is not materialised in {self.directory} (it holds "
                        f"{_blocks(len(self._blocks))} of {self.manifest.get('query') or 'another query'}); "
                        "run 'spaseq kb materialize' for this query")

    def graph_names(self) -> list[str]:
        return list(self.manifest["graphs"])

    def select(self, sparql: str):
        return self._dataset.select(sparql)

    def quads(self, graph: str | None = None):
        return self._dataset.quads(graph)

    def working_store(self) -> ox.Store | None:
        return self._dataset.store

    # -- reading the tables ------------------------------------------------------------------

    def _block_rows(self, key: tuple) -> list[tuple]:
        """A block's solutions, as tuples of terms in column order (read once)."""
        rows = self._rows.get(key)
        if rows is None:
            block = self._blocks[key]
            width = len(block["columns"])
            if not width:        # a block of constant triples: one empty solution, or none
                rows = [()] * block["rows"]
            else:
                header = "\t".join(f"?c{i}" for i in range(width)).encode() + b"\n"
                rows = []
                for name in block["files"]:
                    path = os.path.join(self.directory, name)
                    try:
                        with open(path, "rb") as f:
                            data = f.read()
                        solutions = ox.parse_query_results(header + data, ox.QueryResultsFormat.TSV)
                        rows += [tuple(s[i] for i in range(width)) for s in solutions]
                    except (OSError, SyntaxError) as e:
                        raise SpaseqError(f"cannot read the block table {path}: {e}") from None
            self._rows[key] = rows
        return rows

    @cached_property
    def _dataset(self) -> OxigraphKB:
        """The sub-dataset: every block's triple patterns instantiated by its solutions."""
        kb = OxigraphKB()
        for key, block in self._blocks.items():
            graph = ox.NamedNode(block["graph"])
            columns = {c: i for i, c in enumerate(block["columns"])}
            templates = [_template(triple, columns) for triple in block["triples"]]
            kb.store.bulk_extend(
                ox.Quad(*(row[t] if isinstance(t, int) else t for t in template), graph)
                for row in self._block_rows(key) for template in templates)
        return kb


def _blocks(n: int) -> str:
    return f"{n} block" + "s" * (n != 1)


def _template(triple: list[str], columns: dict[str, int]) -> list:
    """A triple pattern with column numbers for its variables and pyoxigraph terms for its constants."""
    placeholder = "<urn:spaseq:constant>"
    line = " ".join(placeholder if _is_column(t) else t for t in triple) + " ."
    parsed = next(ox.parse(line.encode(), ox.RdfFormat.N_TRIPLES))
    return [columns[t] if _is_column(t) else term
            for t, term in zip(triple, (parsed.subject, parsed.predicate, parsed.object))]


@hookimpl
def spaseq_kb_stores():
    return [KbStore("materialized", MaterializedKB,
                    "materialised GRAPH blocks: 'materialized:DIR' as 'spaseq kb materialize' wrote it")]


@hookimpl
def spaseq_query_started(engine):
    # A block missing from DIR would silently match less than the KB holds: refuse to start.
    if isinstance(engine.kb, MaterializedKB):
        engine.kb.check_query(engine.compiled.gpms.values())
