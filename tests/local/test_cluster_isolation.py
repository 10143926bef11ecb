"""The local cluster keeps to its own: it ends all its tasks started, only those, and keeps its files private."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import TOKEN, job_yaml

from paijob.local import daemon
from paijob.local.cluster import LocalCluster
from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.local.store import Store
from paijob.local.tracking import Cgroups, Tracker, cluster_id
from paijob.remote.client import PaiClient

GRACE = 4.0  # long enough that "about one grace" and "twice the grace" cannot be confused


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def read_pids(directory: Path, count: int, timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = sorted(directory.glob("*.pid"))
        texts = [f.read_text().strip() for f in files]
        if len(files) >= count and all(texts):
            return [int(t) for t in texts]
        time.sleep(0.05)
    raise AssertionError(f"the task did not write {count} pid files in {directory}")


def wait_running(client: PaiClient, job_id: str) -> None:
    deadline = time.monotonic() + 30
    while client.get_job(job_id)["jobStatus"]["state"] != "RUNNING":
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process that is none of the local cluster's business."""
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _cgroups_here() -> bool:
    found = Cgroups.find("test-" + os.urandom(4).hex())
    if found is not None:
        found.close()
    return found is not None


CGROUPS = _cgroups_here()
tracking = pytest.mark.parametrize("mode", [
    pytest.param("cgroup", marks=pytest.mark.skipif(not CGROUPS, reason="no writable cgroup v2 here")),
    "fallback",
])


# --------------------------------------------------------------------------- stop


@tracking
def test_a_stop_ends_processes_that_escaped_with_setsid_within_the_grace_period(
        mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAIJOB_LOCAL_CGROUP", "1" if mode == "cgroup" else "0")
    monkeypatch.setenv("PAIJOB_LOCAL_STOP_GRACE", str(GRACE))
    pids = tmp_path / "pids"
    pids.mkdir()
    # each escapee: its own session, an empty environment (no marker), SIGTERM ignored
    escape = "setsid env -i bash -c 'trap \"\" TERM; echo $$ > {f}; exec sleep 300' &"
    commands = [escape.format(f=pids / "a.pid"),
                "( " + escape.format(f=pids / "b.pid") + " ) ; true",  # a double fork: an orphan at once
                "echo $$ > " + str(pids / "main.pid"), "sleep 300"]
    with LocalServer(tmp_path / "state", TOKEN) as server:
        client = PaiClient(server.url, TOKEN, user=local_user(), cluster_name="local", retries=1)
        job_id = client.submit(job_yaml("escapes", commands))
        wait_running(client, job_id)
        escaped = read_pids(pids, len(commands) - 1)
        assert all(alive(pid) for pid in escaped)
        started = time.monotonic()
        client.stop(job_id)
        detail = client.wait(job_id, poll=0.05, timeout=60)
        took = time.monotonic() - started
        cgroups = server.cluster.tracker.cgroups
    assert detail["jobStatus"]["state"] == "STOPPED"
    assert (cgroups is not None) == (mode == "cgroup")
    assert cgroups is None or not cgroups.base.exists()  # no cgroup directory left behind
    assert [pid for pid in escaped if alive(pid)] == []
    # SIGTERM, the grace period, SIGKILL: once, not twice (and no wait on pipes the escapees held)
    assert GRACE - 0.2 < took < 1.6 * GRACE, f"the stop took {took:.1f} s with a {GRACE:g} s grace"


# --------------------------------------------------------------------------- recovery


def test_recovery_ends_only_this_state_dirs_tasks(tmp_path: Path) -> None:
    """Two local clusters run a job with the same user~name; one recovering from a crash kills its own
    leftover task, never the other cluster's task."""
    user, name = local_user(), "same"
    with LocalServer(tmp_path / "b", TOKEN) as other:
        client = PaiClient(other.url, TOKEN, user=user, cluster_name="local", retries=1)
        job_id = client.submit(job_yaml(name, ["sleep 300"]))
        wait_running(client, job_id)
        others = other.cluster.runners[job_id].tasks[0].proc
        assert others is not None
        # state dir a: the store of a server that died while its task ran (the task is still there)
        (tmp_path / "a").mkdir()
        store = Store(tmp_path / "a" / "jobs.sqlite")
        store.insert_job(user, name, job_yaml(name, ["sleep 300"]), (0, 1, 1))
        store.update_job(user, name, state="RUNNING")
        store.insert_task(user, name, 0, "worker", 0, 0, "uid-of-a-task-of-a", {}, None, str(tmp_path))
        store.update_task(user, name, 0, "worker", 0, 0, state="RUNNING")
        store.close()
        leftover = subprocess.Popen(["sleep", "300"], start_new_session=True,
                                    env={**os.environ, "PAIJOB_LOCAL_TASK": "uid-of-a-task-of-a",
                                         "PAIJOB_LOCAL_JOB": f"{user}~{name}"})
        try:
            recovered = LocalCluster(tmp_path / "a")
            assert leftover.wait(timeout=15) is not None  # its own leftover: ended
            assert others.poll() is None and client.get_job(job_id)["jobStatus"]["state"] == "RUNNING"
            assert recovered.store.job(user, name)["state"] == "FAILED"
            recovered.shutdown()
            recovered.store.close()
        finally:
            leftover.kill()
            leftover.wait()
        client.stop(job_id)


def test_each_state_dir_has_its_own_cluster_id_and_job_marker(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert cluster_id(tmp_path / "a") == cluster_id(tmp_path / "a") != cluster_id(tmp_path / "b")
    assert stat.S_IMODE((tmp_path / "a" / "cluster-id").stat().st_mode) == 0o600
    a, b = Tracker(tmp_path / "a"), Tracker(tmp_path / "b")
    assert a.job_marker("me~job") != b.job_marker("me~job")
    a.close()
    b.close()


# --------------------------------------------------------------------------- the service


def test_local_down_never_signals_a_process_that_is_not_its_server(
        tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    directory = tmp_path / "state"
    directory.mkdir()
    daemon.write_server_info(directory, {"pid": sleeper.pid, "port": 1, "url": "http://127.0.0.1:1"})
    assert daemon.running(directory) is None
    daemon.write_server_info(directory, {"pid": sleeper.pid, "port": 1, "url": "http://127.0.0.1:1"})
    assert daemon.down(directory) is False
    time.sleep(0.2)
    assert sleeper.poll() is None, "local down killed an unrelated process"
    assert not (directory / "server.json").exists()


def test_the_state_dir_is_private_whatever_the_umask_or_its_old_modes(
        tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    directory = tmp_path / "state"
    (directory / "logs" / "old").mkdir(parents=True)
    for path in (directory, directory / "logs", directory / "logs" / "old"):
        path.chmod(0o755)
    (directory / "logs" / "old" / "all").write_text("an old log\n")
    (directory / "logs" / "old" / "all").chmod(0o644)
    (directory / "server.log").write_text("")
    (directory / "server.log").chmod(0o666)
    # a stale server.json naming a live, unrelated process must not stop `up`, nor get it killed
    daemon.write_server_info(directory, {"pid": sleeper.pid, "port": 1, "url": "http://127.0.0.1:1"})
    old_umask = os.umask(0o022)
    try:
        info = daemon.up(directory)
        try:
            token = daemon.read_token(directory)
            client = PaiClient(info["url"], token, user=local_user(), cluster_name="local", retries=1)
            job_id = client.submit(job_yaml("private", ["echo a secret", "echo out > result.txt",
                                                        "mkdir -p sub && echo x > sub/file"]))
            assert client.wait(job_id, poll=0.1, timeout=60)["jobStatus"]["state"] == "SUCCEEDED"
            paths = [directory, *directory.rglob("*")]
            assert any(p.name == "jobs.sqlite-wal" for p in paths) and any(p.name == "result.txt" for p in paths)
            loose = [f"{p.relative_to(directory)} {stat.filemode(p.lstat().st_mode)}"
                     for p in paths if not p.is_symlink() and p.lstat().st_mode & 0o077]
            assert loose == []
        finally:
            assert daemon.down(directory) is True
    finally:
        os.umask(old_umask)
    assert sleeper.poll() is None


@tracking
def test_killing_the_server_ends_its_escaped_tasks_on_the_next_up(mode: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """kill -9 of the server leaves its tasks running; the next `up` ends them (and only them), in
    both modes: without a cgroup, an escapee that cleared its environment (no marker) is found in the
    tree of the task's main process, which the next server finds from the state dir's record."""
    monkeypatch.setenv("PAIJOB_LOCAL_CGROUP", "1" if mode == "cgroup" else "0")
    directory = tmp_path / "state"
    pids = tmp_path / "pids"
    pids.mkdir()
    info = daemon.up(directory)
    try:
        client = PaiClient(info["url"], daemon.read_token(directory), user=local_user(), cluster_name="local")
        escape = f"setsid env -i bash -c 'echo $$ > {pids}/a.pid; exec sleep 300' &"
        job_id = client.submit(job_yaml("crash", ["( " + escape + " ) ; true", "sleep 300"]))
        wait_running(client, job_id)
        (escaped,) = read_pids(pids, 1)
        os.kill(int(info["pid"]), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while daemon.running(directory) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert alive(escaped)
        info = daemon.up(directory)
        client = PaiClient(info["url"], daemon.read_token(directory), user=local_user(), cluster_name="local")
        assert client.get_job(job_id)["jobStatus"]["state"] == "FAILED"
        assert not alive(escaped)
        assert list((directory / "running").iterdir()) == []  # the records went with their tasks
    finally:
        daemon.down(directory)
