"""Workdir snapshots (what is shipped, how it is carried), the project config and `paijob cp` paths."""

from __future__ import annotations

import base64
import hashlib
import io
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
import yaml
from suite_helpers import make_tree

from paijob import project, workdir
from paijob.local import layout
from paijob.openpai import jsyaml, markers
from paijob.validate.report import validate_text

REFERENCE = Path("/work/shared/reference/openpai/upstream")


def names(root: Path) -> list[str]:
    return [name for name, _ in workdir.list_files(str(root))]


def test_vcs_venv_and_caches_are_always_left_out(tmp_path: Path) -> None:
    make_tree(tmp_path, {"train.py": "", ".git/HEAD": "", ".venv/bin/python": "", "pkg/__pycache__/m.pyc": "",
                         "pkg/m.py": "", ".paijobignore": ""})
    assert names(tmp_path) == [".paijobignore", "pkg/m.py", "train.py"]


@pytest.mark.parametrize(("rules", "kept"), [
    ("*.pt\n", ["a/b.txt", "keep.txt", "out/log.txt"]),
    ("out/\n", ["a/b.txt", "a/m.pt", "keep.txt", "x.pt"]),
    ("/x.pt\n", ["a/b.txt", "a/m.pt", "keep.txt", "out/log.txt"]),
    ("a/*.pt\n", ["a/b.txt", "keep.txt", "out/log.txt", "x.pt"]),
    ("**/*.pt\n!a/m.pt\n", ["a/b.txt", "a/m.pt", "keep.txt", "out/log.txt"]),
    ("# comment\n\n*.txt\n!keep.txt\n", ["a/m.pt", "keep.txt", "x.pt"]),
    ("*.txt   \n", ["a/m.pt", "x.pt"]),  # git strips trailing spaces
    ("\\#x\n*.pt\n", ["a/b.txt", "keep.txt", "out/log.txt"]),
])
def test_gitignore_patterns_at_the_top_level(tmp_path: Path, rules: str, kept: list[str]) -> None:
    make_tree(tmp_path, {"keep.txt": "", "x.pt": "", "a/m.pt": "", "a/b.txt": "", "out/log.txt": "",
                         ".paijobignore": ""})
    (tmp_path / ".gitignore").write_text(rules)
    assert names(tmp_path) == sorted([*kept, ".gitignore", ".paijobignore"])


def test_paijobignore_adds_to_gitignore_and_overrides_it(tmp_path: Path) -> None:
    make_tree(tmp_path, {"data/big.csv": "", "train.py": "", "notes.md": "", "README.md": ""})
    (tmp_path / ".gitignore").write_text("*.md\n")
    (tmp_path / ".paijobignore").write_text("data/\n!README.md\n")
    assert names(tmp_path) == [".gitignore", ".paijobignore", "README.md", "train.py"]


def test_nested_gitignore_files_apply_to_their_folder_as_in_git(tmp_path: Path) -> None:
    make_tree(tmp_path, {".paijobignore": "", ".gitignore": "*.log\n", "top.log": "", "top.csv": "",
                         "sub/.gitignore": "*.csv\n!keep.log\n/local.txt\n", "sub/a.csv": "", "sub/keep.log": "",
                         "sub/other.log": "", "sub/local.txt": "", "sub/deep/local.txt": "", "sub/deep/b.csv": "",
                         "other/a.csv": ""})
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    listed = subprocess.run(["git", "-C", str(tmp_path), "ls-files", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout.split()
    assert names(tmp_path) == sorted(listed)  # git is the judge
    assert "sub/keep.log" in listed and "sub/deep/local.txt" in listed and "sub/a.csv" not in listed


def test_a_folder_git_ignores_is_not_entered_so_a_file_in_it_cannot_come_back(tmp_path: Path) -> None:
    make_tree(tmp_path, {".paijobignore": "build/\n!build/keep.txt\n", "build/keep.txt": "", "a.py": ""})
    assert names(tmp_path) == [".paijobignore", "a.py"]


def test_without_a_paijobignore_paijobs_own_output_folders_are_left_out_and_said(tmp_path: Path) -> None:
    make_tree(tmp_path, {"train.py": "", "paijob-output/result.json": "{}", "output/checkpoints/epoch-1.pt": "x",
                         "data/x.csv": ""})
    snap = workdir.snapshot(tmp_path)
    assert snap.files == ("data/x.csv", "train.py")
    assert any("no .paijobignore" in line and "paijob-output/" in line for line in snap.left_out)


@pytest.mark.parametrize("pattern", ["*a*a*a*a*a*a*a*a*a*a*b", "a/**/a/**/a/**/a/**/a/**/a/**/b",
                                     "**/*a*a*a*a*a*a*a*a*a*a*a*a*b/**"])
def test_a_pathological_pattern_ends_well_under_a_second(tmp_path: Path, pattern: str) -> None:
    deep = tmp_path / "/".join(["a"] * 30)
    make_tree(tmp_path, {"a" * 40: "", "a" * 60 + "c": "", str(deep.relative_to(tmp_path)) + "/" + "a" * 50: ""})
    (tmp_path / ".paijobignore").write_text(pattern + "\n")
    started = time.process_time()  # this process's CPU: a pattern that backtracks burns it, a busy machine does not
    workdir.snapshot(tmp_path)
    assert time.process_time() - started < 1.0


@pytest.mark.parametrize(("pattern", "line"), [("[z-a]", 3), ("\\", 3), ("[[:alpha:]]", 3), ("a\\", 3)])
def test_a_bad_pattern_is_one_line_naming_the_file_and_line(tmp_path: Path, pattern: str, line: int) -> None:
    make_tree(tmp_path, {"train.py": "", ".paijobignore": f"# mine\n*.pt\n{pattern}\n"})
    with pytest.raises(workdir.WorkdirError) as caught:
        workdir.snapshot(tmp_path)
    message = str(caught.value)
    assert f"{tmp_path / '.paijobignore'}:{line}: bad pattern" in message and "\n" not in message


@pytest.mark.parametrize("pattern", ["[]", "[!]", "[a-", "ab["])
def test_patterns_git_reads_as_matching_nothing_are_no_error(tmp_path: Path, pattern: str) -> None:
    make_tree(tmp_path, {"train.py": "", "ab": "", ".paijobignore": pattern + "\n"})
    assert names(tmp_path) == [".paijobignore", "ab", "train.py"]


def test_ignoring_everything_is_an_error_not_an_empty_job(tmp_path: Path) -> None:
    make_tree(tmp_path, {"train.py": "", "pkg/m.py": "", ".paijobignore": "**\n"})
    with pytest.raises(workdir.WorkdirError, match="every file is left out.*'\\*\\*'"):
        workdir.snapshot(tmp_path)


def test_snapshot_is_deterministic_and_holds_the_files(tmp_path: Path) -> None:
    make_tree(tmp_path, {"train.py": "print(1)\n", "data/x.csv": "1,2\n"})
    first, second = workdir.snapshot(tmp_path), workdir.snapshot(tmp_path)
    assert first.archive == second.archive and first.size == len("print(1)\n") + len("1,2\n")
    with tarfile.open(fileobj=io.BytesIO(first.archive)) as tar:
        assert sorted(tar.getnames()) == ["data", "data/x.csv", "train.py"]
        member = tar.extractfile("data/x.csv")
        assert member is not None and member.read() == b"1,2\n"
    assert "2 files" in first.describe()


def test_snapshot_over_the_limit_is_refused_unless_forced(tmp_path: Path) -> None:
    make_tree(tmp_path, {"weights.bin": "x" * 20000, "train.py": ""})
    with pytest.raises(workdir.WorkdirError, match=r"unpacks to 24\.0 KB.*over the 10\.0 KB limit.*weights\.bin"
                                                   r".*--force"):
        workdir.snapshot(tmp_path, limit=10 * 1024)
    assert workdir.snapshot(tmp_path, limit=10 * 1024, force=True).size == 20000


def test_many_small_files_count_at_their_size_on_disk_and_against_a_file_limit(tmp_path: Path) -> None:
    for index in range(300):
        (tmp_path / f"f{index}").write_text("x")
    with pytest.raises(workdir.WorkdirError, match="more than 200 files"):
        workdir.snapshot(tmp_path, max_files=200)
    with pytest.raises(workdir.WorkdirError, match=r"unpacks to 1\.2 MB \(300 files, 300 B of content\)"):
        workdir.snapshot(tmp_path, limit=1024 * 1024)
    snap = workdir.snapshot(tmp_path)
    assert snap.unpacked_bytes == 300 * 4096 and snap.tar_bytes >= 300 * 1024
    assert "unpacks to 1.2 MB" in snap.describe()


def test_missing_workdir_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(workdir.WorkdirError, match="no such folder"):
        workdir.snapshot(tmp_path / "nope")


def unpack_inline(job_text: str, role: str, into: Path) -> str:
    """Run the first command of ``role`` as OpenPAI would render it, unpacking into ``into``; returns the dir."""
    job = jsyaml.load_job(job_text, "job").value
    entrypoint = markers.role_entrypoint(job, role).replace(workdir.INLINE_DIR, str(into))
    first = entrypoint.split("\n")[0]
    done = subprocess.run(["bash", "-o", "errexit", "-o", "nounset", "-o", "pipefail", "-c", first + " && pwd"],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_the_job_carries_one_copy_whatever_its_role_count(tmp_path: Path) -> None:
    make_tree(tmp_path / "src", {"train.py": "print(1)\n", "data/x.csv": "1,2\n"})
    snap = workdir.snapshot(tmp_path / "src")
    text = yaml.safe_dump({"protocolVersion": 2, "name": "j", "type": "job",
                           "prerequisites": [{"type": "dockerimage", "name": "img", "uri": "python:3.11"}],
                           "taskRoles": {role: {"dockerImage": "img", "commands": [f"run {role}"],
                                                "resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 0}}
                                         for role in ("server", "worker", "extra")}})
    shipped = workdir.embed(text, snap)
    encoded = base64.b64encode(snap.archive).decode()
    assert shipped.count(encoded) == 1
    for role in ("server", "worker", "extra"):
        folder = unpack_inline(shipped, role, tmp_path / role)
        assert (Path(folder) / "data" / "x.csv").read_text() == "1,2\n"
    assert validate_text(shipped, "shipped").ok


def test_a_job_over_the_servers_body_limit_names_the_workdir_and_its_share(tmp_path: Path) -> None:
    noise = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(4000))  # does not compress
    (tmp_path / "noise.bin").write_bytes(noise)
    snap = workdir.snapshot(tmp_path)
    text = yaml.safe_dump({"name": "j", "taskRoles": {"w": {"commands": ["x"]}}})
    with pytest.raises(workdir.WorkdirError, match=rf"over the 100\.0 KB an OpenPAI server accepts.*the workdir "
                                                   rf"{tmp_path} is 1[0-9][0-9]\.[0-9] KB of it.*paijobignore"):
        workdir.embed(text, snap)


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="OpenPAI's rest-server reference copy is absent")
def test_the_body_limit_is_express_bodyparser_texts_default() -> None:
    express = (REFERENCE / "rest-server-config-express.js").read_text()
    assert "bodyParser.text({ type: 'text/*' })" in express  # no limit given: body-parser's 100kb
    assert jsyaml.SERVER_BODY_LIMIT == 100 * 1024


def test_local_snapshots_are_stored_once_by_content(tmp_path: Path) -> None:
    make_tree(tmp_path / "src", {"train.py": ""})
    snap = workdir.snapshot(tmp_path / "src")
    path = workdir.store_local(snap, layout.snapshot(tmp_path / "state", snap.digest))
    assert path == workdir.store_local(snap, layout.snapshot(tmp_path / "state", snap.digest))
    assert path.read_bytes() == snap.archive and path.name == f"{snap.digest}.tar.gz"


def test_a_removed_local_snapshot_is_one_line_in_the_task_log(tmp_path: Path) -> None:
    command = workdir.local_command(tmp_path / "gone.tar.gz")
    done = subprocess.run(["bash", "-o", "errexit", "-c", command], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 1 and "snapshot" in done.stderr and "submit the job again" in done.stderr
    assert "tar:" not in done.stderr


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


def test_the_examples_train_script_is_the_one_paijob_init_writes() -> None:
    repo = Path(__file__).resolve().parents[2]
    assert (repo / "examples" / "train.py").read_text() == (repo / "paijob" / "scaffold" / "train.py").read_text()


def test_a_horovod_job_for_a_real_cluster_carries_the_snapshot_once(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from paijob import api

    monkeypatch.setenv("PAI_CLUSTER_URL", "https://pai.example.com")
    monkeypatch.setenv("PAI_TOKEN", "t")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    noise = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(700))  # ~45 KB, compresses little
    make_tree(tmp_path / "proj", {"train.py": "print(1)\n", "blob.txt": noise})
    job = api.prepare(api.JobRequest("horovod", sets=[("set", "script=train.py")], workdir=str(tmp_path / "proj")))
    loaded = jsyaml.load_job(job.text, "job").value
    roles = list(loaded["taskRoles"])
    assert len(roles) >= 2 and len(job.text.encode()) < 100 * 1024  # over 2 x 45 KB if carried per role
    assert job.text.count(loaded["parameters"][workdir.PARAMETER]) == 1
    for role in roles:
        assert (Path(unpack_inline(job.text, role, tmp_path / role)) / "blob.txt").read_text() == noise


def test_a_missing_script_says_that_workdir_ships_it() -> None:
    from paijob.runtime.launch import LaunchError, WorkerCommand

    with pytest.raises(LaunchError, match=r"training script 'surely-absent\.py' not found .*`--workdir \.`"):
        WorkerCommand(script="surely-absent.py").check()


def test_init_in_an_existing_project_names_the_files_it_kept(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from paijob import cli

    make_tree(tmp_path, {"train.py": "# mine\n", ".paijobignore": "data/\n"})
    assert cli.main(["init", str(tmp_path)]) == 0
    assert "kept 2 existing file(s): train.py, .paijobignore" in capsys.readouterr().err
    assert (tmp_path / "train.py").read_text() == "# mine\n"
