"""Recovery on the local cluster, as on OpenPAI: a restart inside the attempt re-queues nothing, and with
``--min-nodes`` (gang allocation off, ``minFailedInstances``) a killed task is retried alone while node 0 goes on
(FrameworkController's completion and task retry policies, which the local runner follows)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cluster_helpers import job_yaml
from restart_programs import RAISES, line_of, trains

from paijob.commands.status import print_status
from paijob.local.server import LocalServer
from paijob.remote.client import PaiClient
from paijob.remote.errors import ClusterError

# 40 steps; in the first start, rank 1 either raises at step 8 ("raise") or kills its node's paijob-runtime, the
# whole task going ("kill"); rank 0 of a restart says so ("restarted") and, where the test asks ("hold"), holds
# at step 30 until it writes "go-on" (at most 120 s), so the retried task is back while the job still trains.
TRAINS = trains(40, f"""\
    if restart >= 1 and rank == 0 and step == start:
        open(os.path.join(folder, "restarted"), "w").close()
    if restart >= 1 and step == 30 and os.path.exists(os.path.join(folder, "hold")):
        for _ in range(1200):
            if os.path.exists(os.path.join(folder, "go-on")):
                break
            time.sleep(0.1)
    if step == 8 and rank == 1 and restart == 0 and not os.path.exists(os.path.join(folder, "faulted")):
        open(os.path.join(folder, "faulted"), "w").close()
        if sys.argv[2] == "kill":
            os.kill(int(os.environ["PAIJOB_LAUNCHER_PID"]), signal.SIGKILL)
            time.sleep(60)
        {RAISES}
""")


# A retried task (after the fault) comes back once the survivors restarted, as a new pod on OpenPAI takes its
# scheduling and start-up time: without it, a task the local cluster retries at once may come back before node 0
# has found it lost, and join that same restart (also right, but another test: tests/runtime/test_restarts.py).
COMES_BACK_LATER = ('if [ -e {folder}/faulted ]; then for i in $(seq 600); do [ -e {folder}/restarted ] && break; '
                    'sleep 0.2; done; fi; ')


def _submit(client: PaiClient, tmp_path: Path, name: str, fault: str, options: str, *, later: bool = False,
            **extra: object) -> str:
    script = tmp_path / "trains.py"
    script.write_text(TRAINS)
    wait = COMES_BACK_LATER.format(folder=tmp_path) if later else ""
    command = (f"{wait}CUDA_VISIBLE_DEVICES= paijob-runtime train --nproc-per-node 1 --grace-period 3 "
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
            f"ValueError: bad batch on purpose (trains.py:{line_of(TRAINS, RAISES)} in <module>)") in out, out


def _log_of_retried_task(client: PaiClient, job_id: str) -> str:
    """Node 1's log in its first retry ("" until it starts)."""
    try:
        return client.read_log(client.log_locations(job_id, 0, "worker", 1, 1)["all"]).data.decode()
    except ClusterError:
        return ""


@pytest.mark.slow
def test_with_min_nodes_a_killed_task_is_retried_alone_and_the_attempt_succeeds(
        server: LocalServer, client: PaiClient, tmp_path: Path) -> None:
    (tmp_path / "hold").write_text("")
    job_id = _submit(client, tmp_path, "elastic", "kill", "--max-restarts 2 --min-nodes 1", later=True,
                     extras={"gangAllocation": False},
                     role_extra={"completion": {"minFailedInstances": 2}, "taskRetryCount": 1})
    deadline = time.monotonic() + 180
    while "joins them at the next restart" not in _log_of_retried_task(client, job_id):
        assert time.monotonic() < deadline, _log_of_retried_task(client, job_id)
        time.sleep(0.5)
    (tmp_path / "go-on").write_text("")  # node 1 waits to join: node 0 may finish
    detail = client.wait(job_id, poll=0.2, timeout=240)
    status = detail["jobStatus"]
    assert status["state"] == "SUCCEEDED" and status["retries"] == 0, status  # the same attempt
    tasks = detail["taskRoles"]["worker"]["taskStatuses"]
    assert [task["retries"] for task in tasks] == [0, 1], tasks  # node 1's task alone was retried (137)
    done = (tmp_path / "done.json").read_text()
    assert '"world": 1' in done and '"restart": 1' in done, done  # node 0 finished alone
    restarts = status["paijobRestarts"]
    assert len(restarts) == 1 and restarts[0]["nodes"] == 1 and "node rank 1 was lost" in restarts[0]["cause"]
    log = _log_of_retried_task(client, job_id)
    assert "joins them at the next restart" in log and "finished without this node" in log, log
