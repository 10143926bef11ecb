"""A typed client for the OpenPAI REST API v2 (real clusters and the local one alike): its endpoints.

Each method is one endpoint of rest-server's v2 API: what it sends, and what the
answer must look like. How a request travels (one deadline each, size caps,
retries, the token kept to the cluster's own origin, a submit never sent twice)
is :mod:`paijob.remote.transport`; what an error answer means is
:mod:`paijob.remote.errors`.

A submit is settled, not re-sent: after a failure that may have reached the
server, the client asks whether the job exists and treats it as accepted when
its config is the one that was sent. When it cannot tell, it says the outcome
is unknown (``OutcomeUnknownError``, exit 4) and how to check, instead of
advising a new name (which would duplicate the job).

Log contents are streamed chunk by chunk (``stream_log``), so memory does not
grow with the size of a log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from paijob.errors import PaijobError
from paijob.openpai import jsyaml
from paijob.openpai.jobstate import is_terminal
from paijob.openpai.model import parse_job
from paijob.openpai.rest import rest_role_name
from paijob.openpai.storages import Storage, parse_summary, summary_problem
from paijob.remote.errors import (  # the error types are re-exported: callers catch them from here too
    AuthError,
    BadReplyError,
    ClusterError,
    ClusterUnreachableError,
    ConflictJobError,
    InvalidProtocolError,
    NoJobError,
    OutcomeUnknownError,
    RedirectError,
    ServerError,
    change_reply_problem,
    hide_url_password,
    job_detail_problem,
)
from paijob.remote.reply import Reply
from paijob.remote.request import AUTHORIZATION, HttpRequest, job_submission
from paijob.remote.transport import Retryable, Transport, log

__all__ = ["AuthError", "BadReplyError", "ClusterError", "ClusterUnreachableError", "ConflictJobError",
           "InvalidProtocolError", "LogChunk", "NoJobError", "OutcomeUnknownError", "PaiClient", "RedirectError",
           "ServerError", "split_job_id"]


@dataclass(frozen=True)
class LogChunk:
    data: bytes
    next_offset: int


def split_job_id(job_id: str, default_user: str | None = None) -> tuple[str, str]:
    """``user~name`` -> (user, name); a bare name takes ``default_user``."""
    if "~" in job_id:
        user, _, name = job_id.partition("~")
        if user and name:
            return user, name
    elif default_user:
        return default_user, job_id
    raise PaijobError(
        f"job id {job_id!r} is not of the form USER~NAME"
        + ("" if default_user else " (and the cluster profile names no user to assume)")
    )


class PaiClient(Transport):
    """OpenPAI REST v2 client. ``cluster_url`` is the portal root, e.g. ``https://pai.example.com``.

    ``timeout`` (seconds) bounds each request from connect to last byte;
    ``read_timeout`` is its older name (see :class:`~paijob.remote.transport.Transport`).
    """

    def __repr__(self) -> str:  # never show the token
        return f"PaiClient({self.api_base!r}, user={self.user!r})"

    # ------------------------------------------------------------------ jobs

    def _job_path(self, job_id: str) -> str:
        user, name = split_job_id(job_id, self.user)
        return f"jobs/{quote(user, safe='')}~{quote(name, safe='')}"

    def job_id(self, name: str) -> str:
        """``USER~NAME`` as given, or a bare ``NAME`` completed with this cluster's user."""
        if "~" in name:
            return name
        if not self.user:
            raise PaijobError(
                f"cannot tell the user name for cluster {self.cluster_name}: "
                f"pass --user to `paijob cluster add` or log in with `paijob login {self.cluster_name}`"
            )
        return f"{self.user}~{name}"

    def web_link(self, job_id: str) -> str:
        user, name = split_job_id(job_id, self.user)
        return f"{hide_url_password(self.cluster_url)}/job-detail.html?username={quote(user)}&jobName={quote(name)}"

    def submission(self, job_yaml: str, job: Any = None) -> HttpRequest:
        """The request ``submit(job_yaml)`` sends (``--dry-run`` prints the same object); ``job``: the
        YAML as the server reads it, when the caller has it (see ``HttpRequest.job``)."""
        return job_submission(self.api_base, job_yaml, token=AUTHORIZATION in self.session.headers, job=job)

    def submit(self, job: str | HttpRequest) -> str:
        """POST the job (YAML text, or the request ``submission`` built); returns the job id ``user~name``.

        A failure that may have reached the server (connection reset, 502-504)
        is followed by a GET of the job: when it exists with the same config it
        counts as accepted, so the job is never submitted twice. When that
        cannot be told, ``OutcomeUnknownError`` says so.
        """
        request = job if isinstance(job, HttpRequest) else self.submission(job)
        if request.url != self._url("jobs"):
            raise PaijobError(f"the request was built for {request.url}, but this client submits to "
                              f"{self._url('jobs')}; build it for this cluster (api.dry_run after api.connect)")
        sent = request.job if request.job is not None else jsyaml.load_job(request.body, "the job").value
        name = str(sent["name"]) if isinstance(sent, dict) and "name" in sent else None
        if name is not None:
            self.job_id(name)  # know the user before anything is sent, not after
        what = f"submitting job {name}"
        reply, maybe_sent = self._send_once(
            what,
            lambda: self._transport(request.method, request.url, data=request.body.encode(),
                                    headers=request.wire_headers()),
            lambda maybe: self._settle(name, sent, maybe),
            lambda why: self.errors.unknown(what, name, why),
        )
        if reply is None:  # an interrupted try created it, as sent
            return self.job_id(str(name))
        if reply.status_code in (200, 201, 202):
            return self._accepted(reply, what, name)
        error = self.errors.error(reply, what, "POST")
        if isinstance(error, ConflictJobError):
            return self._taken(error, what, name, sent, maybe_sent)
        raise error

    def _settle(self, name: str | None, job: Any, maybe_sent: bool) -> bool | None:
        """After a try that may have reached the server: does the job exist as sent (None: cannot tell)?
        False when nothing may have been sent or the job cannot be looked up by name."""
        if not (maybe_sent and name and self.user):
            return False
        return self._exists_as_sent(name, job)

    def _accepted(self, reply: Reply, what: str, name: str | None) -> str:
        """A 2xx to a submit counts only when it is what rest-server sends ({status, message} JSON)."""
        problem = change_reply_problem(reply, self.errors.clean)
        if problem:
            raise self.errors.unknown(what, name, problem)
        if name is None:
            raise ServerError(f"{what}: accepted, but the job has no name to report")
        return self.job_id(name)

    def _taken(self, error: ConflictJobError, what: str, name: str | None, job: Any, maybe_sent: bool) -> str:
        """A 409: our own earlier try (the job exists as sent), or a name used before (an error)."""
        exists = self._settle(name, job, maybe_sent)
        if exists is True:
            return self.job_id(str(name))
        if exists is None:
            raise self.errors.unknown(
                what, name, "an earlier try may have created it (the server now answers "
                "that the name is taken) and reading the job back failed") from None
        raise ConflictJobError(
            f"job name {name} is already used on {self.cluster_name} (job names are never "
            "reusable, even after the job ends); pass --name NEW_NAME or --unique-suffix",
            status=error.status,
            code=error.code,
        )

    def _exists_as_sent(self, name: str, sent: Any) -> bool | None:
        """True when job ``name`` exists with the config sent, False when it does not
        (or is another job), None when the server could not tell."""
        try:
            config_text = self.get_config(f"{self.user}~{name}")
        except NoJobError:
            return False
        except ClusterError as error:
            log.debug("could not check whether %s exists: %s", name, error)
            return None
        try:
            stored = jsyaml.load_job(config_text, "the stored job config").value
        except jsyaml.YamlError:
            return True
        return _same_job(stored, sent)

    def get_job(self, job_id: str, attempt: int | None = None) -> dict[str, Any]:
        what = f"reading job {job_id}"
        path = self._job_path(job_id) + ("" if attempt is None else f"/attempts/{attempt}")
        data = self.errors.json(self._request("GET", path, what=what), what)
        problem = job_detail_problem(data)
        if problem:
            raise self.errors.bad_shape(what, problem)
        detail: dict[str, Any] = data
        return detail

    def info(self) -> dict[str, Any]:
        """``GET /api/v2/info``: the rest-server's name, ``version`` (``v1.8.1``), launcherType, authnMethod."""
        what = "reading the cluster's info"
        data = self.errors.json(self._request("GET", "info", what=what), what)
        if not isinstance(data, dict):
            raise self.errors.bad_shape(what, f"an object was expected, got {type(data).__name__}")
        info: dict[str, Any] = data
        return info

    def storages(self) -> list[Storage]:
        """``GET /api/v2/storages``: the storages this user may use (swagger ``StorageSummary``)."""
        what = "listing your storages"
        data = self.errors.json(self._storage_request("storages", what), what)
        problem = summary_problem(data)
        if problem:
            raise self.errors.bad_shape(what, problem)
        return parse_summary(data)

    def storage(self, name: str) -> dict[str, Any]:
        """``GET /api/v2/storages/{name}``: what the storage is (``StorageDetail``; 403/404 are errors)."""
        what = f"reading storage {name}"
        data = self.errors.json(self._storage_request(f"storages/{quote(name, safe='')}", what), what)
        if not isinstance(data, dict):
            raise self.errors.bad_shape(what, f"an object was expected, got {type(data).__name__}")
        detail: dict[str, Any] = data
        return detail

    def _storage_request(self, path: str, what: str) -> Reply:
        """A storage route's answer; a 404 that is not rest-server's ``NoStorageError`` is a cluster without
        the route: rest-server has served ``/api/v2/storages`` (and mounted ``extras.storages``) since
        OpenPAI v1.0 (``src/rest-server/src/routes/v2/storage.js``)."""
        try:
            return self._request("GET", path, what=what)
        except NoJobError as error:
            if error.code == "NoStorageError":
                raise
            raise ClusterError(
                f"{what} on {self.cluster_name}: this cluster is too old for storages (needs OpenPAI v1.0+): its "
                f"rest-server has no /api/v2/storages (HTTP 404), and it does not mount a job's "
                f"extras.storages; leave storage unset and copy results out another way (`paijob logs`, or a "
                f"path the job's image mounts), or use a cluster of OpenPAI v1.0 or newer",
                status=404, code=error.code) from None

    def get_config(self, job_id: str) -> str:
        what = f"reading config of {job_id}"
        return self._request("GET", self._job_path(job_id) + "/config", what=what).text

    def list_jobs(self, *, user: str | None = None, state: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {}
        if user:
            params["username"] = user
        if state:
            params["state"] = state.upper()
        if limit:
            params["limit"] = limit
        what = "listing jobs"
        data = self.errors.json(self._request("GET", "jobs", what=what, params=params), what)
        if isinstance(data, dict) and "data" in data:
            data = data["data"]
        if not isinstance(data, list):
            raise self.errors.bad_shape(what, f"a list of jobs was expected, got {type(data).__name__}")
        for job in data:
            if not isinstance(job, dict) or not all(isinstance(job.get(k), str) for k in ("username", "name", "state")):
                raise self.errors.bad_shape(what, "each job needs string fields username, name and state")
        return data

    def stop(self, job_id: str) -> None:
        what = f"stopping job {job_id}"
        reply = self._request("PUT", self._job_path(job_id) + "/executionType", what=what, ok=(200, 202),
                              json={"value": "STOP"})
        problem = change_reply_problem(reply, self.errors.clean)
        if problem:
            raise OutcomeUnknownError(
                f"{what} on {self.cluster_name}: the outcome is unknown ({problem}); the job may or may not "
                f"be stopping: {self.errors.status_hint(job_id.partition('~')[2] or job_id)}")

    def task_status(self, job_id: str, job_attempt: int, role: str, index: int) -> dict[str, Any]:
        role = rest_role_name(role)  # OpenPAI's paths use the converted role name (Worker_A -> workera)
        what = f"reading task {role}/{index} of {job_id}"
        path = f"{self._job_path(job_id)}/attempts/{job_attempt}/taskRoles/{quote(role, safe='')}/taskIndex/{index}/attempts"
        data = self.errors.json(self._request("GET", path, what=what), what)
        if not isinstance(data, dict):
            raise self.errors.bad_shape(what, "a task status object was expected")
        return data

    def log_locations(
        self, job_id: str, job_attempt: int, role: str, index: int, task_attempt: int, *, tail: bool = False
    ) -> dict[str, str]:
        """name (stdout / stderr / all) -> absolute URI of the log content."""
        role = rest_role_name(role)  # OpenPAI's paths use the converted role name (Worker_A -> workera)
        what = f"listing logs of {role}/{index}"
        path = (
            f"{self._job_path(job_id)}/attempts/{job_attempt}/taskRoles/{quote(role, safe='')}"
            f"/taskIndex/{index}/attempts/{task_attempt}/logs"
        )
        params = {"tail-mode": "true"} if tail else None  # log.js reads tail-mode (the SDK's tailMode is ignored)
        data = self.errors.json(self._request("GET", path, what=what, params=params), what)
        locations = data.get("locations", []) if isinstance(data, dict) else None
        if not isinstance(locations, list) or not all(
                isinstance(loc, dict) and isinstance(loc.get("uri"), str) for loc in locations):
            raise self.errors.bad_shape(what, "expected {locations: [{name, uri}, ...]}")
        out: dict[str, str] = {}
        for location in locations:
            uri = str(location["uri"])
            if uri.startswith("/"):
                uri = self.cluster_url + uri
            out[str(location.get("name"))] = uri
        return out

    def stream_log(self, uri: str, offset: int, sink: Callable[[bytes], None]) -> int:
        """Send the log's bytes from ``offset`` on to ``sink`` as they arrive; returns the new offset.

        Uses a Range request; a server that ignores it (200) has its first
        ``offset`` bytes skipped. Retried only before any byte reached ``sink``.
        The token goes only to the cluster's own origin; an https -> http
        downgrade is refused.
        """
        what = "reading a task log"
        self._refuse_downgrade(uri, what)
        headers: dict[str, Any] = {"Range": f"bytes={offset}-"} if offset else {}
        if not self.owns(uri):  # log-manager URIs carry their own token; do not send ours elsewhere
            headers["Authorization"] = None
        position, skip, delivered = offset, 0, False

        def on_head(status: int) -> None:
            nonlocal skip
            skip = offset if status == 200 else 0  # a 200 answer starts at byte 0

        def take(data: bytes) -> None:
            nonlocal position, skip, delivered
            if skip:
                dropped = min(skip, len(data))
                data, skip = data[dropped:], skip - dropped
            if data:
                delivered = True
                position += len(data)
                sink(data)

        def attempt() -> int:
            try:
                reply = self._transport("GET", uri, headers=headers, sink=take, on_head=on_head)
            except Retryable as retryable:
                if delivered:
                    raise ClusterError(f"{what} on {self.cluster_name}: the log stopped midway "
                                       f"({retryable.reason}); run the command again") from None
                raise
            if reply.status_code == 416:
                return offset
            if reply.status_code in (200, 206):
                return position
            raise self.errors.error(reply, what)

        return self._with_retries(what, attempt)

    def read_log(self, uri: str, offset: int = 0) -> LogChunk:
        """Log bytes from ``offset`` on, in memory (``stream_log`` for big logs)."""
        parts: list[bytes] = []
        end = self.stream_log(uri, offset, parts.append)
        return LogChunk(b"".join(parts), end)

    # ------------------------------------------------------------------ auth

    def login(self, username: str, password: str, expiration: int | None = None) -> dict[str, Any]:
        form: dict[str, Any] = {"username": username, "password": password}
        if expiration:
            form["expiration"] = expiration
        what = f"logging in as {username}"
        self._secrets.add(password)  # a server may echo it in an error
        try:
            reply = self._request("POST", "authn/basic/login", what=what, data=form)
            data = self.errors.json(reply, what, scrub=False)  # the answer's token is the point (never shown)
        finally:
            self._secrets.discard(password)
        if not isinstance(data, dict) or not isinstance(data.get("token"), str) or not data["token"]:
            raise self.errors.bad_shape(what, "expected {token: ...}")
        self._secrets.add(data["token"])
        return data

    # ------------------------------------------------------------------ waiting

    def wait(
        self,
        job_id: str,
        *,
        poll: float = 1.0,
        timeout: float | None = None,
        on_update: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Poll until the job reaches SUCCEEDED / FAILED / STOPPED; returns the last detail."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            detail = self.get_job(job_id)
            if on_update:
                on_update(detail)
            if is_terminal(detail["jobStatus"]["state"]):
                return detail
            if deadline is not None and time.monotonic() > deadline:
                raise ClusterError(f"job {job_id} did not end within {timeout:g} s")
            time.sleep(poll)


def _same_job(stored: Any, sent: Any) -> bool:
    """Do two job dicts describe the same submission?

    Servers may add defaults and mask secrets, so only what they never change is
    compared: the name, and each role's instance count and commands.
    """
    if not isinstance(stored, dict) or not isinstance(sent, dict):
        return False
    return _fingerprint(stored) == _fingerprint(sent)


def _fingerprint(job: dict[str, Any]) -> tuple[Any, ...]:
    model = parse_job(job)
    return model.name, tuple(sorted((role.name, role.instances, role.commands) for role in model.roles))
