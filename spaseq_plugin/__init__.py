"""SPASEQ: complex event processing over RDF graph streams.

The pipeline is parse -> compile -> run: :func:`compile_query` turns SPASEQ
text into an automaton, :class:`Engine` runs it over graph events.
"""

from .compiler import CompiledQuery, compile_query
from .engine import Engine, RunStats
from .errors import EventError, QueryError, SpaseqError
from .events import Event
from .hookspecs import hookimpl
from .kb import KnowledgeBase
from .stores.rdflib_store import RdflibKB
from .results import Result

__version__ = "0.1.0"

__all__ = [
    "CompiledQuery", "Engine", "Event", "EventError", "KnowledgeBase", "QueryError", "RdflibKB", "Result",
    "RunStats", "SpaseqError", "compile_query", "hookimpl",
]
