import re

import pytest

from spaseq_plugin import QueryError
from spaseq_plugin.language.parser import parse_query
from spaseq_plugin.language.syntax import Aggregate, Conjunction, Disjunction, GpmRef

PAPER_LAYOUT = """
PREFIX : <http://example/>
SELECT ?h ?w
WITHIN 30 MINUTES
PARTITION BY (?h)
FROM STREAM S1 <http://example.org/power>
FROM STREAM S2 <http://example.org/weather>
WHERE {
  SEQ (A ; B+ , (C & D) : (E | F) ; G? ; H!, I)
  DEFINE GPM A ON S1 { ?h :p ?x }
  DEFINE GPM B ON S2 { ?w :p ?x }
  DEFINE GPM C ON S1, S2 { ?c :p ?x }
  DEFINE GPM D ON S1 { ?d :p ?x }
  DEFINE GPM E ON S1 { ?e :p ?x }
  DEFINE GPM F ON S1 { ?f :p ?x }
  DEFINE GPM G ON S1 { ?g :p ?x }
  DEFINE GPM H ON S1 { ?k :p ?x }
  DEFINE GPM I ON S1 { ?i :p ?x }
}
"""


def test_paper_layout_every_operator():
    q = parse_query(PAPER_LAYOUT)
    atoms = q.sequence.atoms
    assert [type(a) for a in atoms] == [GpmRef, GpmRef, Conjunction, Disjunction, GpmRef, GpmRef, GpmRef]
    assert [getattr(a, "suffix", None) for a in atoms] == ["", "+", None, None, "?", "!", ""]
    assert atoms[2].names == ["C", "D"] and atoms[3].names == ["E", "F"]
    assert q.sequence.ops == [";", ",", ":", ";", ";", ","]
    assert q.window.seconds == 1800 and not q.window.tumbling
    assert q.partition_by == ["h"]
    assert q.streams["S2"].iri == "http://example.org/weather"
    assert q.gpms["C"].streams == ["S1", "S2"]


def test_reference_implementation_layout_lowercase_and_quotes():
    q = parse_query("""prefix pred: <http://example/>
        select ?company ?p1 within 100 seconds Partition by (?company)
        from stream S1 <http://example.org/main>
        where seq (A; B) {
          define gpm A on S1 { ?company pred:price ?p1 . }
          define gpm B on S1 { ?company pred:price ?p2 . Filter (?p2 < ?p1 && ?p2 != '1.0'^^<http://www.w3.org/2001/XMLSchema#double>). }
        }""")
    assert q.select == ["company", "p1"] and q.window.seconds == 100
    assert "Filter (?p2 < ?p1" in q.gpms["B"].body


def test_trailing_separator_is_a_warning():
    q = parse_query("SELECT * WITHIN 5 SECONDS TUMBLING FROM STREAM S <s> WHERE { SEQ (A, B,) "
                    "DEFINE GPM A ON S { ?a ?p ?o } DEFINE GPM B ON S { ?b ?p ?o } }")
    assert q.select_star and q.window.tumbling
    assert any("trailing ," in w for w in q.warnings)


def test_aggregates_and_distinct():
    q = parse_query("SELECT DISTINCT ?c (COUNT(?x) AS ?n) (GROUP_CONCAT(DISTINCT ?x ; SEPARATOR=',') AS ?all) "
                    "(count(*) AS ?events) FROM STREAM S <s> WHERE { SEQ (C ; A+) "
                    "DEFINE GPM C ON S { ?c ?p ?o } DEFINE GPM A ON S { ?x ?p ?o } }")
    assert q.distinct
    aggs = [i for i in q.select if isinstance(i, Aggregate)]
    assert [(a.function, a.var, a.distinct, a.alias) for a in aggs] == [
        ("COUNT", "x", False, "n"), ("GROUP_CONCAT", "x", True, "all"), ("COUNT", None, False, "events")]
    assert aggs[1].separator == ","


def test_gpm_body_with_braces_strings_and_comments_is_captured_whole():
    body = ' ?x :p "a } b" . # a comment with } in it\n OPTIONAL { ?x :q ?y } FILTER(?y != <http://e/#x>) '
    q = parse_query("PREFIX : <http://e/> SELECT ?x FROM STREAM S <s> WHERE { SEQ (A) DEFINE GPM A ON S {"
                    + body + "} }")
    assert q.gpms["A"].body == body


def test_construct_template():
    q = parse_query("PREFIX : <http://e/> CONSTRUCT { ?x :follows ?y } WITHIN 1 HOUR FROM STREAM S <s> "
                    "WHERE { SEQ (A ; B) DEFINE GPM A ON S { ?x :p 1 } DEFINE GPM B ON S { ?y :p 2 } }")
    assert q.construct.strip() == "?x :follows ?y" and q.window.seconds == 3600


@pytest.mark.parametrize("text, line, column, words", [
    ("SELECT ?x\nFROM STREAM S <s>\nWHERE { SEQ (A ;; B) }", 3, 17, "unexpected ';'"),
    ("SELECT ?x\nFROM STREAM S <s>\nWHERE { SEQ (A) DEFINE GPM A ON S { ?x ?p ?o }", 3, 46, "ends too early"),
    ("SELECT ?x WITHIN 3 FORTNIGHTS\nFROM STREAM S <s>", 1, 20, "unexpected"),
    ("SELECT ?x FROM STREAM S x:y WHERE { SEQ (A) DEFINE GPM A ON S { ?x ?p ?o } }", 1, 25, "prefix x:"),
])
def test_syntax_errors_name_line_and_column(text, line, column, words):
    with pytest.raises(QueryError) as info:
        parse_query(text)
    assert (info.value.line, info.value.column) == (line, column)
    assert words in str(info.value)
    assert f"line {line}, column {column}" in str(info.value)


def test_two_prefixes_for_one_namespace_both_work():
    from spaseq_plugin import compile_query
    compiled = compile_query(
        "PREFIX : <http://e/> PREFIX pred: <http://e/> BASE <http://base/> "
        "CONSTRUCT { ?x pred:seen :yes } FROM STREAM S <s> "
        "WHERE { SEQ (A) DEFINE GPM A ON S { ?x :p ?y ; pred:q ?z GRAPH pred:kb { ?x :o ?w } } }")
    assert compiled.gpms["A"].kb_graphs == {"http://e/kb"}
    assert compiled.gpms["A"].bindable == {"x", "y", "z", "w"}
    assert str(compiled.template[0][1]) == "<http://e/seen>"
    assert compiled.stream_iris["S"] == "http://base/s"


def test_a_bad_construct_template_is_a_query_error():
    from spaseq_plugin import compile_query
    with pytest.raises(QueryError) as info:
        compile_query("CONSTRUCT { ?x ex:p 1 } FROM STREAM S <s> WHERE { SEQ (A) DEFINE GPM A ON S { ?x ?p ?o } }")
    assert info.value.line == 1 and "ex" in str(info.value)


UNICODE_NAMES = """PREFIX ü: <http://example/ü/>
PREFIX a.b·c: <http://example/abc/>
SELECT ?ä ?日本 ?_1
FROM STREAM Ström ü:s
WHERE { SEQ (Ä ; 日本+ ; _x̃)
  DEFINE GPM Ä ON Ström { ?ä ü:kind "a" }
  DEFINE GPM 日本 ON Ström { ?日本 a.b·c:kind "b" }
  DEFINE GPM _x̃ ON Ström { ?_1 ü:kind "c" } }
"""


def test_names_take_the_letters_sparql_takes():
    # SPARQL's PN_PREFIX, PN_LOCAL and VARNAME take letters of any script; the grammar
    # once took ASCII only ("unexpected 'ü:'; expected a prefix name")
    from spaseq_plugin import compile_query
    q = parse_query(UNICODE_NAMES)
    assert q.prefixes == {"ü": "http://example/ü/", "a.b·c": "http://example/abc/"}
    assert q.select == ["ä", "日本", "_1"]
    assert q.streams["Ström"].iri == "http://example/ü/s"
    assert list(q.gpms) == ["Ä", "日本", "_x̃"]
    compiled = compile_query(UNICODE_NAMES)
    assert compiled.gpms["日本"].bindable == {"日本"}


@pytest.mark.parametrize("local, iri", [
    ("s\\.1", "http://e/s.1"), ("s\\~\\#\\'", "http://e/s~#'"), ("s%41", "http://e/s%41"),
    ("", "http://e/"), ("日本:x", "http://e/日本:x"),
])
def test_a_prefixed_stream_iri_is_read_as_sparql_reads_it(local, iri):
    # a backslash escape stands for its character alone; a % escape stays as written
    q = parse_query(f"PREFIX ex: <http://e/> SELECT ?x FROM STREAM S ex:{local}\n"
                    "WHERE { SEQ (A) DEFINE GPM A ON S { ?x ?p ?o } }")
    assert q.streams["S"].iri == iri


def test_escaped_quotes_and_hashes_in_prefixed_names_stay_in_the_body():
    # ex:it\'s and ex:a\#b are names: no string, no comment starts at their ' or #
    body = " ?x ex:it\\'s ?o ; ex:a\\#b ?p . FILTER(?o != \"}\") "
    q = parse_query("PREFIX ex: <http://e/> SELECT ?x FROM STREAM S <s>\n"
                    f"WHERE {{ SEQ (A) DEFINE GPM A ON S {{{body}}}\n}}")
    assert q.gpms["A"].body == body


@pytest.mark.parametrize("text, words", [
    ("PREFIX a.: <http://e/>", "unexpected"),               # a prefix name does not end in '.'
    ("PREFIX _a: <http://e/>", "unexpected"),               # nor start with '_'
    ("PREFIX 1a: <http://e/>", "unexpected"),
    ("PREFIX \U00010000: <http://e/>", "beyond U\\+FFFF"),
])
def test_names_sparql_refuses_are_refused(text, words):
    with pytest.raises(QueryError, match=words) as info:
        parse_query(text + "\nSELECT ?x FROM STREAM S <s> WHERE { SEQ (A) DEFINE GPM A ON S { ?x ?p ?o } }")
    assert info.value.line == 1


@pytest.mark.parametrize("text, column, words", [
    ("PREFIX a×b: <http://e/>", 9, "'×' (U+00D7) cannot be in a prefix name"),     # × is no letter
    ("PREFIX ·a: <http://e/>", 8, "'·' (U+00B7) cannot start a prefix name"),      # a mark only follows
    ("PREFIX a·\uFFFE: <http://e/>", 10, "U+FFFE"),
    ("SELECT ?x ?a\u2190b", 13, "cannot be in a variable name"),
    ("SELECT ?x ?\u0301a", 12, "cannot start a variable name"),
    ("SELECT ?x FROM STREAM S\u00A0 <s>", 24, "cannot be in a name"),
    ("PREFIX ex: <http://e/> SELECT ?x FROM STREAM S ex:·a", 51, "cannot start a prefixed name"),
    ("PREFIX ex: <http://e/> SELECT ?x FROM STREAM S ex:a\uE000", 52, "U+E000"),
])
def test_a_character_sparql_refuses_in_a_name_is_named_where_it_is(text, column, words):
    # The grammar's names take any character up to U+FFFF; those outside SPARQL's
    # ranges, or a combining mark where a name starts, are refused at their column
    with pytest.raises(QueryError, match=re.escape(words)) as info:
        parse_query(text + "\nWHERE { SEQ (A) DEFINE GPM A ON S { ?x ?p ?o } }")
    assert (info.value.line, info.value.column) == (1, column)


def test_marks_and_letters_of_every_range_are_taken_inside_names():
    from spaseq_plugin.language.parser import _LETTERS, _MARKS, is_prefix_name
    for low, high in _LETTERS + _MARKS:
        for code in {low, high, (low + high) // 2}:
            name = "a" + chr(code) + "b"
            q = parse_query(f"PREFIX {name}: <http://e/> SELECT ?{name} FROM STREAM {name} {name}:{name}\n"
                            f"WHERE {{ SEQ ({name}) DEFINE GPM {name} ON {name} {{ ?{name} ?p ?o }} }}")
            assert q.select == [name] and is_prefix_name(name)
    assert not is_prefix_name("a\u00D7") and not is_prefix_name("\u00B7a") and is_prefix_name("")
