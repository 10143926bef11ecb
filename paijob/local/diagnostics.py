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

A job's output shares the log with the runtime's, so what the job prints must
not pass for the runtime's account (issue 35): a line a worker printed under
torch's ``[rankN]:`` prefix is the worker's, never the runtime's, and the
runtime's account is its *last* error (it reports once, after every worker has
ended), not any earlier block that merely looks explained: a fake block a
worker printed early no longer replaces the hang watch's verdict. The one
exception is the launcher's own closing ``X failed with exit code N``, which
follows the account it sums up. (Lines the job's own commands print after
paijob-runtime has exited cannot be told apart here: see the report.)

The hang watch's stall line (``stall_line``) is read with the same distrust: a
bounded read of a regular file, kept only in the exact form the runtime writes.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time

ERROR = "paijob-runtime: error: "
CAUSE = "paijob-runtime: root cause"
MAX_CHARS = 400
_RANK_PREFIX = re.compile(r"^(\[rank\d+\]:\s?)+")
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning)\b")
# launch.py's closing line for the process it ran, after that process reported its own account
_LAUNCHER_CLOSING = re.compile(r"paijob-runtime: error: (node rank \d+|worker) failed with (exit code -?\d+|signal \w+)")


def root_cause(log_text: str) -> str | None:
    """The root cause paijob-runtime reported last in a task's log, in one line (None: none there)."""
    lines = [line.rstrip() for line in log_text.splitlines()]
    errors = [i for i, line in enumerate(lines) if line.startswith(ERROR)]  # never a [rankN]: line
    if not errors:
        return None
    at = errors[-1]
    explained = at + 1 < len(lines) and lines[at + 1].startswith(CAUSE)
    if not explained and len(errors) > 1 and _LAUNCHER_CLOSING.fullmatch(lines[at]):
        earlier = errors[-2]  # "agent failed with exit code 1" after the agent's own account
        if earlier + 1 < len(lines) and lines[earlier + 1].startswith(CAUSE):
            at, explained = earlier, True
    headline = lines[at][len(ERROR):].strip()
    detail = _worker_error(lines[at + 2:]) if explained else None
    text = f"{headline}: {detail}" if detail else headline
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 3] + "..."


MAX_STALL_BYTES = 4096  # the runtime writes {"line": ..., "time": ...}: well under 200 bytes
STALL_FRESH = 15.0  # seconds: an older report is a stall that ended
# hangwatch.stall_line's one form: "no progress for 95s on rank 1", "... on ranks 0, 2-7"
_STALL_LINE = re.compile(r"no progress for \d{1,9}s on (rank \d{1,7}|ranks \d{1,7}(-\d{1,7})?(, \d{1,7}(-\d{1,7})?){0,64})")


def stall_report(path: str | os.PathLike[str], now: float | None = None) -> str | None:
    """The hang watch's stall line in ``path`` (``contract.PROGRESS_FILE``) when it is fresh, else None.

    The file is in the task's folder, where the job can write too: it is read at
    most ``MAX_STALL_BYTES`` (never through a link, never a FIFO), and its line is
    shown only in the exact form ``stall_line`` writes, so a job can neither make
    each status request read 150 MB nor put its own text in ``paijob status``."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_STALL_BYTES:
            return None
        data = os.read(fd, MAX_STALL_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        report = json.loads(data[:MAX_STALL_BYTES])
        line, written = report["line"], float(report["time"])
    except (ValueError, KeyError, TypeError):
        return None
    fresh = (time.time() if now is None else now) - written < STALL_FRESH
    return line if fresh and isinstance(line, str) and _STALL_LINE.fullmatch(line) else None


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
