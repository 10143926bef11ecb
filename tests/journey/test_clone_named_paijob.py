"""Working from the folder that holds a clone named ``paijob`` (issue 19, item 1).

``python -m``/``-c`` put the current folder first on ``sys.path``, so a folder
named ``paijob`` there hides the installed package from every Python child
paijob starts. Each test plants such a folder in the current folder of real
processes: shaped like the clone (no ``__init__.py``, a ``runtime/`` folder
with a Dockerfile: a namespace package that hides the editable install), and
as a package of its own (hides any install), then checks that paijob's
children import the real paijob.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import paijob
from paijob.common.cwd_safe import module_args
from paijob.local.tracking import Tracker

BIN = Path(sys.executable).parent
REAL = Path(paijob.__file__).parent

pytestmark = pytest.mark.skipif(not (BIN / "paijob").exists() or not (BIN / "paijob-runtime").exists(),
                                reason="needs the paijob console scripts (pip install -e .)")


def plant(folder: Path, shape: str) -> Path:
    """``folder`` with a look-alike ``paijob/`` (and ``runtime/``) in it; returns ``folder``."""
    fake = folder / "paijob"
    (fake / "runtime").mkdir(parents=True)
    (fake / "runtime" / "Dockerfile").write_text("FROM scratch\n")
    (folder / "runtime").mkdir()  # the clone's own top-level runtime/, in case the cwd is the clone's root
    (folder / "runtime" / "Dockerfile").write_text("FROM scratch\n")
    if shape == "package":
        (fake / "__init__.py").write_text("raise SystemExit('imported the look-alike paijob/ of the current folder')\n")
    return folder


@pytest.fixture(params=["clone", "package"])
def cwd(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return plant(tmp_path / "work", request.param)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAI_", "PAIJOB_", "XDG_"))}
    env.update(HOME=str(tmp_path / "home"), PAIJOB_LOCAL_STATE_DIR=str(tmp_path / "state"),
               PAIJOB_LOCAL_STOP_GRACE="2", PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
    yield env
    subprocess.run([str(BIN / "paijob"), "local", "down"], env=env, capture_output=True, timeout=60)


def test_the_local_cluster_starts_from_a_folder_holding_a_clone_named_paijob(tmp_path: Path,
                                                                             env: dict[str, str]) -> None:
    cwd = plant(tmp_path / "work", "clone")
    up = subprocess.run([str(BIN / "paijob"), "local", "up"], cwd=cwd, env=env, capture_output=True, text=True,
                        timeout=120)
    assert up.returncode == 0, up.stderr + (Path(env["PAIJOB_LOCAL_STATE_DIR"]) / "server.log").read_text()
    status = subprocess.run([str(BIN / "paijob"), "local", "status"], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    down = subprocess.run([str(BIN / "paijob"), "local", "down"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60)
    assert down.returncode == 0, down.stderr


WHERE = "import os, sys, paijob; print('paijob from', os.path.dirname(paijob.__file__)); print('path0', sys.path[0])\n"


@pytest.mark.parametrize(("shape", "mode"), [("clone", "per-gpu"), ("clone", "per-node"), ("package", "per-node")])
def test_runtime_workers_import_the_installed_paijob(tmp_path: Path, env: dict[str, str], shape: str,
                                                     mode: str) -> None:
    cwd = plant(tmp_path / "work", shape)
    (cwd / "scripts").mkdir()
    (cwd / "scripts" / "where.py").write_text(WHERE)
    done = subprocess.run([str(BIN / "paijob-runtime"), "train", "--mode", mode, "--nproc-per-node", "1",
                           "scripts/where.py"], cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"paijob from {REAL}" in done.stdout
    assert f"path0 {cwd / 'scripts'}" in done.stdout  # the script's folder first, as `python scripts/where.py`


def test_a_module_target_still_sees_the_current_folder_first(tmp_path: Path, env: dict[str, str]) -> None:
    cwd = plant(tmp_path / "work", "clone")
    (cwd / "mine").mkdir()
    (cwd / "mine" / "__init__.py").write_text("")
    (cwd / "mine" / "where.py").write_text(WHERE)
    done = subprocess.run([str(BIN / "paijob-runtime"), "train", "--mode", "per-node", "-m", "mine.where"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"paijob from {REAL}" in done.stdout
    assert f"path0 {cwd}" in done.stdout  # as `python -m mine.where` would


def test_module_args_run_a_module_as_python_m_would(cwd: Path) -> None:
    probe = ("import os, sys, paijob; print(sys.argv); print(paijob.__file__); print(__name__); "
             "print('' in sys.path, os.getcwd() in sys.path)")
    (cwd / "probe.py").write_text(probe)
    out = subprocess.run([sys.executable, *module_args("paijob.runtime.worker"), str(cwd / "probe.py"), "a"],
                         cwd=cwd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    argv, imported, name, on_path = out.stdout.splitlines()
    assert argv == str([str(cwd / "probe.py"), "a"])
    assert imported == str(REAL / "__init__.py")
    assert name == "__main__"
    assert on_path == "False True"  # the script's folder (here the cwd) first, as `python probe.py`; never ""


def test_the_task_subreaper_does_not_import_from_the_task_folder(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("the subreaper stub is Linux-only")
    monkeypatch.setenv("PAIJOB_LOCAL_CGROUP", "0")
    work = tmp_path / "task"
    work.mkdir()
    (work / "ctypes.py").write_text("raise SystemExit(99)\n")  # a user's file that shares a stdlib name
    argv = Tracker(tmp_path).wrap("uid", ["bash", "-c", "echo ran"])
    if argv[0] != sys.executable:
        pytest.skip("this machine runs tasks in a cgroup; the subreaper stub is not used")
    done = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (0, "ran\n"), done.stderr


def test_the_python_api_says_why_when_a_clone_hides_the_package(tmp_path: Path) -> None:
    cwd = plant(tmp_path / "work", "clone")
    probe = subprocess.run([sys.executable, "-c", "import paijob; print(paijob.__file__)"], cwd=cwd,
                           capture_output=True, text=True, timeout=60)
    if probe.stdout.strip() != "None":
        pytest.skip("paijob is installed as a regular package here: a namespace look-alike cannot hide it")
    done = subprocess.run([sys.executable, "-c", "from paijob import api"], cwd=cwd, capture_output=True,
                          text=True, timeout=60)
    assert "ShadowedPackageError" in done.stderr
    assert f"found the folder {cwd / 'paijob'}, not the installed package ({REAL})" in done.stderr
    assert "start Python in another folder" in done.stderr
