"""Small builders for tests: events from Turtle snippets, results as plain rows."""

import pyoxigraph as ox

from spaseq_plugin import Engine, Event

EX = "http://example/"
PREFIX = f"PREFIX : <{EX}>\n"


def event(stream: str, time, turtle: str) -> Event:
    triples = tuple(q.triple for q in ox.parse(f"@prefix : <{EX}> . {turtle}", format=ox.RdfFormat.TURTLE))
    return Event(stream if "://" in stream else f"http://example.org/{stream}", time, triples)


def rows(results) -> list[tuple]:
    """Results as sorted (time, ((var, N-Triples term), ...)) tuples."""
    out = []
    for r in results:
        out.append((r.time, tuple(sorted((k, str(v).replace(f"<{EX}", ":").rstrip(">") if str(v).startswith("<") else str(v))
                                          for k, v in r.bindings.items()))))
    return sorted(out)


def run(query: str, events, **kwargs) -> list[tuple]:
    return rows(Engine(PREFIX + query, **kwargs).run(events))
