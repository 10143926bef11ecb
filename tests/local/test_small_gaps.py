"""Small gaps of the hostile round (issue 35), a test each: ``cluster add --token``, YAML aliases on the local
server, a password in a cluster URL, credentials a local task inherited, a state dir that is not the user's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import requests
from cluster_helpers import TOKEN, job_yaml
from suite_helpers import paijob

from paijob.local import daemon
from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.remote import profiles
from paijob.remote.client import PaiClient

PASTED = "eyJhbGciOiJIUzI1NiJ9.eyJ1c2VybmFtZSI6ImFsaWNlIn0.c2lnbmF0dXJlLXBhc3RlZA"


# --------------------------------------------------------------------------- cluster add --token


def test_cluster_add_token_is_refused_with_the_way_to_do_it(capsys: pytest.CaptureFixture[str]) -> None:
    # argparse took `--token VALUE` as an abbreviation of --token-env: the token was stored as a variable name
    code, out, err = paijob(capsys, "cluster", "add", "prod", "--url", "https://pai.example.com", "--token", PASTED)
    assert code == 2 and "--token-env" in err and "paijob login prod" in err and "shell history" in err
    assert PASTED not in out + err
    assert not profiles.config_path().exists() or PASTED not in profiles.config_path().read_text()


def test_token_env_takes_a_variable_name_never_the_token(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = paijob(capsys, "cluster", "add", "prod", "--url", "https://pai.example.com",
                            "--token-env", PASTED)
    assert code == 2 and "NAME of an environment variable" in err and err.count("\n") == 1
    assert PASTED not in out + err
    assert not profiles.config_path().exists() or PASTED not in profiles.config_path().read_text()


# --------------------------------------------------------------------------- YAML aliases


def test_aliases_of_a_long_string_cannot_make_a_small_job_a_huge_one(server: LocalServer) -> None:
    # 1 kB aliased 100 times, that 100 times: a 2 kB request that the config answer (and the runner's
    # model) would hold as 10 MB; each alias counted as one value, it passed the 200,000-value cap
    text = job_yaml("bomb", ["true"])
    text += ("parameters:\n  a: &a " + "x" * 1000 + "\n  b: &b [" + ", ".join(["*a"] * 100) + "]\n"
             "  c: [" + ", ".join(["*b"] * 100) + "]\n")
    assert len(text) < 5000
    reply = requests.post(f"{server.url}/rest-server/api/v2/jobs", data=text.encode(),
                          headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "text/yaml"}, timeout=30)
    assert reply.status_code == 400, reply.text[:200]
    assert "expands to more than" in reply.json()["message"]
    assert server.cluster.store.job(local_user(), "bomb") is None


def test_a_job_with_a_few_aliases_of_long_text_is_still_taken(client: PaiClient) -> None:
    text = job_yaml("shared", ["true"])
    text += "parameters:\n  note: &n " + "y" * 3000 + "\n  again: [" + ", ".join(["*n"] * 20) + "]\n"
    job_id = client.submit(text)
    assert client.wait(job_id, poll=0.1, timeout=60)["jobStatus"]["state"] == "SUCCEEDED"


# --------------------------------------------------------------------------- a password in a cluster URL


def test_a_password_in_a_cluster_url_is_never_printed(capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    password = "hunter2-in-the-url"
    code, _, err = paijob(capsys, "cluster", "add", "prod", "--url", f"https://alice:{password}@pai.example.com",
                          "--user", "alice")
    assert code == 0 and password not in err
    code, out, err = paijob(capsys, "cluster", "list")
    assert code == 0 and password not in out + err and "https://alice:***@pai.example.com" in out
    monkeypatch.setenv("PROD_TOKEN", "t")
    code, out, err = paijob(capsys, "submit", "ddp", "--dry-run", "-c", "prod")
    assert code == 0, err
    assert password not in out + err and "# POST https://alice:***@pai.example.com/rest-server/api/v2/jobs" in out
    code, out, err = paijob(capsys, "cluster", "add", "bad", "--url", f"https://alice:{password}@pai.example.com:0")
    assert code == 2 and password not in out + err


# --------------------------------------------------------------------------- what a local task inherits


def test_a_local_task_inherits_no_token_or_cloud_key_of_the_shell(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    leaked = {"GH_TOKEN": "gho_leak1", "HF_TOKEN": "hf_leak2", "AWS_ACCESS_KEY_ID": "AKIALEAK3",
              "AWS_SECRET_ACCESS_KEY": "leak4", "AWS_SESSION_TOKEN": "leak5", "OPENAI_API_KEY": "leak6",
              "GOOGLE_APPLICATION_CREDENTIALS": "/home/me/leak7.json", "REGISTRY_PASSWORD": "leak8",
              "PAI_TOKEN": "leak9", "Ci_Job_Token": "leak10"}
    kept = {"MY_SETTING": "kept1", "TOKENIZERS_PARALLELISM": "false", "HF_HOME": "/data/hf"}
    for name, value in {**leaked, **kept}.items():
        monkeypatch.setenv(name, value)
    with LocalServer(tmp_path / "state", TOKEN) as srv:
        client = PaiClient(srv.url, TOKEN, user=local_user(), cluster_name="local", retries=1)
        job_id = client.submit(job_yaml("env", ['env > "$PAIJOB_OUTPUT_DIR/env.txt"']))
        assert client.wait(job_id, poll=0.1, timeout=60)["jobStatus"]["state"] == "SUCCEEDED"
    seen = (tmp_path / "state" / "outputs" / job_id / "env.txt").read_text()
    assert not [name for name, value in leaked.items() if value in seen]
    assert all(f"{name}={value}" in seen for name, value in kept.items())
    assert "PATH=" in seen and "PAI_TASK_INDEX=0" in seen  # OpenPAI's own variables are the cluster's


# --------------------------------------------------------------------------- the state dir


def test_a_state_dir_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.getuid() == 0:
        theirs = tmp_path / "shared-state"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)
    else:
        theirs = Path("/usr")  # root's
        assert theirs.stat().st_uid != os.getuid()
    for call in (daemon.up, daemon.running, daemon.local_cluster_address):
        with pytest.raises(daemon.LocalClusterError, match="belongs to another user"):
            call(theirs)
    assert not (theirs / "token").exists()


def test_a_link_planted_as_the_server_log_is_never_written_through(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (state / "server.log").symlink_to(victim)
    try:
        with pytest.raises(daemon.LocalClusterError, match="is a link"):
            daemon.up(state)
    finally:
        daemon.down(state)
    assert victim.read_text() == "precious\n"


def test_login_password_on_the_command_line_is_refused_and_not_echoed(capsys: pytest.CaptureFixture[str]) -> None:
    # argparse read `--password PW` as --password-stdin and printed "unrecognized arguments: PW"
    code, out, err = paijob(capsys, "login", "prod", "--url", "https://pai.example.com", "--password", PASTED)
    assert code == 2 and "--password-stdin" in err and "shell history" in err and PASTED not in out + err
