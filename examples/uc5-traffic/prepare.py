#!/usr/bin/env python3
"""UC 5, traffic management: turn three CityBench road sensors into streams.

Input (the shared data's ``citybench/`` folder, CityBench's Aarhus slice):

* ``streams/AarhusTrafficData<ID>.csv`` for the paper's three sensors
  182955, 195578 and 195446: one row every 5 minutes
  (``status, avgMeasuredTime, avgSpeed, extID, medianMeasuredTime,
  TIMESTAMP, vehicleCount, _id, REPORT_ID``);
* ``SensorRepository.n3``: CityBench's sensor repository (SSN), where each
  sensor observes a few properties, each with its own IRI and a type such
  as ``ct:VehicleCount``;
* ``trafficMetaData.csv``: each sensor's road segment (streets, length).

Mapping (the one CityBench uses to annotate these rows): each row becomes
one event on the sensor's stream, stamped with its TIMESTAMP (local time,
written without a time zone), holding one SSN observation per raw column:

    :obs20746942-count a ssn:Observation ; ssn:observedBy <sensor> ;
        ssn:observedProperty <the sensor's VehicleCount property> ;
        sao:hasValue 11 ; ssn:observationResultTime "2014-08-01T08:00:00"^^xsd:dateTime .

for vehicleCount, avgSpeed and avgMeasuredTime.  The rows are sorted by
time and repeated rows (the files have a few) are dropped.

The KB (out/kb.trig) has two graphs: the three sensors' description from
SensorRepository.n3 (<http://www.insight-centre.org/dataset/SensorRepository>,
so GRAPH patterns can tell which observation counts vehicles), and the
segments' streets and length from trafficMetaData.csv (<http://example/aarhus/roads>).

Without the shared data (or with --generated), the script generates three
streams of the same shape from a fixed seed, with a KB of the same shape.

Usage:
    python prepare.py [--out DIR] [--limit N] [--start TIME] [--generated] [--data DIR]

--start TIME drops the rows before TIME (e.g. 2014-08-05T04:00:00);
--limit N then keeps the first N rows of each sensor.
"""

import argparse
import csv
import os
import random
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED_DATA = Path(os.environ["SPASEQ_SHARED"]) / "data" if os.environ.get("SPASEQ_SHARED") \
    else HERE.parents[2] / "shared" / "data"          # ../shared/data beside the repository

SENSORS = ["182955", "195578", "195446"]          # the paper's Query 5: streams S1, S2, S3
SERVICE = "http://www.insight-centre.org/dataset/SampleEventService#"
REPOSITORY = "http://www.insight-centre.org/dataset/SensorRepository"
ROADS = "http://example/aarhus/roads"
CT = "http://www.insight-centre.org/citytraffic#"
COLUMNS = [("vehicleCount", "VehicleCount", "count"), ("avgSpeed", "AvgSpeed", "speed"),
           ("avgMeasuredTime", "MeasureTime", "time")]   # CSV column, ct: property type, short name

PREFIXES = f"""@prefix : <http://www.insight-centre.org/dataset/observation/> .
@prefix ssn: <http://purl.oclc.org/NET/ssnx/ssn#> .
@prefix sao: <http://purl.oclc.org/NET/sao/> .
@prefix ses: <{SERVICE}> .
@prefix prov: <http://www.w3.org/ns/prov#> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
"""


# -- real data ----------------------------------------------------------------

def real_rows(root, sensor):
    """The sensor's CSV rows, sorted by time, one per timestamp."""
    with open(root / "streams" / f"AarhusTrafficData{sensor}.csv", newline="", encoding="utf-8") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: r["TIMESTAMP"])
    seen = set()
    for row in rows:
        if row["TIMESTAMP"] not in seen:
            seen.add(row["TIMESTAMP"])
            yield row


def real_kb(root):
    """(sensor description from SensorRepository.n3 as N-Triples lines, property IRIs, road rows)."""
    import pyoxigraph as ox        # the engine's own RDF library, installed with it
    store = ox.Store()
    store.bulk_load(path=str(root / "SensorRepository.n3"), format=ox.RdfFormat.TURTLE)
    values = " ".join(f"ses:AarhusTrafficData{s}" for s in SENSORS)
    described = store.query(f"""
        PREFIX ssn: <http://purl.oclc.org/NET/ssnx/ssn#>
        PREFIX ses: <{SERVICE}>
        CONSTRUCT {{ ?sensor a ?sensorType ; ssn:observes ?p . ?p a ?type ; ssn:isPropertyOf ?foi . ?foi ?fp ?fo }}
        WHERE {{ VALUES ?sensor {{ {values} }}
                 ?sensor a ?sensorType ; ssn:observes ?p . ?p a ?type ; ssn:isPropertyOf ?foi . ?foi ?fp ?fo }}""")
    triples = sorted(f"{t.subject} {t.predicate} {t.object} ." for t in described)
    properties = {}
    for sensor in SENSORS:
        for row in store.query(f"""PREFIX ssn: <http://purl.oclc.org/NET/ssnx/ssn#>
                SELECT ?p ?type WHERE {{ <{SERVICE}AarhusTrafficData{sensor}> ssn:observes ?p . ?p a ?type }}"""):
            properties[(sensor, row["type"].value.removeprefix(CT))] = row["p"].value
    with open(root / "trafficMetaData.csv", newline="", encoding="utf-8") as f:
        roads = {r["REPORT_ID"]: r for r in csv.DictReader(f) if r["REPORT_ID"] in SENSORS}
    return triples, properties, roads


# -- generated data (same shape) --------------------------------------------------

def generated_rows(sensor, seed=5, days=7):
    """Rows like the CSV: one every 5 minutes; traffic heavy in the rush hours,
    and now and then a jam that builds up on all three segments at once."""
    rng = random.Random(f"{seed}-{sensor}")
    jams = random.Random(seed)            # the same jam times for every sensor
    k = SENSORS.index(sensor)
    time = datetime(2014, 8, 1, 7, 55)
    for i in range(days * 288):
        hour = time.hour + time.minute / 60
        rush = 7 <= hour < 9 or 15 <= hour < 17.5
        jam = jams.random() < 0.04        # about one jam an hour and a half
        count = max(0, int(rng.gauss((8 if rush else 3) / (k + 1), 1.5))) + (3 + 2 * k if jam else 0)
        speed = max(5, int(rng.gauss(60 - 15 * k - (15 if rush else 0) - (20 if jam else 0), 5)))
        yield {"TIMESTAMP": time.isoformat(), "_id": f"{sensor}{i:06d}", "vehicleCount": str(count),
               "avgSpeed": str(speed), "avgMeasuredTime": str(int(500 * (1 + k) / speed * 3.6))}
        time += timedelta(minutes=5)


def generated_kb():
    triples, properties, roads = [], {}, {}
    for k, sensor in enumerate(SENSORS):
        s = f"<{SERVICE}AarhusTrafficData{sensor}>"
        triples.append(f"{s} a <http://purl.oclc.org/NET/ssnx/ssn#Sensor> .")
        for _, kind, _ in COLUMNS:
            p = f"{SERVICE}Property-{sensor}-{kind}"
            properties[(sensor, kind)] = p
            triples += [f"{s} <http://purl.oclc.org/NET/ssnx/ssn#observes> <{p}> .", f"<{p}> a <{CT}{kind}> ."]
        roads[sensor] = {"POINT_1_STREET": f"Street {k + 1}a", "POINT_2_STREET": f"Street {k + 1}b",
                         "DISTANCE_IN_METERS": str(500 * (k + 1)), "ROAD_TYPE": "MAJOR_ROAD"}
    return triples, properties, roads


# -- writing -----------------------------------------------------------------------

def write_stream(path, sensor, rows, properties, start, limit):
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(PREFIXES)
        for row in rows:
            if start and row["TIMESTAMP"] < start:
                continue
            if limit is not None and n >= limit:
                break
            n += 1
            event = f":ev{row['_id']}"
            f.write(f'{event} prov:generatedAtTime "{row["TIMESTAMP"]}"^^xsd:dateTime .\n{event} {{\n')
            for column, kind, short in COLUMNS:
                f.write(f"  :obs{row['_id']}-{short} a ssn:Observation ; ssn:observedBy ses:AarhusTrafficData{sensor} ;"
                        f" ssn:observedProperty <{properties[(sensor, kind)]}> ; sao:hasValue {int(row[column])} ;"
                        f' ssn:observationResultTime "{row["TIMESTAMP"]}"^^xsd:dateTime .\n')
            f.write("}\n")
    return n


def text(value):
    """A Turtle string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_kb(path, triples, roads):
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"@prefix road: <http://example/aarhus#> .\n@prefix ses: <{SERVICE}> .\n\n")
        f.write(f"<{REPOSITORY}> {{\n")
        for line in triples:
            f.write(f"  {line}\n")
        f.write(f"}}\n\n<{ROADS}> {{\n")
        for sensor in SENSORS:
            r = roads[sensor]
            f.write(f"  ses:AarhusTrafficData{sensor} road:from {text(r['POINT_1_STREET'])} ;"
                    f" road:to {text(r['POINT_2_STREET'])} ; road:lengthInMetres {int(r['DISTANCE_IN_METERS'])} ;"
                    f" road:type {text(r['ROAD_TYPE'])} .\n")
        f.write("}\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE / "out", help="output folder (default: out/ here)")
    parser.add_argument("--limit", type=int, default=None, help="keep only the first N rows of each sensor")
    parser.add_argument("--start", default=None, help="drop rows before this time (e.g. 2014-08-05T04:00:00)")
    parser.add_argument("--generated", action="store_true", help="generate data even if the real data is there")
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help=f"the shared data folder ({SHARED_DATA})")
    args = parser.parse_args(argv)
    root = args.data / "citybench"
    real = (root / "streams").is_dir() and not args.generated
    triples, properties, roads = real_kb(root) if real else generated_kb()
    args.out.mkdir(parents=True, exist_ok=True)
    counts = []
    for sensor in SENSORS:
        rows = real_rows(root, sensor) if real else generated_rows(sensor)
        counts.append(write_stream(args.out / f"traffic{sensor}.trig", sensor, rows, properties, args.start, args.limit))
    write_kb(args.out / "kb.trig", triples, roads)
    print(f"{'read ' + str(root) if real else 'generated data (seed 5)'}: "
          + ", ".join(f"{n} events of sensor {s}" for s, n in zip(SENSORS, counts))
          + f" -> {args.out}/traffic<ID>.trig, KB ({len(triples)} + {len(roads) * 4} triples) -> {args.out / 'kb.trig'}")


if __name__ == "__main__":
    main()
