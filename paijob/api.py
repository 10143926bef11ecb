"""paijob's Python API: the calls behind ``paijob run / submit / status / cp``.

Each function takes typed arguments (the dataclasses below), not argparse
namespaces, so the verbs do not import each other and a script can do what
the CLI does::

    from paijob import api

    job = api.prepare(api.JobRequest("ddp", sets=[("set", "instances=2")], workdir=".", cluster="local"))
    print(api.dry_run(job).text())               # the request submit would send, token masked
    client = api.connect(job.target)             # the cluster prepare resolved: once per submit
    job_id = api.submit(job, client)             # sends api.dry_run's request, built for this client
    detail = api.wait(client, job_id)            # the final job detail (jobStatus.state ...)
    api.copy_output(f"{job_id}:summary.json", ".", cluster="local")

The verbs in ``paijob.commands`` are thin adapters over these calls (as
TorchX's CLI is over its runner): they parse options into the typed
arguments here and print what comes back. Nothing here imports argparse or
``paijob.commands``, and everything is imported on first use, so that
``import paijob.api`` stays cheap. Errors a user can cause are
``PaijobError`` subclasses. Nothing here prints: warnings and notes come back
in ``PreparedJob``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import paijob
from paijob.errors import PaijobError, ShadowedPackageError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from paijob import project as project_config
    from paijob.backends import Backend
    from paijob.copyout import CopyPlan, CopyReport
    from paijob.local.conveniences import PruneReport
    from paijob.remote.client import PaiClient
    from paijob.remote.log_follower import LogFollower
    from paijob.remote.profiles import Cluster
    from paijob.remote.request import HttpRequest
    from paijob.render.templates import TemplateRef
    from paijob.render.templating import RenderResult
    from paijob.render.values import SetArg
    from paijob.render.values_doc import ValueDoc
    from paijob.validate.report import ValidationReport
    from paijob.workdir import Snapshot

if getattr(paijob, "__file__", None) is None:  # a namespace package: see ShadowedPackageError
    raise ShadowedPackageError(
        f"`import paijob` found the folder {', '.join(paijob.__path__)}, not the installed package "
        f"({Path(__file__).parent}): Python puts the current folder first on sys.path for `python -c`, "
        "`-m`, `-` and its prompt; start Python in another folder, or run `python -P` (Python 3.11+)"
    )

__all__ = ["JobRequest", "LoginResult", "PaijobError", "PreparedJob", "add_cluster", "check_storages", "clusters", "connect",
           "copy_output", "list_output", "dry_run", "openpai_before_1_6", "openpai_before_1_6_setting", "unknown_version_note", "dry_run_text", "follow_logs", "human_duration", "human_size", "job_results", "JobResults", "list_jobs", "local_down", "local_status",
           "local_up", "login", "login_url", "open_in_browser", "output_location", "portal_link", "prepare", "terminal_text", "prune_local", "remove_cluster", "remove_local_job",
           "render", "resolve_cluster", "ship", "status", "stop", "StopResult", "submit", "template", "template_names",
           "template_values", "use_cluster", "validate", "wait", "write_text"]


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
    allow_unknown_values: bool = False  # values the template does not read: a warning instead of an error
    # the cluster is older than OpenPAI v1.6 (role names); None: the cluster's version when ``ask_cluster``
    # (``openpai_before_1_6``, which asks it), else the setting, else OpenPAI v1.6+
    openpai_before_1_6: bool | None = None
    ask_cluster: bool = False


@dataclass
class PreparedJob:
    """A checked job YAML ready to send, and what the user should be told about it."""

    text: str
    name: str
    source: str
    cluster: str | None
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    target: Cluster | None = None  # the cluster profile, resolved once (a local cluster's address, unstarted)
    snapshot: Snapshot | None = None  # the workdir in memory, when a local cluster must store it (``ship``)
    snapshot_path: Path | None = None  # where ``ship`` stores it for the local cluster (the job names it there)
    # ``text`` as the server reads it: read once by the render's validation, then kept in step with
    # every edit (name, workdir), so nothing reads the text again. ``read_as`` is the text it describes.
    document: Any = field(default=None, repr=False)
    read_as: str | None = field(default=None, repr=False)
    install_route: str | None = None  # how the tasks get paijob-runtime, as validate says it

    def sent_job(self) -> Any:
        """``document`` while it still describes ``text`` (None once a caller replaced the text)."""
        return self.document if self.read_as is self.text else None


def resolve_cluster(name: str | None = None, *, start_local: bool = True,
                    on_note: Callable[[str], None] | None = None) -> Cluster:
    """The cluster profile ``name`` (None: the project's, else the configured default).

    ``on_note`` hears what the user should be told (a local cluster started on the way).
    """
    from paijob import project as project_config
    from paijob.local import conveniences as local
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
    return local.cluster(on_note=on_note) if start_local else local.address()


def prepare(request: JobRequest, project: project_config.Project | None = None) -> PreparedJob:
    """Render (or read) the job, rename it, snapshot the workdir, and check the result. Writes nothing.

    The cluster (``request.cluster``, else the project's, else the default) is
    resolved here, once, without starting a local cluster (and, with ``request.ask_cluster`` and no rule
    given, asked its OpenPAI version for the role-name rule: :func:`openpai_before_1_6`): ``job.target`` is
    what ``dry_run`` and ``connect`` use. The workdir snapshot stays in memory
    (``job.snapshot``): a local cluster's copy is stored by :func:`ship`, which
    :func:`submit` calls, so ``--dry-run`` leaves every file as it was.
    """
    from paijob import project as project_config
    from paijob.render import templating
    from paijob.render.job_name import rename_job
    from paijob.validate.report import require_sendable

    project = project if project is not None else project_config.load()
    spec = request.job or project.template
    if not spec:
        raise PaijobError("no job given: name a job YAML or a template (see `paijob templates`), or run "
                          f"in a folder with a {project_config.FILENAME} (`paijob init` writes one)")
    values = [*project.values, *request.values] if not templating.is_job_file(spec) else list(request.values)
    cluster = request.cluster or project.cluster
    target = resolve_cluster(cluster, start_local=False)
    result = _render_for(target, request, spec, values)
    source = result.report.source
    warnings = [problem.format(source) for problem in result.report.warnings]
    renamed = rename_job(result.text, request.name, request.unique_suffix, result.report.job, result.report.lines)
    job = PreparedJob(renamed.text, renamed.name, source, cluster, warnings, [], target,
                      document=renamed.job, read_as=renamed.text, install_route=result.report.install_route)
    if request.ask_cluster:  # what submit would refuse, refused here: before the render's warnings are shown
        refuse_placeholder_images(renamed.job, source, target)
        check_storages(renamed.job, target, source)
    if job.install_route and _backend(target).node_key_in_secrets:
        _add_node_key(job)
    workdir = request.workdir or _value_workdir(result.values) or project.workdir
    if workdir:
        _attach_workdir(job, workdir, request, project, values)
    elif job.text is not result.text:
        require_sendable(job.text, source)  # a new name: checked as it was written; the size may have grown
    return job


def _add_node_key(job: PreparedJob) -> None:
    """A new node key among ``job``'s secrets, for a cluster whose jobs carry one (``paijob.render.node_key``)."""
    from paijob.render.node_key import new_key, with_node_key

    keyed = with_node_key(job.text, job.document, new_key(), job.source)
    job.text, job.document, job.read_as = keyed.text, keyed.job, keyed.text
    if keyed.note:
        job.notes.append(keyed.note)


def _attach_workdir(job: PreparedJob, workdir: str, request: JobRequest, project: project_config.Project,
                    values: Sequence[str]) -> None:
    """``workdir`` snapshotted into ``job``, leaving out the values files that hold secrets, and the job
    checked again (the commands the snapshot adds must leave a valid job). A workdir that the project
    chose (not ``--workdir``) must lie in the project."""
    from paijob import project as project_config
    from paijob.render.values import holds_secrets
    from paijob.validate.report import require_sendable

    if not request.workdir:
        project_config.check_workdir(project, workdir)  # a cloned project's choice stays in the project
    private = [value for value in values if holds_secrets(value)]
    _carry_workdir(job, workdir, force=request.force, skip_unreadable=request.skip_unreadable, private=private)
    require_sendable(job.text, job.source, job.document)


def _render_for(target: Cluster, request: JobRequest, spec: str, values: list[str]) -> RenderResult:
    """``request``'s job rendered and checked for ``target``. With ``ask_cluster`` and no rule given, the
    cluster is asked its version only for a job whose role names the rule is about (one a v1.6+
    init container cannot find): every other job renders once and costs the cluster nothing."""
    from paijob.openpai.names import role_name_breaks_init
    from paijob.render import templating
    from paijob.validate.report import JobValidationError

    before = request.openpai_before_1_6
    ask = before is None and request.ask_cluster
    result = templating.render(spec, values, request.sets, allow_unknown=request.allow_unknown_values,
                               openpai_before_1_6=True if ask else before, check=not ask)
    if not ask:
        return result
    model = result.report.model
    if model is not None and any(role_name_breaks_init(role.name) for role in model.roles) \
            and not openpai_before_1_6(target):
        return templating.render(spec, values, request.sets, allow_unknown=request.allow_unknown_values,
                                 openpai_before_1_6=False)
    if not result.report.ok:
        raise JobValidationError(result.report)
    return result


def _value_workdir(values: Any) -> str | None:
    found = values.get("workdir") if isinstance(values, dict) else None
    return str(found) if found else None


def _carry_workdir(job: PreparedJob, folder: str, *, force: bool, skip_unreadable: bool,
                   private: Sequence[str | Path]) -> None:
    """Snapshot ``folder`` into ``job``: its text starts every task in it, its notes say what travels.

    ``private``: the job's values files holding a ``secrets:`` map, never shipped (listed as left out)."""
    from paijob import workdir
    from paijob.remote import profiles

    snap = workdir.snapshot(folder, force=force, skip_unreadable=skip_unreadable, guarded=[profiles.config_path()],
                            private=[Path(value) for value in private])
    stored_at = _backend(job.target or job.cluster).snapshot_path(snap)
    if stored_at is not None:  # the cluster reads it from this machine: ship() writes it there
        job.snapshot, job.snapshot_path = snap, stored_at
    carried = workdir.carried(job.document, snap, stored_at)
    job.text, job.document, job.read_as = carried.text, carried.job, carried.text
    job.notes.extend(carried.notes)


def ship(job: PreparedJob) -> None:
    """What must exist before ``job`` is sent: a local cluster's copy of the workdir snapshot.

    :func:`submit` calls it; a caller that submits ``dry_run(job)``'s request itself calls it first.
    A real cluster needs nothing: the snapshot travels in the job text.
    """
    if job.snapshot is not None and job.snapshot_path is not None:
        from paijob.workdir import store_local

        store_local(job.snapshot, job.snapshot_path)


def _target(cluster: str | Cluster | None) -> Cluster:
    """``cluster`` when it is already resolved, else the profile it names (a local cluster unstarted)."""
    if cluster is None or isinstance(cluster, str):
        return resolve_cluster(cluster, start_local=False)
    return cluster


def _backend(cluster: str | Cluster | None) -> Backend:
    """What paijob does differently on ``cluster``'s kind (``paijob.backends``)."""
    from paijob.backends import backend_for

    return backend_for(_target(cluster))


def _backend_of(client: PaiClient) -> Backend:
    """The backend of a client's cluster: its profile, else (a cluster from ``PAI_CLUSTER_URL``, a client
    made by hand) the client's own address and user, without a token."""
    from paijob.backends import backend_for
    from paijob.remote import profiles

    try:
        return _backend(client.cluster_name)
    except PaijobError:
        api_path = client.api_base[len(client.cluster_url):] or "/"
        return backend_for(profiles.Cluster(client.cluster_name, client.cluster_url, client.user, None,
                                            api_path=api_path))


def connect(cluster: str | Cluster | None = None, *, timeout: float = 30.0, start_local: bool = True,
            on_note: Callable[[str], None] | None = None) -> PaiClient:
    """A REST client for ``cluster`` (a profile name, or the ``Cluster`` that ``prepare`` resolved).

    The local cluster is started when it is down, unless ``start_local`` is
    false: then a local cluster that is down is an error saying so (read-only
    verbs: a cluster that is down runs no job). ``on_note`` hears that it was started.
    """
    return _backend(cluster).client(timeout=timeout, start=start_local, on_note=on_note)


def openpai_before_1_6_setting() -> bool | None:
    """``PAIJOB_OPENPAI_BEFORE_1_6`` as the user set it (None: unset); a value other than 0 or 1 is refused."""
    from paijob.validate.report import before_v1_6_setting

    return before_v1_6_setting()


def openpai_before_1_6(cluster: str | Cluster | None = None, *, timeout: float = 10.0) -> bool | None:
    """Whether ``cluster`` (default: the project's, else the default one) runs OpenPAI older than v1.6, from
    its rest-server's version (``GET /api/v2/info``); None when it cannot tell.

    The local cluster is not asked: it behaves as OpenPAI v1.6+ unless its own setting says otherwise
    (None here). An unreachable or odd cluster is None too, once and without retries: the submit that
    follows reports the connection itself.
    """
    return _backend(cluster).before_1_6(timeout)


def unknown_version_note(cluster: str | Cluster | None = None) -> str:
    """When :func:`openpai_before_1_6` could not tell (None): the role-name rule paijob applied instead, and why."""
    return _backend(cluster).unknown_version()


def check_storages(job: Any, cluster: str | Cluster | None, source: str = "job") -> None:
    """Refuse, before the queue, a job that mounts a storage the user may not use on ``cluster``
    (OpenPAI's submit would answer ``NoStorageError``), naming the ones they may."""
    from paijob.common.storage_route import job_route
    from paijob.openpai.storages import job_storages, unknown_storages

    if not job_storages(job):
        return
    backend = _backend(cluster)
    name = backend.target.name
    storages = backend.storages()
    mine = storages.names
    unknown = unknown_storages(job, mine)
    yours = ", ".join(mine) if mine else "none: ask the cluster's admin for one"
    if unknown:
        raise PaijobError(f"{source}: storage '{unknown[0]}' is not one you may use on cluster {name} "
                          f"(yours: {yours}); set storage to one of them")
    route = job_route(job)
    if route is not None and storages.read_only(route.name):
        raise PaijobError(f"{source}: storage '{route.name}' is read-only on cluster {name} (rest-server "
                          f"mounts it read-only), so the job could not write its output folder there; set storage "
                          f"to one you may write to (yours: {yours}), or leave storage unset")


def dry_run(job: PreparedJob, cluster: str | Cluster | None = None) -> HttpRequest:
    """The request ``submit(job, ...)`` sends to ``cluster`` (default: the job's), token masked.

    Nothing is contacted and no local cluster is started: a local cluster that
    is down shows ``http://127.0.0.1:<port>``, the port it will get at start.
    """
    from paijob.remote.request import job_submission

    backend = _backend(cluster if cluster is not None else job.target or job.cluster)
    return job_submission(backend.target.api_base, job.text, token=backend.sends_token, job=job.sent_job())


def dry_run_text(job: PreparedJob) -> str:
    """``paijob submit --dry-run``'s output: ``dry_run(job).text()`` (the token masked)."""
    return dry_run(job).text()


def submit(job: PreparedJob | HttpRequest, client: PaiClient) -> str:
    """Ship and send the job, as the request ``dry_run`` shows, through ``client``; returns its id ``user~name``.

    A request from ``dry_run`` is sent as it is: :func:`ship` its job first.
    """
    from paijob.remote.request import HttpRequest

    if isinstance(job, HttpRequest):
        return client.submit(job)
    sent = job.sent_job()
    if sent is None:  # the caller replaced the text: read what will be sent
        from paijob.openpai.jsyaml import load_job

        sent = load_job(job.text, job.source).value
    refuse_placeholder_images(sent, job.source, job.target or client.cluster_name)
    ship(job)
    return client.submit(client.submission(job.text, sent))


def refuse_placeholder_images(loaded: Any, source: str, cluster: str | Cluster) -> None:
    """A real cluster cannot pull an image on a reserved example domain (``*.example.com``, ``*.invalid``):
    refuse before sending, with how to set the image (``validate`` and ``--dry-run`` only warn). The local
    cluster pulls no image: nothing is refused there.

    ``loaded``: the job as the server reads it (``PreparedJob.document``)."""
    from paijob.validate.rules import SET_IMAGE_HINT, placeholder_image

    backend = _backend(cluster)
    if not backend.pulls_images:
        return
    cluster_name = backend.target.name
    for item in loaded.get("prerequisites") or () if isinstance(loaded, dict) else ():
        uri = item.get("uri") if isinstance(item, dict) and item.get("type") == "dockerimage" else None
        host = placeholder_image(uri)
        if host:
            raise PaijobError(f"{source}: image '{uri}' is a placeholder ({host} is reserved for examples) that "
                              f"cluster {cluster_name} cannot pull; {SET_IMAGE_HINT}")


def wait(client: PaiClient, job_id: str, *, poll: float = 1.0,
         on_update: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Block until the job ends; returns its final detail. ``on_update`` sees every detail polled."""
    return client.wait(job_id, poll=poll, on_update=on_update)


def status(client: PaiClient, job: str, attempt: int | None = None) -> dict[str, Any]:
    """The job detail (OpenPAI's ``GET /jobs/{user}~{name}``) of ``job`` (``NAME`` or ``USER~NAME``)."""
    return client.get_job(job, attempt=attempt)


def list_jobs(client: PaiClient, *, state: str | None = None, limit: int | None = 20,
              all_users: bool = False) -> list[dict[str, Any]]:
    """Jobs newest first (OpenPAI's ``GET /jobs`` entries), the client's user's unless ``all_users``."""
    return client.list_jobs(user=None if all_users else client.user, state=state, limit=limit)


@dataclass(frozen=True)
class StopResult:
    """What ``stop`` did: ``already_ended`` is the final state of a job that had ended before the stop."""

    job_id: str
    already_ended: str | None = None


def stop(client: PaiClient, job: str) -> StopResult:
    """Ask the cluster to stop ``job`` (``wait`` follows it to the end).

    Stopping a job that has already ended is done, not an error (as ``kubectl delete`` of a finished
    pod): OpenPAI's rest-server answers it with an error (an HTTP 500 ``Unexpected end of JSON input``
    for a finished job), so any 4xx/5xx is followed by one read of the job, and a final state there
    makes the stop succeed. A job that does not exist stays an error (the read fails too).
    """
    from paijob.openpai.jobstate import is_terminal
    from paijob.remote.client import ClusterError

    job_id = client.job_id(job)
    try:
        client.stop(job_id)
    except ClusterError as error:
        if error.status is None or not 400 <= error.status < 600:
            raise
        try:
            state = client.get_job(job_id)["jobStatus"]["state"]
        except ClusterError:
            raise error from None
        if not is_terminal(state):
            raise
        return StopResult(job_id, state)
    return StopResult(job_id)


def stacks(client: PaiClient, job: str) -> tuple[str, int]:
    """Ask a local job's ``paijob-runtime`` for every rank's stack (SIGUSR1; the job goes on).

    Returns (job id, launchers signalled); the stacks appear in the job's logs. A job that has ended or not
    started, or whose tasks run no paijob-runtime, is an error saying so. A real OpenPAI cluster's tasks are
    out of reach: the ssh plugin is the way there (the error says how).
    """
    job_id = client.job_id(job)
    return job_id, _backend_of(client).stacks(client, job_id)


def output_location(cluster_name: str, job_id: str, job: Any = None) -> str | None:
    """Where the job's output folder (``PAIJOB_OUTPUT_DIR``) is, when paijob knows it: on the local cluster
    its own folder (or the job's folder on its storage); on a real one, for a job on the storage route, the
    storage, the folder on it, the path in its tasks and where this machine mounts it. ``job``: the job as
    sent, when the caller has it (else the cluster's stored copy is read); None for a job without a route."""
    try:  # where it cannot be told (a cluster from PAI_CLUSTER_URL, an unreadable config): not shown
        backend = _backend(cluster_name)
    except PaijobError:
        return None
    return backend.output_location(job_id, job)


@dataclass(frozen=True)
class JobResults:
    """What a job's output folder holds, as ``paijob status`` shows it: its files newest first (at most
    ``copyout.RESULTS_SHOWN``), how many files it holds (``more``: at least that many), or why there is no
    folder where paijob reads it (``missing``)."""

    folder: Path
    files: list[Any] = field(default_factory=list)
    count: int = 0
    more: bool = False
    missing: str | None = None


def job_results(client: PaiClient, job_id: str, document: Any = None) -> JobResults | None:
    """The results of ``job_id`` where this machine can read its output folder (the local cluster's, or a
    real cluster's storage where the profile mounts it); None where it cannot (``output_location`` says
    where the folder is). ``document``: the job as sent, when the caller has it."""
    from paijob import copyout

    backend = _backend_of(client)
    try:
        root, full = backend.output_root(job_id, document)
    except PaijobError:
        return None
    if not root.is_dir() or root.is_symlink():
        return JobResults(root, missing=backend.missing_output(full, document))
    found = copyout.newest(root)
    return JobResults(root, found.files, found.count, found.more)


def _output_folder(backend: Backend, job: str) -> tuple[Path, str]:
    """``backend``'s output folder of ``job`` and its full id; a folder that is not there is an error that
    says why (the job's state, its storage list), not "no such job"."""
    from paijob import copyout

    root, full = backend.output_root(job)
    if not os.path.lexists(root):
        raise copyout.OutputError(f"job {full}'s output folder {root} does not exist: "
                                  f"{backend.missing_output(full)}")
    return root, full


def list_output(source: str, cluster: str | None = None) -> tuple[list[Any], bool]:
    """``paijob cp --list JOB[:PATH]``: what a job's output folder holds, without copying (see ``copy_output``
    for where that folder is); the entries, and whether there were more than ``copyout.LIST_LIMIT``."""
    from paijob import copyout

    job, path = copyout.split_source(source if ":" in source else source + ":.")
    root, job = _output_folder(_backend(cluster), job)
    return copyout.listing(root, path, job)


def copy_output(source: str, dest: str | Path, cluster: str | None = None, *, force: bool = False,
                on_plan: Callable[[CopyPlan], None] | None = None) -> CopyReport:
    """``paijob cp JOB:PATH DEST``: copy a file or folder out of a job's output folder (what landed where).

    The output folder is the local cluster's own for its jobs, or, for a job with ``storage`` (the storage
    route, ``paijob.common.storage_route``), the job's folder on that storage: the local cluster's storage
    folder, or where this machine mounts the storage (the profile's ``--mount``); a storage it does not
    mount is an error that says where the files are. ``on_plan`` sees the checked, measured copy before a
    byte is written (the CLI previews a big one); ``force`` replaces existing files and skips the
    free-space check.
    """
    from paijob import copyout

    job, path = copyout.split_source(source)
    root, job = _output_folder(_backend(cluster), job)
    copy_plan = copyout.plan(root, path, Path(dest), job, force=force)
    if on_plan is not None:
        on_plan(copy_plan)
    return copyout.copy(copy_plan, job, path)


# --------------------------------------------------------------------------- logs


def follow_logs(client: PaiClient, job_id: str, *, role: str | None = None, index: int | None = None,
                stream: str = "all", out: Any = None, prefix: bool = True, rank: int | None = None,
                timestamps: bool = False, tail: int | None = None, raw: bool = False,
                on_note: Callable[[str], None] | None = None) -> LogFollower:
    """A ``LogFollower`` printing the task logs of ``job_id`` to ``out`` (default stdout).

    On a terminal the job's control sequences are shown escaped (colours
    kept; see ``termsafe``) unless ``raw``; elsewhere lines go out as written.

    ``role`` is the role as the job file names it (OpenPAI's REST converts it:
    ``Worker_A`` is ``workera``); ``tail`` keeps only the last N lines of each
    task at the first poll. ``follower.check(detail)`` refuses a role or
    index the job does not have; ``poll``/``finish`` print, ``follow`` prints
    until the job ends.
    """
    import sys

    from paijob import termsafe
    from paijob.openpai.rest import rest_role_name
    from paijob.remote.log_follower import LogFollower

    if tail is not None and tail < 0:
        raise PaijobError(f"--tail {tail}: give a number of lines, 0 or more")
    out = out or sys.stdout
    return LogFollower(client, job_id, role=None if role is None else rest_role_name(role), index=index,
                       stream=stream, out=out, prefix=prefix, rank=rank, timestamps=timestamps,
                       tail=tail, escape=not raw and termsafe.is_terminal(out), on_note=on_note)


# --------------------------------------------------------------------------- templates and job files


def render(template: str, values: Sequence[str | Path] = (), sets: Sequence[SetArg] = (), *,
           check: bool = True, allow_unknown_values: bool = False,
           openpai_before_1_6: bool | None = None) -> RenderResult:
    """``paijob render``: a template (or a plain job file) with values files and ``(kind, "key=value")`` sets.

    A value the template does not read is an error for a template with a values schema (the built-ins),
    a warning with ``allow_unknown_values``.
    """
    from paijob.render import templating

    return templating.render(template, values, sets, check=check, allow_unknown=allow_unknown_values,
                             openpai_before_1_6=openpai_before_1_6)


def write_text(path: str | Path, text: str) -> None:
    """Write a job file as ``paijob render --output-file`` does: a regular file atomically (its mode
    kept), through a symlink at its target, a device or FIFO in place (``paijob.common.safefile``)."""
    from paijob.common.safefile import write_text as write

    write(path, text)


def template_names() -> list[str]:
    """The built-in templates' names."""
    from paijob.render.templates import builtin_names

    return builtin_names()


def template(name: str) -> TemplateRef:
    """A template by built-in name or path: its source, default values and schema."""
    from paijob.render.templates import find_template

    return find_template(name)


def template_values(name: str) -> list[ValueDoc]:
    """Every value ``name`` reads: type, default, whether required, and its comment."""
    from paijob.render.values_doc import describe

    return describe(name)


def validate(source: str | Path, text: str | bytes | None = None, *, master_role: str | None = None,
             port_label: str | None = None, openpai_before_1_6: bool | None = None) -> ValidationReport:
    """``paijob validate``: the server's verdict on a job file, or on ``text`` named ``source``.

    A file that cannot be read is a report with one error, not an exception. ``openpai_before_1_6``: the
    cluster is older than OpenPAI v1.6 (None: the setting, else not; :func:`openpai_before_1_6` asks a cluster).
    """
    from paijob.validate.report import Problem, ValidationReport, validate_file, validate_text

    options = {"master_role": master_role, "port_label": port_label, "openpai_before_1_6": openpai_before_1_6}
    if text is not None:
        return validate_text(text, str(source), **options)
    try:
        return validate_file(source, **options)
    except PaijobError as error:
        return ValidationReport(str(source), None, [Problem("error", (), str(error))])


# --------------------------------------------------------------------------- cluster profiles


def clusters() -> list[dict[str, Any]]:
    """The profiles (name, url, user, where the token comes from, current), never a token."""
    from paijob.remote import profiles

    return profiles.describe()


def add_cluster(name: str, url: str, *, user: str | None = None, token_env: str | None = None,
                api_path: str | None = None, make_current: bool = False,
                mounts: Sequence[str] = (), replace: bool = False) -> tuple[Path, str | None]:
    """Save profile ``name``; returns (the profiles file, the user: given, else read from the token).

    ``mounts``: ``STORAGE=/local/path`` for each storage this machine mounts (``paijob cp`` reads jobs'
    output folders there). A profile of that name already saved is replaced only with ``replace``: else an
    error that says what it holds and how to replace it."""
    from paijob.remote import profiles

    profiles.check_name(name)
    existing = profiles.load()["clusters"].get(name)
    if isinstance(existing, dict) and not replace:
        held = ", ".join(f"{key} {existing[key]}" for key in ("url", "user", "token_env") if existing.get(key))
        raise PaijobError(f"cluster {name} is saved already ({held}); add it with --replace to replace that "
                          f"profile (all of it: token variable, user, mounts), or choose another name "
                          f"(`paijob cluster list` shows them)")

    user = user or profiles.user_from_token(os.environ.get(token_env, "") if token_env else None)
    parsed = dict(profiles.parse_mount(text) for text in mounts)
    if parsed and token_env and os.environ.get(token_env):
        _check_mount_names(name, url, api_path, user, os.environ[token_env], parsed)
    path = profiles.add(name, url, user=user, token_env=token_env, api_path=api_path, make_current=make_current,
                        mounts=parsed)
    return path, user


def _check_mount_names(name: str, url: str, api_path: str | None, user: str | None, token: str,
                       mounts: dict[str, str]) -> None:
    """``--mount NAME=...`` names one of the user's storages, where the cluster can be asked now (a cluster
    that does not answer is not a reason to refuse the profile: ``cp`` checks the mount when it is used)."""
    from paijob.remote import profiles

    cluster = profiles.Cluster(name, url.rstrip("/"), user, token)
    if api_path:
        cluster = replace(cluster, api_path=api_path)
    try:
        mine = [entry.name for entry in connect(cluster, timeout=5.0, start_local=False).storages()]
    except PaijobError:
        return
    unknown = [storage for storage in mounts if storage not in mine]
    if unknown:
        raise PaijobError(f"--mount {unknown[0]}=...: cluster {name} has no storage {unknown[0]} of yours "
                          f"(yours: {', '.join(mine) or 'none'}); give the name GET /api/v2/storages lists")


def remove_cluster(name: str) -> Path:
    from paijob.remote import profiles

    return profiles.remove(name)


def use_cluster(name: str) -> Path:
    """Make ``name`` (or ``local``) the default cluster."""
    from paijob.remote import profiles

    return profiles.use(name)


@dataclass
class LoginResult:
    user: str
    path: Path
    dropped_token_env: str | None  # the variable the profile read its token from before


def login_url(name: str, url: str | None = None) -> str:
    """The portal URL ``paijob login name`` talks to: ``url``, else the profile's (checked)."""
    from paijob.remote import profiles

    if name == profiles.LOCAL:
        raise PaijobError("the local cluster needs no login: `-c local` uses its token automatically")
    profiles.check_name(name)
    found = url or profiles.load()["clusters"].get(name, {}).get("url")
    if not found:
        raise PaijobError(f"no cluster named {name!r}; pass --url to create it: "
                          f"`paijob login {name} --url https://...`")
    return profiles.check_url(str(found), f"cluster {name}")


def login(name: str, url: str, user: str, password: str, *, expiration: int | None = None,
          timeout: float = 30.0) -> LoginResult:
    """Get a token for ``user`` from the cluster and store it in profile ``name`` (changed only on success)."""
    from paijob.remote import profiles
    from paijob.remote.client import PaiClient

    entry = profiles.load()["clusters"].get(name) or {}
    api_path = str(entry.get("api_path") or "/rest-server/api/v2")
    client = PaiClient(url, None, cluster_name=name, api_path=api_path, timeout=timeout)
    answer = client.login(user, password, expiration)
    who = str(answer.get("user") or user)
    path, dropped = profiles.store_login(name, url, str(answer["token"]), who)
    return LoginResult(who, path, dropped)


# --------------------------------------------------------------------------- the local cluster


def local_up(port: int = 0) -> dict[str, Any]:
    """Start the local cluster unless it runs; its info (url, pid, ``already``, ``state_dir``)."""
    from paijob.local import conveniences as local

    return local.up(port=port)


def local_down() -> bool:
    """Stop the local cluster (its running jobs first); False when none was running."""
    from paijob.local import conveniences as local

    return local.down()


def local_status() -> dict[str, Any]:
    """``running``, ``state_dir``, and when it runs its ``url``, ``pid`` and job counts by state (``jobs``),
    asked over its REST API as any cluster's."""
    from paijob.local import conveniences as local
    from paijob.remote.profiles import LOCAL

    directory = local.state_dir()
    info = local.running()
    data: dict[str, Any] = {"running": bool(info), "state_dir": str(directory)}
    if info:
        data.update(url=info["url"], pid=info["pid"])
        counts: dict[str, int] = {}
        for job in connect(LOCAL, start_local=False).list_jobs():
            counts[job["state"]] = counts.get(job["state"], 0) + 1
        data["jobs"] = counts
    return data


def portal_link(on_note: Callable[[str], None] | None = None) -> str:
    """A one-time login link to the local cluster's web portal (the cluster is started when down)."""
    from paijob.local import conveniences as local

    return local.portal_link(on_note=on_note)


def open_in_browser(url: str) -> bool:
    """Open ``url`` in a graphical browser, through a page only this user can read (the login code never
    on a command line); False when this session has no graphical browser."""
    from paijob.local import conveniences as local

    return local.open_in_browser(url)


def prune_local(older_than: str = "0s", *, outputs: bool = False, dry_run: bool = False) -> PruneReport:
    """Remove finished local jobs' work folders and logs (and outputs): ``paijob local prune``."""
    from paijob.local import conveniences as local

    return local.prune(older_than, outputs=outputs, dry_run=dry_run)


def remove_local_job(job: str) -> PruneReport:
    """Remove one finished local job (``NAME`` or ``USER~NAME``): its record, so its name is free again, its
    work folders, logs and output folder: ``paijob local rm``. A job that has not finished is refused."""
    from paijob.local import conveniences as local

    return local.remove(job)


def terminal_text(stream: TextIO, *, raw: bool = False, names: bool = False) -> Callable[[str], str]:
    """How text a job wrote is shown on ``stream``: control sequences escaped on a terminal unless ``raw``.

    ``names``: file names (``\\r`` and direction overrides escaped too); else
    log lines and messages (colours kept). See ``paijob.termsafe``.
    """
    from paijob import termsafe

    return (termsafe.shown_name if names else termsafe.shown_line)(stream, raw)


def human_duration(seconds: float | None) -> str:
    """``3 min 14 s``: durations as paijob writes them everywhere (``paijob.common.durations``)."""
    from paijob.common.durations import human_duration as duration

    return duration(seconds)


def human_size(count: float) -> str:
    """``12.3 MB``: sizes as paijob prints them."""
    from paijob.workdir import human_size as size

    return size(count)
