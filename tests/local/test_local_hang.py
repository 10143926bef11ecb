"""A stalled job on the local cluster: `paijob status` says which rank stopped moving while the job
runs, then the hang watch's line is the job's exit diagnostics (issue 26)."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest
from cluster_helpers import job_yaml

from paijob import api
from paijob.commands.status import print_status
from paijob.errors import PaijobError
from paijob.local.server import LocalServer
from paijob.remote.client import PaiClient

SLEEPS = textwrap.dedent('''
    import os, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if os.environ["RANK"] == "1":
        time.sleep(600)  # the culprit
    dist.all_reduce(torch.ones(1))
''')


@pytest.mark.slow
def test_a_stalled_job_shows_its_stalled_rank_then_ends_with_the_hang_line(
        server: LocalServer, client: PaiClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "sleeps.py"
    script.write_text(SLEEPS)
    command = (f"paijob-runtime train --nproc-per-node 2 --grace-period 3 --hang-timeout 12 "
               f"--hang-first-timeout 12 {script}")
    job_id = client.submit(job_yaml("stalls", [f"CUDA_VISIBLE_DEVICES= {command}"]))
    deadline = time.monotonic() + 120
    stalled = None
    while time.monotonic() < deadline:
        detail = client.get_job(job_id)
        status = detail["jobStatus"]
        if status.get("paijobStall") and status["state"] == "RUNNING":
            stalled = detail
            break
        assert status["state"] in ("WAITING", "RUNNING"), status
        time.sleep(0.2)
    assert stalled is not None, "no stall shown while the job ran"
    served = stalled["jobStatus"]["paijobStall"]  # the record as data, with its version and kind
    assert (served["v"], served["kind"], served["ranks"]) == (1, "stall", [1]) and served["seconds"] >= 6, served
    print_status(stalled, job_id)
    assert "stalled    no progress for " in capsys.readouterr().out
    assert api.stacks(client, "stalls") == (job_id, 1)  # SIGUSR1 to the task's paijob-runtime
    detail = client.wait(job_id, poll=0.2, timeout=90)
    status = detail["jobStatus"]
    assert status["state"] == "FAILED" and "paijobStall" not in status, status
    diagnostics = detail["taskRoles"]["worker"]["taskStatuses"][0]["containerExitDiagnostics"]
    assert diagnostics.startswith("hang: no rank made progress for "), diagnostics
    attempt = detail["jobStatus"].get("attemptId", 0)
    log = client.read_log(client.log_locations(job_id, attempt, "worker", 0, 0)["all"]).data.decode()
    assert "paijob-runtime: stacks on request (SIGUSR1): node rank 0" in log
    assert 'File "' + str(script) + '", line 8, in <module>' in log
    assert "rank 1 (node rank 0, host " in diagnostics and "is stuck at sleeps.py:8" in diagnostics
    assert diagnostics.endswith("; exit 124; user command exited with 124; OpenPAI reports 255 (PAIRuntimeUnknownFailed)")


def test_stacks_of_a_job_on_openpai_say_the_ssh_way() -> None:
    client = PaiClient("https://pai.invalid", "token", user="me", cluster_name="prod")
    with pytest.raises(PaijobError, match=r"ssh into a task of me~train, find paijob-runtime's pid"):
        api.stacks(client, "train")
