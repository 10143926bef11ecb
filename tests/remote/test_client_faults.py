"""The client against a scripted loopback server: retries, lost replies, timeouts."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import yaml
from cluster_helpers import job_yaml

from paijob.common.ports import draw
from paijob.remote.client import (
    AuthError,
    ClusterError,
    ClusterUnreachableError,
    ConflictJobError,
    NoJobError,
    PaiClient,
    ServerError,
)

Handler = Callable[["Fake", BaseHTTPRequestHandler, bytes], None]


class Fake:
    """A tiny OpenPAI stand-in: a dict of jobs plus a queue of scripted misbehaviours."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        self.auth: list[str | None] = []
        self.jobs: dict[str, str] = {}
        self.script: list[str] = []  # actions for the next requests: "503", "reset", "reset-after", "slow"
        self.lock = threading.Lock()

    def next_action(self) -> str | None:
        with self.lock:
            return self.script.pop(0) if self.script else None


def _send(handler: BaseHTTPRequestHandler, status: int, body: Any, content_type: str = "application/json") -> None:
    data = (json.dumps(body) if content_type == "application/json" else body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _reset(handler: BaseHTTPRequestHandler) -> None:
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    handler.connection.close()
    handler.close_connection = True


def make_handler(fake: Fake) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def handle_any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            fake.requests.append((self.command, self.path))
            fake.auth.append(self.headers.get("Authorization"))
            action = fake.next_action()
            if action == "503":
                return _send(self, 503, {"code": "UnknownError", "message": "upstream busy"})
            if action == "reset":
                return _reset(self)
            if action == "slow":
                time.sleep(2)
            path = self.path.split("?")[0].removeprefix("/rest-server/api/v2")
            if path == "/log-manager/stdout":  # like OpenPAI's log manager: the token is in the query
                return _send(self, 200, "line 1\nline 2\n", "text/plain")
            if self.headers.get("Authorization") != "Bearer good":
                return _send(self, 401, {"code": "UnauthorizedUserError", "message": "Guest is not allowed"})
            if self.command == "POST" and path == "/jobs":
                name = yaml.safe_load(body)["name"]
                if f"me~{name}" in fake.jobs:
                    return _send(self, 409, {"code": "ConflictJobError", "message": f"Job name {name} already exists."})
                fake.jobs[f"me~{name}"] = body.decode()
                if action == "reset-after":  # accepted, but the reply is lost
                    return _reset(self)
                return _send(self, 202, {"message": f"update job {name} successfully"})
            if self.command == "GET" and path.startswith("/jobs/") and path.endswith("/config"):
                job_id = path.split("/")[2]
                if job_id not in fake.jobs:
                    return _send(self, 404, {"code": "NoJobError", "message": f"Job {job_id} is not found."})
                return _send(self, 200, fake.jobs[job_id], "text/yaml")
            if self.command == "GET" and path == "/jobs":
                return _send(self, 200, [])
            if self.command == "GET" and path.startswith("/jobs/"):
                return _send(self, 404, {"code": "NoJobError", "message": "Job x is not found."})
            return _send(self, 404, {"code": "NoApiError", "message": "no such api"})

        do_GET = do_POST = do_PUT = handle_any

    return H


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the client hanging up on a slow reply is the point of some tests


@pytest.fixture
def fake() -> Iterator[tuple[Fake, str]]:
    state = Fake()
    server = QuietServer(("127.0.0.1", 0), make_handler(state))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def client(url: str, **kwargs: Any) -> PaiClient:
    options: dict[str, Any] = {"user": "me", "retries": 3, "backoff": 0.01, "cluster_name": "fake"}
    options.update(kwargs)
    return PaiClient(url, options.pop("token", "good"), **options)


def test_503_is_retried_until_the_server_answers(fake: tuple[Fake, str]) -> None:
    state, url = fake
    state.script = ["503", "503"]
    assert client(url).list_jobs() == []
    assert len(state.requests) == 3


def test_persistent_503_ends_in_an_error_that_says_try_later(fake: tuple[Fake, str]) -> None:
    state, url = fake
    state.script = ["503"] * 10
    with pytest.raises(ServerError) as error:
        client(url, retries=2).list_jobs()
    assert "503" in str(error.value) and "try again later" in str(error.value)
    assert len(state.requests) == 3


def test_4xx_is_never_retried(fake: tuple[Fake, str]) -> None:
    state, url = fake
    with pytest.raises(NoJobError):
        client(url).get_job("me~missing")
    with pytest.raises(AuthError):
        client(url, token="bad").list_jobs()
    assert len(state.requests) == 2


def test_lost_reply_to_an_accepted_submit_does_not_submit_twice(fake: tuple[Fake, str]) -> None:
    state, url = fake
    state.script = ["reset-after"]
    assert client(url).submit(job_yaml("once", ["true"])) == "me~once"
    posts = [r for r in state.requests if r[0] == "POST"]
    assert len(posts) == 1 and list(state.jobs) == ["me~once"]
    assert ("GET", "/rest-server/api/v2/jobs/me~once/config") in state.requests


def test_reset_before_the_job_was_taken_resubmits_once(fake: tuple[Fake, str]) -> None:
    state, url = fake
    state.script = ["reset"]
    assert client(url).submit(job_yaml("twice", ["true"])) == "me~twice"
    posts = [r for r in state.requests if r[0] == "POST"]
    assert len(posts) == 2 and list(state.jobs) == ["me~twice"]


def test_503_on_submit_checks_for_the_job_before_posting_again(fake: tuple[Fake, str]) -> None:
    state, url = fake
    state.script = ["503"]
    assert client(url).submit(job_yaml("busy", ["true"])) == "me~busy"
    methods = [r[0] for r in state.requests]
    assert methods == ["POST", "GET", "POST"]


def test_a_different_job_with_the_name_is_still_a_conflict_after_a_reset(fake: tuple[Fake, str]) -> None:
    state, url = fake
    state.jobs["me~taken"] = job_yaml("taken", ["echo an older job"])
    state.script = ["reset"]
    with pytest.raises(ConflictJobError) as error:
        client(url).submit(job_yaml("taken", ["echo a new job"]))
    assert "never" in str(error.value)


def test_slow_response_is_a_timeout_error_not_a_hang(fake: tuple[Fake, str]) -> None:
    state, url = fake
    state.script = ["slow", "slow"]
    started = time.monotonic()
    with pytest.raises(ClusterUnreachableError) as error:
        client(url, read_timeout=0.3, retries=1).list_jobs()
    assert time.monotonic() - started < 2.5
    assert "timed out" in str(error.value)


def test_unreachable_cluster_says_so(fake: tuple[Fake, str]) -> None:
    port = draw()[0]  # free when drawn, outside the ephemeral range: nothing listens there
    with pytest.raises(ClusterUnreachableError) as error:
        client(f"http://127.0.0.1:{port}", retries=1).list_jobs()
    assert "connection failed" in str(error.value)


def test_log_uris_of_another_host_get_no_bearer_token_and_their_token_is_not_logged(
        fake: tuple[Fake, str], caplog: pytest.LogCaptureFixture) -> None:
    import logging

    caplog.set_level(logging.DEBUG)
    state, url = fake
    other = url.replace("127.0.0.1", "localhost")  # another host name: another origin
    chunk = client(url).read_log(f"{other}/log-manager/stdout?username=me&token=LOGTOKEN-SENTINEL", 5)
    assert chunk.data == b"1\nline 2\n" and chunk.next_offset == 14
    assert state.auth == [None]
    assert "LOGTOKEN-SENTINEL" not in caplog.text and "token=***" in caplog.text


def test_an_http_log_link_from_an_https_cluster_is_refused_and_nothing_is_sent(fake: tuple[Fake, str]) -> None:
    state, url = fake  # the fake speaks http: the link a compromised or misconfigured https cluster gives
    secure = client("https://pai.example.com", token="SENTINEL-TOKEN")
    with pytest.raises(ClusterError, match=r"reached over https, answered with a link that is not https .*"
                                           r"log-manager/stdout\?token=\*\*\*\)") as error:
        secure.read_log(f"{url}/log-manager/stdout?token=LOGTOKEN", 0)
    assert state.requests == [] and state.auth == [] and "LOGTOKEN" not in str(error.value)


@pytest.mark.parametrize(("log", "owned"), [
    ("https://pai.example.com/logs/1", True),
    ("https://PAI.example.com:443/logs/1", True),
    ("http://pai.example.com:443/logs/1", False),  # same host and port, another scheme
    ("https://pai.example.com:8443/logs/1", False),
    ("https://pai.example.com.evil.example/logs/1", False),
    ("https://pai.example.com:bad/logs/1", False),
])
def test_the_token_goes_only_to_the_clusters_own_scheme_host_and_port(log: str, owned: bool) -> None:
    assert client("https://pai.example.com").owns(log) is owned


def test_a_log_link_on_another_port_of_the_same_host_gets_no_token(fake: tuple[Fake, str]) -> None:
    state, url = fake
    port = int(url.rsplit(":", 1)[1])
    cluster = client(f"http://127.0.0.1:{port + 1 if port < 65535 else port - 1}", token="SENTINEL-TOKEN")
    assert cluster.read_log(f"{url}/log-manager/stdout", 5).data == b"1\nline 2\n"
    assert state.auth == [None]
