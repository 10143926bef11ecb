"""A job whose paijob-runtime stopped before any worker started ends with a headline that says why."""

from __future__ import annotations

from cluster_helpers import job_yaml

from paijob.commands._common import outcome_line
from paijob.remote.client import PaiClient


def test_a_runtime_that_fails_before_any_worker_names_its_reason(client: PaiClient) -> None:
    job_id = client.submit(job_yaml("noscript", ["paijob-runtime train --nproc-per-node 1 missing_script.py"]))
    detail = client.wait(job_id, poll=0.1)
    line = outcome_line(job_id, detail)
    assert line.startswith(f"job {job_id} FAILED: training script 'missing_script.py' not found"), line
    assert "(OpenPAI: worker/0 exited with code 255)" in line and "user command exited" not in line


def test_a_plain_failure_keeps_the_exit_code_headline(client: PaiClient) -> None:
    job_id = client.submit(job_yaml("plain", ["exit 3"]))
    line = outcome_line(job_id, client.wait(job_id, poll=0.1))
    assert line.startswith(f"job {job_id} FAILED: worker/0 exited with code 255 after"), line
