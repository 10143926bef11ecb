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


# --------------------------------------------------------------------------- issue 55 item 5: --token-env


@pytest.mark.parametrize("token", [
    "sk_live_" + "51H8xYzAbCdEfGhIjKlMnOp", "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "xoxb_" + "123456789012_1234567890123_AbCdEfGhIjKlMnOpQrStUvWx", "xoxb-" + "123456789012-AbCdEfGhIjKlMnOp",
    "dapi" + "0123456789abcdef" * 2, "AIza" + "SyD_9tSrke72PouQMnMX_a7eZSW0jkFMBWY",
])
def test_token_env_refuses_token_values_without_echoing_or_saving_them(
        capsys: pytest.CaptureFixture[str], token: str) -> None:
    code = cli.main(["cluster", "add", "prod", "--url", "https://pai.example.com", "--token-env", token])
    out, err = capsys.readouterr()
    assert code == 2 and "not the token itself" in err and token not in out + err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not profiles.config_path().exists() or token not in profiles.config_path().read_text()


@pytest.mark.parametrize("name", ["PATH", "HOME", "USER", "SHELL", "LANG", "LC_ALL", "XDG_RUNTIME_DIR", "PWD"])
def test_token_env_refuses_the_shell_s_own_variables(capsys: pytest.CaptureFixture[str], name: str) -> None:
    code = cli.main(["cluster", "add", "prod", "--url", "https://pai.example.com", "--token-env", name])
    out, err = capsys.readouterr()
    assert code == 2 and f"{name} is a variable of your shell" in err and len(err.strip().splitlines()) == 1
    assert not profiles.config_path().exists() or name not in profiles.config_path().read_text()


def test_token_env_still_takes_ordinary_names() -> None:
    for name in ("PAI_TOKEN", "PROD_PAI_TOKEN", "GITHUB_TOKEN", "MY_CLUSTER_TOKEN_2024", "paiToken", "TOKEN"):
        profiles.check_token_env(name)
