"""``paijob cp``: copying out of a job's output folder, which untrusted job code wrote, like ``cp -r`` done carefully."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from suite_helpers import make_tree

from paijob import cli, copyout


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """A job output folder as the local cluster leaves it: 0600 files (its server runs with umask 077)."""
    root = make_tree(tmp_path / "state" / "outputs" / "me~job", {"result.json": "{}", "ckpt/epoch-1.pt": "1",
                                                                  "ckpt/epoch-2.pt": "2", "run.sh": "#!/bin/sh\n"})
    for path in root.rglob("*"):
        path.chmod(0o700 if path.is_dir() or path.name == "run.sh" else 0o600)
    return root


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    folder = tmp_path / "dest"
    folder.mkdir()
    return folder


def test_cp_copies_files_and_folders(out: Path, dest: Path) -> None:
    assert copyout.copy_out(out, "result.json", dest, "j").target == dest / "result.json"
    report = copyout.copy_out(out, "ckpt", dest, "j")
    assert report.target == dest / "ckpt" and report.files == 2 and not report.skipped
    assert (dest / "ckpt" / "epoch-2.pt").read_text() == "2"
    with pytest.raises(copyout.OutputError, match=r"no such file.*there: ckpt/, result\.json, run\.sh"):
        copyout.copy_out(out, "missing.pt", dest, "j")


def test_cp_of_the_whole_folder_copies_its_contents_into_dest(out: Path, dest: Path) -> None:
    report = copyout.copy_out(out, ".", dest, "me~job")
    assert report.target == dest and sorted(p.name for p in dest.iterdir()) == ["ckpt", "result.json", "run.sh"]
    assert not (dest / "me~job").exists()
    new = dest.parent / "fresh"
    copyout.copy_out(out, "", new, "me~job")
    assert (new / "result.json").exists()


def test_copies_get_the_mode_cp_gives_not_the_clusters_0600(out: Path, dest: Path) -> None:
    old = os.umask(0o022)
    try:
        copyout.copy_out(out, ".", dest, "j")
    finally:
        os.umask(old)
    assert stat.S_IMODE((dest / "result.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((dest / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "ckpt").stat().st_mode) == 0o755


def test_a_link_to_home_in_the_output_is_not_followed(out: Path, dest: Path, tmp_path: Path) -> None:
    home = make_tree(tmp_path / "home", {".ssh/id_rsa": "KEY", "big.bin": "x" * 1000})
    (out / "home").symlink_to(home)
    (out / "ckpt" / "key").symlink_to(home / ".ssh" / "id_rsa")
    report = copyout.copy_out(out, ".", dest, "j")
    assert not (dest / "home").exists() and not (dest / "ckpt" / "key").exists()
    assert not list(dest.rglob("id_rsa"))
    assert any("home (link out of the job's output folder" in line for line in report.skipped)
    with pytest.raises(copyout.OutputError, match="outside the job's output folder"):
        copyout.copy_out(out, "home/.ssh/id_rsa", dest, "j")


def test_links_inside_are_copied_as_relative_links(out: Path, dest: Path) -> None:
    (out / "latest.pt").symlink_to(out / "ckpt" / "epoch-2.pt")  # absolute, inside
    (out / "ckpt" / "last").symlink_to("epoch-1.pt")
    copyout.copy_out(out, ".", dest, "j")
    assert os.readlink(dest / "latest.pt") == "ckpt/epoch-2.pt" and (dest / "latest.pt").read_text() == "2"
    assert os.readlink(dest / "ckpt" / "last") == "epoch-1.pt"
    single = dest.parent / "single.pt"
    copyout.copy_out(out, "latest.pt", single, "j")  # the link named as the source: its file, as cp -H
    assert single.read_text() == "2" and not single.is_symlink()


def test_loops_dangling_links_and_fifos_are_listed_and_skipped(out: Path, dest: Path) -> None:
    (out / "loop").symlink_to("loop")
    (out / "a").symlink_to("b")
    (out / "b").symlink_to("a")
    (out / "gone").symlink_to("nothing-here")
    os.mkfifo(out / "pipe")
    report = copyout.copy_out(out, ".", dest, "j")
    text = " ".join(report.skipped)
    assert "loop (link loop)" in text and "gone (dangling link to nothing-here)" in text and "pipe (a FIFO" in text
    assert (dest / "result.json").exists() and not (dest / "pipe").exists()


def test_a_loop_as_source_is_one_line(out: Path, dest: Path) -> None:
    (out / "loop").symlink_to("loop")
    with pytest.raises(copyout.OutputError, match="a link loop"):
        copyout.copy_out(out, "loop", dest, "j")


def test_a_fifo_as_source_is_refused_without_blocking(out: Path, dest: Path) -> None:
    os.mkfifo(out / "pipe")
    errors: list[BaseException] = []

    def copy() -> None:
        try:
            copyout.copy_out(out, "pipe", dest, "j")
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    worker = threading.Thread(target=copy, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive() and isinstance(errors[0], copyout.OutputError) and "a FIFO" in str(errors[0])


@pytest.mark.parametrize(("setup", "source", "message"), [
    ("fifo", "result.json", "is a FIFO; give a file or folder path"),
    ("missing-parent", "result.json", "its folder .* does not exist"),
    ("file", "ckpt", "is a file; a folder cannot be copied onto it"),
    ("link-to-file", "result.json", "is a link .* that is not a folder"),
    ("dangling-link", "result.json", "is a link .* that is not a folder"),
    ("folder-in-the-way", "result.json", "is a folder; a file cannot be copied onto it"),
])
def test_each_dest_case_is_one_clear_line(out: Path, tmp_path: Path, setup: str, source: str, message: str) -> None:
    place = tmp_path / "place"
    place.mkdir()
    target = {"fifo": place / "f", "missing-parent": place / "no" / "such" / "x", "file": place / "x.txt",
              "link-to-file": place / "l", "dangling-link": place / "d", "folder-in-the-way": place}[setup]
    if setup == "fifo":
        os.mkfifo(target)
    elif setup == "file":
        target.write_text("mine")
    elif setup == "link-to-file":
        (place / "mine.txt").write_text("mine")
        target.symlink_to(place / "mine.txt")
    elif setup == "dangling-link":
        target.symlink_to(place / "nowhere")
    elif setup == "folder-in-the-way":
        (place / "result.json").mkdir()
    with pytest.raises(copyout.OutputError, match=message) as caught:
        copyout.copy_out(out, source, target, "j")
    assert "\n" not in str(caught.value)
    if setup == "link-to-file":
        assert (place / "mine.txt").read_text() == "mine"


def test_a_folder_is_not_copied_into_itself(out: Path) -> None:
    with pytest.raises(copyout.OutputError, match="cannot be copied into itself"):
        copyout.copy_out(out, ".", out / "ckpt", "j")
    assert sorted(p.name for p in (out / "ckpt").iterdir()) == ["epoch-1.pt", "epoch-2.pt"]


def test_a_link_to_a_folder_as_dest_copies_into_that_folder(out: Path, tmp_path: Path, dest: Path) -> None:
    (tmp_path / "shortcut").symlink_to(dest)
    copyout.copy_out(out, "result.json", tmp_path / "shortcut", "j")
    assert (dest / "result.json").read_text() == "{}"


class Listed(list):  # type: ignore[type-arg]
    """A directory listing taken at one moment, usable as ``with os.scandir(...) as listing``."""

    def __enter__(self) -> Listed:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_file_that_vanishes_or_changes_mid_copy_is_listed(out: Path, dest: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    real_scandir, listings = os.scandir, []

    def rotating(path: str) -> Listed:  # the job rotates checkpoints between the copy's listing and its reads
        with real_scandir(path) as listing:
            entries = list(listing)
        listings.append(Path(path).name)
        if listings.count("ckpt") == 2:  # the first listing measured the copy (plan), the second one copies
            (out / "ckpt" / "epoch-1.pt").unlink(missing_ok=True)
            with open(out / "ckpt" / "epoch-2.pt", "a") as grow:
                grow.write("more")
        return Listed(entries)

    monkeypatch.setattr(os, "scandir", rotating)
    real_fstat, calls = os.fstat, []

    def growing(fd: int) -> os.stat_result:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("result.json"):
            calls.append(fd)
            if len(calls) == 2:  # written while we copied it: the second look sees it
                with open(out / "result.json", "a") as grow:
                    grow.write(" ")
        return real_fstat(fd)

    monkeypatch.setattr(os, "fstat", growing)
    report = copyout.copy_out(out, ".", dest, "j")
    text = " ".join(report.skipped)
    assert "ckpt/epoch-1.pt (vanished while copying)" in text
    assert "result.json (changed while copying" in text and not (dest / "result.json").exists()
    assert (dest / "ckpt" / "epoch-2.pt").read_text() == "2more"
    assert not [p for p in dest.rglob("*") if "paijob-cp" in p.name]


@pytest.mark.parametrize("source", ["me~job/../../..:etc/passwd", "../x:a", "job/x:a", "me~job~x:a", ":a", "job",
                                    "me~:a"])
def test_the_job_part_is_checked_like_a_job_name(source: str) -> None:
    with pytest.raises(copyout.OutputError):
        copyout.split_source(source)


def test_paths_that_climb_out_are_refused(out: Path, dest: Path) -> None:
    for path in ("../x", "ckpt/../../x", "/../../etc/passwd"):
        with pytest.raises(copyout.OutputError):
            copyout.copy_out(out, path, dest, "j")


def test_an_output_folder_replaced_by_a_link_is_refused(tmp_path: Path, dest: Path) -> None:
    home = make_tree(tmp_path / "home", {".ssh/id_rsa": "KEY"})
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "me~job").symlink_to(home)  # the job swapped its own folder for a link
    with pytest.raises(copyout.OutputError, match="is a link"):
        copyout.copy_out(tmp_path / "outputs" / "me~job", ".", dest, "me~job")
    assert not list(dest.iterdir())


def test_cp_cli_lists_what_it_skipped_and_refuses_a_bad_job_in_one_line(out: Path, dest: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAIJOB_LOCAL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for var in ("PAI_CLUSTER_URL", "PAI_TOKEN", "PAI_USER"):
        monkeypatch.delenv(var, raising=False)
    (out / "gone").symlink_to("/nonexistent")
    assert cli.main(["cp", "me~job:.", str(dest), "-c", "local"]) == 1  # not all of it: never exit 0
    err = capsys.readouterr().err
    assert "(4 file(s))" in err and "skipped 1: gone (dangling link to /nonexistent)" in err
    assert cli.main(["cp", "me~job/../../..:etc/passwd", str(dest), "-c", "local"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not a job id" in err and "Traceback" not in err


def test_a_link_copied_by_name_keeps_its_own_name(out: Path, dest: Path) -> None:
    (out / "ok.txt").write_text("the job's")
    (out / "inner_link").symlink_to("ok.txt")
    (dest / "ok.txt").write_text("mine")
    report = copyout.copy_out(out, "inner_link", dest, "j")
    assert report.target == dest / "inner_link" and (dest / "inner_link").read_text() == "the job's"
    assert (dest / "ok.txt").read_text() == "mine"


def test_an_existing_file_is_replaced_only_with_force_or_when_named(out: Path, dest: Path) -> None:
    (dest / "result.json").write_text("mine")
    with pytest.raises(copyout.OutputError, match=r"1 file\(s\) already in DEST .*result\.json.*never overwrites"):
        copyout.copy_out(out, "result.json", dest, "j")
    make_tree(dest, {"ckpt/epoch-2.pt": "my own"})
    with pytest.raises(copyout.OutputError, match=r"ckpt/epoch-2\.pt"):
        copyout.copy_out(out, "ckpt", dest, "j")
    with pytest.raises(copyout.OutputError, match=r"2 file\(s\) already in DEST"):
        copyout.copy_out(out, ".", dest, "j")
    assert (dest / "result.json").read_text() == "mine" and (dest / "ckpt" / "epoch-2.pt").read_text() == "my own"
    assert not (dest / "ckpt" / "epoch-1.pt").exists() and not (dest / "run.sh").exists()
    copyout.copy_out(out, "result.json", dest / "result.json", "j")  # DEST names the file: replace it
    assert (dest / "result.json").read_text() == "{}"
    copyout.copy_out(out, "ckpt", dest, "j", force=True)
    assert (dest / "ckpt" / "epoch-2.pt").read_text() == "2"


def test_a_file_that_appears_in_dest_after_the_check_is_kept(out: Path, dest: Path) -> None:
    plan = copyout.plan(out, ".", dest, "j")
    (dest / "result.json").write_text("mine, written meanwhile")
    report = copyout.copy(plan, "j", ".")
    assert (dest / "result.json").read_text() == "mine, written meanwhile"
    assert any("result.json exists, kept" in line for line in report.skipped) and (dest / "run.sh").exists()
    assert not [p for p in dest.rglob("*") if "paijob-cp" in p.name]


def test_a_sparse_file_stays_sparse(out: Path, dest: Path) -> None:
    size = 5 * 1024 ** 3
    with open(out / "sparse.bin", "wb") as sparse:
        sparse.write(b"head")
        sparse.seek(size // 2)
        sparse.write(b"middle")
        sparse.truncate(size)
    if os.stat(out / "sparse.bin").st_blocks * 512 > 1 << 20:
        pytest.skip("this filesystem does not keep holes")
    plan = copyout.plan(out, "sparse.bin", dest, "j")
    assert (plan.size, plan.files) == (size, 1) and plan.data < 1 << 20
    copyout.copy(plan, "j", "sparse.bin")
    copied = dest / "sparse.bin"
    assert copied.stat().st_size == size and copied.stat().st_blocks * 512 < 1 << 20
    with open(copied, "rb") as reader:
        assert reader.read(4) == b"head"
        reader.seek(size // 2)
        assert reader.read(6) == b"middle"


def test_a_copy_that_would_not_fit_is_refused_and_a_big_one_is_previewed(
        out: Path, dest: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    (out / "big.bin").write_bytes(os.urandom(300_000))
    monkeypatch.setattr(copyout, "_free_bytes", lambda target: 100_000)
    with pytest.raises(copyout.OutputError, match=r"holds 29\d\.\d KB of data .* more than the 97\.7 KB free"):
        copyout.copy_out(out, ".", dest, "j")
    assert not list(dest.iterdir())
    monkeypatch.setenv("PAIJOB_LOCAL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for var in ("PAI_CLUSTER_URL", "PAI_TOKEN", "PAI_USER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(copyout, "PREVIEW_BYTES", 200_000)
    assert cli.main(["cp", "me~job:.", str(dest), "-c", "local", "--force"]) == 0
    err = capsys.readouterr().err
    assert "paijob cp: copying 5 file(s), 29" in err and "to " + str(dest) in err
    assert (dest / "big.bin").stat().st_size == 300_000
