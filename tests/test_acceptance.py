"""The shared acceptance cases, run through the command line as a user would."""

import subprocess
import sys

import pytest

from shared_paths import ACCEPTANCE, CASES

CASE_DIRS = sorted(p for p in CASES.iterdir() if (p / "case.json").exists()) if CASES.is_dir() else []


@pytest.mark.skipif(not CASE_DIRS, reason="../shared/acceptance is absent")
@pytest.mark.parametrize("case", CASE_DIRS, ids=lambda p: p.name)
def test_acceptance_case(case):
    proc = subprocess.run(
        [sys.executable, str(ACCEPTANCE / "run"), "--cmd", f"{sys.executable} -m spaseq_plugin",
         str(case)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 0 failed" in proc.stdout
