"""The query fuzzer (tests/fuzz_queries.py) in the suite: a bounded, seeded run.

Most cases go through the Python API, in one process of their own (a crash
is then a signal this test sees, with the case that caused it); a few go
through the spaseq command, ``explain`` and ``run``.  Every outcome must be
a result or a query error naming line and column (exit status 2).

``SPASEQ_FUZZ_CASES`` and ``SPASEQ_FUZZ_SEED`` change the size and seed of
the in-process run; docs/limits.md gives the command of a long run.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys

import pytest

from fuzz_queries import HERE, bases, mutate, tokens

CASES = int(os.environ.get("SPASEQ_FUZZ_CASES", "400"))
SEED = int(os.environ.get("SPASEQ_FUZZ_SEED", "13"))
COMMAND_CASES = 12
SPASEQ = [sys.executable, "-m", "spaseq_plugin"]
QUERY_ERROR = re.compile(r"spaseq: query error: \S+: line \d+, column \d+: ")


def test_fuzzed_queries_through_the_python_api(tmp_path):
    progress = tmp_path / "progress.json"
    p = subprocess.run([sys.executable, str(HERE / "fuzz_queries.py"), "--cases", str(CASES), "--seed", str(SEED),
                        "--progress", str(progress)], capture_output=True, text=True, timeout=60 + CASES)
    last = progress.read_text() if progress.exists() else "no case started"
    assert p.returncode == 0, f"the fuzzer ended with status {p.returncode} in case {last}:\n{p.stderr[-3000:]}"
    report = json.loads(p.stdout)
    assert report["failures"] == [], json.dumps(report["failures"], indent=1)
    assert report["ran"] + report["compiled"] + report["query error"] == CASES
    assert report["query error"] and report["compiled"] + report["ran"]      # both outcomes are exercised


def command_cases():
    found = [b for b in bases() if b.streams]
    vocabulary = sorted({t for b in found for t in tokens(b.text) if not t.isspace()})
    cases = []
    for n in range(COMMAND_CASES):
        rng = random.Random(f"command:{SEED}:{n}")
        base = rng.choice(found)
        text, mutations = mutate(base.text, rng, vocabulary)
        cases.append(pytest.param(base, text, id=f"{n}-{base.name.split('/')[-1]}-{'+'.join(mutations)}"))
    return cases


@pytest.mark.parametrize("base, text", command_cases())
def test_fuzzed_queries_through_the_command_line(base, text, tmp_path):
    (tmp_path / "q.rq").write_bytes(text.encode("utf-8", "surrogatepass"))
    streams = [a for alias, path in base.streams.items() for a in ("--stream", f"{alias}={path}")]
    kb = [a for path in base.kb_files for a in ("--kb", path)]
    for command in (["explain", "q.rq"], ["run", "q.rq", "-q", *streams, *kb]):
        p = subprocess.run(SPASEQ + command, capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert p.returncode in (0, 2), (command[0], p.returncode, p.stderr[-3000:])
        if p.returncode == 2:
            message = p.stderr.strip().splitlines()
            usage = message[-1].startswith("spaseq: --stream ")    # the mutation renamed a stream
            assert len(message) == 1 and (QUERY_ERROR.match(message[0]) or usage), p.stderr[-3000:]
        assert "Traceback" not in p.stderr and "internal error" not in p.stderr
