"""A query fuzzer: mutations of the example and acceptance queries, compiled and run.

Every outcome must be a result (the query compiles, and runs over its case's
events when it has some) or a :class:`QueryError` naming line and column:
never another exception, a signal or a hang.  Mutations: deleted,
duplicated and swapped tokens, a token from another query, random bytes,
random Unicode (control characters and lone surrogates too), deep nesting
(balanced or not) and huge numbers; each case applies one to three.

Cases are made from a seed, so a failure is reproduced by its seed and case
number.  Run it as a program for a long run (``tests/test_fuzz_queries.py``
runs a bounded one)::

    .venv/bin/python tests/fuzz_queries.py --cases 20000 --seed 1

It prints one JSON object: the counts per outcome and the failures (case
number, mutations, what happened, the text's start).  Before each case it
writes the case number to ``--progress FILE``, so a crash (a signal) names
the case that caused it.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from shared_paths import CASES  # noqa: E402

CASE_BUDGET = 30.0          # seconds a case may take before it counts as a hang
MAX_EVENTS = 20             # events a compiled case runs over

_TOKEN = re.compile(r'\s+|"(?:[^"\\\n]|\\.)*"|<[^<>\s]*>|[?$]?[\w:.-]+|.', re.S)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_KEYWORDS = ["SEQ", "DEFINE", "GPM", "ON", "WITHIN", "PARTITION BY", "FROM STREAM", "SELECT", "CONSTRUCT",
             "WHERE", "FILTER", "OPTIONAL", "UNION", "MINUS", "SERVICE", "GRAPH", "BIND", "VALUES",
             "EXISTS", "NOT", "GROUP_CONCAT", "SEPARATOR", "COUNT", "DISTINCT", "TUMBLING", "AS", "a",
             "+", "?", "!", "&", "|", ",", ";", ":", "&&", "||", "*", "/", "(", ")", "{", "}", "[", "]", ".",
             "DAYS", "MS", "PREFIX", "BASE", "#", '"', "'", "<", ">", "\\", "^^", "@en", "_:b"]
_OPENERS = ["{", "(", "[", "OPTIONAL {", "{ } UNION {", "FILTER(", "FILTER EXISTS {", "STR(", "SEQ ("]
_CLOSERS = {"{": "}", "(": ")", "[": "]", "OPTIONAL {": "}", "{ } UNION {": "}", "FILTER(": ")",
            "FILTER EXISTS {": "}", "STR(": ")", "SEQ (": ")"}


@dataclass
class Base:
    """A query the mutations start from, with the events and KB of its case (if any)."""
    name: str
    text: str
    events: list = field(default_factory=list)
    kb_files: list = field(default_factory=list)
    streams: dict = field(default_factory=dict)     # alias -> stream file


def bases() -> list[Base]:
    """The example queries, and the acceptance cases' queries with their streams and KB."""
    from spaseq_plugin.language.parser import parse_query
    from spaseq_plugin.streams.files import merge_streams, open_stream

    found = []
    for case in sorted(CASES.glob("*/case.json")):
        spec = json.loads(case.read_text())
        folder = case.parent
        text = (folder / spec["query"]).read_text()
        streams = {alias: str(folder / path) for alias, path in spec.get("streams", {}).items()}
        found.append(Base(f"acceptance/{folder.name}", text, streams=streams,
                          kb_files=[str(folder / k) for k in _as_list(spec.get("kb"))]))
    quickstart = ROOT / "examples" / "quickstart"
    for path in sorted((ROOT / "examples").glob("*/*.rq")):
        base = Base(str(path.relative_to(ROOT)), path.read_text())
        if path.parent == quickstart:
            base.streams = {"S1": str(quickstart / "power.trig"), "S2": str(quickstart / "weather.trig"),
                            "S3": str(quickstart / "storage.trig")}
            base.kb_files = [str(quickstart / "kb.trig")]
        found.append(base)
    for base in found:
        if base.streams:
            try:
                iris = {d.alias: d.iri for d in parse_query(base.text).streams.values()}
            except Exception:        # noqa: BLE001 - a case whose query is meant to fail
                continue
            sources = [open_stream(path, iris[alias]) for alias, path in base.streams.items() if alias in iris]
            base.events = [e for e in merge_streams(sources) if not isinstance(e, Exception)][:MAX_EVENTS]
    return found


def _as_list(value) -> list:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


# -- mutations ----------------------------------------------------------------------------------

def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def mutate(text: str, rng: random.Random, vocabulary: list[str]) -> tuple[str, list[str]]:
    """``text`` after one to three random mutations, and their names."""
    done = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        parts = tokens(text)
        solid = [i for i, t in enumerate(parts) if not t.isspace()] or [0]
        kind = rng.choice(MUTATIONS)
        text = kind(parts, solid, rng, vocabulary)
        done.append(kind.__name__)
    return text, done


def delete(parts, solid, rng, vocabulary):
    i = rng.choice(solid)
    return "".join(parts[:i] + parts[i + 1:])


def duplicate(parts, solid, rng, vocabulary):
    i = rng.choice(solid)
    copies = rng.choice((1, 1, 2, 3, 8))
    return "".join(parts[:i] + [parts[i] + " "] * copies + parts[i:])


def swap(parts, solid, rng, vocabulary):
    i, j = rng.choice(solid), rng.choice(solid)
    parts = list(parts)
    parts[i], parts[j] = parts[j], parts[i]
    return "".join(parts)


def replace(parts, solid, rng, vocabulary):
    i = rng.choice(solid)
    word = rng.choice(vocabulary) if rng.random() < 0.7 else rng.choice(_KEYWORDS)
    return "".join(parts[:i] + [word] + parts[i + 1:])


def insert_keyword(parts, solid, rng, vocabulary):
    i = rng.choice(solid)
    return "".join(parts[:i] + [rng.choice(_KEYWORDS), " "] + parts[i:])


def random_bytes(parts, solid, rng, vocabulary):
    i = rng.choice(solid)
    noise = bytes(rng.randrange(256) for _ in range(rng.randint(1, 12))).decode("latin-1")
    return "".join(parts[:i] + [noise] + parts[i:])


def random_unicode(parts, solid, rng, vocabulary):
    i = rng.choice(solid)
    pools = [(0, 0x20), (0x80, 0x800), (0x800, 0xD800), (0xD800, 0xE000), (0xE000, 0x110000), (0x2028, 0x202F)]
    noise = []
    for _ in range(rng.randint(1, 6)):
        low, high = rng.choice(pools)
        noise.append(chr(rng.randrange(low, high)))
    return "".join(parts[:i] + ["".join(noise)] + parts[i:])


def deep_nesting(parts, solid, rng, vocabulary):
    i, j = sorted((rng.choice(solid), rng.choice(solid)))
    opener = rng.choice(_OPENERS)
    depth = rng.choice((50, 99, 101, 500, 3000, 10000))
    closer = _CLOSERS[opener] if rng.random() < 0.8 else ""
    return "".join(parts[:i] + [(opener + " ") * depth] + parts[i:j] + [(closer + " ") * depth] + parts[j:])


def huge_number(parts, solid, rng, vocabulary):
    numbers = [i for i in solid if _NUMBER.fullmatch(parts[i])] or solid
    i = rng.choice(numbers)
    number = rng.choice(("9" * rng.choice((20, 400, 5000)), "1" + "0" * 400 + ".5", "0." + "0" * 300 + "1",
                         "1e999999", "-1", "0", "18446744073709551616", "1" * 100000))
    return "".join(parts[:i] + [number] + parts[i + 1:])


MUTATIONS = [delete, duplicate, swap, replace, insert_keyword, random_bytes, random_unicode, deep_nesting,
             huge_number]


# -- running cases ----------------------------------------------------------------------------

class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def outcome(text: str, base: Base, kbs: dict) -> str:
    """``ran``, ``compiled`` or ``query error``; raises on anything else."""
    from spaseq_plugin import Engine, KnowledgeBase, QueryError, compile_query

    try:
        compiled = compile_query(text)
    except QueryError as e:
        if e.line is None or e.column is None or e.line < 1 or e.column < 1:
            raise AssertionError(f"a query error without line and column: {e}") from None
        return "query error"
    if not base.events:
        return "compiled"
    if base.kb_files and base.name not in kbs:
        kbs[base.name] = KnowledgeBase.from_specs(base.kb_files)
    engine = Engine(compiled, kb=kbs.get(base.name))
    for _ in engine.run(base.events):
        pass
    return "ran"


def run(cases: int, seed: int, progress: str | None = None) -> dict:
    found = bases()
    vocabulary = sorted({t for b in found for t in tokens(b.text) if not t.isspace()})
    counts = {"cases": cases, "seed": seed, "ran": 0, "compiled": 0, "query error": 0, "failures": []}
    kbs: dict = {}
    logging.disable(logging.WARNING)      # the engine's warnings (ignored streams...) are expected here
    signal.signal(signal.SIGALRM, _alarm)
    started = time.monotonic()
    for n in range(cases):
        rng = random.Random(f"{seed}:{n}")
        base = rng.choice(found)
        text, mutations = mutate(base.text, rng, vocabulary)
        if progress:
            Path(progress).write_text(json.dumps({"case": n, "base": base.name, "mutations": mutations}))
        signal.setitimer(signal.ITIMER_REAL, CASE_BUDGET)
        try:
            counts[outcome(text, base, kbs)] += 1
        except Hang:
            counts["failures"].append(_failure(n, base, mutations, f"took more than {CASE_BUDGET:g} s", text))
        except BaseException as e:    # noqa: BLE001 - every other outcome is a failure
            if isinstance(e, KeyboardInterrupt):
                raise
            counts["failures"].append(_failure(n, base, mutations, f"{type(e).__name__}: {e}", text))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    counts["seconds"] = round(time.monotonic() - started, 1)
    return counts


def _failure(n: int, base: Base, mutations: list[str], what: str, text: str) -> dict:
    return {"case": n, "base": base.name, "mutations": mutations, "outcome": what[:500],
            "text": text[:300] + ("..." if len(text) > 300 else "")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--progress", metavar="FILE")
    args = parser.parse_args()
    print(json.dumps(run(args.cases, args.seed, args.progress), indent=1, ensure_ascii=True))


if __name__ == "__main__":
    main()
