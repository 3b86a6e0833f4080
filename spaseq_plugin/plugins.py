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
import logging
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

log = logging.getLogger(__name__)


@dataclass
class Registry:
    stores: dict[str, KbStore] = field(default_factory=dict)
    sources: dict[str, StreamSource] = field(default_factory=dict)
    sinks: dict[str, ResultSink] = field(default_factory=dict)
    functions: dict[str, Callable] = field(default_factory=dict)
    provided_by: dict[str, list[str]] = field(default_factory=dict)
    #: per plugin, what it provides that another plugin's replaces: {"stream source file:": "other"}
    replaced: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class PluginInfo:
    """Where a plugin comes from: its entry-point name, what the entry point loads, its package."""
    name: str
    module: str
    package: str | None         # None: built in
    version: str


@dataclass
class _Plugins:
    manager: pluggy.PluginManager
    info: dict[str, PluginInfo]     # by name, in registration order


@lru_cache(maxsize=1)
def _plugins() -> _Plugins:
    pm = pluggy.PluginManager("spaseq")
    pm.add_hookspecs(hookspecs)
    plugins = _Plugins(pm, {})
    for name in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(name), name=name)
        plugins.info[name] = PluginInfo(name, name, None, _own_version())
    for entry_point, dist in _entry_points():
        pm.register(entry_point.load(), name=entry_point.name)
        plugins.info[entry_point.name] = PluginInfo(entry_point.name, entry_point.value,
                                                    dist.metadata["Name"], dist.version)
    return plugins


def _entry_points() -> list[tuple[importlib.metadata.EntryPoint, importlib.metadata.Distribution]]:
    """The ``spaseq`` entry points, sorted by name: the order they are registered in, so
    that which of two plugins wins does not depend on where each is installed.  Of two
    with one name, the first on ``sys.path`` (as ``import`` would take)."""
    found: dict[str, tuple] = {}
    for dist in importlib.metadata.distributions():
        for entry_point in dist.entry_points:
            if entry_point.group == "spaseq":
                found.setdefault(entry_point.name, (entry_point, dist))
    return [found[name] for name in sorted(found)]


@lru_cache(maxsize=1)
def plugin_manager() -> pluggy.PluginManager:
    """The process's plugin manager: defaults, then entry points, checked."""
    pm = _plugins().manager
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as e:
        raise SpaseqError(f"a plugin implements a hook that does not exist: {e}") from None
    return pm


@lru_cache(maxsize=1)
def registry() -> Registry:
    """What the plugins provide, by scheme and name.  Of two plugins providing one, the
    later registered wins (pluggy calls it first): an installed plugin replaces a
    built-in; of two installed ones, the one whose entry-point name sorts later."""
    pm = plugin_manager()
    reg = Registry()
    owner: dict[str, str] = {}          # what -> the plugin whose claim is in effect

    def claim(plugin: str, what: str) -> None:
        previous = owner.get(what)
        if previous is not None and previous != plugin and _plugins().info[previous].package is not None:
            log.warning("%s is provided by two plugins, %s and %s: %s's is used (of two installed "
                        "plugins, the one whose entry-point name sorts later; docs/plugins.md)",
                        what, _describe(previous), _describe(plugin), plugin)
        owner[what] = plugin
        reg.provided_by.setdefault(plugin, []).append(what)

    for impl in pm.hook.spaseq_kb_stores.get_hookimpls():
        for store in impl.function() or ():
            reg.stores[store.scheme] = store
            claim(impl.plugin_name, f"KB store {store.scheme}:")
    for impl in pm.hook.spaseq_stream_sources.get_hookimpls():
        for source in impl.function() or ():
            reg.sources[source.scheme] = source
            claim(impl.plugin_name, f"stream source {source.scheme}:")
    for impl in pm.hook.spaseq_result_sinks.get_hookimpls():
        for sink in impl.function() or ():
            reg.sinks[sink.name] = sink
            claim(impl.plugin_name, f"sink {sink.name}")
    for impl in pm.hook.spaseq_sparql_functions.get_hookimpls():
        for iri, function in (impl.function() or {}).items():
            reg.functions[iri] = function
            claim(impl.plugin_name, f"function <{iri}>")
    for plugin, provided in reg.provided_by.items():
        for what in provided:
            if owner[what] != plugin:
                reg.replaced.setdefault(plugin, {})[what] = owner[what]
    return reg


def _describe(name: str) -> str:
    """``plugin NAME (module M, package P V)``, or ``built-in plugin NAME``."""
    info = _plugins().info[name]
    if info.package is None:
        return f"built-in plugin {name}"
    return f"plugin {name} (module {info.module}, package {info.package} {info.version})"


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
    """What ``spaseq plugins`` shows: name, version, what it provides, and which of
    those another plugin replaces (``replaced``: what -> the plugin whose is used)."""
    plugin_manager()
    reg = registry()
    return [{"name": info.name, "package": info.package or "spaseq-plugin (built in)",
             "version": info.version, "provides": reg.provided_by.get(info.name, []),
             "replaced": reg.replaced.get(info.name, {})}
            for info in _plugins().info.values()]


def _own_version() -> str:
    return importlib.metadata.version("spaseq-plugin")


def call_configure(config: dict) -> None:
    plugin_manager().hook.spaseq_configure(config=config)


def call_started(engine) -> None:
    plugin_manager().hook.spaseq_query_started(engine=engine)


def call_stopped(engine) -> None:
    plugin_manager().hook.spaseq_query_stopped(engine=engine)
