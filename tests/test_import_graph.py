"""No two modules of paijob import each other, even by way of others, even only for type checking.

import-linter keeps the arrows between folders pointing down; this keeps them from
closing a circle inside a folder. Every import counts: at the top, inside a function
(a late import that breaks a circle at run time still ties the two modules together)
and under ``if TYPE_CHECKING:`` (a type a module names belongs below it).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "paijob"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _imports(name: str, source: str, modules: set[str], *, package: bool = False) -> set[str]:
    """The paijob modules that module ``name`` (a package's ``__init__`` when ``package``) imports
    anywhere in its ``source``."""
    home = name if package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = home.rsplit(".", node.level - 1)[0] if node.level > 1 else home
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:  # ``from P import X``: the module P.X when X is one, else P itself
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return (found & modules) - {name}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path.read_text(encoding="utf-8"), set(modules), package=path.stem == "__init__")
            for name, path in modules.items()}


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its first module repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_module_of_paijob_imports_itself_through_others():
    circle = find_circle(import_graph())
    assert circle is None, " -> ".join(circle or [])


def test_a_circle_is_found_and_named():
    graph = {"a": {"b"}, "b": {"c"}, "c": set()}
    assert find_circle(graph) is None
    graph["c"].add("a")
    assert find_circle(graph) == ["a", "b", "c", "a"]


MODULES = {"paijob.local", "paijob.local.cluster", "paijob.local.runner", "paijob.local.store", "paijob.errors"}


def test_imports_under_type_checking_inside_functions_and_relative_ones_count():
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import store\n"
        "if TYPE_CHECKING:\n"
        "    from paijob.local.cluster import LocalCluster\n"
        "def late():\n"
        "    from ..errors import PaijobError\n"
    )
    assert _imports("paijob.local.runner", source, MODULES) == {
        "paijob.local.store", "paijob.local.cluster", "paijob.errors"}


def test_a_name_from_a_package_is_an_arrow_to_the_package_a_submodule_to_the_submodule():
    source = "from paijob.local import cluster, something\nimport paijob.local.store\n"
    assert _imports("paijob.local.runner", source, MODULES) == {
        "paijob.local.cluster", "paijob.local", "paijob.local.store"}


def test_the_graph_reads_every_module_of_the_package():
    graph = import_graph()
    assert "paijob.local.runner" in graph["paijob.local.cluster"]
    assert "paijob.runtime.apex_compat.detect" in graph["paijob.runtime.apex_compat"]
    assert len(graph) == len(list(PACKAGE.rglob("*.py")))
