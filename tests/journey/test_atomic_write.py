"""Every file paijob keeps (profiles, the local cluster's token and server info, workdir snapshots,
``-o FILE``) is written by safefile.atomic_write: whole or not at all, and durable once written."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from paijob import workdir
from paijob.common import safefile
from paijob.local import daemon, layout
from paijob.remote import profiles

Synced = set[tuple[int, int]]  # (st_dev, st_ino) of every file or folder fsync'ed


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> Synced:
    """Record what is fsync'ed (the real fsync still runs)."""
    seen: Synced = set()
    real = os.fsync

    def fsync(fd: int) -> None:
        info = os.fstat(fd)
        seen.add((info.st_dev, info.st_ino))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def _identity(path: Path) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_dev, info.st_ino


def _write_profiles(tmp_path: Path) -> Path:
    return profiles.save({"current": "a", "clusters": {"a": {"url": "http://127.0.0.1:9", "token": "t"}}})


def _write_token(tmp_path: Path) -> Path:
    daemon.new_token(tmp_path / "state")
    return tmp_path / "state" / "token"


def _write_server_info(tmp_path: Path) -> Path:
    (tmp_path / "state").mkdir()
    daemon.write_server_info(tmp_path / "state", {"pid": 1, "url": "http://127.0.0.1:9"})
    return tmp_path / "state" / "server.json"


def _store_snapshot(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('hi')\n")
    snap = workdir.snapshot(tmp_path / "src")
    return workdir.store_local(snap, layout.snapshot(tmp_path / "state", snap.digest))


def _write_output(tmp_path: Path) -> Path:
    safefile.write_text(tmp_path / "job.yaml", "name: j\n")
    return tmp_path / "job.yaml"


WRITERS: dict[str, Callable[[Path], Path]] = {
    "profiles": _write_profiles,
    "local token": _write_token,
    "local server info": _write_server_info,
    "workdir snapshot": _store_snapshot,
    "-o FILE": _write_output,
}


@pytest.mark.parametrize("writer", WRITERS.values(), ids=WRITERS.keys())
def test_each_file_is_fsynced_with_its_folder_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synced: Synced, writer: Callable[[Path], Path],
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    path = writer(tmp_path)
    assert _identity(path) in synced, "the file's data was not made durable before it replaced the old one"
    assert _identity(path.parent) in synced, "the rename was not made durable (folder not fsync'ed)"
    assert [entry.name for entry in path.parent.iterdir() if entry.name.startswith(".")] == []


@pytest.mark.parametrize("writer", [_write_profiles, _write_token, _write_server_info], ids=["profiles", "token", "info"])
def test_files_that_may_hold_secrets_are_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: Callable[[Path], Path],
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert stat.S_IMODE(os.stat(writer(tmp_path)).st_mode) == 0o600


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    path.write_bytes(b"old")

    def half_then_fail(handle: IO[bytes]) -> None:
        handle.write(b"half")
        raise KeyboardInterrupt  # even an interrupt cleans up

    with pytest.raises(KeyboardInterrupt):
        safefile.atomic_write(path, half_then_fail)
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def test_mode_is_set_before_the_content_is_written(tmp_path: Path) -> None:
    seen: list[int] = []

    def write(handle: IO[bytes]) -> None:
        seen.append(stat.S_IMODE(os.fstat(handle.fileno()).st_mode))

    safefile.atomic_write(tmp_path / "f", write, mode=0o640)
    assert seen == [0o640] and stat.S_IMODE(os.stat(tmp_path / "f").st_mode) == 0o640
