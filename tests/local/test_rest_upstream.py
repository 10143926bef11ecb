"""The local cluster answers what rest-server's own code answers (shared/reference/openpai/upstream/).

Each test names the upstream file whose behaviour it pins: express.js (CORS,
body limits, 404), token.js (the bearer scheme), controllers/v2/job.js (list
filters, tags, events, 202 bodies), models/v2/job/k8s.js (detail fields),
models/v2/job/log.js (log URLs with their own token, ``tail-mode``).
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
import requests
from cluster_helpers import TOKEN, job_yaml

from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.remote.client import PaiClient

API = "/rest-server/api/v2"


def call(server: LocalServer, method: str, path: str, *, token: str | None = TOKEN, scheme: str = "Bearer",
         **kwargs: Any) -> requests.Response:
    headers = kwargs.pop("headers", {})
    if token is not None:
        headers["Authorization"] = f"{scheme} {token}"
    return requests.request(method, f"{server.url}{API}{path}", headers=headers, timeout=10, **kwargs)


def finished_job(client: PaiClient, name: str, commands: list[str], **extra: Any) -> str:
    job_id = client.submit(job_yaml(name, commands, **extra))
    client.wait(job_id, poll=0.05, timeout=30)
    return job_id


def test_log_urls_carry_their_own_token_and_read_without_a_header(server: LocalServer, client: PaiClient) -> None:
    job_id = finished_job(client, "logurl", ["echo out-line", "echo err-line >&2"])
    listing = call(server, "GET", f"/jobs/{job_id}/attempts/0/taskRoles/worker/taskIndex/0/attempts/0/logs").json()
    uris = {loc["name"]: loc["uri"] for loc in listing["locations"]}
    assert all("token=" in uri and TOKEN not in uri for uri in uris.values())
    assert requests.get(uris["stdout"], timeout=10).text == "out-line\n"  # no Authorization header: log.js
    assert requests.get(uris["stderr"], timeout=10).text.endswith("err-line\n")
    # a log's token opens that log only
    stolen = uris["stdout"].split("token=")[1]
    other = uris["stderr"].split("?")[0] + f"?token={stolen}"
    assert requests.get(other, timeout=10).status_code == 401


def test_tail_mode_is_read_from_tail_dash_mode_as_log_js_does(server: LocalServer, client: PaiClient) -> None:
    job_id = finished_job(client, "tails", ["echo x"])
    path = f"/jobs/{job_id}/attempts/0/taskRoles/worker/taskIndex/0/attempts/0/logs"
    tailed = call(server, "GET", path, params={"tail-mode": "true"}).json()["locations"]
    assert all(loc["uri"].endswith("&tail-mode=true") for loc in tailed)
    ignored = call(server, "GET", path, params={"tailMode": "true"}).json()["locations"]  # the SDK's spelling
    assert not any("tail-mode" in loc["uri"] for loc in ignored)


def test_list_filters_keyword_order_priority_and_tags(server: LocalServer, client: PaiClient) -> None:
    ids = [finished_job(client, name, ["true"]) for name in ("alpha-one", "beta-two", "alpha-three")]
    names = lambda **q: [j["name"] for j in call(server, "GET", "/jobs", params=q).json()]  # noqa: E731
    assert names() == ["alpha-three", "beta-two", "alpha-one"]  # default: submissionTime,DESC
    assert names(keyword="alpha") == ["alpha-three", "alpha-one"]
    assert names(order="jobName,ASC") == ["alpha-one", "alpha-three", "beta-two"]
    assert names(order="nonsense,ASC") == names()  # an unknown field is ignored, as in job.js
    assert names(jobPriority="high") == []  # local jobs have no priority: only "default" matches them
    assert len(names(jobPriority="default,high")) == 3
    assert call(server, "PUT", f"/jobs/{ids[1]}/tag", json={"value": "keep"}).status_code == 200
    assert names(tagsContain="keep,other") == ["beta-two"]
    assert names(tagsNotContain="keep") == ["alpha-three", "alpha-one"]
    counted = call(server, "GET", "/jobs", params={"keyword": "two", "withTotalCount": "true"}).json()
    assert counted["totalCount"] == 1 and counted["data"][0]["tags"] == ["keep"]
    for bad in ({"limit": "-1"}, {"offset": "x"}, {"limit": "1" + "0" * 23}):
        refused = call(server, "GET", "/jobs", params=bad)
        assert refused.status_code == 400 and refused.json()["code"] == "InvalidParametersError", bad


def test_tags_add_and_delete_as_job_js(server: LocalServer, client: PaiClient) -> None:
    job_id = finished_job(client, "tagged", ["true"])
    added = call(server, "PUT", f"/jobs/{job_id}/tag", json={"value": "t1"})
    assert added.json() == {"status": 200, "message": f"Add tag t1 for job {job_id} successfully."}
    assert call(server, "GET", f"/jobs/{job_id}").json()["tags"] == ["t1"]
    deleted = call(server, "DELETE", f"/jobs/{job_id}/tag", json={"value": "t1"})
    assert deleted.status_code == 200
    again = call(server, "DELETE", f"/jobs/{job_id}/tag", json={"value": "t1"})
    assert again.status_code == 404 and again.json()["code"] == "NoTagError"
    assert call(server, "PUT", f"/jobs/{job_id}/tag", json={}).status_code == 400
    assert call(server, "PUT", f"/jobs/{local_user()}~nope/tag", json={"value": "t"}).json()["code"] == "NoJobError"


def test_portal_calls_users_virtual_clusters_storages_events(server: LocalServer, client: PaiClient) -> None:
    job_id = finished_job(client, "portal", ["true"])
    me = call(server, "GET", f"/users/{local_user()}").json()
    assert me["username"] == local_user() and me["admin"] is True and me["virtualCluster"] == ["default"]
    assert call(server, "GET", "/users/someone-else").json()["code"] == "NoUserError"
    vcs = call(server, "GET", "/virtual-clusters").json()
    assert list(vcs) == ["default"] and vcs["default"]["resourcesTotal"]["cpu"] >= 1
    assert call(server, "GET", "/virtual-clusters/default").json() == vcs["default"]
    assert call(server, "GET", "/virtual-clusters/nope").json()["code"] == "NoVirtualClusterError"
    assert [s["name"] for s in call(server, "GET", "/storages").json()["storages"]] == ["shared", "home"]
    assert call(server, "GET", f"/jobs/{job_id}/events").json() == {"totalCount": 0, "data": []}
    # what the local cluster cannot do answers as express.js's catch-all does for a missing route
    for method, path in (("GET", "/tokens"), ("GET", "/groups"), ("GET", f"/jobs/{job_id}/ssh"),
                         ("DELETE", "/authn/basic/logout")):
        missing = call(server, method, path)
        assert missing.status_code == 404 and missing.json() == {
            "code": "NoApiError", "message": f"API {API}{path} is not found."}, path


def test_cors_for_every_origin_as_the_cors_middleware(server: LocalServer) -> None:
    preflight = requests.options(f"{server.url}{API}/jobs", timeout=10, headers={
        "Origin": "http://elsewhere.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert preflight.status_code == 204
    assert preflight.headers["Access-Control-Allow-Origin"] == "*"
    assert preflight.headers["Access-Control-Allow-Methods"] == "GET,HEAD,PUT,PATCH,POST,DELETE"
    assert preflight.headers["Access-Control-Allow-Headers"] == "authorization,content-type"
    for answer in (call(server, "GET", "/jobs"), call(server, "GET", "/jobs", token=None),
                   call(server, "GET", "/nothing-here")):
        assert answer.headers["Access-Control-Allow-Origin"] == "*"


def test_codes_and_shapes_as_upstream(server: LocalServer, client: PaiClient) -> None:
    job_id = finished_job(client, "shapes", ["exit 1"], role="Worker_A")
    assert call(server, "GET", "/jobs", token=TOKEN, scheme="bearer").status_code == 200  # /^Bearer$/i
    basic = base64.b64encode(f"{local_user()}:{TOKEN}".encode()).decode()
    assert call(server, "GET", "/jobs", token=basic, scheme="Basic").status_code == 200  # application token
    assert call(server, "GET", "/jobs", token=None).json()["message"].startswith("Guest is not allowed")
    assert call(server, "GET", "/jobs", token="wrong").json() == {
        "code": "UnauthorizedUserError", "message": "Your token is invalid."}
    role = call(server, "GET", f"/jobs/{job_id}/attempts/0/taskRoles/nope/taskIndex/0/attempts")
    assert role.status_code == 404 and role.json()["code"] == "NoJobError"
    login = requests.post(f"{server.url}{API}/authn/basic/login", data={"username": "nobody", "password": "x"},
                          timeout=10)
    assert login.status_code == 400 and login.json()["code"] == "NoUserError"
    detail = call(server, "GET", f"/jobs/{job_id}").json()
    assert "jobPriority" in detail and detail["jobPriority"] is None
    status = detail["jobStatus"]
    assert (status["appProgress"], status["appTrackingUrl"], status["appExitType"]) == (1, "", "Failed")
    assert call(server, "GET", "/info", token=None).json()["launcherType"] == "k8s"
    # the job ended: rest-server answers its stop with an error, and the job stays as it ended
    stopped = call(server, "PUT", f"/jobs/{job_id}/executionType", json={"value": "STOP"})
    assert stopped.status_code == 500 and stopped.json() == {"code": "UnknownError",
                                                             "message": "Unexpected end of JSON input"}
    assert call(server, "GET", f"/jobs/{job_id}").json()["jobStatus"]["executionType"] == "START"
    done = finished_job(client, "shapes-ok", ["true"])
    assert call(server, "GET", f"/jobs/{done}").json()["jobStatus"]["appExitType"] == "Succeeded"


@pytest.mark.parametrize("path", [
    "/jobs/{job}/attempts/{big}",
    "/jobs/{job}/attempts/{big}/taskRoles/worker/taskIndex/0/attempts",
    "/jobs/{job}/attempts/0/taskRoles/worker/taskIndex/{big}/attempts",
    "/jobs/{job}/attempts/0/taskRoles/worker/taskIndex/0/attempts/{big}/logs",
])
def test_numbers_in_paths_past_any_bound_are_not_found_not_a_server_error(
        server: LocalServer, client: PaiClient, path: str) -> None:
    job_id = finished_job(client, "bounds", ["true"])
    for big in ("1" + "0" * 23, str(2**63), str(2**31)):
        answer = call(server, "GET", path.format(job=job_id, big=big))
        assert answer.status_code == 404 and answer.json()["code"] in ("NoJobError", "NoTaskError", "NoTaskLogError")


def test_a_body_over_100_kb_is_refused_before_authentication(server: LocalServer) -> None:
    big = "x" * (100 * 1024 + 1)
    for path, token in (("/authn/basic/login", None), ("/jobs", "wrong"), ("/jobs", TOKEN)):
        answer = call(server, "POST", path, token=token, data=big, headers={"Content-Type": "text/yaml"})
        assert answer.status_code == 413 and answer.json() == {"message": "request entity too large"}, path


def test_a_chunked_body_is_cut_at_the_limit(server: LocalServer) -> None:
    def chunks() -> Any:
        for _ in range(1000):  # 64 MB offered, no Content-Length
            yield b"u" * 65536
    answer = requests.post(f"{server.url}{API}/authn/basic/login", data=chunks(), timeout=30,
                           headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert answer.status_code == 413
    small = requests.post(f"{server.url}{API}/authn/basic/login", timeout=10,
                          data=iter([b"username=" + local_user().encode(), b"&password=" + TOKEN.encode()]),
                          headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert small.status_code == 200 and small.json()["token"] == TOKEN  # chunked, under the limit: read
