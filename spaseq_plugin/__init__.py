"""SPASEQ: complex event processing over RDF graph streams.

The pipeline is parse -> compile -> run: :func:`compile_query` turns SPASEQ
text into an automaton (:mod:`.language`), :class:`Engine` runs it over
graph events (:mod:`.runtime`), matching each GPM with an evaluator
(:mod:`.evaluators`) and joining GRAPH clauses against a
:class:`KnowledgeBase`; stores, stream sources and result sinks plug in
through the hooks of :mod:`.hookspecs` (``docs/architecture.md``).
"""

import importlib

from . import compiled

compiled.install()      # before any hot module is imported: compiled builds only when current

# The names below are imported when first used, not here: every module of the
# package imports this one first, and the ``spaseq`` command must take a stop
# signal before its imports, a third of a second (cli/__init__.py).
_EXPORTS = {
    "EventError": "errors", "LimitError": "errors", "QueryError": "errors", "SpaseqError": "errors",
    "UsageError": "errors", "Event": "events", "KbStore": "hookspecs", "ResultSink": "hookspecs",
    "StreamSource": "hookspecs", "hookimpl": "hookspecs", "KnowledgeBase": "kb",
    "CompiledQuery": "language.compiler", "compile_query": "language.compiler", "QueryLimits": "language.limits",
    "Engine": "runtime.engine", "RunStats": "runtime.engine", "StateLimits": "runtime.nfa_runtime",
    "Result": "runtime.results", "RdflibKB": "stores.rdflib_store",
}

__all__ = [
    "CompiledQuery", "Engine", "Event", "EventError", "KbStore", "KnowledgeBase", "LimitError", "QueryError",
    "QueryLimits", "RdflibKB", "Result", "ResultSink", "RunStats", "SpaseqError", "StateLimits", "StreamSource",
    "UsageError",
    "compile_query", "hookimpl",
]


def __getattr__(name: str):
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version
        try:
            value = version("spaseq-plugin")
        except PackageNotFoundError:        # run from a source tree that is not installed
            value = "0+unknown"
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS, "__version__"])
