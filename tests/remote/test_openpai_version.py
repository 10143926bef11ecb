"""The cluster's version decides the role-name rule: ``GET /api/v2/info`` asked at submit and ``validate -c``.

OpenPAI v1.6+ cannot run a role such as ``ps_server`` (its init container looks it up as ``psserver``);
older clusters can. ``--openpai-before-1.6`` and ``PAIJOB_OPENPAI_BEFORE_1_6`` still override the answer.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import TOKEN, job_yaml

from paijob import api
from paijob.cli import main
from paijob.local.server import LocalServer
from paijob.remote import profiles

API = "/rest-server/api/v2"


class FakeInfo:
    """An OpenPAI stand-in that answers ``/info`` with ``version`` and takes any job POSTed."""

    def __init__(self) -> None:
        self.version: Any = "v1.8.1"
        self.info_status = 200
        self.seen: list[tuple[str, str]] = []


def _handler(fake: FakeInfo) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            fake.seen.append(("GET", self.path))
            if self.path == f"{API}/info" and fake.info_status == 200:
                self._answer(200, {"name": "PAI RESTful API", "version": fake.version, "launcherType": "k8s",
                                   "authnMethod": "basic"})
            else:
                self._answer(fake.info_status if self.path == f"{API}/info" else 404,
                             {"code": "NotFoundError", "message": "no"})

        def do_POST(self) -> None:  # noqa: N802
            fake.seen.append(("POST", self.path))
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._answer(202, {"message": "update job ps successfully"})

    return Handler


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeInfo]:
    """Profile 'pai' for a fake OpenPAI on 127.0.0.1."""
    fake = FakeInfo()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setenv("PAI_TEST_TOKEN", TOKEN)
    monkeypatch.delenv("PAIJOB_OPENPAI_BEFORE_1_6", raising=False)
    profiles.add("pai", f"http://127.0.0.1:{server.server_port}", user="me", token_env="PAI_TEST_TOKEN")
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def ps_job(tmp_path: Path) -> str:
    path = tmp_path / "ps.yaml"
    path.write_text(job_yaml("ps", ["echo hi"], role="ps_server"))
    return str(path)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out + err


def test_validate_with_a_cluster_judges_role_names_by_its_version(
        cluster: FakeInfo, ps_job: str, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.version = "v1.5.0"
    assert _run(capsys, "validate", "-c", "pai", ps_job)[0] == 0
    cluster.version = "v1.8.1"
    code, text = _run(capsys, "validate", "-c", "pai", ps_job)
    assert code == 2 and "rename the role to 'psserver'" in text
    assert ("GET", f"{API}/info") in cluster.seen


def test_the_flag_and_the_variable_override_the_cluster(
        cluster: FakeInfo, ps_job: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.version = "v1.8.1"
    assert _run(capsys, "validate", "-c", "pai", "--openpai-before-1.6", ps_job)[0] == 0
    cluster.version = "v1.5.0"
    monkeypatch.setenv("PAIJOB_OPENPAI_BEFORE_1_6", "0")
    assert _run(capsys, "validate", "-c", "pai", ps_job)[0] == 2
    monkeypatch.setenv("PAIJOB_OPENPAI_BEFORE_1_6", "1")
    cluster.version = "v1.8.1"
    cluster.seen.clear()
    assert _run(capsys, "validate", "-c", "pai", ps_job)[0] == 0
    assert cluster.seen == []  # a decided rule asks nothing


def test_submit_asks_the_cluster_and_refuses_before_the_queue_on_1_6(
        cluster: FakeInfo, ps_job: str, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.version = "v1.8.1"
    code, text = _run(capsys, "submit", ps_job, "-c", "pai")
    assert code == 2 and "rename the role to 'psserver'" in text
    assert [s for s in cluster.seen if s[0] == "POST"] == []
    cluster.version = "v1.5.0"
    code, text = _run(capsys, "submit", ps_job, "-c", "pai")
    assert code == 0 and "me~ps" in text
    assert ("POST", f"{API}/jobs") in cluster.seen


def test_a_cluster_that_cannot_say_its_version_is_taken_as_1_6_or_later(
        cluster: FakeInfo, ps_job: str, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.info_status = 404
    assert api.openpai_before_1_6("pai") is None
    assert _run(capsys, "validate", "-c", "pai", ps_job)[0] == 2


def test_the_local_cluster_answers_the_version_it_behaves_as(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PAIJOB_OPENPAI_BEFORE_1_6", raising=False)
    assert api.openpai_before_1_6("local") is None  # not asked: v1.6+ unless told otherwise
    for setting, older in (("0", False), ("1", True)):
        monkeypatch.setenv("PAIJOB_OPENPAI_BEFORE_1_6", setting)
        server = LocalServer(tmp_path / f"state{setting}", TOKEN).start()
        try:
            monkeypatch.setenv("SRV_TOKEN", TOKEN)
            profiles.add(f"srv{setting}", server.url, user="me", token_env="SRV_TOKEN")
            assert api.openpai_before_1_6(f"srv{setting}") is older
        finally:
            server.stop()


def test_the_flag_reaches_validation_as_a_value_not_through_the_environment(
        ps_job: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.delenv("PAIJOB_OPENPAI_BEFORE_1_6", raising=False)
    seen: list[tuple[object, str | None]] = []
    real = api.validate

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append((kwargs.get("openpai_before_1_6"), os.environ.get("PAIJOB_OPENPAI_BEFORE_1_6")))
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "validate", recording)
    assert _run(capsys, "validate", "--openpai-before-1.6", ps_job)[0] == 0
    assert seen == [(True, None)]
