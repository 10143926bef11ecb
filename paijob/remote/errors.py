"""What a cluster's answers mean as errors: the exception types, and an answer turned into one.

Nothing a server says is shown raw: error bodies are reduced to one bounded line
(HTML reduced to its title and text) and every secret the client knows (its token,
``Bearer <token>``, a login password) is replaced by ``***`` in anything shown, JSON
answers included. Answers that are not the JSON shape the API promises raise
``BadReplyError``, never a traceback.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote

from paijob.common import untrusted
from paijob.errors import EXIT_OUTCOME_UNKNOWN, PaijobError
from paijob.openpai.rest import format_protocol_errors
from paijob.remote.reply import Reply

SERVER_TEXT_CHARS = 300  # how much of a server's error text is shown
CHANGING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


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


_TOKEN_QUERY = re.compile(r"(?i)(token=)[^&\s\"'<>]+")
# the password of a URL's user part: https://alice:PASSWORD@host (userinfo ends at the last @ before the path)
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@?#]*:)[^/\s?#]*@")
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
_HTML_DROP = re.compile(r"(?is)<(script|style|head)\b.*?</\1\s*>")
_HTML_TAG = re.compile(r"(?s)<[^>]*>")
_HTML_TITLE = re.compile(r"(?is)<title\b[^>]*>(.*?)</title\s*>")


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Hide ``token=...`` query values, URL passwords, ``Bearer ...`` credentials and each of ``secrets``."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        for form in {secret, quote(secret, safe=""), html.escape(secret)}:
            text = text.replace(form, "***")
    text = _TOKEN_QUERY.sub(r"\1***", text)
    text = hide_url_password(text)
    return _BEARER.sub(r"\1***", text)


def hide_url_password(text: str) -> str:
    """``https://alice:***@host/...``: a URL's password, wherever one is in ``text``, never shown."""
    return _URL_PASSWORD.sub(r"\1***@", text) if "@" in text else text


def one_line(text: str, secrets: Iterable[str] = (), limit: int = SERVER_TEXT_CHARS) -> str:
    """A server's text as one bounded, redacted line: HTML reduced to its title and text."""
    if re.search(r"(?i)<(!doctype|html|body|head|title|div|p|h\d|pre)\b", text):
        title = _HTML_TITLE.search(text)
        body = _HTML_TAG.sub(" ", _HTML_DROP.sub(" ", text))
        text = html.unescape((title.group(1) + ": " if title else "") + body)
    text = redact(" ".join(text.split()), secrets)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def short(error: Exception, secrets: Iterable[str] = ()) -> str:
    text = str(error)
    match = re.search(r"\] ([^'\"]+)", text) or re.search(r"(Connection \w+|Remote end closed[^'\"]*)", text)
    return redact(match.group(1).strip(" ')") if match else error.__class__.__name__, secrets)


class ReplyErrors:
    """One cluster's answers as errors: what went wrong, where (the cluster) and how to fix it.

    ``secrets`` is the client's own set (its token, a password while logging in):
    it is read each time, so what the client learns later is hidden too.
    """

    def __init__(self, cluster_name: str, cluster_url: str, api_base: str, secrets: set[str], *,
                 local: bool = False) -> None:
        self.cluster_name, self.cluster_url, self.api_base = cluster_name, cluster_url, api_base
        self.secrets = secrets
        self.local = local  # the embedded local cluster: its hints differ

    def clean(self, text: str, limit: int = SERVER_TEXT_CHARS) -> str:
        return one_line(text, self.secrets, limit)

    def scrub(self, data: Any) -> Any:
        """The decoded JSON with every known secret replaced in its strings."""
        if not self.secrets:
            return data
        if isinstance(data, str):
            return redact(data, self.secrets) if any(s in data for s in self.secrets) else data
        if isinstance(data, list):
            return [self.scrub(item) for item in data]
        if isinstance(data, dict):
            return {key: self.scrub(value) for key, value in data.items()}
        return data

    def json(self, reply: Reply, what: str, scrub: bool = True) -> Any:
        try:
            data = untrusted.loads(reply.content)
        except ValueError:
            kind = reply.headers.get("Content-Type", "no content type")
            sample = self.clean(reply.text, 120) or "an empty body"
            raise BadReplyError(
                f"{what} on {self.cluster_name}: the answer (HTTP {reply.status_code}, {kind}) is not JSON: "
                f"{sample!r}; is {self.api_base} an OpenPAI REST server? Check the cluster URL"
                + ("" if self.local or self.cluster_name == "env" else " (`paijob cluster list`)"),
                status=reply.status_code,
            ) from None
        return self.scrub(data) if scrub else data

    def bad_shape(self, what: str, problem: str) -> BadReplyError:
        return BadReplyError(
            f"{what} on {self.cluster_name}: the answer is JSON but not what OpenPAI's REST API v2 sends "
            f"({problem}); is {self.api_base} an OpenPAI v2 REST server?"
        )

    def _redirect_error(self, reply: Reply, where: str, method: str) -> ClusterError:
        status = reply.status_code
        location = self.clean(reply.headers.get("Location") or "(no Location header)")
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
            return AuthError(f"{where}: not authorised ({message or 'bad or expired token'}). " + self.login_hint(),
                             status=status, code=code)
        return AuthError(f"{where}: forbidden: {message}. " + self.login_hint(), status=status, code=code)

    def error(self, reply: Reply, what: str, method: str = "GET") -> ClusterError:
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
            return self._rejected(reply, where, code)
        if status == 429:
            return ServerError(f"{where}: too many requests ({message or 'rate limited'}); OpenPAI limits "
                               "each user to about 60 submissions an hour: wait a while and retry",
                               status=status, code=code)
        return ServerError(f"{where}: HTTP {status} {code or ''}: {message}".rstrip(": "), status=status, code=code)

    def _rejected(self, reply: Reply, where: str, code: str | None) -> InvalidProtocolError:
        """A 400: the problems the server listed, one per line (at most 50)."""
        listed = [self.clean(p) for p in problems(self._raw_message(reply))[:50]]
        text = f"{where}: the server rejected the request ({code or 'HTTP 400'})"
        if listed:
            text += ":\n" + "\n".join(f"  - {p}" for p in listed)
        return InvalidProtocolError(text, listed, status=reply.status_code, code=code)

    def _decode_error(self, reply: Reply) -> tuple[str | None, str]:
        """(code, message) of an error answer, redacted and bounded to one line."""
        try:
            body = untrusted.loads(reply.content)
        except ValueError:
            return None, self.clean(reply.text) or reply.reason or ""
        if isinstance(body, Mapping):
            code = body.get("code")
            return (self.clean(str(code), 80) if code else None), self.clean(str(body.get("message", "")))
        return None, self.clean(json.dumps(body))

    @staticmethod
    def _raw_message(reply: Reply) -> str:
        """The ``message`` of a JSON error answer as sent (for splitting into problems), else ''."""
        try:
            body = untrusted.loads(reply.content)
        except ValueError:
            return ""
        return str(body.get("message", "")) if isinstance(body, Mapping) else ""

    def login_hint(self) -> str:
        if self.local:
            return "The local cluster's token is read from its state dir; run `paijob local up` again to refresh it."
        return (
            f"Log in with `paijob login {self.cluster_name}` or give an application token: "
            f"`paijob cluster add {self.cluster_name} --url {self.cluster_url} --token-env VAR --replace` "
            "(or set PAI_TOKEN)."
        )

    def status_hint(self, name: str) -> str:
        cluster = "" if self.cluster_name == "env" else f" -c {self.cluster_name}"
        return f"check with `paijob status {name}{cluster}` before submitting it again"

    def unknown(self, what: str, name: str | None, why: str) -> OutcomeUnknownError:
        """A change that may or may not have happened, and how to find out."""
        check = self.status_hint(name) if name else "check with `paijob list`"
        return OutcomeUnknownError(
            f"{what} on {self.cluster_name}: the outcome is unknown ({why}); the job may or may not "
            f"have been created: {check}"
        )


def _int_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def change_reply_problem(reply: Reply, clean: Callable[[str, int], str]) -> str | None:
    """What is wrong with a 2xx to a change (submit, stop): rest-server sends JSON ``{status, message}``.

    Anything else (an HTML page from a proxy or login portal, an empty body) does
    not say the change happened: None when the answer is as expected.
    """
    try:
        body = untrusted.loads(reply.content)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return None
    kind = reply.headers.get("Content-Type", "no content type")
    sample = clean(reply.text, 120) or "an empty body"
    return (f"the server answered HTTP {reply.status_code} ({kind}) with {sample!r}, not OpenPAI's JSON "
            "{status, message}")


def job_detail_problem(data: Any) -> str | None:
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
        if not isinstance(tasks, list) or not all(_is_task_status(t) for t in tasks):
            return f"taskRoles.{role}.taskStatuses must list tasks with taskIndex and taskState"
    return None


def _is_task_status(task: Any) -> bool:
    return (isinstance(task, dict) and isinstance(task.get("taskIndex"), int)
            and isinstance(task.get("taskState"), str) and _int_or_none(task.get("attemptId")))


def problems(message: str) -> list[str]:
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
