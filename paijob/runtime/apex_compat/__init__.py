"""Drop-in ``apex.amp`` / ``apex.parallel`` on native torch for legacy scripts when real apex is absent.

Nothing here touches the user's namespace on import. :func:`install` (what
``python -m paijob.runtime.apex_compat SCRIPT`` and ``paijob-runtime train
--apex-compat`` call) does, and only when NVIDIA apex's ``apex.amp`` does not
import:

* it writes a tiny ``apex`` package (``apex``, ``apex.amp``, ``apex.parallel``,
  ``apex.fp16_utils``, ``apex.optimizers``) whose modules are this package's
  ``amp``, ``parallel``, ... into a private temporary folder, puts that folder
  first on ``sys.path`` and on ``PYTHONPATH`` (so processes the script starts
  itself, e.g. with ``mp.spawn``, find it too), and imports it, so the shim
  modules are in ``sys.modules`` before the script runs;
* :func:`uninstall` takes all of that back (tests use it).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

from paijob.common import contract
from paijob.runtime.apex_compat.detect import real_apex_amp_present, script_needs_apex_compat

__all__ = ["install", "uninstall", "is_installed", "script_needs_apex_compat", "SHIM_MODULES"]

# apex module name -> module of this package that implements it
SHIM_MODULES: dict[str, str] = {
    "apex.amp": "paijob.runtime.apex_compat.amp",
    "apex.parallel": "paijob.runtime.apex_compat.parallel",
    "apex.fp16_utils": "paijob.runtime.apex_compat.fp16_utils",
    "apex.optimizers": "paijob.runtime.apex_compat.optimizers",
}

_PACKAGE_INIT = '''"""apex, as provided by paijob's compatibility layer (NVIDIA apex is not installed)."""
__paijob_shim__ = True
__version__ = "0.0+paijob.compat"
_PROVIDED = "apex.amp, apex.parallel, apex.fp16_utils, apex.optimizers"


def __getattr__(name):
    if name in ("amp", "parallel", "fp16_utils", "optimizers"):
        import importlib

        return importlib.import_module("apex." + name)
    if name.startswith("__"):
        raise AttributeError(name)
    raise ImportError(
        f"apex.{name} is not provided by paijob's apex compatibility layer (it provides "
        f"{_PROVIDED} on native torch); install NVIDIA apex or port that part to torch"
    )
'''

_SUBMODULE = '''"""{apex_name}: paijob compatibility shim, implemented in {target}."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("{target}")
'''

_shim_dir: Path | None = None
_env_before: str | None = None


def is_installed() -> bool:
    module = sys.modules.get("apex")
    return bool(module is not None and getattr(module, "__paijob_shim__", False))


def _real_apex_amp_imports() -> bool:
    if not real_apex_amp_present():
        return False
    try:
        import apex.amp  # noqa: F401
    except Exception:
        for name in [n for n in sys.modules if n == "apex" or n.startswith("apex.")]:
            del sys.modules[name]
        return False
    return True


def _write_shim_package() -> Path:
    root = Path(tempfile.mkdtemp(prefix="paijob-apex-compat-"))
    package = root / "apex"
    package.mkdir()
    (package / "__init__.py").write_text(_PACKAGE_INIT)
    for apex_name, target in SHIM_MODULES.items():
        leaf = apex_name.split(".", 1)[1]
        (package / f"{leaf}.py").write_text(_SUBMODULE.format(apex_name=apex_name, target=target))
    atexit.register(shutil.rmtree, root, True)
    return root


def install(*, force: bool = False) -> bool:
    """Make ``import apex`` / ``from apex import amp`` work; True if the shim is now active.

    Returns False (and changes nothing) when real NVIDIA apex with ``apex.amp``
    imports, unless ``force``.
    """
    global _shim_dir, _env_before
    if is_installed():
        return True
    if not force and _real_apex_amp_imports():
        return False
    for name in [n for n in sys.modules if n == "apex" or n.startswith("apex.")]:
        del sys.modules[name]  # e.g. PyPI's unrelated 'apex', imported by someone before
    _shim_dir = _write_shim_package()
    sys.path.insert(0, str(_shim_dir))
    _env_before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(_shim_dir), _env_before) if p)
    os.environ[contract.APEX_COMPAT] = "1"
    import importlib

    importlib.invalidate_caches()
    importlib.import_module("apex")
    for name in SHIM_MODULES:
        importlib.import_module(name)
    return True


def uninstall() -> None:
    """Remove the shim from ``sys.modules``, ``sys.path`` and ``PYTHONPATH``."""
    global _shim_dir, _env_before
    if _shim_dir is None and not is_installed():
        return
    for name in [n for n in sys.modules if n == "apex" or n.startswith("apex.")]:
        del sys.modules[name]
    if _shim_dir is not None:
        while str(_shim_dir) in sys.path:
            sys.path.remove(str(_shim_dir))
        shutil.rmtree(_shim_dir, ignore_errors=True)
        _shim_dir = None
    if _env_before is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = _env_before
    _env_before = None
    os.environ.pop(contract.APEX_COMPAT, None)
