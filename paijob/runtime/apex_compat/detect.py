"""Does a script need the apex compatibility layer? (Static: never imports torch or apex.)

``script_needs_apex_compat(path)`` is true when the script imports ``apex``
(``import apex``, ``import apex.amp``, ``from apex import amp``, ``from
apex.parallel import ...``) and NVIDIA apex with its ``amp`` sub-package is
not installed. The PyPI package called ``apex`` is an unrelated web toolkit
without ``amp``; its presence does not count.
"""

from __future__ import annotations

import ast
import importlib.machinery
import os
import re
import sys
from pathlib import Path

_IMPORT_RE = re.compile(r"^\s*(?:from\s+apex(?:\.\w+)*\s+import\b|import\s+apex\b)", re.MULTILINE)


def _is_apex_name(name: str | None) -> bool:
    return bool(name) and (name == "apex" or str(name).startswith("apex."))


def source_imports_apex(source: str) -> bool:
    """True when Python source imports apex anywhere (module level, functions, try blocks)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return bool(_IMPORT_RE.search(source))
    return any(_node_imports_apex(node) for node in ast.walk(tree))


def _node_imports_apex(node: ast.AST) -> bool:
    """An ``import apex...``, ``from apex... import``, or ``import_module("apex...")`` / ``__import__("apex...")``."""
    if isinstance(node, ast.Import):
        return any(_is_apex_name(alias.name) for alias in node.names)
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and _is_apex_name(node.module)
    if isinstance(node, ast.Call) and node.args:
        func = node.func
        fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        first = node.args[0]
        return (fname in ("import_module", "__import__") and isinstance(first, ast.Constant)
                and isinstance(first.value, str) and _is_apex_name(first.value))
    return False


def script_imports_apex(path: str | os.PathLike[str]) -> bool:
    source = Path(path).read_text(encoding="utf-8", errors="replace")
    return source_imports_apex(source)


def real_apex_amp_present() -> bool:
    """True when an ``apex`` package with an ``amp`` sub-package is installed.

    Looks at the package's search locations instead of importing it (note
    that ``importlib.util.find_spec("apex.amp")`` would import ``apex``): real
    apex imports torch and CUDA extensions, and PyPI's unrelated 'apex' may be
    installed under the same name without ``amp``. Our own shim, when already
    installed in ``sys.modules``, does not count.
    """
    module = sys.modules.get("apex")
    if module is not None and getattr(module, "__paijob_shim__", False):
        locations = list(getattr(module, "__paijob_shadowed_path__", []) or [])
    else:
        if module is not None and "apex.amp" in sys.modules:
            return not getattr(sys.modules["apex.amp"], "__paijob_shim__", False)
        try:
            spec = importlib.machinery.PathFinder.find_spec("apex")
        except (ImportError, ValueError):
            return False
        if spec is None or spec.submodule_search_locations is None:
            return False  # a plain module named apex.py has no apex.amp
        locations = list(spec.submodule_search_locations)
    for location in locations:
        base = Path(location) / "amp"
        if (base / "__init__.py").is_file() or base.with_suffix(".py").is_file():
            return True
        if base.is_dir() and any(base.glob("*.py")):
            return True  # namespace-style sub-package
    return False


def script_needs_apex_compat(path: str | os.PathLike[str]) -> bool:
    """The script imports apex and real ``apex.amp`` is not available."""
    return script_imports_apex(path) and not real_apex_amp_present()

