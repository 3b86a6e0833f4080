"""The compiled hot path: one source, two builds, and never a stale binary.

The per-event modules (``HOT_SOURCES``) are plain Python that Cython also
compiles, in its pure-Python mode, when the package is installed on a machine
with a C compiler (``setup.py``): the same ``.py`` file is the interpreted
fallback and the compiled module, so there is no second copy to keep in step.

A compiled module is installed beside its source as ``name.<hash><suffix>``
(``nfa_runtime.0123456789abcdef.cpython-311-x86_64-linux-gnu.so``), where the
hash is the start of the SHA-256 of the source it was built from.  Python's own
import system ignores that name; :class:`_CompiledFinder`, installed first on
``sys.meta_path`` by the package, loads it only when the hash is the one of the
source file as it is now.  An edited source (an editable install, every day)
therefore runs interpreted, with a :class:`StaleBuildWarning`, until
``pip install -e .`` builds it again.  ``SPASEQ_PURE=1`` turns compiled modules
off altogether.  ``spaseq --version`` tells which build runs (:func:`describe`).

This module imports nothing from the package: ``setup.py`` loads it by path.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
import warnings

#: module -> its source file, relative to the project root (pyproject.toml's package-dir)
HOT_SOURCES = {
    "spaseq_plugin.runtime.nfa_runtime": "spaseq_plugin/runtime/nfa_runtime.py",
    "spaseq_plugin.evaluators.spectra": "spaseq_plugin/evaluators/spectra.py",
    "spaseq_plugin.evaluators.sparql_values": "spaseq_plugin/evaluators/sparql_values.py",
    "spaseq_plugin.language.filters": "spaseq_plugin/language/filters.py",
    "spaseq_plugin.runtime.results": "spaseq_plugin/runtime/results.py",
    "spaseq_plugin.output.jsonl": "spaseq_plugin/output/jsonl.py",
    "spaseq_plugin.streams.reader": "streams/reader.py",
    "spaseq_plugin.events": "spaseq_plugin/events.py",
}
# Not streams/files.py: pluggy takes only plain Python functions as hook implementations,
# so its spaseq_stream_sources hook would vanish compiled (and its per-event work is the
# reader's: streams/reader.py is here).
PURE_ENV = "SPASEQ_PURE"
_HASH_DIGITS = 16
# why each hot module imported so far runs interpreted (absent: compiled)
_pure_reasons: dict[str, str] = {}


class StaleBuildWarning(RuntimeWarning):
    """A compiled module was built from another version of its source: the source runs."""


def source_hash(path: str) -> str:
    """The hash a compiled module's file name carries: of its source's bytes."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:_HASH_DIGITS]


def compiled_name(stem: str, digest: str, suffix: str) -> str:
    """The file name of ``stem``'s module compiled from a source of hash ``digest``."""
    return f"{stem}.{digest}{suffix}"


def compiled_files(folder: str, stem: str) -> list[str]:
    """The compiled builds of module ``stem`` in ``folder``, whatever source they came from."""
    pattern = re.compile(re.escape(stem) + r"\.[0-9a-f]{%d}(%s)$" % (
        _HASH_DIGITS, "|".join(re.escape(s) for s in importlib.machinery.EXTENSION_SUFFIXES)))
    try:
        return sorted(name for name in os.listdir(folder) if pattern.match(name))
    except OSError:
        return []


class _Declared:
    """What ``shadow.declare`` gives: an attribute ``shadow.cclass`` turns into a slot."""
    __slots__ = ()


class shadow:
    """What a hot module uses of Cython's ``cython`` module when it runs interpreted
    (in place of Cython's own, installed or not): typed declarations that change
    nothing.  Compiled, ``import cython`` is Cython's own, and these declarations
    make C types.

    A typed class declares each attribute once, ``name = cython.declare(type,
    visibility="public")``: compiled, a C field of the extension type;
    interpreted, a slot (``cclass`` makes the class a ``__slots__`` class of the
    declared names).  A module global declared with its value,
    ``name = cython.declare(type, value)``, is that value."""
    compiled = False
    bint = bool
    Py_ssize_t = int
    longlong = int
    uchar = int
    Py_UCS4 = str
    double = float

    @staticmethod
    def declare(kind=None, value=_Declared, visibility=None):
        return _Declared() if value is _Declared else value

    @staticmethod
    def cclass(cls):
        namespace = dict(vars(cls))
        slots = tuple(name for name, value in namespace.items() if isinstance(value, _Declared))
        if not slots:
            return cls
        for name in (*slots, "__dict__", "__weakref__"):
            namespace.pop(name, None)
        namespace["__slots__"] = slots
        namespace["__qualname__"] = cls.__qualname__
        return type(cls)(cls.__name__, cls.__bases__, namespace)

    @staticmethod
    def cfunc(function):
        return function

    ccall = cfunc

    @staticmethod
    def locals(**types):
        return lambda function: function


def pure_requested() -> bool:
    return os.environ.get(PURE_ENV, "") not in ("", "0")


class _CompiledFinder:
    """Finds a hot module's compiled build when it matches the source beside it."""

    @staticmethod
    def find_spec(fullname, path, target=None):
        if fullname not in HOT_SOURCES or not path:
            return None
        stem = fullname.rpartition(".")[2]
        folder = next((f for f in path if os.path.isfile(os.path.join(f, stem + ".py"))), None)
        if folder is None:
            return None
        if pure_requested():
            _pure_reasons[fullname] = f"{PURE_ENV} is set"
            return None
        built = compiled_files(folder, stem)
        if not built:
            _pure_reasons[fullname] = "not compiled"
            return None
        source = os.path.join(folder, stem + ".py")
        digest = source_hash(source)
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            name = compiled_name(stem, digest, suffix)
            if name in built:
                binary = os.path.join(folder, name)
                loader = importlib.machinery.ExtensionFileLoader(fullname, binary)
                return importlib.util.spec_from_file_location(fullname, binary, loader=loader)
        _pure_reasons[fullname] = f"{HOT_SOURCES[fullname]} changed since it was compiled"
        warnings.warn(f"spaseq: {source} changed since it was compiled: it runs interpreted "
                      "until `pip install -e .` (or `pip install .`) compiles it again",
                      StaleBuildWarning, stacklevel=2)
        return None


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once), before any hot module is imported."""
    if not any(isinstance(f, _CompiledFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _CompiledFinder())


def status() -> dict[str, str | None]:
    """Each hot module -> why it runs interpreted, or None when it runs compiled."""
    result = {}
    for module in HOT_SOURCES:
        loaded = importlib.import_module(module)
        compiled = isinstance(getattr(loaded, "__loader__", None), importlib.machinery.ExtensionFileLoader)
        result[module] = None if compiled else _pure_reasons.get(module, "not compiled")
    return result


def describe() -> str:
    """Which build runs, in a line: compiled, pure Python, or partly compiled and why."""
    pure = {module: reason for module, reason in status().items() if reason is not None}
    if not pure:
        return f"compiled (Cython): {len(HOT_SOURCES)} hot modules"
    if len(pure) == len(HOT_SOURCES) and len(set(pure.values())) == 1:
        return f"pure Python ({next(iter(pure.values()))})"
    return (f"partly compiled: {len(HOT_SOURCES) - len(pure)}/{len(HOT_SOURCES)} hot modules; interpreted: "
            + "; ".join(f"{m.rpartition('.')[2]} ({reason})" for m, reason in pure.items()))
