"""A real third-party plugin package, installed the way users install one,
adds a stream source and a FILTER function through the entry point."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parents[1] / "examples" / "spaseq-example-plugin"


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                           "--target", str(target), str(PLUGIN)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.fail("cannot install the example plugin: " + proc.stderr[-800:])
    return target


def spaseq(plugin_path, *args):
    env = dict(os.environ, PYTHONPATH=str(plugin_path))
    return subprocess.run([sys.executable, "-m", "spaseq_plugin", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_plugin_is_listed(plugin_path):
    p = spaseq(plugin_path, "plugins", "--json")
    listing = {item["name"]: item for item in json.loads(p.stdout)}
    assert listing["example"]["package"] == "spaseq-example-plugin"
    assert listing["example"]["version"] == "0.1.0"
    assert set(listing["example"]["provides"]) == {"stream source counter:", "function <http://example.org/fn#isEven>"}


def test_query_through_the_plugin_source_and_function(plugin_path):
    p = spaseq(plugin_path, "run", str(PLUGIN / "query.rq"), "--stream", "S=counter:6")
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    assert [(r["time"], r["bindings"]["a"]["value"], r["bindings"]["b"]["value"]) for r in rows] == [
        (4, "2", "4"), (6, "4", "6")]


def test_a_misspelt_hook_fails_loudly(tmp_path):
    (tmp_path / "bad_plugin.py").write_text(
        "from spaseq_plugin import hookimpl\n@hookimpl\ndef spaseq_stream_source():\n    return []\n")
    dist = tmp_path / "bad_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: bad-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[spaseq]\nbad = bad_plugin\n")
    p = spaseq(tmp_path, "plugins")
    assert p.returncode == 1
    assert "spaseq_stream_source" in p.stderr and "Traceback" not in p.stderr
