"""The local cluster's REST server: OpenPAI's v2 job API on 127.0.0.1, built on Flask.

Mounted under ``/rest-server/api/v2`` like a real cluster behind its gateway,
with the swagger's paths, status codes and JSON shapes for: ``/info``,
``/authn/basic/login``, ``/jobs`` (POST text/yaml -> 202, GET list),
``/jobs/{user}~{job}`` (+ ``/attempts/{a}``, ``/config``, ``/executionType``),
task status and task logs under ``/jobs/{user}~{job}/attempts/...``, tags and
events, and the few calls OpenPAI's web portal makes on every page (the current
user, the one virtual cluster ``default``, the storages: ``routes.storages``). Log contents
are served under ``/log-manager/`` (range requests supported) to URLs that carry
their own ``token=`` (as the log manager's do), so a browser or an SDK script
reads them without the API's bearer token.

What the express app of rest-server (``src/config/express.js``) does before any
route, this app does too: CORS for every origin (the ``cors`` middleware's
defaults) and a 100 kB limit on request bodies, checked before authentication
(by the HTTP server, ``serving``, before it reads the body).

The routes live in :mod:`paijob.local.routes`, one blueprint per resource; this
module assembles them into the app and serves it. Run it as a background service
with ``paijob local up`` (see ``daemon``), or in-process with ``LocalServer`` (tests).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from flask import Blueprint, Flask, Response, g, jsonify, request

from paijob.local import faults, serving, settings
from paijob.local.cluster import LocalCluster
from paijob.local.daemon import local_user
from paijob.local.portal import web as portal
from paijob.local.routes import cluster as cluster_routes
from paijob.local.routes import jobs, logs, storages, tasks, users
from paijob.local.routes.shared import API, BoundedIntConverter, authorised, error

log = logging.getLogger(__name__)

# body-parser's default limit, which rest-server's express.js keeps for urlencoded, JSON and text bodies
BODY_LIMIT = 100 * 1024
# express.js's ``cors()``: every origin, these methods, the preflight's own headers reflected
CORS_METHODS = "GET,HEAD,PUT,PATCH,POST,DELETE"
# the API's two routes a caller reaches without a token
PUBLIC = frozenset({"api.cluster.info", "api.users.login"})


def too_large() -> Response:
    response = jsonify(serving.TOO_LARGE)
    response.status_code = 413
    response.headers["Connection"] = "close"  # the unread body is not drained
    return response


# --------------------------------------------------------------------------- app


def create_app(cluster: LocalCluster, token: str, user: str | None = None) -> Flask:
    """The app: express.js's middlewares, the routes (one blueprint per resource, ``paijob.local.routes``),
    the portal, and OpenPAI's JSON errors for what no route answers."""
    app = Flask("paijob.local")
    app.config["cluster"] = cluster
    app.config["token"] = token
    app.config["user"] = user or local_user()
    app.config["MAX_CONTENT_LENGTH"] = BODY_LIMIT  # serving refuses it first; this guards the app on its own
    app.url_map.converters["n"] = BoundedIntConverter
    api = Blueprint("api", __name__, url_prefix=API)

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
        if g.get("user") is not None:  # the token or a portal session: its connection is not evicted (serving)
            serving.trust(request.environ)
        return response

    @api.before_request
    def _auth() -> Response | None:
        if request.endpoint in PUBLIC:
            return None
        return authorised()

    api.register_blueprint(cluster_routes.blueprint(cluster))
    api.register_blueprint(users.blueprint())
    api.register_blueprint(jobs.blueprint(cluster))
    api.register_blueprint(tasks.blueprint(cluster))
    api.register_blueprint(storages.blueprint())
    app.register_blueprint(api)
    app.register_blueprint(logs.blueprint(cluster))
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

    parser = argparse.ArgumentParser(prog="python -m paijob.local.server", allow_abbrev=False)
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
