"""Conversions between rdflib and pyoxigraph terms."""

from __future__ import annotations

import pyoxigraph as ox
from rdflib.term import BNode, Literal, URIRef

from .language.parser import local_name


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


_ALIAS = "urn:spaseq:alias:"


def prepare_sparql(prefixes: dict[str, str], base: str | None, text: str):
    """rdflib's algebra of ``text`` under the query's prologue.

    rdflib keeps one prefix per namespace, so a query declaring two prefixes
    for one IRI (``:`` and ``pred:`` both ``<http://example/>``) would lose
    one.  Each later duplicate gets an aliased namespace here, and
    :func:`unalias` turns IRIs read from the algebra back into the real ones.
    """
    import logging

    from rdflib.plugins.sparql import prepareQuery

    seen: set[str] = set()
    lines = [f"BASE <{base}>"] if base else []
    for n, (prefix, iri) in enumerate(prefixes.items()):
        if iri in seen:
            iri = f"{_ALIAS}{n}:{iri}"
        seen.add(iri)
        lines.append(f"PREFIX {prefix}: <{iri}>")
    # rdflib logs a traceback for every ill-typed literal ("abc"^^xsd:integer); SPARQL allows them
    term_log = logging.getLogger("rdflib.term")
    level = term_log.level
    term_log.setLevel(logging.CRITICAL)
    try:
        return prepareQuery(" ".join(lines) + " " + text).algebra
    finally:
        term_log.setLevel(level)


def unalias(iri: str) -> str:
    """The real IRI of one read from :func:`prepare_sparql`'s algebra: not aliased, and
    with a prefixed name's backslash escapes taken away, as SPARQL does (rdflib keeps
    them: ``ex:a\\.b`` was ``<http://example/a\\.b>``, where Oxigraph reads ``a.b``).
    An IRI written whole holds no backslash (IRIREF refuses one)."""
    if iri.startswith(_ALIAS):
        iri = iri.split(":", 4)[4]
    return local_name(iri) if "\\" in iri else iri


def ox_to_rdflib(term):
    """A pyoxigraph NamedNode/BlankNode/Literal as the equal rdflib term
    (literals keep their exact lexical form: no rdflib normalisation)."""
    from rdflib.term import BNode as _BNode, Literal as _Literal, URIRef as _URIRef

    if isinstance(term, ox.NamedNode):
        return _URIRef(term.value)
    if isinstance(term, ox.BlankNode):
        return _BNode(term.value)
    if isinstance(term, ox.Literal):
        if term.language:
            return _Literal(term.value, lang=term.language, normalize=False)
        datatype = term.datatype.value
        if datatype == "http://www.w3.org/2001/XMLSchema#string":
            return _Literal(term.value, normalize=False)
        return _Literal(term.value, datatype=_URIRef(datatype), normalize=False)
    raise ValueError(f"not an RDF term rdflib can hold: {term!r}")
