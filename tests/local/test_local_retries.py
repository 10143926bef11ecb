"""The local cluster runs jobs by OpenPAI's rules: exit spec, retry classes, completion, commands, gang off.

Tasks are tiny shell commands, so each job ends in well under a second.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import yaml
from cluster_helpers import job_yaml

from paijob.common.ports import candidates
from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.openpai.model import parse_job
from paijob.remote.client import PaiClient


def wait(client: PaiClient, job_id: str, timeout: float = 60) -> dict:
    return client.wait(job_id, poll=0.1, timeout=timeout)


def attempts_run(client: PaiClient, job_id: str) -> int:
    return int(client.get_job(job_id)["jobStatus"]["attemptId"]) + 1


def test_sigterm_exit_is_retried_even_with_job_retry_count_0_up_to_a_local_cap(
        client: PaiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAIJOB_LOCAL_UNLIMITED_RETRY_CAP", "2")
    job_id = client.submit(job_yaml("sigterm", ["exit 143"], jobRetryCount=0))
    status = wait(client, job_id)["jobStatus"]
    assert status["state"] == "FAILED" and status["appExitCode"] == 143
    assert attempts_run(client, job_id) == 3  # the first attempt + 2 retries, then the cap
    assert "OpenPAI would retry this job without limit" in status["appExitDiagnostics"]
    assert "PAIJOB_LOCAL_UNLIMITED_RETRY_CAP" in status["appExitDiagnostics"]
    retry_log = client.read_log(client.log_locations(job_id, 1, "worker", 0, 0)["stderr"]).data.decode()
    assert "OpenPAI retries it without limit" in retry_log


def test_transient_exit_then_success_succeeds(client: PaiClient, tmp_path: Path) -> None:
    flag = tmp_path / "killed-once"
    job_id = client.submit(job_yaml("killedonce", [f"if [ ! -e {flag} ]; then touch {flag}; kill -9 $$; fi"]))
    status = wait(client, job_id)["jobStatus"]
    assert status["state"] == "SUCCEEDED" and attempts_run(client, job_id) == 2
    first = client.get_job(job_id, attempt=0)["taskRoles"]["worker"]["taskStatuses"][0]
    assert first["containerExitCode"] == 137


def test_exit_1_is_reported_as_255_and_retried_up_to_job_retry_count(client: PaiClient) -> None:
    job_id = client.submit(job_yaml("exitone", ["exit 1"], jobRetryCount=2))
    status = wait(client, job_id)["jobStatus"]
    assert (status["state"], status["appExitCode"]) == ("FAILED", 255)
    assert attempts_run(client, job_id) == 3


def test_import_error_in_the_log_is_its_own_code_and_never_retried(client: PaiClient) -> None:
    command = "echo 'ImportError: No module named horovod' >&2; exit 1"
    job_id = client.submit(job_yaml("importerror", [command], jobRetryCount=3))
    status = wait(client, job_id)["jobStatus"]
    assert (status["state"], status["appExitCode"]) == ("FAILED", 232)
    assert attempts_run(client, job_id) == 1
    task = client.get_job(job_id)["taskRoles"]["worker"]["taskStatuses"][0]
    assert task["containerExitCode"] == 232
    assert task["containerExitSpec"]["phrase"] == "ContainerImportError"


def test_permanent_signal_is_never_retried(client: PaiClient) -> None:
    job_id = client.submit(job_yaml("sigill", ["kill -ILL $$"], jobRetryCount=3))
    status = wait(client, job_id)["jobStatus"]
    assert (status["state"], status["appExitCode"], attempts_run(client, job_id)) == ("FAILED", 132, 1)


def test_min_failed_instances_null_fails_the_job_on_one_failed_task(client: PaiClient) -> None:
    commands = ["if [ $PAI_TASK_INDEX = 1 ]; then exit 3; fi", "sleep 30"]
    job_id = client.submit(job_yaml("nullmin", commands, instances=2,
                                    role_extra={"completion": {"minFailedInstances": None}}))
    detail = wait(client, job_id)
    assert detail["jobStatus"]["state"] == "FAILED"
    assert [t["taskState"] for t in detail["taskRoles"]["worker"]["taskStatuses"]] == ["STOPPED", "FAILED"]


def test_min_failed_instances_0_is_the_default_1(server: LocalServer, client: PaiClient) -> None:
    text = job_yaml("zeromin", ["if [ $PAI_TASK_INDEX = 0 ]; then exit 3; fi", "sleep 30"], instances=2,
                    role_extra={"completion": {"minFailedInstances": 0}})
    server.cluster.submit(local_user(), "zeromin", parse_job(yaml.safe_load(text)), text)  # whatever validate says
    detail = wait(client, f"{local_user()}~zeromin")
    assert detail["jobStatus"]["state"] == "FAILED"
    assert [t["taskState"] for t in detail["taskRoles"]["worker"]["taskStatuses"]] == ["FAILED", "STOPPED"]


def test_min_failed_instances_minus_1_lets_every_task_finish(client: PaiClient) -> None:
    job_id = client.submit(job_yaml("neverfail", ["if [ $PAI_TASK_INDEX = 0 ]; then exit 3; fi"], instances=2,
                                    role_extra={"completion": {"minFailedInstances": -1}}))
    detail = wait(client, job_id)
    assert detail["jobStatus"]["state"] == "SUCCEEDED"
    assert [t["taskState"] for t in detail["taskRoles"]["worker"]["taskStatuses"]] == ["FAILED", "SUCCEEDED"]


def test_commands_run_as_openpai_renders_them(client: PaiClient) -> None:
    # quoted: the runtime's HTML escaping turns < into &lt;, which bash would otherwise split at &
    job = yaml.safe_load(job_yaml("rendered", ["echo 'flag=<% $parameters.flag %> lr=<% $parameters.lr %> "
                                               "hosts=<% $parameters.hosts %> pw=<% $secrets.pw %> "
                                               "gone=<% $parameters.nothing %>.'"],
                                  parameters={"flag": True, "lr": 0.00001, "hosts": ["a", "b"]},
                                  secrets={"pw": "x<y"}))
    job["deployments"] = [{"name": "d", "taskRoles": {"worker": {"preCommands": ["echo pre"],
                                                                 "postCommands": ["echo post"]}}}]
    job["defaults"] = {"deployment": "d"}
    job_id = client.submit(yaml.safe_dump(job, sort_keys=False))
    assert wait(client, job_id)["jobStatus"]["state"] == "SUCCEEDED"
    uris = client.log_locations(job_id, 0, "worker", 0, 0)
    assert client.read_log(uris["stdout"]).data.decode() == (
        "pre\nflag=true lr=0.00001 hosts=a,b pw=x&lt;y gone=.\npost\n")


def test_without_gang_allocation_a_task_sees_only_the_ips_of_tasks_started_before_it(client: PaiClient) -> None:
    command = 'echo "$PAI_TASK_INDEX: ${PAI_HOST_IP_worker_0:-none} ${PAI_HOST_IP_worker_1:-none}"'
    job_id = client.submit(job_yaml("nogang", [command], instances=2, extras={"gangAllocation": False}))
    assert wait(client, job_id)["jobStatus"]["state"] == "SUCCEEDED"
    out = [client.read_log(client.log_locations(job_id, 0, "worker", i, 0)["stdout"]).data.decode()
           for i in (0, 1)]
    assert out == ["0: 127.0.0.1 none\n", "1: 127.0.0.1 127.0.0.1\n"]


def test_the_local_clusters_own_notes_are_not_matched_as_user_output(client: PaiClient) -> None:
    # the image note names the image; a name that looks like an exit-spec pattern must not change the code
    job = yaml.safe_load(job_yaml("notes", ["exit 1"]))
    job["prerequisites"][0]["uri"] = "importerror:-core-dumped"
    job_id = client.submit(yaml.safe_dump(job, sort_keys=False))
    assert wait(client, job_id)["jobStatus"]["appExitCode"] == 255


# A task that records its SynPort and, on its first try, waits until the test has taken that port
# (as any program on the machine might, between the draw and the task's own bind), then binds it:
# EADDRINUSE is exit 143, as paijob-runtime exits when node rank 0 cannot host the rendezvous store
# ("the retry of this task normally gets a free port"); OpenPAI retries it.
_BIND_OWN_PORT = """
import errno, os, socket, sys, time
from pathlib import Path
folder = Path(sys.argv[1])
port = int(os.environ["PAI_PORT_LIST_worker_0_SynPort"])
tries = len(list(folder.glob("port-*")))
(folder / "tmp").write_text(str(port))
(folder / "tmp").rename(folder / f"port-{tries}")
deadline = time.monotonic() + 30
while tries == 0 and not (folder / "squatted").exists() and time.monotonic() < deadline:
    time.sleep(0.02)
with socket.socket() as server:
    try:
        server.bind(("127.0.0.1", port))
    except OSError as error:
        sys.exit(143 if error.errno == errno.EADDRINUSE else 1)
"""


@pytest.mark.parametrize("gang", [True, False], ids=["job-retry", "task-retry"])
def test_a_task_whose_port_was_taken_gets_a_fresh_one_on_its_retry(
        client: PaiClient, tmp_path: Path, gang: bool) -> None:
    script = tmp_path / "bind_own_port.py"
    script.write_text(_BIND_OWN_PORT)
    extra = {} if gang else {"extras": {"gangAllocation": False}, "role_extra": {"taskRetryCount": 1}}
    job_id = client.submit(job_yaml("lostport", [f"python {script} {tmp_path}"], **extra))
    deadline = time.monotonic() + 60
    while not (tmp_path / "port-0").exists():
        assert time.monotonic() < deadline, "the task never started"
        time.sleep(0.02)
    lost = int((tmp_path / "port-0").read_text())
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", lost))
        squatter.listen()
        (tmp_path / "squatted").touch()
        status = wait(client, job_id)["jobStatus"]
    assert status["state"] == "SUCCEEDED", status
    fresh = int((tmp_path / "port-1").read_text())
    assert fresh != lost and {lost, fresh} <= set(candidates())  # never from the kernel's ephemeral range
    if gang:
        first = client.get_job(job_id, attempt=0)["taskRoles"]["worker"]["taskStatuses"][0]
    else:
        first = client.task_status(job_id, 0, "worker", 0)["attempts"][-1]
    assert (first["containerExitCode"], first["containerPorts"]["SynPort"]) == (143, str(lost))
