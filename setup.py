"""Builds the compiled hot path: Cython compiles the modules of
``spaseq_plugin/compiled.py``'s HOT_SOURCES, in its pure-Python mode, from the
same ``.py`` files that run interpreted (that module says how the two builds
live side by side).  Without a working C compiler, without Cython, or with
SPASEQ_PURE=1, the package installs as pure Python, with a one-line notice.
The rest of the configuration is in pyproject.toml."""

import importlib.util
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("_spaseq_compiled", os.path.join(ROOT, "spaseq_plugin", "compiled.py"))
compiled = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compiled)

# Semantics stay those of the interpreted module: annotations are documentation, not C
# types (a parameter annotated ``float`` must not turn an int into a double).
DIRECTIVES = {"language_level": 3, "annotation_typing": False}


def _notice(why: str) -> None:
    print(f"spaseq: {why}: installing the pure-Python build (slower, same results)", file=sys.stderr)


class CompileHotPath(build_ext):
    """Compiles the hot modules when it can; names each binary after its source's hash."""

    def run(self):
        if compiled.pure_requested():
            _notice(f"{compiled.PURE_ENV} is set")
            return
        try:
            from Cython.Build import cythonize
        except ImportError:
            _notice("Cython is not installed")
            return
        self._failed = False
        for module in compiled.HOT_SOURCES:     # a wheel holds this build's binaries or none
            *package, stem = module.split(".")
            folder = os.path.join(self.build_lib, *package)
            for name in compiled.compiled_files(folder, stem):
                os.remove(os.path.join(folder, name))
        translated = cythonize(self.extensions, build_dir=os.path.join("build", "cython"),
                               compiler_directives=DIRECTIVES, quiet=True)
        for ext, c_ext in zip(self.extensions, translated):    # keep setuptools' Extension objects
            ext.sources = c_ext.sources
        super().run()

    def build_extension(self, ext):
        if self._failed:
            return
        try:
            super().build_extension(ext)
        except Exception as error:      # no compiler, or one that fails: the pure build remains
            self._failed = True
            detail = (str(error).splitlines() or [""])[0]
            _notice(f"compiling {ext.name} failed ({type(error).__name__}: {detail[:100]})")
            return
        _remove_other_builds(self.get_ext_fullpath(ext.name))

    def copy_extensions_to_source(self):
        super().copy_extensions_to_source()
        build_py = self.get_finalized_command("build_py")
        for ext in self.extensions:
            _remove_other_builds(self._get_inplace_equivalent(build_py, ext)[0])

    def get_ext_filename(self, fullname):
        # called with a module's full name, and (by distutils) with its last component
        filename = super().get_ext_filename(fullname)
        module = fullname if fullname in compiled.HOT_SOURCES else _BY_STEM.get(fullname)
        if module is None:
            return filename
        folder, name = os.path.split(filename)
        stem, dot, suffix = name.partition(".")
        digest = compiled.source_hash(os.path.join(ROOT, compiled.HOT_SOURCES[module]))
        return os.path.join(folder, compiled.compiled_name(stem, digest, dot + suffix))


_BY_STEM = {module.rpartition(".")[2]: module for module in compiled.HOT_SOURCES}


def _remove_other_builds(binary: str) -> None:
    """Builds of the same module from other versions of its source: never loaded, so never kept."""
    folder, name = os.path.split(binary)
    if not os.path.exists(binary):
        return
    for other in compiled.compiled_files(folder, name.partition(".")[0]):
        if other != name:
            os.remove(os.path.join(folder, other))


setup(
    ext_modules=[Extension(module, [source], optional=True) for module, source in compiled.HOT_SOURCES.items()],
    cmdclass={"build_ext": CompileHotPath},
)
