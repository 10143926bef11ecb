"""The local cluster's REST server: OpenPAI's v2 job API on 127.0.0.1, built on Flask.

Mounted under ``/rest-server/api/v2`` like a real cluster behind its gateway,
with the swagger's paths, status codes and JSON shapes for: ``/info``,
``/authn/basic/login``, ``/jobs`` (POST text/yaml -> 202, GET list),
``/jobs/{user}~{job}`` (+ ``/attempts/{a}``, ``/config``, ``/executionType``),
task status and task logs under ``/jobs/{user}~{job}/attempts/...``, tags and
events, and the few calls OpenPAI's web portal makes on every page (the current
user, the one virtual cluster ``default``, the storages: ``storage_routes``). Log contents
are served under ``/log-manager/`` (range requests supported) to URLs that carry
their own ``token=`` (as the log manager's do), so a browser or an SDK script
reads them without the API's bearer token.

What the express app of rest-server (``src/config/express.js``) does before any
route, this app does too: CORS for every origin (the ``cors`` middleware's
defaults) and a 100 kB limit on request bodies, checked before authentication
(by the HTTP server, ``serving``, before it reads the body).

Run it as a background service with ``paijob local up`` (see ``daemon``), or
in-process with ``LocalServer`` (tests).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from flask import Blueprint, Flask, Response, current_app, g, jsonify, request, send_file
from werkzeug.routing import BaseConverter

from paijob import __version__
from paijob.local import faults, listing, serving, settings, storage_routes
from paijob.local.daemon import local_user
from paijob.local.engine import CannotHost, LocalCluster
from paijob.local.portal import web as portal
from paijob.local.prune import pruned_note
from paijob.local.store import JobExists
from paijob.local.views import (
    job_config,
    job_detail,
    job_summary,
    role_names,
    task_attempts,
    vc_status,
)
from paijob.openpai import rest
from paijob.openpai.jsyaml import YamlError, load_job
from paijob.openpai.markers import TemplateError, role_entrypoint
from paijob.openpai.model import Job

log = logging.getLogger(__name__)

API = "/rest-server/api/v2"
LOGS = "/log-manager/api/v1/logs"
TAIL_BYTES = 16 * 1024
# body-parser's default limit, which rest-server's express.js keeps for urlencoded, JSON and text bodies
BODY_LIMIT = 100 * 1024
# express.js's ``cors()``: every origin, these methods, the preflight's own headers reflected
CORS_METHODS = "GET,HEAD,PUT,PATCH,POST,DELETE"
# ids in paths are stored as SQLite integers; anything beyond is no attempt or task of any job
MAX_ID = 2**31 - 1
# the one write the portal's pages make (the stop button): the only write its session cookie may do
PORTAL_WRITES = frozenset({"api.execution_type"})


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


# --------------------------------------------------------------------------- validation


def validate(text: str) -> tuple[Job | None, list[str]]:
    """A submitted job's model and its problems (empty when fine), by the same checks as `paijob validate`.

    The text is read (YAML) and parsed into the model once, here; the job's
    runner and the views use that model. A YAML error raises ``YamlError``.
    """
    from paijob.validate import verdict

    # the server's own checks: a role name OpenPAI v1.6+ cannot run is accepted, as rest-server does, and
    # fails at start (runner.py), unless the cluster runs as an older one
    report = verdict.validate_loaded(load_job(text, "job"), "job", len(text.encode("utf-8", "surrogatepass")),
                                     openpai_before_1_6=True)
    return report.model, [p.format("job") for p in report.errors]


# --------------------------------------------------------------------------- app


def create_app(cluster: LocalCluster, token: str, user: str | None = None) -> Flask:
    app = Flask("paijob.local")
    app.config["cluster"] = cluster
    app.config["token"] = token
    app.config["user"] = user or local_user()
    app.config["MAX_CONTENT_LENGTH"] = BODY_LIMIT  # serving refuses it first; this guards the app on its own
    app.url_map.converters["n"] = BoundedIntConverter
    api = Blueprint("api", __name__, url_prefix=API)
    logs = Blueprint("logs", __name__, url_prefix=LOGS)

    @app.before_request
    def _before_any_route() -> Response | None:
        """express.js's middlewares, in its order: ``cors()`` ends every OPTIONS (204), then the body parsers
        refuse a body over their limit (413) before a route, and so authentication, sees the request."""
        if request.method == "OPTIONS":
            response = Response(status=204)
            response.headers["Access-Control-Allow-Methods"] = CORS_METHODS
            asked = request.headers.get("Access-Control-Request-Headers")
            if asked:
                response.headers["Access-Control-Allow-Headers"] = asked
            response.headers["Vary"] = "Access-Control-Request-Headers"
            response.headers["Content-Length"] = "0"
            return response
        if (request.content_length or 0) > BODY_LIMIT:
            return too_large()
        return None

    @app.after_request
    def _cors(response: Response) -> Response:
        response.headers["Access-Control-Allow-Origin"] = "*"
        # a log or a JSON answer holds what a job printed: never let a browser sniff it into HTML
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    def too_large() -> Response:
        response = jsonify(serving.TOO_LARGE)
        response.status_code = 413
        response.headers["Connection"] = "close"  # the unread body is not drained
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

    @api.before_request
    def _auth() -> Response | None:
        if request.endpoint in ("api.info", "api.login"):
            return None
        return authorised()

    @logs.before_request
    def _log_auth() -> Response | None:
        given = request.args.get("token", "")
        if given and hmac.compare_digest(given, log_token(current_app.config["token"], request.path)):
            return None
        return authorised()

    def find_job(job_id: str) -> dict[str, Any] | Response:
        user, _, name = job_id.partition("~")
        job = cluster.store.job(user, name) if name else None
        if job is None:
            return error(404, "NoJobError", f"Job {job_id} is not found.")
        return job

    @api.get("/info")
    def info() -> Response:
        # the swagger's launcherType is yarn or k8s: the local cluster answers like a k8s one
        return jsonify({"name": f"paijob local cluster {__version__}", "version": settings.openpai_version(), "launcherType": "k8s",
                        "authnMethod": "basic", "virtualClusters": [listing.VIRTUAL_CLUSTER]})

    @api.post("/authn/basic/login")
    def login() -> Response:
        form = request.form if request.form else (request.get_json(silent=True) or {})
        username, password = form.get("username"), form.get("password")
        if not username or not password:
            return error(400, "InvalidParametersError", "username and password are required.")
        if username != current_app.config["user"]:
            return error(400, "NoUserError", f"User {username} is not found.")
        if not hmac.compare_digest(str(password).encode(), current_app.config["token"].encode()):
            return error(400, "IncorrectPasswordError",
                         "Password is incorrect (the local cluster's password is its token).")
        return jsonify({"token": current_app.config["token"], "user": username, "admin": True})

    @api.post("/jobs")
    def submit() -> Response:
        text = request.get_data(as_text=True)
        try:
            job, problems = validate(text)
        except YamlError as problem:
            return error(400, "InvalidProtocolError", f"Job protocol is not valid YAML: {problem}")
        if problems or job is None:
            return error(400, "InvalidProtocolError",
                         "Job protocol is invalid:\n" + "\n".join(f"- {p}" for p in problems))
        try:
            for role in job.roles:
                role_entrypoint(job.raw, role.name)  # the rest-server renders commands before it accepts the job
        except TemplateError as problem:
            return error(400, "InvalidProtocolError", str(problem))
        name = job.name
        try:
            cluster.submit(g.user, name, job, text)
        except JobExists:
            return error(409, "ConflictJobError", f"Job name {name} already exists.")
        except CannotHost as refused:  # OpenPAI's scheduler would leave it waiting forever
            return error(400, "InvalidParametersError", f"Job {name} can never run on this machine:\n"
                         + "\n".join(f"- {line}" for line in refused.lines))
        return accepted(f"Update job {name} for user {g.user} successfully.")

    @api.get("/jobs")
    def list_jobs() -> Response:
        try:
            query = listing.parse(request.args)
        except listing.ListQueryError as problem:
            return error(400, "InvalidParametersError", str(problem))
        tags = cluster.store.all_tags()
        rows = [row for row in cluster.store.jobs() if query.keep(row, tags.get((row["username"], row["name"]), []))]
        rows = listing.sort(rows, query.order)
        data = [job_summary(row, tags.get((row["username"], row["name"])))
                for row in rows[query.offset:query.offset + query.limit]]
        if query.with_total:
            return jsonify({"totalCount": len(rows), "data": data})
        return jsonify(data)

    @api.get("/jobs/<job_id>")
    def get_job(job_id: str) -> Response:
        job = find_job(job_id)
        if isinstance(job, Response):
            return job
        return jsonify(job_detail(cluster, job))

    @api.get("/jobs/<job_id>/attempts/<n:attempt>")
    def get_attempt(job_id: str, attempt: int) -> Response:
        job = find_job(job_id)
        if isinstance(job, Response):
            return job
        if cluster.store.attempt(job["username"], job["name"], attempt) is None:
            return error(404, "NoJobError", f"JobAttemptId {attempt} is not found in {job_id}.")
        return jsonify(job_detail(cluster, job, attempt))

    @api.get("/jobs/<job_id>/config")
    def get_config(job_id: str) -> Response:
        job = find_job(job_id)
        if isinstance(job, Response):
            return job
        # the stored config has its secrets masked; Express sends the object as JSON, labelled text/yaml
        config = job_config(cluster, job)
        return Response(json.dumps(config, default=str), content_type=rest.CONFIG_CONTENT_TYPE)

    @api.put("/jobs/<job_id>/executionType")
    def execution_type(job_id: str) -> Response:
        job = find_job(job_id)
        if isinstance(job, Response):
            return job
        body = request.get_json(silent=True)
        value = body.get("value") if isinstance(body, dict) else None
        if value == "STOP" and not cluster.stop(job["username"], job["name"]):
            # rest-server's answer to stopping a job that ended (its state and executionType stay)
            return error(500, "UnknownError", "Unexpected end of JSON input")
        if value not in ("START", "STOP"):
            return error(400, "InvalidParametersError", 'executionType value must be "START" or "STOP".')
        return accepted(f"Execute job {job_id} successfully.")

    @api.route("/jobs/<job_id>/tag", methods=["PUT", "DELETE"])
    def tag(job_id: str) -> Response:
        body = request.get_json(silent=True)
        value = body.get("value") if isinstance(body, dict) else None
        if not isinstance(value, str) or not value:
            return error(400, "InvalidParametersError", '"value" (the tag, a string) is required.')
        job = find_job(job_id)
        if isinstance(job, Response):
            return job
        if request.method == "PUT":
            cluster.store.add_tag(job["username"], job["name"], value)
            return jsonify({"status": 200, "message": f"Add tag {value} for job {job_id} successfully."})
        if not cluster.store.delete_tag(job["username"], job["name"], value):
            return error(404, "NoTagError", f"Tag {value} is not found for job {job_id}.")
        return jsonify({"status": 200, "message": f"Delete tag {value} from job {job_id} successfully."})

    @api.get("/jobs/<job_id>/events")
    def events(job_id: str) -> Response:
        job = find_job(job_id)
        if isinstance(job, Response):
            return job
        # kubernetes events (scheduling, image pulls) do not exist here: upstream's answer for a job with none
        return jsonify({"totalCount": 0, "data": []})

    @api.get("/users/<name>")
    def get_user(name: str) -> Response:
        if name != g.user:
            return error(404, "NoUserError", f"User {name} is not found.")
        return jsonify({"username": name, "grouplist": ["default", "admingroup"], "email": "",
                        "extension": {"virtualCluster": [listing.VIRTUAL_CLUSTER]}, "admin": True,
                        "virtualCluster": [listing.VIRTUAL_CLUSTER], "storageConfig": []})

    @api.get("/virtual-clusters")
    def virtual_clusters() -> Response:
        return jsonify({listing.VIRTUAL_CLUSTER: vc_status(cluster)})

    @api.get("/virtual-clusters/<name>")
    def virtual_cluster(name: str) -> Response:
        if name != listing.VIRTUAL_CLUSTER:
            return error(404, "NoVirtualClusterError", f"Virtual cluster {name} is not found.")
        return jsonify(vc_status(cluster))

    def task_rows(job: dict[str, Any], attempt: int, role: str, index: int) -> list[dict[str, Any]]:
        """Attempts of a task, oldest first; ``role`` is the REST (converted) role name, as on OpenPAI."""
        name = role_names(cluster.models.of(job)).get(role)
        if name is None:
            return []
        return cluster.store.task_attempts(job["username"], job["name"], attempt, name, index)

    @api.get("/jobs/<job_id>/attempts/<n:attempt>/taskRoles/<role>/taskIndex/<n:index>/attempts")
    def task_status(job_id: str, attempt: int, role: str, index: int) -> Response:
        job = find_job(job_id)
        if isinstance(job, Response):
            return job
        if role not in role_names(cluster.models.of(job)):  # task.js: frameworkcontroller finds no such task role
            return error(404, "NoJobError", f"Task role {role} is not found in job {job_id}.")
        rows = task_rows(job, attempt, role, index)
        if not rows:
            return error(404, "NoTaskError", f"Task {role}/{index} of attempt {attempt} is not found.")
        return jsonify(task_attempts(job, attempt, role, index, rows))

    @api.get("/jobs/<job_id>/attempts/<n:attempt>/taskRoles/<role>/taskIndex/<n:index>"
             "/attempts/<n:task_attempt>/logs")
    def task_logs(job_id: str, attempt: int, role: str, index: int, task_attempt: int) -> Response:
        job = find_job(job_id)
        if isinstance(job, Response):
            return job
        if not any(r["task_attempt"] == task_attempt for r in task_rows(job, attempt, role, index)):
            return error(404, "NoTaskLogError", "Log of task is not found.")
        # log.js: the log manager's URLs carry their own token; ``tail-mode`` (not the SDK's tailMode) is read
        base = f"{LOGS}/{job_id}/{attempt}/{role}/{index}/{task_attempt}"
        tail = "&tail-mode=true" if request.args.get("tail-mode") == "true" else ""
        secret = current_app.config["token"]
        return jsonify({"locations": [
            {"name": name,
             "uri": f"{request.host_url.rstrip('/')}{base}/{name}?token={log_token(secret, f'{base}/{name}')}{tail}"}
            for name in ("stdout", "stderr", "all")]})

    def log_file(job_id: str, attempt: int, role: str, index: int, task_attempt: int,
                 file_name: str) -> Path | Response | None:
        """A task's log file inside the state dir's logs/ (None when there is none), or the job's 404."""
        job = find_job(job_id)
        if isinstance(job, Response):
            return job
        path = cluster.log_dir(job_id, attempt, role_names(cluster.models.of(job)).get(role, ""), index,
                               task_attempt) / file_name
        inside = (cluster.state_dir / "logs").resolve() in path.resolve().parents
        return path if inside and path.is_file() else None

    @logs.get("/<job_id>/<n:attempt>/<role>/<n:index>/<n:task_attempt>/<any(stdout,stderr,all):name>")
    def log_content(job_id: str, attempt: int, role: str, index: int, task_attempt: int, name: str) -> Response:
        path = log_file(job_id, attempt, role, index, task_attempt, name)
        if isinstance(path, Response):
            return path
        if path is None:
            pruned = pruned_note(cluster.state_dir, job_id)  # the code stays OpenPAI's; the message says why
            return error(404, "NoTaskLogError", f"Log of task is not found: {pruned}." if pruned
                         else "Log of task is not found.")
        if request.args.get("tail-mode") == "true":
            with path.open("rb") as log:  # the tail only: a log can be larger than memory
                log.seek(max(0, path.stat().st_size - TAIL_BYTES))
                return Response(log.read(TAIL_BYTES), mimetype="text/plain")
        return send_file(path, mimetype="text/plain", conditional=True, max_age=0, etag=False)

    @logs.get("/<job_id>/<n:attempt>/<role>/<n:index>/<n:task_attempt>/<any(stdout,stderr,all):name>.times")
    def log_times(job_id: str, attempt: int, role: str, index: int, task_attempt: int, name: str) -> Response:
        """paijob's own (not OpenPAI's): ``OFFSET UNIXTIME`` lines, when each chunk of the log was written."""
        path = log_file(job_id, attempt, role, index, task_attempt, f"{name}.times")
        if isinstance(path, Response):
            return path
        if path is None:
            return error(404, "NoTaskLogError", "Log times of task are not found.")
        return send_file(path, mimetype="text/plain", conditional=True, max_age=0, etag=False)

    def accepted(message: str) -> Response:
        response = jsonify({"status": 202, "message": message})
        response.status_code = 202
        return response

    api.register_blueprint(storage_routes.blueprint())
    app.register_blueprint(api)
    app.register_blueprint(logs)
    portal.install(app)

    @app.errorhandler(404)
    def not_found(_: Exception) -> Response:
        # express.js's catch-all; what the local cluster cannot do (users, groups, tokens, ssh, ...) ends here
        return error(404, "NoApiError", f"API {request.full_path.rstrip('?')} is not found.")

    @app.errorhandler(413)
    def body_too_large(_: Exception) -> Response:
        return too_large()

    @app.errorhandler(405)
    def not_allowed(_: Exception) -> Response:
        return error(405, "NoApiError", f"{request.method} is not allowed on {request.path}.")

    @app.errorhandler(500)
    def internal(problem: Exception) -> Response:
        cause = getattr(problem, "original_exception", None)
        if faults.is_disk_full(cause):  # the job store or a folder of the state dir found no room
            assert cause is not None
            return error(500, "UnknownError", f"local cluster error: {faults.reason(cause)}; free some space")
        return error(500, "UnknownError", f"local cluster error: {problem}")

    return app


# --------------------------------------------------------------------------- serving


class LocalServer:
    """The local cluster served on 127.0.0.1 from a thread (tests) or the main thread (service)."""

    def __init__(self, state_dir: Path, token: str, *, port: int = 0, host: str = "127.0.0.1",
                 **limits: Any) -> None:
        """``limits``: ``serving.BoundedServer``'s timeouts and thread count, for tests that wait them out."""
        logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # a busy pool queues; no line per request
        settings.check()  # before any job runs: a runner must not meet a bad setting mid-stop
        self.cluster = LocalCluster(state_dir)
        self.token = token
        self.app = create_app(self.cluster, token)
        self.server = serving.BoundedServer(self.app, host=host, port=port, body_limit=BODY_LIMIT, **limits)
        self.port = self.server.port
        self.url = f"http://{host}:{self.port}"
        self.app.config[portal.ORIGIN] = self.url  # the portal's pages come from here, whatever Host says
        self._thread: threading.Thread | None = None

    def start(self) -> LocalServer:
        """Serve from a thread of its own; once (``with LocalServer(...).start()`` starts it once).

        A second I/O loop over the same sockets would race the first for every read: one reads a
        request, the other meets EAGAIN and closes the connection under it."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.server.serve_forever, name="paijob-local", daemon=True)
            self._thread.start()
        return self

    def stop(self, reason: str = "the local cluster was shut down") -> None:
        self.cluster.shutdown(reason)
        self.server.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.server.server_close()
        self.cluster.store.close()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the background service started by ``paijob local up``."""
    from paijob.local import daemon

    parser = argparse.ArgumentParser(prog="python -m paijob.local.server")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        settings.check()
    except settings.LocalSettingError as problem:
        print(f"paijob local cluster: {problem}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    token = daemon.read_token(args.state_dir)
    if token is None:
        print(f"no token in {args.state_dir}; start the server with `paijob local up`", file=sys.stderr)
        return 2
    server = LocalServer(args.state_dir, token, port=args.port)
    daemon.write_server_info(args.state_dir, {"pid": os.getpid(), "port": server.port, "url": server.url,
                                               "started": int(time.time())})
    stopper = threading.Thread(target=server.stop, name="paijob-local-stop", daemon=True)

    def on_signal(signum: int, _frame: object) -> None:
        if stopper.is_alive() or stopper.ident is not None:
            return
        log.info("signal %d: stopping running jobs and the server", signum)
        stopper.start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("paijob local cluster serving %s (state %s)", server.url, args.state_dir)
    try:
        server.server.serve_forever()
        if stopper.ident is not None:
            stopper.join(timeout=60)
    finally:
        daemon.clear_server_info(args.state_dir, os.getpid())
    return 0


if __name__ == "__main__":
    sys.exit(main())
