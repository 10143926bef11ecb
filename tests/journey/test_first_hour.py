"""Issue 12's "done when": a new user's first hour, run verbatim through the installed `paijob` command.

Fresh HOME (no profiles, no local-cluster state), a new project from
`paijob init`, a local run that ships the project folder, results copied back
with `paijob cp`, and a failed attempt whose retry resumes from the
checkpoint in PAIJOB_OUTPUT_DIR.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
PAIJOB = BIN / "paijob"

pytestmark = [
    pytest.mark.skipif(not PAIJOB.exists() or not (BIN / "paijob-runtime").exists(),
                       reason="needs the paijob console scripts (pip install -e .)"),
    pytest.mark.slow,  # about 30 s of real jobs: run by .ci/run's slow stage (`pytest -m slow`)
]


@pytest.fixture
def home(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a new user: an empty HOME, nothing of ours configured."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PAI_", "PAIJOB_", "XDG_"))}
    env["HOME"] = str(tmp_path / "home")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PAIJOB_LOCAL_STOP_GRACE"] = "2"
    (tmp_path / "home").mkdir()
    yield env
    try:
        subprocess.run(["paijob", "local", "down"], env=env, capture_output=True, timeout=120)
    finally:  # a slow or failed `local down` must not leave this HOME's server running
        info = Path(env["HOME"]) / ".local/state/paijob/local/server.json"
        if info.exists():
            with contextlib.suppress(ValueError, KeyError, OSError):
                os.kill(int(json.loads(info.read_text())["pid"]), signal.SIGKILL)


def sh(command: str, cwd: Path, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_init_run_cp_and_a_retry_that_resumes(tmp_path: Path, home: dict[str, str]) -> None:
    done = sh("paijob init demo && cd demo && paijob run --local --workdir . --name demo1", tmp_path, home)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "~demo1 SUCCEEDED" in done.stderr
    state = Path(home["HOME"]) / ".local/state/paijob/local"
    assert "workdir" in done.stderr and "4 files" in done.stderr  # the snapshot's size is reported

    project = tmp_path / "demo"
    copied = sh("paijob cp demo1:result.json . && paijob cp demo1:checkpoints ckpts", project, home)
    assert copied.returncode == 0, copied.stderr
    result = json.loads((project / "result.json").read_text())
    assert result["epochs"] == 3 and result["world_size"] == 2
    assert sorted(p.name for p in (project / "ckpts").iterdir()) == ["epoch-0.pt", "epoch-1.pt", "epoch-2.pt"]

    status = sh("paijob status demo1", project, home)
    assert status.returncode == 0, status.stderr
    assert str(state / "outputs") in status.stdout

    # attempt 0 fails after epoch 1's checkpoint; jobRetryCount 1 (values.yaml) retries, and it resumes
    retry = sh("paijob run --local --name demo2 --set 'args=[--epochs, \"3\", --fail-at-epoch, \"1\"]'",
               project, home)
    assert retry.returncode == 0, retry.stderr + retry.stdout
    assert "failing on purpose after epoch 1" in retry.stdout
    assert "--- job attempt 1" in retry.stdout
    resumed = [line for line in retry.stdout.splitlines() if "resumed from" in line]
    assert resumed and resumed[0].endswith("epoch-1.pt (epoch 1 done)")
    epochs_trained_in_retry = [line for line in retry.stdout.split("--- job attempt 1", 1)[1].splitlines()
                               if "saved" in line]
    assert [line.split("epoch ")[1].split()[0] for line in epochs_trained_in_retry] == ["2"]


def test_a_task_finds_files_relative_to_the_workdir_and_ignored_ones_stay_home(
        tmp_path: Path, home: dict[str, str]) -> None:
    project = tmp_path / "proj"
    (project / "data").mkdir(parents=True)
    (project / "data" / "train.csv").write_text("a,b\n1,2\n")
    (project / "big.bin").write_bytes(b"x" * 1000)
    (project / ".gitignore").write_text("*.bin\n")
    (project / ".git").mkdir()
    (project / ".git" / "HEAD").write_text("ref")
    job = tmp_path / "job.yaml"
    shutil.copy(Path(__file__).parent / "files" / "ls-job.yaml", job)
    ran = sh(f"paijob run {job} --local --workdir {project}", tmp_path, home, timeout=120)
    assert ran.returncode == 0, ran.stderr + ran.stdout
    lines = ran.stdout.splitlines()
    assert "worker/0 | a,b" in lines
    listed = {line.split(" | ", 1)[1] for line in lines if line.startswith("worker/0 | ")}
    assert {".gitignore", "data"} <= listed and not {"big.bin", ".git"} & listed
    assert "2 files" in ran.stderr  # .gitignore + data/train.csv
