#!/usr/bin/env python3
"""UC 2, trajectory classification: generate vessel position reports.

There is no public data set for this use case, so this script generates
one from a fixed seed (the same options always give the same files, byte
for byte):

* a fleet of boats that each report once a minute on one stream (boat k
  reports at second 4k of each minute, so no two reports share a time);
* each report is one event (one named graph) with the boat's speed (knots,
  an integer), its zone ("harbour", "sea", "fishingarea") and its heading
  (N, NE, E, ...):

      :r17 { :Ingrid pred:speed 9 ; pred:location "sea" ; pred:direction "NE" . }

* fishing boats go round trips: moored in the harbour (speed 0), leaving
  (a few knots, still "harbour"), steaming out at sea on one heading, then
  stopped (speed 0) in the fishing area, fishing, and back home.  On some
  trips the boat changes course on the way, on some the trip out takes
  longer than half an hour: the query must not classify those;
* cargo ships leave and come back too, but never stop in a fishing area;
* a background KB (graph <http://harbour.org/db>) gives each boat's name
  and operator, and each operator's name.

Usage:
    python prepare.py [--out DIR] [--limit N] [--hours H] [--seed S]

writes DIR/boats.trig and DIR/kb.trig (default DIR: out/ beside this
script); --limit N keeps only the first N reports.
"""

import argparse
import random
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
START = datetime(2024, 6, 3, 4, 0, 0)
HEADINGS = ["N", "NE", "E", "SE", "S", "SW", "W", "NW"]

# boat, kind, operator
FLEET = [
    ("Ingrid", "fishing", "NordFisk"), ("Marie", "fishing", "NordFisk"),
    ("Solvei", "fishing", "NordFisk"), ("Astrid", "fishing", "Havbruk"),
    ("Karin", "fishing", "Havbruk"), ("Liv", "fishing", "Havbruk"),
    ("Frida", "fishing", "Kystfiske"), ("Nora", "fishing", "Kystfiske"),
    ("Boreas", "cargo", "Nordlys Shipping"), ("Kvitnos", "cargo", "Nordlys Shipping"),
]
OPERATORS = {"NordFisk": "NordFisk AS", "Havbruk": "Havbruk og Fiske AS",
             "Kystfiske": "Kystfiske Lofoten", "Nordlys Shipping": "Nordlys Shipping ASA"}

PREFIXES = """@prefix : <http://harbour.org/> .
@prefix pred: <http://example/> .
@prefix prov: <http://www.w3.org/ns/prov#> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
"""


def trip(rng, kind):
    """One round trip of a boat: a list of (speed, location, heading) reports."""
    heading = rng.choice(HEADINGS)
    reports = [(0, "harbour", heading)] * rng.randint(3, 30)            # moored
    leaving = rng.randint(2, 4)
    reports.append((leaving, "harbour", heading))                      # leaving the harbour
    out = rng.randint(4, 12) if rng.random() < 0.85 else rng.randint(31, 40)   # minutes out
    turn = rng.randrange(1, out) if rng.random() < 0.2 else None       # a course change on the way
    for minute in range(out):
        if minute == turn:
            heading = HEADINGS[(HEADINGS.index(heading) + rng.choice([-2, 2])) % 8]
        reports.append((rng.randint(leaving + 4, leaving + 9), "sea", heading))
    if kind == "fishing":
        reports.append((0, "fishingarea", heading))                     # arrived, stopped
        for _ in range(rng.randint(20, 60)):                            # fishing
            reports.append((rng.randint(0, 3), "fishingarea", rng.choice(HEADINGS)))
    back = HEADINGS[(HEADINGS.index(heading) + 4) % 8]
    for _ in range(out):
        reports.append((rng.randint(8, 13), "sea", back))
    reports.append((3, "harbour", back))                                # coming in
    return reports


def reports(hours, seed):
    """Yield (time, boat, speed, location, heading), time-ordered."""
    rng = random.Random(seed)
    plans = {boat: [] for boat, _, _ in FLEET}
    for minute in range(hours * 60):
        for k, (boat, kind, _) in enumerate(FLEET):
            if not plans[boat]:
                plans[boat] = trip(rng, kind)
            speed, location, heading = plans[boat].pop(0)
            yield START + timedelta(minutes=minute, seconds=4 * k), boat, speed, location, heading


def write_reports(path, hours, seed, limit):
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(PREFIXES)
        for time, boat, speed, location, heading in reports(hours, seed):
            if limit is not None and n >= limit:
                break
            n += 1
            f.write(f':r{n} prov:generatedAtTime "{time.isoformat()}Z"^^xsd:dateTime .\n'
                    f':r{n} {{ :{boat} pred:speed {speed} ; pred:location "{location}" ;'
                    f' pred:direction "{heading}" . }}\n')
    return n


def write_kb(path):
    with open(path, "w", encoding="utf-8") as f:
        f.write("@prefix : <http://harbour.org/> .\n@prefix db: <http://harbour.org/db#> .\n\n")
        f.write("<http://harbour.org/db> {\n")
        for boat, kind, operator in FLEET:
            op = operator.replace(" ", "")
            f.write(f'  :{boat} db:name "{boat}" ; db:kind "{kind}" ; db:operatedBy :{op} .\n')
        for operator, name in OPERATORS.items():
            f.write(f'  :{operator.replace(" ", "")} db:name "{name}" .\n')
        f.write("}\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE / "out", help="output folder (default: out/ here)")
    parser.add_argument("--limit", type=int, default=None, help="keep only the first N reports")
    parser.add_argument("--hours", type=int, default=24, help="hours of reports (default 24)")
    parser.add_argument("--seed", type=int, default=2, help="random seed (default 2)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    n = write_reports(args.out / "boats.trig", args.hours, args.seed, args.limit)
    write_kb(args.out / "kb.trig")
    print(f"generated {n} position reports of {len(FLEET)} boats (seed {args.seed})"
          f" -> {args.out / 'boats.trig'}, KB -> {args.out / 'kb.trig'}")


if __name__ == "__main__":
    main()
