"""Errors a user can cause.

Every such error is a ``PaijobError``: the CLIs print its message alone (no
traceback) and exit with ``exit_code``. Anything else escaping is a bug and
keeps its traceback.
"""

from __future__ import annotations


class PaijobError(Exception):
    """A problem the user can fix; the message says what, where and how."""

    exit_code = 2


class ShadowedPackageError(PaijobError, ImportError):
    """``import paijob`` found a look-alike folder in the current folder, not the installed package.

    ``python -c``/``-m``/``-`` and the prompt put the current folder first on
    ``sys.path``; a clone named ``paijob`` seen from its parent is then a
    namespace package that hides an editable install (see
    ``paijob/runtime/cwd_safe.py``, which keeps paijob's own child processes
    out of it).
    """
