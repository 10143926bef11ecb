"""Python processes that a folder named ``paijob`` in the current folder cannot shadow.

``python -m X``, ``-c``, ``-`` and the interactive prompt put the current folder
first on ``sys.path``. When that folder holds a folder named ``paijob`` (the
clone, seen from its parent: ``~/paijob`` while you work from ``~``), ``import
paijob`` finds that folder instead of the installed package: a namespace
package with no ``__version__``, whose ``runtime`` is the clone's Dockerfile
folder, not ``paijob.runtime``. An editable install (the README's) loses to it
outright; any install loses to a ``paijob/__init__.py`` there.

**Child processes** (the local cluster's server, ``paijob-runtime``'s workers)
therefore start through :func:`module_args`, never ``-m``. Why this way:

* ``-P`` / ``PYTHONSAFEPATH`` exist only from Python 3.11 (paijob supports
  3.10), and the flag is visible to, and passed on by, the user's own code
  (``sys.flags.safe_path``; multiprocessing forwards it);
* ``-I`` also ignores ``PYTHONPATH`` and the user's site-packages, which a
  training script or a ``pip install --user`` may need;
* starting in another folder would change the folder a training script
  resolves its relative paths against.

So the child runs a short bootstrap with ``-c``: it drops the current-folder
entry (``""``) that ``-c`` put first on ``sys.path``, before importing
anything, then runs the module as ``__main__`` with :func:`runpy.run_module`,
as ``-m`` does (``sys.argv[0]`` is the module's file). One code path on every
Python version. The worker puts the current folder back for a user's ``-m``
target, as ``python -m`` would (:func:`paijob.runtime.worker.run_as_main`).

**The user's own interpreter** started there cannot be fixed from inside
paijob: ``paijob.api`` says why at import (``ShadowedPackageError``) instead of
failing later with ``No module named 'paijob.runtime.cli'``.
"""

from __future__ import annotations

# With PYTHONSAFEPATH set, -c adds no "" entry, and sys.path may then start with one from PYTHONPATH: keep that.
BOOTSTRAP = (
    "import sys\n"
    "if sys.path[:1] == [''] and not getattr(sys.flags, 'safe_path', False): del sys.path[0]\n"
    "import runpy\n"
    "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n"
)


def module_args(module: str) -> tuple[str, str, str]:
    """The arguments after ``python`` that run ``module`` as ``-m module`` would, immune to the current folder.

    The module's own arguments follow: ``[sys.executable, *module_args("pkg.mod"), "--flag"]``.
    """
    return ("-c", BOOTSTRAP, module)
