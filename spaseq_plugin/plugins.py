"""The plugin manager: built-in and third-party stores, sources and sinks.

As in pytest and datasette: one :mod:`~spaseq_plugin.hookspecs` module, the
built-in features registered as default plugins through the same hooks a
third party uses, third-party plugins loaded from the ``spaseq`` entry-point
group, and ``check_pending()`` so that a misspelt hook is an error.  A
third-party plugin that fails (cannot be loaded, implements a hook wrongly,
raises in one, returns what it should not) is a :class:`PluginError` naming
it and the hook; ``spaseq plugins`` lists the others and names it.  So is an
error in what it provides, called later: the stores, sources and sinks of a
third-party plugin are registered wrapped (:func:`_guarded`), so that an
error raised by their ``open()``, by what that returns (a source's events, a
writer's ``write()``; a KB's ``select()``..., wrapped by
``KnowledgeBase.from_specs``) names the plugin and the call.

>>> from spaseq_plugin.plugins import kb_store, stream_source, result_sink
>>> kb_store("oxigraph").scheme, stream_source("file").scheme, result_sink("jsonl").name
('oxigraph', 'file', 'jsonl')
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import types
import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterator

import pluggy

from . import hookspecs
from .errors import PluginError, SpaseqError
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
    #: per plugin, what is wrong with its answers (left out of the tables)
    problems: dict[str, list[str]] = field(default_factory=dict)


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
    info: dict[str, PluginInfo]     # by name, in registration order (a broken plugin too)
    problems: dict[str, list[str]] = field(default_factory=dict)    # by plugin: what is wrong with it


@lru_cache(maxsize=1)
def _plugins() -> _Plugins:
    """Every plugin, registered; a third-party one that cannot be is left out, its problem kept."""
    pm = pluggy.PluginManager("spaseq")
    pm.add_hookspecs(hookspecs)
    plugins = _Plugins(pm, {})
    for name in DEFAULT_PLUGINS:        # (a failure here is spaseq's own)
        pm.register(importlib.import_module(name), name=name)
        plugins.info[name] = PluginInfo(name, name, None, _own_version())
    for entry_point, dist in _entry_points():
        name = entry_point.name
        plugins.info[name] = PluginInfo(name, entry_point.value, dist.metadata["Name"], dist.version)
        try:
            plugin = entry_point.load()
        except Exception as e:
            plugins.problems[name] = [f"cannot be loaded: {type(e).__name__}: {e}"]
            continue
        try:
            pm.register(plugin, name=name)
        except (pluggy.PluginValidationError, ValueError) as e:    # (ValueError: registered already)
            plugins.problems[name] = ["cannot be registered: " + "; ".join(str(e).splitlines())]
    # check_pending() names one plugin at a time: each is left out in turn, to name them all.
    while True:
        try:
            pm.check_pending()
            break
        except pluggy.PluginValidationError as e:
            name = pm.get_name(e.plugin)
            unknown = sorted(hook.name for hook in pm.get_hookcallers(e.plugin) or () if not hook.has_spec())
            plugins.problems.setdefault(name, []).append(
                f"implements {', '.join(unknown)}, which is not a spaseq hook (the hooks: docs/plugins.md)")
            pm.unregister(e.plugin)
    # (pluggy still calls each implementation: its order, hook wrappers and propagation stay its own)
    for hook in _CALLED_HOOKS:
        for impl in getattr(pm.hook, hook).get_hookimpls():
            impl.function = _naming_its_plugin(impl)
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


def plugin_manager() -> pluggy.PluginManager:
    """The process's plugin manager: defaults, then entry points, checked.  Raises
    :class:`PluginError` naming a plugin that cannot be loaded or implements a hook wrongly."""
    _raise_problems(_plugins().problems)
    return _plugins().manager


def registry() -> Registry:
    """What the plugins provide, by scheme and name.  Of two plugins providing one, the
    later registered wins (pluggy calls it first): an installed plugin replaces a
    built-in; of two installed ones, the one whose entry-point name sorts later.
    Raises :class:`PluginError` naming a plugin whose hook failed or returned what it should not."""
    plugin_manager()
    _raise_problems(_registry().problems)
    return _registry()


def plugin_problems() -> list[str]:
    """What is wrong with the installed plugins, each message naming its plugin."""
    found = {**_plugins().problems}
    for name, problems in _registry().problems.items():
        found.setdefault(name, []).extend(problems)
    return [f"{_describe(name)} {problem}" for name, problems in found.items() for problem in problems]


def _raise_problems(problems: dict[str, list[str]]) -> None:
    if problems:
        name, [first, *_] = next(iter(problems.items()))
        others = sum(map(len, problems.values())) - 1
        also = f" (and {others} more problem(s) with plugins: 'spaseq plugins' lists them)" if others else ""
        raise PluginError(f"{_describe(name)} {first}{also}")


# hook -> (the class of what it returns, the Registry table, the key, how `spaseq plugins` shows it,
# how an error in what it provides names it)
_PROVIDERS = (
    ("spaseq_kb_stores", KbStore, "stores", "scheme", "KB store {}:", "KB store '{}:'"),
    ("spaseq_stream_sources", StreamSource, "sources", "scheme", "stream source {}:", "stream source '{}:'"),
    ("spaseq_result_sinks", ResultSink, "sinks", "name", "sink {}", "result sink '{}'"),
)


@lru_cache(maxsize=1)
def _registry() -> Registry:
    """The registry, with the problems of the plugins whose hooks failed (their answers left out)."""
    pm = _plugins().manager
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

    for hook, kind, table, key, label, called in _PROVIDERS:
        for impl in getattr(pm.hook, hook).get_hookimpls():
            third_party = _plugins().info[impl.plugin_name].package is not None
            for item in _answer(reg, impl, hook, kind):
                name = getattr(item, key)
                # (built-in ones are spaseq's own code: their errors keep their own messages)
                getattr(reg, table)[name] = _guarded(item, impl.plugin_name, called.format(name)) \
                    if third_party else item
                claim(impl.plugin_name, label.format(name))
    for impl in pm.hook.spaseq_sparql_functions.get_hookimpls():
        third_party = _plugins().info[impl.plugin_name].package is not None
        for iri, function in _answer(reg, impl, "spaseq_sparql_functions", dict):
            reg.functions[iri] = _guarded_function(function, impl.plugin_name, iri) if third_party else function
            claim(impl.plugin_name, f"function <{iri}>")
    for plugin, provided in reg.provided_by.items():
        for what in provided:
            if owner[what] != plugin:
                reg.replaced.setdefault(plugin, {})[what] = owner[what]
    return reg


def _answer(reg: Registry, impl, hook: str, kind: type) -> list:
    """What one plugin's ``hook`` returns: objects of class ``kind`` (for ``dict``, its
    IRI-function pairs); [] with the problem kept if it fails or returns something else."""
    try:
        answer = impl.function()
    except Exception as e:
        reg.problems.setdefault(impl.plugin_name, []).append(f"failed in {hook}: {type(e).__name__}: {e}")
        return []
    if answer is None:
        return []
    if kind is dict:
        if isinstance(answer, dict) and all(isinstance(iri, str) and callable(f) for iri, f in answer.items()):
            return list(answer.items())
        expected = "a dict of function IRI (a str) -> callable"
    else:
        if isinstance(answer, (list, tuple)) and all(isinstance(item, kind) for item in answer):
            return list(answer)
        expected = f"a list of {kind.__name__} objects"
    got = type(answer).__name__ if not isinstance(answer, (list, tuple)) else \
        f"a {type(answer).__name__} holding {', '.join(sorted({type(x).__name__ for x in answer}))}"
    reg.problems.setdefault(impl.plugin_name, []).append(f"returned {got} from {hook}, not {expected}")
    return []


def _describe(name: str) -> str:
    """``plugin NAME (module M, package P V)``, or ``built-in plugin NAME``."""
    info = _plugins().info[name]
    if info.package is None:
        return f"built-in plugin {name}"
    return f"plugin {name} (module {info.module}, package {info.package} {info.version})"


# -- what third-party plugins provide, guarded --------------------------------------------

# Errors that pass through a guard as they are: spaseq's own (a plugin may raise them to
# report a user's mistake, a source an EventError) and running out of memory.
_PASSED = (SpaseqError, MemoryError)
_PASSED_BY_NEXT = (StopIteration, *_PASSED)


def _guarded(item, plugin: str, called: str):
    """A copy of ``item`` (a third-party plugin's KbStore, StreamSource or ResultSink)
    whose ``open()``, and the methods of what that returns, raise a :class:`PluginError`
    naming ``plugin`` and the call (``called``: "stream source 'counter:'") for any error
    but those of ``_PASSED``."""
    guard = _Guard(plugin, called)
    opener = item.open
    # (a KB store's knowledge base is wrapped by KnowledgeBase.from_specs, in kb.py: the
    # KnowledgeBase class is there, and kb.py imports this module)
    wrap = guard.source if isinstance(item, StreamSource) else \
        guard.writer if isinstance(item, ResultSink) else None

    def open(*args, **kwargs):
        opened = guard.call(opener, "open()", *args, **kwargs)
        return opened if wrap is None else wrap(opened)

    open.__wrapped__ = opener
    open.guard = guard                  # (guard_of)
    return dataclasses.replace(item, open=open)     # (of its class, which may be a subclass)


# A third-party FILTER function's failure, kept until the evaluator that ran the query
# asks (raise_function_failure): pyoxigraph takes an exception for an error value.
_function_failures: list[PluginError] = []


def _guarded_function(function: Callable, plugin: str, iri: str) -> Callable:
    """``function`` (a third-party plugin's FILTER function, which returns None for an
    error value), whose exception is kept as a :class:`PluginError` naming the plugin
    and the function, for :func:`raise_function_failure`, instead of passing for an
    error value in the FILTER: a bug in a plugin would otherwise drop matches unseen."""
    guard = _Guard(plugin, f"FILTER function <{iri}>")

    def called(*arguments):
        try:
            return function(*arguments)
        except Exception as e:
            if not _function_failures:
                error = guard.error("called", e)
                error.__cause__ = e
                _function_failures.append(error)
            return None
    called.__wrapped__ = function
    return called


def raise_function_failure() -> None:
    """Raise the :class:`PluginError` of a third-party FILTER function that raised in a
    query run since the last call, if one did (then it is forgotten)."""
    if _function_failures:
        raise _function_failures.pop()


def guard_of(provided) -> _Guard | None:
    """The guard of a third-party plugin's KbStore, StreamSource or ResultSink as the
    registry holds it (``call``, ``items``, ``attribute``); None for a built-in's."""
    return getattr(provided.open, "guard", None)


@dataclass(frozen=True)
class _Guard:
    plugin: str
    called: str         # what the plugin provided: "stream source 'counter:'"

    def error(self, doing: str, error: Exception) -> PluginError:
        return PluginError(f"{_describe(self.plugin)} failed in {self.called} {doing}: "
                           f"{type(error).__name__}: {error}")

    def call(self, function: Callable, doing: str, *args, **kwargs):
        try:
            return function(*args, **kwargs)
        except _PASSED:
            raise
        except Exception as e:
            raise self.error(doing, e) from e

    def items(self, iterable, doing: str) -> Iterator:
        """The items of ``iterable``, read through one ``try`` around the whole loop (not
        one per item); closing this closes it, as closing ``iterable`` would (``yield from``)."""
        try:
            yield from iterable
        except _PASSED:
            raise
        except Exception as e:
            raise self.error(doing, e) from e

    def source(self, events):
        """A source's iterator: a generator stays one (merge_arrival and aiter_blocking
        close a generator otherwise than an object); an object keeps its methods
        (stop_reading, close, commit...)."""
        if isinstance(events, types.GeneratorType):
            return self.items(events, "reading events")
        return _GuardedSource(events, self)

    def writer(self, writer):
        return _GuardedWriter(writer, self)

    def attribute(self, target, name: str):
        """``target``'s attribute ``name``; a method guarded, named ``name()``."""
        value = getattr(target, name)
        if not callable(value) or name.startswith("__"):
            return value

        def method(*args, **kwargs):
            return self.call(value, f"{name}()", *args, **kwargs)
        return method


class _Provided:
    """What a third-party plugin's ``open()`` returned: its attributes are the object's,
    its methods raise :class:`PluginError` naming the plugin (``_Guard.call``)."""

    def __init__(self, target, guard: _Guard):
        self._target = target
        self._guard = guard

    def __getattr__(self, name: str):
        if name in ("_target", "_guard", "_iterator"):     # (not set yet: copy, pickle)
            raise AttributeError(name)
        return self._guard.attribute(self._target, name)

    def __repr__(self) -> str:
        return f"<{self._guard.called} of plugin {self._guard.plugin}: {self._target!r}>"


class _GuardedSource(_Provided):
    """A source's iterator that is not a generator: an iterator itself (``iter()`` of
    it is it: closing what a consumer iterates closes the source), its ``__next__`` the
    one Python call per event that a third-party object source costs."""

    def __init__(self, target, guard: _Guard):
        super().__init__(target, guard)
        self._iterator = guard.call(iter, "open()", target)

    def __iter__(self) -> _GuardedSource:
        return self

    def __next__(self):
        try:
            return next(self._iterator)
        except _PASSED_BY_NEXT:
            raise
        except Exception as e:
            raise self._guard.error("reading events", e) from e


class _GuardedWriter(_Provided):
    """A sink's writer; ``write`` without ``__getattr__``'s closure per result."""

    def write(self, result) -> None:
        try:
            return self._target.write(result)
        except _PASSED:
            raise
        except Exception as e:
            raise self._guard.error("write()", e) from e


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
    """What ``spaseq plugins`` shows: name, version, what it provides, which of those
    another plugin replaces (``replaced``: what -> the plugin whose is used), and what
    is wrong with it (``problems``; its plugin is named by the listing)."""
    reg = _registry()
    return [{"name": info.name, "package": info.package or "spaseq-plugin (built in)",
             "version": info.version, "provides": reg.provided_by.get(info.name, []),
             "replaced": reg.replaced.get(info.name, {}),
             "problems": _plugins().problems.get(info.name, []) + reg.problems.get(info.name, [])}
            for info in _plugins().info.values()]


def _own_version() -> str:
    return importlib.metadata.version("spaseq-plugin")


def call_configure(config: dict) -> None:
    _call("spaseq_configure", config=config)


def call_started(engine) -> None:
    _call("spaseq_query_started", engine=engine)


def call_stopped(engine) -> None:
    _call("spaseq_query_stopped", engine=engine)


# The hooks spaseq calls through pluggy (_call), whose implementations are registered
# wrapped by _naming_its_plugin: pluggy does not say which implementation raised.
_CALLED_HOOKS = ("spaseq_configure", "spaseq_query_started", "spaseq_query_stopped")

# The attribute of an exception raised in one of them that names the plugin whose implementation raised it
_RAISED_IN = "_spaseq_raised_in_plugin"


def _call(hook: str, **arguments) -> None:
    """Call ``hook``; an error raised in a plugin becomes a :class:`PluginError` naming it."""
    caller = getattr(plugin_manager().hook, hook)
    try:
        caller(**arguments)
    except MemoryError:
        raise
    except Exception as e:
        plugin = vars(e).pop(_RAISED_IN, None)      # (None: raised by pluggy itself)
        culprit = "a plugin" if plugin is None else _describe(plugin)
        raise PluginError(f"{culprit} failed in {hook}: {type(e).__name__}: {e}") from e


def _naming_its_plugin(impl: pluggy.HookImpl) -> Callable:
    """``impl``'s function, wrapped to name ``impl``'s plugin on an exception it raises
    (a hook wrapper's, on one its generator raises: :class:`_NamingTeardown`).  The
    exception passes on as it is: a hook wrapper around ``impl`` sees what was raised."""
    function, plugin = impl.function, impl.plugin_name
    if impl.wrapper or impl.hookwrapper:
        def naming(*args, **kwargs):
            return _NamingTeardown(function(*args, **kwargs), plugin)
    else:
        def naming(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except Exception as e:
                _name_plugin(e, plugin)
                raise
    naming.__wrapped__ = function
    return naming


def _name_plugin(error: Exception, plugin: str) -> None:
    # (the first implementation the error leaves raised it: a hook wrapper it leaves later passed it on)
    if not hasattr(error, _RAISED_IN):
        setattr(error, _RAISED_IN, plugin)


class _NamingTeardown:
    """A hook wrapper's generator as pluggy drives it (``next``, ``send``, ``throw``,
    ``close``), naming its plugin on an exception it raises, not on one pluggy throws
    into it (another implementation's, or pluggy's own) that it passes on."""

    def __init__(self, teardown, plugin: str):
        self._teardown = teardown
        self._plugin = plugin
        self.gi_code = teardown.gi_code     # (pluggy names a wrapper that yields other than once by it)

    def __next__(self):
        return self._step(self._teardown.send, None)

    def send(self, value):
        return self._step(self._teardown.send, value)

    def throw(self, error):
        return self._step(self._teardown.throw, error, thrown=error)

    def close(self):
        return self._step(self._teardown.close)

    def _step(self, step: Callable, *args, thrown: BaseException | None = None):
        try:
            return step(*args)
        except StopIteration:
            raise
        except Exception as e:
            if e is not thrown:
                _name_plugin(e, self._plugin)
            raise
