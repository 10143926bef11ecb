"""The size limits of paijob's code: a piece past one has seams to split along.

No class over 400 lines and no function over 150 (the standard library counts them, so
these run everywhere); no block (function, method, class, closure) of cyclomatic complexity
over 15 and no file of maintainability index under 10, as radon measures them (``radon cc``,
``radon mi``). Those two need radon (the ``dev`` extra) and skip without it.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "paijob"
MAX_CLASS_LINES = 400
MAX_FUNCTION_LINES = 150
MAX_COMPLEXITY = 15
MIN_MAINTAINABILITY = 10.0


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


def _radon() -> None:
    pytest.importorskip("radon", reason="radon is not installed: pip install -e '.[dev]'")


def too_complex(source: str) -> list[str]:
    """``name (line N): cyclomatic complexity C`` for each block of ``source`` over the limit.

    Closures count as blocks of their own (``radon cc --show-closures``): radon adds none of
    a closure's branches to the function around it, so without them a complex closure hides.
    """
    from radon.complexity import add_inner_blocks, cc_visit

    return [f"{block.fullname} (line {block.lineno}): cyclomatic complexity {block.complexity}"
            for block in sorted(add_inner_blocks(cc_visit(source)), key=lambda block: block.lineno)
            if block.complexity > MAX_COMPLEXITY]


def maintainability(source: str) -> float:
    """radon's maintainability index of ``source``, as ``radon mi`` computes it (docstrings count as comments)."""
    from radon.metrics import mi_visit

    return float(mi_visit(source, multi=True))


def _sources() -> list[tuple[str, str]]:
    return [(str(path.relative_to(PACKAGE.parent)), path.read_text(encoding="utf-8"))
            for path in sorted(PACKAGE.rglob("*.py"))]


def test_no_block_of_paijob_is_over_the_cyclomatic_complexity_limit():
    _radon()
    found = [f"{name}: {line}" for name, source in _sources() for line in too_complex(source)]
    assert not found, "over the limit of " + str(MAX_COMPLEXITY) + ":\n" + "\n".join(found)


def test_no_file_of_paijob_is_under_the_maintainability_limit():
    _radon()
    found = [f"{name}: maintainability index {index:.2f}" for name, source in _sources()
             if (index := maintainability(source)) < MIN_MAINTAINABILITY]
    assert not found, "under the limit of " + str(MIN_MAINTAINABILITY) + ":\n" + "\n".join(found)


def _branches(complexity: int) -> str:
    """A function body of ``complexity`` (one path, and one more per ``if``)."""
    return "".join(f"    if x == {i}:\n        return {i}\n" for i in range(complexity - 1)) + "    return -1\n"


def test_complexity_counts_every_branch_closures_included():
    _radon()
    assert too_complex(f"def fits(x):\n{_branches(MAX_COMPLEXITY)}") == []
    assert too_complex(f"def grew(x):\n{_branches(MAX_COMPLEXITY + 1)}") == [
        f"grew (line 1): cyclomatic complexity {MAX_COMPLEXITY + 1}"]
    closure = f"def outer():\n    def inner(x):\n{textwrap.indent(_branches(MAX_COMPLEXITY + 1), '    ')}    return inner\n"
    assert too_complex(closure) == [f"outer.inner (line 2): cyclomatic complexity {MAX_COMPLEXITY + 1}"]


def test_a_long_file_of_uncommented_arithmetic_is_under_the_maintainability_limit():
    _radon()
    small = '"""One constant."""\n\nANSWER = 42\n'
    sprawling = "".join(f"x{i} = y{i} * {i} + z{i} - w{i} // {i + 1} ** v{i}\n" for i in range(400))
    assert maintainability(small) > MIN_MAINTAINABILITY > maintainability(sprawling)
