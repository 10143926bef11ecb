"""`paijob render -o FILE` (issue 11 item 4): regular files are replaced
atomically with their permissions kept, symlinks are written through (never
replaced), devices and FIFOs are written in place (never renamed over)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
import yaml
from render_helpers import run_cli

from paijob.common.safefile import write_text
from paijob.errors import PaijobError


def rendered(capsys: pytest.CaptureFixture[str]) -> str:
    code, out, err = run_cli(capsys, "render", "ddp", "--set", "instances=3")
    assert code == 0, err
    return out


def test_a_regular_file_is_replaced_and_keeps_its_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "job.yaml"
    target.write_text("old\n")
    target.chmod(0o640)
    old_inode = target.stat().st_ino
    code, out, err = run_cli(capsys, "render", "ddp", "--set", "instances=3", "--output-file", str(target))
    assert (code, out) == (0, ""), err
    assert target.read_text() == rendered(capsys)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert target.stat().st_ino != old_inode  # a new file renamed into place: atomic
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


def test_a_new_file_gets_the_umask_mode(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        write_text(tmp_path / "new.yaml", "x: 1\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.yaml").stat().st_mode) == 0o640


def test_a_symlink_is_written_through_and_stays_a_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = tmp_path / "real" / "job.yaml"
    real.parent.mkdir()
    real.write_text("old\n")
    real.chmod(0o600)
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    chain = tmp_path / "chain.yaml"
    chain.symlink_to(link)
    code, _, err = run_cli(capsys, "render", "ddp", "--set", "instances=3", "--output-file", str(chain))
    assert code == 0, err
    assert chain.is_symlink() and link.is_symlink()
    assert os.readlink(chain) == str(link) and os.readlink(link) == str(real)
    assert real.read_text() == rendered(capsys)
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert sorted(p.name for p in real.parent.iterdir()) == ["job.yaml"]  # temp file beside the target


def test_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "link.yaml"
    link.symlink_to(tmp_path / "target.yaml")
    write_text(link, "x: 1\n")
    assert link.is_symlink() and (tmp_path / "target.yaml").read_text() == "x: 1\n"


def test_a_symlink_loop_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(PaijobError, match="symlink loop"):
        write_text(tmp_path / "a", "x")


def test_dev_null_is_written_not_replaced(capsys: pytest.CaptureFixture[str]) -> None:
    before = os.stat("/dev/null")
    code, out, err = run_cli(capsys, "render", "ddp", "--output-file", "/dev/null")
    assert (code, out) == (0, ""), err
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert after.st_ino == before.st_ino
    assert not [p for p in os.listdir("/dev") if p.startswith(".null.")]


def test_a_fifo_is_written_in_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()), daemon=True)
    reader.start()
    code, _, err = run_cli(capsys, "render", "ddp", "--set", "instances=3", "--output-file", str(fifo))
    reader.join(timeout=30)
    assert code == 0, err
    assert not reader.is_alive()
    assert stat.S_ISFIFO(fifo.lstat().st_mode)  # still the FIFO
    assert yaml.safe_load(received[0])["taskRoles"]["worker"]["instances"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_output_help_says_what_happens_to_links_and_devices(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "render", "--help")
    assert code == 0
    out = " ".join(out.split())
    assert "atomically" in out and "symlink is written through" in out and "FIFO" in out


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_dev_full_is_a_clear_error_and_stays_a_device(capsys: pytest.CaptureFixture[str]) -> None:
    # as root, the old rename-over would have replaced /dev/full with a regular file
    before = os.stat("/dev/full")
    code, out, err = run_cli(capsys, "render", "ddp", "--output-file", "/dev/full")
    assert (code, out) == (2, "")
    assert err.strip() == "paijob: error: cannot write /dev/full: No space left on device"
    after = os.stat("/dev/full")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
