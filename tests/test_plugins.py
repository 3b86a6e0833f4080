"""The plugin layer: every hook documented, built-ins registered as plugins."""

import re
from pathlib import Path

from spaseq_plugin import hookspecs
from spaseq_plugin.plugins import plugin_list, plugin_manager, registry

DOCS = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


def hook_names():
    return {name for name in dir(hookspecs) if name.startswith("spaseq_")}


def test_every_hook_is_documented_and_every_documented_hook_exists():
    documented = set(re.findall(r"^### (spaseq_\w+)$", DOCS.read_text(), re.M))
    assert documented == hook_names()


def test_every_hook_has_a_one_line_docstring():
    for name in hook_names():
        doc = getattr(hookspecs, name).__doc__
        assert doc and "\n" not in doc.strip(), name


def test_builtins_are_default_plugins_through_the_same_hooks():
    names = {p["name"] for p in plugin_list()}
    assert {"spaseq_plugin.stores.oxigraph", "spaseq_plugin.streams.files", "spaseq_plugin.output.formats"} <= names
    reg = registry()
    assert "oxigraph" in reg.stores and "file" in reg.sources
    assert {"jsonl", "csv", "tsv", "json", "trig"} <= set(reg.sinks)
    assert plugin_manager().project_name == "spaseq"
