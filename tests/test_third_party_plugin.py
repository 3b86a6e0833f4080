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


def fake_plugin(site, module, source):
    """A package with module ``module`` and entry point ``module``, as pip would install it into ``site``."""
    (site / f"{module}.py").write_text("from spaseq_plugin import Event, hookimpl\n"
                                       "from spaseq_plugin.plugins import StreamSource\n"
                                       "import pyoxigraph as ox\n" + source)
    dist = site / f"{module}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[spaseq]\n{module} = {module}\n")
    return site


def source_plugin(site, module, scheme):
    """A plugin whose source ``scheme:`` gives one event, on subject <http://example.org/MODULE>."""
    return fake_plugin(site, module, f"""
def open_source(location, stream):
    yield Event(stream, 1, (ox.Triple(ox.NamedNode("http://example.org/{module}"),
                                      ox.NamedNode("http://example.org/p"), ox.Literal(1)),))
@hookimpl
def spaseq_stream_sources():
    return [StreamSource("{scheme}", open_source)]
""")


QUERY = """SELECT ?s WITHIN 10 SECONDS
FROM STREAM S <http://example.org/s>
WHERE { SEQ (A) DEFINE GPM A ON S { ?s ?p ?v } }
"""


def subjects(p):
    assert p.returncode == 0, p.stderr
    return [json.loads(line)["bindings"]["s"]["value"] for line in p.stdout.splitlines()]


def test_an_installed_plugin_replaces_a_builtin(tmp_path):
    (tmp_path / "site").mkdir()
    site = source_plugin(tmp_path / "site", "my_files", "file")
    (tmp_path / "q.rq").write_text(QUERY)
    (tmp_path / "s.trig").write_text("@prefix : <http://example/> . @prefix prov: <http://www.w3.org/ns/prov#> .\n"
                                     ":e1 prov:generatedAtTime 1 . :e1 { :a :b :c . }\n")
    for stream in ("S=file:" + str(tmp_path / "s.trig"), "S=" + str(tmp_path / "s.trig")):
        assert subjects(spaseq(site, "run", str(tmp_path / "q.rq"), "--stream", stream, "-q")) == [
            "http://example.org/my_files"]
    listing = {item["name"]: item for item in json.loads(spaseq(site, "plugins", "--json").stdout)}
    assert listing["spaseq_plugin.streams.files"]["replaced"] == {"stream source file:": "my_files"}
    assert listing["my_files"]["replaced"] == {}
    assert "stream source file:  (replaced by my_files)" in spaseq(site, "plugins").stdout


def test_of_two_plugins_with_one_scheme_the_later_entry_point_name_wins_wherever_installed(tmp_path):
    sites = []
    for module in ("b_counter", "a_counter"):
        (tmp_path / module).mkdir()
        sites.append(source_plugin(tmp_path / module, module, "counter"))
    (tmp_path / "q.rq").write_text(QUERY)
    for path in (os.pathsep.join(map(str, sites)), os.pathsep.join(map(str, sites[::-1]))):
        p = spaseq(path, "run", str(tmp_path / "q.rq"), "--stream", "S=counter:1")
        assert subjects(p) == ["http://example.org/b_counter"]
        assert "stream source counter: is provided by two plugins, plugin a_counter" in p.stderr
        assert "b_counter's is used" in p.stderr
        assert "a_counter  (a-counter 1.0)\n  stream source counter:  (replaced by b_counter)\n" in \
            spaseq(path, "plugins").stdout


BROKEN = {   # what is wrong -> (the plugin's code, what the message says)
    "import": ("import not_a_module_xyz\n", "cannot be loaded: ModuleNotFoundError: No module named"),
    "argument": ("@hookimpl\ndef spaseq_configure(cfg):\n    pass\n", "for hook 'spaseq_configure'"),
    "configure": ("@hookimpl\ndef spaseq_configure(config):\n    raise RuntimeError('no service')\n",
                  "failed in spaseq_configure: RuntimeError: no service"),
    "started": ("@hookimpl\ndef spaseq_query_started(engine):\n    raise ValueError('refused')\n",
                "failed in spaseq_query_started: ValueError: refused"),
    "raises": ("@hookimpl\ndef spaseq_stream_sources():\n    return [] + None\n",
               "failed in spaseq_stream_sources: TypeError"),
    "not a list": ("@hookimpl\ndef spaseq_stream_sources():\n    return StreamSource('one', None)\n",
                   "returned StreamSource from spaseq_stream_sources, not a list of StreamSource objects"),
}
NAMED = "plugin broken (module broken, package broken 1.0) "


@pytest.mark.parametrize("fault", BROKEN)
def test_a_broken_plugin_is_named_with_its_hook_not_reported_as_an_internal_error(tmp_path, fault):
    code, message = BROKEN[fault]
    site = fake_plugin(tmp_path, "broken", code)
    (tmp_path / "q.rq").write_text(QUERY)
    (tmp_path / "s.trig").write_text("@prefix : <http://example/> . @prefix prov: <http://www.w3.org/ns/prov#> .\n"
                                     ":e1 prov:generatedAtTime 1 . :e1 { :a :b :c . }\n")
    p = spaseq(site, "run", str(tmp_path / "q.rq"), "--stream", "S=" + str(tmp_path / "s.trig"))
    assert p.returncode == 1
    assert p.stderr.startswith("spaseq: error: " + NAMED) and message in p.stderr, p.stderr
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("fault", [fault for fault in BROKEN if fault != "started"])    # (it starts no query)
def test_spaseq_plugins_lists_the_others_and_names_the_broken_one(tmp_path, fault):
    code, message = BROKEN[fault]
    p = spaseq(fake_plugin(tmp_path, "broken", code), "plugins")
    assert "spaseq_plugin.streams.files  (spaseq-plugin (built in)" in p.stdout
    assert "\nbroken  (broken 1.0)\n" in p.stdout
    assert p.returncode == 1 and p.stderr.startswith("spaseq: error: " + NAMED) and message in p.stderr, p.stderr
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr


def test_a_plugin_failing_when_the_query_stops_costs_no_result(tmp_path):
    site = fake_plugin(tmp_path, "broken", "@hookimpl\ndef spaseq_query_stopped(engine):\n"
                                           "    print('results', engine.stats.results)\n"
                                           "    raise ValueError('cannot upload')\n")
    (tmp_path / "q.rq").write_text(QUERY)
    (tmp_path / "s.trig").write_text("@prefix : <http://example/> . @prefix prov: <http://www.w3.org/ns/prov#> .\n"
                                     + "".join(f":e{i} prov:generatedAtTime {i} . :e{i} {{ :a{i} :b :c . }}\n"
                                               for i in (1, 2, 3)))
    out = tmp_path / "out.jsonl"
    p = spaseq(site, "run", str(tmp_path / "q.rq"), "--stream", "S=" + str(tmp_path / "s.trig"), "-o", str(out))
    assert p.returncode == 1
    assert p.stdout == "results 3\n"        # the hook comes once the results are all counted
    assert len(out.read_text().splitlines()) == 3
    assert p.stderr.splitlines()[-1] == ("spaseq: error: " + NAMED +
                                         "failed in spaseq_query_stopped: ValueError: cannot upload")
