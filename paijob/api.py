"""paijob's Python API: the calls behind ``paijob run / submit / status / cp``.

Each function takes typed arguments (the dataclasses below), not argparse
namespaces, so the verbs do not import each other and a script can do what
the CLI does::

    from paijob import api

    job = api.prepare(api.JobRequest("ddp", sets=[("set", "instances=2")], workdir=".", cluster="local"))
    client = api.connect("local")
    job_id = api.submit(job, client)
    detail = api.wait(client, job_id)            # the final job detail (jobStatus.state ...)
    api.copy_output(f"{job_id}:summary.json", ".", cluster="local")

Errors a user can cause are ``PaijobError`` subclasses. Nothing here prints:
warnings and notes come back in ``PreparedJob``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import paijob
from paijob import project as project_config
from paijob.errors import PaijobError, ShadowedPackageError

if TYPE_CHECKING:
    from paijob.outputs import CopyReport
    from paijob.remote.client import PaiClient
    from paijob.remote.profiles import Cluster

if getattr(paijob, "__file__", None) is None:  # a namespace package: see ShadowedPackageError
    raise ShadowedPackageError(
        f"`import paijob` found the folder {', '.join(paijob.__path__)}, not the installed package "
        f"({Path(__file__).parent}): Python puts the current folder first on sys.path for `python -c`, "
        "`-m`, `-` and its prompt; start Python in another folder, or run `python -P` (Python 3.11+)"
    )

__all__ = ["JobRequest", "PreparedJob", "connect", "copy_output", "dry_run_text", "list_jobs", "output_location",
           "prepare", "resolve_cluster", "status", "stop", "submit", "wait"]


@dataclass
class JobRequest:
    """What to submit: a job file or template plus values, and how to ship it.

    ``job`` None means the project config's ``template`` (``paijob.yaml`` in
    the current folder); its ``values`` files come before ``values``.
    ``sets`` are ``("set" | "set-string", "key=value")`` in order.
    """

    job: str | None = None
    values: list[str] = field(default_factory=list)
    sets: list[tuple[str, str]] = field(default_factory=list)
    name: str | None = None
    unique_suffix: bool = False
    workdir: str | None = None
    force: bool = False
    skip_unreadable: bool = False
    cluster: str | None = None


@dataclass
class PreparedJob:
    """A checked job YAML ready to send, and what the user should be told about it."""

    text: str
    name: str
    source: str
    cluster: str | None
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def resolve_cluster(name: str | None = None, *, start_local: bool = True) -> Cluster:
    """The cluster profile ``name`` (None: the project's, else the configured default)."""
    from paijob.local import service
    from paijob.remote import profiles

    if name is None:
        name = project_config.load().cluster
    if name is None:
        env = profiles.from_environment()
        if env is not None:
            return env
        name = profiles.current_name()
    if name != profiles.LOCAL:
        return profiles.named(name)
    return service.local_cluster() if start_local else service.local_cluster_address()


def prepare(request: JobRequest, project: project_config.Project | None = None) -> PreparedJob:
    """Render (or read) the job, rename it, ship the workdir, and check the result."""
    from paijob.render import templating
    from paijob.render.job_name import rename
    from paijob.validate.verdict import require_valid

    project = project if project is not None else project_config.load()
    spec = request.job or project.template
    if not spec:
        raise PaijobError("no job given: name a job YAML or a template (see `paijob templates`), or run "
                          f"in a folder with a {project_config.FILENAME} (`paijob init` writes one)")
    values = [*project.values, *request.values] if not templating.is_job_file(spec) else list(request.values)
    namespace = argparse.Namespace(job=spec, values=values, sets=list(request.sets))
    result = templating.render_from_args(namespace)
    source = result.report.source
    warnings = [problem.format(source) for problem in result.report.warnings]
    cluster = request.cluster or project.cluster
    text, name = rename(result.text, request.name, request.unique_suffix)
    notes: list[str] = []
    workdir = request.workdir or _value_workdir(result.values) or project.workdir
    if workdir:
        text, shipped = ship_workdir(text, workdir, cluster, force=request.force,
                                     skip_unreadable=request.skip_unreadable)
        notes.extend(shipped)
    if request.name or workdir:
        require_valid(text, source)  # what changed must still be a valid job
    return PreparedJob(text, name, source, cluster, warnings, notes)


def _value_workdir(values: Any) -> str | None:
    found = values.get("workdir") if isinstance(values, dict) else None
    return str(found) if found else None


def ship_workdir(text: str, folder: str, cluster: str | None, *, force: bool = False,
                 skip_unreadable: bool = False) -> tuple[str, list[str]]:
    """The job text that starts every task in a snapshot of ``folder``, and lines saying what was (not) shipped."""
    from paijob import workdir

    target = resolve_cluster(cluster, start_local=False)
    snap = workdir.snapshot(folder, force=force, skip_unreadable=skip_unreadable)
    if target.is_local:
        from paijob.local import service

        return workdir.ship(text, snap, service.state_dir())
    return workdir.ship(text, snap, None)


def connect(cluster: str | None = None, *, timeout: float = 30.0, start_local: bool = True) -> PaiClient:
    """A REST client for ``cluster``; the local cluster is started when down unless ``start_local`` is false."""
    from paijob.remote.client import PaiClient

    resolved = resolve_cluster(cluster, start_local=start_local)
    return PaiClient(resolved.url, resolved.token, user=resolved.user, api_path=resolved.api_path,
                     read_timeout=timeout, cluster_name=resolved.name)


def submit(job: PreparedJob, client: PaiClient) -> str:
    """Send the job; returns its id ``user~name``."""
    return client.submit(job.text)


def dry_run_text(job: PreparedJob) -> str:
    """The request ``submit`` would send, with the token hidden."""
    cluster = resolve_cluster(job.cluster, start_local=False)
    target = "the local cluster" if cluster.is_local else cluster.name
    url = f"{cluster.url}/{cluster.api_path.strip('/')}/jobs"
    has_token = cluster.token or cluster.is_local
    auth = f"Bearer <token from {cluster.token_source}>" if has_token else "(no token)"
    body = job.text if job.text.endswith("\n") else job.text + "\n"
    return f"# dry run: would POST to {target}\n# POST {url}\n# Content-Type: text/yaml\n# Authorization: {auth}\n{body}"


def wait(client: PaiClient, job_id: str) -> dict[str, Any]:
    """Block until the job ends; returns its final detail."""
    return client.wait(job_id)


def status(client: PaiClient, job: str, attempt: int | None = None) -> dict[str, Any]:
    """The job detail (OpenPAI's ``GET /jobs/{user}~{name}``) of ``job`` (``NAME`` or ``USER~NAME``)."""
    return client.get_job(job, attempt=attempt)


def list_jobs(client: PaiClient, *, state: str | None = None, limit: int | None = 20,
              all_users: bool = False) -> list[dict[str, Any]]:
    """Jobs newest first (OpenPAI's ``GET /jobs`` entries), the client's user's unless ``all_users``."""
    return client.list_jobs(user=None if all_users else client.user, state=state, limit=limit)


def stop(client: PaiClient, job: str) -> str:
    """Ask the cluster to stop ``job``; returns its id ``user~name`` (``wait`` follows it to the end)."""
    job_id = client.job_id(job)
    client.stop(job_id)
    return job_id


def output_location(cluster_name: str, job_id: str) -> str | None:
    """Where the job's output folder (``PAIJOB_OUTPUT_DIR``) is, when paijob knows it (local cluster)."""
    if cluster_name != "local":
        return None
    from paijob.local import service
    from paijob.outputs import local_output_dir

    return str(local_output_dir(service.state_dir(), job_id))


def copy_output(source: str, dest: str | Path, cluster: str | None = None) -> CopyReport:
    """``paijob cp JOB:PATH DEST``: copy a file or folder out of a job's output folder (what landed where)."""
    from paijob import outputs
    from paijob.local import service

    job, path = outputs.split_source(source)
    target = resolve_cluster(cluster, start_local=False)
    if not target.is_local:
        raise outputs.OutputError(
            f"paijob cp reads the local cluster's job output folders; on cluster {target.name} a job's "
            "PAIJOB_OUTPUT_DIR is the outputDir you set (a path on a storage the job mounts): copy from "
            "that storage with its own tools")
    if "~" not in job:
        from paijob.local.service import local_user

        job = f"{local_user()}~{job}"
    root = outputs.local_output_dir(service.state_dir(), job)
    return outputs.copy_out(root, path, Path(dest), job)
