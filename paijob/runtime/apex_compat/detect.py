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
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            if any(_is_apex_name(alias.name) for alias in node.names):
                return True
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and _is_apex_name(node.module):
                return True
        elif isinstance(node, ast.Call):
            # importlib.import_module("apex.amp") / __import__("apex")
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if fname in ("import_module", "__import__") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    if _is_apex_name(first.value):
                        return True
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

