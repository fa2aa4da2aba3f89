"""The source's import graph: no cycles anywhere in src/, and the layering contracts of pyproject.toml
(spec ← engine ← report ← cli; measure → engine, spec; engine sub-packages by question) hold."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def import_graph() -> dict[str, set[str]]:
    """Module → modules of stepbill it imports (top level or inside functions), from the AST."""
    modules = {}
    for path in SRC.rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module in modules:  # `from pkg import sub` runs pkg/__init__ too: an edge to pkg
                    graph[name].add(node.module)
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in modules:
                        graph[name].add(full)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in modules)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    sys.setrecursionlimit(10_000)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_in_src() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_one() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_import_contracts_hold() -> None:
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter not installed (pip install -e '.[dev]')")
    result = subprocess.run([exe, "--config", str(SRC.parent / "pyproject.toml")], capture_output=True, text=True,
                            cwd=SRC.parent, check=False)
    assert result.returncode == 0, result.stdout[-3000:]
