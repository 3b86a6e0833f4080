"""The hooks a SPASEQ plugin can implement.

Plugins are pluggy plugins of the project ``spaseq``: modules or objects
whose functions are marked with :data:`spaseq_plugin.hookimpl` and named
like the specifications below.  Third-party packages register them under
the entry-point group ``spaseq``; the built-in stores, sources and sinks are
registered the same way, as default plugins.  ``docs/plugins.md`` documents
every hook with an example.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pluggy

hookspec = pluggy.HookspecMarker("spaseq")
hookimpl = pluggy.HookimplMarker("spaseq")


# -- what the hooks return ---------------------------------------------------------------

@dataclass(frozen=True)
class KbStore:
    """A KB backend: ``open(location)`` -> :class:`~spaseq_plugin.kb.KnowledgeBase`.

    ``--kb SCHEME:LOCATION`` picks it by scheme.
    """
    scheme: str
    open: Callable
    description: str = ""


@dataclass(frozen=True)
class StreamSource:
    """An event source: ``open(location, stream_iri)`` -> iterator of Event | EventError.

    ``--stream ALIAS=SCHEME:LOCATION`` picks it by scheme.  A live source's iterator
    may have ``stop_reading(reason)``: a graceful stop calls it (docs/plugins.md).
    """
    scheme: str
    open: Callable
    description: str = ""


@dataclass(frozen=True)
class ResultSink:
    """A result writer: ``open(target, variables, options)`` -> Writer (write, close).

    ``target`` is a text stream for file-like sinks, or the location after
    ``NAME:`` in ``--sink NAME:LOCATION``.
    """
    name: str
    open: Callable
    description: str = ""
    file_like: bool = True


# -- the hooks ------------------------------------------------------------------------------


@hookspec
def spaseq_kb_stores():
    """Return KbStore objects: KB backends, each opening the locations of one URI scheme."""


@hookspec
def spaseq_stream_sources():
    """Return StreamSource objects: event sources, each reading the locations of one URI scheme."""


@hookspec
def spaseq_result_sinks():
    """Return ResultSink objects: result writers, each under a name (``--format`` or ``--sink``)."""


@hookspec
def spaseq_sparql_functions():
    """Return a dict of function IRI -> callable, usable in GPM FILTERs (pyoxigraph custom functions)."""


@hookspec
def spaseq_configure(config):
    """Called once with the run's configuration (a dict) before any query starts."""


@hookspec
def spaseq_query_started(engine):
    """Called when an engine starts evaluating a query."""


@hookspec
def spaseq_query_stopped(engine):
    """Called when an engine has finished (input ended or it was closed); ``engine.stats`` is final."""
