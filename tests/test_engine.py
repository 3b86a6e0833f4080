"""The NFA engine on hand-made streams, one operator or rule at a time
(the acceptance cases and the differential tests cover the rest)."""

import datetime
import gc
import re
from decimal import Decimal

import pyoxigraph as ox
import pytest
import rdflib
from hypothesis import given, settings, strategies as st

from spaseq_plugin import Engine, EventError, KnowledgeBase
from spaseq_plugin.events import IDLE
from spaseq_plugin.runtime.engine import YOUNG_COLLECTION_THRESHOLD, prepare_collector

from helpers import PREFIX, event, rows, run

ONE_STREAM = "FROM STREAM S <http://example.org/s>\n"


def kinds(*spec):
    """'a1@1', 'b2@3' -> events with :kind from the letter."""
    out = []
    for item in spec:
        name, t = item.split("@")
        out.append(event("s", int(t), f':{name} :kind "{name[0]}" .'))
    return out


def q(seq: str, window="WITHIN 100 SECONDS", select="SELECT *", extra=""):
    used = "".join(f'DEFINE GPM {k.upper()} ON S {{ ?{k} :kind "{k}" . }}\n' for k in "abcd" if k.upper() in seq)
    return f"{select} {window} {extra}\n{ONE_STREAM}WHERE {{ SEQ ({seq})\n{used}}}"


def test_negation_between_kills_the_match():
    got = run(q("A ; B! ; C"), kinds("a1@1", "b1@2", "c1@3", "a2@4", "c2@5"))
    assert got == [(5, (("a", ":a2"), ("c", ":c2")))]


def test_negation_under_skip_till_next_does_not_wait_for_a_later_c():
    # a1 ; c1 is the first C, and b1 lies between: the run dies, c2 does not rescue it
    got = run(q("A ; B! ; C"), kinds("a1@1", "b1@2", "c1@3", "c2@4"))
    assert got == []


def test_trailing_negation_is_emitted_at_first_plus_window():
    got = run(q("A ; B!", window="WITHIN 10 SECONDS"), kinds("a1@1", "a2@5", "b1@12", "a3@20"))
    # a1: no B in (1, 11] -> match at 11; a2: b1@12 within (5, 15] -> none; a3: input ends -> at 30
    assert got == [(11, (("a", ":a1"),)), (30, (("a", ":a3"),))]


def test_matches_due_at_a_time_come_out_with_its_others_older_first():
    # a1's match comes due at 5, when a2 and c5 match too: it was handed out after
    # theirs, which the time's batch had made before it (semantics.md section 9)
    query = ("SELECT ?a WITHIN 4 SECONDS\n" + ONE_STREAM + "WHERE { SEQ (A , C?)\n"
             'DEFINE GPM A ON S { ?a :kind "a" ; :loc ?l } DEFINE GPM C ON S { ?c :kind "c" ; :loc ?l } }')
    stream = [event("s", 1, ':a1 :kind "a" ; :loc :L1 .'), event("s", 4, ':a2 :kind "a" ; :loc :L2 .'),
              event("s", 5, ':c5 :kind "c" ; :loc :L2 .'), event("s", 6, ':d :kind "d" .')]
    for events in (stream, stream[:3]):         # (due with the next batch, and at the end)
        results = list(Engine(PREFIX + query).run(events))
        assert [[e.time for e in r.events] for r in results] == [[1], [4, 5]]


def test_optional_is_b_or_absent_b():
    got = run(q("A ; B? ; C"), kinds("a1@1", "b1@2", "c1@3"))
    assert got == [(3, (("a", ":a1"), ("b", ":b1"), ("c", ":c1")))]
    got = run(q("A ; B? ; C"), kinds("a1@1", "c1@3"))
    assert got == [(3, (("a", ":a1"), ("c", ":c1")))]


def test_disjunction_takes_either():
    got = run(q("A ; (B | C)"), kinds("a1@1", "c1@2", "b1@3"))
    assert got == [(2, (("a", ":a1"), ("c", ":c1")))]


def test_skip_till_any_kleene_gives_every_subset():
    got = run(q("C : A+ : B", select="SELECT ?c (COUNT(?a) AS ?n)"),
              kinds("c1@1", "d1@2", "a1@3", "a2@4", "a3@5", "d2@6", "a4@7", "b1@8"))
    assert len(got) == 15
    counts = sorted(int(dict(r[1])["n"].split('"')[1]) for r in got)
    assert counts == [1] * 4 + [2] * 6 + [3] * 4 + [4]


def test_strict_contiguity_kleene_stops_at_a_gap():
    got = run(q("A , B+", select="SELECT ?a (COUNT(?b) AS ?n)"), kinds("a1@1", "b1@2", "b2@3", "c1@4", "b3@5"))
    assert [dict(r[1])["n"] for r in got] == ['"1"^^<http://www.w3.org/2001/XMLSchema#integer>',
                                                '"2"^^<http://www.w3.org/2001/XMLSchema#integer>']


def test_window_is_a_span_from_the_first_event():
    assert run(q("A ; B", window="WITHIN 5 SECONDS"), kinds("a1@1", "b1@6")) == [(6, (("a", ":a1"), ("b", ":b1")))]
    assert run(q("A ; B", window="WITHIN 5 SECONDS"), kinds("a1@1", "b1@7")) == []


def test_tumbling_windows_cut_matches_at_boundaries():
    got = run(q("A ; B", window="WITHIN 10 SECONDS TUMBLING"), kinds("a1@0", "b1@9", "a2@15", "b2@21"))
    assert got == [(9, (("a", ":a1"), ("b", ":b1")))]


def test_partition_by_judges_contiguity_per_key():
    events = [event("s", 1, ':a1 :kind "a" ; :loc :L1 .'), event("s", 2, ':a2 :kind "a" ; :loc :L2 .'),
              event("s", 3, ':b1 :kind "b" ; :loc :L1 .')]
    text = ('SELECT ?a ?b WITHIN 10 SECONDS {part} FROM STREAM S <http://example.org/s> WHERE {{ SEQ (A , B) '
            'DEFINE GPM A ON S {{ ?a :kind "a" ; :loc ?l }} DEFINE GPM B ON S {{ ?b :kind "b" ; :loc ?l }} }}')
    assert run(text.format(part=""), events) == []
    assert run(text.format(part="PARTITION BY (?l)"), events) == [(3, (("a", ":a1"), ("b", ":b1")))]


def test_conjunction_operand_filters_see_earlier_operands():
    # the paper's Query 5 shape: C's FILTER reads ?v2, which B binds
    text = ("SELECT ?v1 ?v2 ?v3 WITHIN 60 SECONDS FROM STREAM S1 <http://example.org/s1> "
            "FROM STREAM S2 <http://example.org/s2> FROM STREAM S3 <http://example.org/s3> "
            "WHERE { SEQ (A ; (C & B)) DEFINE GPM A ON S1 { ?t :v ?v1 } "
            "DEFINE GPM B ON S2 { ?t2 :v ?v2 FILTER(?v2 >= ?v1) } DEFINE GPM C ON S3 { ?t3 :v ?v3 FILTER(?v3 >= ?v2) } }")
    events = [event("s1", 1, ":x :v 3 ."), event("s2", 2, ":y :v 4 ."), event("s3", 2, ":z :v 5 ."),
              event("s2", 3, ":y :v 6 ."), event("s3", 3, ":z :v 5 .")]
    got = run(text, events)
    assert [(t, dict(b)["v3"]) for t, b in got] == [(2, '"5"^^<http://www.w3.org/2001/XMLSchema#integer>')]


def test_aggregates_follow_sparql():
    text = ('SELECT ?c (SUM(?v) AS ?sum) (MAX(?v) AS ?top) (AVG(?v) AS ?avg) WITHIN 60 SECONDS ' + ONE_STREAM +
            'WHERE { SEQ (C ; A+ ; B) DEFINE GPM C ON S { ?c :kind "c" } DEFINE GPM A ON S { ?a :v ?v } '
            'DEFINE GPM B ON S { ?b :kind "b" } }')
    events = [event("s", 1, ':c :kind "c" .'), event("s", 2, ":a1 :v 2 ."), event("s", 3, ":a2 :v 3.5 ."),
              event("s", 4, ':b :kind "b" .')]
    got = [dict(b) for _, b in run(text, events)]
    assert {"sum": '"5.5"^^<http://www.w3.org/2001/XMLSchema#decimal>',
            "top": '"3.5"^^<http://www.w3.org/2001/XMLSchema#decimal>',
            "avg": '"2.75"^^<http://www.w3.org/2001/XMLSchema#decimal>'}.items() <= got[1].items()


def test_distinct_is_per_query_lifetime():
    got = run(q("A ; B", select="SELECT DISTINCT ?b"), kinds("a1@1", "a2@2", "b1@3"))
    assert got == [(3, (("b", ":b1"),))]


def test_bad_events_are_rejected_counted_and_the_stream_goes_on():
    engine = Engine(PREFIX + q("A ; B"))
    events = kinds("a1@1", "a2@1", "b0@0", "b1@3")          # duplicate τ, then out of order
    got = rows(engine.run(events))
    assert got == [(3, (("a", ":a1"), ("b", ":b1")))]
    assert engine.stats.rejected == 2
    assert all(isinstance(e, EventError) for e in engine.stats.rejections)


def test_push_rdflib_graphs():
    engine = Engine(PREFIX + q("A ; B"))
    results = []
    for t, (name, kind) in enumerate([("a1", "a"), ("b1", "b")], start=1):
        g = rdflib.Graph()
        g.add((rdflib.URIRef("http://example/" + name), rdflib.URIRef("http://example/kind"), rdflib.Literal(kind)))
        results += engine.push("http://example.org/s", t, g)
    assert rows(results + engine.close()) == [(2, (("a", ":a1"), ("b", ":b1")))]


def test_callback_sees_results_as_they_come():
    # One stream has at most one event per timestamp: its results are final at once.
    seen = []
    engine = Engine(PREFIX + q("A ; B"), on_result=seen.append)
    engine.push_event(kinds("a1@1")[0])
    engine.push_event(kinds("b1@2")[0])
    assert len(seen) == 1


TWO_STREAMS = """SELECT * WITHIN 100 SECONDS
FROM STREAM S <http://example.org/s>
FROM STREAM T <http://example.org/t>
WHERE { SEQ (A ; (B & C))
  DEFINE GPM A ON S { ?a :kind "a" . }
  DEFINE GPM B ON S { ?b :kind "b" . }
  DEFINE GPM C ON T { ?c :kind "c" . } }"""


def test_a_timestamp_is_complete_once_every_stream_has_delivered_it():
    engine = Engine(PREFIX + TWO_STREAMS)
    assert engine.push_event(event("s", 1, ':a1 :kind "a" .')) == []
    assert engine.push_event(event("s", 2, ':b1 :kind "b" .')) == []    # t may still send 2
    got = engine.push_event(event("t", 2, ':c1 :kind "c" .'))            # now it has
    assert rows(got) == [(2, (("a", ":a1"), ("b", ":b1"), ("c", ":c1")))]
    # ...or something later: then 2 is complete too.
    engine = Engine(PREFIX + TWO_STREAMS)
    engine.push_event(event("t", 1, ':c0 :kind "c" .'))
    engine.push_event(event("s", 3, ':a1 :kind "a" .'))
    engine.push_event(event("t", 5, ':c9 :kind "c" .'))
    assert engine.push_event(event("s", 5, ':b1 :kind "b" .')) != []


def test_idle_closes_the_pending_timestamp_and_a_late_event_is_rejected():
    engine = Engine(PREFIX + TWO_STREAMS)
    engine.push_event(event("t", 1, ':c0 :kind "c" .'))
    engine.push_event(event("s", 2, ':a1 :kind "a" .'))
    engine.push_event(event("s", 3, ':b1 :kind "b" .'))
    engine.push_event(event("t", 3, ':c1 :kind "c" .'))                 # 3 complete: A ; (B & C)
    engine.push_event(event("s", 4, ':b2 :kind "b" .'))                 # t is quiet
    assert engine.idle() == []                                           # (no C at 4: no match)
    late = event("t", 4, ':c2 :kind "c" .')
    assert engine.push_event(late) == []
    assert engine.stats.rejected_by_reason == {"late": 1}
    assert [r.time for r in engine.run([event("s", 6, ':b3 :kind "b" .'), IDLE])] == []


def test_runs_are_dropped_when_the_window_passes():
    engine = Engine(PREFIX + q("A ; B", window="WITHIN 5 SECONDS"))
    list(engine.run(kinds(*[f"a{i}@{i}" for i in range(1, 200)])))
    assert engine.stats.peak_runs <= 7


def test_kb_on_disk_oxigraph(tmp_path):
    store = ox.Store(str(tmp_path / "kb"))
    store.add(ox.Quad(ox.NamedNode("http://example/a1"), ox.NamedNode("http://example/owner"),
                      ox.NamedNode("http://example/john"), ox.NamedNode("http://kb")))
    store.flush()
    del store
    kb = KnowledgeBase.from_specs([f"oxigraph:{tmp_path / 'kb'}"])
    text = ('SELECT ?a ?o WITHIN 5 SECONDS ' + ONE_STREAM +
            'WHERE { SEQ (A) DEFINE GPM A ON S { ?a :kind "a" GRAPH <http://kb> { ?a :owner ?o } } }')
    assert run(text, kinds("a1@1", "a2@2"), kb=kb) == [(1, (("a", ":a1"), ("o", ":john")))]


def test_datetime_timestamps_print_as_iso(tmp_path):
    from spaseq_plugin.events import format_time
    assert format_time(1577836800, True) == "2020-01-01T00:00:00Z"
    assert format_time(1577836800.5, True) == "2020-01-01T00:00:00.500000Z"


@settings(max_examples=500)
@given(st.integers(min_value=-62135596800, max_value=253402300799), st.integers(min_value=0, max_value=999999))
def test_datetime_timestamps_print_as_python_does_from_year_1_to_9999(seconds, microseconds):
    """format_time's own calendar (cached days, two-digit pieces) against datetime's."""
    from spaseq_plugin.events import format_time
    moment = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + \
        datetime.timedelta(seconds=seconds, microseconds=microseconds)
    expected = moment.isoformat(timespec="microseconds" if microseconds else "seconds").replace("+00:00", "Z")
    assert format_time(seconds + Decimal(microseconds) / 1000000, True) == expected
    if not microseconds:
        assert format_time(seconds, True) == expected       # (an int: the C path when compiled)
        step = -86399 if seconds > 0 else 86399     # (a day away, within the years datetime knows)
        assert format_time(seconds + step, True) == \
            (moment + datetime.timedelta(seconds=step)).isoformat().replace("+00:00", "Z")


def test_datetime_timestamps_print_from_any_second():
    """Seconds beyond +-2**62 take the general path, and print."""
    from spaseq_plugin.events import format_time
    assert format_time(1 << 62, True).endswith("T07:45:04Z")
    assert format_time(-(1 << 62), True).endswith("T16:14:56Z")
    assert format_time((1 << 62) - 1, True).endswith("T07:45:03Z")
    assert format_time((1 << 62) + Decimal("0.5"), True).endswith("T07:45:04.500000Z")


_UTC_TIMES = st.lists(st.tuples(st.integers(min_value=-62135596800 // 60, max_value=253402300799 // 60),
                                st.integers(min_value=0, max_value=59)), min_size=1, max_size=40)


_NEAR_UTC_TIMES = st.integers(min_value=-62135596800 // 60, max_value=253402300799 // 60 - 5000).flatmap(
    lambda start: st.lists(st.tuples(st.integers(min_value=start, max_value=start + 5000),
                                     st.integers(min_value=0, max_value=59)), min_size=1, max_size=40))


@settings(max_examples=300)
@given(st.one_of(_UTC_TIMES, _UTC_TIMES.map(sorted), _NEAR_UTC_TIMES, _NEAR_UTC_TIMES.map(sorted)))
def test_canonical_utc_timestamps_are_read_as_datetime_does_in_any_order(times):
    """parse_timestamp's fast path (the day of the time before, then days seen
    before, the time of day from its digits) against datetime's calendar: days
    repeated, new and revisited, and forms of a known day it must not take."""
    from spaseq_plugin.events import parse_timestamp
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    dt = ox.NamedNode("http://www.w3.org/2001/XMLSchema#dateTime")
    for minute, second in times:
        moment = epoch + datetime.timedelta(minutes=minute, seconds=second)
        text = moment.isoformat().replace("+00:00", "Z")
        assert parse_timestamp(ox.Literal(text, datatype=dt)) == (minute * 60 + second, True), text
        day = text[:11]
        midnight = minute * 60 - (moment.hour * 3600 + moment.minute * 60)
        if moment.year < 9999 or moment.month < 12 or moment.day < 31:
            assert parse_timestamp(ox.Literal(day + "24:00:00Z", datatype=dt)) == (midnight + 86400, True)
        for wrong in ("25:00:00Z", "10:60:00Z", "10:00:60Z", "1O:00:00Z", "10:00:00+"):
            with pytest.raises(ValueError):
                parse_timestamp(ox.Literal(day + wrong, datatype=dt))


@settings(max_examples=300)
@given(st.one_of(st.integers(min_value=-10**16, max_value=10**16).map(str),
                 st.text(alphabet="0123456789+- \t\u0663\uff11_.e", max_size=16)))
def test_integer_timestamps_are_read_by_the_xsd_rules_also_on_the_fast_path(text):
    """parse_timestamp's fast path for xsd:integer (plain ASCII digits) against the XSD
    lexical rule and the representable range: the same value or the same refusal."""
    from spaseq_plugin.events import MAX_NUMBER, parse_timestamp
    literal = ox.Literal(text, datatype=ox.NamedNode("http://www.w3.org/2001/XMLSchema#integer"))
    collapsed = text.strip(" \t\n\r")
    if re.fullmatch(r"[+-]?[0-9]+", collapsed, re.ASCII) and -MAX_NUMBER < int(collapsed) < MAX_NUMBER:
        assert parse_timestamp(literal) == (int(collapsed), False)
    else:
        with pytest.raises(ValueError):
            parse_timestamp(literal)


def test_partition_places_events_whatever_filters_on_other_gpms_say():
    # B's FILTER reads ?a (A's): it cannot judge an event alone, so it does not
    # keep B's events out of the sub-stream; with one key, PARTITION BY changes nothing
    text = ("SELECT ?v ?a ?b WITHIN 1 HOUR {part} FROM STREAM S <http://example.org/s> WHERE {{ SEQ (A , B) "
            "DEFINE GPM A ON S {{ ?v :speed ?a . FILTER (?a < 3) }} "
            "DEFINE GPM B ON S {{ ?v :speed ?b . FILTER (?b > ?a) }} }}")
    events = [event("s", 1, ":boat :speed 1 ."), event("s", 2, ":boat :speed 9 ."), event("s", 3, ":boat :speed 2 .")]
    expected = [(2, (("a", '"1"^^<http://www.w3.org/2001/XMLSchema#integer>'),
                     ("b", '"9"^^<http://www.w3.org/2001/XMLSchema#integer>'), ("v", ":boat")))]
    assert run(text.format(part=""), events) == expected
    assert run(text.format(part="PARTITION BY ?v"), events) == expected


def test_the_collector_is_prepared_for_a_long_run():
    """``prepare_collector`` (called by ``spaseq run`` before its loop) freezes what is
    alive and collects the young generation less often; the test puts both back."""
    threshold = gc.get_threshold()
    try:
        prepare_collector()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (YOUNG_COLLECTION_THRESHOLD, *threshold[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
