"""Stream files: TriG / N-Quads readers, manifests, merging (semantics.md 1, 10)."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pyoxigraph as ox
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spaseq_plugin.errors import EventError
from spaseq_plugin.events import Event
from spaseq_plugin.streams import files, reader
from spaseq_plugin.streams.files import (
    merge_streams,
    open_stream,
    read_manifest,
    read_manifest_streams,
    read_ntriples_chunks,
    read_stream_file,
)

S = "http://example.org/s"
EX = "http://example/"
HEADER = (
    "@prefix : <http://example/> .\n"
    "@prefix prov: <http://www.w3.org/ns/prov#> .\n"
    "@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .\n"
)
PROV = "<http://www.w3.org/ns/prov#generatedAtTime>"
INT = "<http://www.w3.org/2001/XMLSchema#integer>"


def write(path: Path, text: str) -> str:
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def trig_events(n: int, start: int = 1, step: int = 1, label: str = "e") -> str:
    """n well-formed events, one line for the timestamp and one for the graph."""
    return "".join(
        f':{label}{i} prov:generatedAtTime "{start + step * (i - 1)}"^^xsd:integer .\n'
        f":{label}{i} {{ :x{i} :p {i} . }}\n"
        for i in range(1, n + 1))


def split(items):
    events = [x for x in items if isinstance(x, Event)]
    errors = [x for x in items if isinstance(x, EventError)]
    return events, errors


def summary(items):
    """Events as (graph local name, time), errors as 'error@LINE'."""
    out = []
    for item in items:
        if isinstance(item, EventError):
            out.append(f"error@{item.position.rsplit(':', 1)[1]}")
        else:
            name = item.name.value.removeprefix(EX) if item.name is not None else None
            out.append((name, item.time))
    return out


def line_of(item) -> int:
    return int(item.position.rsplit(":", 1)[1])


# ---- TriG -------------------------------------------------------------------

def test_trig_timestamp_before_and_after_graph(tmp_path):
    path = write(tmp_path / "s.trig", HEADER + (
        ':e1 prov:generatedAtTime "10"^^xsd:integer .\n'     # line 4: before
        ":e1 { :h1 :loc :L1 . :h1 :pow 3 . }\n"               # line 5
        ":e2 { :h2 :loc :L2 . }\n"                             # line 6
        ':e2 prov:generatedAtTime "20"^^xsd:integer .\n'     # line 7: after
        ':e2 :source "sensor 7" .\n'                           # metadata, ignored
    ))
    items = list(read_stream_file(path, S))
    assert summary(items) == [("e1", 10), ("e2", 20)]
    e1, e2 = items
    assert e1.stream == S and e1.is_datetime is False
    assert e1.name == ox.NamedNode(EX + "e1")
    assert e1.position == f"{path}:5" and e2.position == f"{path}:6"
    assert set(e1.triples) == {
        ox.Triple(ox.NamedNode(EX + "h1"), ox.NamedNode(EX + "loc"), ox.NamedNode(EX + "L1")),
        ox.Triple(ox.NamedNode(EX + "h1"), ox.NamedNode(EX + "pow"),
                  ox.Literal("3", datatype=ox.NamedNode("http://www.w3.org/2001/XMLSchema#integer"))),
    }
    assert all(isinstance(t, ox.Triple) for t in e1.triples)


def test_trig_datetime_timestamps(tmp_path):
    path = write(tmp_path / "s.trig", HEADER + (
        ':e1 prov:generatedAtTime "2024-01-01T00:00:00Z"^^xsd:dateTime .\n'
        ":e1 { :a :b :c . }\n"
        ':e2 prov:generatedAtTime "2024-01-01T00:00:30"^^xsd:dateTime .\n'   # no zone: UTC
        ":e2 { :a :b :d . }\n"
    ))
    events, errors = split(read_stream_file(path, S))
    assert not errors
    assert [e.time for e in events] == [1704067200, 1704067230]
    assert all(e.is_datetime for e in events)


def test_trig_syntax_forms(tmp_path):
    # GRAPH keyword, SPARQL-style PREFIX, multi-line blocks, strings and IRIs
    # holding '.', '{', '}' and '#', a long string over lines, decimals,
    # comments, an RDF 1.2 annotation, several blocks of one graph, an empty
    # graph.
    path = write(tmp_path / "s.trig", (
        "PREFIX : <http://example/>\n"
        "prefix prov: <http://www.w3.org/ns/prov#>\n"
        "@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .\n"
        "# a comment . { }\n"
        ':e1 prov:generatedAtTime "1"^^xsd:integer .\n'
        'GRAPH :e1 { :a :label "x . y { } # z" ; :n 1.5, .5 .\n'        # line 6
        '  :a :text """two\nlines . } {""" .\n'
        "  :a :iri <http://example/p#q.r> {| :source :s1 |} . }\n"
        ":e1 { :a :more :stuff . }   # same graph, not yet emitted\n"
        ":e2 { }\n"                                                      # line 11
        ':e2 prov:generatedAtTime "2.5"^^xsd:decimal .\n'
    ))
    items = list(read_stream_file(path, S))
    assert summary(items) == [("e1", 1), ("e2", 2.5)]
    e1, e2 = items
    assert line_of(e1) == 6 and line_of(e2) == 11
    values = {getattr(t.object, "value", None) for t in e1.triples}
    assert {"x . y { } # z", "1.5", ".5", "two\nlines . } {", "http://example/p#q.r",
            EX + "s1", EX + "stuff"} <= values
    assert e2.triples == ()


def test_trig_syntax_error_rejects_one_event(tmp_path):
    path = write(tmp_path / "s.trig", HEADER + trig_events(2) + (
        ':e3 prov:generatedAtTime "3"^^xsd:integer .\n'          # line 8
        ":e3 { :x3 :p :q :r . }\n"                                # line 9: bad
    ) + trig_events(2, start=4, label="f"))
    items = list(read_stream_file(path, S))
    assert summary(items) == [("e1", 1), ("e2", 2), "error@9", ("f1", 4), ("f2", 5)]
    error = items[2]
    assert error.message.startswith("syntax error:")
    assert error.position == f"{path}:9"


def test_trig_bad_triples_statement_and_recovery(tmp_path):
    path = write(tmp_path / "s.trig", HEADER + (
        ':e1 prov:generatedAtTime "1"^^xsd:integer .\n'
        ":e1 { :a :b :c .\n"                  # line 5: block never closed
        ':e2 prov:generatedAtTime "2"^^xsd:integer .\n'
        ":e2 { :a :b :d . }\n"
        ':e3 prov:generatedAtTime "3 .\n'     # line 8: unclosed string
        ':e3 prov:generatedAtTime "3"^^xsd:integer .\n'
        ":e3 { :a :b :e . }\n"
    ))
    items = list(read_stream_file(path, S))
    # The unclosed block runs up to the line of the next block, so e2 loses
    # its timestamp; the next block is read again from its own line.
    assert summary(items) == ["error@5", "error@7", "error@8", ("e3", 3)]
    assert "graph block not closed" in items[0].message
    assert "no timestamp" in items[1].message
    assert items[2].message.startswith("syntax error")


def test_trig_missing_timestamp(tmp_path):
    path = write(tmp_path / "s.trig", HEADER + (
        ':e1 prov:generatedAtTime "1"^^xsd:integer .\n'
        ":e1 { :a :b :c . }\n"
        ":e2 { :a :b :d . }\n"                # line 6: no timestamp
        ':e3 prov:generatedAtTime "3"^^xsd:integer .\n'
        ":e3 { :a :b :e . }\n"
    ))
    items = list(read_stream_file(path, S))
    assert summary(items) == [("e1", 1), "error@6", ("e3", 3)]
    assert "no timestamp" in items[1].message


def test_missing_timestamp_decided_before_the_end(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "NEAR_GRAPHS", 2)
    path = write(tmp_path / "s.trig", HEADER + ":lost { :a :b :c . }\n" + trig_events(6))
    stream = read_stream_file(path, S)
    first = next(stream)
    assert isinstance(first, EventError) and "no timestamp" in first.message
    assert summary(stream) == [(f"e{i}", i) for i in range(1, 7)]


def test_trig_bad_timestamps(tmp_path):
    path = write(tmp_path / "s.trig", HEADER + (
        ':e1 prov:generatedAtTime "soon" .\n'                        # line 4
        ":e1 { :a :b :c . }\n"
        ':e2 prov:generatedAtTime "2"^^xsd:integer .\n'
        ":e2 { :a :b :d . }\n"
        ':e2 prov:generatedAtTime "2.0"^^xsd:decimal .\n'            # same value: fine
        ':e3 prov:generatedAtTime "3"^^xsd:integer .\n'
        ":e3 { :a :b :e . }\n"
        ':e3 prov:generatedAtTime "4"^^xsd:integer .\n'              # line 11: differs
        ':e4 prov:generatedAtTime "5"^^xsd:integer .\n'
        ":e4 { :a :b :f . }\n"
    ))
    items = list(read_stream_file(path, S))
    assert summary(items) == ["error@4", ("e2", 2), "error@11", ("e4", 5)]
    assert "unreadable timestamp" in items[0].message
    assert "two different timestamps" in items[2].message


@pytest.mark.parametrize("suffix", [".trig", ".nq"])
def test_an_event_s_repeated_triples_are_read_once_in_their_order(tmp_path, suffix):
    """An event is a set of triples: a triple written twice in its graph is read
    once, where it first came, however many triples the graph has (two are
    compared at once, up to eight pairwise, more hashed)."""
    graphs = [[1, 1], [1, 2, 1], [3, 1, 2, 2], [1, 2], list(range(9)) + [4], list(range(12)), [5, 6, 7, 5]]
    lines = []
    for n, objects in enumerate(graphs, 1):
        graph = f"<{EX}e{n}>"
        lines.append(f'{graph} {PROV} "{n}"^^{INT} .')
        quads = [f"<{EX}a> <{EX}b> <{EX}o{o}>" for o in objects]
        lines += [q + f" {graph} ." for q in quads] if suffix == ".nq" else [graph + " { " + " . ".join(quads) + " }"]
    path = write(tmp_path / ("s" + suffix), "\n".join(lines) + "\n")
    events = list(read_stream_file(path, S))
    assert [[t.object.value for t in e.triples] for e in events] == [
        [f"{EX}o{o}" for o in dict.fromkeys(objects)] for objects in graphs]


def test_duplicate_and_out_of_order(tmp_path):
    path = write(tmp_path / "s.trig", HEADER + (
        ':e1 prov:generatedAtTime "10"^^xsd:integer .\n:e1 { :a :b 1 . }\n'
        ':e2 prov:generatedAtTime "10"^^xsd:integer .\n:e2 { :a :b 2 . }\n'   # line 7
        ':e3 prov:generatedAtTime "5"^^xsd:integer .\n:e3 { :a :b 3 . }\n'    # line 9
        ':e4 prov:generatedAtTime "20"^^xsd:integer .\n:e4 { :a :b 4 . }\n'
    ))
    items = list(read_stream_file(path, S))
    assert summary(items) == [("e1", 10), "error@7", "error@9", ("e4", 20)]
    assert "duplicate timestamp 10" in items[1].message
    assert "out of order" in items[2].message


def test_graph_split_around_another_event_is_rejected(tmp_path):
    path = write(tmp_path / "s.trig", HEADER + trig_events(2) + ":e1 { :late :p :o . }\n")
    items = list(read_stream_file(path, S))
    assert summary(items) == [("e1", 1), ("e2", 2), "error@8"]
    assert "already read as an event" in items[2].message


def test_late_block_is_told_while_the_graph_is_remembered(tmp_path, monkeypatch):
    """Finished graphs are remembered in two generations of DONE_MEMORY / 2: a
    late block of one of the last DONE_MEMORY / 2 graphs is still told apart."""
    monkeypatch.setattr(reader, "DONE_MEMORY", 4)
    path = write(tmp_path / "s.trig", HEADER + trig_events(3) + ":e2 { :late :p :o . }\n")
    items = list(read_stream_file(path, S))
    assert summary(items)[-1] == "error@10" and "already read as an event" in items[-1].message
    monkeypatch.setattr(reader, "DONE_MEMORY", 2)       # e2 is forgotten: a graph with no timestamp
    path = write(tmp_path / "s.trig", HEADER + trig_events(4) + ":e2 { :late :p :o . }\n")
    items = list(read_stream_file(path, S))
    assert summary(items)[-1] == "error@12" and "has no timestamp" in items[-1].message
    finished = reader._Finished(4)
    for n in range(7):
        finished.add(n, n)
    assert [finished.get(n, None) for n in range(7)] == [None, None, None, None, 4, 5, 6]


def test_blank_node_labels_are_shared_within_a_file(tmp_path):
    path = write(tmp_path / "s.trig", HEADER + (
        ':e1 prov:generatedAtTime "1"^^xsd:integer .\n:e1 { _:b :p :o . }\n'
        ':e2 prov:generatedAtTime "2"^^xsd:integer .\n:e2 { _:b :p :q . [] :p :q . }\n'
    ))
    e1, e2 = read_stream_file(path, S)
    assert e1.triples[0].subject == e2.triples[0].subject == ox.BlankNode("b")
    assert isinstance(e2.triples[1].subject, ox.BlankNode)
    assert e2.triples[1].subject != ox.BlankNode("b")


def test_trig_result_does_not_depend_on_chunk_size(tmp_path, monkeypatch):
    path = write(tmp_path / "s.trig", HEADER + trig_events(3) + (
        ':e4 prov:generatedAtTime "4"^^xsd:integer .\n'
        ':e4 { :a :text """long\nstring . } with { braces""" . }\n'
        ":e5 { :a :b :c :d . }\n"
        ':e5 prov:generatedAtTime "5"^^xsd:integer .\n'
        ':e6 prov:generatedAtTime "6"^^xsd:integer .\n:e6 { :a :b \'it\'\'s\' . }\n'
    ))
    expected = [str(x) if isinstance(x, EventError) else (x.name, x.time, x.triples, x.position)
                for x in read_stream_file(path, S)]
    assert len(expected) == 6
    for size in (1, 2, 3, 7, 64):
        monkeypatch.setattr(files, "_CHUNK_BYTES", size)
        got = [str(x) if isinstance(x, EventError) else (x.name, x.time, x.triples, x.position)
               for x in read_stream_file(path, S)]
        assert got == expected, size


def test_reading_is_lazy(tmp_path, monkeypatch):
    # The first event comes out long before the file has been read.
    path = write(tmp_path / "s.trig", HEADER + trig_events(5000))
    monkeypatch.setattr(files, "_CHUNK_BYTES", 1024)
    read = []

    class Counting(files._Chunks):
        def __iter__(self):
            for chunk in super().__iter__():
                read.append(len(chunk))
                yield chunk

    monkeypatch.setattr(files, "_Chunks", Counting)
    first = next(read_stream_file(path, S))
    assert first.time == 1
    assert sum(read) < os.path.getsize(path) / 10


def test_relative_iris_resolve_against_the_file(tmp_path):
    path = write(tmp_path / "s.trig", (
        '<e1> <http://www.w3.org/ns/prov#generatedAtTime> 1 .\n<e1> { <a> <b> <c> . }\n'))
    (event,) = read_stream_file(path, S)
    assert event.name == ox.NamedNode((tmp_path / "e1").resolve().as_uri())


_IRI_PARTS = st.sampled_from(["a", "b", "/", ".", "..", "/./", "/../", ":", "?", "#", "%2E", "@", "=", "~", "//"])


@given(st.sampled_from(["http://", "urn:", "http:", "file:///", "x-y.z+1:", "http://u@h:80"]),
       st.lists(_IRI_PARTS, max_size=10))
def test_an_absolute_iri_parses_the_same_with_a_base_as_without(scheme, parts):
    # The fast reading parses a piece without the file's base first (streams/reader.py,
    # _TrigParser.piece): right only while pyoxigraph resolves an absolute IRI to itself,
    # dot segments and all.
    text = f"<{scheme}{''.join(parts)}> <urn:p> <urn:o> .".encode()

    def subjects(base):
        try:
            return [q.subject for q in ox.parse(text, format=ox.RdfFormat.TRIG, base_iri=base)]
        except SyntaxError:
            return None
    assert subjects(None) == subjects("file:///data/stream/file.trig")


def test_only_a_relative_iri_makes_a_piece_parse_again_with_the_base():
    # (pyoxigraph's message on a relative IRI tells the two apart: an error that is
    # not one stands, without a second parse)
    parser = reader._TrigParser("s.trig", "file:///data/")
    assert parser.piece(b"<http://a> <http://b> .\n").error_line == 1
    assert not parser.relative
    assert parser.piece(b"<a> <http://b> <c> .\n").error_line is None
    assert parser.relative


def test_relative_iris_after_pieces_without_them_resolve_against_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_CHUNK_BYTES", 1024)
    absolute = "".join(f'<{EX}e{i}> <http://www.w3.org/ns/prov#generatedAtTime> {i} .\n'
                       f'<{EX}e{i}> {{ <{EX}a/../b> <{EX}p> "{i}" . }}\n' for i in range(1, 200))
    path = write(tmp_path / "s.trig", absolute + (
        '<e200> <http://www.w3.org/ns/prov#generatedAtTime> 200 .\n<e200> { <a> <b> <../c> . }\n'
        f'<{EX}e201> <http://www.w3.org/ns/prov#generatedAtTime> 201 .\n<{EX}e201> {{ <d> <{EX}p> 1 . }}\n'))
    events = list(read_stream_file(path, S))
    assert [e.time for e in events] == list(range(1, 202))
    assert events[0].triples[0].subject == ox.NamedNode(EX + "a/../b")
    base = tmp_path.resolve().as_uri() + "/"
    assert events[199].name == ox.NamedNode(base + "e200")
    assert events[199].triples == (ox.Triple(ox.NamedNode(base + "a"), ox.NamedNode(base + "b"),
                                             ox.NamedNode(tmp_path.parent.resolve().as_uri() + "/c")),)
    assert events[200].triples[0].subject == ox.NamedNode(base + "d")


# ---- N-Quads and gzip -------------------------------------------------------

def nquads(events, graph_base=EX + "g"):
    lines = []
    for i, time in events:
        lines.append(f"<{graph_base}{i}> {PROV} \"{time}\"^^{INT} .\n")
        lines.append(f"<{EX}x{i}> <{EX}p> <{EX}o{i}> <{graph_base}{i}> .\n")
        lines.append(f"<{EX}x{i}> <{EX}q> \"{i}\" <{graph_base}{i}> .\n")
    return "".join(lines)


def test_nquads(tmp_path):
    path = write(tmp_path / "s.nq", "# comment\n\n" + nquads([(1, 5), (2, 6)]))
    items = list(read_stream_file(path, S))
    assert summary(items) == [("g1", 5), ("g2", 6)]
    assert [line_of(e) for e in items] == [4, 7]
    assert all(len(e.triples) == 2 for e in items)


def test_nquads_bad_line_rejected(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "FAST_BYTES", 200)           # errors inside a piece
    text = nquads([(1, 1), (2, 2), (3, 3)])
    lines = text.splitlines(keepends=True)
    lines[4] = f"<{EX}x2> <{EX}p> <{EX}g2> .. broken\n"          # line 5: a triple of g2
    path = write(tmp_path / "s.nq", "".join(lines))
    items = list(read_stream_file(path, S))
    assert summary(items) == [("g1", 1), "error@5", ("g2", 2), ("g3", 3)]
    assert items[1].message.startswith("syntax error")
    assert len(items[2].triples) == 1


@pytest.mark.parametrize("name", ["s.trig.gz", "s.nq.gz"])
def test_gzip(tmp_path, name):
    text = HEADER + trig_events(3) if ".trig" in name else nquads([(1, 1), (2, 2), (3, 3)])
    path = write(tmp_path / name, text)
    assert [e.time for e in read_stream_file(path, S)] == [1, 2, 3]


def test_unknown_extension_and_missing_file(tmp_path):
    with pytest.raises(ValueError):
        read_stream_file(str(tmp_path / "s.ttl"), S)
    with pytest.raises(FileNotFoundError):
        read_stream_file(str(tmp_path / "missing.trig"), S)


# ---- several files, merging -------------------------------------------------

def test_glob_of_two_files_merged_by_time(tmp_path):
    write(tmp_path / "a.trig", HEADER + trig_events(3, start=1, step=2, label="a"))   # 1 3 5
    write(tmp_path / "b.trig", HEADER + trig_events(3, start=2, step=2, label="b")    # 2 4 6
          + ':b9 prov:generatedAtTime "5"^^xsd:integer .\n:b9 { :y :p :q . }\n')     # out of order in b
    write(tmp_path / "c.trig", HEADER + ':c1 prov:generatedAtTime "3"^^xsd:integer .\n'
          ":c1 { :z :p :q . }\n")                                                   # 3 again: duplicate
    items = list(open_stream(str(tmp_path / "*.trig"), S))
    events, errors = split(items)
    assert [(e.name.value.removeprefix(EX), e.time) for e in events] == [
        ("a1", 1), ("b1", 2), ("a2", 3), ("b2", 4), ("a3", 5), ("b3", 6)]
    messages = sorted(e.message.split(":")[0] for e in errors)
    assert messages == ["duplicate timestamp 3 on stream <http", "out of order"]
    # a directory of stream files reads the same way
    assert [e.time for e in open_stream(str(tmp_path), S) if isinstance(e, Event)] == [1, 2, 3, 4, 5, 6]


def test_open_stream_single_file_and_no_match(tmp_path):
    path = write(tmp_path / "a.trig", HEADER + trig_events(2))
    assert [e.time for e in open_stream(path, S)] == [1, 2]
    with pytest.raises(FileNotFoundError):
        open_stream(str(tmp_path / "*.nq"), S)


def ev(stream, time, name):
    return Event(stream=stream, time=time, triples=(), name=ox.NamedNode(EX + name))


def test_merge_streams_order_and_ties():
    a = [ev("A", 1, "a1"), ev("A", 3, "a3"), ev("A", 3, "a3b"), ev("A", 7, "a7")]
    b = [ev("B", 0, "b0"), ev("B", 3, "b3"), ev("B", 8, "b8")]
    c = [ev("C", 3, "c3")]
    merged = [e.name.value.removeprefix(EX) for e in merge_streams([iter(a), iter(b), iter(c)])]
    assert merged == ["b0", "a1", "a3", "a3b", "b3", "c3", "a7", "b8"]


def test_merge_streams_passes_errors_at_once():
    error = EventError("bad", "f:1")
    pulled = []

    def late():
        pulled.append("b5")
        yield ev("B", 5, "b5")
        pulled.append("error")
        yield error
        pulled.append("b9")
        yield ev("B", 9, "b9")

    merged = merge_streams([iter([ev("A", 1, "a1"), ev("A", 6, "a6"), ev("A", 7, "a7")]), late()])
    out = [x if isinstance(x, EventError) else x.name.value.removeprefix(EX) for x in merged]
    # The error comes out as soon as it is read (once b5 was taken), and the
    # events keep their order around it.
    assert out == ["a1", "b5", error, "a6", "a7", "b9"]


_SOURCES = st.lists(st.lists(st.one_of(st.integers(min_value=0, max_value=6), st.none()), max_size=8),
                    min_size=1, max_size=4)


@given(_SOURCES)
def test_merge_streams_is_a_stable_sort_that_counts_what_it_passes_on(times_per_source):
    """Events come out by time, ties in the order of the sources, then of each
    source; an error (None here) comes out with the events read before it; and
    ``delivered`` counts, per source, every item passed on."""
    sources, expected_events = [], []
    for i, times in enumerate(times_per_source):
        items, clock = [], 0
        for j, step in enumerate(times):
            if step is None:
                items.append(EventError(f"bad {i}.{j}", f"s{i}:{j}"))
            else:
                clock += step
                items.append(ev(f"S{i}", clock, f"s{i}e{j}"))
                expected_events.append((clock, i, j))
        sources.append(items)
    delivered = [0] * len(sources)
    merged = list(merge_streams([iter(items) for items in sources], delivered))
    events = [x for x in merged if not isinstance(x, EventError)]
    assert [e.name.value.removeprefix(EX) for e in events] == \
        [f"s{i}e{j}" for _, i, j in sorted(expected_events)]
    assert sorted(map(id, merged)) == sorted(id(x) for items in sources for x in items)
    assert delivered == [len(items) for items in sources]
    for items in sources:       # each source's own order is kept, errors included
        mine = {id(x) for x in items}
        assert [x for x in merged if id(x) in mine] == items


# ---- reference-implementation manifests ------------------------------------

NT = (
    "# event 1\n"
    f"<{EX}c1> <{EX}id> \"1\" .\n"
    f"<{EX}c1> <{EX}amount> \"2.5\" .\n"
    "# event 2\n"
    f"<{EX}c2> <{EX}id> \"2\" .\n"
    f"<{EX}c2> <{EX}amount> broken .\n"       # line 6: rejected, does not count
    f"<{EX}c2> <{EX}amount> \"7\" .\n"
    f"<{EX}c3> <{EX}id> \"3\" .\n"            # line 8: left over at the end
)


def test_read_ntriples_chunks(tmp_path):
    path = write(tmp_path / "data.nt", NT)
    items = list(read_ntriples_chunks(path, S, 2))
    assert [type(i).__name__ for i in items] == ["Event", "EventError", "Event", "EventError"]
    e1, bad, e2, rest = items
    assert (e1.time, e2.time) == (1, 2) and not e1.is_datetime
    assert e1.stream == S and e1.position == f"{path}:2" and e2.position == f"{path}:5"
    assert {t.object.value for t in e2.triples} == {"2", "7"}
    assert bad.position == f"{path}:6"
    assert rest.position == f"{path}:8" and "incomplete event" in rest.message


def test_read_manifest(tmp_path, monkeypatch):
    (tmp_path / "tests" / "kleene").mkdir(parents=True)
    write(tmp_path / "tests" / "kleene" / "beside.nt", NT)
    write(tmp_path / "tests" / "kleene" / "cwd.n3", NT)
    manifest = write(tmp_path / "tests" / "kleene" / "streams.txt", (
        "# streams\n\n"
        "<http://example.org/main> <./beside.nt> 2\n"
        "<http://example.org/other> <./kleene/cwd.n3> 3   # relative to the current directory\n"
    ))
    monkeypatch.chdir(tmp_path / "tests")
    assert read_manifest(manifest) == [
        ("http://example.org/main", str(tmp_path / "tests" / "kleene" / "beside.nt"), 2),
        ("http://example.org/other", "./kleene/cwd.n3", 3),
    ]


@pytest.mark.parametrize("line", ["<http://s> ./x.nt 2", "<http://s> <x.nt>", "<http://s> <x.nt> 0",
                                  "<http://s> <missing.nt> 2", "<http://s> <x.nt> 1000001"])
def test_read_manifest_bad_line(tmp_path, line):
    write(tmp_path / "x.nt", NT)
    manifest = write(tmp_path / "m.txt", "# ok\n" + line + "\n")
    with pytest.raises(EventError) as info:
        read_manifest(manifest)
    assert info.value.position == f"{manifest}:2"


def test_a_manifest_event_is_no_larger_than_the_event_limit(tmp_path):
    """An event of N triples is held whole while read: N = 10^20 made the whole file
    one event (2 million lines: 0.7 GB) before it was rejected as incomplete."""
    write(tmp_path / "x.nt", NT)
    manifest = write(tmp_path / "m.txt", "<http://s> <x.nt> 99999999999999999999\n")
    with pytest.raises(EventError, match=r"triples per event must be at most 1,000,000 \(--max-event-triples\), "
                                         "not 99,999,999,999,999,999,999"):
        read_manifest(manifest)


def test_read_manifest_streams(tmp_path):
    write(tmp_path / "a.nt", "".join(f"<{EX}a{i}> <{EX}p> \"{i}\" .\n" for i in range(4)))
    write(tmp_path / "b.nt", "".join(f"<{EX}b{i}> <{EX}p> \"{i}\" .\n" for i in range(2)))
    manifest = write(tmp_path / "m.txt", "<http://s1> <a.nt> 1\n<http://s2> <b.nt> 1\n<http://s1> <b.nt> 2\n")
    streams = read_manifest_streams(manifest)
    assert set(streams) == {"http://s1", "http://s2"}
    s1 = list(streams["http://s1"])
    # a.nt gives 4 events at 1..4, b.nt one at 1: merged by time, renumbered
    assert [e.time for e in s1] == [1, 2, 3, 4, 5]
    assert [e.triples[0].subject.value.removeprefix(EX) for e in s1] == ["a0", "b0", "a1", "a2", "a3"]
    assert [e.time for e in streams["http://s2"]] == [1, 2]


# ---- the shared acceptance data --------------------------------------------

WEATHER = Path(__file__).resolve().parents[2] / "shared/acceptance/cases/paper-ex6-skip-till-any/weather.trig"
WEATHER_ALT = Path("/work/shared/acceptance/cases/paper-ex6-skip-till-any/weather.trig")


def test_paper_example_weather_stream():
    path = WEATHER if WEATHER.exists() else WEATHER_ALT
    if not path.exists():
        pytest.skip("shared acceptance data not present")
    items = list(read_stream_file(str(path), "http://example.org/weather"))
    assert all(isinstance(i, Event) for i in items)
    assert [e.time for e in items] == [15, 20, 25]
    assert [len(e.triples) for e in items] == [2, 2, 2]
