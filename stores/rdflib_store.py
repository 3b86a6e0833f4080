"""rdflib stores and datasets as the KB (``--kb rdflib:STORE[:CONFIGURATION]``).

Any rdflib store plugin, by name, opened with its configuration string:

* ``rdflib:Memory``: rdflib's in-memory store, empty; ``rdflib:Memory:FILE``
  or ``rdflib:Memory:IRI=FILE`` loads one RDF file into it (TriG and N-Quads
  keep their graph names; N-Triples and Turtle go to the named graph IRI);
* ``rdflib:Oxigraph:DIR``: an on-disk Oxigraph store through oxrdflib,
  opened read-only (``rdflib:Oxigraph`` alone: an empty in-memory one);
* ``rdflib:SPARQLStore:URL[#timeout=SECONDS]``: rdflib's client of a SPARQL
  endpoint; each request fails after ``timeout`` seconds (default 300),
  naming the store, and a failure names its cause;
* ``rdflib:BerkeleyDB:DIR`` (where the ``berkeleydb`` module is installed)
  and any third-party rdflib store plugin: ``Dataset(store=NAME)`` opened
  with ``DIR`` (or whatever that store's configuration string is).

From Python, any rdflib ``Dataset`` (or ``ConjunctiveGraph``) object, or a
``Graph`` given a graph name, is a KB::

    from spaseq_plugin.stores.rdflib_store import RdflibKB
    engine = Engine(query, kb=RdflibKB(my_dataset))

``select`` runs the SPARQL with rdflib (for an oxrdflib store, rdflib hands
it to Oxigraph) and converts the terms to pyoxigraph; ``quads`` reads the
dataset's named graphs.  The KB is read-only for queries.

A built-in plugin: it registers the ``rdflib`` scheme through the
``spaseq_kb_stores`` hook, like :mod:`spaseq_plugin.stores.oxigraph`.
"""

from __future__ import annotations

import difflib
import logging
import os
from itertools import islice
from urllib.parse import parse_qsl
from typing import Iterable, Iterator

import pyoxigraph as ox
from rdflib import ConjunctiveGraph, Dataset, Graph, URIRef
from rdflib.graph import DATASET_DEFAULT_GRAPH_ID
from rdflib.term import BNode, Literal

from ..errors import LimitError, QueryError, SpaseqError
from ..hookspecs import KbStore, hookimpl
from ..kb import KnowledgeBase, parse_kb_spec
from ..rdflib_terms import ox_to_rdflib, rdflib_to_ox
from .loading import BATCH, OxigraphLoader, RdfFileReader
from .oxigraph import read_only_store
from ..waits import NoAnswer, wait_seconds, within

XSD_STRING = "http://www.w3.org/2001/XMLSchema#string"
REMOTE_TIMEOUT = 300.0      # seconds a request to an rdflib SPARQLStore's endpoint may take


def to_ox(term):
    """An rdflib term as pyoxigraph's (blank node labels pyoxigraph refuses are re-labelled)."""
    try:
        return rdflib_to_ox(term)
    except ValueError:
        if isinstance(term, BNode):
            return ox.BlankNode("x" + str(term).encode("utf-8").hex())
        if isinstance(term, Literal) and term.language:
            raise SpaseqError(f"the rdflib KB holds a literal with a bad language tag: {term.n3()}") from None
        raise SpaseqError(f"the rdflib KB holds a term pyoxigraph cannot represent: {term!r}") from None


class RdflibKB(KnowledgeBase):
    """A KB in an rdflib Dataset (see the module docstring).

    ``data`` is a ``Dataset`` or ``ConjunctiveGraph`` (its named graphs are the
    KB's), or a ``Graph``: the KB's one named graph, called ``graph`` or, when
    that is not given, the Graph's own identifier if it is an IRI.
    """

    def __init__(self, data: Graph, *, graph: str | None = None, description: str | None = None,
                 close_store: bool = False):
        if isinstance(data, ConjunctiveGraph):         # Dataset is a ConjunctiveGraph
            if graph is not None:
                raise SpaseqError("RdflibKB(graph=...) names the graph of a single rdflib Graph, "
                                  "not of a Dataset")
            self.dataset = data
        elif isinstance(data, Graph):
            name = graph or (str(data.identifier) if isinstance(data.identifier, URIRef) else None)
            if not name:
                raise SpaseqError("a KB from one rdflib Graph needs a graph name: RdflibKB(graph_object, "
                                  "graph='http://...'), or give the Graph an IRI identifier")
            self.dataset = Dataset()
            target = self.dataset.graph(URIRef(name))
            for triple in data:
                target.add(triple)
        else:
            raise SpaseqError(f"RdflibKB takes an rdflib Dataset or Graph, not {type(data).__name__}")
        self.description = description or f"rdflib {type(self.dataset).__name__} " \
                                          f"({type(self.dataset.store).__name__} store)"
        self._close_store = close_store
        self._names: list[str] | None = None

    def _context_names(self) -> Iterable:
        if _remote(self.dataset.store):
            # (its own listing asks for GRAPH ?g {}, which Virtuoso answers with nothing)
            return (URIRef(row["g"].value) for row in self.select("SELECT DISTINCT ?g WHERE { GRAPH ?g { ?s ?p ?o } }")
                    if isinstance(row.get("g"), ox.NamedNode))
        # (not Dataset.graphs(): it adds the default graph to the store)
        return (g.identifier for g in ConjunctiveGraph.contexts(self.dataset))

    def graph_names(self) -> list[str]:
        if self._names is None:
            self._names = sorted(str(name) for name in self._context_names()
                                 if isinstance(name, URIRef) and name != DATASET_DEFAULT_GRAPH_ID)
        return list(self._names)

    def query(self, sparql: str):
        """rdflib's result of any query (user errors as SpaseqError)."""
        term_log = logging.getLogger("rdflib.term")
        level = term_log.level
        term_log.setLevel(logging.CRITICAL)     # rdflib logs a traceback per ill-typed literal
        try:
            return self.dataset.query(sparql)
        except SpaseqError:
            raise
        except Exception as e:
            if isinstance(e, SyntaxError) or \
                    type(e).__name__ in ("ParseException", "ParseSyntaxException", "ParseFatalException"):
                raise QueryError(f"rdflib cannot parse the query: {e}") from None
            if isinstance(e, (ValueError, NotImplementedError)):
                raise SpaseqError(f"rdflib cannot run the query: {e}") from None
            raise
        finally:
            term_log.setLevel(level)

    def select(self, sparql: str) -> Iterator[dict[str, object]]:
        result = self.query(sparql)
        if result.type != "SELECT":
            raise SpaseqError(f"not a SELECT query ({result.type})")
        names = [str(v) for v in result.vars]
        for row in result:
            yield {name: to_ox(value) for name, value in zip(names, row) if value is not None}

    def query_results(self, sparql: str):
        """Any query's answer as pyoxigraph objects: solutions (variables and rows), a
        QueryBoolean-like bool, or a list of Triples (for ``spaseq kb query``)."""
        result = self.query(sparql)
        if result.type == "ASK":
            return bool(result.askAnswer)
        if result.type in ("CONSTRUCT", "DESCRIBE"):
            return [ox.Triple(to_ox(s), to_ox(p), to_ox(o)) for s, p, o in result.graph]
        variables = [ox.Variable(str(v)) for v in result.vars]
        rows = [{v.value: to_ox(value) for v, value in zip(variables, row) if value is not None}
                for row in result]
        return variables, rows

    def quads(self, graph: str | None = None) -> Iterator[ox.Quad]:
        names = [graph] if graph is not None else self.graph_names()
        for name in names:
            g = ox.NamedNode(name)
            context = self.dataset.get_context(URIRef(name))
            for s, p, o in context.triples((None, None, None)):
                yield ox.Quad(to_ox(s), to_ox(p), to_ox(o), g)

    def close(self) -> None:
        if self._close_store:
            try:
                self.dataset.close()
            except Exception:
                pass
            self._close_store = False


# -- opening by name -----------------------------------------------------------------------

def _store_plugin(name: str):
    from rdflib import plugin
    from rdflib.plugin import PluginException
    from rdflib.store import Store
    try:
        return plugin.get(name, Store)
    except PluginException:
        known = sorted({p.name for p in plugin.plugins(kind=Store)})
        close = difflib.get_close_matches(name, known, 1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        if name.lower() == "berkeleydb":
            hint = " (rdflib's BerkeleyDB store needs the berkeleydb module: pip install berkeleydb)"
        raise SpaseqError(f"no rdflib store plugin named {name!r}{hint}; installed: {', '.join(known)}") \
            from None
    except ImportError as e:
        raise SpaseqError(f"the rdflib store {name} cannot be used here: {e}") from None


def _split(location: str) -> tuple[str, str]:
    name, _, configuration = location.partition(":")
    if not name:
        raise SpaseqError("rdflib: needs a store name: rdflib:Memory, rdflib:Oxigraph:DIR, "
                          "rdflib:BerkeleyDB:DIR, ...")
    return name, configuration


def _is_oxigraph(name: str) -> bool:
    return name.lower() == "oxigraph"


def open_location(location: str) -> RdflibKB:
    """``STORE[:CONFIGURATION]`` -> an RdflibKB (see the module docstring)."""
    name, configuration = _split(location)
    if _is_oxigraph(name):
        from oxrdflib import OxigraphStore
        if not configuration:
            return RdflibKB(Dataset(store=OxigraphStore()), description="rdflib Oxigraph store in memory")
        inner = read_only_store(configuration)
        return RdflibKB(Dataset(store=OxigraphStore(store=inner)),
                        description=f"rdflib Oxigraph store at {configuration} (read-only)")
    plugin_class = _store_plugin(name)
    if name in ("Memory", "SimpleMemory"):
        dataset = Dataset(store=name)
        if configuration:
            _, path, graph = parse_kb_spec(configuration)
            load_rdflib_file(dataset, path, graph)
        return RdflibKB(dataset, description=f"rdflib {name} store" +
                        (f" loaded from {configuration}" if configuration else ""))
    try:
        store = plugin_class()
    except ImportError as e:
        raise SpaseqError(f"the rdflib store {name} cannot be used here: {e}") from None
    if _remote(store):
        configuration, timeout = _remote_options(name, configuration)
        _bound_requests(store, f"rdflib:{name}:{configuration}", timeout)
        # (its default Accept lists RDF/XML beside the XML results, and Virtuoso answers
        # a SELECT in RDF/XML then, which rdflib reads as a CONSTRUCT's graph)
        store.returnFormat = "json"
    # (a union default graph: else rdflib sends its default graph's name, urn:x-rdflib:default,
    # as default-graph-uri, and a protocol dataset with no named graph then)
    dataset = Dataset(store=store, default_union=_remote(store))
    _open(dataset, name, configuration, create=False)
    return RdflibKB(dataset, description=f"rdflib {name} store at {configuration}", close_store=True)


def _remote(store) -> bool:
    """Whether ``store`` is rdflib's client of a SPARQL endpoint (SPARQLStore or a subclass)."""
    from rdflib.plugins.stores.sparqlstore import SPARQLStore
    return isinstance(store, SPARQLStore)


def _remote_options(name: str, configuration: str) -> tuple[str, float]:
    """An endpoint URL and its ``#timeout=SECONDS`` (default REMOTE_TIMEOUT)."""
    url, _, fragment = configuration.partition("#")
    options = dict(parse_qsl(fragment, keep_blank_values=True))
    unknown = sorted(set(options) - {"timeout"})
    if unknown:
        raise SpaseqError(f"rdflib:{name}: unknown option {unknown[0]!r} (it takes #timeout=SECONDS)")
    try:
        return url, wait_seconds(options.get("timeout", REMOTE_TIMEOUT))
    except ValueError as e:
        raise SpaseqError(f"rdflib:{name}: timeout {e}") from None


def _bound_requests(store, where: str, timeout: float) -> None:
    """rdflib's SPARQLStore sends its requests (every read goes through ``_query``)
    with urllib and no time limit, and reports any failure as "You did something
    wrong formulating either the URI or your SPARQL query": each request gets
    ``timeout`` seconds here, and a failure names its cause."""
    send = store._query

    def bounded(*args, **kwargs):
        try:
            return within(timeout, lambda: send(*args, **kwargs), f"spaseq {where}")
        except NoAnswer:
            raise LimitError(f"{where}: no answer within {timeout:g} s (#timeout=SECONDS)") from None
        except (OSError, ValueError) as error:
            cause = error.__context__ if isinstance(error, ValueError) and error.__context__ else error
            raise SpaseqError(f"{where}: the request failed: {cause}") from None
    store._query = bounded


def _open(dataset: Dataset, name: str, configuration: str, create: bool) -> None:
    from rdflib.store import CORRUPTED_STORE, NO_STORE
    if not configuration:
        raise SpaseqError(f"rdflib:{name} needs a location: rdflib:{name}:PATH")
    if not create and not os.path.exists(configuration) and "://" not in configuration:
        raise SpaseqError(f"no rdflib {name} store at {configuration}")
    try:
        status = dataset.open(configuration, create=create)
    except Exception as e:
        raise SpaseqError(f"cannot open the rdflib {name} store at {configuration}: "
                          f"{type(e).__name__}: {e}") from None
    if status == NO_STORE:
        raise SpaseqError(f"no rdflib {name} store at {configuration}")
    if status == CORRUPTED_STORE:
        raise SpaseqError(f"the rdflib {name} store at {configuration} is corrupted")


# -- loading (spaseq kb load) -----------------------------------------------------------

def load_rdflib_file(dataset: Dataset, path: str, graph: str | None = None, progress=None) -> int:
    """Read one RDF file into ``dataset``; the number of triples it held.

    pyoxigraph parses it (the errors name file, line and column, as for Oxigraph
    stores), all of it before anything is added, so a bad file adds nothing.
    """
    reader = RdfFileReader(path, graph, progress, atomic=True)
    quads = list(reader)
    contexts: dict = {}
    term_log = logging.getLogger("rdflib.term")
    level = term_log.level
    term_log.setLevel(logging.CRITICAL)         # rdflib logs a traceback per ill-typed literal
    try:
        rows = []
        for q in quads:
            context = contexts.get(q.graph_name)
            if context is None:
                name = DATASET_DEFAULT_GRAPH_ID if isinstance(q.graph_name, ox.DefaultGraph) else \
                    ox_to_rdflib(q.graph_name)
                context = contexts[q.graph_name] = dataset.get_context(name)
            rows.append((ox_to_rdflib(q.subject), ox_to_rdflib(q.predicate), ox_to_rdflib(q.object), context))
    finally:
        term_log.setLevel(level)
    dataset.addN(rows)
    return reader.count


class RdflibLoader:
    """Writes files into a persistent rdflib store (``spaseq kb load --into rdflib:STORE:PATH``)."""

    def __init__(self, name: str, configuration: str):
        plugin_class = _store_plugin(name)
        try:
            store = plugin_class()
        except ImportError as e:
            raise SpaseqError(f"the rdflib store {name} cannot be used here: {e}") from None
        self.dataset = Dataset(store=store)
        self.description = f"rdflib {name} store at {configuration}"
        _open(self.dataset, name, configuration, create=not os.path.exists(configuration))

    def load(self, path: str, graph: str | None = None, progress=None) -> int:
        return load_rdflib_file(self.dataset, path, graph, progress)

    def close(self) -> None:
        """Commit and close; a commit the store refuses is an error (what was loaded is not there)."""
        try:
            self.dataset.commit()
        except Exception as e:
            raise SpaseqError(f"the {self.description} did not commit what was loaded: "
                              f"{type(e).__name__}: {e}") from None
        finally:
            self.dataset.close()


def open_for_load(location: str):
    """A loader for ``spaseq kb load --into rdflib:LOCATION``: ``load(path, graph)``, ``close()``.

    ``rdflib:Oxigraph:DIR`` is written directly with pyoxigraph (oxrdflib keeps its
    data in a plain Oxigraph store), so it loads as fast as ``oxigraph:DIR``.
    """
    name, configuration = _split(location)
    if _is_oxigraph(name):
        if not configuration:
            raise SpaseqError("rdflib:Oxigraph needs a directory to load into: rdflib:Oxigraph:DIR")
        return OxigraphLoader(configuration)
    if name in ("Memory", "SimpleMemory"):
        raise SpaseqError(f"rdflib:{name} lives in memory: what it loads is gone when 'spaseq kb load' "
                          "ends (load into oxigraph:DIR or rdflib:Oxigraph:DIR)")
    return RdflibLoader(name, configuration)


class RdflibTarget:
    """Adds quads to a persistent rdflib store (``rdflib_store.open_for_load``'s loader)."""

    def __init__(self, loader):
        self.loader = loader
        self.dataset = loader.dataset
        self.description = loader.description
        self._contexts: dict = {}

    def add(self, quads: Iterable[ox.Quad]) -> None:
        term_log = logging.getLogger("rdflib.term")
        level = term_log.level
        term_log.setLevel(logging.CRITICAL)     # rdflib logs a traceback per ill-typed literal
        try:
            quads = iter(quads)
            while batch := list(islice(quads, BATCH)):
                self.dataset.addN((ox_to_rdflib(q.subject), ox_to_rdflib(q.predicate), ox_to_rdflib(q.object),
                                   self._context(q.graph_name)) for q in batch)
        finally:
            term_log.setLevel(level)

    def _context(self, graph):
        context = self._contexts.get(graph)
        if context is None:
            name = DATASET_DEFAULT_GRAPH_ID if isinstance(graph, ox.DefaultGraph) else ox_to_rdflib(graph)
            context = self._contexts[graph] = self.dataset.get_context(name)
        return context

    def add_nquads_file(self, path: str) -> None:
        self.add(ox.parse(path=path, format=ox.RdfFormat.N_QUADS, lenient=True))

    def size(self) -> int:
        return sum(1 for _ in self.dataset.quads((None, None, None, None)))

    def close(self) -> None:
        self.loader.close()


@hookimpl
def spaseq_kb_stores():
    return [KbStore("rdflib", open_location,
                    "rdflib stores: 'rdflib:Memory[:FILE]', 'rdflib:Oxigraph[:DIR]' (oxrdflib, read-only), "
                    "'rdflib:BerkeleyDB:DIR', any rdflib store plugin by name")]
