#!/usr/bin/env python3
"""UC 1, smart grid: turn the UMass Smart* HomeC data into three streams.

Input (the shared data's ``smarthome/`` folder, two days of UMass Smart*
home C, see its FORMAT files):

* ``power/*.csv``: the house's draw from the grid, watts, every second;
* ``environmental/*.csv``: a weather station, every minute (temperature
  in F, humidity, wind and gust speed in mph, ...);
* ``generation/*.csv``: the house's wind turbine and solar panel currents
  (mA) and battery voltage, every 5 seconds, from 2011 in UTC; as the
  paper's generator did, they are aligned on the power days by local time
  of day (EDT, UTC-4).

Mapping: each stream gets one event a minute (the mean of the minute), in
the shape of the paper's Query 1 (``?house :loc ?l ; :pow ?pw . ?pw
:source "fuel" ; :fare ?fr1``):

    S1 power   :homeC :loc :site ; :pow :pw-d1-1123 .
               :pw-d1-1123 :source "fuel" ; :watts 2148.3 ; :fare 23.4 .
    S2 weather :wthr-d1-1147 :loc :site ; :value :vl-d1-1147 .
               :vl-d1-1147 :windsp 3 ; :gustsp 3 ; :temp 48.3 ; :humidity 95 .
    S3 storage :storageC :loc :site ; :pow :spw-d1-1148 .
               :spw-d1-1148 :source "solar" ; :panels 24.6 ; :battery 13.51 ; :fare 10.0 .

(d1-1123: day 1, 11:23.)  The data has no prices, so the fares (cents/kWh)
are made up, by rules simple enough to check by hand:

* grid (fuel): 12 at night (22:00-07:00), 18 by day, plus 1 per 400 W
  the house draws (rounded to 0.1);
* storage (the battery the panels charge): 30 minus 1.5 per mA the three
  panels produce above their night-time reading (11.3 mA), but at least 8.

Times are the house's local time, written without a time zone.  The KB
(graph <http://smartgrid.org/db>) describes the Smart* homes: city,
neighbour and (made-up) owner.

Without the shared data (or with --generated), the script generates the
three streams for the same two days from a fixed seed: a daily load curve
with peaks, windy spells, a solar day curve.

Usage:
    python prepare.py [--out DIR] [--limit N] [--start TIME] [--generated] [--data DIR]

--start TIME drops the minutes before TIME (e.g. 2012-05-02T08:00:00);
--limit N then keeps the first N minutes of each stream.
"""

import argparse
import csv
import math
import os
import random
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED_DATA = Path(os.environ["SPASEQ_SHARED"]) / "data" if os.environ.get("SPASEQ_SHARED") \
    else HERE.parents[2] / "shared" / "data"          # ../shared/data beside the repository

DAY0 = 1335830400                 # 2012-05-01 00:00, the power and weather files' first day
GENERATION_DAY0 = 1312156800      # 2011-08-01 00:00 UTC, the generation files' first day
EDT = 4 * 3600                    # generation is in UTC, the rest in local time (UTC-4)
PANEL_NIGHT = 11.3                # the three panels' reading in the dark (mA)

PREFIXES = """@prefix : <http://smartgrid.org/> .
@prefix prov: <http://www.w3.org/ns/prov#> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
"""


def grid_fare(t, watts):
    hour = (t % 86400) // 3600
    return (12 if hour < 7 or hour >= 22 else 18) + round(watts / 400, 1)


def storage_fare(panels):
    return round(max(8.0, 30 - 1.5 * max(0.0, panels - PANEL_NIGHT)), 1)


def rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.reader(f):
            if row and row[0].isdigit():
                yield row


def minute_means(samples):
    """{minute: [values...]} -> {minute: mean of each column}, sorted by minute."""
    return {m: [sum(col) / len(col) for col in zip(*vals)] for m, vals in sorted(samples.items())}


def real_streams(root):
    """(power, weather, storage): {minute (seconds): values}."""
    power = defaultdict(list)
    for path in sorted((root / "power").glob("*.csv")):
        for t, watts in rows(path):
            power[int(t) // 60 * 60].append([float(watts)])
    weather = {}
    for path in sorted((root / "environmental").glob("*.csv")):
        for r in rows(path):
            weather.setdefault(int(r[0]) // 60 * 60, [float(r[5]), float(r[6]), float(r[1]), float(r[2])])
    storage = defaultdict(list)
    for path in sorted((root / "generation").glob("*.csv")):
        for r in rows(path):
            t = DAY0 + int(r[0]) - EDT - GENERATION_DAY0       # same local time of day, on the power days
            if t >= DAY0:
                storage[t // 60 * 60].append([float(r[3]) + float(r[4]) + float(r[5]), float(r[6])])
    return minute_means(power), dict(sorted(weather.items())), minute_means(storage)


def generated_streams(seed=1, days=2):
    rng = random.Random(seed)
    power, weather, storage = {}, {}, {}
    watts, wind = 450.0, 0
    for m in range(days * 1440):
        t = DAY0 + 60 * m
        hour = (m % 1440) / 60
        peak = 900 * math.exp(-((hour - 7.5) / 1.2) ** 2) + 1100 * math.exp(-((hour - 19.5) / 1.5) ** 2)
        watts = max(150.0, 0.7 * watts + 0.3 * (400 + peak) + rng.gauss(0, 60))
        power[t] = [watts]
        if rng.random() < 0.08:                      # the wind picks up or drops
            wind = rng.choice([0, 0, 1, 2, 3, 5, 6])
        weather[t] = [wind, wind + rng.randint(0, 4), round(45 + 8 * math.sin((hour - 9) / 24 * 2 * math.pi), 1),
                      rng.randint(50, 95)]
        sun = max(0.0, math.sin((hour - 6.5) / 12.5 * math.pi))
        storage[t] = [PANEL_NIGHT + 16 * sun * rng.uniform(0.7, 1.0), 12.4 + 1.6 * sun]
    return power, weather, storage


def local_time(t):
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def hhmm(t):
    """A short, unique name for minute t: day and time (d1-0800)."""
    return f"d{(t - DAY0) // 86400 + 1}-{local_time(t)[11:16].replace(':', '')}"


def select(series, start, limit):
    minutes = [t for t in series if start is None or t >= start]
    return minutes[:limit] if limit is not None else minutes


def write_stream(path, series, start, limit, body):
    minutes = select(series, start, limit)
    with open(path, "w", encoding="utf-8") as f:
        f.write(PREFIXES)
        for t in minutes:
            name = f":{path.stem}-{hhmm(t)}"
            f.write(f'{name} prov:generatedAtTime "{local_time(t)}"^^xsd:dateTime .\n'
                    f"{name} {{ {body(t, series[t])} }}\n")
    return len(minutes)


def power_event(t, values):
    watts = values[0]
    pw = f":pw-{hhmm(t)}"
    return (f':homeC :loc :site ; :pow {pw} . {pw} :source "fuel" ; :watts {watts:.1f} ;'
            f" :fare {grid_fare(t, watts):.1f} .")


def weather_event(t, values):
    wind, gust, temp, humidity = values
    vl = f":vl-{hhmm(t)}"
    return (f":wthr-{hhmm(t)} :loc :site ; :value {vl} . {vl} :windsp {int(wind)} ; :gustsp {int(gust)} ;"
            f" :temp {temp:.1f} ; :humidity {int(humidity)} .")


def storage_event(t, values):
    panels, battery = values
    spw = f":spw-{hhmm(t)}"
    return (f':storageC :loc :site ; :pow {spw} . {spw} :source "solar" ; :panels {panels:.1f} ;'
            f" :battery {battery:.2f} ; :fare {storage_fare(panels):.1f} .")


KB = """@prefix : <http://smartgrid.org/> .

<http://smartgrid.org/db> {
  :homeA :locatedIn :WesternMassachusetts ; :nearBy :homeB ; :ownerName "Alice Moreau" .
  :homeB :locatedIn :WesternMassachusetts ; :nearBy :homeC ; :ownerName "Bilal Haddad" .
  :homeC :locatedIn :WesternMassachusetts ; :nearBy :homeB ; :ownerName "Carmen Ortega" .
  :storageC :attachedTo :homeC .
}
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE / "out", help="output folder (default: out/ here)")
    parser.add_argument("--limit", type=int, default=None, help="keep only the first N minutes of each stream")
    parser.add_argument("--start", default=None, help="drop the minutes before this local time (2012-05-02T08:00:00)")
    parser.add_argument("--generated", action="store_true", help="generate data even if the real data is there")
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help=f"the shared data folder ({SHARED_DATA})")
    args = parser.parse_args(argv)
    root = args.data / "smarthome"
    real = (root / "power").is_dir() and not args.generated
    power, weather, storage = real_streams(root) if real else generated_streams()
    start = None
    if args.start:
        start = int(datetime.fromisoformat(args.start).replace(tzinfo=timezone.utc).timestamp())
    args.out.mkdir(parents=True, exist_ok=True)
    n1 = write_stream(args.out / "power.trig", power, start, args.limit, power_event)
    n2 = write_stream(args.out / "weather.trig", weather, start, args.limit, weather_event)
    n3 = write_stream(args.out / "storage.trig", storage, start, args.limit, storage_event)
    (args.out / "kb.trig").write_text(KB, encoding="utf-8")
    print(f"{'read ' + str(root) if real else 'generated data (seed 1)'}: {n1} power, {n2} weather and {n3} storage"
          f" events (one a minute) -> {args.out}/power.trig, weather.trig, storage.trig; KB -> {args.out / 'kb.trig'}")


if __name__ == "__main__":
    main()
