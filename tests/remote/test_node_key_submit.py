"""`paijob submit` to a real OpenPAI gives a job that runs paijob-runtime a new node key among its secrets
(issue 55): sent once per submit, never shown by `--dry-run`, never added for the local cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import job_yaml
from fault_server import USER, FakePai, serve

from paijob import cli
from paijob.common.contract import NODE_KEY_SECRET
from paijob.openpai.jsyaml import load_job
from paijob.remote.request import SECRET_MASK
from paijob.render.node_key import KEY_SHAPE

TOKEN = "node-key-token-4be1d0c9"
RESOURCES = {"cpu": 1, "memoryMB": 2048, "gpu": 0, "ports": {"SynPort": 1}}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakePai]:
    with serve(TOKEN) as server:
        monkeypatch.setenv("PAI_CLUSTER_URL", server.url)
        monkeypatch.setenv("PAI_TOKEN", TOKEN)
        monkeypatch.setenv("PAI_USER", USER)
        yield server


def job_file(tmp_path: Path, name: str, command: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(job_yaml(name, [command], role_extra={"resourcePerInstance": RESOURCES}))
    return path


def test_each_submit_sends_a_new_key_and_the_dry_run_masks_it(
        fake: FakePai, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sent = []
    for name in ("first", "second"):
        assert cli.main(["submit", str(job_file(tmp_path, name, "paijob-runtime train job.py"))]) == 0
        sent.append(load_job(fake.jobs[f"{USER}~{name}"], "sent").value["secrets"][NODE_KEY_SECRET])
    assert all(KEY_SHAPE.fullmatch(key) for key in sent) and sent[0] != sent[1]
    out, err = capsys.readouterr()
    assert not any(key in out + err for key in sent)

    assert cli.main(["submit", str(job_file(tmp_path, "third", "paijob-runtime train job.py")), "--dry-run"]) == 0
    shown = capsys.readouterr().out
    assert load_job(shown, "dry run").value["secrets"] == {NODE_KEY_SECRET: SECRET_MASK}
    assert f"{USER}~third" not in fake.jobs


def test_a_job_without_the_runtime_and_a_local_job_carry_no_key(
        fake: FakePai, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["submit", str(job_file(tmp_path, "plain", "python job.py"))]) == 0
    assert "secrets" not in load_job(fake.jobs[f"{USER}~plain"], "sent").value
    capsys.readouterr()
    assert cli.main(["submit", "ddp", "--dry-run", "-c", "local"]) == 0  # the local cluster hands out its own
    assert "secrets" not in load_job(capsys.readouterr().out, "dry run").value
