"""Cluster profiles, login, and the cluster verbs of the `paijob` CLI against an in-process local cluster."""

from __future__ import annotations

import base64
import io
import json
import logging
import stat
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import TOKEN, job_yaml
from suite_helpers import paijob

from paijob import cli
from paijob.api import resolve_cluster
from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.remote import profiles


def test_cluster_profiles_are_added_listed_used_and_removed(capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROD_TOKEN", TOKEN)
    code, out, _ = paijob(capsys, "cluster", "add", "prod", "--url", "https://pai.example.com/",
                          "--token-env", "PROD_TOKEN", "--user", "alice")
    assert code == 0
    path = profiles.config_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert TOKEN not in path.read_text()  # only the variable's name is stored
    cluster = resolve_cluster()
    assert (cluster.name, cluster.url, cluster.user, cluster.token) == ("prod", "https://pai.example.com", "alice", TOKEN)
    assert TOKEN not in repr(cluster)
    paijob(capsys, "cluster", "add", "lab", "--url", "http://10.0.0.5", "--user", "bob")
    code, out, _ = paijob(capsys, "cluster", "list")
    assert "$PROD_TOKEN" in out and "lab" in out and TOKEN not in out
    assert paijob(capsys, "cluster", "use", "lab")[0] == 0
    assert resolve_cluster().name == "lab"
    assert paijob(capsys, "cluster", "remove", "lab")[0] == 0
    assert resolve_cluster().name == "prod"
    code, _, err = paijob(capsys, "status", "x~y", "-c", "nope")
    assert code == 2 and "no cluster named 'nope'" in err and "paijob cluster add nope" in err


def test_a_missing_token_variable_says_what_to_export(capsys: pytest.CaptureFixture[str]) -> None:
    profiles.add("prod", "https://pai.example.com", user="alice", token_env="UNSET_TOKEN_VAR")
    code, _, err = paijob(capsys, "list", "-c", "prod")
    assert code == 2 and "export UNSET_TOKEN_VAR" in err


def test_environment_overrides_the_profiles(monkeypatch: pytest.MonkeyPatch) -> None:
    profiles.add("prod", "https://pai.example.com", user="alice", token_env="X")
    monkeypatch.setenv("PAI_CLUSTER_URL", "https://other.example.com")
    monkeypatch.setenv("PAI_TOKEN", TOKEN)
    monkeypatch.setenv("PAI_USER", "carol")
    cluster = resolve_cluster()
    assert (cluster.url, cluster.user, cluster.token) == ("https://other.example.com", "carol", TOKEN)
    assert resolve_cluster("prod").token == TOKEN  # PAI_TOKEN wins over the profile's source


def test_user_name_is_read_from_a_jwt_token() -> None:
    payload = base64.urlsafe_b64encode(json.dumps({"username": "dave"}).encode()).decode().rstrip("=")
    assert profiles.user_from_token(f"e30.{payload}.sig") == "dave"
    assert profiles.user_from_token("opaque") is None


def test_no_cluster_configured_means_the_local_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    from paijob.local import daemon

    sentinel = profiles.Cluster("local", "http://127.0.0.1:1", "me", "t")
    monkeypatch.setattr(daemon, "local_cluster", lambda *a, **k: sentinel)
    assert resolve_cluster() is sentinel
    assert resolve_cluster("local") is sentinel


@pytest.fixture
def remote(server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """A profile 'srv' for the in-process server, its token in $SRV_TOKEN."""
    monkeypatch.setenv("SRV_TOKEN", TOKEN)
    profiles.add("srv", server.url, user=local_user(), token_env="SRV_TOKEN")
    return "srv"


def test_the_token_never_appears_in_output_logs_or_dry_runs(capsys: pytest.CaptureFixture[str],
                                                            caplog: pytest.LogCaptureFixture,
                                                            remote: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.DEBUG)
    job = tmp_path / "job.yaml"
    job.write_text(job_yaml("secretive", ["echo hi"]))
    seen = []
    for argv in (
        ["-v", "submit", str(job), "-c", remote, "--dry-run"],
        ["-v", "submit", str(job), "-c", remote, "--wait"],
        ["-v", "status", "secretive", "-c", remote],
        ["-v", "status", "secretive", "-c", remote, "--output", "json"],
        ["-v", "list", "-c", remote],
        ["-v", "logs", "secretive", "-c", remote],
        ["cluster", "list"],
    ):
        code, out, err = paijob(capsys, *argv)
        assert code == 0, (argv, err)
        seen.append(out + err)
    monkeypatch.setenv("SRV_TOKEN", "wrong-" + TOKEN)
    code, out, err = paijob(capsys, "-v", "list", "-c", remote)
    assert code == 2 and "not authorised" in err and "paijob login srv" in err
    seen.append(out + err)
    everything = "\n".join(seen) + caplog.text
    assert "Authorization" in seen[0] and "SRV_TOKEN" in seen[0]  # the dry run says where it comes from
    assert TOKEN not in everything


def test_login_stores_the_token_with_mode_0600(capsys: pytest.CaptureFixture[str], server: LocalServer,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(TOKEN + "\n"))  # the local cluster's password is its token
    code, out, err = paijob(capsys, "login", "mine", "--url", server.url, "--user", local_user(), "--password-stdin")
    assert code == 0, err
    assert "application token" in err
    path = profiles.config_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert TOKEN not in out + err
    assert resolve_cluster("mine").token == TOKEN
    code, out, _ = paijob(capsys, "list", "-c", "mine")
    assert code == 0 and "no jobs" in out
    monkeypatch.setattr("paijob.commands.login._interactive", lambda: True)  # as on a terminal
    monkeypatch.setattr("getpass.getpass", lambda prompt="": "wrong")
    code, _, err = paijob(capsys, "login", "mine", "--user", local_user())
    assert code == 2 and "Password is incorrect" in err


def test_login_without_a_terminal_says_how_to_pass_the_password(capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    profiles.add("prod", "https://pai.example.com", user="alice", token_env="PROD_TOKEN")
    before = profiles.config_path().read_text()
    code, _, err = paijob(capsys, "login", "prod")
    assert code == 2 and "--password-stdin" in err and "Traceback" not in err and len(err.splitlines()) == 1
    code, _, err = paijob(capsys, "login", "prod", "--user", "alice", "--password-stdin")
    assert code == 2 and "stdin is empty" in err
    assert profiles.config_path().read_text() == before


def test_a_failed_login_leaves_the_profile_as_it_was(capsys: pytest.CaptureFixture[str], server: LocalServer,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    profiles.add("mine", server.url, user=local_user(), token_env="MINE_TOKEN")
    before = profiles.config_path().read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO("wrong-password\n"))
    code, _, err = paijob(capsys, "login", "mine", "--url", server.url, "--user", local_user(), "--password-stdin")
    assert code == 2 and "Password is incorrect" in err and "wrong-password" not in err
    assert profiles.config_path().read_text() == before  # token_env kept, URL unchanged
    monkeypatch.setattr("sys.stdin", io.StringIO(TOKEN + "\n"))
    code, _, err = paijob(capsys, "login", "mine", "--user", local_user(), "--password-stdin")
    assert code == 0 and "$MINE_TOKEN" in err  # a successful login replaces token_env, and says so
    assert "token_env" not in profiles.load()["clusters"]["mine"]


@pytest.mark.parametrize("url", ["pai.example.com", "ftp://pai.example.com", "http://pai.example.com:99999",
                                 "http://:8080", "https://pai.example.com:port"])
def test_a_bad_cluster_url_in_the_environment_is_a_clear_error(capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("PAI_CLUSTER_URL", url)
    monkeypatch.setenv("PAI_TOKEN", TOKEN)
    for verb in (["list"], ["status", "x~y"], ["stop", "x~y"], ["logs", "x~y"]):
        code, out, err = paijob(capsys, *verb)
        assert code == 2 and "PAI_CLUSTER_URL" in err and len(err.splitlines()) == 1, (verb, err)
        assert "Traceback" not in err and TOKEN not in out + err


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "-inf", "soon"])
def test_a_timeout_that_is_not_a_positive_finite_number_is_refused(capsys: pytest.CaptureFixture[str],
                                                                   value: str) -> None:
    for verb in (["list"], ["status", "x~y"], ["login", "prod"]):
        with pytest.raises(SystemExit) as exit_:
            cli.main([*verb, f"--timeout={value}"])
        _, err = capsys.readouterr()
        assert exit_.value.code == 2 and "--timeout" in err and "seconds" in err and "Traceback" not in err


def test_submit_names_unique_suffix_and_conflict_hint(capsys: pytest.CaptureFixture[str], remote: str,
                                                      tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("# my job\n" + job_yaml("named", ["true"]))
    code, out, err = paijob(capsys, "submit", str(job), "-c", remote)
    assert code == 0 and out.strip() == f"{local_user()}~named"
    assert f"job-detail.html?username={local_user()}&jobName=named" in err
    code, _, err = paijob(capsys, "submit", str(job), "-c", remote)
    assert code == 2 and "never reusable" in err and "--unique-suffix" in err
    code, out, _ = paijob(capsys, "submit", str(job), "-c", remote, "--unique-suffix")
    assert code == 0 and out.strip().startswith(f"{local_user()}~named_") and len(out.strip()) == len(f"{local_user()}~named_") + 8
    code, out, _ = paijob(capsys, "submit", str(job), "-c", remote, "--name", "renamed")
    assert code == 0 and out.strip() == f"{local_user()}~renamed"


def test_submit_wait_exit_code_follows_the_job(capsys: pytest.CaptureFixture[str], remote: str,
                                               tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    # 134 (SIGABRT) is an exit-spec code, reported as is and not retried with jobRetryCount 0.
    # Task 1 waits, so task 0 fails first and the attempt's completion stops task 1 (-220),
    # as frameworkcontroller does; with both failing at once the order would be a race.
    job.write_text(job_yaml("waited", ["echo working", '[ "$PAI_TASK_INDEX" = 0 ] || sleep 60', "exit 134"],
                            instances=2))
    code, out, err = paijob(capsys, "submit", str(job), "-c", remote, "--wait")
    assert code == 1
    assert "FAILED" in err and "exited with code 134" in err
    code, out, _ = paijob(capsys, "status", "waited", "-c", remote)
    assert code == 0 and "worker/0" in out and "worker/1" in out and "FAILED" in out
    code, out, _ = paijob(capsys, "status", "waited", "-c", remote, "--output", "json")
    data: dict[str, Any] = json.loads(out)
    statuses = data["taskRoles"]["worker"]["taskStatuses"]
    assert [t["containerExitCode"] for t in statuses] == [134, -220]
    code, out, _ = paijob(capsys, "logs", "waited", "-c", remote, "--role", "worker", "--index", "1")
    assert "worker/1 | working" in out and "worker/0" not in out
    code, out, _ = paijob(capsys, "list", "-c", remote, "--state", "failed", "--output", "json")
    assert [j["name"] for j in json.loads(out)] == ["waited"]


def test_invalid_job_is_refused_before_it_is_sent(capsys: pytest.CaptureFixture[str], remote: str,
                                                  tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(job_yaml("bad name", ["true"]))
    code, _, err = paijob(capsys, "submit", str(job), "-c", remote)
    assert code == 2 and "name" in err
    code, out, _ = paijob(capsys, "list", "-c", remote)
    assert "no jobs" in out


def test_stop_from_the_cli(capsys: pytest.CaptureFixture[str], remote: str, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(job_yaml("long", ["sleep 300"]))
    assert paijob(capsys, "submit", str(job), "-c", remote)[0] == 0
    code, _, err = paijob(capsys, "stop", "long", "-c", remote, "--wait")
    assert code == 0 and "STOPPED" in err


@pytest.mark.parametrize("uri", ["myregistry.example.com/paijob:0.1.0", "registry.invalid/horovod-paijob:0.28.1",
                                 "Example.ORG:5000/team/img"])
def test_a_placeholder_image_is_refused_for_a_real_cluster_and_warned_about_in_a_dry_run(
        capsys: pytest.CaptureFixture[str], remote: str, tmp_path: Path, uri: str) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(job_yaml("placeholder", ["true"]).replace("python:3.11", uri))
    code, out, err = paijob(capsys, "submit", str(job), "-c", remote)
    assert code == 2 and f"image '{uri}' is a placeholder" in err and "--set image=" in err
    assert "Traceback" not in err and err.count("error:") == 1
    code, out, err = paijob(capsys, "submit", str(job), "-c", remote, "--dry-run")
    assert code == 0 and "placeholder" in err and "POST" in out
    code, out, err = paijob(capsys, "validate", str(job))
    assert code == 0 and "placeholder" in out + err
    code, out, _ = paijob(capsys, "list", "-c", remote)
    assert "no jobs" in out  # nothing was sent
