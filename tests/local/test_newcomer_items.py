"""A newcomer's small stumbles (issue 54 items 6 and 8), each pinned: the slow rank in `run`'s closing lines and
`list`, `validate -c` with the cluster unreachable, `run --local train.py`, the `--set instances` hint,
`local open`'s ssh hint, `stacks` of a finished job, `cluster add` over a profile, `local rm`."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cluster_helpers import TOKEN, job_yaml
from suite_helpers import paijob

from paijob import api, cli
from paijob.common.records import SlowRecord, StallRecord, signed_text
from paijob.local.daemon import local_user
from paijob.local.processes import SLOW_NAME, STALL_NAME
from paijob.local.server import LocalServer
from paijob.remote import profiles
from paijob.remote.client import PaiClient

SLOW_LINE = "slow rank: rank 1 (node rank 0, host 127.0.0.1, local rank 1) holds the job back"


def test_run_s_closing_lines_of_a_job_that_succeeded_keep_the_slow_rank_verdict(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    detail = {"jobStatus": {"state": "SUCCEEDED", "launchedTime": 1_000, "completedTime": 66_000,
                            "paijobSlowRank": {"line": SLOW_LINE, "final": True, "figures": []}}, "taskRoles": {}}
    client = SimpleNamespace(cluster_name="local", is_local=True)
    monkeypatch.setattr(api, "prepare", lambda request: SimpleNamespace(warnings=[], notes=[], target=None,
                                                                         sent_job=lambda: None))
    monkeypatch.setattr(api, "connect", lambda target, timeout, **notes: client)
    monkeypatch.setattr(api, "submit", lambda job, client: "me~job_1")
    monkeypatch.setattr(api, "follow_logs", lambda *args, **kwargs: SimpleNamespace(follow=lambda: detail))
    monkeypatch.setattr(api, "output_location", lambda *args: None)
    assert cli.main(["run", "job.yaml", "--local"]) == 0
    err = capsys.readouterr().err
    closing = err.splitlines()
    at = next(i for i, line in enumerate(closing) if line.startswith("paijob: job me~job_1 SUCCEEDED after 1 min 5 s"))
    assert closing[at + 1] == (f"paijob: slow rank {SLOW_LINE} (over the run) (`paijob status me~job_1 -c local` "
                               "has each rank's figures)")


def test_list_marks_a_running_job_the_doctors_name(
        server: LocalServer, client: PaiClient, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    job_id = client.submit(job_yaml("slowly", ["sleep 60"]))
    deadline = time.monotonic() + 30
    while client.get_job(job_id)["jobStatus"]["state"] != "RUNNING":
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.1)
    folder = server.cluster.work_dir(job_id, 0, "worker", 0)
    key = server.cluster.record_key(job_id, 0, "worker", 0)  # what the task's paijob-runtime signs with
    (folder / SLOW_NAME).write_text(signed_text(SlowRecord("rank", SLOW_LINE, (1,), (), time=time.time()).as_json(), key))
    (folder / STALL_NAME).write_text(signed_text(StallRecord((1,), 95, time.time()).as_json(), key))
    monkeypatch.setenv("SRV_TOKEN", TOKEN)
    profiles.add("srv", server.url, user=client.user, token_env="SRV_TOKEN")
    try:
        code, out, err = paijob(capsys, "list", "-c", "srv")
        assert code == 0, err
        (row,) = [line for line in out.splitlines() if job_id in line]
        assert row.split()[1:4] == ["RUNNING", "stalled", "slow-rank"]
        listed: list[dict[str, Any]] = client.list_jobs()
        assert listed[0]["paijobSlowRank"]["line"] == SLOW_LINE
    finally:
        client.stop(job_id)


def test_validate_against_an_unreachable_cluster_says_it_did_not_ask_and_which_rule_it_applied(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("PROD_TOKEN", TOKEN)
    profiles.add("prod", f"http://127.0.0.1:{port}", user="me", token_env="PROD_TOKEN")
    job = tmp_path / "job.yaml"
    job.write_text(job_yaml("roles", ["true"], role="Worker_A"))
    code, out, err = paijob(capsys, "validate", str(job), "-c", "prod")
    assert code == 2  # the v1.6+ rule: Worker_A cannot run there
    assert "paijob: note: cluster prod was not asked its OpenPAI version" in err
    assert "judged by OpenPAI v1.6+'s rule" in err and "--openpai-before-1.6" in err
    code, out, err = paijob(capsys, "validate", str(job), "-c", "prod", "--openpai-before-1.6")
    assert code == 0 and "note" not in err  # the user chose the rule: nothing was left unasked


def test_run_of_a_python_script_points_to_the_form_that_runs_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = paijob(capsys, "run", "--local", "train.py")
    assert code == 2 and err.count("\n") == 1
    assert "train.py is a Python script, not a template" in err
    assert "`paijob run ddp --local --workdir . --set script=train.py`" in err


def test_the_set_hint_names_values_the_templates_take(capsys: pytest.CaptureFixture[str]) -> None:
    from paijob.render.values import SET_EXAMPLES

    code, _, err = paijob(capsys, "render", "ddp", "--set", "instances")
    assert code == 2 and all(f"--set {example}" in err for example in SET_EXAMPLES[:2]), err
    for template in api.template_names():  # each value by itself (dataparallel is one instance by design)
        for example in SET_EXAMPLES[1:] if template == "dataparallel" else SET_EXAMPLES:
            code, _, err = paijob(capsys, "render", template, f"--set={example}", "--set", "script=train.py",
                                  "--set", "image=registry.example.net/t:1")
            assert code == 0, (template, example, err)


def test_stacks_of_a_job_that_ended_is_an_error_line(capsys: pytest.CaptureFixture[str], local: Path,
                                                    tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(job_yaml("done", ["true"]))
    code, _, err = paijob(capsys, "run", str(job), "--local", "--name", "done")
    assert code == 0, err
    code, out, err = paijob(capsys, "stacks", "done", "-c", "local")
    assert code == 2 and err.startswith("paijob: error: job ") and err.count("\n") == 1
    assert "has ended (SUCCEEDED): its ranks are gone" in err and out == ""


def test_cluster_add_refuses_to_replace_a_profile_unless_asked(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = paijob(capsys, "cluster", "add", "prod", "--url", "https://pai.example.com", "--user", "alice")
    assert code == 0, err
    code, _, err = paijob(capsys, "cluster", "add", "prod", "--url", "https://other.example.com", "--user", "bob")
    assert code == 2 and "cluster prod is saved already (url https://pai.example.com, user alice)" in err
    assert "--replace" in err and profiles.named("prod").url == "https://pai.example.com"
    code, _, err = paijob(capsys, "cluster", "add", "prod", "--url", "https://other.example.com", "--user", "bob",
                          "--replace")
    assert code == 0 and profiles.named("prod").url == "https://other.example.com"


def test_local_rm_removes_one_finished_job_and_refuses_a_running_one(
        capsys: pytest.CaptureFixture[str], local: Path, tmp_path: Path) -> None:
    from paijob.local import layout

    job = tmp_path / "job.yaml"
    job.write_text(job_yaml("once", ['echo kept > "$PAIJOB_OUTPUT_DIR/out.txt"']))
    code, _, err = paijob(capsys, "run", str(job), "--local", "--name", "once")
    assert code == 0, err
    user = local_user()
    assert (layout.output(local, f"{user}~once") / "out.txt").is_file()
    client = api.connect("local", start_local=False)
    running = client.submit(job_yaml("busy", ["sleep 60"]))
    try:
        code, _, err = paijob(capsys, "local", "rm", "busy")
        assert code == 2 and f"job {running} is " in err and "stop it first" in err
        code, out, err = paijob(capsys, "local", "rm", "once")
        assert code == 0 and out.startswith(f"removed {user}~once (")
        assert not layout.output(local, f"{user}~once").exists()
        assert not (layout.logs(local) / f"{user}~once").exists()
        code, _, err = paijob(capsys, "status", "once", "-c", "local")
        assert code == 2
        code, _, err = paijob(capsys, "run", str(job), "--local", "--name", "once")  # the name is free again
        assert code == 0, err
        code, _, err = paijob(capsys, "local", "rm", "nosuch")
        assert code == 2 and "the local cluster has no job" in err
    finally:
        client.stop(running)


LISTENS = ("python -c 'import multiprocessing.connection as c, os; l = c.Listener(); print(\"listening at\", "
           "l.address); l.close()'")


def test_a_task_of_a_job_with_a_long_name_can_bind_a_unix_socket_under_its_tmpdir(
        capsys: pytest.CaptureFixture[str], local: Path, tmp_path: Path) -> None:
    """multiprocessing binds TMPDIR/pymp-*/listener-* (a DataLoader worker handing a tensor over): under a task's
    private /tmp in the state dir (~80 characters for `root~cifar10-local_09c6ed1b` in ~/.local/state) that
    passed sun_path's 107 bytes and a DataLoader with workers hung. The task's TMPDIR is a short link then."""
    from paijob.local import layout

    name = "a-job-whose-name-is-long-enough-to-push-its-tmp-past-the-limit"
    job = tmp_path / "job.yaml"
    job.write_text(job_yaml(name, [LISTENS, 'echo "tmp is $TMPDIR"', 'touch "$TMPDIR/left-behind"']))
    private = layout.task_work(local, f"{local_user()}~{name}", 0, "worker", 0) / ".tmp"
    assert len(str(private)) + 40 > 107  # the case this test is about: sockets under it would not fit
    code, out, err = paijob(capsys, "run", str(job), "--local", "--name", name)
    assert code == 0, out + err
    (said,) = [line for line in out.splitlines() if "tmp is " in line]
    alias = Path(said.split("tmp is ", 1)[1])
    assert len(str(alias)) + 40 <= 107 and alias.parent.name.startswith("paijob-tmp-")  # short (local.tasktmp)
    assert not alias.exists() and not alias.is_symlink()  # gone at the end
    assert "listening at" in out and (private / "left-behind").is_file()  # what it left stays in its folder
