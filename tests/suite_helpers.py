"""Helpers every test folder shares (importable as ``suite_helpers``: ``tests/`` is on the path, the
suite's root conftest lives there). Folder-specific ones stay in each folder's ``*_helpers.py``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from paijob import cli
from paijob.local import daemon


def paijob(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``paijob ARGV`` run in this process, as a user's shell would: its exit code (argparse's exit on a bad
    option too), stdout and stderr."""
    try:
        code = cli.main(list(argv))
    except SystemExit as exit_:  # argparse errors
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def wait_until(condition: Callable[[], object], timeout: float = 10.0, what: str = "the condition") -> None:
    """Poll ``condition()`` every 20 ms until it is true; fail the test after ``timeout`` seconds, saying
    ``what`` it waited for (the one poll-until helper of the suite: a test never sleeps a fixed time)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            pytest.fail(f"{what} did not happen within {timeout:g}s")
        time.sleep(0.02)


def make_tree(root: Path, files: dict[str, str]) -> Path:
    """``files`` (relative path -> text) written under ``root``, folders made as needed; ``root``."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def isolate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *unset: str) -> None:
    """No test reads or writes the user's real profiles or local-cluster state: cluster profiles under
    ``tmp_path/config``, the local cluster's state under ``tmp_path/state``, a 2 s stop grace, no ``PAI_*``
    cluster variables from the developer's shell (nor the further variables in ``unset``)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("PAIJOB_LOCAL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PAIJOB_LOCAL_STOP_GRACE", "2")
    for var in ("PAI_CLUSTER_URL", "PAI_TOKEN", "PAI_USER", *unset):
        monkeypatch.delenv(var, raising=False)


@contextmanager
def background_cluster(state: Path) -> Iterator[Path]:
    """The state folder of a background local cluster (``paijob local up``'s daemon): the first verb that
    needs the cluster starts it there (a second or two; the daemon draws its port itself), and it is stopped
    when the block ends. The suite's fixtures ``local_cluster`` / ``local`` (tests/conftest.py) hold one
    for a whole module."""
    try:
        yield state
    finally:
        daemon.down(state)
