"""Workdir snapshots (what is shipped, how it is carried), the project config and `paijob cp` paths."""

from __future__ import annotations

import base64
import hashlib
import io
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from paijob import outputs, project, workdir
from paijob.openpai import jsyaml


def make_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def names(root: Path) -> list[str]:
    return [name for name, _ in workdir.list_files(root)]


def test_vcs_venv_and_caches_are_always_left_out(tmp_path: Path) -> None:
    make_tree(tmp_path, {"train.py": "", ".git/HEAD": "", ".venv/bin/python": "", "pkg/__pycache__/m.pyc": "",
                         "pkg/m.py": ""})
    assert names(tmp_path) == ["pkg/m.py", "train.py"]


@pytest.mark.parametrize(("rules", "kept"), [
    ("*.pt\n", ["a/b.txt", "keep.txt", "out/log.txt"]),
    ("out/\n", ["a/b.txt", "a/m.pt", "keep.txt", "x.pt"]),
    ("/x.pt\n", ["a/b.txt", "a/m.pt", "keep.txt", "out/log.txt"]),
    ("a/*.pt\n", ["a/b.txt", "keep.txt", "out/log.txt", "x.pt"]),
    ("**/*.pt\n!a/m.pt\n", ["a/b.txt", "a/m.pt", "keep.txt", "out/log.txt"]),
    ("# comment\n\n*.txt\n!keep.txt\n", ["a/m.pt", "keep.txt", "x.pt"]),
])
def test_gitignore_patterns_at_the_top_level(tmp_path: Path, rules: str, kept: list[str]) -> None:
    make_tree(tmp_path, {"keep.txt": "", "x.pt": "", "a/m.pt": "", "a/b.txt": "", "out/log.txt": ""})
    (tmp_path / ".gitignore").write_text(rules)
    assert names(tmp_path) == sorted([*kept, ".gitignore"])


def test_paijobignore_adds_to_gitignore(tmp_path: Path) -> None:
    make_tree(tmp_path, {"data/big.csv": "", "train.py": "", "notes.md": ""})
    (tmp_path / ".gitignore").write_text("*.md\n")
    (tmp_path / ".paijobignore").write_text("data/\n")
    assert names(tmp_path) == [".gitignore", ".paijobignore", "train.py"]


def test_snapshot_is_deterministic_and_holds_the_files(tmp_path: Path) -> None:
    make_tree(tmp_path, {"train.py": "print(1)\n", "data/x.csv": "1,2\n"})
    first, second = workdir.snapshot(tmp_path), workdir.snapshot(tmp_path)
    assert first.archive == second.archive and first.size == len("print(1)\n") + len("1,2\n")
    with tarfile.open(fileobj=io.BytesIO(first.archive)) as tar:
        assert sorted(tar.getnames()) == ["data/x.csv", "train.py"]
        member = tar.extractfile("data/x.csv")
        assert member is not None and member.read() == b"1,2\n"
    assert "2 files" in first.describe()


def test_snapshot_over_the_limit_is_refused_unless_forced(tmp_path: Path) -> None:
    make_tree(tmp_path, {"weights.bin": "x" * 2000, "train.py": ""})
    with pytest.raises(workdir.WorkdirError, match=r"over the 1\.0 KB limit.*weights\.bin.*--force"):
        workdir.snapshot(tmp_path, limit=1024)
    assert workdir.snapshot(tmp_path, limit=1024, force=True).size == 2000


def test_missing_workdir_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(workdir.WorkdirError, match="no such folder"):
        workdir.snapshot(tmp_path / "nope")


def test_inline_command_unpacks_the_tree_in_bash(tmp_path: Path) -> None:
    make_tree(tmp_path / "src", {"train.py": "print(1)\n", "data/x.csv": "1,2\n"})
    snap = workdir.snapshot(tmp_path / "src")
    command = workdir.inline_command(snap).replace(workdir.INLINE_DIR, str(tmp_path / "unpacked"))
    done = subprocess.run(["bash", "-o", "errexit", "-o", "nounset", "-o", "pipefail", "-c",
                           command + " && cat data/x.csv"], capture_output=True, text=True, check=True)
    assert done.stdout == "1,2\n"
    assert base64.b64encode(snap.archive).decode() in command


def test_inline_archive_over_the_limit_names_the_alternatives(tmp_path: Path) -> None:
    noise = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(4000))  # does not compress
    (tmp_path / "noise.bin").write_bytes(noise)
    snap = workdir.snapshot(tmp_path)
    assert len(snap.archive) > workdir.MAX_INLINE_BYTES
    with pytest.raises(workdir.WorkdirError, match="too big to carry inside the job.*paijobignore"):
        workdir.inline_command(snap)


def test_local_snapshots_are_stored_once_by_content(tmp_path: Path) -> None:
    make_tree(tmp_path / "src", {"train.py": ""})
    snap = workdir.snapshot(tmp_path / "src")
    path = workdir.store_local(snap, tmp_path / "state")
    assert path == workdir.store_local(snap, tmp_path / "state")
    assert path.read_bytes() == snap.archive and path.name == f"{snap.digest}.tar.gz"
    assert workdir.local_command(path) == f"tar -xzf {path}"


def test_prepend_command_goes_first_in_every_role() -> None:
    text = yaml.safe_dump({"name": "j", "taskRoles": {"a": {"commands": ["run a"]}, "b": {"commands": ["run b"]}}})
    job = yaml.safe_load(workdir.prepend_command(text, "tar -xzf x"))
    assert [role["commands"] for role in job["taskRoles"].values()] == [["tar -xzf x", "run a"],
                                                                       ["tar -xzf x", "run b"]]


def test_prepend_command_keeps_what_openpai_reads_in_the_job() -> None:
    # js-yaml (the server) reads `no` as a string and `1e3` as a number; a YAML 1.1
    # round trip would send `false` and "1e3" instead
    text = "name: j\nextras: {gangAllocation: no}\nparameters: {n: 1e3}\ntaskRoles:\n  w: {commands: [x]}\n"
    rewritten = workdir.prepend_command(text, "tar -xzf x")
    job = jsyaml.load_job(rewritten, "rewritten").value
    assert job["extras"]["gangAllocation"] == "no"
    assert job["parameters"]["n"] == 1000


def test_project_config_paths_are_relative_to_its_folder(tmp_path: Path) -> None:
    (tmp_path / "paijob.yaml").write_text("template: ddp\nvalues: [v.yaml]\ncluster: local\nworkdir: .\n")
    found = project.load(tmp_path)
    assert (found.template, found.cluster) == ("ddp", "local")
    assert found.values == (str(tmp_path / "v.yaml"),) and found.workdir == str(tmp_path / ".")
    assert project.load(tmp_path / "elsewhere") == project.Project()


def test_project_config_rejects_unknown_keys(tmp_path: Path) -> None:
    (tmp_path / "paijob.yaml").write_text("template: ddp\nclustr: local\n")
    with pytest.raises(project.ProjectError, match="unknown key.*clustr"):
        project.load(tmp_path)


def test_cp_source_and_paths_outside_the_output_folder(tmp_path: Path) -> None:
    assert outputs.split_source("demo1:ckpt/last.pt") == ("demo1", "ckpt/last.pt")
    with pytest.raises(outputs.OutputError, match="JOB:PATH"):
        outputs.split_source("demo1")
    with pytest.raises(outputs.OutputError, match="outside"):
        outputs.resolve_inside(tmp_path, "../etc/passwd")


def test_copy_out_copies_files_and_folders(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "out", {"result.json": "{}", "ckpt/a.pt": "a"})
    dest = tmp_path / "dest"
    dest.mkdir()
    assert outputs.copy_out(root, "result.json", dest, "j") == dest / "result.json"
    assert outputs.copy_out(root, "ckpt", dest, "j") == dest / "ckpt"
    assert (dest / "ckpt" / "a.pt").read_text() == "a"
    with pytest.raises(outputs.OutputError, match=r"no such file.*there: ckpt/, result\.json"):
        outputs.copy_out(root, "missing.pt", dest, "j")


def test_the_examples_train_script_is_the_one_paijob_init_writes() -> None:
    repo = Path(__file__).resolve().parents[2]
    assert (repo / "examples" / "train.py").read_text() == (repo / "paijob" / "scaffold" / "train.py").read_text()
