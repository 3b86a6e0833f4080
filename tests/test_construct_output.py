"""CONSTRUCT output reads back whole (runtime/results.py, output/formats.py):
a stream has at most one graph per timestamp (semantics.md section 1), so
every sink writes the graphs of one match time as one event, the union of
the matches' graphs, each match keeping its own fresh blank nodes.  A second
query then reads the output of the first without a rejection: through a
TriG file, standard output, an MQTT broker and the rdflib processor."""

from __future__ import annotations

import io
import subprocess
import sys
import threading

import rdflib

from brokers import mosquitto, mosquitto_program  # noqa: F401 (fixtures)
from helpers import EX, PREFIX, event
from spaseq_plugin import Engine
from spaseq_plugin.output.formats import TrigWriter
from spaseq_plugin.streams.mqtt import open_mqtt_sink, open_mqtt_source
from spaseq_plugin.streams.network import read_text

S = "http://example.org/s"
DERIVED = "http://example.org/derived"
# Three a's, then a b: under skip-till-any each a pairs with the b, three matches at 4.
PAIRS = PREFIX + """CONSTRUCT { [] :pair ?a ; :with ?b . } WITHIN 100 SECONDS
FROM STREAM S <http://example.org/s>
WHERE { SEQ (A : B)
  DEFINE GPM A ON S { ?a :kind "a" }
  DEFINE GPM B ON S { ?b :kind "b" } }
"""
READ_BACK = PREFIX + """SELECT ?n ?a ?b
FROM STREAM D <http://example.org/derived>
WHERE { SEQ (P)
  DEFINE GPM P ON D { ?n :pair ?a ; :with ?b } }
"""
STREAM = "".join(f'<{EX}e{t}> <http://www.w3.org/ns/prov#generatedAtTime> {t} .\n'
                 f'<{EX}e{t}> {{ <{EX}x{t}> <{EX}kind> "{k}" . }}\n'
                 for t, k in [(1, "a"), (2, "a"), (3, "a"), (4, "b")])


def events():
    return [event("s", t, f':x{t} :kind "{k}" .') for t, k in [(1, "a"), (2, "a"), (3, "a"), (4, "b")]]


def spaseq(*args):
    return subprocess.run([sys.executable, "-m", "spaseq_plugin", *args], capture_output=True, text=True,
                          timeout=120)


def check_read_back(text: str) -> None:
    engine = Engine(READ_BACK)
    results = list(engine.run(read_text(text.encode(), "output", DERIVED)))
    assert engine.stats.rejected == 0
    assert engine.stats.events == 1
    assert sorted((r.time, r.bindings["a"].value) for r in results) == [(4, f"{EX}x{t}") for t in (1, 2, 3)]
    assert len({r.bindings["n"] for r in results}) == 3          # a fresh blank node per match


def test_a_trig_file_and_stdout_read_back_whole(tmp_path):
    (tmp_path / "pairs.rq").write_text(PAIRS)
    (tmp_path / "back.rq").write_text(READ_BACK)
    (tmp_path / "s.trig").write_text(STREAM)
    first = spaseq("run", str(tmp_path / "pairs.rq"), "--stream", f"S={tmp_path / 's.trig'}",
                   "-o", str(tmp_path / "out.trig"))
    assert first.returncode == 0, first.stderr
    assert "3 results" in first.stderr
    second = spaseq("run", str(tmp_path / "back.rq"), "--stream", f"D={tmp_path / 'out.trig'}")
    assert second.returncode == 0, second.stderr
    assert len(second.stdout.splitlines()) == 3 and "0 rejected" in second.stderr
    check_read_back((tmp_path / "out.trig").read_text())
    stdout = spaseq("run", str(tmp_path / "pairs.rq"), "--stream", f"S={tmp_path / 's.trig'}")
    assert stdout.returncode == 0, stdout.stderr
    check_read_back(stdout.stdout)


def test_the_same_input_gives_the_same_blank_nodes(tmp_path):
    """Each match's blank nodes were random: two runs over the same input wrote
    different bytes (and a run resumed from a checkpoint, docs/checkpoints.md)."""
    (tmp_path / "pairs.rq").write_text(PAIRS)
    (tmp_path / "s.trig").write_text(STREAM)
    outputs = []
    for _ in range(2):
        run = spaseq("run", str(tmp_path / "pairs.rq"), "--stream", f"S={tmp_path / 's.trig'}")
        assert run.returncode == 0, run.stderr
        outputs.append(run.stdout)
    assert outputs[0] == outputs[1] and outputs[0].count("_:") == 3, outputs


def test_mqtt_sink_sends_one_event_per_match_time(mosquitto):
    source = open_mqtt_source(f"//127.0.0.1:{mosquitto.port}/derived?idle_timeout=20&max_events=1", DERIVED)
    second = Engine(READ_BACK)
    found = []
    consumer = threading.Thread(target=lambda: found.extend(second.run(source)), daemon=True)
    consumer.start()
    assert source.connected.wait(10)
    sink = open_mqtt_sink(f"//127.0.0.1:{mosquitto.port}/derived", [], {})
    produced = []
    first = Engine(PAIRS)
    for item in events():
        for result in first.push_event(item):
            produced.append(result)
            sink.write(result)
        sink.flush()                    # as spaseq run does on a live input: the results are final
    sink.close()
    consumer.join(20)
    assert len(produced) == 3 and sink.published == 1
    assert second.stats.events == 1 and second.stats.rejected == 0 and len(found) == 3


def test_the_rdflib_processor_gives_one_graph_per_match_time():
    dataset = rdflib.Dataset()
    dataset.parse(data=STREAM, format="trig")
    result = dataset.query(PAIRS, processor="spaseq")
    out = result.graph
    graphs = [g for g in out.graphs() if len(g) and g.identifier != rdflib.URIRef("urn:x-rdflib:default")]
    assert len(graphs) == 1 and len(graphs[0]) == 6
    check_read_back(out.serialize(format="trig"))


# A trailing optional: a without-C match is due at the end of its window, and is
# emitted with the batch after it; a with-C match of another run has the same time.
OPTIONAL = PREFIX + """CONSTRUCT { ?x :done ?k } WITHIN 2 SECONDS
FROM STREAM S <http://example.org/s>
WHERE { SEQ (A ; C?)
  DEFINE GPM A ON S { ?x :kind "a" ; :key ?k }
  DEFINE GPM C ON S { ?y :kind "c" ; :key ?k } }
"""


def test_results_of_one_match_time_come_out_together():
    engine = Engine(OPTIONAL)
    drains = []
    for t, kind, key in [(1, "a", "k2"), (2, "a", "k1"), (3, "c", "k1"), (9, "a", "k3")]:
        drains.append(engine.push_event(event("s", t, f':x{t} :kind "{kind}" ; :key :{key} .')))
    drains.append(engine.close())
    times = [sorted({r.time for r in drain}) for drain in drains if drain]
    assert all(len(t) == len(set(t)) for t in times)
    at_3 = [drain for drain in drains if any(r.time == 3 for r in drain)]
    assert len(at_3) == 1 and sum(r.time == 3 for r in at_3[0]) == 2
    # Written as a live run writes (flushed after each drain), it reads back whole.
    text = io.StringIO()
    writer = TrigWriter(text, [])
    for drain in drains:
        for result in drain:
            writer.write(result)
        writer.flush()
    writer.close()
    items = read_text(text.getvalue().encode(), "output", DERIVED)
    assert all(isinstance(item.time, int) for item in items)
    assert len({item.time for item in items}) == len(items)
