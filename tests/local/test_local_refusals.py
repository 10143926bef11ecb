"""Jobs the local cluster can never run are refused at submit, and a stop ends a job in any state."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from cluster_helpers import job_yaml

from paijob.local.processes import TaskProcesses
from paijob.remote.client import InvalidProtocolError, PaiClient


def test_a_job_of_100000_tasks_is_refused_at_once_saying_what_and_how_much(client: PaiClient) -> None:
    start = time.monotonic()
    with pytest.raises(InvalidProtocolError) as refused:
        client.submit(job_yaml("absurd", ["true"], instances=100_000))
    assert time.monotonic() - start < 10  # no port is drawn, no task row written
    line = refused.value.problems[0]
    assert line.startswith("the local cluster cannot host 100000 task(s) (worker: 100000), while this machine "
                           "starts at most ")
    # SynPort and the ssh and http ports OpenPAI adds to every role: 3 per task
    assert "the local cluster cannot host 300000 port(s) in all (worker: 100000 task(s) × 3), at most 4096" in (
        refused.value.problems)
    assert client.list_jobs() == []


def test_a_job_asking_for_absurd_ports_per_task_is_refused(client: PaiClient) -> None:
    with pytest.raises(InvalidProtocolError) as refused:
        client.submit(job_yaml("ports", ["true"], ports={"Many": 5000}))
    assert refused.value.problems == [
        "the local cluster cannot host 5002 port(s) in all (worker: 1 task(s) × 5002), at most 4096"]


def test_stop_ends_a_job_still_waiting_for_its_tasks_to_start(
        client: PaiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the attempt places its tasks the job is WAITING; a stop then takes effect and the rest never start."""
    placing, release = threading.Event(), threading.Event()
    start_task = TaskProcesses.start

    def slow_start(processes: TaskProcesses, task: Any) -> None:
        if task.index == 1:
            placing.set()
            release.wait(30)
        start_task(processes, task)

    monkeypatch.setattr(TaskProcesses, "start", slow_start)
    job_id = client.submit(job_yaml("waiting", ["sleep 60"], instances=3))
    assert placing.wait(30)
    assert client.get_job(job_id)["jobStatus"]["state"] == "WAITING"
    client.stop(job_id)
    stopped = time.monotonic()
    release.set()
    final = client.wait(job_id, poll=0.1, timeout=30)
    assert final["jobStatus"]["state"] == "STOPPED"
    assert time.monotonic() - stopped < 2 + 5  # PAIJOB_LOCAL_STOP_GRACE=2 (conftest), plus slack
    tasks = final["taskRoles"]["worker"]["taskStatuses"]
    assert [t["taskState"] for t in tasks] == ["STOPPED", "STOPPED", "STOPPED"]
    assert tasks[2]["containerExitCode"] == -210 and tasks[2]["launchedTime"] is None  # never started
