"""Issue 55 item 6: a 50,000-deep JSON body to ``PUT /jobs/NAME/executionType`` was a 500 (Flask's
``get_json(silent=True)`` lets ``RecursionError`` through). Every route that reads a JSON body answers such a
body, or one of the wrong shape, with OpenPAI's 400 ``{code, message}``, and the job is left as it was."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from cluster_helpers import TOKEN, job_yaml

from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.remote.client import PaiClient

API = "/rest-server/api/v2"
DEEP = "[" * 50_000 + "]" * 50_000
DEEP_OBJECT = '{"value": ' + '{"a":' * 12_000 + "1" + "}" * 12_000 + "}"  # 72 kB: under the 100 kB body limit
WRONG_SHAPES = [DEEP, DEEP_OBJECT, "[1, 2]", '"STOP"', "null", "{", "\xff"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalServer, str]]:
    with LocalServer(tmp_path_factory.mktemp("deep") / "state", TOKEN) as srv:
        client = PaiClient(srv.url, TOKEN, user=local_user(), cluster_name="local", retries=1)
        job_id = client.submit(job_yaml("deep", ["sleep 60"]))
        yield srv, job_id
        client.stop(job_id)


def send(srv: LocalServer, method: str, path: str, body: str, **headers: str) -> requests.Response:
    return requests.request(method, srv.url + path, data=body.encode("utf-8", "surrogateescape"), timeout=30,
                            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json", **headers})


@pytest.mark.parametrize("body", WRONG_SHAPES, ids=["deep-list", "deep-object", "list", "string", "null", "cut",
                                                    "not-utf8"])
def test_execution_type_answers_400_to_a_body_it_cannot_read(server: tuple[LocalServer, str], body: str) -> None:
    srv, job_id = server
    answer = send(srv, "PUT", f"{API}/jobs/{job_id}/executionType", body)
    assert answer.status_code == 400, answer.text[:300]
    assert answer.json() == {"code": "InvalidParametersError",
                             "message": 'executionType value must be "START" or "STOP".'}
    state = requests.get(f"{srv.url}{API}/jobs/{job_id}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert state.json()["jobStatus"]["executionType"] == "START"


@pytest.mark.parametrize("method", ["PUT", "DELETE"])
def test_tag_answers_400_to_a_deep_body(server: tuple[LocalServer, str], method: str) -> None:
    srv, job_id = server
    for body in (DEEP, DEEP_OBJECT):
        answer = send(srv, method, f"{API}/jobs/{job_id}/tag", body)
        assert answer.status_code == 400 and answer.json()["code"] == "InvalidParametersError"


def test_login_answers_400_to_a_deep_body(server: tuple[LocalServer, str]) -> None:
    srv, _ = server
    for body in (DEEP, DEEP_OBJECT, "[1]"):
        answer = send(srv, "POST", f"{API}/authn/basic/login", body)
        assert answer.status_code == 400 and answer.json()["code"] == "InvalidParametersError"


def test_the_portal_session_answers_401_to_a_deep_or_odd_body(server: tuple[LocalServer, str]) -> None:
    srv, _ = server
    for body in (DEEP, DEEP_OBJECT, "[1]", '"code"'):
        answer = send(srv, "POST", "/portal/api/session", body, Origin=srv.url.rstrip("/"),
                      **{"X-Paijob-Portal": "1"})
        assert answer.status_code == 401 and answer.json()["code"] == "UnauthorizedUserError", answer.text[:200]


def test_submit_answers_400_to_a_deep_job(server: tuple[LocalServer, str]) -> None:
    srv, _ = server
    for body, kind in ((DEEP, "application/json"), (DEEP, "text/yaml"), ("a:\n" + "  " * 3000 + "b: 1\n", "text/yaml")):
        answer = send(srv, "POST", f"{API}/jobs", body, **{"Content-Type": kind})
        assert answer.status_code == 400 and answer.json()["code"] == "InvalidProtocolError", answer.text[:200]
