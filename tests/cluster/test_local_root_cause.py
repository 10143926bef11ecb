"""A failed job says the script's own error: paijob-runtime's root cause is the task's and the job's
exit diagnostics (rest-server's containerExitDiagnostics / appExitDiagnostics), and `paijob status`
shows it beside the OpenPAI exit code it maps to (issue 18, issue 19 item 6)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from cluster_helpers import job_yaml

from paijob.commands.status import print_status
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
    assert "exit code  255 (" in out and f"error      worker/0: worker rank 0 (node rank 0, local rank 0) {expected}" in out


def test_a_task_without_paijob_runtime_keeps_the_exit_spec_note_only(server: LocalServer, client: PaiClient) -> None:
    job_id = client.submit(job_yaml("plainfail", ["echo 'paijob-runtime: error: said by the user?' >&2; exit 0"]))
    detail = client.wait(job_id, poll=0.1, timeout=30)
    assert detail["taskRoles"]["worker"]["taskStatuses"][0]["containerExitDiagnostics"] is None  # exit 0: no cause
    job_id = client.submit(job_yaml("plainfail2", ["exit 3"]))
    task = client.wait(job_id, poll=0.1, timeout=30)["taskRoles"]["worker"]["taskStatuses"][0]
    assert task["containerExitDiagnostics"].startswith("user command exited with 3; OpenPAI reports")


@pytest.mark.parametrize(("log", "expected"), [
    ("paijob-runtime: error: worker rank 1 (node rank 0, local rank 1) failed with exit code 1\n"
     "paijob-runtime: root cause, last lines of that worker's stderr:\n"
     "  [rank1]: Traceback (most recent call last):\n  [rank1]:   File \"t.py\", line 3\n"
     "  [rank1]: RuntimeError: CUDA out of memory\n  [rank1]: \n"
     "paijob-runtime: error: worker failed with exit code 1\n",
     "worker rank 1 (node rank 0, local rank 1) failed with exit code 1: RuntimeError: CUDA out of memory"),
    ("paijob-runtime: error: the master did not come within 600s (node rank 1)\n",
     "the master did not come within 600s (node rank 1)"),
    ("all fine\n", None),
])
def test_root_cause_lines(log: str, expected: str | None) -> None:
    assert root_cause(log) == expected
