"""``local prune`` never takes away a workdir snapshot a job still needs."""

from __future__ import annotations

import os
import time
from pathlib import Path

from paijob.local import prune
from paijob.local.store import Store

DAY = 86400.0


def stored(state: Path, name: str, age: float) -> Path:
    path = state / "snapshots" / f"{name}.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"archive")
    stamp = time.time() - age
    os.utime(path, (stamp, stamp))
    return path


def job(store: Store, name: str, snapshot: Path, state: str) -> None:
    store.insert_job("me", name, f"taskRoles:\n  w:\n    commands: [tar -xzf {snapshot}]\n", (0, 1, 1))
    store.update_job("me", name, state=state, completed_time=0 if state in ("SUCCEEDED", "FAILED", "STOPPED") else None)


def test_prune_keeps_snapshots_of_waiting_and_running_jobs_and_fresh_ones(tmp_path: Path) -> None:
    waiting, running = stored(tmp_path, "waiting", DAY), stored(tmp_path, "running", DAY)
    done, orphan = stored(tmp_path, "done", DAY), stored(tmp_path, "orphan", DAY)
    fresh = stored(tmp_path, "fresh", 60)  # stored by `paijob run`, job not submitted yet
    store = Store(tmp_path / "jobs.sqlite")
    try:
        job(store, "a", waiting, "WAITING")
        job(store, "b", running, "RUNNING")
        job(store, "c", done, "SUCCEEDED")
    finally:
        store.close()
    report = prune.prune(tmp_path)
    assert sorted(p.name for p in report.paths) == ["done.tar.gz", "orphan.tar.gz"]
    assert waiting.exists() and running.exists() and fresh.exists()
    assert not done.exists() and not orphan.exists()


def test_prune_between_storing_and_submitting_keeps_the_snapshot(tmp_path: Path) -> None:
    archive = stored(tmp_path, "next", 0)
    store = Store(tmp_path / "jobs.sqlite")
    try:
        job(store, "old", stored(tmp_path, "old", DAY), "FAILED")
    finally:
        store.close()
    report = prune.prune(tmp_path)  # no job names "next" yet: `paijob run` is about to submit it
    assert archive.exists() and [p.name for p in report.paths] == ["old.tar.gz"]
