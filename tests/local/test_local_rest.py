"""The local cluster's REST details are OpenPAI's (paijob.openpai.rest cites the rest-server sources)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests
from cluster_helpers import TOKEN, job_yaml

from paijob import cli
from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.openpai.rest import format_protocol_errors, mask_secrets
from paijob.remote import profiles
from paijob.remote.client import PaiClient
from paijob.remote.errors import problems as _problems


def wait(client: PaiClient, job_id: str, timeout: float = 60) -> dict:
    return client.wait(job_id, poll=0.1, timeout=timeout)


def get(server: LocalServer, path: str, **params: Any) -> requests.Response:
    return requests.get(f"{server.url}/rest-server/api/v2{path}", params=params, timeout=10,
                        headers={"Authorization": f"Bearer {TOKEN}"})


def test_rest_json_and_paths_use_the_converted_role_name(server: LocalServer, client: PaiClient,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAIJOB_OPENPAI_BEFORE_1_6", "1")  # an OpenPAI older than v1.6 runs role Worker_A
    job_id = client.submit(job_yaml("roles", ["echo from $FC_TASKROLE_NAME", "exit 3"], role="Worker_A"))
    detail = wait(client, job_id)
    assert list(detail["taskRoles"]) == ["workera"]
    assert detail["taskRoles"]["workera"]["taskRoleStatus"]["name"] == "workera"
    assert detail["jobStatus"]["appExitTriggerTaskRoleName"] == "workera"
    task = detail["taskRoles"]["workera"]["taskStatuses"][0]
    assert "/taskRoles/workera/taskIndex/0/" in task["containerLog"]
    base = f"/jobs/{job_id}/attempts/0/taskRoles"
    assert get(server, f"{base}/workera/taskIndex/0/attempts").json()["taskRoleName"] == "workera"
    assert get(server, f"{base}/Worker_A/taskIndex/0/attempts").status_code == 404  # as on OpenPAI
    assert get(server, f"{base}/workera/taskIndex/0/attempts/0/logs").status_code == 200
    # the client converts whatever the user wrote
    uris = client.log_locations(job_id, 0, "Worker_A", 0, 0)
    assert client.read_log(uris["stdout"]).data == b"from workera\n"


def test_paijob_logs_role_takes_the_name_as_written_in_the_job(server: LocalServer, client: PaiClient,
                                                               capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAIJOB_OPENPAI_BEFORE_1_6", "1")  # an OpenPAI older than v1.6 runs role Worker_A
    job_id = client.submit(job_yaml("logrole", ["echo hello"], role="Worker_A"))
    wait(client, job_id)
    monkeypatch.setenv("SRV_TOKEN", TOKEN)
    profiles.add("srv", server.url, user=local_user(), token_env="SRV_TOKEN")
    for role in ("Worker_A", "workera"):
        assert cli.main(["logs", "logrole", "-c", "srv", "--role", role]) == 0
        assert "hello" in capsys.readouterr().out


def test_a_stopped_job_has_exit_code_minus_210(client: PaiClient) -> None:
    job_id = client.submit(job_yaml("stopme", ["sleep 60"]))
    _wait_running(client, job_id)
    client.stop(job_id)
    status = wait(client, job_id)["jobStatus"]
    assert (status["state"], status["appExitCode"]) == ("STOPPED", -210)
    assert status["appExitSpec"]["phrase"] == "StopFrameworkRequested"
    summary = [j for j in client.list_jobs() if j["name"] == "stopme"][0]
    assert summary["appExitCode"] == -210


def _wait_running(client: PaiClient, job_id: str) -> None:
    import time

    deadline = time.monotonic() + 30
    while client.get_job(job_id)["jobStatus"]["state"] != "RUNNING":
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.1)


def test_list_filters_take_comma_lists_and_limit_is_bounded(server: LocalServer, client: PaiClient) -> None:
    wait(client, client.submit(job_yaml("good", ["true"])))
    wait(client, client.submit(job_yaml("bad", ["exit 132"])))
    names = [j["name"] for j in get(server, "/jobs", state="SUCCEEDED,FAILED").json()]
    assert names == ["bad", "good"]
    assert [j["name"] for j in get(server, "/jobs", state="FAILED").json()] == ["bad"]
    assert [j["name"] for j in get(server, "/jobs", username=f"nobody,{local_user()}").json()] == ["bad", "good"]
    assert get(server, "/jobs", username="nobody").json() == []
    assert len(get(server, "/jobs", limit="50000").json()) == 2
    refused = get(server, "/jobs", limit="50001")
    assert refused.status_code == 400 and refused.json()["code"] == "InvalidParametersError"


def test_transient_retries_are_platform_retries_in_retry_details(client: PaiClient, tmp_path: Path) -> None:
    flag = tmp_path / "once"
    job_id = client.submit(job_yaml("platform", [f"if [ ! -e {flag} ]; then touch {flag}; exit 143; fi"]))
    status = wait(client, job_id)["jobStatus"]
    assert status["state"] == "SUCCEEDED"
    assert (status["retries"], status["retryDetails"]["platform"], status["retryDetails"]["user"]) == (1, 1, 0)


def test_secrets_are_masked_as_the_rest_server_masks_them() -> None:
    text = "name: a\nsecrets:\n  key: s3cr3t\n  other: x\ntaskRoles:\n  w: {}\n"
    assert mask_secrets(text) == 'name: a\nsecrets: "******"\ntaskRoles:\n  w: {}\n'
    # secrets last: the appended "\nZ" ends the block, and slicing it off also drops the final newline
    assert mask_secrets("name: a\nsecrets:\n  key: s\n") == 'name: a\nsecrets: "******"'
    assert mask_secrets("name: a\n") == "name: a\n"


AJV = ('[{"keyword":"required","dataPath":".taskRoles[\'worker\']","schemaPath":"#/required",'
       '"params":{"missingProperty":"dockerImage"},"message":"should have required property \'dockerImage\'"},'
       '{"keyword":"additionalProperties","dataPath":"","schemaPath":"#/additionalProperties",'
       '"params":{"additionalProperty":"foo"},"message":"should NOT have additional properties"}]')


def test_an_ajv_error_array_is_printed_one_readable_line_per_error() -> None:
    lines = ["taskRoles['worker']: should have required property 'dockerImage'",
             "should NOT have additional properties: 'foo'"]
    assert format_protocol_errors(AJV) == lines
    assert _problems(AJV) == lines
    assert format_protocol_errors("Prerequisite x does not exist.") is None
    assert _problems("Prerequisite x does not exist.") == ["Prerequisite x does not exist."]


def test_a_role_name_openpai_v1_6_cannot_find_fails_at_start_as_its_init_container_does(
        server: LocalServer, client: PaiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """openpai-runtime v0.1.10+ looks role Worker_A up as 'workera': exit 1 in init, no command runs."""
    monkeypatch.delenv("PAIJOB_OPENPAI_BEFORE_1_6", raising=False)
    job_id = client.submit(job_yaml("initfail", ["echo the command ran"], role="Worker_A"))
    detail = wait(client, job_id)
    (task,) = detail["taskRoles"]["workera"]["taskStatuses"]
    assert detail["jobStatus"]["state"] == "FAILED" and task["containerExitCode"] == 1
    assert detail["jobStatus"]["appExitSpec"]["phrase"] == "PAIRuntimeExitAbnormally"  # "platform error"
    assert "looked up as 'workera'" in task["containerExitDiagnostics"]
    log = client.read_log(client.log_locations(job_id, 0, "Worker_A", 0, 0)["all"]).data.decode()
    assert "the command ran" not in log and "--openpai-before-1.6" in log


def test_paijob_logs_attempt_reads_an_earlier_attempts_logs_as_status_attempt_does(
        server: LocalServer, client: PaiClient, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    flag = tmp_path / "once"
    job_id = client.submit(job_yaml("attempts", [
        f"if [ ! -e {flag} ]; then touch {flag}; echo first attempt; exit 143; fi", "echo second attempt"]))
    assert wait(client, job_id)["jobStatus"]["state"] == "SUCCEEDED"
    monkeypatch.setenv("SRV_TOKEN", TOKEN)
    profiles.add("srv", server.url, user=local_user(), token_env="SRV_TOKEN")
    assert cli.main(["logs", "attempts", "-c", "srv", "--attempt", "0", "--no-prefix"]) == 0
    out = capsys.readouterr().out
    assert "first attempt" in out and "second attempt" not in out
    assert cli.main(["logs", "attempts", "-c", "srv", "--attempt", "1", "--no-prefix"]) == 0
    out = capsys.readouterr().out
    assert "second attempt" in out and "first attempt" not in out
    assert cli.main(["logs", "attempts", "-c", "srv", "--attempt", "1", "-f"]) == 2
    assert "--attempt 1: give a job attempt" in capsys.readouterr().err
