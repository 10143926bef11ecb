"""A failed job says the script's own error: paijob-runtime's root cause is the task's and the job's
exit diagnostics (rest-server's containerExitDiagnostics / appExitDiagnostics), and `paijob status`
shows it beside the OpenPAI exit code it maps to (issue 18, issue 19 item 6)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import job_yaml

from paijob.commands import _common as common
from paijob.commands.status import print_status
from paijob.common.records import FailureRecord, failure_line
from paijob.local.diagnostics import root_cause
from paijob.local.server import LocalServer
from paijob.remote.client import PaiClient

RAISES = textwrap.dedent('''
    print("step 1 ok")
    raise ValueError("bad batch on purpose")
''')


def test_a_real_paijob_runtime_failure_is_the_jobs_exit_diagnostics(
        server: LocalServer, client: PaiClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "raises.py"
    script.write_text(RAISES)
    job_id = client.submit(job_yaml("rootcause", [f"paijob-runtime train --nproc-per-node 1 {script}"]))
    detail = client.wait(job_id, poll=0.1, timeout=120)
    status = detail["jobStatus"]
    assert status["state"] == "FAILED", status
    task = detail["taskRoles"]["worker"]["taskStatuses"][0]
    expected = "failed with exit code 1: ValueError: bad batch on purpose"
    assert expected in task["containerExitDiagnostics"]
    assert "OpenPAI reports 255" in task["containerExitDiagnostics"]  # the script's exit 1 and the OpenPAI code
    assert expected in status["appExitDiagnostics"]
    print_status(detail, job_id)
    out = capsys.readouterr().out
    assert "exit code  255 (" in out
    # said once: the cause (with the script's line, from the worker's own record), then the task it ended
    assert "cause      rank 0 on worker/0 failed with exit code 1: ValueError: bad batch on purpose (raises.py:" in out
    assert "ended      worker/0 (exit 255: user command exited with 1; OpenPAI reports 255" in out
    assert out.count("ValueError: bad batch on purpose") == 1, out


def test_a_task_without_paijob_runtime_keeps_the_exit_spec_note_only(server: LocalServer, client: PaiClient) -> None:
    job_id = client.submit(job_yaml("plainfail", ["echo 'paijob-runtime: error: said by the user?' >&2; exit 0"]))
    detail = client.wait(job_id, poll=0.1, timeout=30)
    assert detail["taskRoles"]["worker"]["taskStatuses"][0]["containerExitDiagnostics"] is None  # exit 0: no cause
    job_id = client.submit(job_yaml("plainfail2", ["exit 3"]))
    task = client.wait(job_id, poll=0.1, timeout=30)["taskRoles"]["worker"]["taskStatuses"][0]
    assert task["containerExitDiagnostics"].startswith("user command exited with 3; OpenPAI reports")


# A stand-in for paijob-runtime's last words: report_root_cause, in the runtime's wording or another one.
REPORTS = textwrap.dedent('''
    import sys
    from paijob.runtime import failure as failures
    from paijob.runtime import held

    held.take()
    if sys.argv[1] == "reworded":  # what a change of the human lines' wording does
        failures.say = lambda message: print("[paijob] " + message.upper().replace(" ", "_"), file=sys.stderr)
    tail = "Traceback (most recent call last):\\n  File \\"t.py\\", line 3\\nValueError: bad batch"
    root = failures.Failure(node_rank=0, rank=1, local_rank=1, returncode=1, secondary=False, time=0.0, tail=tail,
                            error="ValueError: bad batch")
    failures.report_root_cause(root, 0)
    sys.exit(root.exit_code)
''')


def timeless(detail: dict[str, Any]) -> dict[str, Any]:
    """``detail`` with one fixed start and end: two runs' closing lines differ by their elapsed time, which
    the machine's load decides (issue 54: `after 0.4 s` vs `after 0.2 s`), not by what they say."""
    times = {"createdTime": 1_000, "launchedTime": 1_000, "completedTime": 3_000}
    return {**detail, "jobStatus": {**detail["jobStatus"], **times}}


def test_status_reads_the_runtimes_record_not_its_wording(
        server: LocalServer, client: PaiClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The human lines may be reworded any day: the task's diagnostics and `paijob status` stay the same."""
    script = tmp_path / "reports.py"
    script.write_text(REPORTS)
    seen = {}
    for wording in ("usual", "reworded"):
        job_id = client.submit(job_yaml(f"wording{wording}", [f"python {script} {wording}"]))
        detail = client.wait(job_id, poll=0.1, timeout=60)
        task = detail["taskRoles"]["worker"]["taskStatuses"][0]
        print_status(detail, job_id)
        lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("cause ", "ended "))]
        seen[wording] = (task["paijobRootCause"], task["containerExitDiagnostics"],
                         common.outcome_line("j", timeless(detail)), lines)
    assert seen["reworded"] == seen["usual"]
    record, diagnostics, outcome, lines = seen["usual"]
    assert record["rank"] == 1 and record["error"] == "ValueError: bad batch"
    assert diagnostics.startswith("worker rank 1 (node rank 0, local rank 1) failed with exit code 1: ValueError: bad")
    assert outcome.startswith("job j FAILED: rank 1 on worker/0 failed with exit code 1: ValueError: bad batch")
    assert lines[0] == "cause      rank 1 on worker/0 failed with exit code 1: ValueError: bad batch"


KEY = "0123456789abcdef"


def told(record: FailureRecord, key: str | None = KEY) -> str:
    return failure_line(record, key) + "\n"


WORKER = FailureRecord(node_rank=0, exit_code=1, summary="worker rank 1 (node rank 0, local rank 1) failed with "
                       "exit code 1", rank=1, worker_node=0, local_rank=1, how="exit code 1",
                       error="RuntimeError: CUDA out of memory")
EARLY = FailureRecord(node_rank=None, exit_code=2, summary="the master did not come within 600s")


@pytest.mark.parametrize(("log", "expected"), [
    ("[rank1]: Traceback (most recent call last):\n" + told(WORKER), WORKER),
    ("human lines in any words\n" + told(EARLY) + "paijob-runtime: error: the master did not come\n", EARLY),
    ("all fine\n", None),
    # the launcher's closing record gives way to the account it sums up
    (told(WORKER) + told(FailureRecord(node_rank=0, exit_code=1, summary="node rank 0 failed with exit code 1",
                                       closing=True)), WORKER),
])
def test_the_root_cause_is_the_runtimes_last_record(log: str, expected: FailureRecord | None) -> None:
    assert root_cause(log, KEY) == expected


def test_a_runtime_that_stopped_before_any_worker_is_the_reason(server: LocalServer, client: PaiClient,
                                                                 tmp_path: Path) -> None:
    """paijob-runtime's own error (here a missing script) is a record too: no rank, its reason."""
    job_id = client.submit(job_yaml("noscript", [f"paijob-runtime train --nproc-per-node 1 {tmp_path / 'gone.py'}"]))
    detail = client.wait(job_id, poll=0.1, timeout=60)
    task = detail["taskRoles"]["worker"]["taskStatuses"][0]
    record = task["paijobRootCause"]
    assert record["rank"] is None and record["exit_code"] == 2 and "gone.py" in record["summary"], record
    cause = common.root_cause(detail)
    assert cause is not None and cause.record.rank is None and str(cause) == record["summary"]
    assert common.outcome_line(job_id, detail).startswith(f"job {job_id} FAILED: {record['summary']} (OpenPAI: "
                                                          "worker/0 exited with code ")
