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
                                       "from spaseq_plugin.kb import KnowledgeBase\n"
                                       "from spaseq_plugin.plugins import KbStore, ResultSink, StreamSource\n"
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


def named(module):
    return f"plugin {module} (module {module}, package {module.replace('_', '-')} 1.0) "


# Which plugin's hook raised is known, not guessed from the frames it went through: the
# wrappers one decorator makes of two plugins' hooks share one code object.
SHARED_DECORATOR = """import functools
def logged(function):
    @functools.wraps(function)
    def logging(*args, **kwargs):
        return function(*args, **kwargs)
    return logging
"""
LOGGED = "from shared_decorator import logged\n@hookimpl\n@logged\ndef spaseq_configure(config):\n    {body}\n"


@pytest.mark.parametrize("failing", ["a_logged", "b_logged"])      # (pluggy calls b_logged's first)
def test_of_two_plugins_whose_hooks_one_decorator_wraps_the_one_that_raised_is_named(tmp_path, failing):
    (tmp_path / "shared_decorator.py").write_text(SHARED_DECORATOR)
    for module in ("a_logged", "b_logged"):
        fake_plugin(tmp_path, module, LOGGED.format(
            body="raise RuntimeError('no service')" if module == failing else "pass"))
    p = spaseq(tmp_path, "plugins")
    assert p.returncode == 1
    assert p.stderr == ("spaseq: error: " + named(failing) +
                        "failed in spaseq_configure: RuntimeError: no service\n"), p.stderr


def test_a_plugins_hook_that_is_an_object_not_a_function_is_named(tmp_path):
    site = fake_plugin(tmp_path, "broken", "class Configure:\n    def __call__(self, config):\n"
                                           "        raise RuntimeError('no service')\n"
                                           # (pluggy takes a callable object as a staticmethod)
                                           "spaseq_configure = hookimpl(staticmethod(Configure()))\n")
    p = spaseq(site, "plugins")
    assert p.returncode == 1
    assert p.stderr == "spaseq: error: " + NAMED + "failed in spaseq_configure: RuntimeError: no service\n", \
        p.stderr


WRAPPING = {   # what a hook wrapper does with the error it is thrown -> (its code, the plugin named, the error)
    "passes it on": ("@hookimpl(wrapper=True)\ndef spaseq_configure(config):\n    try:\n        return (yield)\n"
                     "    except RuntimeError as error:\n        print('seen', repr(error))\n        raise\n",
                     "broken", "RuntimeError: no service"),
    "raises its own": ("@hookimpl(wrapper=True)\ndef spaseq_configure(config):\n    try:\n        return (yield)\n"
                       "    except RuntimeError as error:\n        print('seen', repr(error))\n"
                       "        raise ValueError('refused') from error\n",
                       "wrapping", "ValueError: refused"),
    "passes it on, old-style": ("@hookimpl(hookwrapper=True)\ndef spaseq_configure(config):\n"
                                "    outcome = yield\n    print('seen', repr(outcome.exception))\n"
                                "    outcome.get_result()\n", "broken", "RuntimeError: no service"),
}


@pytest.mark.parametrize("wrapping", WRAPPING)
def test_a_hook_wrapper_sees_the_error_raised_and_is_named_only_for_its_own(tmp_path, wrapping):
    code, culprit, error = WRAPPING[wrapping]
    fake_plugin(tmp_path, "broken", "@hookimpl\ndef spaseq_configure(config):\n    raise RuntimeError('no service')\n")
    fake_plugin(tmp_path, "wrapping", code)
    p = spaseq(tmp_path, "plugins")
    assert p.returncode == 1
    assert p.stdout.startswith("seen RuntimeError('no service')\n")
    assert p.stderr.splitlines()[-1] == "spaseq: error: " + named(culprit) + "failed in spaseq_configure: " + error, \
        p.stderr


# What a plugin provides fails when spaseq calls it, later than its hook: the error names
# the plugin and the call, and the run stops with status 1, never as an internal error.
EVENT = ("Event(stream, {t}, (ox.Triple(ox.NamedNode('http://example.org/a{t}'), "
         "ox.NamedNode('http://example.org/p'), ox.Literal({t})),))")
SOURCE = "@hookimpl\ndef spaseq_stream_sources():\n    return [StreamSource('bad', open_source)]\n"
SINK = ("@hookimpl\ndef spaseq_result_sinks():\n"
        "    return [ResultSink('bad', lambda target, variables, options: Writer(), file_like=False)]\n")
KB_STORE = ("@hookimpl\ndef spaseq_kb_stores():\n    return [KbStore('badkb', open_kb)]\n")
FAILING = {   # what fails -> (the plugin's code, the arguments of spaseq run, what the message says)
    "source open": ("def open_source(location, stream):\n    raise RuntimeError('cannot connect to ' + location)\n"
                    + SOURCE, ["--stream", "S=bad:host"],
                    "failed in stream source 'bad:' open(): RuntimeError: cannot connect to host"),
    "source events": ("def open_source(location, stream):\n    yield " + EVENT.format(t=1) + "\n"
                      "    raise RuntimeError('connection lost')\n" + SOURCE, ["--stream", "S=bad:host"],
                      "failed in stream source 'bad:' reading events: RuntimeError: connection lost"),
    "source object": ("class Source:\n    def __iter__(self):\n        return self\n"
                      "    def __next__(self):\n        return {}['position']\n"
                      "    def close(self):\n        pass\n"
                      "def open_source(location, stream):\n    return Source()\n" + SOURCE,
                      ["--stream", "S=bad:host"],
                      "failed in stream source 'bad:' reading events: KeyError: 'position'"),
    "sink open": ("def Writer():\n    raise RuntimeError('no bucket')\n" + SINK, ["--sink", "bad:bucket"],
                  "failed in result sink 'bad' open(): RuntimeError: no bucket"),
    "sink write": ("class Writer:\n    def write(self, result):\n        raise RuntimeError('quota exceeded')\n"
                   "    def close(self):\n        pass\n" + SINK, ["--sink", "bad:bucket"],
                   "failed in result sink 'bad' write(): RuntimeError: quota exceeded"),
    "sink close": ("class Writer:\n    def write(self, result):\n        pass\n"
                   "    def close(self):\n        raise RuntimeError('upload failed')\n" + SINK,
                   ["--sink", "bad:bucket"],
                   "failed in result sink 'bad' close(): RuntimeError: upload failed"),
    "kb open": ("def open_kb(location):\n    raise RuntimeError('no database ' + location)\n" + KB_STORE,
                ["--kb", "badkb:db1"], "failed in KB store 'badkb:' open(): RuntimeError: no database db1"),
    "kb query": ("class Kb(KnowledgeBase):\n    def graph_names(self):\n        return ['http://example.org/kb']\n"
                 "    def select(self, sparql):\n        raise RuntimeError('timed out')\n"
                 "    def quads(self, graph=None):\n        yield from ()\n        raise RuntimeError('timed out')\n"
                 "def open_kb(location):\n    return Kb()\n" + KB_STORE,    # (the evaluator copies the graph)
                 ["--kb", "badkb:db1"], "failed in KB store 'badkb:' quads(): RuntimeError: timed out"),
    "function": ("def is_big(term):\n    return ox.Literal(int(term.value) > 1)\n"      # (an IRI has no int)
                 "@hookimpl\ndef spaseq_sparql_functions():\n    return {'http://example.org/fn#isBig': is_big}\n",
                 [], "failed in FILTER function <http://example.org/fn#isBig> called: "
                     "ValueError: invalid literal for int() with base 10: 'http://example/c'"),
}
FUNCTION_QUERY = QUERY.replace("?s ?p ?v }", "?s ?p ?v FILTER(<http://example.org/fn#isBig>(?v)) }")
KB_QUERY = """SELECT ?s ?o WITHIN 10 SECONDS
FROM STREAM S <http://example.org/s>
WHERE { SEQ (A) DEFINE GPM A ON S { ?s ?p ?v GRAPH <http://example.org/kb> { ?s ?q ?o } } }
"""


def stream_file(tmp_path, count=3):
    path = tmp_path / "s.trig"
    path.write_text("@prefix : <http://example/> . @prefix prov: <http://www.w3.org/ns/prov#> .\n"
                    + "".join(f":e{i} prov:generatedAtTime {i} . :e{i} {{ :a{i} :b :c . }}\n"
                              for i in range(1, count + 1)))
    return path


@pytest.mark.parametrize("fault", FAILING)
def test_a_plugins_source_sink_or_store_failing_when_called_is_named(tmp_path, fault):
    code, arguments, message = FAILING[fault]
    site = fake_plugin(tmp_path, "broken", code)
    (tmp_path / "q.rq").write_text(KB_QUERY if fault.startswith("kb") else
                                   FUNCTION_QUERY if fault == "function" else QUERY)
    if "--stream" not in arguments:
        arguments = arguments + ["--stream", "S=" + str(stream_file(tmp_path))]
    p = spaseq(site, "run", str(tmp_path / "q.rq"), *arguments)
    assert p.returncode == 1, p.stderr
    assert p.stderr.splitlines()[-1] == "spaseq: error: " + NAMED + message, p.stderr
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("fault", ["sink write", "sink close"])
def test_a_plugins_sink_failing_costs_the_other_outputs_nothing(tmp_path, fault):
    code, arguments, message = FAILING[fault]
    site = fake_plugin(tmp_path, "broken", code)
    (tmp_path / "q.rq").write_text(QUERY)
    out = tmp_path / "out.jsonl"
    p = spaseq(site, "run", str(tmp_path / "q.rq"), "--stream", "S=" + str(stream_file(tmp_path)),
               "-o", str(out), *arguments)
    assert p.returncode == 1 and p.stderr.splitlines()[-1].endswith(message), p.stderr
    # the results before the failure, in full (write: the first one; close: all three)
    assert len(out.read_text().splitlines()) == (1 if fault == "sink write" else 3)
    assert f"spaseq: {1 if fault == 'sink write' else 3} events" in p.stderr     # and the summary


def test_a_plugins_own_spaseq_error_is_passed_on_as_it_is(tmp_path):
    # (as before: the plugin reports the user's mistake, which is not the plugin's failure)
    site = fake_plugin(tmp_path, "broken", "from spaseq_plugin.errors import UsageError\n"
                                           "def open_source(location, stream):\n"
                                           "    raise UsageError('bad: expects host:port, not ' + location)\n"
                                           + SOURCE)
    (tmp_path / "q.rq").write_text(QUERY)
    p = spaseq(site, "run", str(tmp_path / "q.rq"), "--stream", "S=bad:host")
    assert p.returncode == 2 and p.stderr == "spaseq: --stream S=bad:host: bad: expects host:port, not host\n"


ENGINE_CLOSE = """
import pyoxigraph as ox
from spaseq_plugin import Engine
from spaseq_plugin.errors import PluginError
engine = Engine(open({query!r}).read())
p = ox.NamedNode("http://example.org/p")
for t in (1, 2):        # (stream T sends nothing: time 2 is final only at close)
    engine.push("http://example.org/s", t, [ox.Triple(ox.NamedNode(f"http://example.org/a{{t}}"), p, ox.Literal(t))])
try:
    engine.close()
except PluginError as error:
    print("raised:", error)
    print("results:", [r.bindings["s"].value for r in error.results])
print("again:", engine.close())
"""


def test_engine_close_keeps_its_results_when_a_plugin_fails_as_the_query_stops(tmp_path):
    site = fake_plugin(tmp_path, "broken", "@hookimpl\ndef spaseq_query_stopped(engine):\n"
                                           "    raise ValueError('cannot upload')\n")
    (tmp_path / "q.rq").write_text(QUERY.replace("FROM STREAM S <http://example.org/s>", "FROM STREAM S "
                                                 "<http://example.org/s> FROM STREAM T <http://example.org/t>"))
    env = dict(os.environ, PYTHONPATH=str(site))
    p = subprocess.run([sys.executable, "-c", ENGINE_CLOSE.format(query=str(tmp_path / "q.rq"))],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "raised: " + NAMED + "failed in spaseq_query_stopped: ValueError: cannot upload",
        "results: ['http://example.org/a2']",       # (time 1's came from the second push)
        "again: []"]
