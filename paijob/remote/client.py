"""A typed client for the OpenPAI REST API v2 (real clusters and the local one alike).

Everything goes through one ``requests.Session`` with a bearer token. Four
rules keep it honest against a misbehaving server or gateway:

* **One deadline per request.** ``timeout`` bounds each request from connect
  to its last byte (requests' own timeouts are per socket read, so a server
  that trickles a byte a second would never trip them): the exchange runs on a
  helper thread and the caller stops waiting at the deadline. A request that
  ran out of time is not retried. Connection failures and 502/503/504 are
  retried with exponential backoff.
* **No silent redirects of changes.** A 3xx answer to POST / PUT / DELETE is an
  error naming the new location (requests would re-send a POST as a GET and
  report success). GETs follow redirects; requests drops the Authorization
  header whenever the host, port or scheme changes.
* **The token stays home.** It is sent only to the cluster's own scheme, host
  and port (``owns``); a log link elsewhere is read without it, and an
  ``http://`` link from an ``https://`` cluster is refused (a downgrade would
  put a token, ours or the link's own, on the wire in clear text).
* **A submit is never re-sent blindly.** After a failure that may have reached
  the server, the client asks whether the job exists and treats it as
  accepted when its config is the one that was sent. When it cannot tell, it
  says the outcome is unknown (``OutcomeUnknownError``, exit 4) and how to
  check, instead of advising a new name (which would duplicate the job).
* **Nothing a server says is shown raw.** Error bodies are reduced to one
  bounded line (HTML tags stripped) and every secret the client knows (its
  token, ``Bearer <token>``, a login password) is replaced by ``***`` in
  anything it shows, JSON answers included. Answers that are not the JSON
  shape the API promises raise ``BadReplyError``, never a traceback.

Log contents are streamed chunk by chunk (``stream_log``), so memory does not
grow with the size of a log.
"""

from __future__ import annotations

import html
import json
import logging
import math
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

import requests

from paijob.errors import EXIT_OUTCOME_UNKNOWN, PaijobError
from paijob.openpai import jsyaml
from paijob.openpai.jobstate import is_terminal
from paijob.openpai.model import parse_job
from paijob.openpai.names import DEFAULT_API_PATH
from paijob.openpai.rest import format_protocol_errors, rest_role_name
from paijob.remote.request import AUTHORIZATION, HttpRequest, job_submission

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({502, 503, 504})
CHANGING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CHUNK = 64 * 1024
# A log body may outlast the deadline while it keeps arriving at least this fast (bytes per deadline).
STREAM_MIN_PER_WINDOW = 64 * 1024
SERVER_TEXT_CHARS = 300  # how much of a server's error text is shown
MAX_BODY = 256 * 2**20  # an API answer (not a log) larger than this is refused, not held in memory

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


class RedirectError(ClusterError):
    """A 3xx to a request that changes something: it was not followed (nor re-sent)."""


class BadReplyError(ClusterError):
    """A success status whose body is not the JSON (or the shape) the API promises."""


class OutcomeUnknownError(ClusterError):
    """A change may or may not have taken effect (e.g. the job may have been created).

    Its own exit code, so that scripts never treat it like a plain failure and
    submit again under a new name.
    """

    exit_code = EXIT_OUTCOME_UNKNOWN


# --------------------------------------------------------------------------- helpers

_TOKEN_QUERY = re.compile(r"(?i)(token=)[^&\s\"'<>]+")
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
_HTML_DROP = re.compile(r"(?is)<(script|style|head)\b.*?</\1\s*>")
_HTML_TAG = re.compile(r"(?s)<[^>]*>")
_HTML_TITLE = re.compile(r"(?is)<title\b[^>]*>(.*?)</title\s*>")


_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of ``url``, the default port made explicit: what "the same server" means."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:  # not a number: no server paijob would send a token to
        return scheme, "", -1
    return scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Hide ``token=...`` query values, ``Bearer ...`` credentials and each of ``secrets``."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        for form in {secret, quote(secret, safe=""), html.escape(secret)}:
            text = text.replace(form, "***")
    text = _TOKEN_QUERY.sub(r"\1***", text)
    return _BEARER.sub(r"\1***", text)


def one_line(text: str, secrets: Iterable[str] = (), limit: int = SERVER_TEXT_CHARS) -> str:
    """A server's text as one bounded, redacted line: HTML reduced to its title and text."""
    if re.search(r"(?i)<(!doctype|html|body|head|title|div|p|h\d|pre)\b", text):
        title = _HTML_TITLE.search(text)
        body = _HTML_TAG.sub(" ", _HTML_DROP.sub(" ", text))
        text = html.unescape((title.group(1) + ": " if title else "") + body)
    text = redact(" ".join(text.split()), secrets)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


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


@dataclass
class Reply:
    """A complete HTTP answer (status, headers, body) read within the request's deadline."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes
    url: str
    reason: str = ""

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


# --------------------------------------------------------------------------- transport


class _Deadline(Exception):
    """The exchange did not finish within the request's deadline."""


class _TooLarge(Exception):
    """An answer held in memory (not a streamed log) grew past ``MAX_BODY``."""


class _Exchange(threading.Thread):
    """One HTTP exchange on its own thread, so that the caller can hold it to a wall-clock deadline.

    The thread hands over the response head, then the body in chunks, through
    a small queue (so a big log never sits in memory). When the caller gives
    up, the thread stops at its next chunk; one blocked in a socket read ends
    at the server's next byte or the per-read timeout. It is a daemon thread:
    it never keeps the program alive.
    """

    def __init__(self, session: requests.Session, method: str, url: str, kwargs: dict[str, Any]) -> None:
        super().__init__(name="paijob-http", daemon=True)
        self.session, self.method, self.url, self.kwargs = session, method, url, kwargs
        self.items: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=8)
        self.cancelled = threading.Event()

    def _put(self, item: tuple[str, Any]) -> bool:
        while not self.cancelled.is_set():
            try:
                self.items.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def run(self) -> None:
        response = None
        try:
            response = self.session.request(self.method, self.url, stream=True, **self.kwargs)
            if not self._put(("head", response)):
                return
            for chunk in response.iter_content(CHUNK):
                if not chunk:
                    continue
                if not self._put(("chunk", chunk)):
                    return
            self._put(("end", None))
        except Exception as error:  # handed to the caller, which maps it
            self._put(("error", error))
        finally:
            if response is not None:
                response.close()

    def next(self, deadline: float) -> tuple[str, Any]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _Deadline()
        try:
            return self.items.get(timeout=remaining)
        except queue.Empty:
            raise _Deadline() from None


class _Retryable(Exception):
    """A failure worth another try: connection problems and 502-504 (timeouts are final)."""

    def __init__(self, reason: str, *, status: int | None = None, timeout: bool = False, sent: bool = True):
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.timeout = timeout
        self.sent = sent  # False when the request surely never reached the server

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
                f"{where}: {self.reason}; check the URL and your network, or raise --timeout"
            )
        hint = ("is the local cluster up? run `paijob local up`" if client.cluster_name == "local"
                else "check the URL and your network")
        return ClusterUnreachableError(f"{where}: {self.reason} after {tries} tries; {hint}")


def _never_sent(error: requests.ConnectionError) -> bool:
    """Connect timeouts, refused connections and DNS failures: the request never left."""
    if isinstance(error, requests.ConnectTimeout):
        return True
    from urllib3.exceptions import NewConnectionError  # NameResolutionError is a subclass

    reason = getattr(error.args[0], "reason", None) if error.args else None
    return isinstance(reason, NewConnectionError)


# --------------------------------------------------------------------------- client


class PaiClient:
    """OpenPAI REST v2 client. ``cluster_url`` is the portal root, e.g. ``https://pai.example.com``.

    ``timeout`` (seconds) bounds each request from connect to last byte;
    ``read_timeout`` is its older name.
    """

    def __init__(
        self,
        cluster_url: str,
        token: str | None,
        *,
        user: str | None = None,
        api_path: str = DEFAULT_API_PATH,
        timeout: float | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float | None = None,
        retries: int = 3,
        backoff: float = 0.5,
        session: requests.Session | None = None,
        cluster_name: str | None = None,
    ) -> None:
        self.cluster_url = cluster_url.rstrip("/")
        self.api_base = self.cluster_url + "/" + api_path.strip("/")
        self.user = user
        self.cluster_name = cluster_name or self.cluster_url
        total = timeout if timeout is not None else read_timeout if read_timeout is not None else 30.0
        if not (isinstance(total, (int, float)) and math.isfinite(total) and total > 0):
            raise PaijobError(f"timeout must be a positive number of seconds, not {total!r}")
        self.deadline = float(total)
        self.timeout = (min(connect_timeout, self.deadline), self.deadline)
        self.retries = retries
        self.backoff = backoff
        self.session = session or requests.Session()
        if urlsplit(self.cluster_url).hostname in ("127.0.0.1", "localhost", "::1"):
            self.session.trust_env = False  # never send loopback requests through an HTTP(S)_PROXY
        self._secrets: set[str] = set()
        if token:
            self._secrets.add(token)
            self.session.headers["Authorization"] = f"Bearer {token}"

    def __repr__(self) -> str:  # never show the token
        return f"PaiClient({self.api_base!r}, user={self.user!r})"

    # ------------------------------------------------------------------ text from the server

    def _clean(self, text: str, limit: int = SERVER_TEXT_CHARS) -> str:
        return one_line(text, self._secrets, limit)

    def _scrub(self, data: Any) -> Any:
        """The decoded JSON with every known secret replaced in its strings."""
        if not self._secrets:
            return data
        if isinstance(data, str):
            return redact(data, self._secrets) if any(s in data for s in self._secrets) else data
        if isinstance(data, list):
            return [self._scrub(item) for item in data]
        if isinstance(data, dict):
            return {key: self._scrub(value) for key, value in data.items()}
        return data

    def _json(self, reply: Reply, what: str, scrub: bool = True) -> Any:
        try:
            data = json.loads(reply.content)
        except ValueError:
            kind = reply.headers.get("Content-Type", "no content type")
            sample = self._clean(reply.text, 120) or "an empty body"
            raise BadReplyError(
                f"{what} on {self.cluster_name}: the answer (HTTP {reply.status_code}, {kind}) is not JSON: "
                f"{sample!r}; is {self.api_base} an OpenPAI REST server? Check the cluster URL"
                + ("" if self.cluster_name in ("local", "env") else " (`paijob cluster list`)"),
                status=reply.status_code,
            ) from None
        return self._scrub(data) if scrub else data

    def _bad_shape(self, what: str, problem: str) -> BadReplyError:
        return BadReplyError(
            f"{what} on {self.cluster_name}: the answer is JSON but not what OpenPAI's REST API v2 sends "
            f"({problem}); is {self.api_base} an OpenPAI v2 REST server?"
        )

    # ------------------------------------------------------------------ transport

    def _url(self, path: str) -> str:
        return self.api_base + "/" + path.lstrip("/")

    def _perform(self, method: str, url: str, *, sink: Callable[[bytes], None] | None = None,
                 on_head: Callable[[int], None] | None = None,
                 sink_statuses: tuple[int, ...] = (200, 206), **kwargs: Any) -> Reply:
        """One exchange held to ``self.deadline``; the body goes to ``sink`` (streamed) for
        ``sink_statuses``, else into the reply. Raises ``_Deadline`` and requests' errors."""
        kwargs.setdefault("timeout", self.timeout)
        kwargs.setdefault("allow_redirects", method.upper() not in CHANGING_METHODS)
        log.debug("%s %s", method, redact(url))
        exchange = _Exchange(self.session, method, url, kwargs)
        deadline = time.monotonic() + self.deadline
        exchange.start()
        try:
            kind, value = exchange.next(deadline)
            if kind == "error":
                raise value
            response: requests.Response = value
            log.debug("-> %s", response.status_code)
            streaming = sink is not None and response.status_code in sink_statuses
            if on_head is not None:
                on_head(response.status_code)
            body: list[bytes] = []
            size = 0
            window_start, window_bytes = time.monotonic(), 0
            while True:
                try:
                    kind, value = exchange.next(deadline)
                except _Deadline:
                    # a streamed log may take longer than the deadline while it keeps flowing
                    if not streaming or window_bytes < STREAM_MIN_PER_WINDOW:
                        raise
                    deadline = time.monotonic() + self.deadline
                    window_start, window_bytes = time.monotonic(), 0
                    continue
                if kind == "error":
                    raise value
                if kind == "end":
                    break
                if streaming:
                    assert sink is not None
                    sink(value)
                    window_bytes += len(value)
                    if time.monotonic() - window_start > self.deadline and window_bytes >= STREAM_MIN_PER_WINDOW:
                        deadline = time.monotonic() + self.deadline
                        window_start, window_bytes = time.monotonic(), 0
                else:
                    body.append(value)
                    size += len(value)
                    if size > MAX_BODY:
                        raise _TooLarge()
            return Reply(response.status_code, response.headers, b"".join(body), response.url,
                         response.reason or "")
        finally:
            exchange.cancelled.set()

    def _transport(self, method: str, url: str, **kwargs: Any) -> Reply:
        """One HTTP exchange; connection problems and 502-504 become ``_Retryable``."""
        try:
            reply = self._perform(method, url, **kwargs)
        except _Deadline:
            raise _Retryable(f"timed out: no complete answer within {self.deadline:g} s (--timeout)", timeout=True) from None
        except requests.Timeout as error:
            sent = not isinstance(error, requests.ConnectTimeout)
            raise _Retryable(f"timed out ({error.__class__.__name__}, --timeout {self.deadline:g} s)",
                             timeout=True, sent=sent) from None
        except requests.TooManyRedirects:
            raise ClusterError(f"{method} {redact(url, self._secrets)}: too many redirects; "
                               "check the cluster URL") from None
        except requests.ConnectionError as error:
            raise _Retryable(f"connection failed ({_short(error, self._secrets)})",
                             sent=not _never_sent(error)) from None
        except requests.exceptions.ChunkedEncodingError:  # the connection broke in the middle of the body
            raise _Retryable("connection broken while reading the answer") from None
        except _TooLarge:
            raise ClusterError(f"{method} {redact(url, self._secrets)}: the answer is larger than "
                               f"{MAX_BODY // 2**20} MiB; is this an OpenPAI REST server?") from None
        except requests.RequestException as error:  # invalid URL and the like
            raise ClusterError(f"{method} {redact(url, self._secrets)}: {_short(error, self._secrets)}; "
                               "check the cluster URL") from None
        if reply.status_code in RETRY_STATUSES:
            raise _Retryable(f"HTTP {reply.status_code}", status=reply.status_code)
        return reply

    def _with_retries(self, what: str, attempt: Callable[[], T]) -> T:
        """Run ``attempt``; retry on connection errors / 502-504 with backoff (never on timeouts)."""
        for tries in range(self.retries + 1):
            try:
                return attempt()
            except _Retryable as retryable:
                if retryable.timeout or tries == self.retries:
                    raise retryable.final(what, self) from None
                delay = self.backoff * (2**tries)
                log.debug("%s: %s; retrying in %.1f s", what, retryable.reason, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _request(self, method: str, path: str, *, what: str, ok: tuple[int, ...] = (200,), **kwargs: Any) -> Reply:
        url = path if path.startswith("http") else self._url(path)

        def attempt() -> Reply:
            reply = self._transport(method, url, **kwargs)
            if reply.status_code in ok:
                return reply
            raise self._error(reply, what, method)

        return self._with_retries(what, attempt)

    def _redirect_error(self, reply: Reply, where: str, method: str) -> ClusterError:
        status = reply.status_code
        location = self._clean(reply.headers.get("Location") or "(no Location header)")
        if method.upper() in CHANGING_METHODS:
            return RedirectError(
                f"{where}: the server answered HTTP {status}, a redirect to {location}; paijob does not "
                f"re-send a {method.upper()} elsewhere, so it was not carried out. If that is the "
                f"cluster's real address, update the cluster URL (now {self.cluster_url})",
                status=status,
            )
        return ClusterError(f"{where}: unexpected HTTP {status} (redirect to {location}); check the cluster URL",
                            status=status)

    def _auth_error(self, status: int, code: str | None, message: str, where: str) -> AuthError:
        if status == 401 or code in (None, "UnauthorizedUserError"):
            return AuthError(f"{where}: not authorised ({message or 'bad or expired token'}). " + self._login_hint(),
                             status=status, code=code)
        return AuthError(f"{where}: forbidden: {message}. " + self._login_hint(), status=status, code=code)

    def _error(self, reply: Reply, what: str, method: str = "GET") -> ClusterError:
        code, message = self._decode_error(reply)
        status = reply.status_code
        where = f"{what} on {self.cluster_name}"
        if 300 <= status < 400:
            return self._redirect_error(reply, where, method)
        if status in (401, 403):
            return self._auth_error(status, code, message, where)
        if status == 409 or code == "ConflictJobError":
            return ConflictJobError(f"{where}: {message}", status=status, code=code)
        if status == 404:
            hint = " `paijob list` shows your jobs." if code == "NoJobError" else ""
            found = (message or "not found").rstrip(".")
            return NoJobError(f"{where}: {found}.{hint}", status=status, code=code)
        if status == 400:
            problems = [self._clean(p) for p in _problems(self._raw_message(reply))[:50]]
            text = f"{where}: the server rejected the request ({code or 'HTTP 400'})"
            if problems:
                text += ":\n" + "\n".join(f"  - {p}" for p in problems)
            return InvalidProtocolError(text, problems, status=status, code=code)
        if status == 429:
            return ServerError(f"{where}: too many requests ({message or 'rate limited'}); OpenPAI limits "
                               "each user to about 60 submissions an hour: wait a while and retry",
                               status=status, code=code)
        return ServerError(f"{where}: HTTP {status} {code or ''}: {message}".rstrip(": "), status=status, code=code)

    def _decode_error(self, reply: Reply) -> tuple[str | None, str]:
        """(code, message) of an error answer, redacted and bounded to one line."""
        try:
            body = json.loads(reply.content)
        except ValueError:
            return None, self._clean(reply.text) or reply.reason or ""
        if isinstance(body, Mapping):
            code = body.get("code")
            return (self._clean(str(code), 80) if code else None), self._clean(str(body.get("message", "")))
        return None, self._clean(json.dumps(body))

    @staticmethod
    def _raw_message(reply: Reply) -> str:
        """The ``message`` of a JSON error answer as sent (for splitting into problems), else ''."""
        try:
            body = json.loads(reply.content)
        except ValueError:
            return ""
        return str(body.get("message", "")) if isinstance(body, Mapping) else ""

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

    def _status_hint(self, name: str) -> str:
        cluster = "" if self.cluster_name == "env" else f" -c {self.cluster_name}"
        return f"check with `paijob status {name}{cluster}` before submitting it again"

    def submission(self, job_yaml: str) -> HttpRequest:
        """The request ``submit(job_yaml)`` sends (``--dry-run`` prints the same object)."""
        return job_submission(self.api_base, job_yaml, token=AUTHORIZATION in self.session.headers)

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
        sent = jsyaml.load_job(request.body, "the job").value
        name = str(sent["name"]) if isinstance(sent, dict) and "name" in sent else None
        if name is not None:
            self.job_id(name)  # know the user before anything is sent, not after
        what = f"submitting job {name}"
        maybe_sent = False
        for tries in range(self.retries + 1):
            if self._settle(name, sent, maybe_sent) is True:
                log.debug("%s: the job exists after an interrupted submit; not re-sending", what)
                return self.job_id(str(name))
            try:
                reply = self._transport(request.method, request.url, data=request.body.encode(),
                                        headers=request.wire_headers())
            except _Retryable as retryable:
                maybe_sent = maybe_sent or retryable.sent
                if retryable.timeout and retryable.sent:
                    raise self._unknown(what, name, retryable.reason) from None
                if tries == self.retries or retryable.timeout:
                    exists = self._settle(name, sent, maybe_sent)
                    if exists is True:
                        return self.job_id(str(name))
                    if exists is None:
                        raise self._unknown(what, name, retryable.reason) from None
                    raise retryable.final(what, self) from None
                time.sleep(self.backoff * (2**tries))
                continue
            if reply.status_code in (200, 201, 202):
                return self._accepted(reply, what, name)
            error = self._error(reply, what, "POST")
            if isinstance(error, ConflictJobError):
                return self._taken(error, what, name, sent, maybe_sent)
            raise error
        raise AssertionError("unreachable")

    def _settle(self, name: str | None, job: Any, maybe_sent: bool) -> bool | None:
        """After a try that may have reached the server: does the job exist as sent (None: cannot tell)?
        False when nothing may have been sent or the job cannot be looked up by name."""
        if not (maybe_sent and name and self.user):
            return False
        return self._exists_as_sent(name, job)

    def _accepted(self, reply: Reply, what: str, name: str | None) -> str:
        """A 2xx to a submit counts only when it is what rest-server sends ({status, message} JSON)."""
        problem = _change_reply_problem(reply, self._clean)
        if problem:
            raise self._unknown(what, name, problem)
        if name is None:
            raise ServerError(f"{what}: accepted, but the job has no name to report")
        return self.job_id(name)

    def _taken(self, error: ConflictJobError, what: str, name: str | None, job: Any, maybe_sent: bool) -> str:
        """A 409: our own earlier try (the job exists as sent), or a name used before (an error)."""
        exists = self._settle(name, job, maybe_sent)
        if exists is True:
            return self.job_id(str(name))
        if exists is None:
            raise self._unknown(
                what, name, "an earlier try may have created it (the server now answers "
                "that the name is taken) and reading the job back failed") from None
        raise ConflictJobError(
            f"job name {name} is already used on {self.cluster_name} (job names are never "
            "reusable, even after the job ends); pass --name NEW_NAME or --unique-suffix",
            status=error.status,
            code=error.code,
        )

    def _unknown(self, what: str, name: str | None, why: str) -> OutcomeUnknownError:
        check = self._status_hint(name) if name else "check with `paijob list`"
        return OutcomeUnknownError(
            f"{what} on {self.cluster_name}: the outcome is unknown ({why}); the job may or may not "
            f"have been created: {check}"
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
        data = self._json(self._request("GET", path, what=what), what)
        problem = _job_detail_problem(data)
        if problem:
            raise self._bad_shape(what, problem)
        detail: dict[str, Any] = data
        return detail

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
        data = self._json(self._request("GET", "jobs", what=what, params=params), what)
        if isinstance(data, dict) and "data" in data:
            data = data["data"]
        if not isinstance(data, list):
            raise self._bad_shape(what, f"a list of jobs was expected, got {type(data).__name__}")
        for job in data:
            if not isinstance(job, dict) or not all(isinstance(job.get(k), str) for k in ("username", "name", "state")):
                raise self._bad_shape(what, "each job needs string fields username, name and state")
        return data

    def stop(self, job_id: str) -> None:
        what = f"stopping job {job_id}"
        reply = self._request("PUT", self._job_path(job_id) + "/executionType", what=what, ok=(200, 202),
                              json={"value": "STOP"})
        problem = _change_reply_problem(reply, self._clean)
        if problem:
            raise OutcomeUnknownError(
                f"{what} on {self.cluster_name}: the outcome is unknown ({problem}); the job may or may not "
                f"be stopping: {self._status_hint(job_id.partition('~')[2] or job_id)}")

    def task_status(self, job_id: str, job_attempt: int, role: str, index: int) -> dict[str, Any]:
        role = rest_role_name(role)  # OpenPAI's paths use the converted role name (Worker_A -> workera)
        what = f"reading task {role}/{index} of {job_id}"
        path = f"{self._job_path(job_id)}/attempts/{job_attempt}/taskRoles/{quote(role, safe='')}/taskIndex/{index}/attempts"
        data = self._json(self._request("GET", path, what=what), what)
        if not isinstance(data, dict):
            raise self._bad_shape(what, "a task status object was expected")
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
        data = self._json(self._request("GET", path, what=what, params=params), what)
        locations = data.get("locations", []) if isinstance(data, dict) else None
        if not isinstance(locations, list) or not all(
                isinstance(loc, dict) and isinstance(loc.get("uri"), str) for loc in locations):
            raise self._bad_shape(what, "expected {locations: [{name, uri}, ...]}")
        out: dict[str, str] = {}
        for location in locations:
            uri = str(location["uri"])
            if uri.startswith("/"):
                uri = self.cluster_url + uri
            out[str(location.get("name"))] = uri
        return out

    def owns(self, uri: str) -> bool:
        """``uri`` is on the cluster's own scheme, host and port: the only place the token is sent."""
        return origin(uri) == origin(self.cluster_url)

    def _refuse_downgrade(self, uri: str, what: str) -> None:
        if origin(self.cluster_url)[0] == "https" and origin(uri)[0] != "https":
            raise ClusterError(f"{what} on {self.cluster_name}: the cluster, reached over https, answered with "
                               f"a link that is not https ({redact(uri, self._secrets)}); paijob does not follow "
                               "it, as tokens would travel in clear text: read the log in the web portal, and ask "
                               "the cluster's admin to serve log links over https")

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
            except _Retryable as retryable:
                if delivered:
                    raise ClusterError(f"{what} on {self.cluster_name}: the log stopped midway "
                                       f"({retryable.reason}); run the command again") from None
                raise
            if reply.status_code == 416:
                return offset
            if reply.status_code in (200, 206):
                return position
            raise self._error(reply, what)

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
            data = self._json(reply, what, scrub=False)  # the answer's token is the point (never shown)
        finally:
            self._secrets.discard(password)
        if not isinstance(data, dict) or not isinstance(data.get("token"), str) or not data["token"]:
            raise self._bad_shape(what, "expected {token: ...}")
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


def _short(error: Exception, secrets: Iterable[str] = ()) -> str:
    text = str(error)
    match = re.search(r"\] ([^'\"]+)", text) or re.search(r"(Connection \w+|Remote end closed[^'\"]*)", text)
    return redact(match.group(1).strip(" ')") if match else error.__class__.__name__, secrets)


def _int_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def _change_reply_problem(reply: Reply, clean: Callable[[str, int], str]) -> str | None:
    """What is wrong with a 2xx to a change (submit, stop): rest-server sends JSON ``{status, message}``.

    Anything else (an HTML page from a proxy or login portal, an empty body) does
    not say the change happened: None when the answer is as expected.
    """
    try:
        body = json.loads(reply.content)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return None
    kind = reply.headers.get("Content-Type", "no content type")
    sample = clean(reply.text, 120) or "an empty body"
    return (f"the server answered HTTP {reply.status_code} ({kind}) with {sample!r}, not OpenPAI's JSON "
            "{status, message}")


def _job_detail_problem(data: Any) -> str | None:
    """What is wrong with a job detail answer for the verbs that read it (None: fine)."""
    if not isinstance(data, dict):
        return f"a job object was expected, got {type(data).__name__}"
    status = data.get("jobStatus")
    if not isinstance(status, dict) or not isinstance(status.get("state"), str):
        return "jobStatus.state is missing"
    if not _int_or_none(status.get("attemptId")):
        return "jobStatus.attemptId is not a number"
    roles = data.get("taskRoles") or {}
    if not isinstance(roles, dict):
        return "taskRoles is not a mapping"
    for role, info in roles.items():
        tasks = (info or {}).get("taskStatuses") if isinstance(info, dict) else None
        if not isinstance(tasks, list) or not all(
                isinstance(t, dict) and isinstance(t.get("taskIndex"), int) and isinstance(t.get("taskState"), str)
                and _int_or_none(t.get("attemptId")) for t in tasks):
            return f"taskRoles.{role}.taskStatuses must list tasks with taskIndex and taskState"
    return None


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
    model = parse_job(job)
    return model.name, tuple(sorted((role.name, role.instances, role.commands) for role in model.roles))
