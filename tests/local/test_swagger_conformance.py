"""The local cluster's answers match the OpenPAI REST swagger's response schemas."""

from __future__ import annotations

from typing import Any

import pytest
import requests
import yaml
from cluster_helpers import TOKEN, job_yaml
from swagger_check import check, load_swagger

from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.remote.client import PaiClient


@pytest.fixture(scope="module")
def swagger() -> dict[str, Any]:
    return load_swagger()


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A server with one finished two-task job, shared by the checks of this module."""
    state = tmp_path_factory.mktemp("swagger") / "state"
    server = LocalServer(state, TOKEN).start()
    client = PaiClient(server.url, TOKEN, user=local_user(), retries=0)
    job_id = client.submit(job_yaml("conform", ["echo hi", "exit $PAI_TASK_INDEX"], instances=2,
                                    role_extra={"completion": {"minFailedInstances": 2}}))
    client.wait(job_id, poll=0.1, timeout=30)
    yield server, client, job_id
    server.stop()


def get(server: LocalServer, path: str, token: str | None = TOKEN, **kwargs: Any) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.get(f"{server.url}/rest-server{path}", headers=headers, timeout=10, **kwargs)


def test_job_list_matches_job_summary(swagger: dict[str, Any], finished: Any) -> None:
    server, _, _ = finished
    response = get(server, "/api/v2/jobs")
    assert response.status_code == 200
    check(swagger, "/api/v2/jobs", "get", 200, response.json())
    counted = get(server, "/api/v2/jobs", params={"withTotalCount": "true"}).json()
    assert counted["totalCount"] == 1


def test_job_detail_and_attempt_match_job_detail(swagger: dict[str, Any], finished: Any) -> None:
    server, _, job_id = finished
    detail = get(server, f"/api/v2/jobs/{job_id}").json()
    check(swagger, "/api/v2/jobs/{user}~{job}", "get", 200, detail)
    # exit 1 is reported as 255 by the exit spec (paijob.openpai.exitspec)
    assert [t["containerExitCode"] for t in detail["taskRoles"]["worker"]["taskStatuses"]] == [0, 255]
    attempt = get(server, f"/api/v2/jobs/{job_id}/attempts/0").json()
    check(swagger, "/api/v2/jobs/{user}~{job}/attempts/{jobAttemptId}", "get", 200, attempt)


def test_task_status_and_logs_match_their_schemas(swagger: dict[str, Any], finished: Any) -> None:
    server, _, job_id = finished
    base = f"/api/v2/jobs/{job_id}/attempts/0/taskRoles/worker/taskIndex/1/attempts"
    task = get(server, base).json()
    check(swagger, "/api/v2/jobs/{user}~{job}/attempts/{jobAttemptId}/taskRoles/{taskRoleName}/taskIndex/{taskIndex}/attempts",
          "get", 200, task)
    logs = get(server, f"{base}/0/logs").json()
    check(swagger, "/api/v2/jobs/{user}~{job}/attempts/{jobAttemptId}/taskRoles/{taskRoleName}/taskIndex/{taskIndex}"
          "/attempts/{taskAttemptId}/logs", "get", 200, logs)
    assert sorted(loc["name"] for loc in logs["locations"]) == ["all", "stderr", "stdout"]


def test_config_is_yaml(finished: Any) -> None:
    server, _, job_id = finished
    response = get(server, f"/api/v2/jobs/{job_id}/config")
    assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/yaml")
    assert yaml.safe_load(response.text)["name"] == "conform"


def test_submit_stop_and_errors_match_the_response_schema(swagger: dict[str, Any], finished: Any) -> None:
    server, _, job_id = finished
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "text/yaml"}
    created = requests.post(f"{server.url}/rest-server/api/v2/jobs", data=job_yaml("conform2", ["sleep 30"]),
                            headers=headers, timeout=10)
    assert created.status_code == 202
    check(swagger, "/api/v2/jobs", "post", 202, created.json())
    conflict = requests.post(f"{server.url}/rest-server/api/v2/jobs", data=job_yaml("conform2", ["true"]),
                             headers=headers, timeout=10)
    assert conflict.status_code == 409 and conflict.json()["code"] == "ConflictJobError"
    check(swagger, "/api/v2/jobs", "post", 409, conflict.json())
    stopped = requests.put(f"{server.url}/rest-server/api/v2/jobs/{local_user()}~conform2/executionType",
                           json={"value": "STOP"}, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert stopped.status_code == 202
    check(swagger, "/api/v2/jobs", "post", 202, stopped.json())
    missing = get(server, f"/api/v2/jobs/{local_user()}~nope")
    assert missing.status_code == 404 and missing.json()["code"] == "NoJobError"
    check(swagger, "/api/v2/jobs/{user}~{job}", "get", 404, missing.json())
    unauthorised = get(server, "/api/v2/jobs", token="wrong")
    assert unauthorised.status_code == 401
    check(swagger, "/api/v2/authn/basic/logout", "delete", 401, unauthorised.json())


def test_basic_login_matches_its_schema(swagger: dict[str, Any], finished: Any) -> None:
    server, _, _ = finished
    url = f"{server.url}/rest-server/api/v2/authn/basic/login"
    ok = requests.post(url, data={"username": local_user(), "password": TOKEN}, timeout=10)
    assert ok.status_code == 200
    check(swagger, "/api/v2/authn/basic/login", "post", 200, ok.json())
    wrong = requests.post(url, data={"username": local_user(), "password": "guess"}, timeout=10)
    assert wrong.status_code == 400
    check(swagger, "/api/v2/authn/basic/login", "post", 400, wrong.json())
