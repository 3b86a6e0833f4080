"""``spaseq kb load``: dumps of every kind in-process and with ``--spark``, which must give
the same store content; rejects with file and line; duplicates; ``--only-for``; errors."""

from __future__ import annotations

import bz2
import gzip
import os
import random

import pyoxigraph as ox
import pytest

from spaseq_plugin.cli import commands as cli
from spaseq_plugin.stores import loading
from spaseq_plugin.streams import reader
from spaseq_plugin.stores.loading import KeepFilter, blank_node_prefix, expand_inputs, keep_filter_for, parse_lines

EX = "http://example/"
MASTER = "local[2]"          # the spark fixture's: the CLI reuses that session


def nq(s: str, p: str, o: str, g: str | None = None) -> str:
    graph = f" <{EX}{g}>" if g else ""
    term = (lambda t: t if t.startswith(("_:", '"')) else f"<{EX}{t}>")
    return f"{term(s)} {term(p)} {term(o)}{graph} .\n"


@pytest.fixture
def dumps(tmp_path):
    """Dumps in every input form, with blank nodes (one label in several files), duplicates
    (in a file and across files) and bad lines (in both halves of a file, so in both of the
    Spark partitions it is split into)."""
    root = tmp_path / "dumps"
    root.mkdir()
    lines = [nq(f"s{i}", "p", f"o{i}", "g1") for i in range(40)]
    lines[5] = '<http://example/s5> <http://example/p> "unterminated <http://example/g1> .\n'
    lines[30] = "<http://example/s30> <http://example/p> <http://example/o30> <http://example/g1>\n"
    lines[31] = "# a comment, then a blank line\n"
    lines[32] = "\n"
    lines += [nq("_:b", "q", "_:c", "g2"), nq("s1", "p", "o1", "g1")]        # a duplicate
    (root / "plain.nq").write_text("".join(lines))
    with gzip.open(root / "zipped.nq.gz", "wt") as f:
        f.write(nq("_:b", "q", "o", "g2") + nq("s2", "p", "o2", "g1") + "garbage\n" + nq("t", "r", '"x"', "g3"))
    with bz2.open(root / "packed.nt.bz2", "wt") as f:
        f.write(nq("_:b", "r", "_:b") + nq("u", "p", "v"))
    folder = root / "folder"
    (folder / "deeper").mkdir(parents=True)
    (folder / "one.nt").write_text(nq("w", "p", "x"))
    (folder / "deeper" / "two.trig").write_text(
        f"@prefix : <{EX}> .\n:g3 {{ :t :r \"x\" . _:b :q :z . }}\n:g1 {{ :s2 :p :o2 . }}\n")
    (folder / "_SUCCESS").write_text("")
    (folder / ".hidden.nt").write_text("not RDF at all\n")
    (folder / "notes.txt").write_text("not RDF either\n")
    parts = root / "parts"
    parts.mkdir()
    for n in range(3):
        (parts / f"part-{n}.nq").write_text(nq(f"k{n}", "p", f"v{n}", "g4") + nq("k", "p", "v", "g4"))
    return [str(root / "plain.nq"), str(root / "zipped.nq.gz"), str(root / "packed.nt.bz2"), str(folder),
            str(parts / "*.nq")]


def load(capsys, *argv: str) -> tuple[int, str]:
    code = cli.main(["kb", "load", *argv])
    return code, capsys.readouterr().err


def quads_of(spec: str) -> set[ox.Quad]:
    """The quads of a store on disk, every graph."""
    scheme, location = spec.split(":", 1)
    if scheme == "rdflib":
        name, _, location = location.partition(":")
        if name != "Oxigraph":
            from rdflib import Dataset
            from rdflib.graph import DATASET_DEFAULT_GRAPH_ID

            from spaseq_plugin.rdflib_terms import rdflib_to_ox
            dataset = Dataset(store=name)
            dataset.open(location, create=False)
            try:
                return {ox.Quad(rdflib_to_ox(s), rdflib_to_ox(p), rdflib_to_ox(o),
                                ox.DefaultGraph() if g == DATASET_DEFAULT_GRAPH_ID else rdflib_to_ox(g))
                        for s, p, o, g in dataset.quads((None, None, None, None))}
            finally:
                dataset.close()
    return set(ox.Store.read_only(location))


# -- the in-process loader -------------------------------------------------------------------

def test_in_process_load_of_every_input_form(tmp_path, dumps, capsys, monkeypatch):
    monkeypatch.setattr(loading, "CHUNK_BYTES", 64)     # many chunks: lines cut at chunk ends
    store = tmp_path / "store"
    code, err = load(capsys, *dumps, "--into", f"oxigraph:{store}")
    assert code == 0, err
    quads = quads_of(f"oxigraph:{store}")
    b_plain = ox.BlankNode(blank_node_prefix(dumps[0]) + "b")
    b_zipped = ox.BlankNode(blank_node_prefix(dumps[1]) + "b")
    assert ox.Quad(b_plain, ox.NamedNode(EX + "q"), ox.BlankNode(blank_node_prefix(dumps[0]) + "c"),
                   ox.NamedNode(EX + "g2")) in quads
    assert ox.Quad(b_zipped, ox.NamedNode(EX + "q"), ox.NamedNode(EX + "o"), ox.NamedNode(EX + "g2")) in quads
    assert ox.Quad(ox.NamedNode(EX + "u"), ox.NamedNode(EX + "p"), ox.NamedNode(EX + "v")) in quads
    assert ox.Quad(ox.NamedNode(EX + "w"), ox.NamedNode(EX + "p"), ox.NamedNode(EX + "x")) in quads
    # 36 + 2 good lines of plain.nq, 3 of zipped, 2 + 1 of the N-Triples, 3 of the TriG, 6 of the parts
    assert "47 new triples from 8 files" in err and "53 read" in err
    assert "3 bad lines rejected" in err and "6 duplicates" in err and "47 new\n" in err
    assert len(quads) == 47
    assert "time: read+parse" in err and "Traceback" not in err
    rejects = (tmp_path / "store.rejects").read_text().splitlines()
    assert rejects == [
        f'{dumps[0]}:6:40: Unexpected end of file\t<{EX}s5> <{EX}p> "unterminated <{EX}g1> .',
        f"{dumps[0]}:31:81: Triples must be followed by a dot\t"
        "<http://example/s30> <http://example/p> <http://example/o30> <http://example/g1>",
        f"{dumps[1]}:3:1: The subject of a triple must be an IRI or a blank node\tgarbage",
    ]
    # loading again adds nothing and names the blank nodes alike
    code, err = load(capsys, *dumps, "--into", f"oxigraph:{store}", "--rejects", str(tmp_path / "r.txt"), "-q")
    assert code == 0 and err == "" and quads_of(f"oxigraph:{store}") == quads
    assert (tmp_path / "r.txt").read_text().splitlines() == rejects


def test_parse_lines_resumes_after_each_bad_line():
    rng = random.Random(7)
    bad_kinds = ['<http://a> <http://b> "open', "<http://a> <http://b> <http://c>", "junk",
                 "<a b> <http://b> <http://c> .", '<http://a> <http://b> "x"@ .',
                 "<http://a> <http://b> <http://c> . <http://d>"]
    lines = []
    for i in range(3000):
        roll = rng.random()
        lines.append(rng.choice(bad_kinds) if roll < 0.05 else "" if roll < 0.07 else "# note" if roll < 0.09
                     else f'<http://s/{i}> <http://p> "{i}\\n" .')
    expected_quads, expected_bad = [], []
    for number, line in enumerate(lines, 1):
        try:
            expected_quads += list(ox.parse(line, ox.RdfFormat.N_TRIPLES))
        except SyntaxError:
            expected_bad.append(number)
    for form in (lines, [line.encode() for line in lines]):
        quads, rejects = parse_lines(form, ox.RdfFormat.N_TRIPLES, 1)
        assert quads == expected_quads
        assert [r.line for r in rejects] == expected_bad and all(r.text == lines[r.line - 1] for r in rejects)
    # numbering starts where the chunk does
    quads, rejects = parse_lines(lines[100:200], ox.RdfFormat.N_TRIPLES, 101)
    assert [r.line for r in rejects] == [n for n in expected_bad if 101 <= n <= 200]


def test_expand_inputs(tmp_path, dumps):
    files = expand_inputs(dumps + [dumps[0]])
    assert [f.rsplit("/", 1)[1] for f in files] == [
        "plain.nq", "zipped.nq.gz", "packed.nt.bz2", "one.nt", "two.trig", "part-0.nq", "part-1.nq", "part-2.nq"]


def test_in_process_and_rdflib_berkeleydb_agree(tmp_path, dumps, capsys):
    pytest.importorskip("berkeleydb")
    assert load(capsys, *dumps, "--into", f"oxigraph:{tmp_path / 'ox'}")[0] == 0
    code, err = load(capsys, *dumps, "--into", f"rdflib:BerkeleyDB:{tmp_path / 'bdb'}")
    assert code == 0, err
    assert "6 duplicates" in err and "47 new\n" in err
    assert (tmp_path / "bdb.rejects").read_text() == (tmp_path / "ox.rejects").read_text()
    assert quads_of(f"rdflib:BerkeleyDB:{tmp_path / 'bdb'}") == quads_of(f"oxigraph:{tmp_path / 'ox'}")


# -- --only-for ------------------------------------------------------------------------------

ONLY_FOR = f"""PREFIX : <{EX}>
SELECT * WITHIN 10 SECONDS FROM STREAM S <http://stream>
WHERE {{
  SEQ (A ; B)
  DEFINE GPM A ON S {{ ?x :kind ?k . GRAPH :g1 {{ ?x :p ?o }} GRAPH ?g {{ ?o :r/:s ?z }} }}
  DEFINE GPM B ON S {{ ?y :kind ?k . FILTER EXISTS {{ GRAPH :g4 {{ ?y ?anything ?w }} }} }}
}}
"""


def test_only_for_keeps_what_graph_patterns_can_match(tmp_path, dumps, capsys):
    (tmp_path / "q.rq").write_text(ONLY_FOR)
    keep = keep_filter_for([str(tmp_path / "q.rq")])
    assert keep == KeepFilter(graphs=frozenset({EX + "g4"}), predicates=frozenset({EX + "r", EX + "s"}),
                              graph_predicates=frozenset({(EX + "g1", EX + "p")}))
    store = tmp_path / "store"
    code, err = load(capsys, *dumps, "--into", f"oxigraph:{store}", "--only-for", str(tmp_path / "q.rq"))
    assert code == 0, err
    assert f"--only-for keeps all of <{EX}g4>; <{EX}g1>: <{EX}p>; any graph: <{EX}r>, <{EX}s>" in err
    quads = quads_of(f"oxigraph:{store}")
    assert {q.graph_name.value for q in quads} == {EX + "g1", EX + "g3", EX + "g4"}
    assert {q.predicate.value for q in quads} == {EX + "p", EX + "r"}
    assert "53 read" in err and "47 kept by --only-for" in err
    code, err = load(capsys, dumps[0], "--into", f"oxigraph:{tmp_path / 's2'}", "--only-for",
                     str(tmp_path / "missing.rq"))
    assert code == 2 and "cannot read query" in err
    (tmp_path / "bad.rq").write_text("SELECT nonsense")
    code, err = load(capsys, dumps[0], "--into", f"oxigraph:{tmp_path / 's2'}", "--only-for",
                     str(tmp_path / "bad.rq"))
    assert code == 2 and f"--only-for {tmp_path / 'bad.rq'}: line 1" in err


# -- errors ----------------------------------------------------------------------------------

def test_load_errors(tmp_path, dumps, capsys):
    store = f"oxigraph:{tmp_path / 'store'}"
    for args, message in [
        ([str(tmp_path / "nope.nt")], "nope.nt: no such file"),
        ([str(tmp_path / "*.nq")], "matches no RDF file"),
        ([str(tmp_path / "dumps" / "parts" / "*.nq"), "--graph", "http://g"], "part-0.nq names its own graphs"),
    ]:
        code, err = load(capsys, *args, "--into", store)
        assert code == 2 and message in err and "Traceback" not in err, err
    (tmp_path / "bad.ttl").write_text(f"@prefix : <{EX}> .\n:a :b :c .\n:a :b \"unterminated .\n")
    code, err = load(capsys, str(tmp_path / "bad.ttl"), "--into", store)
    assert code == 2 and f"{tmp_path / 'bad.ttl'}:3:7: Unexpected end of file" in err
    held = ox.Store(str(tmp_path / "held"))
    try:
        code, err = load(capsys, dumps[0], "--into", f"oxigraph:{tmp_path / 'held'}")
        assert code == 2 and "is open for writing in another process" in err
    finally:
        del held


def test_rejects_that_name_a_dump_are_refused_before_it_is_read(tmp_path, dumps, capsys, monkeypatch):
    """Opened for writing at the first bad line, the rejects file emptied the dump being read."""
    monkeypatch.chdir(tmp_path)
    store = f"oxigraph:{tmp_path / 'store'}"
    plain = tmp_path / "dumps" / "plain.nq"
    before = plain.read_bytes()
    for args, said in [([str(plain), "--rejects", str(plain)], f"--rejects {plain}: that is also the dump {plain}"),
                       ([str(tmp_path / "dumps"), "--rejects", "dumps/plain.nq"], "--rejects dumps/plain.nq: "
                                                                                    f"that is also the dump {plain}")]:
        code, err = load(capsys, *args, "--into", store)
        assert code == 2 and f"spaseq: {said}: give another file" in err, err
    assert plain.read_bytes() == before and not (tmp_path / "store").exists()


@pytest.mark.parametrize("graph, said", [
    ("", "--graph : give the IRI of a graph (without --graph, triples go to the default graph)"),  # (was: it did)
    ("<>", "--graph <>: give the IRI of a graph (without --graph, triples go to the default graph)"),
    ("not an iri", "--graph not an iri: Invalid IRI code point ' '"),       # (did not name --graph)
    ("relative", "--graph relative: No scheme found in an absolute IRI"),
])
def test_a_graph_that_is_no_iri_is_a_usage_error_naming_it(tmp_path, capsys, graph, said):
    (tmp_path / "kb.nt").write_text('<http://e/a> <http://e/p> "1" .\n')
    code, err = load(capsys, str(tmp_path / "kb.nt"), "--into", f"oxigraph:{tmp_path / 'store'}", "--graph", graph)
    assert code == 2 and err.endswith(f"spaseq: {said}\n"), err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_rejects_file_that_cannot_be_written_is_named(tmp_path, capsys):
    (tmp_path / "kb.nt").write_text('<http://e/a> <http://e/p> "1" .\nbad line\n')
    code, err = load(capsys, str(tmp_path / "kb.nt"), "--into", f"oxigraph:{tmp_path / 'store'}",
                     "--rejects", "/dev/full")
    assert code == 1 and "spaseq: error: cannot write the rejects file /dev/full: No space left on device" in err, err


def test_spark_that_cannot_start_is_a_clear_error(tmp_path, dumps, capsys, monkeypatch):
    from spaseq_plugin.errors import SpaseqError
    from spaseq_plugin.spark import load as spark_load

    def no_spark(master):
        raise SpaseqError(f"cannot start Spark (master {master}): no Java")
    monkeypatch.setattr(spark_load, "spark_session", no_spark)
    code, err = load(capsys, dumps[0], "--into", f"oxigraph:{tmp_path / 's'}", "--spark", "--spark-master", "x")
    assert code == 2 and "spaseq: cannot start Spark (master x): no Java" in err


# -- with Spark ------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["oxigraph", "rdflib:Oxigraph"])
def test_spark_and_in_process_give_the_same_store(spark, tmp_path, dumps, capsys, target):
    code, err = load(capsys, *dumps, "--into", f"oxigraph:{tmp_path / 'here'}")
    assert code == 0, err
    code, err = load(capsys, *dumps, "--into", f"{target}:{tmp_path / 'spark'}", "--spark",
                     "--spark-master", MASTER)
    assert code == 0, err
    assert quads_of(f"oxigraph:{tmp_path / 'spark'}") == quads_of(f"oxigraph:{tmp_path / 'here'}")
    assert (tmp_path / "spark.rejects").read_text() == (tmp_path / "here.rejects").read_text()
    assert "47 new triples from 8 files" in err and "53 read" in err
    assert "3 bad lines rejected" in err and "6 duplicates" in err and "47 new\n" in err
    for stage in ("read+parse", "dedupe+write parts", "bulk load"):
        assert f"{stage} " in err
    assert not list(tmp_path.glob("spaseq-load-*")), "the work directory is removed"


def test_spark_only_for_and_whole_file_errors(spark, tmp_path, dumps, capsys):
    (tmp_path / "q.rq").write_text(ONLY_FOR)
    for where, extra in (("here", []), ("spark", ["--spark", "--spark-master", MASTER])):
        code, err = load(capsys, *dumps, "--into", f"oxigraph:{tmp_path / where}", "--only-for",
                         str(tmp_path / "q.rq"), *extra)
        assert code == 0 and "47 kept by --only-for" in err, err
    assert quads_of(f"oxigraph:{tmp_path / 'spark'}") == quads_of(f"oxigraph:{tmp_path / 'here'}")
    (tmp_path / "bad.ttl").write_text(f"@prefix : <{EX}> .\n:a :b :c .\n:a :b \"unterminated .\n")
    code, err = load(capsys, dumps[0], str(tmp_path / "bad.ttl"), "--into", f"oxigraph:{tmp_path / 'bad'}",
                     "--spark", "--spark-master", MASTER)
    assert code == 2 and f"{tmp_path / 'bad.ttl'}:3:7: Unexpected end of file (nothing was loaded)" in err
    assert quads_of(f"oxigraph:{tmp_path / 'bad'}") == set()


@pytest.mark.parametrize("name", ["cut.nt.gz", "cut.nq.bz2"])
def test_spark_names_a_compressed_file_cut_short_as_the_load_without_it_does(spark, tmp_path, capsys, name):
    # Spark's own reading failed the job with "An error occurred while calling o77.text."
    path = tmp_path / name
    data = "".join(nq(f"s{i}", "p", "o", "g" if name.endswith(".nq.bz2") else None) for i in range(300)).encode()
    packed = gzip.compress(data) if name.endswith(".gz") else bz2.compress(data)
    path.write_bytes(packed[:len(packed) * 2 // 3])
    said = []
    for where, extra in (("here", []), ("spark", ["--spark", "--spark-master", MASTER])):
        code, err = load(capsys, str(path), "--into", f"oxigraph:{tmp_path / where}", *extra)
        assert code == 2, err
        said.append(err.strip().splitlines()[-1])
    assert said[0] == said[1] and f"{path}: cannot read it: " in said[1], said


def test_a_failed_spark_job_is_told_by_its_deepest_java_cause():
    from spaseq_plugin.spark.load import _failure
    text = ("An error occurred while calling o77.text.\n: org.apache.spark.SparkException: Job aborted.\n"
            "\tat org.apache...\nCaused by: java.io.EOFException: Unexpected end of input stream\n\tat ...")
    assert _failure(Exception(text)) == "java.io.EOFException: Unexpected end of input stream"
    assert _failure(Exception(text + "\n  ValueError: a Python one")) == "ValueError: a Python one"


# -- a store that cannot commit -----------------------------------------------------------

from rdflib.plugins.stores.memory import Memory      # noqa: E402


class FailingCommitStore(Memory):
    """An rdflib store plugin whose disk is full: it takes quads, and its commit fails."""

    def open(self, configuration, create=False):
        return None

    def commit(self):
        raise OSError(28, "No space left on device")


def test_a_failing_commit_is_reported(tmp_path, capsys):
    from rdflib import plugin
    from rdflib.store import Store
    plugin.register("FailingCommit", Store, __name__, "FailingCommitStore")
    dump = tmp_path / "kb.nq"
    dump.write_text(nq("s", "p", "o", "g"))
    code = cli.main(["kb", "load", str(dump), "--into", f"rdflib:FailingCommit:{tmp_path / 'store'}"])
    err = capsys.readouterr().err
    assert code == 1
    assert "did not commit" in err and "No space left on device" in err
    assert "spaseq: loaded" not in err and "Traceback" not in err


@pytest.mark.parametrize("last_newline", [True, False])
def test_a_line_too_long_is_rejected_as_it_streams_by(tmp_path, monkeypatch, last_newline):
    """A gzip file of 600 KB held an N-Triples line of 600 MB: read whole, it took the
    process past 2 GB.  Now a line past --max-statement is rejected at its number, the
    rest of it skipped a chunk at a time, and the lines after it are loaded."""
    monkeypatch.setattr(reader, "MAX_STATEMENT_BYTES", 1000)
    monkeypatch.setattr(loading, "CHUNK_BYTES", 300)
    path = tmp_path / "kb.nt.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"<http://a> <http://p> <http://b> .\n" + b"a" * 5000 + b"\n<http://a> <http://p> <http://c> .\n"
                + b"<http://a> <http://p> " + b"b" * 3000 + (b"\n" if last_newline else b""))
    rejects = []
    quads = loading.RdfFileReader(str(path), on_reject=rejects.append)
    assert [str(q.object) for q in quads] == ["<http://b>", "<http://c>"]
    said = "a line longer than 1,000 bytes (--max-statement), skipped"
    assert [(r.line, r.message) for r in rejects] == [(2, said), (4, said)]


BIG = '"' + "x" * (17 << 20) + '"'      # past pyoxigraph's 16 MiB buffer for one term


def test_a_term_too_large_for_the_parser_is_one_rejected_line(tmp_path, capsys):
    """An N-Triples line of one 17 MiB literal is within --max-statement (32 MiB), but
    pyoxigraph raises MemoryError on it: 'kb load' ended with 'out of memory', telling
    the user to lower --max-runs.  Now the line is rejected at its number and the rest
    loaded; a Turtle file, read whole, is refused saying why; so is a --kb file."""
    dump = tmp_path / "kb.nt"
    dump.write_text(f"<{EX}a> <{EX}p> <{EX}b> .\n<{EX}a> <{EX}p> {BIG} .\n<{EX}a> <{EX}p> <{EX}c> .\n")
    assert cli.main(["kb", "load", str(dump), "--into", f"oxigraph:{tmp_path / 'store'}"]) == 0
    err = capsys.readouterr().err
    assert "1 bad line rejected" in err and "out of memory" not in err, err
    [reject] = (tmp_path / "store.rejects").read_text().splitlines()
    assert reject.startswith(f"{dump}:2: a term (IRI or literal) is longer than 16 MiB, the most the RDF parser "
                             f"takes\t<{EX}a> <{EX}p> \"xxx") and len(reject) < 1000
    store = ox.Store.read_only(str(tmp_path / "store"))
    assert sorted(str(q.object) for q in store) == [f"<{EX}b>", f"<{EX}c>"]
    turtle = tmp_path / "kb.ttl"
    turtle.write_text(dump.read_text())
    assert cli.main(["kb", "load", str(turtle), "--into", f"oxigraph:{tmp_path / 'other'}"]) == 2
    assert "kb.ttl: a term (IRI or literal) is longer than 16 MiB" in capsys.readouterr().err
    query = tmp_path / "q.rq"
    query.write_text(f"SELECT * FROM STREAM S <{EX}s> WHERE {{ SEQ (A) DEFINE GPM A ON S {{ ?x <{EX}p> ?y "
                     f"GRAPH <{EX}kb> {{ ?y <{EX}p> ?z }} }} }}")
    (tmp_path / "s.trig").write_text("")
    assert cli.main(["run", str(query), "--stream", f"S={tmp_path / 's.trig'}", "--kb", f"{EX}kb={dump}"]) == 2
    err = capsys.readouterr().err
    assert f"cannot load KB file {dump}: a term (IRI or literal) is longer than 16 MiB" in err, err


def test_running_out_of_memory_in_kb_load_does_not_name_the_flags_of_run(tmp_path, capsys, monkeypatch):
    """'kb load' said to lower --max-state-memory or --max-runs, which it does not have."""
    from spaseq_plugin.cli import kb_commands

    def out_of_memory(spec):
        raise MemoryError
    monkeypatch.setattr(kb_commands, "open_loader", out_of_memory)
    dump = tmp_path / "kb.nt"
    dump.write_text(nq("s", "p", "o"))
    assert cli.main(["kb", "load", str(dump), "--into", f"oxigraph:{tmp_path / 'store'}"]) == 3
    assert capsys.readouterr().err.splitlines()[-1] == \
        "spaseq: limit reached: out of memory: give the process more memory"
