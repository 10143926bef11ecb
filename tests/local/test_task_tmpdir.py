"""Issue 53 item 6: a local task's TMPDIR is short whatever the state folder, the job's name and HOME, so the
Unix sockets that multiprocessing puts under it (``pymp-XXXXXXXX/listener-XXXXXXXX``) fit in 107 bytes and a
DataLoader with worker processes loads batches; the short folder is private and goes with the task."""

from __future__ import annotations

import importlib.util
import os
import stat
from pathlib import Path

import pytest
from cluster_helpers import TOKEN, job_yaml

from paijob.local import tasktmp
from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.remote.client import PaiClient

LOADER = """
import os, sys, tempfile
import torch
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.arange(256.0).view(64, 4))
loader = DataLoader(data, batch_size=8, num_workers=2)
print("batches", sum(1 for _ in loader), "tmpdir", len(tempfile.gettempdir()), os.environ["TMPDIR"])
"""
LONG_NAME = "a-job-with-a-long-and-descriptive-name-" + "x" * 60  # 99 characters


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (the train extra)")
def test_a_dataloader_with_workers_loads_in_a_long_named_job_under_a_long_home(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deep = tmp_path / ("long-home-" + "h" * 40) / ("state-" + "s" * 40)
    monkeypatch.setenv("HOME", str(deep / "home"))
    state = deep / "state"
    script = tmp_path / "loader.py"
    script.write_text(LOADER)
    with LocalServer(state, TOKEN) as srv:
        client = PaiClient(srv.url, TOKEN, user=local_user(), cluster_name="local", retries=1)
        job_id = client.submit(job_yaml(LONG_NAME, [f"python {script}"]))
        detail = client.wait(job_id, poll=0.2, timeout=60)
        logs = [p.read_text(errors="replace") for p in (state / "logs").rglob("*") if p.is_file()]
    work = next((state / "work").rglob(".tmp"))
    assert len(os.fsencode(work)) + 32 > 107  # the task's own folder: too long for a socket under it
    assert detail["jobStatus"]["state"] == "SUCCEEDED", "".join(logs)[-3000:]
    line = next(line for text in logs for line in text.splitlines() if line.startswith("batches"))
    words = line.split()
    assert words[1] == "8" and int(words[3]) <= 40, line
    assert not os.path.lexists(words[4])  # the short folder went with the task


def test_the_short_folder_is_private_links_the_real_one_and_is_removed(tmp_path: Path) -> None:
    real = tmp_path / ("w" * 120) / ".tmp"
    real.parent.mkdir()
    tmpdir, folder = tasktmp.short(real)
    assert folder is not None and len(tmpdir) <= 40
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(real.stat().st_mode) == 0o700
    assert os.path.realpath(tmpdir) == str(real.resolve())
    (Path(tmpdir) / "scratch").write_text("kept with the job")
    tasktmp.remove(folder)
    assert not folder.exists() and (real / "scratch").read_text() == "kept with the job"


def test_a_server_that_died_leaves_nothing_the_next_one_does_not_sweep(tmp_path: Path) -> None:
    work = tmp_path / "state" / "work"
    mine = work / "alice~job" / "0" / "worker-0" / ".tmp"
    mine.parent.mkdir(parents=True)
    elsewhere = tmp_path / "other-state" / "work" / "bob~job" / "0" / "worker-0" / ".tmp"
    elsewhere.parent.mkdir(parents=True)
    _, left = tasktmp.short(mine)
    _, running = tasktmp.short(elsewhere)  # another cluster's running task: not ours to remove
    try:
        assert left is not None and running is not None
        removed = tasktmp.sweep(work)
        assert str(left) in removed and not left.exists() and running.exists()
    finally:
        tasktmp.remove(running)


def test_no_usable_base_keeps_the_real_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasktmp, "bases", lambda: [])
    real = tmp_path / ".tmp"
    assert tasktmp.short(real) == (str(real), None) and real.is_dir()


def test_a_long_tmpdir_without_a_short_base_is_said_in_the_task_log(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasktmp, "bases", lambda: [])
    state = tmp_path / ("state-" + "s" * 60)
    with LocalServer(state, TOKEN) as srv:
        client = PaiClient(srv.url, TOKEN, user=local_user(), cluster_name="local", retries=1)
        job_id = client.submit(job_yaml(LONG_NAME, ['echo "tmp=$TMPDIR"']))
        assert client.wait(job_id, poll=0.2, timeout=60)["jobStatus"]["state"] == "SUCCEEDED"
    log = "".join(p.read_text(errors="replace") for p in (state / "logs").rglob("stderr"))
    assert "no short folder for TMPDIR" in log and "AF_UNIX path too long" in log
