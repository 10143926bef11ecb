"""Recovery on the local cluster, as on OpenPAI: a restart inside the attempt re-queues nothing, and with
``--min-nodes`` (gang allocation off, ``minFailedInstances``) a killed task is retried alone while node 0 goes on
(FrameworkController's completion and task retry policies, which the local runner follows)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from cluster_helpers import job_yaml

from paijob.commands.status import print_status
from paijob.local.server import LocalServer
from paijob.remote.client import PaiClient

# Trains 40 steps resuming from its checkpoint; in the first start, rank 1 either raises at step 8 ("raise") or
# kills its node's paijob-runtime, the whole task going ("kill").
TRAINS = textwrap.dedent('''
    import json, os, signal, sys, time
    import torch
    import torch.distributed as dist

    folder, fault = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    ckpt = os.path.join(folder, "ckpt.json")
    start = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
    for step in range(start, 40):
        if step == 8 and rank == 1 and restart == 0 and not os.path.exists(os.path.join(folder, "faulted")):
            open(os.path.join(folder, "faulted"), "w").close()
            if fault == "kill":
                os.kill(int(os.environ["PAIJOB_LAUNCHER_PID"]), signal.SIGKILL)
                time.sleep(60)
            raise ValueError("bad batch on purpose")
        value = torch.tensor([float(step)])
        dist.all_reduce(value)
        if rank == 0 and step % 3 == 2:
            with open(ckpt + ".tmp", "w") as fh:
                json.dump({"step": step + 1}, fh)
            os.replace(ckpt + ".tmp", ckpt)
        dist.barrier()
        time.sleep(0.05)
    if rank == 0:
        with open(os.path.join(folder, "done.json"), "w") as fh:
            json.dump({"last": float(value), "world": world, "restart": restart}, fh)
''')


def _submit(client: PaiClient, tmp_path: Path, name: str, fault: str, options: str, **extra: object) -> str:
    script = tmp_path / "trains.py"
    script.write_text(TRAINS)
    command = (f"CUDA_VISIBLE_DEVICES= paijob-runtime train --nproc-per-node 1 --grace-period 3 "
               f"--heartbeat-timeout 5 {options} {script} {tmp_path} {fault}")
    return client.submit(job_yaml(name, [command], instances=2, **extra))


@pytest.mark.slow
def test_a_restart_inside_the_attempt_requeues_nothing_and_status_lists_it(
        server: LocalServer, client: PaiClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job_id = _submit(client, tmp_path, "restarts", "raise", "--max-restarts 2")
    detail = client.wait(job_id, poll=0.2, timeout=240)
    status = detail["jobStatus"]
    assert status["state"] == "SUCCEEDED" and status["retries"] == 0 and status["attemptId"] == 0, status
    assert [task["retries"] for task in detail["taskRoles"]["worker"]["taskStatuses"]] == [0, 0]
    assert '"world": 2' in (tmp_path / "done.json").read_text()
    restarts = status["paijobRestarts"]
    assert [(r["number"], r["limit"], r["exit_code"]) for r in restarts] == [(1, 2, 1)], restarts
    print_status(detail, job_id)
    out = capsys.readouterr().out
    assert ("restarts   restart 1 of 2 after worker rank 1 (node rank 1, local rank 0) failed with exit code 1: "
            "ValueError: bad batch on purpose (trains.py:18 in <module>)") in out, out


@pytest.mark.slow
def test_with_min_nodes_a_killed_task_is_retried_alone_and_the_attempt_succeeds(
        server: LocalServer, client: PaiClient, tmp_path: Path) -> None:
    job_id = _submit(client, tmp_path, "elastic", "kill", "--max-restarts 2 --min-nodes 1",
                     extras={"gangAllocation": False},
                     role_extra={"completion": {"minFailedInstances": 2}, "taskRetryCount": 1})
    detail = client.wait(job_id, poll=0.2, timeout=240)
    status = detail["jobStatus"]
    assert status["state"] == "SUCCEEDED" and status["retries"] == 0, status  # the same attempt
    tasks = detail["taskRoles"]["worker"]["taskStatuses"]
    assert [task["retries"] for task in tasks] == [0, 1], tasks  # node 1's task alone was retried (137)
    done = (tmp_path / "done.json").read_text()
    assert '"world": 1' in done and '"restart": 1' in done, done  # node 0 finished alone
    restarts = status["paijobRestarts"]
    assert len(restarts) == 1 and restarts[0]["nodes"] == 1 and "node rank 1 was lost" in restarts[0]["cause"]
    log = client.read_log(client.log_locations(job_id, 0, "worker", 1, 1)["all"]).data.decode()
    assert "joins them at the next restart" in log and "finished without this node" in log, log
