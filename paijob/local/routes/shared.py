"""What every route of the local server shares: OpenPAI's error answer, the token checks, the job a path names."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

from flask import Response, current_app, g, jsonify, request
from werkzeug.routing import BaseConverter

from paijob.local.portal import web as portal

API = "/rest-server/api/v2"
LOGS = "/log-manager/api/v1/logs"
# ids in paths are stored as SQLite integers; anything beyond is no attempt or task of any job
MAX_ID = 2**31 - 1
# the one write the portal's pages make (the stop button): the only write its session cookie may do
PORTAL_WRITES = frozenset({"api.jobs.execution_type"})


class BoundedIntConverter(BaseConverter):
    """``<n:x>``: digits as an int; a number past ``MAX_ID`` becomes ``MAX_ID + 1``, found nowhere (404)."""

    regex = r"\d+"

    def to_python(self, value: str) -> int:
        return MAX_ID + 1 if len(value) > 10 else min(int(value), MAX_ID + 1)

    def to_url(self, value: Any) -> str:
        return str(int(value))


def log_token(secret: str, path: str) -> str:
    """The ``token=`` of one log URL: good for that log only, derived from the cluster's token."""
    return hmac.new(secret.encode(), path.encode(), hashlib.sha256).hexdigest()[:40]


def error(status: int, code: str, message: str) -> Response:
    response = jsonify({"code": code, "message": message})
    response.status_code = status
    return response


def authorised() -> Response | None:
    """token.js ``check``: ``Bearer <token>`` (any case), or ``Basic`` user:token as an application token."""
    header = request.headers.get("Authorization")
    if not header and portal.has_session_cookie():  # the portal's pages: session cookie, CSRF-checked
        return portal.authorise_session(portal_write=request.endpoint in PORTAL_WRITES)
    if not header:
        return error(401, "UnauthorizedUserError",
                     "Guest is not allowed to do this operation (send the local cluster's token: "
                     "`paijob -c local ...` does; it is in the state dir).")
    scheme, _, credentials = header.partition(" ")
    user = current_app.config["user"]
    secret = current_app.config["token"].encode()
    if scheme.lower() == "basic":
        try:
            name, _, credentials = base64.b64decode(credentials, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            name = ""
        if name != user:
            credentials = ""
    elif scheme.lower() != "bearer":
        credentials = ""
    if not credentials or not hmac.compare_digest(credentials.encode(), secret):
        return error(401, "UnauthorizedUserError", "Your token is invalid.")
    g.user = user
    return None


def find_job(job_id: str) -> dict[str, Any] | Response:
    """The stored job ``user~name`` of the app's cluster, or OpenPAI's 404 for it."""
    cluster = current_app.config["cluster"]
    user, _, name = job_id.partition("~")
    job: dict[str, Any] | None = cluster.store.job(user, name) if name else None
    if job is None:
        return error(404, "NoJobError", f"Job {job_id} is not found.")
    return job
