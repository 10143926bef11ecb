"""``/jobs``: submit and list jobs; a job's detail, attempts, config, executionType (stop), tags and events."""

from __future__ import annotations

import json

from flask import Blueprint, Response, g, jsonify, request

from paijob.local import listing, storage
from paijob.local.cluster import CannotHost, LocalCluster
from paijob.local.routes.body import json_body
from paijob.local.routes.shared import error, find_job
from paijob.local.store import JobExists
from paijob.local.views import doctors_marks, job_config, job_detail, job_summary
from paijob.openpai import rest
from paijob.openpai.jsyaml import YamlError, load_job
from paijob.openpai.markers import TemplateError, role_entrypoint
from paijob.openpai.model import Job
from paijob.openpai.storages import unknown_storages


def validate(text: str) -> tuple[Job | None, list[str]]:
    """A submitted job's model and its problems (empty when fine), by the same checks as `paijob validate`.

    The text is read (YAML) and parsed into the model once, here; the job's
    runner and the views use that model. A YAML error raises ``YamlError``.
    """
    from paijob.validate.report import validate_loaded

    # the server's own checks: a role name OpenPAI v1.6+ cannot run is accepted, as rest-server does, and
    # fails at start (processes.py), unless the cluster runs as an older one; a job whose storage list does
    # not mount its output route is accepted too, and loses its output folder as on OpenPAI
    report = validate_loaded(load_job(text, "job"), "job", len(text.encode("utf-8", "surrogatepass")),
                             openpai_before_1_6=True, client=False)
    return report.model, [p.format("job") for p in report.errors]


def accepted(message: str) -> Response:
    response = jsonify({"status": 202, "message": message})
    response.status_code = 202
    return response


def blueprint(cluster: LocalCluster) -> Blueprint:
    api = Blueprint("jobs", __name__)

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
        missing = unknown_storages(job.raw, storage.names())
        if missing:  # rest-server's submit (k8s.js put): the first storage that is not the user's
            return error(404, "NoStorageError", f"Storage {missing[0]} is not found.")
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
        data = [{**job_summary(row, tags.get((row["username"], row["name"]))), **doctors_marks(cluster, row)}
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
        body = json_body()
        value = body.get("value") if isinstance(body, dict) else None
        if value == "STOP" and not cluster.stop(job["username"], job["name"]):
            # rest-server's answer to stopping a job that ended (its state and executionType stay)
            return error(500, "UnknownError", "Unexpected end of JSON input")
        if value not in ("START", "STOP"):
            return error(400, "InvalidParametersError", 'executionType value must be "START" or "STOP".')
        return accepted(f"Execute job {job_id} successfully.")

    @api.route("/jobs/<job_id>/tag", methods=["PUT", "DELETE"])
    def tag(job_id: str) -> Response:
        body = json_body()
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

    return api
