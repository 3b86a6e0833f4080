"""The plugin manager: built-in and third-party stores, sources and sinks.

As in pytest and datasette: one :mod:`~spaseq_plugin.hookspecs` module, the
built-in features registered as default plugins through the same hooks a
third party uses, third-party plugins loaded from the ``spaseq`` entry-point
group, and ``check_pending()`` so that a misspelt hook is an error.

>>> from spaseq_plugin.plugins import kb_store, stream_source, result_sink
>>> kb_store("oxigraph").scheme, stream_source("file").scheme, result_sink("jsonl").name
('oxigraph', 'file', 'jsonl')
"""

from __future__ import annotations

import importlib
import importlib.metadata
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import pluggy

from . import hookspecs
from .errors import SpaseqError
from .hookspecs import KbStore, ResultSink, StreamSource  # re-exported: plugins import them from here

# The built-in plugins, registered exactly like third-party ones.
DEFAULT_PLUGINS = (
    "spaseq_plugin.stores.oxigraph",
    "spaseq_plugin.stores.rdflib_store",
    "spaseq_plugin.stores.sparql_endpoint",
    "spaseq_plugin.stores.materialized",
    "spaseq_plugin.streams.files",
    "spaseq_plugin.streams.network",
    "spaseq_plugin.streams.mqtt",
    "spaseq_plugin.output.sinks",
    "spaseq_plugin.output.formats",
)


@dataclass
class Registry:
    stores: dict[str, KbStore] = field(default_factory=dict)
    sources: dict[str, StreamSource] = field(default_factory=dict)
    sinks: dict[str, ResultSink] = field(default_factory=dict)
    functions: dict[str, Callable] = field(default_factory=dict)
    provided_by: dict[str, list[str]] = field(default_factory=dict)


@lru_cache(maxsize=1)
def plugin_manager() -> pluggy.PluginManager:
    """The process's plugin manager: defaults, then entry points, checked."""
    pm = pluggy.PluginManager("spaseq")
    pm.add_hookspecs(hookspecs)
    for name in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(name), name=name)
    pm.load_setuptools_entrypoints("spaseq")
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as e:
        raise SpaseqError(f"a plugin implements a hook that does not exist: {e}") from None
    return pm


@lru_cache(maxsize=1)
def registry() -> Registry:
    """What the plugins provide, by scheme and name (first registration wins: later plugins
    override earlier ones, as pluggy calls the last registered first)."""
    pm = plugin_manager()
    reg = Registry()
    for impl in pm.hook.spaseq_kb_stores.get_hookimpls()[::-1]:
        for store in impl.function() or ():
            reg.stores[store.scheme] = store
            reg.provided_by.setdefault(impl.plugin_name, []).append(f"KB store {store.scheme}:")
    for impl in pm.hook.spaseq_stream_sources.get_hookimpls()[::-1]:
        for source in impl.function() or ():
            reg.sources[source.scheme] = source
            reg.provided_by.setdefault(impl.plugin_name, []).append(f"stream source {source.scheme}:")
    for impl in pm.hook.spaseq_result_sinks.get_hookimpls()[::-1]:
        for sink in impl.function() or ():
            reg.sinks[sink.name] = sink
            reg.provided_by.setdefault(impl.plugin_name, []).append(f"sink {sink.name}")
    for impl in pm.hook.spaseq_sparql_functions.get_hookimpls()[::-1]:
        for iri, function in (impl.function() or {}).items():
            reg.functions[iri] = function
            reg.provided_by.setdefault(impl.plugin_name, []).append(f"function <{iri}>")
    return reg


def kb_store(scheme: str) -> KbStore:
    try:
        return registry().stores[scheme]
    except KeyError:
        known = ", ".join(sorted(registry().stores))
        raise SpaseqError(f"no KB store for scheme {scheme!r} (installed: {known})") from None


def stream_source(scheme: str) -> StreamSource:
    try:
        return registry().sources[scheme]
    except KeyError:
        known = ", ".join(sorted(registry().sources))
        raise SpaseqError(f"no stream source for scheme {scheme!r} (installed: {known})") from None


def result_sink(name: str) -> ResultSink:
    try:
        return registry().sinks[name]
    except KeyError:
        known = ", ".join(sorted(registry().sinks))
        raise SpaseqError(f"no result sink {name!r} (installed: {known})") from None


def sparql_functions() -> dict:
    """Custom FILTER functions, as pyoxigraph ``custom_functions``."""
    import pyoxigraph as ox
    return {ox.NamedNode(iri): f for iri, f in registry().functions.items()}


def plugin_list() -> list[dict]:
    """What ``spaseq plugins`` shows: name, version, what it provides."""
    pm = plugin_manager()
    dists = {id(plugin): dist for plugin, dist in pm.list_plugin_distinfo()}
    out = []
    for name, plugin in pm.list_name_plugin():
        dist = dists.get(id(plugin))
        version = dist.version if dist is not None else _own_version()
        package = dist.project_name if dist is not None else "spaseq-plugin (built in)"
        out.append({"name": name, "package": package, "version": version,
                    "provides": registry().provided_by.get(name, [])})
    return out


def _own_version() -> str:
    return importlib.metadata.version("spaseq-plugin")


def call_configure(config: dict) -> None:
    plugin_manager().hook.spaseq_configure(config=config)


def call_started(engine) -> None:
    plugin_manager().hook.spaseq_query_started(engine=engine)


def call_stopped(engine) -> None:
    plugin_manager().hook.spaseq_query_stopped(engine=engine)
