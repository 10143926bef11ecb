"""`paijob submit --dry-run` shows the request with the token and the job's secret values masked."""

from __future__ import annotations

from pathlib import Path

import pytest

from paijob import cli
from paijob.openpai.jsyaml import load_job
from paijob.remote.request import SECRET_MASK, mask_secrets


def test_dry_run_masks_secret_values_and_keeps_their_names(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["submit", "ddp", "--dry-run", "-c", "local", "--set", "secrets.registryPassword=hunter2xyz",
                     "--set", "secrets.note=a&b $c 'q'"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "hunter2xyz" not in out + err and "a&b $c" not in out
    shown = load_job(out, "dry run").value  # still a job YAML, with the secrets' names
    assert shown["secrets"] == {"registryPassword": SECRET_MASK, "note": SECRET_MASK}
    assert shown["taskRoles"]  # the rest of the job is shown as it is sent


def test_secrets_written_in_flow_style_are_masked_too(tmp_path: Path) -> None:
    body = "protocolVersion: 2\nname: j\ntype: job\nsecrets: {token: s3cr3t-value, n: 12345}\ntaskRoles: {}\n"
    shown = mask_secrets(body)
    assert "s3cr3t-value" not in shown and "12345" not in shown
    assert load_job(shown, "x").value["taskRoles"] == {}
    assert mask_secrets("name: j\n") == "name: j\n"
