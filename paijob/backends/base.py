"""The ``Backend`` interface (see ``paijob.backends``) and what both of its implementations share."""


from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from paijob.remote.client import PaiClient
    from paijob.remote.profiles import Cluster
    from paijob.workdir import Snapshot

__all__ = ["Backend", "StorageAccess", "loaded_job", "missing_output"]


class StorageAccess(Protocol):
    """The storages a user may use on a cluster, as a submit's check needs them."""

    @property
    def names(self) -> list[str]: ...

    def read_only(self, name: str) -> bool:
        """Whether the cluster mounts storage ``name`` read-only (rest-server's detail says ``readOnly``)."""
        ...


class Backend(Protocol):
    """What paijob does differently on the local cluster and on a real OpenPAI (see the module's table)."""

    @property
    def target(self) -> Cluster:
        """The cluster's profile, resolved (a local cluster's address, unstarted)."""
        ...

    @property
    def sends_token(self) -> bool:
        """Whether a submit carries a bearer token (what ``--dry-run`` shows masked)."""
        ...

    @property
    def pulls_images(self) -> bool:
        """Whether the cluster pulls each role's Docker image (so a placeholder image cannot run)."""
        ...

    @property
    def node_key_in_secrets(self) -> bool:
        """Whether a job that runs paijob-runtime carries its node key among its ``secrets``
        (``paijob.render.node_key``); else the cluster hands each job one."""
        ...

    def client(self, *, timeout: float = 30.0, start: bool = True,
               on_note: Callable[[str], None] | None = None) -> PaiClient:
        """A REST client for the cluster; ``start``: start a local cluster that is down (``on_note`` hears it)."""
        ...

    def snapshot_path(self, snap: Snapshot) -> Path | None:
        """Where the cluster reads a workdir snapshot from, written by ``paijob.api.ship`` before the submit;
        None: the snapshot travels in the job text."""
        ...

    def before_1_6(self, timeout: float) -> bool | None:
        """Whether the cluster runs OpenPAI older than v1.6 (role names); None when it cannot tell."""
        ...

    def unknown_version(self) -> str:
        """What paijob did when :meth:`before_1_6` could not tell: which role-name rule it applied, and why."""
        ...

    def storages(self) -> StorageAccess:
        """The storages the user may use (an error when the cluster cannot be asked)."""
        ...

    def stacks(self, client: PaiClient, job_id: str) -> int:
        """Ask a running job's ``paijob-runtime`` for its ranks' stacks; how many launchers heard it."""
        ...

    def output_root(self, job_id: str, document: Any = None) -> tuple[Path, str]:
        """Job ``job_id``'s output folder on this machine, and the job's full id (``user~name``);
        ``document``: the job as sent, when the caller has it (else the cluster's copy is read)."""
        ...

    def output_location(self, job_id: str, document: Any = None) -> str | None:
        """Where the job's output folder is, for people; None when paijob does not know."""
        ...

    def stored_job(self, job_id: str) -> Any:
        """The job as the cluster stored it (its config, read as the server reads it), or None."""
        ...

    def job_state(self, job_id: str) -> str | None:
        """The job's state (``jobStatus.state``), or None when there is no such job or it cannot be asked."""
        ...

    def missing_output(self, job_id: str, document: Any = None) -> str:
        """Why the job's output folder is not where :meth:`output_root` says (:func:`missing_output`)."""
        ...


def loaded_job(text: str | None, job_id: str) -> Any:
    """A stored job config as the server reads it; None for none, or for text that is not YAML."""
    from paijob.openpai.jsyaml import YamlError, load_job

    try:
        return load_job(text, job_id).value if text else None
    except YamlError:
        return None


def missing_output(job_id: str, cluster: str, state: str | None, job: Any, *, local: bool) -> str:
    """Why job ``job_id``'s output folder is not where paijob reads it, from what the cluster says of the job
    (``state``, None: no such job) and the job as it stored it (``job``); ``local``: the local cluster."""
    from paijob.common.storage_route import route_problem

    if state is None and job is None:
        return f"cluster {cluster} has no job {job_id} (`paijob list -c {cluster}` lists yours)"
    problem = route_problem(job) if job is not None else None
    if problem is not None:
        return f"it was never on the storage: {problem[1]}"
    if state == "WAITING":
        return f"job {job_id} has not started yet (WAITING): each task makes the folder as it starts"
    if state in ("RUNNING", "STOPPING"):
        return (f"job {job_id} is {state} and has not made it yet: each task makes it as its commands start "
                f"(`paijob logs {job_id} -c {cluster}` shows how far they are)")
    if state == "SUCCEEDED":
        gone = "`paijob local prune --outputs` removes the folders of finished jobs" if local else \
            "or this machine's mount is not the storage the job wrote to"
        return f"job {job_id} SUCCEEDED, and its folder was removed since ({gone})"
    return (f"job {job_id} {state or 'ended'} before its commands made it (`paijob status {job_id} -c {cluster}` "
            "says why)")
