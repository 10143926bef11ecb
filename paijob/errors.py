"""Errors a user can cause.

Every such error is a ``PaijobError``: the CLIs print its message alone (no
traceback) and exit with ``exit_code``. Anything else escaping is a bug and
keeps its traceback.
"""

from __future__ import annotations


class PaijobError(Exception):
    """A problem the user can fix; the message says what, where and how."""

    exit_code = 2
