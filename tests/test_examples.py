"""The paper's use cases as runnable examples (examples/uc1-... to uc5-...).

Each test does what the example's README does, on a small slice: it runs
the example's prepare.py into tmp_path (with --limit, and --start where the
interesting part of the day is later), then ``spaseq run`` as a subprocess,
and compares the CSV output with the rows that slice must give.  The
real-data variants read ../shared/data and are skipped when it is absent;
the generated variants (``--generated``, or the examples that only have
generated data) always run.
"""

import csv
import io
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from shared_paths import DATA

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SPASEQ = [sys.executable, "-m", "spaseq_plugin"]

QUERIES = ["uc1-smart-grid/query.rq", "uc2-trajectory/query.rq", "uc3-credit-card/query.rq",
           "uc4-stock/head-and-shoulders.rq", "uc4-stock/v-shape.rq", "uc5-traffic/query.rq"]


def needs(folder: str):
    return pytest.mark.skipif(not (DATA / folder).exists(), reason=f"no shared data {DATA / folder}")


def prepare(example: str, out: Path, *args: str) -> str:
    p = subprocess.run([sys.executable, str(EXAMPLES / example / "prepare.py"), "--out", str(out), *args],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def run(query: str, out: Path, streams: dict[str, str], kb: bool = True) -> list[dict]:
    """``spaseq run`` on the prepared files; the CSV rows as dicts."""
    args = [*SPASEQ, "run", str(EXAMPLES / query), "--format", "csv"]
    for alias, name in streams.items():
        args += ["--stream", f"{alias}={out / name}"]
    if kb:
        args += ["--kb", str(out / "kb.trig")]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert " 0 rejected;" in p.stderr and "Traceback" not in p.stderr, p.stderr
    return list(csv.DictReader(io.StringIO(p.stdout)))


def pick(rows: list[dict], *columns: str) -> list[tuple]:
    """The given columns of each row, IRIs shortened to their last segment."""
    return [tuple(r[c].rsplit("/", 1)[-1] for c in columns) for r in rows]


@pytest.mark.parametrize("query", QUERIES)
def test_query_compiles(query):
    p = subprocess.run([*SPASEQ, "explain", str(EXAMPLES / query)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "accepting" in p.stdout


# -- UC 1: smart grid ---------------------------------------------------------

UC1_STREAMS = {"S1": "power.trig", "S2": "weather.trig", "S3": "storage.trig"}
UC1_COLUMNS = ("time", "pw", "fr1", "spw", "fr2", "windyReports", "oname", "house2")


@needs("smarthome/power")
def test_uc1_smart_grid_real(tmp_path):
    said = prepare("uc1-smart-grid", tmp_path, "--data", str(DATA), "--start", "2012-05-01T11:20:00", "--limit", "30")
    assert "read " in said and "30 power, 30 weather and 30 storage events" in said
    rows = run("uc1-smart-grid/query.rq", tmp_path, UC1_STREAMS)
    # one windy minute (11:47, 3 mph), then the battery at 11:48 offers 10 c:
    # every costly grid minute of the half hour before matches
    assert pick(rows, *UC1_COLUMNS) == [
        ("2012-05-01T11:48:00Z", f"pw-d1-{hhmm}", fare, "spw-d1-1148", "10", "1", "Carmen Ortega", "homeB")
        for hhmm, fare in [("1123", "23.4"), ("1124", "23.9"), ("1125", "21.1"), ("1143", "20.4"),
                           ("1144", "20.4"), ("1145", "20.3"), ("1146", "20.1")]]


def test_uc1_smart_grid_generated(tmp_path):
    said = prepare("uc1-smart-grid", tmp_path, "--generated", "--start", "2012-05-01T08:40:00", "--limit", "15")
    assert "generated data" in said
    rows = run("uc1-smart-grid/query.rq", tmp_path, UC1_STREAMS)
    assert pick(rows, *UC1_COLUMNS) == [
        ("2012-05-01T08:53:00Z", "pw-d1-0844", "20.3", "spw-d1-0853", "20.2", "1", "Carmen Ortega", "homeB"),
        ("2012-05-01T08:54:00Z", "pw-d1-0840", "20.2", "spw-d1-0854", "19.2", "2", "Carmen Ortega", "homeB"),
        ("2012-05-01T08:54:00Z", "pw-d1-0841", "20.1", "spw-d1-0854", "19.2", "2", "Carmen Ortega", "homeB"),
        ("2012-05-01T08:54:00Z", "pw-d1-0843", "20.1", "spw-d1-0854", "19.2", "2", "Carmen Ortega", "homeB"),
        ("2012-05-01T08:54:00Z", "pw-d1-0844", "20.3", "spw-d1-0854", "19.2", "2", "Carmen Ortega", "homeB"),
        ("2012-05-01T08:54:00Z", "pw-d1-0845", "20.1", "spw-d1-0854", "19.2", "2", "Carmen Ortega", "homeB"),
    ]


# -- UC 2: trajectory classification (generated data only) ----------------------

def test_uc2_trajectory(tmp_path):
    prepare("uc2-trajectory", tmp_path, "--limit", "600")       # the first hour of 10 boats
    rows = run("uc2-trajectory/query.rq", tmp_path, {"S1": "boats.trig"})
    assert pick(rows, "time", "vessel", "n", "cname", "dir1", "s1", "reportsAtSea", "topSpeed") == [
        ("2024-06-03T04:11:28Z", "Nora", "Nora", "Kystfiske Lofoten", "SE", "3", "4", "12"),
        ("2024-06-03T04:12:00Z", "Ingrid", "Ingrid", "NordFisk AS", "N", "2", "6", "11"),
        ("2024-06-03T04:12:12Z", "Astrid", "Astrid", "Havbruk og Fiske AS", "NE", "3", "8", "11"),
        ("2024-06-03T04:15:16Z", "Karin", "Karin", "Havbruk og Fiske AS", "E", "4", "11", "13"),
        ("2024-06-03T04:25:04Z", "Marie", "Marie", "NordFisk AS", "S", "4", "12", "13"),
        ("2024-06-03T04:25:20Z", "Liv", "Liv", "Havbruk og Fiske AS", "SE", "3", "11", "12"),
        ("2024-06-03T04:36:08Z", "Solvei", "Solvei", "NordFisk AS", "SW", "2", "6", "10"),
        ("2024-06-03T04:36:24Z", "Frida", "Frida", "Kystfiske Lofoten", "N", "2", "5", "10"),
    ]
    # each of them is a real trip out: check the first against the reports themselves
    boats = (tmp_path / "boats.trig").read_text()
    nora = re.findall(r'"(2024-06-03T04:[01]\d:28Z)".*\n.*:Nora pred:speed (\d+) ; pred:location "(\w+)" ;'
                      r' pred:direction "(\w+)"', boats)
    leaving = next(i for i, (_, speed, where, _) in enumerate(nora) if where == "harbour" and speed != "0")
    trip = nora[leaving:leaving + 6]
    assert [where for _, _, where, _ in trip] == ["harbour", "sea", "sea", "sea", "sea", "fishingarea"]
    assert {heading for *_, heading in trip} == {"SE"} and trip[-1][1] == "0" and trip[-1][0] == "2024-06-03T04:11:28Z"


@pytest.mark.parametrize("example", ["uc1-smart-grid", "uc3-credit-card", "uc5-traffic"])
def test_prepare_falls_back_to_generated_data(tmp_path, example):
    said = prepare(example, tmp_path / "out", "--data", str(tmp_path / "no-such-folder"), "--limit", "5")
    assert said.startswith("generated data")


def test_generators_are_deterministic(tmp_path):
    for example, name in [("uc2-trajectory", "boats.trig"), ("uc4-stock", "trades.trig")]:
        prepare(example, tmp_path / "a", "--limit", "50")
        prepare(example, tmp_path / "b", "--limit", "50")
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


# -- UC 3: credit-card fraud ------------------------------------------------------

UC3_COLUMNS = ("time", "card", "name", "amount1", "bigOnes", "biggest")


@needs("creditcard/card10k.nt")
def test_uc3_credit_card_real(tmp_path):
    said = prepare("uc3-credit-card", tmp_path, "--data", str(DATA), "--limit", "200")
    assert "read " in said and "200 transactions" in said
    rows = run("uc3-credit-card/query.rq", tmp_path, {"S1": "transactions.trig"})
    assert pick(rows, *UC3_COLUMNS) == [
        ("5", "card#4", "Chloe Rossi", "25.23", "1", "309.04"),
        ("41", "card#19", "Mateo Moreau", "0.14", "1", "479.12"),
        ("53", "card#23", "Jonas Moreau", "21.14", "1", "281.48"),
        ("139", "card#46", "Dmitri Schmidt", "14.89", "1", "298.71"),
        ("140", "card#46", "Dmitri Schmidt", "14.89", "2", "298.71"),
        ("175", "card#54", "Nadia Okafor", "10.11", "1", "383.54"),
        ("179", "card#47", "Ada Nguyen", "21.06", "1", "418.71"),
        ("180", "card#47", "Ada Nguyen", "21.06", "2", "418.71"),
    ]
    # transactions 3 and 4 of card10k.nt: card#4 spends 25.23, then 309.04
    assert ':tx4 { <http://example/card#4> pred:id "4" ; pred:amount 25.23 . }' in \
        (tmp_path / "transactions.trig").read_text()


def test_uc3_credit_card_generated(tmp_path):
    said = prepare("uc3-credit-card", tmp_path, "--generated", "--limit", "200")
    assert "generated data" in said
    rows = run("uc3-credit-card/query.rq", tmp_path, {"S1": "transactions.trig"})
    assert pick(rows, *UC3_COLUMNS) == [
        ("18", "card#135", "Elena Larsen", "32.02", "1", "379.12"),
        ("28", "card#95", "Farid Haddad", "17.94", "1", "247.44"),
        ("56", "card#198", "Kemal Schmidt", "22.1", "1", "307.27"),
        ("99", "card#92", "Dmitri Okafor", "10.63", "1", "184.58"),
        ("100", "card#92", "Dmitri Okafor", "10.63", "2", "313.98"),
        ("126", "card#88", "Nadia Silva", "16.95", "1", "478.79"),
        ("143", "card#109", "Kemal Costa", "2.33", "1", "471.63"),
        ("144", "card#109", "Kemal Costa", "2.33", "2", "471.63"),
        ("185", "card#123", "Oskar Schmidt", "0.9", "1", "27.42"),
    ]


# -- UC 4: stock market (generated data only) -------------------------------------

def test_uc4_stock(tmp_path):
    prepare("uc4-stock", tmp_path, "--limit", "400")
    rows = run("uc4-stock/head-and-shoulders.rq", tmp_path, {"S1": "trades.trig"}, kb=False)
    assert pick(rows, "time", "company", "p1", "p2", "p3", "p4", "p5", "p6", "p7") == [
        ("2024-03-04T09:31:04Z", "ECHO", "18.9", "19.2", "19.04", "19.4", "19.1", "19.25", "19.15"),
        ("2024-03-04T09:32:01Z", "CHRL", "232.06", "235.42", "233.85", "237.7", "234.4", "236.15", "234.97"),
        ("2024-03-04T09:32:24Z", "ALFA", "100.22", "101.73", "101", "102.73", "101.25", "101.99", "101.51"),
        ("2024-03-04T09:33:10Z", "FXTR", "87.42", "88.73", "88.03", "89.56", "88.27", "88.88", "88.5"),
        ("2024-03-04T09:34:52Z", "INDI", "50.24", "50.95", "50.59", "51.42", "50.72", "51.1", "50.85"),
        ("2024-03-04T09:35:34Z", "INDI", "50.88", "51.59", "51.21", "52.09", "51.35", "51.69", "51.47"),
    ]
    # V-shape: every rise-then-fall in a company's own price sequence, found
    # here by hand from the stream file
    trades = re.findall(r'"([^"]+)"\^\^xsd:dateTime \.\n.*\n\s+:(\w+) pred:price ([\d.]+)',
                        (tmp_path / "trades.trig").read_text())
    prices: dict[str, list] = {}
    for time, company, price in trades:
        prices.setdefault(company, []).append((time, Decimal(price)))
    expected = sorted((c[2][0], company, c[0][1], c[1][1], c[2][1])
                      for company, seq in prices.items() for c in zip(seq, seq[1:], seq[2:])
                      if c[1][1] > c[0][1] and c[2][1] < c[1][1])
    rows = run("uc4-stock/v-shape.rq", tmp_path, {"S1": "trades.trig"}, kb=False)
    got = sorted((r["time"], r["company"].rsplit("/", 1)[-1], Decimal(r["p1"]), Decimal(r["p2"]), Decimal(r["p3"]))
                 for r in rows)
    assert len(trades) == 400 and len(got) == 84 and got == expected


# -- UC 5: traffic -------------------------------------------------------------------

UC5_STREAMS = {"S1": "traffic182955.trig", "S2": "traffic195578.trig", "S3": "traffic195446.trig"}
UC5_COLUMNS = ("time", "t1", "v1", "v2", "v3", "street1", "street2", "street3")


@needs("citybench/streams")
def test_uc5_traffic_real(tmp_path):
    said = prepare("uc5-traffic", tmp_path, "--data", str(DATA), "--start", "2014-08-05T04:00:00", "--limit", "12")
    assert "read " in said and "12 events of sensor 195446" in said
    rows = run("uc5-traffic/query.rq", tmp_path, UC5_STREAMS)
    assert pick(rows, *UC5_COLUMNS) == [
        ("2014-08-05T04:45:00Z", f"2014-08-05T04:{m}:00", "4", "4", "4", "Silkeborgvej", "Åby Ringvej", "Jernaldervej")
        for m in ("15", "25", "40")]
    # the KB holds the real sensor repository's property IRIs
    assert "Property-c9f858eb-4a62-404d-be7c-0626219ec324" in (tmp_path / "kb.trig").read_text()


def test_uc5_traffic_generated(tmp_path):
    said = prepare("uc5-traffic", tmp_path, "--generated", "--limit", "30")
    assert "generated data" in said
    rows = run("uc5-traffic/query.rq", tmp_path, UC5_STREAMS)
    streets = ("Street 1a", "Street 2a", "Street 3a")
    assert pick(rows, *UC5_COLUMNS) == [
        ("2014-08-01T09:15:00Z", "2014-08-01T08:50:00", "7", "8", "10", *streets),
        ("2014-08-01T09:15:00Z", "2014-08-01T08:55:00", "6", "8", "10", *streets),
        ("2014-08-01T09:15:00Z", "2014-08-01T09:10:00", "5", "8", "10", *streets),
        ("2014-08-01T10:05:00Z", "2014-08-01T09:35:00", "5", "5", "9", *streets),
        ("2014-08-01T10:05:00Z", "2014-08-01T09:55:00", "4", "5", "9", *streets),
    ]
