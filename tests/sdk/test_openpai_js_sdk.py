"""OpenPAI's official JavaScript SDK (@microsoft/openpai-js-sdk 0.1.5, under node) against the local cluster.

``sdk_calls.js`` makes the SDK's calls (job submit, list with filters, get,
config, stop, task status, task logs and the log URLs they give, tags, events,
the current user, virtual clusters, storages, login, errors) on a LocalServer
started here on 127.0.0.1; every answer is asserted on and checked against the
swagger (2.2.7) schema of its path and status. The SDK is installed from this
folder's package-lock.json (``npm ci``, as .ci/run does); without node or the
installed packages the test is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "local"))  # the swagger checker (the shared token is in tests/)

from cluster_helpers import TOKEN  # noqa: E402
from swagger_check import check, load_swagger  # noqa: E402

from paijob.common import contract  # noqa: E402
from paijob.local.daemon import local_user  # noqa: E402
from paijob.local.server import LocalServer  # noqa: E402

SDK = HERE / "node_modules" / "@microsoft" / "openpai-js-sdk" / "package.json"


def _missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed (the SDK conformance test runs OpenPAI's JS SDK under node)"
    if not SDK.is_file():
        return f"the SDK is not installed: run `npm ci --no-audit --no-fund` in {HERE} (.ci/run does)"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    state = tmp_path_factory.mktemp("sdk") / "state"
    # The jobs' role Worker_A exercises convertName in every answer (taskRoles "workera"); OpenPAI v1.6+'s
    # runtime cannot run such a role, so the local cluster plays an older OpenPAI, as its setting allows.
    patch = pytest.MonkeyPatch()
    patch.setenv(contract.OPENPAI_BEFORE_1_6, "1")
    server = LocalServer(state, TOKEN).start()
    try:
        env = {**os.environ, "PAI_URL": server.url, "PAI_TOKEN": TOKEN, "PAI_USER": local_user(),
               "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
        env.pop("HTTP_PROXY", None), env.pop("http_proxy", None)
        done = subprocess.run(["node", str(HERE / "sdk_calls.js")], cwd=HERE, env=env, capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        records = json.loads(done.stdout)
    finally:
        server.stop()
        patch.undo()
    yield {record["call"]: record for record in records}


def body(answers: dict[str, dict[str, Any]], call: str, status: int) -> Any:
    record = answers[call]
    assert record["status"] == status, record
    return record["body"]


def test_every_answer_matches_its_swagger_schema(answers: dict[str, dict[str, Any]]) -> None:
    swagger = load_swagger()
    checked = 0
    for call, record in answers.items():
        if record["path"] is None:  # YAML config, log contents, routes the swagger's checker does not cover
            continue
        try:
            check(swagger, record["path"], record["method"], record["status"], record["body"])
        except Exception as problem:  # name the call, not only the schema path
            raise AssertionError(f"{call}: {problem}") from problem
        checked += 1
    assert checked >= 25


def test_cluster_user_and_resources(answers: dict[str, dict[str, Any]]) -> None:
    assert body(answers, "getClusterInfo", 200)["launcherType"] == "k8s"
    assert body(answers, "basicLogin", 200) == {"token": TOKEN, "user": local_user(), "admin": True}
    assert body(answers, "basicLogin(unknown user)", 400)["code"] == "NoUserError"
    assert answers["basicLogin(unknown user)"]["error"] == "NoUserError"  # the SDK's own error class
    assert body(answers, "getUser", 200)["username"] == local_user()
    assert list(body(answers, "listVirtualClusters", 200)) == ["default"]
    assert body(answers, "getVirtualCluster", 200)["resourcesTotal"]["cpu"] >= 1
    assert body(answers, "getVirtualCluster(missing)", 404)["code"] == "NoVirtualClusterError"
    assert body(answers, "getStorages", 200) == {"storages": [
        {"name": "shared", "share": True, "volumeName": "shared", "default": False},
        {"name": "home", "share": False, "volumeName": "home", "default": True}]}
    shared = body(answers, "getStorage", 200)
    assert shared["name"] == "shared" and shared["type"] == "other" and shared["data"]["path"].endswith("/shared")
    assert body(answers, "getStorage(missing)", 404)["code"] == "NoStorageError"
    assert body(answers, "getStorage(forbidden)", 403)["code"] == "ForbiddenUserError"


def test_submit_list_get_stop(answers: dict[str, dict[str, Any]]) -> None:
    assert body(answers, "createJob", 202)["status"] == 202
    assert body(answers, "createJob(duplicate)", 409)["code"] == "ConflictJobError"
    names = [job["name"] for job in body(answers, "listJobs", 200)]
    assert names == ["sdk-long", "sdk-secret", "sdk-fail"]
    assert [job["name"] for job in body(answers, "listJobs(keyword)", 200)] == ["sdk-fail"]
    counted = body(answers, "listJobs(withTotalCount)", 200)
    assert counted["totalCount"] == 3 and [job["name"] for job in counted["data"]] == ["sdk-fail"]
    assert body(answers, "listJobs(jobPriority)", 200) == []
    failed = body(answers, "getJob", 200)
    assert failed["jobStatus"]["state"] == "FAILED" and failed["jobStatus"]["appExitType"] == "Failed"
    assert list(failed["taskRoles"]) == ["workera"]
    assert body(answers, "getJob(attempt)", 200)["jobStatus"]["attemptId"] == 0
    assert body(answers, "getJob(stopped)", 200)["jobStatus"]["appExitCode"] == -210
    assert body(answers, "getJob(missing)", 404)["code"] == "NoJobError"
    assert answers["getJob(missing)"]["error"] == "NoJobError"
    assert body(answers, "getJobConfig", 200)["secrets"] == "******"
    assert body(answers, "listJobs(wrong token)", 401)["code"] == "UnauthorizedUserError"


def test_task_logs_are_readable_from_the_urls_the_sdk_gets(answers: dict[str, dict[str, Any]]) -> None:
    task = body(answers, "getTask", 200)
    assert task["taskRoleName"] == "workera" and task["attempts"][0]["containerExitCode"] == 255
    locations = body(answers, "getTaskLogs", 200)["locations"]
    assert sorted(loc["name"] for loc in locations) == ["all", "stderr", "stdout"]
    assert body(answers, "log stdout", 200) == "to-stdout\n"
    assert "to-stderr" in body(answers, "log stderr", 200)
    assert TOKEN not in json.dumps(locations)
    # the SDK sends tailMode, which rest-server's log.js ignores (it reads tail-mode)
    assert not any("tail-mode" in loc["uri"] for loc in body(answers, "getTaskLogs(tailMode)", 200)["locations"])


def test_tags_events_and_what_the_local_cluster_cannot_do(answers: dict[str, dict[str, Any]]) -> None:
    assert body(answers, "addTag", 200)["message"].startswith("Add tag sdk-tag")
    assert [job["name"] for job in body(answers, "listJobs(tagsContain)", 200)] == ["sdk-fail"]
    assert body(answers, "deleteTag", 200)["status"] == 200
    assert body(answers, "deleteTag(missing)", 404)["code"] == "NoTagError"
    assert body(answers, "listEvents", 200) == {"totalCount": 0, "data": []}
    for call in ("getAllUser", "getTokens", "basicLogout"):
        assert body(answers, call, 404)["code"] == "NoApiError", call
