"""No class of paijob over 400 lines, no function over 150: a piece that big has seams to split along.

(radon's cyclomatic complexity and maintainability index, the other two limits, need radon;
this one needs only the standard library, so it runs with the tests.)
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "paijob"
MAX_CLASS_LINES = 400
MAX_FUNCTION_LINES = 150


def oversized(source: str) -> list[str]:
    """``kind name: N lines`` for each class or function of ``source`` over its limit (nested ones too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            kind, limit = "class", MAX_CLASS_LINES
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            kind, limit = "function", MAX_FUNCTION_LINES
        else:
            continue
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        if lines > limit:
            found.append(f"{kind} {node.name}: {lines} lines")
    return found


def test_no_class_or_function_of_paijob_is_over_its_limit():
    found = [f"{path.relative_to(PACKAGE.parent)}: {line}"
             for path in sorted(PACKAGE.rglob("*.py")) for line in oversized(path.read_text(encoding="utf-8"))]
    assert found == []


def test_the_limits_are_counted_from_the_first_line_to_the_last():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    assert oversized(f"def fits():\n{body}") == []
    assert oversized(f"def grew():\n{body}    y = 0\n") == [f"function grew: {MAX_FUNCTION_LINES + 1} lines"]
    methods = "".join(f"    def m{i}(self): return {i}\n" for i in range(MAX_CLASS_LINES - 1))
    assert oversized(f"class Fits:\n{methods}") == []
    assert oversized(f"class Big:\n{methods}    z = 0\n") == [f"class Big: {MAX_CLASS_LINES + 1} lines"]
