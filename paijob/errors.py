"""Errors a user can cause.

Every such error is a ``PaijobError``: the CLIs print its message alone (no
traceback) and exit with ``exit_code``. Anything else escaping is a bug and
keeps its traceback.
"""

from __future__ import annotations

# The `paijob` command's exit codes, each defined once: the verbs return these, and the documentation's
# exit-code page is generated from EXIT_CODES.
EXIT_OK = 0
EXIT_JOB_FAILED = 1
EXIT_USER_ERROR = 2
EXIT_LOCAL_NOT_RUNNING = 3
EXIT_OUTCOME_UNKNOWN = 4
EXIT_INTERRUPTED = 130
EXIT_HANGUP = 129  # 128 + SIGHUP
EXIT_TERMINATED = 143  # 128 + SIGTERM
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "done (`submit --wait`, `run`, `logs -f`: the job SUCCEEDED; `stop --wait`: it ended)",
    EXIT_JOB_FAILED: "the job ended but did not succeed (`submit --wait`, `run`, `logs -f`); `cp`: copied, but "
                     "skipped what it lists (links out, files that changed, files in the way)",
    EXIT_USER_ERROR: "a usage error (bad option or value, invalid job) or a cluster error (unreachable, timed out, "
                     "refused, unexpected answer); the message says which",
    EXIT_LOCAL_NOT_RUNNING: "`paijob local status`: the local cluster is not running (with `-o json`/`yaml` the "
                            "exit is 0 and `running` says it)",
    EXIT_OUTCOME_UNKNOWN: "the outcome of a change is unknown: the job may or may not have been created; check "
                          "with `paijob status NAME` before submitting again",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C); `run` stops its job first",
    EXIT_TERMINATED: "`run` ended by SIGTERM (a CI runner cancelling, `timeout`), after stopping its job",
    EXIT_HANGUP: "`run` ended by SIGHUP (a closed terminal), after stopping its job",
}


class PaijobError(Exception):
    """A problem the user can fix; the message says what, where and how."""

    exit_code = EXIT_USER_ERROR


class ShadowedPackageError(PaijobError, ImportError):
    """``import paijob`` found a look-alike folder in the current folder, not the installed package.

    ``python -c``/``-m``/``-`` and the prompt put the current folder first on
    ``sys.path``; a clone named ``paijob`` seen from its parent is then a
    namespace package that hides an editable install (see
    ``paijob/runtime/cwd_safe.py``, which keeps paijob's own child processes
    out of it).
    """
