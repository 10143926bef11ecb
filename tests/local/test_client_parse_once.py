"""One client command reads a job's text once and builds its job model once.

``paijob submit`` / ``run`` render (or read) the job and validate it: that read (``jsyaml.load_job``)
and that model (``parse_job``) are handed down to the rename, the workdir, the placeholder-image
check and the client's submit, which read no text again. A carried workdir adds commands: the job
as sent is checked again from the mapping paijob wrote (a second model, still no second read).
The local server is another reader with its own test (test_local_parse_once); the in-process one
names what it reads "job", and is counted apart here.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import TOKEN, job_yaml

from paijob import cli
from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.openpai import jsyaml, model
from paijob.remote import profiles

SERVER_SOURCE = "job"  # what the local server calls the text it reads


@dataclass
class Counts:
    loads: list[str] = field(default_factory=list)  # the source named in each jsyaml.load_job
    parses: int = 0

    def client_loads(self) -> list[str]:
        return [source for source in self.loads if source != SERVER_SOURCE]


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counts]:
    """Every job text read in this process (``load_job``) and every model built, wherever the two
    functions were imported to (modules imported later see the patched module attributes)."""
    import paijob.api  # noqa: F401  (the modules a submit uses, imported before their names are patched)
    import paijob.remote.client  # noqa: F401
    import paijob.render.job_name  # noqa: F401
    import paijob.render.templating  # noqa: F401
    import paijob.workdir.carry  # noqa: F401

    seen = Counts()
    load, parse = jsyaml.load_job, model.parse_job

    def counted_load(text: Any, source: str) -> jsyaml.Loaded:
        seen.loads.append(source)
        return load(text, source)

    def counted_parse(raw: Any) -> model.Job:
        seen.parses += 1
        return parse(raw)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("paijob"):
            if getattr(module, "load_job", None) is load:
                monkeypatch.setattr(module, "load_job", counted_load)
            if getattr(module, "parse_job", None) is parse:
                monkeypatch.setattr(module, "parse_job", counted_parse)
    yield seen


@pytest.fixture
def job_file(tmp_path: Path) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(job_yaml("once", ["echo hi"]))
    return str(path)


@pytest.fixture
def workdir(tmp_path: Path) -> str:
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "train.py").write_text("print('hi')\n")
    return str(folder)


def paijob(*argv: str) -> None:
    assert cli.main(list(argv)) == 0


@pytest.mark.parametrize("extra", [[], ["--name", "renamed"], ["--unique-suffix"]])
def test_submit_dry_run_reads_the_job_once(counts: Counts, job_file: str, capsys: pytest.CaptureFixture[str],
                                           extra: list[str]) -> None:
    paijob("submit", job_file, "-c", "local", "--dry-run", *extra)
    assert (counts.loads, counts.parses) == ([job_file], 1)
    assert "name: " + ("renamed" if extra[:1] == ["--name"] else "once") in capsys.readouterr().out


def test_a_rendered_template_with_a_workdir_is_read_once(counts: Counts, workdir: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    paijob("submit", "ddp", "--set", "script=train.py", "--workdir", workdir, "-c", "local", "--name", "x",
           "--dry-run")
    assert counts.loads == ["ddp (rendered)"]
    assert counts.parses == 2  # the rendered job, and the job as sent (the workdir's commands added)
    assert "tar -xzf" in capsys.readouterr().out


def test_submit_to_the_local_cluster_reads_the_job_once(counts: Counts, job_file: str, local_cluster: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAIJOB_LOCAL_STATE_DIR", str(local_cluster))
    paijob("submit", job_file, "-c", "local", "--name", "local-once", "--wait")
    assert (counts.client_loads(), counts.parses) == ([job_file], 1)


def test_run_local_reads_the_job_once(counts: Counts, job_file: str, local_cluster: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAIJOB_LOCAL_STATE_DIR", str(local_cluster))
    paijob("run", job_file, "--local")
    assert (counts.client_loads(), counts.parses) == ([job_file], 1)


def test_a_remote_submit_reads_the_job_once_and_the_server_once(
        counts: Counts, job_file: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workdir: str) -> None:
    monkeypatch.setenv("SRV_TOKEN", TOKEN)
    with LocalServer(tmp_path / "server", TOKEN) as server:
        profiles.add("srv", server.url, user=local_user(), token_env="SRV_TOKEN")
        paijob("submit", job_file, "-c", "srv", "--unique-suffix")
        assert counts.loads == [job_file, SERVER_SOURCE]
        assert counts.parses == 2  # the client's model, and the server's (one each)
        counts.loads.clear()
        paijob("submit", job_file, "-c", "srv", "--name", "with-code", "--workdir", workdir)
        assert counts.loads == [job_file, SERVER_SOURCE]  # the workdir travels in the text, read once
