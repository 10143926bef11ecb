"""The portal's Flask side: its pages, the code-for-cookie login, and the cookie check for the REST API.

The pages are static files; everything they show comes from the REST API
(``/rest-server/api/v2``), which accepts the session cookie as well as the
bearer token through ``authorise_session``, called by the server's auth check.

The cookie grants what the portal does and nothing more: it reads, and it
stops a job (the server names that one write). Anything else, a submit above
all (a job runs commands as the cluster's user), needs the bearer token, so a
cookie that leaks (127.0.0.1 cookies reach every port, README) cannot run code.
A request with the cookie is refused unless the browser says it comes from the
portal itself (``Sec-Fetch-Site``, ``Origin`` compared with the address the
server is bound to, never with the request's own ``Host``, which the sender
chooses), and a write also needs the ``X-Paijob-Portal`` header, which a
cross-site form or image cannot send: SameSite=Strict alone does not cover
another port of 127.0.0.1, which browsers count as the same site.
"""

from __future__ import annotations

import hmac
from pathlib import Path

from flask import Blueprint, Flask, Response, current_app, g, jsonify, request, send_from_directory

from paijob.local.portal.sessions import (
    CODE_PATH,
    CODE_TTL,
    CSRF_HEADER,
    SESSION_PATH,
    SESSION_TTL,
    Sessions,
)
from paijob.local.routes.body import json_body

STATIC = Path(__file__).with_name("static")
EXTENSION = "paijob.portal"
ORIGIN = "PORTAL_ORIGIN"  # app.config key: the server's own http://host:port, set once it is bound
SAFE_METHODS = ("GET", "HEAD")
# Scripts only from this server's files: no inline script, no eval, nothing from elsewhere.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _error(status: int, code: str, message: str) -> Response:
    response = jsonify({"code": code, "message": message})
    response.status_code = status
    return response


def cookie_name() -> str:
    """One cookie per server port: browsers share cookies across the ports of 127.0.0.1."""
    return f"paijob_portal_{request.environ.get('SERVER_PORT', '')}"


def _sessions() -> Sessions:
    sessions: Sessions = current_app.extensions[EXTENSION]
    return sessions


def _from_this_portal() -> bool:
    """Did the browser send this from a page of this very origin (or a typed address)?"""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("Origin")
    if origin is None:
        return request.method in SAFE_METHODS  # browsers always send Origin on writes
    own = current_app.config.get(ORIGIN)  # None: not served from a bound socket, no origin matches
    return own is not None and origin == own


def _csrf_problem() -> Response | None:
    if not _from_this_portal():
        return _error(403, "ForbiddenUserError",
                      "Cross-site request refused: the portal session only works from the portal's own pages.")
    if request.method not in SAFE_METHODS and request.headers.get(CSRF_HEADER) != "1":
        return _error(403, "ForbiddenUserError",
                      f"A write with the portal session needs the {CSRF_HEADER} header (the portal sends it).")
    return None


def has_session_cookie() -> bool:
    return cookie_name() in request.cookies


def authorise_session(portal_write: bool) -> Response | None:
    """The server's auth check for a request with the session cookie (and no bearer token):
    None when the session is live and the request comes from the portal (``g.user`` set), else
    the error to send. ``portal_write``: the request is one of the writes the portal makes (a stop);
    any other write is refused whatever the session."""
    if request.method not in SAFE_METHODS and not portal_write:
        return _error(403, "ForbiddenUserError",
                      f"The portal session only reads jobs and stops them: {request.method} {request.path} "
                      "needs the local cluster's token (`paijob ... -c local` sends it).")
    problem = _csrf_problem()
    if problem is not None:
        return problem
    if not _sessions().valid(request.cookies.get(cookie_name(), "")):
        return _error(401, "UnauthorizedUserError",
                      "The portal session expired or the local cluster restarted: run `paijob local open` again.")
    g.user = current_app.config["user"]
    g.portal_session = True
    return None


def blueprint() -> Blueprint:
    portal = Blueprint("portal", __name__, static_folder=str(STATIC), static_url_path="/static/portal")

    @portal.get("/")
    def jobs_page() -> Response:
        return send_from_directory(STATIC, "index.html", max_age=0)

    @portal.get("/job/<job_id>")
    def job_page(job_id: str) -> Response:
        return send_from_directory(STATIC, "job.html", max_age=0)

    @portal.post(CODE_PATH)
    def new_code() -> Response:
        header = request.headers.get("Authorization", "")
        given = header[7:] if header.startswith("Bearer ") else ""
        if not given or not hmac.compare_digest(given.encode(), current_app.config["token"].encode()):
            return _error(401, "UnauthorizedUserError",
                          "A portal code needs the local cluster's bearer token (`paijob local open` has it).")
        return jsonify({"code": _sessions().new_code(), "expiresIn": int(CODE_TTL)})

    @portal.post(SESSION_PATH)
    def log_in() -> Response:
        problem = _csrf_problem()
        if problem is not None:
            return problem
        body = json_body()
        code = body.get("code") if isinstance(body, dict) else None
        session = _sessions().redeem(code) if isinstance(code, str) else None
        if session is None:
            return _error(401, "UnauthorizedUserError",
                          "This link's code was used already or expired: run `paijob local open` for a new one.")
        response = jsonify({"user": current_app.config["user"]})
        response.set_cookie(cookie_name(), session, max_age=int(SESSION_TTL), path="/", httponly=True,
                            samesite="Strict")
        return response

    @portal.delete(SESSION_PATH)
    def log_out() -> Response:
        problem = _csrf_problem()
        if problem is not None:
            return problem
        _sessions().end(request.cookies.get(cookie_name(), ""))
        response = Response(status=204)
        response.delete_cookie(cookie_name(), path="/", httponly=True, samesite="Strict")
        return response

    @portal.after_request
    def page_headers(response: Response) -> Response:
        for name, value in _PAGE_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    return portal


def install(app: Flask) -> None:
    """Serve the portal from ``app`` (its sessions live as long as the app)."""
    app.extensions[EXTENSION] = Sessions()
    app.config.setdefault(ORIGIN, None)
    app.register_blueprint(blueprint())
