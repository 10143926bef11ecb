"""The whole suite's scratch space.

TMPDIR points into one folder made for this run and removed when it ends, so what the processes under test
leave in TMPDIR (torchrun's and multiprocessing's folders, the logs of a node a test kills with SIGKILL,
which nothing can clean up) never piles up in the machine's /tmp. Tests that check what paijob leaves in
TMPDIR give their processes a fresh TMPDIR of their own. XDG_CACHE_HOME points there too: the template
sandbox's bytecode cache (paijob.render.templating) goes with the run, not into the developer's ~/.cache.

The folder is made where it leaves room for Unix socket paths (at most 107 bytes, ``sun_path``): Python's
multiprocessing binds ``TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX`` (a DataLoader worker handing a tensor over),
Chromium its ``SingletonSocket``. Under a TMPDIR some 35 characters long those no longer fit, and a DataLoader
hung, Chromium would not start (issue 54): then the folder goes in /tmp instead, whatever TMPDIR says.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from suite_helpers import background_cluster

_SCRATCH_VAR = "PAIJOB_TESTS_SCRATCH"


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(_SCRATCH_VAR):  # a pytest started by a test keeps its parent's folder
        return
    scratch = tempfile.mkdtemp(prefix="paijob-tests-", dir=_room_for_sockets(tempfile.gettempdir()))
    os.environ[_SCRATCH_VAR] = scratch
    os.environ["TMPDIR"] = scratch
    os.environ["XDG_CACHE_HOME"] = os.path.join(scratch, "cache")
    tempfile.tempdir = None  # tempfile reads TMPDIR again
    config.stash[_scratch_key] = scratch


def pytest_unconfigure(config: pytest.Config) -> None:
    scratch = config.stash.get(_scratch_key, None)
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)


_scratch_key = pytest.StashKey[str]()
SOCKET_PATH_MAX = 107  # sun_path's 108 bytes, its NUL included
SOCKET_TAIL = 72  # below the scratch folder: /paijob-tests-XXXXXXXX/pymp-XXXXXXXX/listener-XXXXXXXX, Chromium's more


def _room_for_sockets(base: str) -> str:
    """``base`` when socket paths under the scratch folder made in it fit in ``sun_path``, else /tmp."""
    return base if len(os.fsencode(base)) + SOCKET_TAIL <= SOCKET_PATH_MAX else "/tmp"


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One background local cluster for the module (it takes a second or two to start): its state folder.
    The first verb that needs it starts it; it is stopped after the module's last test."""
    with background_cluster(tmp_path_factory.mktemp("cluster") / "state") as state:
        yield state


@pytest.fixture
def local(local_cluster: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``PAIJOB_LOCAL_STATE_DIR`` points at the module's background local cluster, with a 2 s stop grace."""
    monkeypatch.setenv("PAIJOB_LOCAL_STATE_DIR", str(local_cluster))
    monkeypatch.setenv("PAIJOB_LOCAL_STOP_GRACE", "2")
    return local_cluster
