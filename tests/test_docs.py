"""Every Python block of the README and of docs/ runs as written, from the repository root.

The blocks of one page run in order in one namespace (a page tells one story: a
later block uses what an earlier one made), in a fresh interpreter whose working
directory shows the repository's files (what a block writes goes to a temporary
directory).  A block that cannot run as it is (it needs a server, it is a sketch)
says so on the line before it: ``<!-- not run: WHY -->``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<code>.*?)^(?P=indent)```", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<why>.*?)\s*-->\s*$")

# Runs the blocks given on stdin as JSON [(where, code)], each compiled under its own name
# so that a failure points at the page and line.
RUNNER = """
import json, sys, traceback
namespace = {"__name__": "__main__"}
for where, code in json.load(sys.stdin):
    try:
        exec(compile(code, where, "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        sys.exit(f"the Python block at {where} failed")
"""


def python_blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """(line, code, why it is not run or None) of each Python block of a page."""
    text = page.read_text(encoding="utf-8")
    out = []
    for match in BLOCK.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[:match.start()].rstrip("\n").rpartition("\n")[2]
        marker = NOT_RUN.search(before)
        out.append((line, textwrap.dedent(match.group("code")), marker.group("why") if marker else None))
    return out


def test_the_pages_have_python_blocks_and_markers_say_why():
    blocks = {page.name: python_blocks(page) for page in PAGES}
    assert blocks["README.md"] and all(why is None for _, _, why in blocks["README.md"])
    assert sum(len(b) for b in blocks.values()) >= 10
    for page, page_blocks in blocks.items():
        for line, _, why in page_blocks:
            assert why is None or len(why) > 10, f"{page}:{line}: say why the block is not run"


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.name)
def test_python_blocks_run_as_written(page, tmp_path):
    for entry in ROOT.iterdir():                # the repository's files, seen from a scratch directory
        if entry.name not in (".git", ".venv"):
            (tmp_path / entry.name).symlink_to(entry)
    runnable = [(f"{page.relative_to(ROOT)}:{line}", code) for line, code, why in python_blocks(page)
                if why is None]
    done = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(runnable), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    if page.name == "README.md":
        assert "480 http://example/grid/house1 1" in done.stdout    # what its comment says it prints
