"""An example third-party SPASEQ plugin.

It provides, through the same hooks the built-in plugins use:

* a stream source ``counter:N``: N events, one per second, each
  ``<http://example.org/tick/K> <http://example.org/value> K``;
* a FILTER function ``<http://example.org/fn#isEven>(?n)``.

Installed, it is found through its ``spaseq`` entry point (pyproject.toml).
"""

import pyoxigraph as ox

from spaseq_plugin import Event, EventError, hookimpl
from spaseq_plugin.plugins import StreamSource

VALUE = ox.NamedNode("http://example.org/value")
XSD_INTEGER = ox.NamedNode("http://www.w3.org/2001/XMLSchema#integer")
XSD_BOOLEAN = ox.NamedNode("http://www.w3.org/2001/XMLSchema#boolean")


def counter(location: str, stream: str):
    try:
        count = int(location)
    except ValueError:
        yield EventError(f"counter: expects a number of events, not {location!r}", f"counter:{location}")
        return
    for k in range(1, count + 1):
        tick = ox.NamedNode(f"http://example.org/tick/{k}")
        yield Event(stream, k, (ox.Triple(tick, VALUE, ox.Literal(str(k), datatype=XSD_INTEGER)),),
                    position=f"counter:{k}")


def is_even(term):
    """True when the argument is an even integer; no value (an error) otherwise."""
    if not isinstance(term, ox.Literal) or term.datatype != XSD_INTEGER:
        return None
    return ox.Literal("true" if int(term.value) % 2 == 0 else "false", datatype=XSD_BOOLEAN)


@hookimpl
def spaseq_stream_sources():
    return [StreamSource("counter", counter, "example: counter:N gives N numbered events")]


@hookimpl
def spaseq_sparql_functions():
    return {"http://example.org/fn#isEven": is_even}
