"""The compiled hot path: one source, a compiled build that never shadows an edited file,
the pure build beside it with the same results, and an install without a C compiler."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import spaseq_plugin
from spaseq_plugin import compiled

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "quickstart"
PEERS_ANY = ROOT.parent / "shared" / "data" / "peers-stock" / "v-shape-skip-till-any.rq"


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE_ENV}
    env.update(extra)
    return env


def _spaseq(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spaseq_plugin", *args], capture_output=True, text=True,
                          env=env or _env(), cwd=cwd, timeout=300)


def _is_compiled() -> bool:
    return all(reason is None for reason in compiled.status().values())


def test_version_says_which_build_runs():
    pure = _spaseq("--version", env=_env(SPASEQ_PURE="1"))
    assert pure.returncode == 0
    assert pure.stdout.strip() == f"spaseq {spaseq_plugin.__version__} (pure Python (SPASEQ_PURE is set))"
    default = _spaseq("--version")
    if _is_compiled():
        assert f"(compiled (Cython): {len(compiled.HOT_SOURCES)} hot modules)" in default.stdout
    else:
        assert "pure Python" in default.stdout or "partly compiled" in default.stdout


@pytest.mark.skipif(not os.environ.get("CI"), reason="CI checks that its install compiled the hot path")
def test_ci_runs_the_compiled_build():
    assert compiled.status() == {module: None for module in compiled.HOT_SOURCES}


def test_every_hot_module_runs_interpreted_without_cython_installed():
    """The pure build where Cython is not installed (pip builds it in an isolated
    environment): ``compiled.shadow`` stands in for each declaration a hot module uses."""
    modules = ", ".join(compiled.HOT_SOURCES)
    probe = subprocess.run([sys.executable, "-c", f"import sys; sys.modules['cython'] = None; import {modules}; "
                            f"print(*[sys.modules[m].__file__.endswith('.py') for m in {list(compiled.HOT_SOURCES)}])"],
                           capture_output=True, text=True, env=_env(SPASEQ_PURE="1"), timeout=120)
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert probe.stdout.split() == ["True"] * len(compiled.HOT_SOURCES)


_TYPED = "import spaseq_plugin.runtime.nfa_runtime as r, spaseq_plugin.evaluators.spectra as s, " \
         "spaseq_plugin.runtime.results as o, spaseq_plugin.evaluators.sparql_values as v, " \
         "spaseq_plugin.output.jsonl as j; " \
         "print(*['static' if c.__flags__ & (1 << 9) == 0 else 'slots' if '__slots__' in vars(c) else 'dict' " \
         "for c in (r.Runtime, r.Batcher, r._Step, r.Probe, r.Run, r.Match, r._Partition, r._Ages, r._Bucket, r._Waiting, r._Pending, " \
         "s.SpectraEvaluator, s._EventState, o.Result, o.Projector, v.RevisitedTermCache, j.JsonLinesWriter)])"


def test_typed_classes_are_extension_types_compiled_and_slots_classes_interpreted():
    """The runtime, its input's batcher, its compiled edges and their probes, runs, matches, partitions and
    their indexes and runs by age, the SPECTRA evaluator and its event state, results and the projector
    that makes them, the term caches of FILTER values, the JSON-lines writer: Cython
    extension types (static types, C attributes) in the compiled build; plain slots
    classes from the same source interpreted, without Cython installed."""
    pure = subprocess.run([sys.executable, "-c", _TYPED], capture_output=True, text=True,
                          env=_env(SPASEQ_PURE="1"), timeout=120)
    assert pure.returncode == 0, pure.stderr
    assert pure.stdout.split() == ["slots"] * 17
    if importlib.util.find_spec("cython") is None:      # the shadow of compiled.py stands in
        assert "from ..compiled import shadow as cython" in (ROOT / compiled.HOT_SOURCES[
            "spaseq_plugin.runtime.nfa_runtime"]).read_text()
    if _is_compiled():
        default = subprocess.run([sys.executable, "-c", _TYPED], capture_output=True, text=True,
                                 env=_env(), timeout=120)
        assert default.returncode == 0, default.stderr
        assert default.stdout.split() == ["static"] * 17


def _copy_package(target: Path) -> Path:
    """The installed package (sources and binaries) as one plain folder tree."""
    package = target / "spaseq_plugin"
    shutil.copytree(Path(spaseq_plugin.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    for sub in ("stores", "streams"):
        source = Path(importlib.import_module(f"spaseq_plugin.{sub}").__file__).parent
        if source != package / sub:
            shutil.copytree(source, package / sub, ignore=shutil.ignore_patterns("__pycache__"),
                            dirs_exist_ok=True)
    return package


@pytest.mark.skipif(not _is_compiled(), reason="the hot path is not compiled here")
def test_an_edited_source_runs_interpreted_with_a_warning(tmp_path):
    """Edit one hot module of a compiled tree: that module runs from its source (a
    warning says so), the others stay compiled, and results are right."""
    package = _copy_package(tmp_path)
    filters = package / "language" / "filters.py"
    filters.write_text(filters.read_text() + "\nEDITED = True\n")
    env = _env(PYTHONPATH=str(tmp_path))
    probe = subprocess.run([sys.executable, "-c", "import spaseq_plugin.language.filters as f, "
                            "spaseq_plugin.runtime.nfa_runtime as r; print(f.EDITED, f.__file__, r.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert probe.returncode == 0, probe.stderr
    edited, filters_file, runtime_file = probe.stdout.split()
    assert edited == "True" and filters_file == str(filters)
    assert runtime_file.startswith(str(package / "runtime" / "nfa_runtime.")) and runtime_file.endswith(".so")
    assert "StaleBuildWarning" in probe.stderr and "filters.py changed since it was compiled" in probe.stderr
    version = _spaseq("--version", env=env, cwd=tmp_path)
    hot = len(compiled.HOT_SOURCES)
    assert f"partly compiled: {hot - 1}/{hot} hot modules; interpreted: filters (spaseq_plugin/language/filters.py " \
           "changed since it was compiled)" in version.stdout.replace("\n", " ")
    run = _spaseq("run", str(EXAMPLE / "query.rq"), "--stream", f"S1={EXAMPLE / 'power.trig'}",
                  "--stream", f"S2={EXAMPLE / 'weather.trig'}", "--stream", f"S3={EXAMPLE / 'storage.trig'}",
                  "--kb", str(EXAMPLE / "kb.trig"), "--quiet", env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout == _spaseq("run", str(EXAMPLE / "query.rq"), "--stream", f"S1={EXAMPLE / 'power.trig'}",
                                 "--stream", f"S2={EXAMPLE / 'weather.trig'}", "--stream",
                                 f"S3={EXAMPLE / 'storage.trig'}", "--kb", str(EXAMPLE / "kb.trig"),
                                 "--quiet").stdout


def test_a_stale_binary_is_never_loaded(tmp_path):
    """A binary named after another version of the source is passed over, with a warning."""
    (tmp_path / "filters.py").write_text("X = 1\n")
    (tmp_path / f"filters.0123456789abcdef{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"")
    with pytest.warns(compiled.StaleBuildWarning, match="changed since it was compiled"):
        assert compiled._CompiledFinder.find_spec("spaseq_plugin.language.filters", [str(tmp_path)]) is None


@pytest.mark.skipif(not PEERS_ANY.exists(), reason="needs ../shared/data/peers-stock")
def test_compiled_and_pure_builds_write_the_same_results(tmp_path):
    """The peers' skip-till-any V-shape on 1,500 events, both builds, byte for byte."""
    from spaseq_plugin.bench.workloads import peers_stock_events, write_trig
    stream = tmp_path / "peers.trig"
    write_trig(peers_stock_events(1_500), stream)
    args = ("run", str(PEERS_ANY), "--stream", f"S={stream}", "--quiet")
    pure, default = _spaseq(*args, env=_env(SPASEQ_PURE="1")), _spaseq(*args)
    assert pure.returncode == 0 and default.returncode == 0, pure.stderr + default.stderr
    assert pure.stdout == default.stdout and pure.stdout.count("\n") > 1_000


@pytest.mark.slow
def test_without_a_c_compiler_the_package_installs_as_pure_python(tmp_path):
    """pip builds the wheel with a compiler that always fails: a one-line notice, no
    binary in the wheel, and the package works."""
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(tmp_path), str(ROOT)],
                           capture_output=True, text=True, env=_env(CC="/bin/false"), timeout=600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    notices = [line.strip() for line in built.stdout.splitlines() + built.stderr.splitlines()
               if line.strip().startswith("spaseq: ")]
    assert len(notices) == 1 and notices[0].endswith("installing the pure-Python build (slower, same results)")
    wheel = next(tmp_path.glob("*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "spaseq_plugin/runtime/nfa_runtime.py" in names and "spaseq_plugin/streams/files.py" in names
    assert not [name for name in names if name.endswith((".so", ".pyd"))]
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(wheel).extractall(unpacked)
    version = _spaseq("--version", env=_env(PYTHONPATH=str(unpacked)), cwd=unpacked)
    assert version.returncode == 0 and "(pure Python (not compiled))" in version.stdout
