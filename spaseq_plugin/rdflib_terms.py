"""Conversions between rdflib and pyoxigraph terms."""

from __future__ import annotations

import pyoxigraph as ox
from rdflib.term import BNode, Literal, URIRef


def rdflib_to_ox(term):
    """An rdflib URIRef/BNode/Literal as the equal pyoxigraph term."""
    if isinstance(term, URIRef):
        return ox.NamedNode(str(term))
    if isinstance(term, BNode):
        return ox.BlankNode(str(term))
    if isinstance(term, Literal):
        if term.language:
            return ox.Literal(str(term), language=term.language)
        if term.datatype:
            return ox.Literal(str(term), datatype=ox.NamedNode(str(term.datatype)))
        return ox.Literal(str(term))
    raise ValueError(f"not an RDF term: {term!r}")
