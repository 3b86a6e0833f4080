"""SPASEQ: complex event processing over RDF graph streams.

The pipeline is parse -> compile -> run: :func:`compile_query` turns SPASEQ
text into an automaton (:mod:`.language`), :class:`Engine` runs it over
graph events (:mod:`.runtime`), matching each GPM with an evaluator
(:mod:`.evaluators`) and joining GRAPH clauses against a
:class:`KnowledgeBase`; stores, stream sources and result sinks plug in
through the hooks of :mod:`.hookspecs` (``docs/architecture.md``).
"""

from importlib.metadata import PackageNotFoundError, version

from . import compiled

compiled.install()      # before any hot module is imported: compiled builds only when current

from .errors import EventError, LimitError, QueryError, SpaseqError, UsageError
from .events import Event
from .hookspecs import KbStore, ResultSink, StreamSource, hookimpl
from .kb import KnowledgeBase
from .language.compiler import CompiledQuery, compile_query
from .language.limits import QueryLimits
from .runtime.engine import Engine, RunStats
from .runtime.nfa_runtime import StateLimits
from .runtime.results import Result
from .stores.rdflib_store import RdflibKB

try:
    __version__ = version("spaseq-plugin")
except PackageNotFoundError:        # run from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "CompiledQuery", "Engine", "Event", "EventError", "KbStore", "KnowledgeBase", "LimitError", "QueryError",
    "QueryLimits", "RdflibKB", "Result", "ResultSink", "RunStats", "SpaseqError", "StateLimits", "StreamSource",
    "UsageError",
    "compile_query", "hookimpl",
]
