"""Faults of the machine end jobs honestly: a full disk (state dir, logs, a task's folder) or a runner bug.

A job must end FAILED saying why ("disk full: ..."), its tasks killed; a stop
must work while the disk is full; nothing may stay RUNNING. ENOSPC is injected
where paijob writes (always), and a real full disk is made with a small tmpfs
(root only).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import TOKEN, job_yaml

from paijob.local import runner, tasklog
from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.local.store import Store
from paijob.remote.client import PaiClient, ServerError

GRACE = 2  # PAIJOB_LOCAL_STOP_GRACE (conftest)


def ended(client: PaiClient, job_id: str, within: float = 30) -> dict[str, Any]:
    start = time.monotonic()
    final = client.wait(job_id, poll=0.1, timeout=within)
    final["seconds"] = time.monotonic() - start
    return final


def task_states(detail: dict[str, Any]) -> list[str]:
    return [t["taskState"] for role in detail["taskRoles"].values() for t in role["taskStatuses"]]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_log_that_cannot_be_written_fails_the_job_with_disk_full(
        client: PaiClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    write = tasklog.LogSink.write

    def no_room(sink: Any, stream: str, data: bytes) -> None:
        if b"fill" in data:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), sink.files["all"].name)
        write(sink, stream, data)

    monkeypatch.setattr(tasklog.LogSink, "write", no_room)
    pid_file = tmp_path / "pid"
    job_id = client.submit(job_yaml("full-log", [f"echo $$ > {pid_file}", "echo start", "sleep 0.5", "echo fill",
                                                 "sleep 60"]))
    final = ended(client, job_id)
    status = final["jobStatus"]
    assert status["state"] == "FAILED", status
    assert status["appExitDiagnostics"].startswith(
        "disk full: writing the log of task worker/0: cannot write "), status["appExitDiagnostics"]
    assert status["appExitDiagnostics"].endswith("/all (No space left on device)")
    assert status["appExitCode"] == -1000  # what OpenPAI reports for a pod evicted off a node out of disk
    assert final["seconds"] < GRACE + 10
    assert "RUNNING" not in task_states(final) and not alive(int(pid_file.read_text()))


def test_a_runner_that_fails_ends_its_job_with_the_reason_and_kills_its_tasks(
        client: PaiClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def bug(*_: Any) -> int:
        raise RuntimeError("injected runner bug")

    monkeypatch.setattr(runner.JobRunner, "_report_exit", bug)
    job_id = client.submit(job_yaml("runner-bug", [
        f"echo $$ > {tmp_path}/pid-$PAI_TASK_INDEX", "if [ $PAI_TASK_INDEX = 0 ]; then sleep 0.5; exit 3; fi",
        "sleep 60"], instances=2))
    final = ended(client, job_id)
    assert final["jobStatus"]["state"] == "FAILED"
    assert final["jobStatus"]["appExitDiagnostics"] == "local cluster error: injected runner bug"
    assert "RUNNING" not in task_states(final)
    assert not alive(int((tmp_path / "pid-1").read_text()))


class FullDatabase:
    """The store's SQLite connection, with every write refused as SQLite refuses it on a full disk."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db, self.full = db, True

    def execute(self, sql: str, *args: Any) -> Any:
        if self.full and sql.split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE"):
            raise sqlite3.OperationalError("database or disk is full")
        return self.db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def test_stop_works_and_nothing_stays_running_while_the_job_store_is_full(
        server: LocalServer, client: PaiClient) -> None:
    job_id = client.submit(job_yaml("store-full", ["sleep 60"]))
    deadline = time.monotonic() + 30
    while client.get_job(job_id)["jobStatus"]["state"] != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.1)
    store = server.cluster.store
    full = FullDatabase(store._db)
    store._db = full  # type: ignore[assignment]
    try:
        with pytest.raises(ServerError) as refused:
            client.submit(job_yaml("while-full", ["true"]))
        assert "disk full: cannot write " in str(refused.value) and "free some space" in str(refused.value)
        client.stop(job_id)
        final = ended(client, job_id)
        assert final["jobStatus"]["state"] == "STOPPED"
        assert final["seconds"] < GRACE + 10
        assert "disk full" in final["jobStatus"]["appExitDiagnostics"]
        assert [j["state"] for j in client.list_jobs()] == ["STOPPED"]
    finally:
        full.full = False
    assert store.flush()  # room again: the end is written
    row = sqlite3.connect(server.cluster.state_dir / "jobs.sqlite").execute(
        "SELECT state FROM jobs WHERE name='store-full'").fetchone()
    assert row == ("STOPPED",)


# --------------------------------------------------------------------------- a real full disk (tmpfs)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MB tmpfs, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (ENOSPC is injected by the other tests)")
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until the disk has no room left; returns it."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
        except OSError as error:
            assert error.errno == errno.ENOSPC
        try:
            while True:
                handle.write(b"\0" * 512)
        except OSError:
            pass
    return filler


def test_a_full_state_dir_fails_the_writing_job_stops_the_other_and_is_recorded_once_freed(
        small_disk: Path) -> None:
    srv = LocalServer(small_disk / "state", TOKEN).start()
    try:
        client = PaiClient(srv.url, TOKEN, user=local_user(), cluster_name="local", retries=1, backoff=0.05)
        chatty = client.submit(job_yaml("chatty", ['while true; do echo "line $RANDOM"; sleep 0.02; done']))
        quiet = client.submit(job_yaml("quiet", ["sleep 60"]))
        for job_id in (chatty, quiet):
            deadline = time.monotonic() + 30
            while client.get_job(job_id)["jobStatus"]["state"] != "RUNNING" and time.monotonic() < deadline:
                time.sleep(0.1)
        filler = fill(small_disk)
        failed = ended(client, chatty)
        assert failed["jobStatus"]["state"] == "FAILED"
        assert failed["jobStatus"]["appExitDiagnostics"].startswith("disk full: "), failed["jobStatus"]
        client.stop(quiet)
        stopped = ended(client, quiet)
        assert stopped["jobStatus"]["state"] == "STOPPED" and stopped["seconds"] < GRACE + 10
        assert {j["state"] for j in client.list_jobs()} == {"FAILED", "STOPPED"}
        filler.unlink()
    finally:
        srv.stop()
    store = Store(small_disk / "state" / "jobs.sqlite")
    try:
        job = store.job(local_user(), "chatty")
        assert job is not None and job["state"] == "FAILED" and job["diagnostics"].startswith("disk full: ")
        assert {t["state"] for t in store.tasks(local_user(), "chatty", 0)} == {"FAILED"}
        assert store.job(local_user(), "quiet")["state"] == "STOPPED"  # type: ignore[index]
    finally:
        store.close()


def test_a_task_that_fills_its_own_folder_fails_the_job_with_disk_full(small_disk: Path) -> None:
    srv = LocalServer(small_disk / "state", TOKEN).start()
    try:
        client = PaiClient(srv.url, TOKEN, user=local_user(), cluster_name="local", retries=1, backoff=0.05)
        job_id = client.submit(job_yaml("filler", ["dd if=/dev/zero of=big bs=1M count=64 status=none"],
                                        jobRetryCount=2))
        final = ended(client, job_id)
        assert final["jobStatus"]["state"] == "FAILED"
        assert final["jobStatus"]["appExitDiagnostics"].startswith("disk full: "), final["jobStatus"]
        assert final["jobStatus"]["retries"] == 0  # no retry: it cannot fit either
    finally:
        srv.stop()
