"""Compiling a long SEQ takes time and memory linear in its atoms, and the
query-size limits refuse what is too large before the costly part."""

import tracemalloc

import pytest

from spaseq_plugin import Engine, LimitError, QueryError, QueryLimits, compile_query
from spaseq_plugin.cli.commands import main
from spaseq_plugin.language import compiler, parser
from spaseq_plugin.language.limits import MAX_OPTIONAL_RUN


def query(seq: str, gpms: dict[str, str]) -> str:
    defs = "\n".join(f"DEFINE GPM {name} ON S {{ {body} }}" for name, body in gpms.items())
    return ("PREFIX : <http://example/>\nSELECT * WITHIN 10 SECONDS FROM STREAM S <http://example.org/s>\n"
            f"WHERE {{ SEQ ({seq})\n{defs}\n}}\n")


def repeated(n: int) -> str:
    """A SEQ of ``n`` atoms, all one GPM (cheap to compile: one GPM to read)."""
    return query(" ; ".join(["A"] * n), {"A": '?x :kind "a"'})


def distinct(n: int) -> str:
    """A SEQ of ``n`` GPMs, each binding a variable of its own."""
    return query(" ; ".join(f"G{i}" for i in range(n)), {f"G{i}": f'?x{i} :kind "a"' for i in range(n)})


def label_chars(text: str) -> int:
    return sum(len(state.label) for state in compile_query(text).automaton.states)


def test_state_labels_grow_linearly_with_the_atoms():
    # Each label named every atom before its state: 5,000 atoms made 12.5 million names.
    small, large = label_chars(repeated(5000)), label_chars(repeated(10000))
    assert large <= 2.01 * small, (small, large)


def test_state_labels_name_the_last_atoms():
    states = compile_query(query("A ; B+ ; C", {"A": "?a :p ?x", "B": "?b :p ?x", "C": "?c :p ?x"})
                           ).automaton.states
    assert [s.label for s in states] == ["start", "A", "A B+", "A B+ C"]
    names = {f"G{i}": f"?x{i} :p ?y" for i in range(12)}
    long = compile_query(query(" ; ".join(names), names)).automaton
    assert long.states[-1].label == "... G4 G5 G6 G7 G8 G9 G10 G11"
    assert "x12 [... G4 G5 G6 G7 G8 G9 G10 G11] accepting" in long.describe()


def engine_peak_bytes(text: str) -> int:
    compiled = compile_query(text)
    tracemalloc.start()
    try:
        Engine(compiled)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_making_the_runtime_takes_memory_linear_in_the_atoms():
    # The probe planning kept every variable bound so far for each state: quadratic.
    small, large = engine_peak_bytes(distinct(600)), engine_peak_bytes(distinct(1200))
    assert large <= 2.5 * small, (small, large)


def test_a_seq_naming_more_gpms_than_max_atoms_is_refused_before_any_gpm_is_read(monkeypatch):
    def no_reading(*args):
        raise AssertionError("a GPM was read")

    monkeypatch.setattr(compiler, "analyse_gpm", no_reading)
    text = query("A ; (A | A) ; A", {"A": "?a :p ?x"})
    with pytest.raises(QueryError, match="more than 3 GPMs .*--max-atoms") as error:
        compile_query(text, QueryLimits(max_atoms=3))
    assert (error.value.line, error.value.column) == (3, 28)    # the fourth name
    with pytest.raises(ValueError, match="max_atoms"):
        QueryLimits(max_atoms=0)


def no_grammar(monkeypatch):
    """The SPASEQ grammar fails the test if it is asked to read a query."""
    def no_parsing():
        raise AssertionError("the grammar read the query")
    monkeypatch.setattr(parser, "_lark", no_parsing)


@pytest.mark.parametrize("seq, gpms, at", [
    ("A ; (A | A) ; A", {"A": "?a :p ?x"}, (3, 28)),                           # the fourth name
    ("A : A:A:A", {"A": "?a :p ?x"}, (3, 22)),                                 # ':' separates names
    ("A", {f"G{i}": "?a :p ?x" for i in range(4)}, (7, 1)),                    # the fourth DEFINE
])
def test_a_query_with_too_many_gpms_is_refused_before_the_grammar_reads_it(monkeypatch, seq, gpms, at):
    # The grammar reads about 200 KB a second: 1.9 MB of SEQ names took 9.8 s and 550 MB
    # to be refused, 7.4 MB of GPM definitions 31 s.
    no_grammar(monkeypatch)
    with pytest.raises(QueryError, match="more than 3 GPMs.*--max-atoms") as error:
        compile_query(query(seq, gpms), QueryLimits(max_atoms=3))
    assert (error.value.line, error.value.column) == at


def test_a_gpm_body_nested_too_deeply_is_refused_before_the_grammar_reads_it(monkeypatch):
    # (10 MB of triple patterns in one body took 28 s to be refused)
    body = " . ".join(f"?s :p ?o{i}" for i in range(200))
    no_grammar(monkeypatch)
    with pytest.raises(QueryError, match="GPM B nests too deeply: 101 levels") as error:
        compile_query(query("A ; B", {"A": "?a :p ?x", "B": body}))
    assert (error.value.line, error.value.column) == (5, 1309)     # (where the compiler said it)


def test_names_like_the_keywords_are_not_taken_for_them():
    text = ("PREFIX : <http://example/>\nSELECT * WITHIN 10 SECONDS FROM STREAM seq <http://example.org/s>\n"
            "FROM STREAM define <http://example.org/t>\nPARTITION BY (?a)\n"
            "WHERE { SEQ (A ; B)\nDEFINE GPM A ON seq { ?a :p ?x }\nDEFINE GPM B ON define { ?a :q ?y } }\n")
    assert len(compile_query(text, QueryLimits(max_atoms=2)).automaton.states) > 1


def test_more_optional_atoms_in_a_row_than_the_limit_are_refused():
    names = {f"G{i}": f"?x{i} :p ?y" for i in range(MAX_OPTIONAL_RUN + 2)}
    allowed = " ; ".join(["G0"] + [f"G{i}?" for i in range(1, MAX_OPTIONAL_RUN + 1)] + [f"G{MAX_OPTIONAL_RUN + 1}"])
    compile_query(query(allowed, names))
    refused = " ; ".join(["G0"] + [f"G{i}?" for i in range(1, MAX_OPTIONAL_RUN + 2)])
    with pytest.raises(QueryError, match=f"G{MAX_OPTIONAL_RUN + 1}\\?: more than {MAX_OPTIONAL_RUN} optional"):
        compile_query(query(refused, names))


def test_running_out_of_memory_compiling_does_not_blame_the_state_limits(monkeypatch, tmp_path, capsys):
    def out_of_memory(*args):
        raise MemoryError

    monkeypatch.setattr(compiler, "analyse_gpm", out_of_memory)
    with pytest.raises(LimitError, match="out of memory compiling the query"):
        compile_query(repeated(3))
    path = tmp_path / "q.rq"
    path.write_text(repeated(3))
    assert main(["explain", str(path)]) == 3
    message = capsys.readouterr().err
    assert "out of memory compiling the query" in message and "--max-state-memory" not in message, message
