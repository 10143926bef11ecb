"""The service layer (paijob.api) without a cluster: prepare, workdir shipping per cluster kind, dry run;
and the local cluster's resource warnings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from paijob import api, workdir
from paijob.local import capacity


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("PAIJOB_LOCAL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    for var in ("PAI_CLUSTER_URL", "PAI_TOKEN", "PAI_USER"):
        monkeypatch.delenv(var, raising=False)


def project(tmp_path: Path) -> Path:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "train.py").write_text("print('hi')\n")
    return folder


def test_prepare_ships_the_workdir_through_the_state_dir_on_the_local_cluster(tmp_path: Path) -> None:
    job = api.prepare(api.JobRequest("ddp", sets=[("set", "script=train.py")], workdir=str(project(tmp_path)),
                                     cluster="local"))
    assert not (tmp_path / "state").exists()  # prepare writes nothing: the snapshot is in memory
    api.ship(job)  # what submit does first
    commands = yaml.safe_load(job.text)["taskRoles"]["worker"]["commands"]
    stored = list((tmp_path / "state" / "snapshots").glob("*.tar.gz"))
    assert len(stored) == 1 and commands[0] == workdir.local_command(stored[0])
    assert stored[0].read_bytes() == job.snapshot.archive
    assert commands[-1].endswith("train.py") and "1 files" in job.notes[0]


def test_prepare_carries_the_workdir_in_the_job_for_a_real_cluster(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAI_CLUSTER_URL", "https://pai.example.com")
    monkeypatch.setenv("PAI_TOKEN", "t")
    monkeypatch.setenv("PAI_USER", "alice")
    job = api.prepare(api.JobRequest("ddp", sets=[("set", "script=train.py")], workdir=str(project(tmp_path))))
    first = yaml.safe_load(job.text)["taskRoles"]["worker"]["commands"][0]
    assert first.startswith(f"rm -rf {workdir.INLINE_DIR}") and "base64 -d | tar -xz" in first
    assert not (tmp_path / "state").exists()  # nothing local was touched
    assert "POST https://pai.example.com/rest-server/api/v2/jobs" in api.dry_run_text(job)


def test_the_workdir_value_and_the_project_config_name_the_folder(tmp_path: Path) -> None:
    folder = project(tmp_path)
    by_value = api.prepare(api.JobRequest("ddp", sets=[("set", "script=train.py"), ("set", f"workdir={folder}")],
                                          cluster="local"))
    assert by_value.notes and str(folder) in by_value.notes[0]
    (folder / "paijob.yaml").write_text("template: ddp\ncluster: local\nworkdir: .\n")
    (folder / "v.yaml").write_text("script: train.py\nname: from-project\n")
    (folder / "paijob.yaml").write_text("template: ddp\nvalues: [v.yaml]\ncluster: local\nworkdir: .\n")
    from paijob import project as project_config

    job = api.prepare(api.JobRequest(), project_config.load(folder))
    assert job.name == "from-project" and job.cluster == "local" and job.notes


def test_prepare_without_a_job_or_project_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(api.PaijobError, match="paijob init"):
        api.prepare(api.JobRequest())


def test_local_cluster_warns_about_what_the_machine_lacks() -> None:
    laptop = capacity.Machine(gpus=0, cpus=2, memory_mb=8192)
    lines = capacity.warnings([(4, 8, 48, 393216)], laptop)
    assert "32 GPU(s)" in lines[0] and "192 CPU core(s)" in lines[1] and "1572864 MB" in lines[2]
    assert "does not enforce" in lines[-1]
    assert capacity.warnings([(2, 0, 1, 2048)], laptop) == []


def test_init_writes_the_starter_and_keeps_what_is_there(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from paijob import cli

    (tmp_path / "My Project").mkdir()
    (tmp_path / "My Project" / "train.py").write_text("# mine\n")
    assert cli.main(["init", str(tmp_path / "My Project")]) == 0
    folder = tmp_path / "My Project"
    assert (folder / "train.py").read_text() == "# mine\n"  # never overwritten
    assert yaml.safe_load((folder / "values.yaml").read_text())["name"] == "My-Project"
    from paijob import project as project_config

    config = project_config.load(folder)
    assert (config.template, config.cluster, config.workdir) == ("ddp", "local", str(folder / "."))
    assert (folder / ".paijobignore").is_file()
    assert "kept 1 existing file" in capsys.readouterr().err


def test_init_into_a_folder_it_cannot_create_is_one_line_and_exit_2(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from paijob import cli

    (tmp_path / "a-file").write_text("x")
    assert cli.main(["init", str(tmp_path / "a-file" / "demo")]) == 2
    err = capsys.readouterr().err
    assert "cannot write the project into" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def test_submit_dry_run_leaves_the_local_state_dir_untouched(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from paijob import cli

    argv = ["submit", "ddp", "--set", "script=train.py", "--workdir", str(project(tmp_path)), "-c", "local",
            "--dry-run"]
    everything = _tree(tmp_path)  # the current folder: the project, the profiles, where the state dir goes
    assert cli.main(argv) == 0
    assert _tree(tmp_path) == everything
    assert not (tmp_path / "state").exists()  # not created, no snapshot stored
    err = capsys.readouterr().err
    assert "stored in" not in err  # issue 45: it said "stored in" a file it did not write
    assert "written when the job is submitted, never by --dry-run" in err  # where a real submit will store it
    (tmp_path / "state" / "snapshots").mkdir(parents=True)
    (tmp_path / "state" / "snapshots" / "old.tar.gz").write_bytes(b"x")
    before = _tree(tmp_path / "state")
    assert cli.main(argv) == 0
    assert _tree(tmp_path / "state") == before


def test_the_job_handed_on_is_the_text_as_the_server_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare reads the job once and keeps the mapping in step with its edits: what submit sends and
    what it checks agree, down to a string that YAML 1.2 reads as a number when written plain."""
    from paijob.openpai.jsyaml import load_job

    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump({
        "protocolVersion": 2, "name": "exact", "type": "job", "description": "DESCRIPTION",
        "prerequisites": [{"type": "dockerimage", "name": "img", "uri": "python:3.11"}],
        "taskRoles": {"worker": {"dockerImage": "img", "commands": ["python train.py"],
                                 "resourcePerInstance": {"cpu": 1, "memoryMB": 256, "gpu": 0}}}},
        ).replace("DESCRIPTION", "'1e3'"))  # PyYAML writes 1e3 plain, which js-yaml reads as 1000
    monkeypatch.setenv("PAI_CLUSTER_URL", "https://pai.example.com")  # the default: a real cluster
    monkeypatch.setenv("PAI_TOKEN", "t")
    monkeypatch.setenv("PAI_USER", "alice")
    code = project(tmp_path)
    for cluster in ("local", None):  # the workdir stored locally, or carried in the text
        job = api.prepare(api.JobRequest(str(job_file), name="renamed", workdir=str(code), cluster=cluster))
        assert load_job(job.text, "sent").value == job.document == api.dry_run(job).job
        assert job.document["description"] == "1e3" and job.document["name"] == "renamed"
    job.text = job.text.replace("python train.py", "python other.py")  # a caller's own edit
    assert job.sent_job() is None and api.dry_run(job).job is None  # then submit reads the text it sends
