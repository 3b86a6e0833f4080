"""Benchmark workloads: data and queries shaped like the SPASEQ paper's (section 8).

Each workload is a query of the paper's Appendix A (Q1-Q6), parameterised by
selection strategy and window, over a stream set that is either a slice of
the paper's real data sets (read from ``../shared/data`` when it is there:
UMass smart home, credit cards, CityBench traffic) or a deterministic
generator of the same shape (always used for the stock market and vessel
workloads, whose data is not public, and as the fallback for the others).

==============  =====  ===========================================  ==========================
workload        paper  pattern                                      data
==============  =====  ===========================================  ==========================
``smartgrid``   Q1     ``SEQ(A s B+ s C)`` over 3 streams, KB join  UMass Smart* HomeC / gen.
``credit``      Q2     ``SEQ(A s B+)`` big after small, KB join     ``card10k.nt`` / gen.
``stock-hs``    Q3     head and shoulders, 7 GPMs, per company      stock generator (SMD)
``stock-v``     Q4     V-shape, 3 GPMs, per company                 stock generator (SMD)
``stock-kb``    Q4+KB  V-shape joined with a company KB of any size stock generator + KB gen.
``traffic``     Q5     ``SEQ(A s (B & C))`` over 3 streams          CityBench Aarhus / gen.
``vessels``     Q6     ``SEQ(A s B+ s C)`` trajectory, KB join      vessel generator
``peers-v``     Q4     the peers' V-shape (strict per company, and  the peers' stock stream
                       skip-till-any over all companies)
``keys-each``   keys   ``SEQ(A s B)`` per key, a new key per event  key generator
``keys-cards``  keys   ``SEQ(A s B+)`` per card, few events a card  card generator
``orders``      neg.   ``SEQ(A s N! s B)``: order, not cancelled,   order generator
                       shipped (the guard joined on the order)
``orders-open`` neg.   ``SEQ(A s N!)``: an order not cancelled      order generator
                       within the window (trailing negation)
==============  =====  ===========================================  ==========================

``s`` is the strategy: ``,`` strict contiguity, ``;`` skip-till-next, ``:``
skip-till-any.  Everything is seeded: the same arguments give the same
events, byte for byte.

Python use::

    from spaseq_plugin.bench.workloads import WORKLOADS, stock_events, write_trig
    w = WORKLOADS["stock-v"]
    text = w.query(";", 300)              # SPASEQ text
    events = list(w.events(1000))         # time-ordered Event objects, all streams
    write_trig(stock_events(100), "stock.trig")
"""

from __future__ import annotations

import csv
import heapq
import itertools
import math
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pyoxigraph as ox

from ..events import PROV_GENERATED_AT, XSD, Event, datetime_seconds, time_literal
from ..kb import KnowledgeBase

__all__ = [
    "WORKLOADS", "Workload", "STRATEGIES", "data_dir", "write_trig", "write_nquads",
    "stock_events", "company_kb", "credit_events", "card_kb", "smarthome_events", "smartgrid_kb",
    "traffic_events", "traffic_kb", "vessel_events", "vessel_kb", "kb_quads", "open_source", "Source",
    "DEFAULT_WORKLOADS", "StreamWriter",
    "q1_smart_grid", "q2_big_after_small", "q3_head_and_shoulders", "q4_v_shape",
    "q5_traffic", "q6_trajectory", "key_per_event_events", "many_cards_events", "q_key_per_event",
    "q_card_big_after_small", "order_events", "q_not_cancelled",
]

#: Strategy operators, by the names the bench accepts.
STRATEGIES = {",": ",", ";": ";", ":": ":", "strict": ",", "sc": ",", "next": ";", "stn": ";",
              "any": ":", "sta": ":"}

_INT = ox.NamedNode(XSD + "integer")
_DEC = ox.NamedNode(XSD + "decimal")
_DOUBLE = ox.NamedNode(XSD + "double")
_STRING = ox.NamedNode(XSD + "string")
_RDF_TYPE = ox.NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")


def data_dir() -> Path:
    """Where the real data slices live: ``$SPASEQ_SHARED/data`` or ``../shared/data``
    beside the repository (it may be absent)."""
    shared = os.environ.get("SPASEQ_SHARED")
    if shared:
        return Path(shared) / "data"
    return Path(__file__).resolve().parents[3] / "shared" / "data"


# -- literals in the canonical form Oxigraph stores --------------------------
# (Oxigraph canonicalises typed literals; data in canonical form keeps every
# evaluator's output identical to its input terms.)

def _int(n: int) -> ox.Literal:
    return ox.Literal(str(int(n)), datatype=_INT)


def _dec(x: float, places: int = 2) -> ox.Literal:
    return ox.Literal(_fixed(x, places), datatype=_DEC)


def _double(x: float, places: int = 2) -> ox.Literal:
    return ox.Literal(_fixed(x, places), datatype=_DOUBLE)


def _fixed(x: float, places: int) -> str:
    text = f"{x:.{places}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _iri(text: str) -> ox.NamedNode:
    return ox.NamedNode(text)


def _memory_kb(quads: Iterable[ox.Quad] = ()) -> KnowledgeBase:
    """An in-memory Oxigraph KB holding ``quads`` (it has ``.store``)."""
    from ..stores.oxigraph import OxigraphKB
    kb = OxigraphKB()
    kb.store.bulk_extend(quads)
    return kb


# -- writing stream files ------------------------------------------------------

def write_trig(events: Iterable[Event], path_or_file, *, prefixes: dict[str, str] | None = None) -> int:
    """Write events as a TriG stream file (one named graph per event, its
    timestamp as ``prov:generatedAtTime`` in the default graph).  Returns the
    number of events written.  Events without a name get ``urn:spaseq:event:N``."""
    return _write(events, path_or_file, trig=True)


def write_nquads(events: Iterable[Event], path_or_file) -> int:
    """Write events as an N-Quads stream file (same layout as :func:`write_trig`)."""
    return _write(events, path_or_file, trig=False)


def _write(events, path_or_file, trig: bool) -> int:
    own = isinstance(path_or_file, (str, os.PathLike))
    f = open(path_or_file, "w", encoding="utf-8") if own else path_or_file
    n = 0
    try:
        for n, event in enumerate(events, start=1):
            f.write(_serialize(event, n, trig))
    finally:
        if own:
            f.close()
    return n


def _serialize(event: Event, n: int, trig: bool) -> str:
    name = event.name if event.name is not None else ox.NamedNode(f"urn:spaseq:event:{n}")
    stamp = f"{name} {PROV_GENERATED_AT} {time_literal(event.time, event.is_datetime)} .\n"
    if trig:
        body = " ".join(f"{t.subject} {t.predicate} {t.object} ." for t in event.triples)
        return f"{stamp}{name} {{ {body} }}\n"
    return stamp + "".join(f"{t.subject} {t.predicate} {t.object} {name} .\n" for t in event.triples)


class StreamWriter:
    """Writes a time-ordered multi-stream event sequence into one file per stream."""

    def __init__(self, directory: Path, files: dict[str, str], fmt: str = "trig"):
        self.trig = fmt == "trig"
        self.paths = {stream: directory / f"{name}.{'trig' if self.trig else 'nq'}"
                      for stream, name in files.items()}
        self._files = {s: open(p, "w", encoding="utf-8") for s, p in self.paths.items()}
        self.count = 0
        self.triples = 0

    def write(self, event: Event) -> None:
        self.count += 1
        self.triples += len(event.triples)
        self._files[event.stream].write(_serialize(event, self.count, self.trig))

    def close(self) -> None:
        for f in self._files.values():
            f.close()


def merge_by_time(sources: list[Iterable[Event]]) -> Iterator[Event]:
    """Merge time-ordered event sources (stable for equal times)."""
    return heapq.merge(*sources, key=lambda e: e.time)


# =============================================================================
# Stock market (SMD): Q3 head and shoulders, Q4 V-shape
# =============================================================================

PRED = "http://example/"
SMD_STREAM = "http://stockmarket.org/stocks"
SMD_KB = "http://stockmarket.org/db"
SMD_DB = "http://stockmarket.org/db#"


def stock_events(n: int, companies: int = 10, sectors: int = 1, seed: int = 1,
                 start: int = 0, stream: str = SMD_STREAM) -> Iterator[Event]:
    """``n`` stock transactions, one per second from ``start``.

    Each event is one transaction of a random company (6 triples)::

        :tx/i a :Transaction ; :company :company/k ; :type :Buy|:Sell .
        :company/k :price p ; :volume v ; :sector :sector/j .

    Prices follow a per-company multiplicative random walk (xsd:decimal, two
    places), volumes are round lots (xsd:integer).  The paper's SMD has 10
    companies in 1 sector, replicated to 110 companies in 11 sectors.
    """
    rng = random.Random(seed)
    price_p, volume_p, sector_p = _iri(PRED + "price"), _iri(PRED + "volume"), _iri(PRED + "sector")
    company_p, type_p = _iri(PRED + "company"), _iri(PRED + "type")
    tx_class, buy, sell = _iri(PRED + "Transaction"), _iri(PRED + "Buy"), _iri(PRED + "Sell")
    names = [_iri(f"{PRED}company/{k}") for k in range(companies)]
    sector_of = [_iri(f"{PRED}sector/{k % max(1, sectors)}") for k in range(companies)]
    prices = [rng.uniform(20.0, 200.0) for _ in range(companies)]
    for i in range(n):
        k = rng.randrange(companies)
        prices[k] = max(1.0, prices[k] * math.exp(rng.gauss(0.0, 0.004)))
        company = names[k]
        tx = _iri(f"{PRED}tx/{i}")
        triples = (
            ox.Triple(tx, _RDF_TYPE, tx_class),
            ox.Triple(tx, company_p, company),
            ox.Triple(tx, type_p, buy if rng.random() < 0.5 else sell),
            ox.Triple(company, price_p, _dec(prices[k])),
            ox.Triple(company, volume_p, _int(rng.randint(1, 100) * 100)),
            ox.Triple(company, sector_p, sector_of[k]),
        )
        yield Event(stream, start + i, triples, name=_iri(f"urn:spaseq:bench:smd:{i}"))


PEERS = "http://example.org/stock/"
PEERS_STREAM = "http://example.org/stock"
_PEERS_T0 = 1704067200      # 2024-01-01T00:00:00Z
_MASK64 = (1 << 64) - 1


def peers_stock_events(n: int, seed: int = 42) -> Iterator[Event]:
    """The peers' synthetic stock stream (``../shared/data/peers-stock/gen_stream.py``,
    whose docstring defines it for every engine): 100 companies, one event a second
    from 2024-01-01T00:00:00Z, each ``ex:cK ex:price P . ex:cK ex:volume V`` with
    integers drawn by SplitMix64.  The same events as the peers' ``stock_trig.py``."""
    state = seed & _MASK64

    def draw() -> int:
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31)

    price_p, volume_p = _iri(PEERS + "price"), _iri(PEERS + "volume")
    companies = [_iri(f"{PEERS}c{k}") for k in range(100)]
    for i in range(n):
        company, price, volume = companies[draw() % 100], 1 + draw() % 100, 1 + draw() % 1000
        yield Event(PEERS_STREAM, _PEERS_T0 + i, (ox.Triple(company, price_p, _int(price)),
                                                  ox.Triple(company, volume_p, _int(volume))),
                    name=_iri(f"{PEERS}e{i}"), is_datetime=True)


def peers_v_shape(strategy: str = ",", window: int = 600) -> str:
    """The peers' V-shape queries (``../shared/data/peers-stock/*.rq``): under
    skip-till-any over every company (``v-shape-skip-till-any.rq``), under the other
    strategies per company (``v-shape-strict-per-company.rq``)."""
    s = _strategy(strategy)
    partition = "" if strategy == ":" else "PARTITION BY (?c)"
    return f"""PREFIX ex: <{PEERS}>
SELECT ?c ?p1 ?p2 ?p3
{_within(window)}
{partition}
FROM STREAM S <{PEERS_STREAM}>
WHERE {{
  SEQ (A {s} B {s} C)
  DEFINE GPM A ON S {{ ?c ex:price ?p1 . }}
  DEFINE GPM B ON S {{ ?c ex:price ?p2 . FILTER(?p2 > ?p1) }}
  DEFINE GPM C ON S {{ ?c ex:price ?p3 . FILTER(?p3 < ?p2) }}
}}
"""


def kb_quads(graph: str, entity_triples: Callable[[int], list[tuple]], size: int) -> Iterator[ox.Quad]:
    """``size`` quads in ``graph``: ``entity_triples(k)`` for k = 0, 1, 2, ...
    until there are enough (the last entity may be cut short)."""
    g = _iri(graph)
    made = 0
    for k in itertools.count():
        for s, p, o in entity_triples(k):
            if made >= size:
                return
            yield ox.Quad(s, p, o, g)
            made += 1


def _company_entity(k: int, sectors: int, rng_seed: int) -> list[tuple]:
    rng = random.Random(rng_seed * 1_000_003 + k)
    db = SMD_DB
    c = _iri(f"{PRED}company/{k}")
    ceo = _iri(f"{PRED}person/ceo{k}")
    address = _iri(f"{PRED}address/company{k}")
    return [
        (c, _iri(db + "name"), ox.Literal(f"Company {k} Inc.")),
        (c, _iri(db + "sector"), _iri(f"{PRED}sector/{k % max(1, sectors)}")),
        (c, _iri(db + "ceo"), ceo),
        (c, _iri(db + "url"), _iri(f"http://company{k}.example.com/")),
        (c, _iri(db + "phone"), ox.Literal(f"+1-555-{rng.randrange(10**7):07d}")),
        (c, _iri(db + "address"), address),
        (ceo, _iri(db + "name"), ox.Literal(f"CEO {k}")),
        (address, _iri(db + "street"), ox.Literal(f"{rng.randint(1, 999)} Main Street")),
        (address, _iri(db + "city"), ox.Literal(rng.choice(["New York", "Boston", "Chicago", "Austin"]))),
        (address, _iri(db + "zip"), ox.Literal(f"{rng.randrange(10**5):05d}")),
    ]


def company_kb(size: int = 10_000, sectors: int = 1, seed: int = 1) -> KnowledgeBase:
    """A background KB of ``size`` triples about companies, in graph
    ``<http://stockmarket.org/db>``: name, sector, CEO (and the CEO's name),
    URL, phone, address (street, city, zip): 10 triples per company, for
    companies 0, 1, 2, ... (the stream's companies come first; the rest make
    the KB as large as asked, as a real company register would be)."""
    return _memory_kb(kb_quads(SMD_KB, lambda k: _company_entity(k, sectors, seed), size))


def _strategy(op: str) -> str:
    try:
        return STRATEGIES[op]
    except KeyError:
        raise ValueError(f"unknown strategy {op!r} (use , ; : or strict, next, any)") from None


def _within(window) -> str:
    return f"WITHIN {window} SECONDS"


def q4_v_shape(strategy: str = ",", window: int = 3600, kb: bool = False) -> str:
    """Paper Query 4 (V-shape), partitioned by company (the paper's query reads
    one company's stream; PARTITION BY gives each company its own sub-stream
    of the multi-company stream).  ``kb``: GPM A also joins the company KB."""
    s = _strategy(strategy)
    kb_join = kb_select = ""
    if kb:
        kb_join = f"\n    GRAPH <{SMD_KB}> {{ ?company db:name ?cname ; db:ceo ?ceo . ?ceo db:name ?ceoname . }}"
        kb_select = " ?cname ?ceoname"
    return f"""PREFIX pred: <{PRED}>
PREFIX db: <{SMD_DB}>
SELECT ?company ?p1 ?p2 ?p3 ?vol1 ?vol2 ?vol3{kb_select}
{_within(window)}
PARTITION BY (?company)
FROM STREAM S1 <{SMD_STREAM}>
WHERE {{
  SEQ (A {s} B {s} C)
  DEFINE GPM A ON S1 {{
    ?company pred:price ?p1 ; pred:volume ?vol1 .{kb_join}
  }}
  DEFINE GPM B ON S1 {{
    ?company pred:price ?p2 ; pred:volume ?vol2 .
    FILTER (?p2 > ?p1)
  }}
  DEFINE GPM C ON S1 {{
    ?company pred:price ?p3 ; pred:volume ?vol3 .
    FILTER (?p3 < ?p2)
  }}
}}
"""


def q3_head_and_shoulders(strategy: str = ",", window: int = 3600) -> str:
    """Paper Query 3 (head and shoulders, 7 GPMs), partitioned by company."""
    s = _strategy(strategy)
    filters = {
        "B": "?p2 > ?p1", "C": "?p3 < ?p2 && ?p3 > ?p1", "D": "?p4 > ?p2",
        "E": "?p5 < ?p4 && ?p5 > ?p3", "F": "?p6 > ?p5 && ?p6 < ?p4", "G": "?p7 < ?p6 && ?p7 > ?p5",
    }
    gpms = []
    for i, name in enumerate("ABCDEFG", start=1):
        flt = f"\n    FILTER ({filters[name]})" if name in filters else ""
        gpms.append(f"  DEFINE GPM {name} ON S1 {{\n    ?company pred:price ?p{i} ; pred:volume ?vol{i} .{flt}\n  }}")
    seq = f" {s} ".join("ABCDEFG")
    return f"""PREFIX pred: <{PRED}>
SELECT ?company ?p1 ?p2 ?p3 ?p4 ?p5 ?p6 ?p7 ?vol1 ?vol7
{_within(window)}
PARTITION BY (?company)
FROM STREAM S1 <{SMD_STREAM}>
WHERE {{
  SEQ ({seq})
{chr(10).join(gpms)}
}}
"""


# =============================================================================
# Credit cards (CCD): Q2 big after small
# =============================================================================

CCD_STREAM = "http://creditcard.org/transactions"
CCD_KB = "http://creditcard.org/db"
CCD_DB = "http://creditcard.org/db#"
CARD_FILE = "creditcard/card10k.nt"


def credit_events(n: int, cards: int = 212, seed: int = 2, stream: str = CCD_STREAM,
                  start: int = 1) -> Iterator[Event]:
    """``n`` card transactions shaped like ``card10k.nt``: two triples each
    (``<card#N> :id "N" ; :amount x``, amount an xsd:double in 0..500),
    one per second from ``start``, with the file's burstiness (a card's
    transactions tend to follow each other)."""
    rng = random.Random(seed)
    id_p, amount_p = _iri(PRED + "id"), _iri(PRED + "amount")
    card = rng.randrange(2, cards + 2)
    for i in range(n):
        if rng.random() > 0.65:
            card = rng.randrange(2, cards + 2)
        node = _iri(f"{PRED}card#{card}")
        triples = (ox.Triple(node, id_p, ox.Literal(str(card))),
                   ox.Triple(node, amount_p, _double(rng.uniform(0.0, 500.0))))
        yield Event(stream, start + i, triples, name=_iri(f"urn:spaseq:bench:ccd:{i}"))


def _card_entity(k: int, seed: int) -> list[tuple]:
    rng = random.Random(seed * 1_000_003 + k)
    db = CCD_DB
    card = _iri(f"{PRED}card#{k}")
    bank = _iri(f"{PRED}bank/{k % 50}")
    triples = [
        (card, _iri(db + "cardHolder"), ox.Literal(f"Holder {k}")),
        (card, _iri(db + "holderAddress"), ox.Literal(f"{rng.randint(1, 999)} Elm Street, Springfield")),
        (card, _iri(db + "issuingBank"), bank),
        (card, _iri(db + "cardType"), ox.Literal(rng.choice(["visa", "mastercard", "amex"]))),
    ]
    if k < 50:
        triples.append((bank, _iri(db + "bankAddress"), ox.Literal(f"{k} Bank Plaza")))
    return triples


def card_kb(size: int = 10_000, seed: int = 2) -> KnowledgeBase:
    """A KB of ``size`` triples about cards (holder, address, bank, type) in
    graph ``<http://creditcard.org/db>``: 4 triples per card (and 50 banks'
    addresses), cards 0, 1, 2, ... (at least the 214 the data uses)."""
    return _memory_kb(kb_quads(CCD_KB, lambda k: _card_entity(k, seed), max(size, 1_000)))


def q2_big_after_small(strategy: str = ",", window: int = 1800) -> str:
    """Paper Query 2 (credit-card fraud, big after small), adapted: every
    transaction may start a run; then one or more transactions of the same
    card at least ten times as large; the card holder from the KB."""
    s = _strategy(strategy)
    return f"""PREFIX pred: <{PRED}>
PREFIX db: <{CCD_DB}>
SELECT ?card ?amount1 ?amount2 ?name (COUNT(?amount2) AS ?bigs)
{_within(window)}
FROM STREAM S1 <{CCD_STREAM}>
WHERE {{
  SEQ (A {s} B+)
  DEFINE GPM A ON S1 {{
    ?card pred:id ?id1 ; pred:amount ?amount1 .
    FILTER (?amount1 > 0)
  }}
  DEFINE GPM B ON S1 {{
    ?card pred:id ?id1 ; pred:amount ?amount2 .
    FILTER (?amount2 >= 10 * ?amount1)
    GRAPH <{CCD_KB}> {{ ?card db:cardHolder ?name ; db:holderAddress ?address . }}
  }}
}}
"""


# =============================================================================
# Smart home (SHD): Q1 smart grid over three streams
# =============================================================================

SG = "http://smartgrid.org/"
SG_POWER = SG + "mainSource"
SG_WEATHER = SG + "weather"
SG_STORAGE = SG + "storageSource"
SG_KB = SG + "db"
_POWER_DAY0 = 1335830400          # 2012-05-01, the power and weather files' first day
_GENERATION_DAY0 = 1312156800     # 2011-08-01, the generation files' first day (UTC)
_EDT = 4 * 3600                   # generation is UTC; the others are local time (EDT)


def _tariff(seconds_of_day: int) -> float:
    """Time-of-use grid tariff (cents/kWh) by local hour."""
    hour = seconds_of_day // 3600
    if hour < 7:
        return 12.0
    if hour < 11 or hour >= 21:
        return 20.0
    if hour < 17:
        return 18.0
    return 26.0


def _power_event(t: int, watts: float) -> Event:
    home, pw = _iri(SG + "homeC"), _iri(f"{SG}power/{t}")
    fare = _tariff(t % 86400) + round(watts / 500.0, 1)
    triples = (
        ox.Triple(home, _iri(SG + "loc"), _iri(SG + "amherst")),
        ox.Triple(home, _iri(SG + "pow"), pw),
        ox.Triple(pw, _iri(SG + "source"), ox.Literal("fuel")),
        ox.Triple(pw, _iri(SG + "watts"), _dec(watts, 1)),
        ox.Triple(pw, _iri(SG + "fare"), _dec(fare, 1)),
    )
    return Event(SG_POWER, t, triples, name=_iri(f"urn:spaseq:bench:shd:power:{t}"))


def _weather_event(t: int, wind: int, temp: float, humidity: int) -> Event:
    w, vl = _iri(f"{SG}weather/{t}"), _iri(f"{SG}value/{t}")
    triples = (
        ox.Triple(w, _iri(SG + "loc"), _iri(SG + "amherst")),
        ox.Triple(w, _iri(SG + "value"), vl),
        ox.Triple(vl, _iri(SG + "windsp"), _int(wind)),
        ox.Triple(vl, _iri(SG + "temp"), _dec(temp, 1)),
        ox.Triple(vl, _iri(SG + "humidity"), _int(humidity)),
    )
    return Event(SG_WEATHER, t, triples, name=_iri(f"urn:spaseq:bench:shd:weather:{t}"))


def _storage_event(t: int, panel_amps: float, battery: float) -> Event:
    st, spw = _iri(SG + "storage/homeC"), _iri(f"{SG}storage/{t}")
    production = max(0.0, panel_amps - 11.3)
    fare = max(8.0, 24.0 - production)
    triples = (
        ox.Triple(st, _iri(SG + "loc"), _iri(SG + "amherst")),
        ox.Triple(st, _iri(SG + "pow"), spw),
        ox.Triple(spw, _iri(SG + "source"), ox.Literal("solar")),
        ox.Triple(spw, _iri(SG + "current"), _dec(panel_amps, 2)),
        ox.Triple(spw, _iri(SG + "battery"), _dec(battery, 2)),
        ox.Triple(spw, _iri(SG + "fare"), _dec(fare, 1)),
    )
    return Event(SG_STORAGE, t, triples, name=_iri(f"urn:spaseq:bench:shd:storage:{t}"))


def _csv_rows(path: Path) -> Iterator[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.reader(f):
            if row and row[0][:1].isdigit():
                yield row


def _smarthome_real(root: Path, step: int) -> list[list[Event]]:
    """The three streams of the UMass HomeC slice, aligned on the power days."""
    power_files = sorted((root / "power").glob("*.csv"))
    env_files = sorted((root / "environmental").glob("*.csv"))
    gen_files = sorted((root / "generation").glob("*.csv"))
    power: list[Event] = []
    for path in power_files:
        bucket, total, count = None, 0.0, 0
        for row in _csv_rows(path):
            t, watts = int(row[0]), float(row[1])
            b = t - t % step
            if b != bucket:
                if count:
                    power.append(_power_event(bucket, total / count))
                bucket, total, count = b, 0.0, 0
            total += watts
            count += 1
        if count:
            power.append(_power_event(bucket, total / count))
    weather: list[Event] = []
    for path in env_files:
        for row in _csv_rows(path):
            t = int(row[0])
            weather.append(_weather_event(t - t % step, int(float(row[5])), float(row[1]), int(float(row[2]))))
    storage: list[Event] = []
    for path in gen_files:
        for row in _csv_rows(path):
            # UTC -> local time, then the generation days onto the power days
            offset = int(row[0]) - _EDT - _GENERATION_DAY0
            t = _POWER_DAY0 + offset
            if offset < 0 or t % step:
                continue
            amps = float(row[3]) + float(row[4]) + float(row[5])
            storage.append(_storage_event(t, amps, float(row[6])))
    return [_dedupe(sorted(s, key=lambda e: e.time)) for s in (power, weather, storage)]


def _dedupe(events: list[Event]) -> list[Event]:
    out: list[Event] = []
    for e in events:
        if out and out[-1].time == e.time:
            continue
        out.append(e)
    return out


def _smarthome_generated(days: int, step: int, seed: int) -> list[list[Event]]:
    """Three synthetic streams with the HomeC slice's rates and ranges (one
    random generator per stream: a prefix does not depend on ``days``)."""
    rng_p, rng_w, rng_s = (random.Random(seed * 1000 + i) for i in range(3))
    power, weather, storage = [], [], []
    watts = 400.0
    for t in range(_POWER_DAY0, _POWER_DAY0 + days * 86400, step):
        hour = (t % 86400) / 3600
        base = 350 + 350 * max(0.0, math.sin((hour - 6) / 16 * math.pi))
        watts = max(50.0, 0.8 * watts + 0.2 * base + rng_p.gauss(0, 120))
        power.append(_power_event(t, watts))
        if t % 60 == 0:
            wind = rng_w.choices([0, 1, 2, 3, 5, 6], [56, 16, 12, 14, 1.5, 0.5])[0]
            weather.append(_weather_event(t, wind, 42 + 5 * math.sin(hour / 24 * math.pi) + rng_w.gauss(0, .3),
                                          rng_w.randint(60, 98)))
        if t % max(step, 5) == 0:
            sun = max(0.0, math.sin((hour - 7) / 12 * math.pi))
            storage.append(_storage_event(t, 11.3 + 14 * sun * rng_s.uniform(0.6, 1.0),
                                          12.5 + rng_s.uniform(-.2, .6)))
    return [power, weather, storage]


def smarthome_events(n: int | None = None, step: int = 10, seed: int = 3, real: bool | None = None) -> Iterator[Event]:
    """Power (S1), weather (S2) and storage/solar (S3) events for Q1, merged by time.

    Real data (``smarthome/`` in the shared data folder, unless ``real`` is
    False): power watts averaged over ``step`` seconds (with a time-of-use
    fare), weather per minute (wind speed, temperature, humidity), solar
    generation every ``step`` seconds; the generation files are from 2011 in
    UTC and are aligned on the power files' days by local time of day.  The
    slice starts at 07:00 on the first day (the nights have no costly grid
    draw, so a small slice from midnight would match nothing) and repeats
    (shifted by its length) when more events are asked for.
    Without the data, a seeded generator with the same rates stands in.
    """
    root = data_dir() / "smarthome"
    use_real = root.is_dir() if real is None else real
    if use_real:
        streams = _smarthome_real(root, step)
    else:       # as many days as n needs (about 2 * 86400 / step + 1440 events a day)
        per_day = 2 * 86400 // step + 1440
        days = 2 if n is None else max(1, -(-n // per_day) + 1)
        streams = _smarthome_generated(days, step, seed)
    morning = _POWER_DAY0 + 7 * 3600
    streams = [[e for e in s if e.time >= morning] for s in streams]
    return _take(_cycle_streams(streams), n)


def smartgrid_kb(size: int = 1_000, seed: int = 3) -> KnowledgeBase:
    """The smart grid KB of Q1 (graph ``<http://smartgrid.org/db>``): HomeC's
    city, neighbour and owner, padded with other houses up to ``size`` triples."""
    def house(k: int) -> list[tuple]:
        h = _iri(SG + ("homeC" if k == 0 else f"home{k}"))
        return [(h, _iri(SG + "locatedIn"), _iri(SG + ("city/amherst" if k == 0 else f"city/{k % 40}"))),
                (h, _iri(SG + "nearBy"), _iri(f"{SG}home{k + 1}")),
                (h, _iri(SG + "ownerName"), ox.Literal(f"Owner {k}"))]
    return _memory_kb(kb_quads(SG_KB, house, size))


def q1_smart_grid(strategy: str = ";", window: int = 1800) -> str:
    """Paper Query 1 (smart grid), as adapted in docs/language.md: an
    expensive grid draw, then windy weather (Kleene+), then cheaper solar
    storage, all at the house's location, with the owner from the KB."""
    s = _strategy(strategy)
    return f"""PREFIX : <{SG}>
SELECT ?house ?fr1 ?fr2 ?sp ?house2 ?city ?oname
{_within(window)}
FROM STREAM S1 <{SG_POWER}>
FROM STREAM S2 <{SG_WEATHER}>
FROM STREAM S3 <{SG_STORAGE}>
WHERE {{
  SEQ (A {s} B+ {s} C)
  DEFINE GPM A ON S1 {{
    ?house :loc ?l ; :pow ?pw .
    ?pw :source "fuel" ; :fare ?fr1 .
    FILTER (?fr1 > 20)
    GRAPH <{SG_KB}> {{ ?house :locatedIn ?city ; :nearBy ?house2 ; :ownerName ?oname . }}
  }}
  DEFINE GPM B ON S2 {{
    ?wthr :loc ?l ; :value ?vl .
    ?vl :windsp ?sp ; :temp ?temp .
    FILTER (?sp > 0)
  }}
  DEFINE GPM C ON S3 {{
    ?storage :loc ?l ; :pow ?spw .
    ?spw :source "solar" ; :fare ?fr2 .
    FILTER (?fr2 < ?fr1)
  }}
}}
"""


# =============================================================================
# CityBench traffic (TD): Q5 conjunction over three streams
# =============================================================================

TD_SERVICE = "http://www.insight-centre.org/dataset/SampleEventService#"
TD_SENSORS = ("182955", "195578", "195446")
TD_STREAMS = tuple(f"{TD_SERVICE}AarhusTrafficData{s}" for s in TD_SENSORS)
TD_KB = "http://www.insight-centre.org/dataset/SensorRepository"
SSN = "http://purl.oclc.org/NET/ssnx/ssn#"
SAO = "http://purl.oclc.org/NET/sao/"
CT = "http://www.insight-centre.org/citytraffic#"
_TD_STEP = 300


def _traffic_event(stream: str, t, row_id: str, speed: int, count: int) -> Event:
    sensor = _iri(stream)
    triples = []
    for prop, value in (("AverageSpeed", speed), ("VehicleCount", count)):
        obs = _iri(f"http://www.insight-centre.org/dataset/observation/{row_id}-{prop}")
        triples += [ox.Triple(obs, _iri(SSN + "observedProperty"), _iri(CT + prop)),
                    ox.Triple(obs, _iri(SAO + "hasValue"), _int(value)),
                    ox.Triple(obs, _iri(SSN + "observedBy"), sensor)]
    return Event(stream, t, tuple(triples), name=_iri(f"urn:spaseq:bench:td:{row_id}"), is_datetime=True)


def _traffic_real(root: Path) -> list[list[Event]]:
    streams = []
    for sensor, stream in zip(TD_SENSORS, TD_STREAMS):
        rows = []
        with open(root / "streams" / f"AarhusTrafficData{sensor}.csv", newline="", encoding="utf-8") as f:
            for rec in csv.DictReader(f):
                rows.append((datetime_seconds(rec["TIMESTAMP"]), rec["_id"], int(rec["avgSpeed"]),
                             int(rec["vehicleCount"])))
        rows.sort(key=lambda r: r[0])
        events = [_traffic_event(stream, t, rid, sp, c) for t, rid, sp, c in rows]
        streams.append(_dedupe(events))
    return streams


def _traffic_generated(days: int, seed: int) -> list[list[Event]]:
    start = int(datetime_seconds("2014-08-01T08:00:00"))
    streams = []
    for i, stream in enumerate(TD_STREAMS):
        rng = random.Random(seed * 1000 + i)       # one generator per stream: a stream's
        speed, events = 55.0, []                   # prefix does not depend on ``days``
        for k in range(days * 86400 // _TD_STEP):
            if rng.random() < 0.02:
                continue                    # a missing report, as in the real files
            t = start + k * _TD_STEP
            hour = (t % 86400) / 3600
            rush = 1.0 if 7 <= hour < 9 or 15 <= hour < 18 else 0.0
            speed = min(90.0, max(5.0, 0.8 * speed + 0.2 * (60 - 20 * rush) + rng.gauss(0, 5)))
            count = max(0, int(rng.gauss(4 + 10 * rush + 4 * math.sin(hour / 24 * math.pi), 3)))
            events.append(_traffic_event(stream, t, f"g{i}-{k}", int(speed), count))
        streams.append(events)
    return streams


def traffic_events(n: int | None = None, seed: int = 5, real: bool | None = None) -> Iterator[Event]:
    """Three Aarhus road-segment streams for Q5, merged by time (xsd:dateTime).

    Each CSV row (every 5 minutes) becomes an event of two SSN/SAO
    observations, average speed and vehicle count (6 triples)::

        obs ssn:observedProperty ct:AverageSpeed ; sao:hasValue 54 ; ssn:observedBy <sensor> .

    Rows are sorted by time and duplicate timestamps dropped (the files have
    a few).  Without the CityBench slice, a seeded generator stands in.
    """
    root = data_dir() / "citybench"
    use_real = (root / "streams").is_dir() if real is None else real
    # the generator makes as many days as n needs (3 streams, 288 reports a day each)
    days = 60 if n is None else max(1, -(-n // (3 * 280)) + 1)
    streams = _traffic_real(root) if use_real else _traffic_generated(days, seed)
    return _take(_cycle_streams(streams), n)


def traffic_kb(real: bool | None = None) -> KnowledgeBase:
    """The CityBench sensor repository (``SensorRepository.n3``) in graph
    ``<http://www.insight-centre.org/dataset/SensorRepository>``; a tiny
    stand-in describing the three sensors when the data is absent."""
    path = data_dir() / "citybench" / "SensorRepository.n3"
    use_real = path.is_file() if real is None else real
    kb = _memory_kb()
    if use_real:
        kb.load(str(path), TD_KB)
    else:
        g = _iri(TD_KB)
        for stream in TD_STREAMS:
            kb.store.add(ox.Quad(_iri(stream), _RDF_TYPE, _iri(SSN + "Sensor"), g))
    return kb


def q5_traffic(strategy: str = ";", window: int = 1800, kb: bool = False) -> str:
    """Paper Query 5 (traffic), as adapted in docs/language.md, with the
    comparisons turned round: a reading on segment 1, then at one time
    (conjunction) the same quantity no higher on segment 2 and no higher
    still on segment 3 (on the Aarhus data speeds and counts fall from
    segment 1 to 3, so the paper's ``>=`` almost never holds).  ``kb``: A also checks
    its sensor in the CityBench sensor repository."""
    s = _strategy(strategy)
    kb_join = ""
    if kb:
        kb_join = f"\n    ?t1 ssn:observedBy ?sensor .\n    GRAPH <{TD_KB}> {{ ?sensor a ssn:Sensor }}"
    return f"""PREFIX ssn: <{SSN}>
PREFIX sao: <{SAO}>
SELECT ?p1 ?v1 ?v2 ?v3
{_within(window)}
FROM STREAM S1 <{TD_STREAMS[0]}>
FROM STREAM S2 <{TD_STREAMS[1]}>
FROM STREAM S3 <{TD_STREAMS[2]}>
WHERE {{
  SEQ (A {s} (B & C))
  DEFINE GPM A ON S1 {{
    ?t1 ssn:observedProperty ?p1 ; sao:hasValue ?v1 .
    FILTER (?v1 > 3){kb_join}
  }}
  DEFINE GPM B ON S2 {{
    ?t2 ssn:observedProperty ?p1 ; sao:hasValue ?v2 .
    FILTER (?v2 <= ?v1)
  }}
  DEFINE GPM C ON S3 {{
    ?t3 ssn:observedProperty ?p1 ; sao:hasValue ?v3 .
    FILTER (?v3 <= ?v2)
  }}
}}
"""


# =============================================================================
# Vessels: Q6 trajectory classification
# =============================================================================

HARBOUR_STREAM = "http://harbour.org/boats"
HARBOUR_KB = "http://harbour.org/db"
HARBOUR_DB = "http://harbour.org/db#"
_DIRECTIONS = ("N", "NE", "E", "SE", "S", "SW", "W", "NW")


def vessel_events(n: int, vessels: int = 20, seed: int = 6, start: int = 0,
                  stream: str = HARBOUR_STREAM) -> Iterator[Event]:
    """``n`` position reports of ``vessels`` fishing boats, one per second.

    Each boat cycles: moored in the harbour (speed 0), leaving (speed 1-3,
    "harbour"), speeding up at sea on a fixed heading (now and then a slower
    report or a course change), stopped in the fishing area (speed 0),
    fishing, and back.  Four triples per report: speed (xsd:integer),
    location, direction, course."""
    rng = random.Random(seed)
    speed_p, loc_p = _iri(PRED + "speed"), _iri(PRED + "location")
    dir_p, course_p = _iri(PRED + "direction"), _iri(PRED + "course")
    names = [_iri(f"{PRED}vessel/{k}") for k in range(vessels)]
    states = [_vessel_trip(rng) for _ in range(vessels)]
    for i in range(n):
        k = rng.randrange(vessels)
        try:
            speed, location, direction = next(states[k])
        except StopIteration:
            states[k] = _vessel_trip(rng)
            speed, location, direction = next(states[k])
        v = names[k]
        triples = (ox.Triple(v, speed_p, _int(speed)), ox.Triple(v, loc_p, ox.Literal(location)),
                   ox.Triple(v, dir_p, ox.Literal(direction)),
                   ox.Triple(v, course_p, _int(_DIRECTIONS.index(direction) * 45)))
        yield Event(stream, start + i, triples, name=_iri(f"urn:spaseq:bench:vessel:{i}"))


def _vessel_trip(rng: random.Random) -> Iterator[tuple[int, str, str]]:
    heading = rng.choice(_DIRECTIONS)
    for _ in range(rng.randint(1, 6)):
        yield 0, "harbour", heading
    speed = rng.randint(1, 3)
    yield speed, "harbour", heading
    for _ in range(rng.randint(2, 8)):
        if rng.random() < 0.1:
            yield max(1, speed - rng.randint(1, 3)), "sea", heading        # a slower report
        elif rng.random() < 0.05:
            yield speed + 1, "sea", rng.choice(_DIRECTIONS)                  # a course change
        else:
            speed += rng.randint(1, 3)
            yield speed, "sea", heading
    yield 0, "fishingarea", heading
    for _ in range(rng.randint(2, 10)):
        yield rng.randint(0, 2), "fishingarea", rng.choice(_DIRECTIONS)
    back = _DIRECTIONS[(_DIRECTIONS.index(heading) + 4) % 8]
    for _ in range(rng.randint(2, 8)):
        yield rng.randint(6, 14), "sea", back
    yield 0, "harbour", back


def _vessel_entity(k: int, seed: int) -> list[tuple]:
    rng = random.Random(seed * 1_000_003 + k)
    db = HARBOUR_DB
    v, company = _iri(f"{PRED}vessel/{k}"), _iri(f"{PRED}fleet/{k % 7}")
    triples = [(v, _iri(db + "name"), ox.Literal(f"Vessel {k}")),
               (v, _iri(db + "operatedBy"), company),
               (v, _iri(db + "flag"), ox.Literal(rng.choice(["FR", "NO", "DK", "ES"])))]
    if k < 7:
        triples.append((company, _iri(db + "name"), ox.Literal(f"Fleet {k}")))
    return triples


def vessel_kb(size: int = 1_000, seed: int = 6) -> KnowledgeBase:
    """The harbour KB of Q6 (graph ``<http://harbour.org/db>``): vessel name,
    operator and flag (3 triples per vessel) and 7 operators' names, up to
    ``size`` triples (at least the generator's 20 vessels)."""
    return _memory_kb(kb_quads(HARBOUR_KB, lambda k: _vessel_entity(k, seed), max(size, 100)))


def q6_trajectory(strategy: str = ",", window: int = 1800) -> str:
    """Paper Query 6 (trajectory classification), per vessel: leaves the
    harbour, speeds up on one heading (Kleene+), stops in the fishing area;
    names from the KB."""
    s = _strategy(strategy)
    return f"""PREFIX pred: <{PRED}>
PREFIX db: <{HARBOUR_DB}>
SELECT ?vessel ?s1 ?s2 ?dir1 ?n ?cname
{_within(window)}
PARTITION BY (?vessel)
FROM STREAM S1 <{HARBOUR_STREAM}>
WHERE {{
  SEQ (A {s} B+ {s} C)
  DEFINE GPM A ON S1 {{
    ?vessel pred:speed ?s1 ; pred:location "harbour" ; pred:direction ?dir1 .
    FILTER (?s1 > 0)
  }}
  DEFINE GPM B ON S1 {{
    ?vessel pred:speed ?s2 ; pred:location ?l ; pred:direction ?dir1 .
    FILTER (?s2 > ?s1)
  }}
  DEFINE GPM C ON S1 {{
    ?vessel pred:speed 0 ; pred:location "fishingarea" ; pred:direction ?dir3 .
    GRAPH <{HARBOUR_KB}> {{
      ?vessel db:name ?n ; db:operatedBy ?company .
      ?company db:name ?cname .
    }}
  }}
}}
"""


# =============================================================================
# High cardinality: PARTITION BY over keys that keep coming
# =============================================================================

KEYS_STREAM = "http://example.org/keys"


def key_per_event_events(n: int, start: int = 0, stream: str = KEYS_STREAM) -> Iterator[Event]:
    """``n`` events, one per second, each of a key never seen before:
    ``:c{i} :price {i % 100}`` (xsd:integer).  No key comes back, so no
    sequence of two atoms matches: what is measured is what the keys cost."""
    price_p = _iri(PRED + "price")
    for i in range(n):
        triples = (ox.Triple(_iri(f"{PRED}c{i}"), price_p, _int(i % 100)),)
        yield Event(stream, start + i, triples, name=_iri(f"urn:spaseq:bench:keys:{i}"))


def q_key_per_event(strategy: str = ",", window: int = 60) -> str:
    """Per key, a price then a higher one: ``SEQ (A s B)`` partitioned by key."""
    s = _strategy(strategy)
    return f"""PREFIX pred: <{PRED}>
SELECT ?c ?p1 ?p2
{_within(window)}
PARTITION BY (?c)
FROM STREAM S1 <{KEYS_STREAM}>
WHERE {{
  SEQ (A {s} B)
  DEFINE GPM A ON S1 {{ ?c pred:price ?p1 . }}
  DEFINE GPM B ON S1 {{ ?c pred:price ?p2 . FILTER (?p2 > ?p1) }}
}}
"""


def many_cards_events(n: int, active: int = 100, seed: int = 7, start: int = 0,
                      stream: str = KEYS_STREAM) -> Iterator[Event]:
    """``n`` card transactions, one per second, over cards that come and go:
    ``active`` cards are in use at a time; after each transaction one of them
    is replaced by a new card with probability 1/4, so a card makes about
    four transactions over some ``4 * active`` seconds and there are about
    ``n / 4`` cards in all.  Amounts (xsd:decimal) are mostly small, one in
    seven large (100 to 1000)."""
    rng = random.Random(seed)
    amount_p, merchant_p = _iri(PRED + "amount"), _iri(PRED + "merchant")
    merchants = [_iri(f"{PRED}merchant/{k}") for k in range(50)]
    cards = list(range(active))
    made = active
    for i in range(n):
        slot = rng.randrange(active)
        card = _iri(f"{PRED}card/{cards[slot]}")
        amount = rng.uniform(100.0, 1000.0) if rng.random() < 1 / 7 else rng.uniform(1.0, 50.0)
        triples = (ox.Triple(card, amount_p, _dec(amount)),
                   ox.Triple(card, merchant_p, merchants[rng.randrange(len(merchants))]))
        yield Event(stream, start + i, triples, name=_iri(f"urn:spaseq:bench:cards:{i}"))
        if rng.random() < 0.25:
            cards[rng.randrange(active)] = made
            made += 1


def q_card_big_after_small(strategy: str = ";", window: int = 300) -> str:
    """Per card: a transaction, then one or more at least ten times as large."""
    s = _strategy(strategy)
    return f"""PREFIX pred: <{PRED}>
SELECT ?card ?a1 ?a2 ?m2 (COUNT(?a2) AS ?bigs)
{_within(window)}
PARTITION BY (?card)
FROM STREAM S1 <{KEYS_STREAM}>
WHERE {{
  SEQ (A {s} B+)
  DEFINE GPM A ON S1 {{ ?card pred:amount ?a1 . }}
  DEFINE GPM B ON S1 {{ ?card pred:amount ?a2 ; pred:merchant ?m2 . FILTER (?a2 >= 10 * ?a1) }}
}}
"""


ORDERS_STREAM = "http://example.org/orders"


def order_events(n: int, seed: int = 11, start: int = 0, stream: str = ORDERS_STREAM) -> Iterator[Event]:
    """``n`` events, one per second: 45 % new orders (``:o{i} :kind "order"``),
    10 % cancellations and 45 % shipments of one of the last 3,600 orders
    (``:c{t} :kind "cancel" ; :of :o{i}``, ``:s{t} :kind "ship" ; :of :o{i}``)."""
    rng = random.Random(seed)
    kind_p, of_p = _iri(PRED + "kind"), _iri(PRED + "of")
    kinds = {k: ox.Literal(k) for k in ("order", "cancel", "ship")}
    orders = 0
    for t in range(n):
        r = rng.random()
        if r < 0.45 or orders < 10:
            orders += 1
            triples = (ox.Triple(_iri(f"{PRED}o{orders}"), kind_p, kinds["order"]),)
        else:
            kind = "cancel" if r < 0.55 else "ship"
            subject = _iri(f"{PRED}{kind[0]}{t}")
            order = _iri(f"{PRED}o{orders - rng.randrange(min(orders, 3600))}")
            triples = (ox.Triple(subject, kind_p, kinds[kind]), ox.Triple(subject, of_p, order))
        yield Event(stream, start + t, triples, name=_iri(f"urn:spaseq:bench:orders:{t}"))


def q_not_cancelled(strategy: str = ";", window: int = 3600, shipped: bool = True) -> str:
    """An order, no cancellation of it, then its shipment: a negation guard joined
    on the run's order, over a buffer as long as the window.  Without ``shipped``,
    an order not cancelled within the window (a trailing negation: a pending
    match per order, killed by its cancellation)."""
    s = _strategy(strategy)
    then_shipped = f" {s} B" if shipped else ""
    b_gpm = '\n  DEFINE GPM B ON S1 { ?s :kind "ship" ; :of ?o . }' if shipped else ""
    return f"""PREFIX : <{PRED}>
SELECT ?o{" ?s" if shipped else ""}
{_within(window)}
FROM STREAM S1 <{ORDERS_STREAM}>
WHERE {{
  SEQ (A {s} N!{then_shipped})
  DEFINE GPM A ON S1 {{ ?o :kind "order" . }}
  DEFINE GPM N ON S1 {{ ?c :kind "cancel" ; :of ?o . }}{b_gpm}
}}
"""


# =============================================================================
# Cycling and slicing
# =============================================================================

def _cycle_streams(streams: list[list[Event]]) -> Iterator[Event]:
    """The streams merged by time, repeated without end, each repetition
    shifted by the data's span (rounded up to a whole minute) so times keep
    increasing.  Repeated events get new graph names."""
    streams = [s for s in streams if s]
    if not streams:
        return iter(())
    first = min(s[0].time for s in streams)
    last = max(s[-1].time for s in streams)
    span = (last - first) // 60 * 60 + 60
    merged = list(merge_by_time(streams))

    def repeat():
        for k in itertools.count():
            if k == 0:
                yield from merged
                continue
            shift = span * k
            for e in merged:
                name = ox.NamedNode(f"{e.name.value}:r{k}") if isinstance(e.name, ox.NamedNode) else e.name
                yield Event(e.stream, e.time + shift, e.triples, name, e.position, e.is_datetime)
    return repeat()


def _take(events: Iterator[Event], n: int | None) -> Iterator[Event]:
    if n is None:
        raise ValueError("give a number of events (the real data repeats without end)")
    return itertools.islice(events, n)


def _real_credit(n: int) -> Iterator[Event]:
    """``card10k.nt`` cut every two triples (the reference implementation's
    manifest reading, times 1, 2, 3, ...), repeated when more is asked."""
    source = Source("nt-chunks", {CCD_STREAM: [str(data_dir() / CARD_FILE)]}, chunk=2, cycle=True)
    from ..errors import EventError
    return (e for e in open_source(source, n) if not isinstance(e, EventError))


def _repeat_chunks(path: str, stream: str, chunk: int, cycle: bool):
    from ..errors import EventError
    from ..streams.files import read_ntriples_chunks
    shift = 0
    for k in itertools.count():
        last = 0
        for item in read_ntriples_chunks(path, stream, chunk):
            if isinstance(item, EventError):
                yield item
                continue
            last = item.time
            yield item if k == 0 else Event(item.stream, item.time + shift, item.triples,
                                             item.name, item.position, item.is_datetime)
        if last == 0 or not cycle:
            return
        shift += last


def open_source(source: "Source", limit: int | None = None):
    """The prepared input of a workload, read the way ``spaseq run`` reads
    it (stream files, merged by time): ``Event`` and ``EventError`` items,
    at most ``limit`` events."""
    from ..errors import EventError
    from ..streams.files import merge_streams, read_stream_file
    readers = []
    for stream, paths in source.paths.items():
        for path in paths:
            if source.kind == "nt-chunks":
                readers.append(_repeat_chunks(path, stream, source.chunk, source.cycle))
            else:
                readers.append(read_stream_file(path, stream))
    items = readers[0] if len(readers) == 1 else merge_streams(readers)
    if limit is None:
        return items

    def limited():
        n = 0
        if limit <= 0:
            return
        for item in items:
            yield item
            if not isinstance(item, EventError):
                n += 1
                if n >= limit:
                    return
    return limited()


# =============================================================================
# The registry
# =============================================================================

@dataclass
class Source:
    """How a worker process reads a prepared workload's input (picklable)."""
    kind: str                       # "files": stream files; "nt-chunks": N-Triples cut every k triples
    paths: dict[str, list[str]]     # stream IRI -> files
    chunk: int = 0                  # nt-chunks: triples per event
    cycle: bool = False             # nt-chunks: repeat the file when more events are asked


@dataclass
class Workload:
    """A query (parameterised by strategy and window) with its data and KB."""
    name: str
    paper: str                                 # "Q1" ... "Q6"
    description: str
    make_query: Callable[..., str]
    make_events: Callable[[int], Iterable[Event]]
    windows: tuple[int, ...]                   # default windows, seconds
    strategy: str = ";"                        # the paper's / default strategy
    make_kb: Callable[[int], KnowledgeBase] | None = None
    kb_size: int = 10_000
    any_max_window: int = 120                  # skip-till-any is exponential: only small windows
    real: Callable[[], bool] = lambda: False   # does the real data slice exist?
    data_note: str = ""
    query_options: dict = field(default_factory=dict)
    strategies: tuple[str, ...] = (",", ";")   # run when --strategies is not given
    write_results: bool = False                # the timed run also writes each result as a JSON line

    def query(self, strategy: str | None = None, window: int | None = None) -> str:
        return self.make_query(strategy or self.strategy, window or self.windows[len(self.windows) // 2],
                               **self.query_options)

    def events(self, n: int) -> Iterator[Event]:
        return iter(self.make_events(n))

    def kb(self, size: int | None = None) -> KnowledgeBase | None:
        return None if self.make_kb is None else self.make_kb(size or self.kb_size)

    @property
    def streams(self) -> list[str]:
        from ..language.compiler import compile_query
        return sorted(compile_query(self.query()).streams)

    def writes_stream_files(self) -> bool:
        """Is the prepared input stream files (else ``card10k.nt`` read in chunks)?"""
        return not (self.name == "credit" and self.real())

    def prepare(self, n: int, directory: Path, fmt: str = "trig", kb_size: int | None = None) -> dict:
        """Write the first ``n`` events (one file per stream) and the KB into
        ``directory``; return what a worker needs to read them back."""
        directory.mkdir(parents=True, exist_ok=True)
        info: dict = {"workload": self.name, "events": 0, "triples": 0, "kb": [], "kb_triples": 0,
                      "real": self.real(), "note": self.data_note if self.real() else "generated"}
        if not self.writes_stream_files():
            info["source"] = Source("nt-chunks", {CCD_STREAM: [str(data_dir() / CARD_FILE)]}, chunk=2,
                                    cycle=True)
            info["events"] = n
            info["triples"] = 2 * n
            info["cycled"] = n > 20001
        else:
            files = {stream: f"{self.name}-{i}" for i, stream in enumerate(self.streams)}
            writer = StreamWriter(directory, files, fmt)
            try:
                for event in self.events(n):
                    writer.write(event)
            finally:
                writer.close()
            info["source"] = Source("files", {s: [str(p)] for s, p in writer.paths.items()})
            info["events"], info["triples"] = writer.count, writer.triples
        if self.make_kb is not None:
            kb = self.kb(kb_size)
            path = directory / f"{self.name}-kb-{kb_size or self.kb_size}.nq"
            kb.store.dump(str(path), ox.RdfFormat.N_QUADS)
            info["kb"] = [str(path)]
            info["kb_triples"] = len(kb.store)
        return info


def _exists(rel: str) -> Callable[[], bool]:
    return lambda: (data_dir() / rel).exists()


WORKLOADS: dict[str, Workload] = {w.name: w for w in [
    Workload("smartgrid", "Q1", "smart grid: costly grid draw ; windy weather+ ; cheaper solar (3 streams, KB)",
             q1_smart_grid, lambda n: smarthome_events(n), (300, 900, 1800), ";",
             make_kb=lambda size: smartgrid_kb(size), kb_size=1_000, real=_exists("smarthome/power"),
             data_note="UMass Smart* HomeC slice (power 10 s means, weather 1 min, solar 10 s)"),
    Workload("credit", "Q2", "credit cards: a transaction, then bigger ones (x10) of the same card+ (KB)",
             q2_big_after_small, lambda n: (_real_credit(n) if _exists(CARD_FILE)() else credit_events(n)),
             (60, 300, 1800), ",", make_kb=lambda size: card_kb(size), kb_size=10_000, any_max_window=30,
             real=_exists(CARD_FILE), data_note="card10k.nt (2 triples per event, times 1, 2, 3, ...)"),
    Workload("stock-hs", "Q3", "stock market: head and shoulders, 7 GPMs, per company",
             q3_head_and_shoulders, lambda n: stock_events(n), (300, 900, 1800), ";"),
    Workload("stock-v", "Q4", "stock market: V-shape, 3 GPMs, per company",
             q4_v_shape, lambda n: stock_events(n), (300, 900, 1800), ";"),
    Workload("stock-kb", "Q4+KB", "stock market: V-shape joined with a company KB (KB-size experiment)",
             q4_v_shape, lambda n: stock_events(n), (300, 900, 1800), ";",
             make_kb=lambda size: company_kb(size), kb_size=10_000, query_options={"kb": True}),
    Workload("traffic", "Q5", "Aarhus traffic: a reading ; (same quantity no higher on 2 other segments at once)",
             q5_traffic, lambda n: traffic_events(n), (900, 1800, 3600), ";",
             any_max_window=900, real=_exists("citybench/streams"),
             data_note="CityBench Aarhus traffic, sensors 182955, 195578, 195446 (5 min)"),
    Workload("peers-v", "Q4", "the peers' stock stream: V-shape per company (strict), and over all "
             "companies (skip-till-any), results written as JSON lines",
             peers_v_shape, lambda n: peers_stock_events(n), (600,), ",", any_max_window=600,
             real=lambda: True, data_note="the peers' stock stream (peers-stock/gen_stream.py, seed 42)",
             strategies=(",", ":"), write_results=True),
    Workload("vessels", "Q6", "vessels: leave harbour , faster on one heading+ , stop in the fishing area (KB)",
             q6_trajectory, lambda n: vessel_events(n), (300, 900, 1800), ",",
             make_kb=lambda size: vessel_kb(size), kb_size=1_000),
    Workload("keys-each", "keys", "high cardinality: a new PARTITION BY key per event, none comes back",
             q_key_per_event, lambda n: key_per_event_events(n), (60, 300, 900), ",", any_max_window=900),
    Workload("keys-cards", "keys", "high cardinality: many cards with a few transactions each, big after small",
             q_card_big_after_small, lambda n: many_cards_events(n), (60, 300, 900), ";", any_max_window=900),
    Workload("orders", "neg.", "negation: an order, not cancelled, then shipped (the guard joined on the order)",
             q_not_cancelled, lambda n: order_events(n), (600, 3600), ";", any_max_window=600,
             strategies=(";",)),
    Workload("orders-open", "neg.", "trailing negation: an order not cancelled within the window",
             q_not_cancelled, lambda n: order_events(n), (600, 3600), ";", any_max_window=600,
             strategies=(";",), query_options={"shipped": False}),
]}

#: The representative set ``spaseq bench`` runs by default.
DEFAULT_WORKLOADS = ("stock-v", "stock-hs", "credit", "smartgrid", "traffic", "vessels")
