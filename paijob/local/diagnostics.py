"""What the local cluster reads of paijob-runtime's reports: a failed task's root cause and a stall.

rest-server's job detail has one diagnostics string per task and one per job attempt
(``models/v2/job/k8s.js``: ``generateExitDiagnostics``' summary). On OpenPAI it summarises the container's
exit; here, where the task's log is at hand, it says what the script itself died of. paijob-runtime writes
that as a record, the last line it writes (``paijob.runtime.failure.report_root_cause`` writes
``Failure.record()``; the record's format is :mod:`paijob.common.records`'); the human lines above it are
never parsed.

Both reports live within the job's reach (its log, its folder), so both are read with
:mod:`paijob.common.records`' distrust: a record counts only when it is signed with the task's own key
(which the local cluster gave that task's paijob-runtime and no worker), and the stall file is read
bounded, never through a link or from a FIFO, in its exact form only.
"""

from __future__ import annotations

import os

from paijob.common import records


def root_cause(log_text: str, key: str) -> records.FailureRecord | None:
    """paijob-runtime's record of why the task failed, in its log's tail (None: it wrote none)."""
    return records.last_failure(log_text, key)


def stall(path: str | os.PathLike[str], now: float | None = None) -> str | None:
    """The hang watch's fresh stall in ``path`` (``contract.STALL_FILE``), in the words people read; else None."""
    found = records.read_stall(path, now)
    return found.describe() if found else None
