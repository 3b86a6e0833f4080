"""Small builders for tests: events from Turtle snippets, results as plain rows; what a
test does when a server it needs is not installed."""

import os

import pyoxigraph as ox
import pytest

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


def server_unavailable(reason: str):
    """A server a test needs (Virtuoso, mosquitto) is missing or does not start: the test
    is skipped, saying why, except under CI (CI=true), where .ci/run installs the servers
    and their absence is a failure.  The tests never install system packages themselves."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: .ci/run should have installed it)", pytrace=False)
    pytest.skip(reason)
