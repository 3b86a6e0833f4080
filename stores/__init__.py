"""KB backends (Oxigraph, rdflib, SPARQL endpoints, materialised tables) and bulk loading.

:func:`knowledge_base` is what the Engine and the rdflib processor accept as
a KB: a :class:`~spaseq_plugin.kb.KnowledgeBase`, a pyoxigraph ``Store``, an
rdflib ``Dataset`` or ``Graph``, or ``--kb`` style specs.
"""

from __future__ import annotations

from ..kb import KnowledgeBase


def knowledge_base(kb) -> tuple[KnowledgeBase, bool]:
    """(the :class:`KnowledgeBase` for ``kb``, whether it was opened here from specs,
    so that its user must close it).

    An rdflib Dataset (its named graphs are the KB's graphs), an rdflib Graph
    (one named graph, named by its identifier), a pyoxigraph Store, a
    KnowledgeBase, or ``--kb`` style specs (a string or a list of strings).
    """
    import pyoxigraph as ox
    from rdflib import Graph
    if isinstance(kb, KnowledgeBase):
        return kb, False
    if isinstance(kb, Graph):
        from .rdflib_store import RdflibKB
        return RdflibKB(kb), False
    if isinstance(kb, ox.Store):
        from .oxigraph import OxigraphKB
        return OxigraphKB(kb), False
    if isinstance(kb, str):
        return KnowledgeBase.from_specs([kb]), True
    if isinstance(kb, (list, tuple)) and all(isinstance(s, str) for s in kb):
        return KnowledgeBase.from_specs(list(kb)), True
    raise TypeError(f"kb must be a KnowledgeBase, a pyoxigraph Store, an rdflib Dataset or Graph, "
                    f"or --kb specs, not {type(kb).__name__}")


def as_knowledge_base(kb) -> KnowledgeBase:
    """The :class:`KnowledgeBase` for what :func:`knowledge_base` accepts."""
    return knowledge_base(kb)[0]
