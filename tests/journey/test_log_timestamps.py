"""`paijob logs --timestamps` on the local cluster stamps each line with when the task wrote it.

Read after the job ended, lines a task printed 1 s apart must come out about
1 s apart (they used to carry the moment paijob read them, all within 10 ms).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from suite_helpers import background_cluster, isolate

from paijob import cli

JOB = """\
protocolVersion: 2
name: stamped
type: job
prerequisites: [{type: dockerimage, name: img, uri: python:3.11}]
taskRoles:
  worker:
    instances: 1
    dockerImage: img
    resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}
    commands: ['echo first; sleep 1; echo second >&2; sleep 1; echo third']
"""
STAMP = re.compile(r"^worker/0 \| (\S+Z) (first|second|third)$")


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    isolate(tmp_path, monkeypatch)
    with background_cluster(tmp_path / "state") as directory:
        yield directory


def stamps(out: str) -> dict[str, float]:
    found = {}
    for line in out.splitlines():
        match = STAMP.match(line)
        if match:
            found[match.group(2)] = datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
    return found


def test_a_finished_jobs_lines_carry_the_time_they_were_written(state: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    assert cli.main(["run", str(job), "--local", "--name", "stamped"]) == 0
    capsys.readouterr()

    assert cli.main(["logs", "stamped", "--timestamps"]) == 0
    times = stamps(capsys.readouterr().out)
    assert set(times) == {"first", "second", "third"}
    assert 0.9 <= times["second"] - times["first"] < 3 and 0.9 <= times["third"] - times["second"] < 3

    assert cli.main(["logs", "stamped", "--timestamps", "--stream", "stdout"]) == 0  # its own times file
    times = stamps(capsys.readouterr().out)
    assert set(times) == {"first", "third"} and 1.9 <= times["third"] - times["first"] < 5

    assert cli.main(["logs", "stamped", "--timestamps", "--tail", "2"]) == 0
    times = stamps(capsys.readouterr().out)
    assert set(times) == {"second", "third"} and 0.9 <= times["third"] - times["second"] < 3
