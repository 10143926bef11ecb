"""After `paijob local prune`, `paijob logs JOB` says the logs were pruned, when, and how to keep them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from suite_helpers import background_cluster, isolate

from paijob import cli

JOB = """\
protocolVersion: 2
name: pruned
type: job
prerequisites: [{type: dockerimage, name: img, uri: python:3.11}]
taskRoles:
  worker:
    instances: 1
    dockerImage: img
    resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}
    commands: ['echo a line the prune removes']
"""


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    isolate(tmp_path, monkeypatch)
    with background_cluster(tmp_path / "state") as directory:
        yield directory


def test_logs_of_a_pruned_job_say_it_was_pruned(state: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    assert cli.main(["run", str(job), "--local", "--name", "pruned"]) == 0
    assert cli.main(["logs", "pruned"]) == 0
    assert "a line the prune removes" in capsys.readouterr().out
    assert cli.main(["local", "prune"]) == 0
    capsys.readouterr()
    code = cli.main(["logs", "pruned"])
    err = capsys.readouterr().err
    assert code == 2
    assert re.search(r"were removed by `paijob local prune` on \d{4}-\d\d-\d\d \d\d:\d\d UTC", err), err
    assert "paijob logs JOB > JOB.log" in err and "--older-than" in err


def test_logs_missing_for_another_reason_do_not_blame_the_prune(state: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    assert cli.main(["run", str(job), "--local", "--name", "pruned"]) == 0
    for log in (state / "logs").rglob("all"):
        log.unlink()
    capsys.readouterr()
    assert cli.main(["logs", "pruned"]) == 2
    err = capsys.readouterr().err
    assert "Log of task is not found" in err and "prune" not in err
