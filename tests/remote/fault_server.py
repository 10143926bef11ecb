"""A fault-injecting OpenPAI stand-in on 127.0.0.1 for the client's robustness tests.

``FakePai`` answers the few REST v2 calls the cluster verbs make (submit,
job detail, config, list, stop, log locations and contents, login) like
OpenPAI does, unless a fault is set: then every request whose method and path
match gets the fault instead. Faults:

``302`` / ``307`` / ``308``  redirect to ``redirect_to`` (another origin) + the same path
``same-host-redirect``       redirect to the same path on this server (followed once)
``trickle``                  the normal answer, status line and headers included, at 1 byte/s
``bad-json``                 200 with a truncated JSON body
``deep-json``                200 with JSON nested 200,000 deep (json.loads raises RecursionError, not ValueError)
``wide-json``                200 with 2.5 million values in 5 MB of JSON (parsed, a hundred times its size in memory)
``html-200``                 200 with an HTML page (a captive portal, a wrong URL)
``wrong-shape``              200 with JSON that is not what the API sends
``odd-fields``               200 with the right shape but odd optional fields (times as text, ports as a list)
``odd-attempt``              200 with a job whose attemptId is text
``echo-401``                 401 whose message echoes what it was sent (Authorization header, form)
``echo-500-html``            500 with a long HTML page that echoes the same, and ``token=`` the token
``create-then-503``          POST /jobs stores the job, then answers 503; reading a config answers 503
``broken-body``              the request is carried out, but the answer breaks off after 10 of its 1000 bytes
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml

API = "/rest-server/api/v2"
USER = "me"
PASSWORD = "pw-4f1c2b"


class FakePai:
    """State of one fake cluster: its jobs, its log, the fault to inject and what it saw."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.jobs: dict[str, str] = {}
        self.log = b"line 1\nline 2\n"
        self.fault: str | None = None
        self.fault_methods: set[str] | None = None
        self.fault_path = re.compile("")
        self.redirect_to = ""
        self.state = "SUCCEEDED"  # every job's state in its detail
        self.url = ""
        self.seen: list[tuple[str, str, str | None]] = []  # method, path, Authorization
        self.closing = threading.Event()
        self.lock = threading.Lock()

    def set_fault(self, fault: str | None, *, methods: set[str] | None = None, path: str = "") -> None:
        self.fault, self.fault_methods, self.fault_path = fault, methods, re.compile(path)

    def applies(self, method: str, path: str) -> bool:
        return (self.fault is not None and (self.fault_methods is None or method in self.fault_methods)
                and bool(self.fault_path.search(path)))

    def detail(self, job_id: str) -> dict[str, Any]:
        task = {"taskIndex": 0, "taskState": "SUCCEEDED", "attemptId": 0, "containerExitCode": 0, "retries": 0}
        return {"name": job_id.split("~")[1], "jobStatus": {"state": self.state, "attemptId": 0, "retries": 0},
                "taskRoles": {"worker": {"taskStatuses": [task]}}}


def _handler(fake: FakePai) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        # ------------------------------------------------------------ answering

        def answer(self, status: int, body: Any, content_type: str = "application/json",
                   headers: dict[str, str] | None = None, trickle: bool = False) -> None:
            data = body if isinstance(body, bytes) else (
                json.dumps(body) if content_type == "application/json" else str(body)).encode()
            head = f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}\r\n"
            head += f"Content-Type: {content_type}\r\nContent-Length: {len(data)}\r\n"
            for key, value in (headers or {}).items():
                head += f"{key}: {value}\r\n"
            raw = head.encode() + b"\r\n" + data
            if not trickle:
                self.wfile.write(raw)
                return
            self.close_connection = True
            for byte in raw:  # one byte a second, until the test ends
                if fake.closing.wait(1.0):
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()

        def error(self, status: int, code: str, message: str, trickle: bool = False) -> None:
            self.answer(status, {"code": code, "message": message}, trickle=trickle)

        # ------------------------------------------------------------ routing

        def handle_any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            auth = self.headers.get("Authorization")
            path, _, query = self.path.partition("?")
            with fake.lock:
                fake.seen.append((self.command, self.path, auth))
            fault = fake.fault if fake.applies(self.command, path) else None
            if fault in ("302", "307", "308"):
                return self.answer(int(fault), {"message": "moved"}, headers={"Location": fake.redirect_to + self.path})
            if fault == "same-host-redirect" and "followed=1" not in query:
                sep = "&" if query else "?"
                return self.answer(302, b"", "text/plain", headers={"Location": f"{fake.url}{self.path}{sep}followed=1"})
            if fault == "stop-ended-500" and self.command == "PUT":  # rest-server a95d9420e, job ended
                return self.error(500, "UnknownError", "Unexpected end of JSON input")
            if fault == "bad-json":
                return self.answer(200, b'{"jobStatus": {"state": "RUNN')
            if fault == "deep-json":
                return self.answer(200, b"[" * 200_000 + b"]" * 200_000)
            if fault == "wide-json":
                return self.answer(200, b"[" + b"0," * 2_500_000 + b"0]")
            if fault == "html-200":
                return self.answer(200, "<html><head><title>Sign in</title></head><body><p>Portal</p></body></html>",
                                   "text/html")
            if fault == "wrong-shape":
                return self.answer(200, {"jobStatus": "RUNNING", "data": 5, "locations": 7, "token": 3})
            if fault in ("odd-fields", "odd-attempt") and self.command == "GET" and path.startswith(API + "/jobs"):
                odd: Any = {"submissionTime": "yesterday", "launchedTime": {}, "completedTime": [1],
                            "createdTime": 1e300, "containerPorts": ["SynPort"], "appExitCode": {"x": 1}}
                if fault == "odd-attempt":
                    odd["attemptId"] = "one"
                job = fake.detail(f"{USER}~existing")
                job["jobStatus"].update(odd)
                job["taskRoles"]["worker"]["taskStatuses"][0].update(odd)
                listed = [{"username": USER, "name": "existing", "state": "RUNNING", **odd}]
                return self.answer(200, listed if path == API + "/jobs" else job)
            if fault == "echo-401":
                sent = auth.removeprefix("Bearer ") if auth else None
                return self.error(401, "UnauthorizedUserError",
                                  f"token {sent} is not valid (got header {auth!r}, form {body.decode()!r})")
            if fault == "echo-500-html":
                page = ("<!DOCTYPE html><html><head><title>500 Internal Server Error</title>"
                        "<style>body { color: red }</style></head><body><h1>Internal Server Error</h1>"
                        + "".join(f"<p>request header Authorization: {auth} line {i}</p>\n" for i in range(200))
                        + f"<p>request body: {body.decode()}</p>"
                        + f"<pre>token={fake.token}</pre></body></html>")
                return self.answer(500, page, "text/html")
            if fault == "broken-body":
                if self.command == "POST" and path == API + "/jobs":
                    fake.jobs.setdefault(f"{USER}~{yaml.safe_load(body)['name']}", body.decode())
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
                                 b"\r\n{\"jobStatu")
                self.close_connection = True
                return None
            self.route(path, body, auth, trickle=fault == "trickle", create_then_503=fault == "create-then-503")

        def route(self, path: str, body: bytes, auth: str | None, *, trickle: bool, create_then_503: bool) -> None:
            if path.startswith("/log-manager/"):
                return self.log_content(trickle)
            if not path.startswith(API):
                return self.error(404, "NoApiError", "no such api", trickle)
            path = path[len(API):]
            if self.command == "POST" and path == "/authn/basic/login":
                form = dict(pair.split("=", 1) for pair in body.decode().split("&") if "=" in pair)
                if form.get("password") != PASSWORD:
                    return self.error(400, "IncorrectPasswordError", "Password is incorrect.", trickle)
                return self.answer(200, {"token": fake.token, "user": USER}, trickle=trickle)
            if auth != f"Bearer {fake.token}":
                return self.error(401, "UnauthorizedUserError", "Guest is not allowed to do this operation.", trickle)
            if self.command == "POST" and path == "/jobs":
                name = yaml.safe_load(body)["name"]
                with fake.lock:
                    if f"{USER}~{name}" in fake.jobs:
                        return self.error(409, "ConflictJobError", f"Job name {name} already exists.", trickle)
                    fake.jobs[f"{USER}~{name}"] = body.decode()
                if create_then_503:
                    return self.error(503, "ServiceUnavailable", "upstream busy", trickle)
                return self.answer(202, {"message": f"update job {name} successfully"}, trickle=trickle)
            if self.command == "GET" and path == "/jobs":
                jobs = [{"username": USER, "name": job_id.split("~")[1], "state": "SUCCEEDED"} for job_id in fake.jobs]
                return self.answer(200, jobs, trickle=trickle)
            match = re.fullmatch(r"/jobs/([^/]+)(/.*)?", path)
            if not match:
                return self.error(404, "NoApiError", "no such api", trickle)
            job_id, rest = match.group(1), match.group(2) or ""
            if job_id not in fake.jobs:
                return self.error(404, "NoJobError", f"Job {job_id} is not found.", trickle)
            if self.command == "GET" and rest == "":
                return self.answer(200, fake.detail(job_id), trickle=trickle)
            if self.command == "GET" and rest == "/config":
                if create_then_503:
                    return self.error(503, "ServiceUnavailable", "upstream busy", trickle)
                return self.answer(200, fake.jobs[job_id], "text/yaml", trickle=trickle)
            if self.command == "PUT" and rest == "/executionType":
                return self.answer(202, {"message": "execute job successfully"}, trickle=trickle)
            if self.command == "GET" and rest.endswith("/logs"):
                locations = [{"name": name, "uri": f"{fake.url}/log-manager/{name}"} for name in ("all", "stdout")]
                return self.answer(200, {"locations": locations}, trickle=trickle)
            return self.error(404, "NoApiError", "no such api", trickle)

        def log_content(self, trickle: bool) -> None:
            data = fake.log
            match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
            if match:
                start = int(match.group(1))
                if start >= len(data):
                    return self.answer(416, b"", "text/plain")
                part = data[start:]
                return self.answer(206, part, "text/plain", trickle=trickle,
                                   headers={"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"})
            return self.answer(200, data, "text/plain", trickle=trickle)

        do_GET = do_POST = do_PUT = do_DELETE = handle_any

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hangs up on a trickle is the point of some tests


@contextmanager
def serve(token: str) -> Iterator[FakePai]:
    """A ``FakePai`` served on 127.0.0.1 (its ``url``) until the block ends."""
    fake = FakePai(token)
    server = _Server(("127.0.0.1", 0), _handler(fake))
    fake.url = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-pai", daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.closing.set()
        server.shutdown()
        server.server_close()
        time.sleep(0)  # let trickling handlers see ``closing``
