"""The runtime's state: per-key state expires with its window (issue 18), and
caps on runaway state with a policy when one is reached (docs/limits.md)."""

import bisect
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import collections
import gc
import tracemalloc

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from spaseq_plugin import Engine, LimitError, StateLimits, compile_query
from spaseq_plugin.evaluators.oxigraph import OxigraphEvaluator
from spaseq_plugin.evaluators.spectra import SpectraEvaluator
from spaseq_plugin.reference import reference_evaluate
from spaseq_plugin.runtime.nfa_runtime import COMPACT_SLACK, Run, _Ages, _bisect

from helpers import EX, PREFIX, event, rows, run

SPASEQ = [sys.executable, "-m", "spaseq_plugin"]
ONE_STREAM = "FROM STREAM S <http://example.org/s>\n"


def keyed(seq: str, window: str = "WITHIN 10 SECONDS", partition: bool = True) -> str:
    """``SEQ`` over A, B, C, N: a :kind per letter, each event of one key ?k."""
    gpms = "".join(f'DEFINE GPM {k} ON S {{ ?{k.lower()} :kind "{k.lower()}" ; :key ?k . }}\n'
                   for k in "ABCN" if k in seq)
    by = "PARTITION BY (?k)" if partition else ""
    return f"{PREFIX}SELECT * {window} {by}\n{ONE_STREAM}WHERE {{ SEQ ({seq})\n{gpms}}}"


def ev(name: str, key: str, time):
    return event("s", time, f':{name} :kind "{name[0]}" ; :key :{key} .')


def limit_message(engine: Engine, events) -> str:
    """The message of the LimitError that running ``engine`` over ``events`` stops with."""
    with pytest.raises(LimitError) as caught:
        list(engine.run(events))
    return str(caught.value)


# -- comparisons proven by the run index ----------------------------------------------

class RecordingSpectra(SpectraEvaluator):
    """SPECTRA, noting the comparisons the runtime says hold."""

    def __init__(self):
        super().__init__()
        self.told = []

    def evaluate_one(self, gpm, event, mapping, holds=None):
        if holds is None:
            return super().evaluate_one(gpm, event, mapping)
        self.told.append(holds)
        return super().evaluate_one(gpm, event, mapping, holds)


def test_the_run_index_proves_a_comparison_but_not_on_a_float_tie():
    """Runs wait on B sorted by ?p1, a float; a run strictly below the event's ?p2 as a
    float satisfies B's ``?p2 > ?p1`` and the evaluator is told so.  Decimals that are one
    float (1.000000000000000001 to ...003) tie: they are checked, and ...001 > ...002
    is false."""
    query = ("SELECT ?p1 ?p2 WITHIN 100 SECONDS\n" + ONE_STREAM + "WHERE { SEQ (A : B)\n"
             "DEFINE GPM A ON S { ?c :price ?p1 }\n"
             "DEFINE GPM B ON S { ?c :price ?p2 FILTER(?p2 > ?p1) } }")
    prices = ["1.000000000000000002", "1.000000000000000001", "1.000000000000000003", "2.0"]
    events = [event("s", t, f':c :price {p} .') for t, p in enumerate(prices, 1)]
    recording = RecordingSpectra()
    got = run(query, events, evaluator=recording)
    assert got == run(query, events, evaluator=OxigraphEvaluator())
    pairs = sorted((dict(b)["p1"], dict(b)["p2"]) for _, b in got)
    decimal = '"^^<http://www.w3.org/2001/XMLSchema#decimal>'
    shown = [f'"{p}{decimal}' for p in prices[:3] + ["2"]]      # (canonical: 2.0 is 2)
    assert pairs == sorted((shown[i], shown[j]) for i, j in [(0, 2), (1, 2), (0, 3), (1, 3), (2, 3)])
    assert recording.told == [("p2", ">", "p1")] * 3     # the three runs below 2.0, at t4


# -- keyed state expires -------------------------------------------------------------

class CountingSpectra(SpectraEvaluator):
    """SPECTRA, counting the evaluations asked for without a mapping."""

    def __init__(self):
        super().__init__()
        self.standalone = 0

    def evaluate_one(self, gpm, event, mapping, holds=None):
        self.standalone += not mapping
        return super().evaluate_one(gpm, event, mapping, holds)


def test_an_event_of_many_keys_starts_each_partition_from_one_evaluation():
    """One event of 2,000 keys goes to 2,000 partitions.  Each asked for the start
    matches of the whole event and kept those of its key: quadratic in the keys of
    one event (300,000 companies in one graph ran for hours).  The batch now finds
    them once, by key."""
    keys = 2_000
    a = "".join(f':a{i} :kind "a" ; :key :k{i} . ' for i in range(keys))
    b = "".join(f':b{i} :kind "b" ; :key :k{i} . ' for i in range(keys))
    evaluator = CountingSpectra()
    engine = Engine(keyed("A ; B"), evaluator=evaluator)
    results = list(engine.push_event(event("s", 1, a))) + list(engine.push_event(event("s", 2, b)))
    results += engine.close()
    assert evaluator.standalone < 20, evaluator.standalone
    pairs = {(r.bindings["a"].value.rsplit("/", 1)[1], r.bindings["b"].value.rsplit("/", 1)[1]) for r in results}
    assert pairs == {(f"a{i}", f"b{i}") for i in range(keys)}


@pytest.mark.parametrize("op", [",", ";", ":"])
def test_a_key_that_never_comes_back_is_dropped_within_its_window(op):
    """Each event has a new key; the partitions alive never exceed the window."""
    engine = Engine(keyed(f"A {op} B", "WITHIN 10 SECONDS"))
    seen = []
    for t in range(1, 201):
        engine.push_event(ev(f"a{t}", f"k{t}", t))
        seen.append(engine.stats.live_keys)
    engine.close()
    assert max(seen) <= 11 and engine.stats.peak_keys <= 11, (max(seen), engine.stats.peak_keys)
    assert len(engine.runtime._deadlines) <= 12        # the expiry heap is bounded by the window too
    assert engine.stats.matches == 0


def test_a_key_without_runs_is_dropped_at_once():
    """An event that starts nothing (a B without an A of its key) leaves no state."""
    engine = Engine(keyed("A ; B"))
    for t in range(1, 50):
        engine.push_event(ev(f"b{t}", f"k{t}", t))
    engine.close()
    assert engine.stats.peak_keys == 0 and engine.runtime.live_keys == 0


def test_keys_that_come_back_within_the_window_still_match():
    got = run(keyed("A , B"), [ev("a1", "x", 1), ev("a2", "y", 2), ev("b1", "x", 3), ev("b2", "y", 12),
                               ev("a3", "y", 20), ev("b3", "y", 31)])
    # y: a2@2 , b2@12 is in the window (10 s); a3@20 , b3@31 is not
    assert got == [(3, (("a", ":a1"), ("b", ":b1"), ("k", ":x"))),
                   (12, (("a", ":a2"), ("b", ":b2"), ("k", ":y")))]


def test_a_pending_trailing_negation_keeps_its_key_until_it_is_emitted():
    engine = Engine(keyed("A ; B ; N!", "WITHIN 5 SECONDS"))
    out = []
    for item in [ev("a1", "x", 1), ev("b1", "x", 2), ev("a2", "y", 2.5), ev("b2", "y", 3)]:
        out += engine.push_event(item)
    # a B that is also an N: in y's sub-stream (B binds ?k), it kills y's pending match
    out += engine.push_event(event("s", 4, ':n1 :kind "b", "n" ; :key :y .'))
    out += engine.push_event(ev("c1", "z", 5))
    assert engine.runtime.live_keys == 1             # x's match waits for its window; y is gone
    out += engine.push_event(ev("c2", "z", 7))
    out += engine.push_event(ev("c3", "z", 8))       # time passed 1 + 5: x's match went out
    assert [(r.time, r.bindings["a"].value) for r in out] == [(6, "http://example/a1")]
    assert engine.runtime.live_keys == 0
    engine.close()


def test_tumbling_windows_drop_every_key_at_each_boundary():
    engine = Engine(keyed("A ; B", "WITHIN 10 SECONDS TUMBLING"))
    for t in range(1, 11):                            # the first window is [1, 11)
        engine.push_event(ev(f"a{t}", f"k{t}", t))
    assert engine.runtime.live_keys == 10             # a one-stream batch is processed at its push
    engine.push_event(ev("a11", "k11", 11))
    assert engine.runtime.live_keys == 1              # only k11, of the new window
    engine.push_event(ev("a12", "k12", 12))
    assert engine.runtime.live_keys == 2
    engine.close()


def test_the_negation_buffer_keeps_only_what_a_guard_can_see():
    """The events a guard may need are those after the oldest run's start on which its
    GPM has a solution: every event was kept, and one A followed by 2.5 million events
    that no guard matches filled 1.3 GB."""
    engine = Engine(keyed("A : N! : B", "WITHIN 1000 SECONDS", partition=False))
    for t in range(1, 301):
        engine.push_event(ev(f"b{t}", "x", t) if t > 1 else ev("a1", "x", 1))
    buffer = engine.runtime.partitions[()].buffer
    assert buffer == [] and engine.stats.matches == 299      # no a or b event is an N
    for t in range(301, 401):
        engine.push_event(ev(f"n{t}", "x", t))
    assert len(buffer) == 100                         # a1's run is alive: n301..n400 count
    engine = Engine(keyed("A : N! : B", "WITHIN 1000 SECONDS"))
    for t in range(1, 301):
        engine.push_event(ev(f"b{t}", "x", t))         # no run: nothing is kept, nor the key
    assert engine.runtime.live_keys == 0


def test_a_negation_guard_summarises_each_buffered_event_once_per_batch():
    """A guard checks each run against every buffered event.  The evaluator kept the
    summaries of the last 16 events only, so with 200 runs and 200 buffered events
    each run summarised them all again: 40,000 summaries for one B, 2.4x the time on
    3,000 of each."""
    query = PREFIX + plain("A ; N! ; B", "WITHIN 1000 SECONDS").replace(
        'DEFINE GPM N ON S { ?n :kind "n" . }', 'DEFINE GPM N ON S { ?n :kind "n" . FILTER(STR(?n) = STR(?a)) }')
    stream = kinds(*[f"a{i}@{i}" for i in range(1, 201)], *[f"n{i}@{200 + i}" for i in range(1, 201)], "b1@401")
    evaluator = SpectraEvaluator()
    results = list(Engine(query, evaluator=evaluator).run(stream))
    assert len(results) == 200 and evaluator.fallbacks == 0
    assert evaluator.summaries <= 2 * len(stream)


def test_a_negation_guard_looks_only_at_events_of_the_runs_values():
    """"Order; not cancelled; shipped" keyed by the order: each shipment's guard tried
    every event of the window, and the evaluator summarised the window again for
    each (2.1 million summaries and 9.5 s for 10,000 events).  Now a guard looks up
    the buffered events of its GPM by the run's order, each summarised about once;
    and its index is made again as the buffer moves on, not kept growing."""
    query = PREFIX + """SELECT ?o ?s WITHIN 600 SECONDS FROM STREAM S <http://example.org/s> WHERE {
      SEQ (A ; N! ; B)
      DEFINE GPM A ON S { ?o :kind "order" }
      DEFINE GPM N ON S { ?c :kind "cancel" ; :of ?o }
      DEFINE GPM B ON S { ?s :kind "ship" ; :of ?o } }"""
    orders, stream, shipped, cancelled = 0, [], set(), set()
    for t in range(1, 6001):
        step = t % 4
        if step in (0, 1):
            orders += 1
            stream.append(event("s", t, f":o{orders} :kind 'order' ."))
        elif step == 2 and orders > 100 and orders % 3 == 0:     # cancel that of 100 orders ago
            cancelled.add(orders - 100)
            stream.append(event("s", t, f":c{t} :kind 'cancel' ; :of :o{orders - 100} ."))
        elif step == 3 and orders > 201:       # ship that of 200 orders ago, or of 201
            target = orders - 200 - (t // 4) % 2
            shipped.add(target)
            stream.append(event("s", t, f":s{t} :kind 'ship' ; :of :o{target} ."))
    evaluator = SpectraEvaluator()
    engine = Engine(query, evaluator=evaluator)
    results = []
    for item in stream:
        results += engine.push_event(item)
    part = next(iter(engine.runtime.partitions.values()))
    indexed = sum(len(events) for index in part.guard_indexes.values() for events in index.by_key.values())
    cancels = sum(1 for e in part.buffer if any(t.object.value == "cancel" for t in e.triples))
    assert cancels == len(part.buffer) > 20       # (orders and shipments are no cancellation)
    assert 0 < indexed <= 2 * cancels + 64 < len(cancelled)
    results += engine.close()
    assert cancelled & shipped and shipped - cancelled
    assert {r.bindings["o"].value for r in results} == {f"{EX}o{n}" for n in shipped - cancelled}
    assert evaluator.summaries <= 2 * len(stream)


def test_pending_matches_are_checked_only_against_events_of_their_values():
    """"An order not cancelled within 600 s" (a trailing negation): each event was
    evaluated against every pending match, hundreds of them (0.7 s for 5,000 events
    of the orders workload, quadratic in the window).  Now the events' solution keys
    name the pending matches filed under them; killed ones leave the files when the
    partition is compacted."""
    query = PREFIX + """SELECT ?o WITHIN 600 SECONDS FROM STREAM S <http://example.org/s> WHERE {
      SEQ (A ; N!)
      DEFINE GPM A ON S { ?o :kind "order" }
      DEFINE GPM N ON S { ?c :kind "cancel" ; :of ?o } }"""
    orders, stream, cancelled = 0, [], set()
    for t in range(1, 4001):
        if t % 2:
            orders += 1
            stream.append(event("s", t, f":o{orders} :kind 'order' ."))
        elif orders > 100 and orders % 3 == 0:     # cancel the order of 100 orders (200 s) ago
            cancelled.add(orders - 100)
            stream.append(event("s", t, f":c{t} :kind 'cancel' ; :of :o{orders - 100} ."))
        else:
            stream.append(event("s", t, f":x{t} :kind 'other' ."))

    class Counting(SpectraEvaluator):
        asked = 0

        def evaluate_one(self, *args):
            Counting.asked += 1
            return super().evaluate_one(*args)
    engine = Engine(query, evaluator=Counting())
    results = []
    for item in stream:
        results += engine.push_event(item)
    part = next(iter(engine.runtime.partitions.values()))
    filed = sum(len(listed) for by_key in part.pending_indexes.values() for listed in by_key.values())
    assert part.runs > 200 and filed <= 2 * part.runs + 2 * COMPACT_SLACK
    results += engine.close()
    assert cancelled and {r.bindings["o"].value for r in results} == \
        {f"{EX}o{n}" for n in range(1, orders + 1)} - {f"{EX}o{n}" for n in cancelled}
    assert Counting.asked <= 3 * len(stream)


def test_partition_by_without_within_warns_and_counts_live_keys():
    compiled = compile_query(keyed("A ; B", window=""))
    assert any("PARTITION BY without WITHIN" in w for w in compiled.warnings)
    assert not any("PARTITION BY" in w for w in compile_query(keyed("A ; B")).warnings)
    engine = Engine(compiled)
    for t in range(1, 21):
        engine.push_event(ev(f"a{t}", f"k{t % 5}", t))
    engine.push_event(ev("b1", "k1", 30))
    assert engine.stats.live_keys == 4 and engine.stats.peak_keys == 5    # k1's runs took their B (;)
    engine.push_event(ev("b2", "k2", 31))
    engine.close()
    assert engine.stats.matches == 8 and engine.stats.live_keys == 3


def _run_many_keys(op: str, keys: int, headroom_mb: int) -> subprocess.CompletedProcess:
    """``keys`` events with a key each, in a fresh process whose address space may
    grow only ``headroom_mb`` past what it uses once the engine runs."""
    program = textwrap.dedent(f"""
        import resource
        import pyoxigraph as ox
        from spaseq_plugin import Engine
        from spaseq_plugin.bench.workloads import WORKLOADS
        w = WORKLOADS["keys-each"]
        engine = Engine(w.query({op!r}, 60))
        events = w.events({keys})
        for event in events:
            engine.push_event(event)
            if engine.stats.events == 1000:
                with open("/proc/self/statm") as f:
                    size = int(f.read().split()[0]) * resource.getpagesize()
                limit = size + {headroom_mb} * 2**20
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        engine.close()
        print(engine.stats.events, engine.stats.peak_keys, engine.stats.live_keys)
    """)
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("op", [",", ";", ":"])
def test_100k_distinct_keys_run_in_a_small_memory_bound(op):
    """100,000 keys, one event each, WITHIN 60 s: the state is the window's, so the
    process runs in 40 MB more than it takes after 1,000 events (the whole run
    used to keep every key under ',': about 2 KB each)."""
    p = _run_many_keys(op, 100_000, 40)
    assert p.returncode == 0, p.stderr[-2000:]
    events, peak_keys, live_keys = map(int, p.stdout.split())
    assert events == 100_000 and peak_keys <= 61 and live_keys <= 61


# -- runaway state: caps and policies -------------------------------------------------

def kinds(*spec):
    """'a1@1', 'b2@3' -> events with :kind from the letter."""
    return [event("s", int(t), f':{name} :kind "{name[0]}" .') for name, t in (i.split("@") for i in spec)]


def plain(seq: str, window: str = "") -> str:
    gpms = "".join(f'DEFINE GPM {k} ON S {{ ?{k.lower()} :kind "{k.lower()}" . }}\n' for k in "ABCN" if k in seq)
    return f"SELECT * {window}\n{ONE_STREAM}WHERE {{ SEQ ({seq})\n{gpms}}}"


STREAM_ABBB = kinds("a1@1", "a2@2", "a3@3", "b1@4")


def test_drop_newest_keeps_the_first_runs():
    limits = StateLimits(max_runs=2, policy="drop-newest")
    engine = Engine(PREFIX + plain("A ; B"), state_limits=limits)
    got = rows(engine.run(STREAM_ABBB))
    assert [dict(b)["a"] for _, b in got] == [":a1", ":a2"]
    assert engine.stats.dropped_runs == 1 and engine.stats.peak_runs == 2


def test_drop_oldest_keeps_the_last_runs():
    limits = StateLimits(max_runs=2, policy="drop-oldest")
    engine = Engine(PREFIX + plain("A ; B"), state_limits=limits)
    got = rows(engine.run(STREAM_ABBB))
    assert [dict(b)["a"] for _, b in got] == [":a2", ":a3"]
    assert engine.stats.dropped_runs == 1


@given(ops=st.lists(st.one_of(st.tuples(st.just("add"), st.integers(0, 6)),
                               st.tuples(st.just("kill"), st.integers(0, 30)),
                               st.tuples(st.just("discard"), st.integers(0, 30)),
                               st.tuples(st.just("expire"), st.integers(0, 7)),
                               st.tuples(st.just("oldest"), st.just(0)),
                               st.tuples(st.just("compact"), st.just(0))), max_size=40))
def test_runs_by_age_pop_in_the_order_of_first_time_then_registration(ops):
    """A partition's runs by age (expiry, drop-oldest) against the plain model: a
    list of (first τ, registration number, run) kept sorted.  Only live runs count:
    a dead one may be dropped early, a discarded one is gone at once."""
    ages, model = _Ages(), []
    for number, (op, n) in enumerate(ops):
        if op == "add":
            run = Run(None, {}, None, (), n, n, (), ())
            ages.add(run)
            model.append((n, number, run))
            model.sort(key=lambda entry: entry[:2])
        elif op == "kill" and model:
            model[n % len(model)][2].dead = True
        elif op == "discard" and model:
            run = model.pop(n % len(model))[2]
            run.dead = True
            ages.discard(run)
            assert all(r is not run for _, r in ages.entries())
        elif op == "expire":
            assert [run for run in ages.expire(n) if not run.dead] == \
                [run for first, _, run in model if first < n and not run.dead]
            model = [entry for entry in model if entry[0] >= n]
        elif op == "oldest":
            assert ages.oldest() is next((run for _, _, run in model if not run.dead), None)
        elif op == "compact":
            ages.compact()
            model = [entry for entry in model if not entry[2].dead]
        live = [(first, run) for first, _, run in model if not run.dead]
        assert [(first, run) for first, run in ages.entries() if not run.dead] == live
        entries = ages.entries()
        assert ages.first_time() == (entries[0][0] if entries else None)


@given(numbers=st.lists(st.integers(-4, 4).map(float)), number=st.integers(-5, 5).map(float))
def test_bucket_bisection_agrees_with_the_bisect_module(numbers, number):
    """A bucket's runs are sorted by order number and found by bisection in C
    (_bisect): ties, the ends and an empty bucket as the bisect module has them."""
    numbers.sort()
    assert _bisect(numbers, number, True) == bisect.bisect_right(numbers, number)
    assert _bisect(numbers, number, False) == bisect.bisect_left(numbers, number)


def test_fail_stops_with_the_state_and_the_count():
    engine = Engine(PREFIX + plain("A ; B"), state_limits=StateLimits(max_runs=2))
    message = limit_message(engine, STREAM_ABBB)
    assert "2 active runs reached the limit of 2 (--max-runs)" in message
    assert "x1 [A]" in message and "time 3" in message, message


@pytest.mark.parametrize("policy", ["fail", "drop-newest", "drop-oldest"])
def test_a_conjunction_makes_no_more_combinations_than_the_run_cap(policy):
    """(B & C) on an event of 20 solutions each: 400 combinations, over a cap of 100.
    They were all made before any run was counted (3,000 solutions each took 9
    million, past 2.8 GB)."""
    query = (f"{PREFIX}SELECT * WITHIN 10 SECONDS\n{ONE_STREAM}WHERE {{ SEQ (A ; (B & C))\n"
             'DEFINE GPM A ON S { ?a :kind "a" }\nDEFINE GPM B ON S { ?b :kind "b" }\n'
             'DEFINE GPM C ON S { ?c :kind "b" } }')
    engine = Engine(query, state_limits=StateLimits(max_runs=100, policy=policy))
    events = [event("s", 1, ':a :kind "a" .'), event("s", 2, " ".join(f':x{i} :kind "b" .' for i in range(20)))]
    if policy == "fail":
        message = limit_message(engine, events)
        assert "the conjunction (B & C) has more than 100 combinations (--max-runs)" in message
        assert "at time 2" in message
        return
    results = list(engine.run(events))
    assert len(results) == 100 and engine.stats.dropped_runs == 300


def product(b_filter: str = "") -> str:
    """A then B, whose two patterns do not join: a product of B's events' triples."""
    return (f"{PREFIX}SELECT * WITHIN 10 SECONDS\n{ONE_STREAM}WHERE {{ SEQ (A ; B)\n"
            'DEFINE GPM A ON S { ?a :kind "a" }\n'
            f'DEFINE GPM B ON S {{ ?b :kind "b" . ?c :kind "b" {b_filter} }} }}')


def product_events(count: int) -> list:
    return [event("s", 1, ':a :kind "a" .'),
            event("s", 2, " ".join(f':x{i} :kind "b" .' for i in range(count)))]


def evaluator_named(name: str):
    from spaseq_plugin.evaluators.rdflib import RdflibEvaluator
    return {"spectra": SpectraEvaluator, "oxigraph": OxigraphEvaluator, "rdflib": RdflibEvaluator}[name]()


@pytest.mark.parametrize("name", ["spectra", "oxigraph", "rdflib"])
@pytest.mark.parametrize("policy", ["fail", "drop-newest", "drop-oldest"])
def test_a_product_inside_one_gpm_stops_at_the_run_cap(policy, name):
    """B's two patterns do not join: 20 such triples make 400 solutions, over a cap
    of 100.  The evaluator made them all before the runtime counted any (3,000
    triples made 9 million, past 2.8 GB)."""
    engine = Engine(product(), state_limits=StateLimits(max_runs=100, policy=policy),
                    evaluator=evaluator_named(name))
    if policy == "fail":
        _stops_on_the_event_at_time_2(engine, product_events(20), "GPM B has more than 100 solutions (--max-runs)")
        return
    results = list(engine.run(product_events(20)))
    assert len(results) == 100 and len({tuple(sorted(r.bindings.items())) for r in results}) == 100
    assert engine.stats.dropped_runs >= 1


@pytest.mark.parametrize("name", ["spectra", "oxigraph", "rdflib"])
def test_the_solution_cap_counts_the_solutions_a_filter_keeps(name):
    """400 combinations, of which the FILTER keeps 20: under a cap of 100, all 20."""
    engine = Engine(product("FILTER(?b = ?c)"), state_limits=StateLimits(max_runs=100),
                    evaluator=evaluator_named(name))
    assert len(list(engine.run(product_events(20)))) == 20


@pytest.mark.parametrize("name", ["spectra", "oxigraph", "rdflib"])
def test_an_evaluator_under_a_solution_limit_stops_one_past_it(name):
    """300 triples, a product of 90,000: the evaluator stops at the cap and says so,
    with the solutions it kept (what the runtime goes on with under drop policies)."""
    from spaseq_plugin.evaluators.protocol import TooManySolutions
    compiled = compile_query(product())
    gpm = compiled.gpms["B"]
    evaluator = evaluator_named(name)
    evaluator.limit_solutions(100)
    with pytest.raises(TooManySolutions) as caught:
        evaluator.evaluate(gpm, product_events(300)[1], [{}, {}])
    assert [len(kept) for kept in caught.value.solutions] in ([100, 100], [101, 101])
    for most in (None, 10 ** 30):       # (no cap; one beyond a C integer)
        evaluator.limit_solutions(most)
        assert [len(found) for found in evaluator.evaluate(gpm, product_events(30)[1], [{}])] == [900]


UNJOINABLE = "FILTER(STRLEN(STR(?b)) + STRLEN(STR(?c)) > 1000)"     # no pair passes; the join cannot tell sooner


@pytest.mark.parametrize("policy", ["fail", "drop-newest", "drop-oldest"])
def test_a_join_its_filter_rejects_stops_after_the_join_step_limit(policy):
    """300 triples, a product of 90,000 pairs of which the FILTER keeps none: no
    solution for the run cap to count.  Two patterns through one hub of 200,000
    edges each way took hours on one event so."""
    engine = Engine(product(UNJOINABLE), state_limits=StateLimits(max_join_steps=1_000, policy=policy))
    if policy == "fail":
        _stops_on_the_event_at_time_2(engine, product_events(300),
                                      "GPM B took more than 1,000 join steps (--max-join-steps)")
        return
    assert list(engine.run(product_events(300))) == []
    assert engine.stats.dropped_runs == 1


def _stops_on_the_event_at_time_2(engine: Engine, events: list, said: str) -> None:
    message = limit_message(engine, events)
    assert f"{said} on the event" in message and "at time 2" in message


def test_the_join_step_limit_leaves_a_join_within_it_whole():
    """The same join within its steps (90,300 rows tried), and under no limit, finds
    what it finds without the limit; the solutions a cut join kept go on."""
    for limit in (90_300, None):
        engine = Engine(product("FILTER(STR(?b) = STR(?c))"), state_limits=StateLimits(max_join_steps=limit))
        assert len(list(engine.run(product_events(300)))) == 300 and engine.stats.dropped_runs == 0
    engine = Engine(product("FILTER(STR(?b) = STR(?c))"),
                    state_limits=StateLimits(max_join_steps=90_299, policy="drop-newest"))
    assert len(list(engine.run(product_events(300)))) == 299 and engine.stats.dropped_runs == 1


def not_negated(condition: str) -> str:
    """"An a not followed by an n that meets ``condition`` within 1,000 s"."""
    return PREFIX + """SELECT ?x WITHIN 1000 SECONDS FROM STREAM S <http://example.org/s> WHERE {
      SEQ (A ; N!)
      DEFINE GPM A ON S { ?x :kind "a" ; :v ?v }
      DEFINE GPM N ON S { ?y :kind "n" ; :v ?w . FILTER(%s) } }""" % condition


def a_then_n(count: int, a_value=lambda i: f"'a{i}'", n_value=lambda i: f"'n{i}'") -> list:
    """An a at each odd time and an n after it, of the values ``a_value(i)`` and
    ``n_value(i)`` (Turtle objects; by default strings no n shares with an a)."""
    stream = []
    for i in range(count):
        stream.append(event("s", 2 * i + 1, f":a{i} :kind 'a' ; :v {a_value(i)} ."))
        stream.append(event("s", 2 * i + 2, f":n{i} :kind 'n' ; :v {n_value(i)} ."))
    return stream


@pytest.mark.parametrize("policy", ["fail", "drop-newest", "drop-oldest"])
def test_a_guard_tried_on_every_pending_match_stops_at_the_join_step_limit(policy):
    """A guard joined to its pending matches only through a FILTER it cannot be filed
    by tries each of them on each of its events: 20,000 events took 80 s, and no
    limit bounded the work of one event.  Each pending match tried is a join step; past
    the limit drop policies drop those left untried (kept, they could be emitted though
    the guard matched)."""
    query, events = not_negated("STR(?w) = STR(?v)"), a_then_n(30)
    engine = Engine(query, state_limits=StateLimits(max_join_steps=10, policy=policy))
    if policy == "fail":
        assert "negation guard N was tried on more than 10 pending matches (--max-join-steps) " \
               "on the event at time 22" in limit_message(engine, events)
        return
    results = list(engine.run(events))
    assert sorted(r.bindings["x"].value for r in results) == sorted(f"{EX}a{i}" for i in range(10))
    assert engine.stats.dropped_runs == 20
    assert len(list(Engine(query, state_limits=StateLimits(max_join_steps=None)).run(events))) == 30


def crossed_unless(condition: str) -> str:
    """"An a, then a b, with no n between them that meets ``condition``": the guard of
    a negation in mid-sequence, checked when a run crosses it."""
    return PREFIX + """SELECT ?x ?b WITHIN 1000 SECONDS FROM STREAM S <http://example.org/s> WHERE {
      SEQ (A ; N! ; B)
      DEFINE GPM A ON S { ?x :kind "a" ; :v ?v ; :p ?p }
      DEFINE GPM N ON S { ?y :kind "n" ; :v ?w ; :p ?q . FILTER(%s) }
      DEFINE GPM B ON S { ?b :kind "b" } }""" % condition


def many_runs_then_n(count: int) -> list:
    """``count`` a, then ``count`` n, then one b, at times 1, 2, ...: the a of the
    highest :p first; under ?q > ?p the last n kills the runs of :p below count / 2,
    which cross the negation after the others."""
    stream = [event("s", 1 + i, f":a{i} :kind 'a' ; :v 'k' ; :p {count - i} .") for i in range(count)]
    stream += [event("s", 1 + count + i, f":n{i} :kind 'n' ; :v 'k' ; :p {0 if i < count - 1 else count // 2} .")
               for i in range(count)]
    return stream + [event("s", 1 + 2 * count, ":b0 :kind 'b' .")]


# The guard joined to the run only by a comparison: each run is tried on every buffered
# n; through an equality it is filed by (the buffer's guard index), on every n of its
# value; with Oxigraph (no solution keys), on every buffered event of the stream.
GUARD_CHECKS = [("spectra", "?q > ?p"), ("spectra", "?w = ?v && ?q > ?p"), ("oxigraph", "?q > ?p")]


def _evaluator(name: str):
    return OxigraphEvaluator() if name == "oxigraph" else SpectraEvaluator()


@pytest.mark.parametrize("name, condition", GUARD_CHECKS)
@pytest.mark.parametrize("policy", ["fail", "drop-newest", "drop-oldest"])
def test_a_guard_tried_on_every_buffered_event_stops_at_the_join_step_limit(policy, name, condition):
    """SEQ (A ; N! ; B): a run crossing the negation tries the guard on the buffered
    events between its last event and the b, and none of those evaluations was
    counted: 1,000 runs and 1,000 n made the one b take 0.3 s, 4,000 each 7 s (with
    Oxigraph 1,000 each took 74 s), without bound.  Each is a join step of the b's
    batch: past --max-join-steps ``fail`` stops naming the guard, drop policies drop
    the runs whose check was cut short rather than let them cross (letting them
    through would emit the lower half's matches, which the last n kills)."""
    query, events = crossed_unless(condition), many_runs_then_n(30)
    expected = rows(reference_evaluate(query, events))
    assert len(expected) == 16
    engine = Engine(query, evaluator=_evaluator(name), state_limits=StateLimits(max_join_steps=100, policy=policy))
    if policy == "fail":
        assert "negation guard N was tried on more than 100 buffered events (--max-join-steps) " \
               "on the event at time 61; --on-limit drop-oldest or drop-newest" in limit_message(engine, events)
        return
    results = rows(engine.run(events))
    assert set(results) < set(expected)
    # each run crossed, was killed, or was dropped
    assert 0 < engine.stats.dropped_runs <= 30 - len(results)


def _counting(name: str):
    """The evaluator ``name``, counting the guard's evaluations (N's, under a run's bindings)."""
    class Counting(OxigraphEvaluator if name == "oxigraph" else SpectraEvaluator):
        guard_tried = 0

        def evaluate(self, gpm, event, mappings, *rest):
            if gpm.name == "N":
                self.guard_tried += len(mappings)
            return super().evaluate(gpm, event, mappings, *rest)
    if name != "oxigraph":      # (the runtime asks SPECTRA one mapping at a time)
        def evaluate_one(self, gpm, event, mapping, *rest):
            if gpm.name == "N" and mapping:
                self.guard_tried += 1
            return SpectraEvaluator.evaluate_one(self, gpm, event, mapping, *rest)
        Counting.evaluate_one = evaluate_one
    return Counting()


@pytest.mark.parametrize("name, condition", GUARD_CHECKS)
def test_the_join_step_limit_leaves_guard_checks_within_it_whole(name, condition):
    """Under the default limits, and under a limit just as large as the b's checks
    need (the guard's evaluations), the guard's checks are whole: the reference's
    matches, none dropped.  One step fewer cuts the last check short: that run is
    dropped, and counted."""
    query, events = crossed_unless(condition), many_runs_then_n(30)
    expected = rows(reference_evaluate(query, events))
    evaluator = _counting(name)
    engine = Engine(query, evaluator=evaluator)
    assert rows(engine.run(events)) == expected and engine.stats.dropped_runs == 0
    needed = evaluator.guard_tried
    assert needed > 300
    engine = Engine(query, evaluator=_evaluator(name), state_limits=StateLimits(max_join_steps=needed))
    assert rows(engine.run(events)) == expected and engine.stats.dropped_runs == 0
    engine = Engine(query, evaluator=_evaluator(name),
                    state_limits=StateLimits(max_join_steps=needed - 1, policy="drop-newest"))
    results = rows(engine.run(events))
    assert set(results) <= set(expected) and len(results) >= len(expected) - 1
    assert engine.stats.dropped_runs == 1


def test_pending_matches_are_filed_by_the_value_a_filter_equates():
    """The same guard joined through FILTER(?w = ?v) tried each of its events on every
    pending match (8 s for 5,000 events, 39 s for 10,000).  Now the pending matches
    are filed by the value of ?v (as a double for numbers, = comparing values), and
    an n evaluates only those of its value: that of the a 5 before it, in another
    numeric form, every third n."""
    count = 1_000
    events = a_then_n(count, a_value=str, n_value=lambda i: f"{i - 5}.0e0" if i % 3 == 0 else f"'n{i}'")

    class Counting(SpectraEvaluator):
        asked = 0

        def evaluate_one(self, *args):
            Counting.asked += 1
            return super().evaluate_one(*args)
    results = list(Engine(not_negated("?w = ?v"), evaluator=Counting()).run(events))
    killed = {i - 5 for i in range(6, count, 3)}
    assert sorted(r.bindings["x"].value for r in results) == sorted(f"{EX}a{i}" for i in range(count)
                                                                   if i not in killed)
    assert Counting.asked <= 3 * len(events)


@pytest.mark.parametrize("a_value, n_values, filed", [
    ('"01"^^xsd:integer', ["1.0", "1.0e0", '"1"^^xsd:decimal', '"1"^^xsd:byte', '"1.00000000000000001"^^xsd:decimal'],
     True),
    ('"9007199254740993"^^xsd:integer', ["9007199254740992.0e0", "9007199254740992"], True),
    ('"NaN"^^xsd:double', ['"NaN"^^xsd:double'], True),
    ('"2024-01-01T10:00:00Z"^^xsd:dateTime', ['"2024-01-01T12:00:00+02:00"^^xsd:dateTime',
                                               '"2024-01-01T10:00:00"^^xsd:dateTime'], True),
    ('"a"', ['"a"^^xsd:string', '"a"@en', "<http://example/a>"], True),
    ('"a"@en-GB', ['"a"@EN-gb', '"a"@en'], True),
    ("true", ['"1"^^xsd:boolean', "false"], True),
    # values that any other may equal, as far as the fast path knows: tried on every n
    ('"0.5"^^xsd:float', ["0.5e0", '"0.50"^^xsd:float', "0.5"], False),
    ('"0.1"^^xsd:float', ["0.1e0", '"0.100000001"^^xsd:float', "0.1"], False),     # (in single precision)
    ('"2024-01-01T10:00:00"^^xsd:dateTime', ['"2024-01-01T10:00:00Z"^^xsd:dateTime',
                                             '"2024-01-01T10:00:00.000"^^xsd:dateTime'], False),
    ('"P1D"^^xsd:duration', ['"PT24H"^^xsd:duration', '"P1D"^^xsd:dayTimeDuration'], False),
    ('"x"^^<http://example/t>', ['"x"^^<http://example/t>', '"y"^^<http://example/t>'], False),
])
@pytest.mark.parametrize("seq", ["A ; N!", "A ; N! ; B"])
def test_matches_filed_by_value_die_as_filter_equality_says(a_value, n_values, filed, seq):
    """Filed by value, a pending match (or a run, looking up the negation buffer) tries
    none of 20 n of other values, and is still killed by every n whose value FILTER(?w
    = ?v) finds equal to its own (numbers of other types and forms, dateTimes in other
    zones, datatypes whose equality Oxigraph decides), as the reference finds, and by
    no other.  (The 20 fill the buffer past the length that is scanned.)"""
    query = not_negated("?w = ?v").replace("A ; N!", seq).replace(
        " } }", ' } DEFINE GPM B ON S { ?b :kind "b" } }' if "B" in seq else " } }")
    xsd = "@prefix xsd: <http://www.w3.org/2001/XMLSchema#> . "

    class Counting(SpectraEvaluator):
        fillers = 0     # evaluations of the 20 under a match's bindings

        def evaluate_one(self, gpm, event, mapping, *rest):
            Counting.fillers += bool(mapping) and 2 <= event.time < 22
            return super().evaluate_one(gpm, event, mapping, *rest)
    for n_value in n_values:
        stream = [event("s", 1, f"{xsd}:a0 :kind 'a' ; :v {a_value} ."),
                  *[event("s", 2 + i, f":f{i} :kind 'n' ; :v 'f{i}' .") for i in range(20)],
                  event("s", 30, f"{xsd}:n0 :kind 'n' ; :v {n_value} ."),
                  event("s", 31, ":b0 :kind 'b' .")]
        Counting.fillers = 0
        assert rows(Engine(query, evaluator=Counting()).run(stream)) == rows(reference_evaluate(query, stream)), \
            n_value
        assert Counting.fillers == (0 if filed else 20)


def test_a_cut_join_is_told_for_each_mapping():
    """evaluate() under a step limit raises with each mapping's solutions and the limit."""
    from spaseq_plugin.evaluators.protocol import TooManySolutions
    evaluator = SpectraEvaluator()
    evaluator.limit_steps(500)
    with pytest.raises(TooManySolutions) as caught:
        evaluator.evaluate(compile_query(product(UNJOINABLE)).gpms["B"], product_events(30)[1], [{}, {}])
    assert caught.value.steps == 500 and caught.value.solutions == [[], []]


def test_distinct_keeps_at_most_its_limit_of_rows():
    """DISTINCT keeps each row it output for the query's lifetime: on a stream without
    end, a memory without bound.  Past --max-distinct the run stops, whatever the
    policy (dropping its memory would let a row out twice)."""
    query = PREFIX + plain("A : B", "WITHIN 10 SECONDS").replace("SELECT *", "SELECT DISTINCT ?b")
    stream = kinds("a1@1", "b1@2", "b1@3", "b2@4", "b3@5", "b2@6")
    assert len(list(Engine(query, state_limits=StateLimits(max_distinct=3)).run(stream))) == 3
    for policy in ("fail", "drop-oldest"):
        engine = Engine(query, state_limits=StateLimits(max_distinct=2, policy=policy))
        assert limit_message(engine, stream).startswith("DISTINCT has output 2 rows, the most it keeps (--max-distinct)")
    assert len(list(Engine(query, state_limits=StateLimits(max_distinct=None)).run(stream))) == 3


def test_distinct_memory_per_row_does_not_grow_with_its_terms():
    """DISTINCT kept each row whole: 80,000 rows of 20 KB literals took 2 GB, of the
    1,000,000 rows --max-distinct lets it keep.  It keeps a fixed-size key a row."""
    query = PREFIX + """SELECT DISTINCT ?l WITHIN 10 SECONDS
FROM STREAM S <http://example.org/s>
WHERE { SEQ (A ; B) DEFINE GPM A ON S { ?x :lab ?l } DEFINE GPM B ON S { ?y :kind "b" } }"""
    pad = "x" * 2_000_000     # (pyoxigraph holds a term's text outside Python's allocator: counted in pages)

    def stream():
        for t in range(1, 201):
            yield event("s", t, f':x{t} :lab "{t}{pad}" .' if t % 2 else f':y{t} :kind "b" .')

    def resident() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    engine = Engine(query)
    before = resident()
    assert sum(1 for _ in engine.run(stream())) == 100
    assert resident() - before < 60_000_000, resident() - before      # (whole rows: 200 MB)


def test_the_partition_cap_leaves_other_keys_alone():
    limits = StateLimits(max_partition_runs=2, policy="drop-oldest")
    engine = Engine(keyed("A ; B", "WITHIN 100 SECONDS"), state_limits=limits)
    stream = [ev("a1", "x", 1), ev("a2", "x", 2), ev("a3", "x", 3), ev("a4", "y", 4), ev("a5", "y", 5),
              ev("b1", "x", 6), ev("b2", "y", 7)]
    got = rows(engine.run(stream))
    assert [dict(b)["a"] for _, b in got] == [":a2", ":a3", ":a4", ":a5"]
    assert engine.stats.dropped_runs == 1


def test_drop_oldest_across_partitions_evicts_the_oldest_run_of_the_query():
    limits = StateLimits(max_runs=3, policy="drop-oldest")
    engine = Engine(keyed("A ; B", "WITHIN 100 SECONDS"), state_limits=limits)
    stream = [ev("a1", "x", 1), ev("a2", "y", 2), ev("a3", "z", 3), ev("a4", "z", 4),
              ev("b1", "x", 6), ev("b2", "y", 7), ev("b3", "z", 8)]
    got = rows(engine.run(stream))
    assert [dict(b)["a"] for _, b in got] == [":a2", ":a3", ":a4"]    # a1 (key x) went first
    assert engine.runtime.live_keys == 0                              # x was dropped with its run


@pytest.mark.parametrize("query", [PREFIX + plain("A : B+ : C", "WITHIN 100 SECONDS"),
                                   keyed("A : B+ : C", "WITHIN 100 SECONDS", partition=False)])
def test_drop_oldest_runs_share_their_iterations_bindings(query):
    """Under drop-oldest the live runs are the newest, each extending another run of
    the batch before, so they share no iteration.  Each iteration's bindings are
    still those of its event, one dict for every run it extends, as _run_bytes
    counts them (with ?k, bound before the Kleene atom too, they are a part of the
    event's solution).  A dict per run and iteration made 10,000 runs of this
    query take 2.3 MB more at every event, past --max-state-memory."""
    engine = Engine(query, state_limits=StateLimits(max_runs=50, policy="drop-oldest"))
    list(engine.run([ev("a0", "k", 0)] + [ev(f"b{t}", "k", t) for t in range(1, 41)]))
    live = [run for part in engine.runtime.partitions.values()
            for _, run in part.ages.entries() if not run.dead]
    assert len(live) == 50 and min(len(run.events) for run in live) > 30
    bindings = {id(local) for run in live for _, its in run.iterations for local in its}
    assert len(bindings) <= 40      # (one per B event; it was 1,763)


def test_pending_matches_count_as_active_runs():
    limits = StateLimits(max_runs=1, policy="drop-newest")
    engine = Engine(PREFIX + plain("A ; N!", "WITHIN 10 SECONDS"), state_limits=limits)
    got = rows(engine.run(kinds("a1@1", "a2@2", "c1@30")))
    assert [dict(b)["a"] for _, b in got] == [":a1"]
    assert engine.stats.dropped_runs == 1


def test_the_memory_budget_counts_the_runs_state():
    limits = StateLimits(max_runs=None, max_state_bytes=100_000)
    engine = Engine(PREFIX + plain("A ; B"), state_limits=limits)
    with pytest.raises(LimitError, match=r"reached the limit of 97.7 kB \(--max-state-memory\)"):
        list(engine.run(kinds(*[f"a{t}@{t}" for t in range(1, 1000)])))
    assert 50 < engine.stats.peak_runs < 300


VALUED = {"A": 'DEFINE GPM A ON S { ?x :kind "a" ; :v ?v }', "N": 'DEFINE GPM N ON S { ?y :kind "n" ; :v ?v }',
          "B": 'DEFINE GPM B ON S { ?z :kind "b" ; :v ?v }'}


def valued(seq: str) -> str:
    """``SEQ`` over A, N, B WITHIN 100 DAYS, joined on ?v."""
    gpms = " ".join(gpm for name, gpm in VALUED.items() if name in seq)
    return f"{PREFIX}SELECT * WITHIN 100 DAYS\n{ONE_STREAM}WHERE {{ SEQ ({seq})\n{gpms} }}"


def lone_a_then_n(t: int):
    """An A of value 0, then N events of other values: its guard must keep them, none kills it."""
    return event("s", t, ':x1 :kind "a" ; :v "0" .' if t == 1 else f':y{t} :kind "n" ; :v "{t}" .')


@pytest.mark.parametrize("seq, make", [
    ("A ; N!", lambda t: event("s", t, f':x{t} :kind "a" ; :v "{t}" .')),      # pending matches
    ("A ; N! ; B", lone_a_then_n),                                               # the negation buffer
    ("A ; B ; N!", lambda t: event("s", t, f':x{t // 2} :kind "{"ab"[t % 2]}" ; :v "{t // 2}" .'))])
def test_the_state_estimate_is_near_what_the_state_holds(seq, make):
    """Per pending match, or buffered event, --max-state-memory's estimate is within a
    factor of 2 of the bytes tracemalloc counts (its objects; the terms' text, which
    pyoxigraph allocates, adds about a fifth to the resident memory).  A pending match
    was estimated at 0.4 KB, its event not counted (1.9 KB resident): a default run
    of SEQ (A ; N!) over 1.5 million A events aborted at 2 GB, short of every limit; an A
    of SEQ (A ; B ; N!) the B carried along counted for nothing, nor did the buffer."""
    engine = Engine(valued(seq), state_limits=StateLimits(max_runs=None, max_state_bytes=None))
    runtime = engine.runtime
    marks = []
    tracemalloc.start()
    try:
        for t in range(1, 1501):
            engine.push_event(make(t))
            if t in (500, 1500):
                gc.collect()
                marks.append((tracemalloc.get_traced_memory()[0], runtime.state_bytes, runtime.active_runs,
                              sum(len(part.buffer) for part in runtime.partitions.values())))
    finally:
        tracemalloc.stop()
    (traced, estimated, runs, buffered), (traced2, estimated2, runs2, buffered2) = marks
    units = (runs2 - runs) or (buffered2 - buffered)
    assert units >= 500
    ratio = (estimated2 - estimated) / (traced2 - traced)
    assert 1 / 2 < ratio < 2, ratio


@pytest.mark.parametrize("policy", ["fail", "drop-newest", "drop-oldest"])
def test_the_negation_buffer_counts_in_the_state_memory(policy):
    """One A, then N events its guard must see and that kill nothing: the buffer grew
    with every event and no limit counted it (1.3 GB, then out of memory, blamed on
    the runs).  Under ``fail`` the run stops naming it; a buffered event cannot be
    dropped (a guard may need it), so both drop policies drop the oldest run, and
    with it what it held."""
    engine = Engine(valued("A ; N! ; B"), state_limits=StateLimits(max_state_bytes=200_000, policy=policy))
    events = [lone_a_then_n(t) for t in range(1, 401)]
    if policy == "fail":
        with pytest.raises(LimitError, match=r"the state of 1 active runs and a negation buffer of 1\d\d events, "
                                             r"about 19\d\.\d kB, reached the limit of 195.3 kB "
                                             r"\(--max-state-memory\) at time 1\d\d: "):
            list(engine.run(events))
        return
    assert list(engine.run(events)) == []
    assert engine.stats.dropped_runs == 1 and engine.runtime.state_bytes == 0
    assert all(not part.buffer for part in engine.runtime.partitions.values())


def test_limits_are_checked():
    with pytest.raises(ValueError, match="max_runs"):
        StateLimits(max_runs=0)
    with pytest.raises(ValueError, match="policy"):
        StateLimits(policy="drop-some")


def test_exponential_patterns_are_warned_about():
    def warned(seq, window):
        return any("skip-till-any" in w for w in compile_query(PREFIX + plain(seq, window)).warnings)
    assert warned("A : B+ : C", "") and warned("A : B+ ; C", "WITHIN 1 HOURS") and warned("B+ : C", "")
    assert not warned("A : B+ : C", "WITHIN 30 SECONDS")       # a short window
    assert not warned("A ; B+ : C", "") and not warned("A : B : C", "")   # no skip-till-any loop


@given(seq=st.sampled_from(["A ; B+ ; C", "A : B+ : C", "A , B : C", "A : N! : C", "A ; B ; N!", "A : B?"]),
       keyed_by=st.booleans(), cap=st.integers(1, 6), per_key=st.booleans(),
       policy=st.sampled_from(["drop-newest", "drop-oldest"]),
       stream=st.lists(st.tuples(st.sampled_from("abcn"), st.sampled_from("xy")), min_size=1, max_size=12))
# Evicting at t7 filed the partition under its oldest live run (t4) while the batch
# still had to register a run of t2 (a2 b3 b6 b7): it outlived its window and matched.
@example(seq="A ; B+ ; C", keyed_by=False, cap=3, per_key=False, policy="drop-oldest",
         stream=[("n", "y"), ("a", "x"), ("b", "x"), ("a", "x"), ("a", "y"), ("b", "x"), ("b", "x"), ("b", "x"),
                 ("c", "y"), ("c", "x")])
def test_dropping_keeps_a_subset_of_the_matches_and_the_cap(seq, keyed_by, cap, per_key, policy, stream):
    """Under a drop policy the results are some of those without limits; every run
    kept is within the cap; with nothing dropped, they are all there."""
    query = keyed(seq, "WITHIN 6 SECONDS", partition=keyed_by)
    events = [ev(f"{kind}{t}", key, t) for t, (kind, key) in enumerate(stream, 1)]
    free = Engine(query)
    everything = collections.Counter(rows(free.run(events)))
    limits = StateLimits(max_runs=None if per_key else cap, max_partition_runs=cap if per_key else None,
                         policy=policy)
    capped = Engine(query, state_limits=limits)
    kept = collections.Counter(rows(capped.run(events)))
    assert not kept - everything
    if capped.stats.dropped_runs == 0:
        assert kept == everything
    if not per_key:
        assert capped.stats.peak_runs <= cap


# -- the command line -----------------------------------------------------------------

EXPONENTIAL = PREFIX + plain("A : B+ : C", "WITHIN 1 DAYS")


def _exponential_stream(path, matching: int) -> None:
    lines = ["@prefix : <http://example/> .", "@prefix prov: <http://www.w3.org/ns/prov#> ."]
    for t, kind in enumerate(["a"] + ["b"] * matching + ["c"], 1):
        lines.append(f':g{t} {{ :e{t} :kind "{kind}" . }}\n:g{t} prov:generatedAtTime {t} .')
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def exponential(tmp_path):
    (tmp_path / "q.rq").write_text(EXPONENTIAL)
    _exponential_stream(tmp_path / "s.trig", 2000)
    return tmp_path


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
def test_skip_till_any_kleene_ends_by_itself_under_2gb(exponential):
    """SEQ(A : B+ : C) over 2,000 matching events: 2^n runs.  Under a 2 GB address
    space it stops by the default policy, with exit status 3, within a minute."""
    started = time.monotonic()
    p = subprocess.run(["prlimit", "--as=2000000000"] + SPASEQ + ["run", "q.rq", "--stream", "S=s.trig"],
                       capture_output=True, text=True, cwd=exponential, timeout=60)
    assert p.returncode == 3, (p.returncode, p.stderr[-2000:])
    assert time.monotonic() - started < 60
    message = p.stderr.strip().splitlines()[-1]
    assert message.startswith("spaseq: limit reached: query q.rq: ") and "x2 [A B+]" in message, message
    assert "active runs" in message and "Traceback" not in p.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
def test_running_out_of_memory_is_a_limit_not_a_traceback(exponential):
    """With the state limits lifted, the process runs out of its 700 MB address
    space: it gives back its reserve and the runs, closes the output and exits 3."""
    p = subprocess.run(["prlimit", "--as=700000000"] + SPASEQ + ["run", "q.rq", "--stream", "S=s.trig",
                       "--max-runs", "none", "--max-state-memory", "none", "-o", "out.jsonl"],
                       capture_output=True, text=True, cwd=exponential, timeout=120)
    assert p.returncode == 3, (p.returncode, p.stderr[-2000:])
    assert p.stderr.strip().splitlines()[-1].startswith("spaseq: limit reached: out of memory: lower --max-state-memory")
    assert "Traceback" not in p.stderr and " 0 results; peak " in p.stderr       # the summary was printed
    assert (exponential / "out.jsonl").read_text() == ""


@pytest.mark.parametrize("policy", ["drop-newest", "drop-oldest"])
def test_drop_policies_go_on_and_count_what_they_dropped(tmp_path, policy):
    (tmp_path / "q.rq").write_text(EXPONENTIAL)
    _exponential_stream(tmp_path / "s.trig", 40)
    p = subprocess.run(SPASEQ + ["run", "q.rq", "--stream", "S=s.trig", "--max-runs", "300",
                                 "--on-limit", policy], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    results = [json.loads(line) for line in p.stdout.splitlines()]
    assert 0 < len(results) <= 300
    summary = p.stderr.strip().splitlines()[-1]
    assert f"partial matches dropped (--on-limit {policy})" in summary and "peak 300 active runs" in summary


def test_a_negation_buffer_past_the_state_memory_stops_the_run(tmp_path):
    """SEQ (A ; N! ; B) after one A keeps every N event for its guard: past
    --max-state-memory the run stops with exit status 3, naming the buffer (it went
    on to 1.3 GB, and the out-of-memory message blamed --max-runs)."""
    (tmp_path / "q.rq").write_text(valued("A ; N! ; B"))
    lines = ["@prefix : <http://example/> .", "@prefix prov: <http://www.w3.org/ns/prov#> ."]
    for t in range(1, 3001):
        body = ':x1 :kind "a" ; :v "0" .' if t == 1 else f':y{t} :kind "n" ; :v "{t}" .'
        lines.append(f':g{t} {{ {body} }}\n:g{t} prov:generatedAtTime {t} .')
    (tmp_path / "s.trig").write_text("\n".join(lines) + "\n")
    p = subprocess.run(SPASEQ + ["run", "q.rq", "--stream", "S=s.trig", "--max-state-memory", "1MiB"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 3, (p.returncode, p.stderr[-2000:])
    message = p.stderr.strip().splitlines()[-1]
    assert message.startswith("spaseq: limit reached: query q.rq: the state of 1 active runs and a negation "
                              "buffer of "), message
    assert "reached the limit of 1.0 MB (--max-state-memory)" in message and "Traceback" not in p.stderr


@pytest.mark.parametrize("policy", ["fail", "drop-oldest"])
def test_spaseq_run_bounds_a_guard_checked_against_the_negation_buffer(tmp_path, policy):
    """`spaseq run` on SEQ (A ; N! ; B), the guard joined by a comparison: past
    --max-join-steps on the b, ``fail`` exits 3 naming the guard and the event;
    ``drop-oldest`` goes on, with some of the matches the query has without the limit
    and none the last n kills."""
    query = crossed_unless("?q > ?p")
    events = many_runs_then_n(200)
    (tmp_path / "q.rq").write_text(query)
    lines = ["@prefix : <http://example/> .", "@prefix prov: <http://www.w3.org/ns/prov#> ."]
    for e in events:
        body = " ".join(f"{t.subject} {t.predicate} {t.object} ." for t in e.triples)
        lines.append(f":g{e.time} {{ {body} }}\n:g{e.time} prov:generatedAtTime {e.time} .")
    (tmp_path / "s.trig").write_text("\n".join(lines) + "\n")
    p = subprocess.run(SPASEQ + ["run", "q.rq", "--stream", "S=s.trig", "--max-join-steps", "5000",
                                 "--on-limit", policy], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    if policy == "fail":
        assert p.returncode == 3, (p.returncode, p.stderr[-2000:])
        assert p.stderr.strip().splitlines()[-1] == (
            "spaseq: limit reached: query q.rq: negation guard N was tried on more than 5,000 buffered events "
            "(--max-join-steps) on the event <http://example/g401> at time 401 (read at s.trig:803); "
            "--on-limit drop-oldest or drop-newest goes on with the first ones")
        assert p.stdout == ""
        return
    assert p.returncode == 0, p.stderr[-2000:]
    found = {json.loads(line)["bindings"]["x"]["value"] for line in p.stdout.splitlines()}
    expected = {r.bindings["x"].value for r in reference_evaluate(query, events)}
    assert len(expected) == 101 and found and found < expected, (len(found), sorted(found - expected)[:3])
    assert "partial matches dropped (--on-limit drop-oldest)" in p.stderr.strip().splitlines()[-1]


def test_explain_shows_the_limits_in_force(exponential):
    p = subprocess.run(SPASEQ + ["explain", "q.rq"], capture_output=True, text=True, cwd=exponential, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "active runs per query: 1,000,000 runs (--max-runs)" in p.stdout
    assert "run state: 512 MB" in p.stdout and "(--on-limit fail)" in p.stdout
    assert "a join on one event (a GPM's rows, a negation guard's tries): 10,000,000 steps " \
           "(--max-join-steps)" in p.stdout
    assert "skip-till-any" in p.stderr
    p = subprocess.run(SPASEQ + ["explain", "q.rq", "--max-runs", "5000", "--max-partition-runs", "50",
                                 "--max-state-memory", "none", "--on-limit", "drop-oldest",
                                 "--max-join-steps", "none"],
                       capture_output=True, text=True, cwd=exponential, timeout=120)
    assert "5,000 runs (--max-runs); per partition: 50 per key" in p.stdout
    assert "run state: no limit" in p.stdout and "drop the oldest partial matches" in p.stdout
    assert "a negation guard's tries): no limit (--max-join-steps)" in p.stdout
    assert "rows DISTINCT keeps: 1,000,000 rows (--max-distinct" in p.stdout


@pytest.mark.parametrize("flag, value", [("--max-runs", "0"), ("--max-runs", "many"),
                                         ("--max-state-memory", "12Q"), ("--max-partition-runs", "-3"),
                                         ("--max-join-steps", "0"), ("--max-distinct", "-1")])
def test_bad_limit_values_are_usage_errors(exponential, flag, value):
    p = subprocess.run(SPASEQ + ["run", "q.rq", "--stream", "S=s.trig", flag, value],
                       capture_output=True, text=True, cwd=exponential, timeout=120)
    assert p.returncode == 2 and p.stderr.startswith(f"spaseq: {flag} {value}: expected"), p.stderr


def test_the_summary_shows_live_keys(tmp_path):
    (tmp_path / "q.rq").write_text(keyed("A ; B", window=""))
    lines = ["@prefix : <http://example/> .", "@prefix prov: <http://www.w3.org/ns/prov#> ."]
    for t in range(1, 11):
        lines.append(f':g{t} {{ :a{t} :kind "a" ; :key :k{t % 4} . }}\n:g{t} prov:generatedAtTime {t} .')
    (tmp_path / "s.trig").write_text("\n".join(lines) + "\n")
    p = subprocess.run(SPASEQ + ["run", "q.rq", "--stream", "S=s.trig"], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "PARTITION BY without WITHIN" in p.stderr
    assert "peak 10 active runs, 4 live keys (peak 4)" in p.stderr.splitlines()[-1]


def test_the_progress_line_shows_live_keys(capsys):
    from spaseq_plugin.cli.commands import _Progress
    engine = Engine(keyed("A ; B", window=""))
    for t in range(1, 6):
        engine.push_event(ev(f"a{t}", f"k{t}", t))
    progress = _Progress("always", quiet=False)
    progress.engine = engine
    progress.tick()
    assert "5 active runs, 5 live keys, 0 rejected" in capsys.readouterr().err
