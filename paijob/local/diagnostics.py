"""What the local cluster reads of paijob-runtime's reports in a task's log: a failed task's root cause.

rest-server's job detail has one diagnostics string per task and one per job attempt
(``models/v2/job/k8s.js``: ``generateExitDiagnostics``' summary). On OpenPAI it summarises the container's
exit; here, where the task's log is at hand, it says what the script itself died of. paijob-runtime writes
that as a record, the last line it writes (``paijob.runtime.failure.report_root_cause`` writes
``Failure.record()``; the record's format is :mod:`paijob.common.records`'); the human lines above it are
never parsed.

The log is within the job's reach, so the record is read with :mod:`paijob.common.records`' distrust: it
counts only when it is signed with the task's own key (which the local cluster gave that task's
paijob-runtime and no worker). The stall and slow-rank records, files in the task's folder, are read by
:mod:`paijob.local.cluster` with the same module's bounded readers.
"""

from __future__ import annotations

from paijob.common import records


def root_cause(log_text: str, key: str) -> records.FailureRecord | None:
    """paijob-runtime's record of why the task failed, in its log's tail (None: it wrote none)."""
    return records.last_failure(log_text, key)
