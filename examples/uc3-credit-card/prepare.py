#!/usr/bin/env python3
"""UC 3, credit-card fraud: turn card transactions into a SPASEQ stream.

Input: ``creditcard/card10k.nt`` of the shared data (the SPASEQ authors'
test data: 20,001 transactions, two N-Triples each, in stream order):

    <http://example/card#3> <http://example/id> "3"^^xsd:string .
    <http://example/card#3> <http://example/amount> "68.22"^^xsd:double .

Mapping: transaction k (counting from 1) becomes one event, a named graph
stamped with second k (the numbering of the reference implementation's
stream manifests):

    :tx3 prov:generatedAtTime 3 .
    :tx3 { <http://example/card#3> pred:id "3" ; pred:amount 68.22 . }

The amount is written as an xsd:decimal (money, two decimals) instead of
the file's xsd:double; nothing else changes.

The file has no card holders, so the script also writes a small background
KB (graph <http://creditcard.org/db>): a made-up holder name, address and
issuing bank for every card of the stream.

Without the shared data (or with --generated), the script generates
transactions of the same shape from a fixed seed: 212 cards, each card's
transactions in short bursts, amounts spread evenly over 0-500.

Usage:
    python prepare.py [--out DIR] [--limit N] [--generated] [--data DIR]

writes DIR/transactions.trig and DIR/kb.trig (default DIR: out/ beside
this script).
"""

import argparse
import os
import random
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED_DATA = Path(os.environ["SPASEQ_SHARED"]) / "data" if os.environ.get("SPASEQ_SHARED") \
    else HERE.parents[2] / "shared" / "data"          # ../shared/data beside the repository

TRIPLE = re.compile(r'<([^>]+)> <http://example/(id|amount)> "([^"]*)"')

FIRST = ["Ada", "Bruno", "Chloe", "Dmitri", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas",
         "Kemal", "Lena", "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Sven", "Tara"]
LAST = ["Martin", "Okafor", "Schmidt", "Rossi", "Nguyen", "Dubois", "Kowalski", "Silva", "Haddad",
        "Larsen", "Moreau", "Jensen", "Costa", "Novak", "Weber"]
STREETS = ["Rue de la Paix", "Elm Street", "Via Roma", "Hauptstrasse", "Calle Mayor", "Main Street"]
BANKS = ["First Example Bank", "Banque Exemple", "Beispielbank", "Banca Esempio"]

PREFIXES = """@prefix : <http://creditcard.org/transaction/> .
@prefix pred: <http://example/> .
@prefix prov: <http://www.w3.org/ns/prov#> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
"""


def real_transactions(path):
    """Yield (card IRI, id, amount) from card10k.nt, two triples per transaction."""
    card = ident = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = TRIPLE.match(line)
            if not m:
                continue
            subject, predicate, value = m.groups()
            if predicate == "id":
                card, ident = subject, value
            elif subject == card:
                yield card, ident, float(value)
                card = ident = None


def generated_transactions(seed=3, cards=212, n=20_001):
    """Transactions shaped like card10k.nt: card bursts of 1-9, amounts 0-500."""
    rng = random.Random(seed)
    made = 0
    while made < n:
        number = rng.randrange(2, cards + 2)
        for _ in range(rng.choice([1, 2, 2, 3, 3, 3, 4, 4, 5, 6, 9])):
            yield f"http://example/card#{number}", str(number), round(rng.uniform(0, 500), 2)
            made += 1


def write_stream(path, transactions, limit):
    cards = set()
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(PREFIXES)
        for card, ident, amount in transactions:
            if limit is not None and n >= limit:
                break
            n += 1
            cards.add((card, ident))
            f.write(f":tx{n} prov:generatedAtTime {n} .\n"
                    f':tx{n} {{ <{card}> pred:id "{ident}" ; pred:amount {amount:.2f} . }}\n')
    return n, cards


def write_kb(path, cards):
    """Made-up holders for the cards (deterministic: the card number picks them)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("@prefix db: <http://creditcard.org/db#> .\n\n<http://creditcard.org/db> {\n")
        for card, ident in sorted(cards, key=lambda c: int(c[1]) if c[1].isdigit() else 0):
            rng = random.Random(f"holder-{ident}")
            name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
            address = f"{rng.randint(1, 120)} {rng.choice(STREETS)}"
            f.write(f'  <{card}> db:cardHolder "{name}" ; db:holderAddress "{address}" ;'
                    f' db:issuingBank "{rng.choice(BANKS)}" .\n')
        f.write("}\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE / "out", help="output folder (default: out/ here)")
    parser.add_argument("--limit", type=int, default=None, help="keep only the first N transactions")
    parser.add_argument("--generated", action="store_true", help="generate data even if the real data is there")
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help=f"the shared data folder ({SHARED_DATA})")
    args = parser.parse_args(argv)
    source = args.data / "creditcard" / "card10k.nt"
    real = source.is_file() and not args.generated
    transactions = real_transactions(source) if real else generated_transactions()
    args.out.mkdir(parents=True, exist_ok=True)
    n, cards = write_stream(args.out / "transactions.trig", transactions, args.limit)
    write_kb(args.out / "kb.trig", cards)
    print(f"{'read ' + str(source) if real else 'generated data (seed 3)'}: {n} transactions of {len(cards)} cards"
          f" -> {args.out / 'transactions.trig'}, KB -> {args.out / 'kb.trig'}")


if __name__ == "__main__":
    main()
