"""A failed task's own error, for its ``containerExitDiagnostics`` and the job's ``appExitDiagnostics``.

rest-server's job detail has one diagnostics string per task and one per job
attempt (``models/v2/job/k8s.js``: ``generateExitDiagnostics``' summary). On
OpenPAI it summarises the container's exit; here, where the task's log is at
hand, it says what the script itself died of: the root cause paijob-runtime
prints when a worker fails (``paijob/runtime/launch.py`` ``report_root_cause``)::

    paijob-runtime: error: worker rank 1 (node rank 0, local rank 1) failed with exit code 1
    paijob-runtime: root cause, last lines of that worker's stderr:
      Traceback (most recent call last):
      ...
      ValueError: bad batch

becomes ``worker rank 1 (...) failed with exit code 1: ValueError: bad batch``.
"""

from __future__ import annotations

import re

ERROR = "paijob-runtime: error: "
CAUSE = "paijob-runtime: root cause"
MAX_CHARS = 400
_RANK_PREFIX = re.compile(r"^(\[rank\d+\]:\s?)+")
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning)\b")


def _clean(line: str) -> str:
    return _RANK_PREFIX.sub("", line.rstrip())


def root_cause(log_text: str) -> str | None:
    """The last root cause paijob-runtime reported in a task's log, in one line (None: none there)."""
    lines = [_clean(line) for line in log_text.splitlines()]
    errors = [i for i, line in enumerate(lines) if line.startswith(ERROR)]
    if not errors:
        return None
    # the last error that comes with the worker's own lines, else the last error
    explained = [i for i in errors if i + 1 < len(lines) and lines[i + 1].startswith(CAUSE)]
    at = explained[-1] if explained else errors[-1]
    headline = lines[at][len(ERROR):].strip()
    detail = _worker_error(lines[at + 2:]) if explained else None
    text = f"{headline}: {detail}" if detail else headline
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 3] + "..."


def _worker_error(lines: list[str]) -> str | None:
    """The exception line of the indented stderr tail (else its last line)."""
    tail = []
    for line in lines:
        if not line.startswith("  "):
            break
        content = _RANK_PREFIX.sub("", line.strip()).strip()  # torch's "[rankN]:" after the indent
        if content:
            tail.append(content)
    exceptions = [line for line in tail if _EXCEPTION.match(line)]
    if exceptions:
        return exceptions[-1]
    return tail[-1] if tail else None
