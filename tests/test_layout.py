"""The layout: the package's import graph has no cycles and the top level stays small."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "spaseq_plugin"
# source folder -> the package it is installed as (pyproject.toml's package-dir)
FOLDERS = {ROOT / "spaseq_plugin": PACKAGE, ROOT / "stores": f"{PACKAGE}.stores",
           ROOT / "streams": f"{PACKAGE}.streams"}


def _modules() -> dict[str, Path]:
    modules = {}
    for folder, package in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its file (function bodies too)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
                source = ".".join(base + ([node.module] if node.module else []))
                submodules = [f"{source}.{alias.name}" for alias in node.names]
                targets.update(submodules)
                if not all(s in modules for s in submodules):    # names defined in `source` itself
                    targets.add(source)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_one_that_imports_it_back():
    graph = import_graph()
    assert len(graph) > 40                      # the walk found the package
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_benchmark_depends_on_the_engine_never_the_reverse():
    graph = import_graph()
    outside = {m for m in graph if not m.startswith(f"{PACKAGE}.bench")}
    assert {m for m in outside if any(t.startswith(f"{PACKAGE}.bench") for t in graph[m])
            and m != f"{PACKAGE}.cli.commands"} == set()      # only the command line wires `spaseq bench` in


def test_the_top_level_keeps_at_most_a_dozen_modules():
    top = sorted(p.name for p in (ROOT / "spaseq_plugin").glob("*.py"))
    assert "__init__.py" in top and len(top) <= 12, top
