"""The examples in the package's docstrings run and say what they show
(``>>>`` lines in runtime/engine.py, runtime/aio.py, plugins.py, ...)."""

from __future__ import annotations

import doctest
import importlib

import pytest

from test_layout import _modules

# modules whose docstrings must hold examples: a docstring edit must not drop them silently
MUST_HAVE_EXAMPLES = {"spaseq_plugin.runtime.engine", "spaseq_plugin.runtime.aio"}


def _with_examples() -> list[str]:
    """The package's modules whose source holds a ``>>>`` line."""
    return sorted(name for name, path in _modules().items() if ">>> " in path.read_text(encoding="utf-8"))


def test_the_modules_with_examples_are_found():
    assert MUST_HAVE_EXAMPLES <= set(_with_examples())


@pytest.mark.parametrize("name", _with_examples())
def test_docstring_examples(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = [t for t in finder.find(module) if t.examples]
    assert tests, f"{name} has '>>> ' in its source but no docstring example doctest finds"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
    assert result.attempted >= 1
