"""A task's attempts and the locations of its logs, under ``/jobs/{user}~{job}/attempts/...``.

The log locations are the log manager's URLs (:mod:`paijob.local.routes.logs`), each with its own ``token=``.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from paijob.local.cluster import LocalCluster
from paijob.local.routes.shared import LOGS, error, find_job, log_token
from paijob.local.views import role_names, task_attempts


def blueprint(cluster: LocalCluster) -> Blueprint:
    api = Blueprint("tasks", __name__)

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

    return api
