#!/usr/bin/env python3
"""UC 4, stock market analytics: generate a stream of stock trades.

The paper's stock data set (NYSE, 225k trades of 10 companies) is not
public, so this script generates trades of the same shape, from a fixed
seed (the same options always give the same file, byte for byte):

* 10 companies in 3 sectors, one trade per second from the market opening;
  each trade is one event (one named graph):

      :t1 { :t1 a pred:Trade ; pred:company :DLTA ; pred:type "buy" .
            :DLTA pred:price 61.26 ; pred:volume 500 ; pred:sector :energy . }

  (the price and volume hang off the company node, as in the paper's
  Query 3 and Query 4: ``?company pred:price ?p1 ; pred:volume ?vol1``);
* each company's price is a random walk in cents;
* now and then (about one trade in 40) a company's next seven trades trace
  a head-and-shoulders formation instead (left shoulder, head, right
  shoulder, each with a small random jitter), so that Query 3 has
  something to find in a short stream.

Usage:
    python prepare.py [--out DIR] [--limit N] [--seed S]

writes DIR/trades.trig (default DIR: out/ beside this script).
"""

import argparse
import random
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent

COMPANIES = [  # ticker, sector, first price in cents
    ("ALFA", "tech", 10000), ("BRVO", "tech", 4550), ("CHRL", "tech", 23175),
    ("DLTA", "energy", 6120), ("ECHO", "energy", 1890), ("FXTR", "energy", 8800),
    ("GOLF", "tech", 15400), ("HTEL", "telecom", 3275), ("INDI", "telecom", 5010),
    ("JLET", "energy", 12980),
]
OPENING = datetime(2024, 3, 4, 9, 30, 0)   # a Monday, 09:30 (one trade per second from here)

# the seven prices of a head-and-shoulders formation, relative to where it
# starts, in units of the formation's size:
#   left shoulder up, dip, head higher, dip, right shoulder, down a little
SHAPE = [0, 6, 3, 10, 4, 7, 5]

PREFIXES = """@prefix : <http://stockmarket.org/> .
@prefix pred: <http://example/> .
@prefix prov: <http://www.w3.org/ns/prov#> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
"""


def trades(n, seed):
    """Yield n trades (time, ticker, sector, type, price in cents, volume)."""
    rng = random.Random(seed)
    price = {ticker: cents for ticker, _, cents in COMPANIES}
    planned = {ticker: [] for ticker, _, _ in COMPANIES}   # prices of a formation under way
    for i in range(n):
        ticker, sector, _ = COMPANIES[rng.randrange(len(COMPANIES))]
        if not planned[ticker] and rng.random() < 0.025:
            size = max(5, price[ticker] // 400)            # about 0.25 % of the price
            start = price[ticker]
            planned[ticker] = [start + step * size + rng.randint(0, size // 3) for step in SHAPE]
        if planned[ticker]:
            price[ticker] = planned[ticker].pop(0)
        else:
            price[ticker] = max(100, price[ticker] + rng.choice([-3, -2, -1, 0, 1, 2, 3]) * max(1, price[ticker] // 2000))
        kind = "buy" if rng.random() < 0.5 else "sell"
        volume = rng.randint(1, 20) * 100
        yield OPENING + timedelta(seconds=i), ticker, sector, kind, price[ticker], volume


def write_trades(path, n, seed):
    with open(path, "w", encoding="utf-8") as f:
        f.write(PREFIXES)
        for i, (time, ticker, sector, kind, cents, volume) in enumerate(trades(n, seed), start=1):
            price = f"{cents // 100}.{cents % 100:02d}"
            f.write(f':t{i} prov:generatedAtTime "{time.isoformat()}Z"^^xsd:dateTime .\n'
                    f':t{i} {{ :t{i} a pred:Trade ; pred:company :{ticker} ; pred:type "{kind}" .\n'
                    f'        :{ticker} pred:price {price} ; pred:volume {volume} ; pred:sector :{sector} . }}\n')
    return n


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE / "out", help="output folder (default: out/ here)")
    parser.add_argument("--limit", type=int, default=20_000, help="number of trades (default 20000)")
    parser.add_argument("--seed", type=int, default=4, help="random seed (default 4)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "trades.trig"
    n = write_trades(path, args.limit, args.seed)
    print(f"generated {n} trades of {len(COMPANIES)} companies (seed {args.seed}) -> {path}")


if __name__ == "__main__":
    main()
