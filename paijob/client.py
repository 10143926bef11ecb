"""A typed client for the OpenPAI REST API v2 (real clusters and the local one alike).

Everything goes through one ``requests.Session`` with a bearer token, connect and
read timeouts, and retries with exponential backoff on connection errors and
502/503/504 only. A submit is never re-sent blindly: after a failure that may
have reached the server, the client first asks whether the job exists and
treats it as accepted when its config is the one that was sent.

Errors come back as ``{code, message}`` JSON; they are raised as subclasses of
``ClusterError`` (a ``PaijobError``) whose text says what to do. Tokens never
appear in errors or logs: URLs are logged with ``token=`` query values hidden.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

import requests
import yaml

from paijob.errors import PaijobError
from paijob.openpai.names import DEFAULT_API_PATH
from paijob.openpai.rest import format_protocol_errors, rest_role_name

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({502, 503, 504})
TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})

T = TypeVar("T")


# --------------------------------------------------------------------------- errors


class ClusterError(PaijobError):
    """The cluster answered with an error (or could not be reached)."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code


class ClusterUnreachableError(ClusterError):
    """Connection refused, reset, DNS failure or timeout, after the retries."""


class AuthError(ClusterError):
    """401 / 403: the token is missing, wrong, expired or lacks the right."""


class NoJobError(ClusterError):
    """404 for a job (or one of its tasks / logs)."""


class ConflictJobError(ClusterError):
    """409: the job name is already used by this user (names are never reusable)."""


class InvalidProtocolError(ClusterError):
    """400: the server rejected the job; ``problems`` lists what it said."""

    def __init__(self, message: str, problems: list[str], **kwargs: Any):
        super().__init__(message, **kwargs)
        self.problems = problems


class ServerError(ClusterError):
    """5xx that is not retried (or still failing after the retries)."""


# --------------------------------------------------------------------------- helpers

_TOKEN_QUERY = re.compile(r"(?i)(token=)[^&\s]+")


def redact(text: str) -> str:
    """Hide ``token=...`` query values (log-manager URIs carry them)."""
    return _TOKEN_QUERY.sub(r"\1***", text)


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


class _RedactTokens(logging.Filter):
    """urllib3 logs request lines at debug level, query strings (log-manager tokens) included."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "token=" in message.lower():
            record.msg, record.args = redact(message), None
        return True


logging.getLogger("urllib3.connectionpool").addFilter(_RedactTokens())


@dataclass(frozen=True)
class LogChunk:
    data: bytes
    next_offset: int


# --------------------------------------------------------------------------- client


class PaiClient:
    """OpenPAI REST v2 client. ``cluster_url`` is the portal root, e.g. ``https://pai.example.com``."""

    def __init__(
        self,
        cluster_url: str,
        token: str | None,
        *,
        user: str | None = None,
        api_path: str = DEFAULT_API_PATH,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
        session: requests.Session | None = None,
        cluster_name: str | None = None,
    ) -> None:
        self.cluster_url = cluster_url.rstrip("/")
        self.api_base = self.cluster_url + "/" + api_path.strip("/")
        self.user = user
        self.cluster_name = cluster_name or self.cluster_url
        self.timeout = (connect_timeout, read_timeout)
        self.retries = retries
        self.backoff = backoff
        self.session = session or requests.Session()
        if urlsplit(self.cluster_url).hostname in ("127.0.0.1", "localhost", "::1"):
            self.session.trust_env = False  # never send loopback requests through an HTTP(S)_PROXY
        self._token = token
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def __repr__(self) -> str:  # never show the token
        return f"PaiClient({self.api_base!r}, user={self.user!r})"

    # ------------------------------------------------------------------ transport

    def _url(self, path: str) -> str:
        return self.api_base + "/" + path.lstrip("/")

    def _send(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", self.timeout)
        log.debug("%s %s", method, redact(url))
        response = self.session.request(method, url, **kwargs)
        log.debug("-> %s", response.status_code)
        return response

    def _with_retries(self, what: str, attempt: Callable[[], T]) -> T:
        """Run ``attempt``; retry on connection errors / 502-504 with backoff."""
        for tries in range(self.retries + 1):
            try:
                return attempt()
            except _Retryable as retryable:
                if tries == self.retries:
                    raise retryable.final(what, self) from None
                delay = self.backoff * (2**tries)
                log.debug("%s: %s; retrying in %.1f s", what, retryable.reason, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _request(self, method: str, path: str, *, what: str, ok: tuple[int, ...] = (200,), **kwargs: Any) -> requests.Response:
        url = path if path.startswith("http") else self._url(path)

        def attempt() -> requests.Response:
            response = self._transport(method, url, **kwargs)
            if response.status_code in ok:
                return response
            raise self._error(response, what)

        return self._with_retries(what, attempt)

    def _transport(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        """One HTTP exchange; connection problems and 502-504 become ``_Retryable``."""
        try:
            response = self._send(method, url, **kwargs)
        except requests.Timeout as error:
            raise _Retryable(f"timed out ({error.__class__.__name__})", timeout=True) from None
        except requests.ConnectionError as error:
            raise _Retryable(f"connection failed ({_short(error)})") from None
        if response.status_code in RETRY_STATUSES:
            raise _Retryable(f"HTTP {response.status_code}", status=response.status_code)
        return response

    def _error(self, response: requests.Response, what: str) -> ClusterError:
        code, message = _decode_error(response)
        status = response.status_code
        where = f"{what} on {self.cluster_name}"
        if status == 401 or (status == 403 and code in (None, "UnauthorizedUserError")):
            return AuthError(
                f"{where}: not authorised ({message or 'bad or expired token'}). "
                + self._login_hint(),
                status=status,
                code=code,
            )
        if status == 403:
            return AuthError(f"{where}: forbidden: {message}. " + self._login_hint(), status=status, code=code)
        if status == 409 or code == "ConflictJobError":
            return ConflictJobError(f"{where}: {message}", status=status, code=code)
        if status == 404:
            hint = " `paijob list` shows your jobs." if code == "NoJobError" else ""
            found = (message or "not found").rstrip(".")
            return NoJobError(f"{where}: {found}.{hint}", status=status, code=code)
        if status == 400:
            problems = _problems(message)
            text = f"{where}: the server rejected the request ({code or 'HTTP 400'})"
            if problems:
                text += ":\n" + "\n".join(f"  - {p}" for p in problems)
            return InvalidProtocolError(text, problems, status=status, code=code)
        if status == 429:
            return ServerError(f"{where}: too many requests ({message or 'rate limited'}); OpenPAI limits "
                               "each user to about 60 submissions an hour: wait a while and retry",
                               status=status, code=code)
        return ServerError(f"{where}: HTTP {status} {code or ''}: {message}".rstrip(": "), status=status, code=code)

    def _login_hint(self) -> str:
        if self.cluster_name == "local":
            return "The local cluster's token is read from its state dir; run `paijob local up` again to refresh it."
        return (
            f"Log in with `paijob login {self.cluster_name}` or give an application token: "
            f"`paijob cluster add {self.cluster_name} --url {self.cluster_url} --token-env VAR` "
            "(or set PAI_TOKEN)."
        )

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
        return f"{self.cluster_url}/job-detail.html?username={quote(user)}&jobName={quote(name)}"

    def submit(self, job_yaml: str) -> str:
        """POST the job (YAML text); returns the job id ``user~name``.

        A failure that may have reached the server (connection reset, timeout,
        502-504) is followed by a GET of the job: when it exists with the same
        config it counts as accepted, so the job is never submitted twice.
        """
        job = yaml.safe_load(job_yaml)
        name = str(job["name"]) if isinstance(job, dict) and "name" in job else None
        if name is not None:
            self.job_id(name)  # know the user before anything is sent, not after
        what = f"submitting job {name}"
        url = self._url("jobs")
        headers = {"Content-Type": "text/yaml"}
        maybe_sent = False
        for tries in range(self.retries + 1):
            if maybe_sent and name and self.user:
                accepted = self._accepted_already(name, job)
                if accepted:
                    log.debug("%s: the job exists after an interrupted submit; not re-sending", what)
                    return self.job_id(name)
            try:
                response = self._transport("POST", url, data=job_yaml.encode(), headers=headers)
            except _Retryable as retryable:
                maybe_sent = True
                if tries == self.retries:
                    if name and self.user and self._accepted_already(name, job):
                        return self.job_id(name)
                    raise retryable.final(what, self) from None
                time.sleep(self.backoff * (2**tries))
                continue
            if response.status_code in (200, 201, 202):
                if name is None:
                    raise ServerError(f"{what}: accepted, but the job has no name to report")
                return self.job_id(name)
            error = self._error(response, what)
            if isinstance(error, ConflictJobError):
                if maybe_sent and name and self.user and self._accepted_already(name, job):
                    return self.job_id(name)
                raise ConflictJobError(
                    f"job name {name} is already used on {self.cluster_name} (job names are never "
                    "reusable, even after the job ends); pass --name NEW_NAME or --unique-suffix",
                    status=error.status,
                    code=error.code,
                )
            raise error
        raise AssertionError("unreachable")

    def _accepted_already(self, name: str, sent: Any) -> bool:
        """True when job ``name`` exists and its config matches what was sent."""
        try:
            config_text = self.get_config(f"{self.user}~{name}")
        except NoJobError:
            return False
        except ClusterError as error:
            log.debug("could not check whether %s exists: %s", name, error)
            return False
        try:
            stored = yaml.safe_load(config_text)
        except yaml.YAMLError:
            return True
        return _same_job(stored, sent)

    def get_job(self, job_id: str, attempt: int | None = None) -> dict[str, Any]:
        path = self._job_path(job_id) + ("" if attempt is None else f"/attempts/{attempt}")
        data: dict[str, Any] = self._request("GET", path, what=f"reading job {job_id}").json()
        return data

    def get_config(self, job_id: str) -> str:
        return self._request("GET", self._job_path(job_id) + "/config", what=f"reading config of {job_id}").text

    def list_jobs(self, *, user: str | None = None, state: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {}
        if user:
            params["username"] = user
        if state:
            params["state"] = state.upper()
        if limit:
            params["limit"] = limit
        data = self._request("GET", "jobs", what="listing jobs", params=params).json()
        if isinstance(data, dict) and "data" in data:
            data = data["data"]
        return list(data)

    def stop(self, job_id: str) -> None:
        self._request(
            "PUT",
            self._job_path(job_id) + "/executionType",
            what=f"stopping job {job_id}",
            ok=(200, 202),
            json={"value": "STOP"},
        )

    def task_status(self, job_id: str, job_attempt: int, role: str, index: int) -> dict[str, Any]:
        role = rest_role_name(role)  # OpenPAI's paths use the converted role name (Worker_A -> workera)
        path = f"{self._job_path(job_id)}/attempts/{job_attempt}/taskRoles/{quote(role, safe='')}/taskIndex/{index}/attempts"
        data: dict[str, Any] = self._request("GET", path, what=f"reading task {role}/{index} of {job_id}").json()
        return data

    def log_locations(
        self, job_id: str, job_attempt: int, role: str, index: int, task_attempt: int, *, tail: bool = False
    ) -> dict[str, str]:
        """name (stdout / stderr / all) -> absolute URI of the log content."""
        role = rest_role_name(role)  # OpenPAI's paths use the converted role name (Worker_A -> workera)
        path = (
            f"{self._job_path(job_id)}/attempts/{job_attempt}/taskRoles/{quote(role, safe='')}"
            f"/taskIndex/{index}/attempts/{task_attempt}/logs"
        )
        params = {"tailMode": "true"} if tail else None
        data = self._request("GET", path, what=f"listing logs of {role}/{index}", params=params).json()
        out: dict[str, str] = {}
        for location in data.get("locations", []):
            uri = str(location.get("uri", ""))
            if uri.startswith("/"):
                uri = self.cluster_url + uri
            out[str(location.get("name"))] = uri
        return out

    def read_log(self, uri: str, offset: int = 0) -> LogChunk:
        """Log bytes from ``offset`` on (Range when the server supports it)."""
        same_host = urlsplit(uri).netloc == urlsplit(self.cluster_url).netloc
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        kwargs: dict[str, Any] = {"headers": headers}
        if not same_host:  # log-manager URIs carry their own token; do not send ours elsewhere
            kwargs["headers"] = {**headers, "Authorization": None}

        def attempt() -> LogChunk:
            response = self._transport("GET", uri, **kwargs)
            if response.status_code == 416:
                return LogChunk(b"", offset)
            if response.status_code == 206:
                return LogChunk(response.content, offset + len(response.content))
            if response.status_code == 200:
                body = response.content
                return LogChunk(body[offset:], max(offset, len(body)))
            raise self._error(response, "reading a task log")

        return self._with_retries("reading a task log", attempt)

    # ------------------------------------------------------------------ auth

    def login(self, username: str, password: str, expiration: int | None = None) -> dict[str, Any]:
        form: dict[str, Any] = {"username": username, "password": password}
        if expiration:
            form["expiration"] = expiration
        response = self._request("POST", "authn/basic/login", what=f"logging in as {username}", data=form)
        data: dict[str, Any] = response.json()
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
            if detail["jobStatus"]["state"] in TERMINAL_STATES:
                return detail
            if deadline is not None and time.monotonic() > deadline:
                raise ClusterError(f"job {job_id} did not end within {timeout:g} s")
            time.sleep(poll)


class _Retryable(Exception):
    def __init__(self, reason: str, *, status: int | None = None, timeout: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.timeout = timeout

    def final(self, what: str, client: PaiClient) -> ClusterError:
        where = f"{what} on {client.cluster_name} ({client.api_base})"
        tries = client.retries + 1
        if self.status:
            return ServerError(
                f"{where}: the server answered HTTP {self.status} {tries} time(s); "
                "the cluster or its gateway is overloaded or restarting, try again later",
                status=self.status,
            )
        if self.timeout:
            return ClusterUnreachableError(
                f"{where}: {self.reason} after {tries} tries (connect {client.timeout[0]:g} s, "
                f"read {client.timeout[1]:g} s); check the URL and your network, or raise --timeout"
            )
        hint = "is the local cluster up? run `paijob local up`" if client.cluster_name == "local" else "check the URL and your network"
        return ClusterUnreachableError(f"{where}: {self.reason} after {tries} tries; {hint}")


def _short(error: Exception) -> str:
    text = str(error)
    match = re.search(r"\] ([^'\"]+)", text) or re.search(r"(Connection \w+|Remote end closed[^'\"]*)", text)
    return redact(match.group(1).strip(" ')") if match else error.__class__.__name__)


def _decode_error(response: requests.Response) -> tuple[str | None, str]:
    try:
        body = response.json()
    except ValueError:
        return None, redact(response.text.strip()[:500]) or response.reason or ""
    if isinstance(body, Mapping):
        code = body.get("code")
        message = body.get("message", "")
        return (str(code) if code else None), redact(str(message))
    return None, redact(str(body)[:500])


def _problems(message: str) -> list[str]:
    """OpenPAI packs the problem list into one message; split it back into lines."""
    if not message:
        return []
    formatted = format_protocol_errors(message)  # a schema failure's message is ajv's JSON error array
    if formatted is not None:
        return formatted
    lines = [line.strip(" -\t") for line in message.splitlines()]
    lines = [line for line in lines if line]
    if len(lines) > 1 and lines[0].endswith(":"):
        lines = lines[1:]
    return lines


def _same_job(stored: Any, sent: Any) -> bool:
    """Do two job dicts describe the same submission?

    Servers may add defaults and mask secrets, so only what they never change is
    compared: the name, and each role's instance count and commands.
    """
    if not isinstance(stored, dict) or not isinstance(sent, dict):
        return False
    return _fingerprint(stored) == _fingerprint(sent)


def _fingerprint(job: dict[str, Any]) -> tuple[Any, ...]:
    roles = job.get("taskRoles") or {}
    if not isinstance(roles, dict):
        return (str(job.get("name")), repr(roles))
    return (
        str(job.get("name")),
        tuple(
            sorted(
                (str(role), int(spec.get("instances", 1) or 1), tuple(str(c) for c in spec.get("commands") or ()))
                for role, spec in roles.items()
                if isinstance(spec, dict)
            )
        ),
    )
