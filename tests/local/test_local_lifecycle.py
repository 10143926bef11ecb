"""The client against the local cluster over real HTTP on the loopback: OpenPAI's job life cycle."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from cluster_helpers import TOKEN, job_yaml

from paijob.local import layout
from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.remote.client import (
    AuthError,
    ConflictJobError,
    InvalidProtocolError,
    NoJobError,
    PaiClient,
)


def wait(client: PaiClient, job_id: str, timeout: float = 30) -> dict:
    return client.wait(job_id, poll=0.1, timeout=timeout)


def log_text(client: PaiClient, job_id: str, role: str = "worker", index: int = 0, attempt: int = 0,
             task_attempt: int = 0, stream: str = "all") -> str:
    uris = client.log_locations(job_id, attempt, role, index, task_attempt)
    return client.read_log(uris[stream]).data.decode()


def test_submitted_job_runs_to_succeeded_and_its_output_is_in_the_logs(client: PaiClient) -> None:
    job_id = client.submit(job_yaml("hello", ["echo hello from $PAI_JOB_NAME", "echo oops >&2"]))
    assert job_id == f"{local_user()}~hello"
    detail = wait(client, job_id)
    assert detail["jobStatus"]["state"] == "SUCCEEDED"
    task = detail["taskRoles"]["worker"]["taskStatuses"][0]
    assert (task["taskState"], task["containerExitCode"]) == ("SUCCEEDED", 0)
    assert f"hello from {job_id}" in log_text(client, job_id, stream="stdout")
    assert "oops" in log_text(client, job_id, stream="stderr")
    assert "oops" not in log_text(client, job_id, stream="stdout")
    everything = log_text(client, job_id)
    assert "docker images are not pulled" in everything and "hello from" in everything


def test_failing_task_fails_the_job_with_the_exit_code_openpai_reports(client: PaiClient) -> None:
    # openpai-runtime reports a user exit code no exit-spec pattern matches as 255
    job_id = client.submit(job_yaml("fails", ["echo about to fail", "exit 3"]))
    detail = wait(client, job_id)
    status = detail["jobStatus"]
    assert status["state"] == "FAILED"
    assert status["appExitCode"] == 255
    assert (status["appExitTriggerTaskRoleName"], status["appExitTriggerTaskIndex"]) == ("worker", 0)
    task = detail["taskRoles"]["worker"]["taskStatuses"][0]
    assert (task["taskState"], task["containerExitCode"]) == ("FAILED", 255)


def test_unset_variable_kills_the_task_as_bash_nounset_does(client: PaiClient) -> None:
    job_id = client.submit(job_yaml("nounset", ["echo $NOT_SET_ANYWHERE", "echo unreachable"]))
    detail = wait(client, job_id)
    assert detail["jobStatus"]["state"] == "FAILED"
    assert "unreachable" not in log_text(client, job_id)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_stop_kills_every_process_of_every_task_within_10_s(client: PaiClient, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    # each task leaves a background child, a child in its own session, and ignores SIGTERM itself
    commands = [
        "trap '' TERM",
        f"sleep 300 & echo $! > {pids}/bg-$PAI_TASK_INDEX",
        f"setsid sleep 301 & echo $! > {pids}/setsid-$PAI_TASK_INDEX",
        f"echo $$ > {pids}/main-$PAI_TASK_INDEX",
        "sleep 302",
    ]
    job_id = client.submit(job_yaml("stopme", commands, instances=2))
    deadline = time.monotonic() + 15
    while len(list(pids.iterdir())) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    numbers = [int(p.read_text()) for p in pids.iterdir()]
    assert len(numbers) == 6 and all(_alive(pid) for pid in numbers)
    started = time.monotonic()
    client.stop(job_id)
    detail = wait(client, job_id, timeout=10)
    assert time.monotonic() - started < 10
    assert detail["jobStatus"]["state"] == "STOPPED"
    assert detail["jobStatus"]["executionType"] == "STOP"
    assert [t["taskState"] for t in detail["taskRoles"]["worker"]["taskStatuses"]] == ["STOPPED", "STOPPED"]
    assert [pid for pid in numbers if _alive(pid)] == []


def test_reusing_a_job_name_is_a_409_that_says_names_are_never_reusable(client: PaiClient) -> None:
    wait(client, client.submit(job_yaml("once", ["true"])))
    with pytest.raises(ConflictJobError) as error:
        client.submit(job_yaml("once", ["true"]))
    text = str(error.value)
    assert "once" in text and "never" in text and "--unique-suffix" in text and "--name" in text
    assert error.value.status == 409


def test_wrong_token_is_a_401_that_says_how_to_log_in(server: LocalServer) -> None:
    bad = PaiClient(server.url, "not-the-token", user="me", cluster_name="prod", retries=0)
    with pytest.raises(AuthError) as error:
        bad.list_jobs()
    assert error.value.status == 401
    assert "paijob login prod" in str(error.value) and "--token-env" in str(error.value)
    assert "not-the-token" not in str(error.value)
    anonymous = PaiClient(server.url, None, user="me", retries=0)
    with pytest.raises(AuthError):
        anonymous.get_job("me~x")


def test_invalid_job_is_a_400_listing_the_problems(client: PaiClient) -> None:
    text = job_yaml("bad name!", ["true"])
    with pytest.raises(InvalidProtocolError) as error:
        client.submit(text)
    assert error.value.status == 400
    assert error.value.problems and any("name" in p for p in error.value.problems)


def test_unknown_job_is_a_no_job_error(client: PaiClient) -> None:
    with pytest.raises(NoJobError):
        client.get_job(f"{local_user()}~never-submitted")


def test_jobs_states_and_logs_survive_a_server_restart(tmp_path: Path) -> None:
    first = LocalServer(tmp_path / "state", TOKEN).start()
    client = PaiClient(first.url, TOKEN, user=local_user(), retries=0)
    job_id = client.submit(job_yaml("durable", ["echo written before the restart", "exit 4"]))
    wait(client, job_id)
    first.stop()
    second = LocalServer(tmp_path / "state", TOKEN).start()
    try:
        client = PaiClient(second.url, TOKEN, user=local_user(), retries=0)
        detail = client.get_job(job_id)
        assert detail["jobStatus"]["state"] == "FAILED"
        assert detail["taskRoles"]["worker"]["taskStatuses"][0]["containerExitCode"] == 255
        assert "written before the restart" in log_text(client, job_id)
        assert [j["name"] for j in client.list_jobs()] == ["durable"]
        with pytest.raises(ConflictJobError):
            client.submit(job_yaml("durable", ["true"]))
    finally:
        second.stop()


def test_a_job_running_when_the_server_dies_is_ended_at_the_next_start(tmp_path: Path) -> None:
    from paijob.local import daemon

    state = tmp_path / "state"
    info = daemon.up(state)
    try:
        client = PaiClient(info["url"], daemon.read_token(state), user=local_user(), retries=0)
        pid_file = tmp_path / "task.pid"
        job_id = client.submit(job_yaml("orphaned", [f"echo $$ > {pid_file}", "sleep 300"]))
        deadline = time.monotonic() + 10
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int(pid_file.read_text())
        os.kill(info["pid"], signal.SIGKILL)  # a crash: nothing gets stopped
        deadline = time.monotonic() + 5
        while _alive(info["pid"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _alive(pid)
        info = daemon.up(state)
        client = PaiClient(info["url"], daemon.read_token(state), user=local_user(), retries=0)
        detail = client.get_job(job_id)
        assert detail["jobStatus"]["state"] == "FAILED"
        assert "server ended" in detail["jobStatus"]["appExitDiagnostics"]
        assert not _alive(pid)
    finally:
        daemon.down(state)


ENV_CHECK = r'''
import os, sys
e = os.environ
i = int(e["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"])
assert e["PAI_TASK_INDEX"] == str(i)
assert e["PAI_JOB_NAME"] == e["PAI_USER_NAME"] + "~envcheck", e["PAI_JOB_NAME"]
assert e["PAI_TASK_ROLE_LIST"] == "ps_Server,worker"
assert e["PAI_TASK_ROLE_COUNT"] == "2"
assert e["PAI_TASK_ROLE_TASK_COUNT_worker"] == "2"
assert e["PAI_TASK_ROLE_TASK_COUNT_ps_Server"] == "1"
assert e["PAI_RESOURCE_worker"] == "0,1,256,0", e["PAI_RESOURCE_worker"]
assert e["PAI_MIN_FAILED_TASK_COUNT_worker"] == "1"
assert e["PAI_MIN_SUCCEEDED_TASK_COUNT_worker"] == "2"
assert e["PAI_TASK_ROLE_INSTANCES"] == "psserver:0,worker:0,worker:1", e["PAI_TASK_ROLE_INSTANCES"]
ports = []
for role, n in (("psserver", 1), ("worker", 2)):
    for t in range(n):
        assert e[f"PAI_HOST_IP_{role}_{t}"] == "127.0.0.1"
        for label in ("SynPort", "ssh", "http"):
            assert e[f"PAI_PORT_LIST_{role}_{t}_{label}"] == e[f"PAI_{role}_{t}_{label}_PORT"]
            ports += e[f"PAI_PORT_LIST_{role}_{t}_{label}"].split(",")
assert len(e["PAI_PORT_LIST_worker_0_SynPort"].split(",")) == 2
assert len(ports) == len(set(ports)), ports
assert os.environ["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable) or True
print("env ok", e["PAI_CURRENT_TASK_ROLE_NAME"], i)
'''


def test_each_task_gets_the_pai_environment_openpai_would_give_it(client: PaiClient, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAIJOB_OPENPAI_BEFORE_1_6", "1")  # an OpenPAI older than v1.6 runs role ps_Server
    script = tmp_path / "check_env.py"
    script.write_text(ENV_CHECK)
    command = f"{sys.executable} {script}"
    import yaml

    job = yaml.safe_load(job_yaml("envcheck", [command, "echo param=<% $parameters.lr %>"], instances=2,
                                  ports={"SynPort": 2}, parameters={"lr": 0.25}))
    job["taskRoles"] = {
        "ps_Server": {**job["taskRoles"]["worker"], "instances": 1,
                      "completion": {"minSucceededInstances": -1}},
        "worker": job["taskRoles"]["worker"],
    }
    job_id = client.submit(yaml.safe_dump(job, sort_keys=False))
    detail = wait(client, job_id)
    logs = "".join(log_text(client, job_id, role, i) for role, i in (("ps_Server", 0), ("worker", 0), ("worker", 1)))
    assert detail["jobStatus"]["state"] == "SUCCEEDED", logs
    # PAI_CURRENT_TASK_ROLE_NAME is the role as the job writes it (k8s.js: value: taskRole)
    assert "env ok worker 1" in logs and "env ok ps_Server 0" in logs
    assert "param=0.25" in logs


def test_min_failed_instances_lets_a_job_survive_fewer_failures(client: PaiClient) -> None:
    commands = ["if [ $PAI_TASK_INDEX = 1 ]; then exit 5; fi"]
    job_id = client.submit(job_yaml("tolerant", commands, instances=3,
                                    role_extra={"completion": {"minFailedInstances": 2}}))
    detail = wait(client, job_id)
    assert detail["jobStatus"]["state"] == "SUCCEEDED"
    codes = [t["containerExitCode"] for t in detail["taskRoles"]["worker"]["taskStatuses"]]
    assert codes == [0, 255, 0]


def test_a_failed_task_kills_the_others_and_fails_the_job(client: PaiClient) -> None:
    commands = ["if [ $PAI_TASK_INDEX = 0 ]; then exit 134; fi", "sleep 300"]
    job_id = client.submit(job_yaml("failfast", commands, instances=2))
    started = time.monotonic()
    detail = wait(client, job_id)
    assert time.monotonic() - started < 10
    states = [(t["taskState"], t["containerExitCode"]) for t in detail["taskRoles"]["worker"]["taskStatuses"]]
    # 134 (SIGABRT) is in the exit spec, so it is reported as is; the stopped task gets
    # frameworkcontroller's FrameworkAttemptCompletion code
    assert states[0] == ("FAILED", 134) and states[1] == ("STOPPED", -220)
    assert detail["jobStatus"]["appExitCode"] == 134


def test_task_retry_runs_a_new_task_attempt_when_gang_allocation_is_off(client: PaiClient, tmp_path: Path) -> None:
    flag = tmp_path / "tried"
    commands = [f"if [ ! -e {flag} ]; then touch {flag}; echo first try; exit 9; fi", "echo second try"]
    job_id = client.submit(job_yaml("retrytask", commands, role_extra={"taskRetryCount": 1},
                                    extras={"gangAllocation": False}))
    detail = wait(client, job_id)
    assert detail["jobStatus"]["state"] == "SUCCEEDED"
    task = detail["taskRoles"]["worker"]["taskStatuses"][0]
    assert (task["retries"], task["attemptId"]) == (1, 1)
    history = client.task_status(job_id, 0, "worker", 0)
    assert [(a["attemptId"], a["attemptState"], a["containerExitCode"]) for a in history["attempts"]] == [
        (1, "SUCCEEDED", 0), (0, "FAILED", 255)]  # newest first, as OpenPAI lists them
    assert "first try" in log_text(client, job_id, task_attempt=0)
    assert "second try" in log_text(client, job_id, task_attempt=1)


def test_job_retry_runs_a_new_job_attempt(client: PaiClient, tmp_path: Path) -> None:
    flag = tmp_path / "job-tried"
    commands = [f"if [ ! -e {flag} ]; then touch {flag}; exit 2; fi"]
    job_id = client.submit(job_yaml("retryjob", commands, jobRetryCount=1))
    detail = wait(client, job_id)
    assert detail["jobStatus"]["state"] == "SUCCEEDED"
    assert (detail["jobStatus"]["attemptId"], detail["jobStatus"]["retries"]) == (1, 1)
    first = client.get_job(job_id, attempt=0)
    assert first["jobStatus"]["attemptState"] == "FAILED"
    assert first["taskRoles"]["worker"]["taskStatuses"][0]["containerExitCode"] == 255


def test_logs_can_be_read_from_an_offset(client: PaiClient) -> None:
    job_id = client.submit(job_yaml("offsets", ["echo 0123456789"]))
    wait(client, job_id)
    uri = client.log_locations(job_id, 0, "worker", 0, 0)["stdout"]
    assert client.read_log(uri, 4).data == b"456789\n"
    assert client.read_log(uri, 11).data == b""


def test_list_filters_by_state_and_limit(client: PaiClient) -> None:
    wait(client, client.submit(job_yaml("ok1", ["true"])))
    wait(client, client.submit(job_yaml("bad1", ["false"])))
    wait(client, client.submit(job_yaml("ok2", ["true"])))
    assert [j["name"] for j in client.list_jobs()] == ["ok2", "bad1", "ok1"]
    assert [j["name"] for j in client.list_jobs(state="failed")] == ["bad1"]
    assert [j["name"] for j in client.list_jobs(limit=1)] == ["ok2"]


def test_config_is_returned_as_json_with_secrets_masked(server: LocalServer, client: PaiClient) -> None:
    import json

    import requests

    job_id = client.submit(job_yaml("secretive", ["echo <% $secrets.key %> | wc -c"], secrets={"key": "s3cr3t"}))
    wait(client, job_id)
    for accept in ("application/json", "text/yaml"):
        response = requests.get(f"{server.url}/rest-server/api/v2/jobs/{job_id}/config", timeout=10,
                                headers={"Authorization": f"Bearer {TOKEN}", "Accept": accept})
        # Express sends the stored object as JSON but keeps the text/yaml label
        assert response.headers["Content-Type"].startswith("text/yaml")
        config = json.loads(response.text)
        assert config["name"] == "secretive" and config["secrets"] == "******"
    assert "s3cr3t" not in client.get_config(job_id)
    assert "s3cr3t" not in log_text(client, job_id)
    assert "7" in log_text(client, job_id)


def test_gpus_are_shared_out_by_cuda_visible_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")  # the GPUs this machine "has"
    import yaml

    with LocalServer(tmp_path / "state", TOKEN) as server:
        client = PaiClient(server.url, TOKEN, user=local_user(), retries=0)
        job = yaml.safe_load(job_yaml("gpus", ["echo gpus=[$CUDA_VISIBLE_DEVICES]"], instances=2))
        job["taskRoles"]["worker"]["resourcePerInstance"]["gpu"] = 1
        job["taskRoles"]["cpu"] = {**job["taskRoles"]["worker"], "instances": 1,
                                   "resourcePerInstance": {"cpu": 1, "memoryMB": 256, "gpu": 0}}
        job_id = client.submit(yaml.safe_dump(job, sort_keys=False))
        detail = wait(client, job_id)
        assert detail["jobStatus"]["state"] == "SUCCEEDED"
        seen = {(role, i): log_text(client, job_id, role, i, stream="stdout").strip()
                for role, i in (("worker", 0), ("worker", 1), ("cpu", 0))}
        assert seen == {("worker", 0): "gpus=[4]", ("worker", 1): "gpus=[5]", ("cpu", 0): "gpus=[]"}
        assert detail["taskRoles"]["worker"]["taskStatuses"][1]["containerGpus"] == "5"


def test_each_task_has_a_private_tmpdir_inside_its_job_folder(client: PaiClient, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Like a container's own /tmp: what a task leaves in TMPDIR (torch's caches, scratch files)
    stays in the job's folder, not in the laptop's TMPDIR."""
    shared_tmp = tmp_path / "laptop-tmp"
    shared_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(shared_tmp))
    job_id = client.submit(job_yaml("tmp", ['echo "tmp=$TMPDIR"', 'mktemp -d "$TMPDIR/left.XXXX"'], instances=2))
    assert wait(client, job_id)["jobStatus"]["state"] == "SUCCEEDED"
    seen = [log_text(client, job_id, index=i, stream="stdout").split("tmp=")[1].splitlines()[0] for i in (0, 1)]
    assert seen[0] != seen[1]
    for index, folder in enumerate(seen):
        private = layout.task_work(tmp_path / "state", job_id, 0, "worker", index) / ".tmp"
        # the folder itself, or (a path too long for Unix sockets below it) a short link to it, gone at the end
        alias = Path(folder).parent == layout.TMP_ALIASES and Path(folder).name.startswith("paijob-")
        assert folder == str(private) or (alias and not Path(folder).is_symlink()), folder
        assert any(private.glob("left.*"))
    assert list(shared_tmp.iterdir()) == []
