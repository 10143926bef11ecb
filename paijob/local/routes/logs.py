"""The log manager: a task's log files under ``/log-manager/``, range requests supported.

A URL that carries its own ``token=`` (as ``tasks`` hands them out) is read without the
API's bearer token, so a browser or an SDK script reads a log from its link alone.
"""

from __future__ import annotations

import hmac
from pathlib import Path

from flask import Blueprint, Response, current_app, request, send_file

from paijob.local import layout
from paijob.local.cluster import LocalCluster
from paijob.local.prune import pruned_note
from paijob.local.routes.shared import LOGS, authorised, error, find_job, log_token
from paijob.local.views import role_names

TAIL_BYTES = 16 * 1024


def blueprint(cluster: LocalCluster) -> Blueprint:
    logs = Blueprint("logs", __name__, url_prefix=LOGS)

    @logs.before_request
    def _log_auth() -> Response | None:
        given = request.args.get("token", "")
        if given and hmac.compare_digest(given, log_token(current_app.config["token"], request.path)):
            return None
        return authorised()

    def log_file(job_id: str, attempt: int, role: str, index: int, task_attempt: int,
                 file_name: str) -> Path | Response | None:
        """A task's log file inside the state dir's logs/ (None when there is none), or the job's 404."""
        job = find_job(job_id)
        if isinstance(job, Response):
            return job
        path = cluster.log_dir(job_id, attempt, role_names(cluster.models.of(job)).get(role, ""), index,
                               task_attempt) / file_name
        inside = layout.logs(cluster.state_dir).resolve() in path.resolve().parents
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

    return logs
