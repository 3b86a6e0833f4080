"""SPASEQ from rdflib: the runnable example that docs/rdflib.md walks through.

Run it with ``.venv/bin/python examples/rdflib/example.py``.  It

1. builds an rdflib Dataset of timestamped graph events on two streams,
2. queries it with ``dataset.query(..., processor="spaseq")`` and a KB given
   as another rdflib Dataset, reads each row's match time, and serialises
   the result as SPARQL JSON and CSV,
3. runs a CONSTRUCT query whose output Dataset is a new stream,
4. pushes rdflib Graphs into an Engine one by one, with a callback,
5. runs the same query over a Dataset backed by Oxigraph (oxrdflib).
"""

import rdflib
from rdflib import Dataset, Graph, Literal, Namespace, URIRef
from rdflib.namespace import PROV, XSD

from spaseq_plugin import Engine
from spaseq_plugin.rdflib_integration.processor import as_knowledge_base

EX = Namespace("http://example/grid/")
SPASEQ = Namespace("urn:spaseq:")            # SPASEQ.stream: the stream a graph belongs to
POWER = URIRef("http://example/grid/power")
WEATHER = URIRef("http://example/grid/weather")
KB_GRAPH = URIRef("http://example/grid/kb")

# A house draws power at a high fare, then (skip-till-next) the wind picks up
# at its location.  The KB says who owns the house.
QUERY = """
PREFIX : <http://example/grid/>
SELECT ?house ?owner ?speed
WITHIN 30 MINUTES
FROM STREAM S1 <http://example/grid/power>
FROM STREAM S2 <http://example/grid/weather>
WHERE {
  SEQ (A ; B)
  DEFINE GPM A ON S1 { ?house :loc ?l ; :fare ?fare . FILTER (?fare > 20)
                       GRAPH <http://example/grid/kb> { ?house :owner ?owner } }
  DEFINE GPM B ON S2 { ?w :loc ?l ; :windSpeed ?speed . FILTER (?speed > 3) }
}
"""

# (graph name, stream, time, [(subject, predicate, object)])
EVENTS = [
    ("p1", POWER, "2024-05-01T10:00:00Z", [(EX.h1, EX.loc, EX.l1), (EX.h1, EX.fare, Literal(30))]),
    ("w1", WEATHER, "2024-05-01T10:05:00Z", [(EX.w1, EX.loc, EX.l2), (EX.w1, EX.windSpeed, Literal(9))]),
    ("w2", WEATHER, "2024-05-01T10:10:00Z", [(EX.w2, EX.loc, EX.l1), (EX.w2, EX.windSpeed, Literal(5))]),
    ("p2", POWER, "2024-05-01T10:20:00Z", [(EX.h2, EX.loc, EX.l2), (EX.h2, EX.fare, Literal(25))]),
    ("w3", WEATHER, "2024-05-01T10:40:00Z", [(EX.w3, EX.loc, EX.l2), (EX.w3, EX.windSpeed, Literal(7))]),
]


def build_events(dataset: Dataset) -> Dataset:
    """One named graph per event; its time and stream in the default graph."""
    for name, stream, time, triples in EVENTS:
        event = dataset.graph(EX[name])
        for triple in triples:
            event.add(triple)
        dataset.add((EX[name], PROV.generatedAtTime, Literal(time, datatype=XSD.dateTime)))
        dataset.add((EX[name], SPASEQ.stream, stream))
    return dataset


def build_kb() -> Dataset:
    kb = Dataset()
    owners = kb.graph(KB_GRAPH)
    owners.add((EX.h1, EX.owner, EX.alice))
    owners.add((EX.h2, EX.owner, EX.bob))
    return kb


def select_over_a_dataset(events: Dataset, kb: Dataset) -> None:
    print("== SELECT over an rdflib Dataset")
    result = events.query(QUERY, processor="spaseq", kb=kb)
    for time, row in zip(result.bindings.match_times, result):
        print(time.isoformat(), row.house.n3(), row.owner.n3(), row.speed)
    print(result.serialize(format="json").decode())
    # time_var puts the match time into the rows, so serialisations show it
    print(events.query(QUERY, processor="spaseq", kb=kb, time_var="time")
          .serialize(format="csv").decode().strip())


CONSTRUCT = """
PREFIX : <http://example/grid/>
CONSTRUCT { _:alert a :WindAlert ; :house ?house ; :speed ?speed . }
WITHIN 30 MINUTES
FROM STREAM S1 <http://example/grid/power>
FROM STREAM S2 <http://example/grid/weather>
WHERE {
  SEQ (A ; B)
  DEFINE GPM A ON S1 { ?house :loc ?l ; :fare ?fare . FILTER (?fare > 20) }
  DEFINE GPM B ON S2 { ?w :loc ?l ; :windSpeed ?speed . FILTER (?speed > 3) }
}
"""

ALERTS = """
PREFIX : <http://example/grid/>
SELECT ?house WITHIN 1 HOURS
FROM STREAM Alerts <urn:alerts>
WHERE { SEQ (A) DEFINE GPM A ON Alerts { ?a a :WindAlert ; :house ?house } }
"""


def construct_a_new_stream(events: Dataset) -> None:
    print("== CONSTRUCT: each match is a new graph event")
    alerts = events.query(CONSTRUCT, processor="spaseq").graph     # an rdflib Dataset
    print(alerts.serialize(format="trig").strip())
    # the output is a stream: one-stream queries read it without spaseq:stream triples
    for row in alerts.query(ALERTS, processor="spaseq"):
        print("alert for", row.house.n3())


PUSH_QUERY = QUERY.replace("30 MINUTES", "30 SECONDS")


def push_rdflib_graphs(kb: Dataset) -> None:
    print("== Engine.push with rdflib Graphs and a callback")
    engine = Engine(PUSH_QUERY, kb=as_knowledge_base(kb),
                    on_result=lambda r: print("match at", r.time, r.bindings["house"].value,
                                              r.bindings["owner"].value))
    for seconds, (name, stream, _, triples) in zip((0, 5, 10, 20, 40), EVENTS):
        graph = Graph()
        for triple in triples:
            graph.add(triple)
        engine.push(str(stream), seconds, graph)
    engine.close()


def oxigraph_backed(kb: Dataset) -> None:
    print("== the same query over an Oxigraph-backed Dataset (oxrdflib)")
    events = build_events(Dataset(store="Oxigraph"))
    # The Oxigraph store has its own SPARQL query method, which rdflib calls
    # first: use_store_provided=False sends the query to the spaseq processor.
    result = events.query(QUERY, processor="spaseq", use_store_provided=False, kb=kb)
    for time, row in zip(result.bindings.match_times, result):
        print(time.isoformat(), row.house.n3(), row.owner.n3(), row.speed)


def main() -> None:
    print("rdflib", rdflib.__version__)
    events = build_events(Dataset())
    kb = build_kb()
    select_over_a_dataset(events, kb)
    construct_a_new_stream(events)
    push_rdflib_graphs(kb)
    oxigraph_backed(kb)


if __name__ == "__main__":
    main()
