"""Issue 46's gaps: a token given as --token-env's name, local tasks and the profiles' token variables,
control characters in storagePath."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from cluster_helpers import TOKEN

from paijob import cli
from paijob.local.taskspec import inherited_env
from paijob.remote import profiles

GITHUB_TOKEN = "ghp_" + "R4nd0mT0k3nV4lu3" * 2 + "Ab1x"


@pytest.mark.parametrize("token", [GITHUB_TOKEN, "AKIA" + "IOSFODNN7EXAMPL3", "Zx8" * 12])
def test_a_token_given_as_the_variable_name_is_refused_never_saved_nor_shown(
        capsys: pytest.CaptureFixture[str], token: str) -> None:
    code = cli.main(["cluster", "add", "prod", "--url", "https://pai.example.com", "--token-env", token])
    out, err = capsys.readouterr()
    assert code == 2 and "not the token itself" in err and token not in out + err
    assert not profiles.config_path().exists() or token not in profiles.config_path().read_text()


def test_ordinary_variable_names_are_still_taken() -> None:
    for name in ("PROD_PAI_TOKEN", "MY_CLUSTER_TOKEN_2024", "paiToken"):
        profiles.check_token_env(name)


def test_a_local_task_never_inherits_a_profile_s_token_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """PROD_TOK matches none of the usual secret patterns (*_TOKEN, ...), but a profile reads its token there."""
    profiles.add("prod", "https://pai.example.com", user="alice", token_env="PROD_TOK")
    kept = inherited_env({"PROD_TOK": TOKEN, "HOME": "/home/alice", "LANG": "C.UTF-8"})
    assert kept == {"HOME": "/home/alice", "LANG": "C.UTF-8"}


@pytest.mark.parametrize("escaped", ["team\\truns", "team/\\rruns", "team/\\e[2Jruns"])
def test_control_characters_in_storage_path_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                        escaped: str) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(f'storage: nfs-home\nstoragePath: "{escaped}"\n')  # YAML's escapes: a real TAB, CR, ESC
    code = cli.main(["render", "ddp", "-f", str(values)])
    _, err = capsys.readouterr()
    assert code == 2 and "control characters" in err and "\x1b" not in err


@pytest.mark.parametrize("route", ["nfs-home/../../etc", "nfs-home/team/../../x", "../nfs-home", "nfs-home/a\tb"])
def test_a_route_with_dots_read_back_from_a_job_s_config_is_not_followed(route: str) -> None:
    """`paijob cp` reads the route from the job's config on the cluster, which the job's submitter wrote."""
    from paijob.common.storage_route import _PREFIX, _SUFFIX, read_route

    assert read_route([_PREFIX + shlex.quote(route) + _SUFFIX]) is None
    assert read_route([_PREFIX + shlex.quote("nfs-home/team/runs") + _SUFFIX]) is not None


@pytest.mark.parametrize("value", ["yes", "true", "2"])
def test_a_bad_openpai_before_1_6_setting_is_refused_not_read_as_unset(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """Issue 45: every other PAIJOB_* setting refuses a bad value; this one was silently read as unset."""
    monkeypatch.setenv("PAIJOB_OPENPAI_BEFORE_1_6", value)
    code = cli.main(["render", "ddp"])
    _, err = capsys.readouterr()
    assert code == 2 and "PAIJOB_OPENPAI_BEFORE_1_6" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
