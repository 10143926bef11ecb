"""A real OpenPAI cluster's side of :class:`paijob.backends.Backend`: everything through its REST API, its
output folders where this machine mounts its storages (the profile's ``--mount``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paijob.backends.base import loaded_job, missing_output
from paijob.common import contract
from paijob.errors import PaijobError

if TYPE_CHECKING:
    from paijob.common.storage_route import Route
    from paijob.remote.client import PaiClient
    from paijob.remote.profiles import Cluster
    from paijob.workdir import Snapshot


class RestStorages:
    """The user's storages on a real cluster (``GET /api/v2/storages``), each detail asked when needed."""

    def __init__(self, client: PaiClient) -> None:
        self._client = client
        self.listed = client.storages()

    @property
    def names(self) -> list[str]:
        return [entry.name for entry in self.listed]

    def share(self, name: str) -> bool:
        return next((entry.share for entry in self.listed if entry.name == name), True)

    def read_only(self, name: str) -> bool:
        return self._client.storage(name).get("readOnly") is True


class RestBackend:
    """A real OpenPAI: asked over REST, its images pulled, its tasks out of reach but by ssh."""

    pulls_images = True
    node_key_in_secrets = True  # only the job's containers read its secrets (rest-server's k8s.js ~750)

    def __init__(self, target: Cluster) -> None:
        self._target = target

    @property
    def target(self) -> Cluster:
        return self._target

    @property
    def sends_token(self) -> bool:
        return bool(self._target.token)

    def client(self, *, timeout: float = 30.0, start: bool = True,
               on_note: Callable[[str], None] | None = None) -> PaiClient:
        from paijob.remote.client import PaiClient

        target = self._target
        return PaiClient(target.url, target.token, user=target.user, api_path=target.api_path,
                         timeout=timeout, cluster_name=target.name)

    def snapshot_path(self, snap: Snapshot) -> Path | None:
        return None  # the snapshot travels in the job text

    def before_1_6(self, timeout: float) -> bool | None:
        from paijob.openpai.names import before_init_role_lookup

        client = self.client(timeout=timeout)
        client.retries = 0
        try:
            return before_init_role_lookup(client.info().get("version"))
        except PaijobError:
            return None

    def unknown_version(self) -> str:
        return (f"cluster {self._target.name} was not asked its OpenPAI version: it did not answer GET "
                f"{self._target.api_base}/info with one (unreachable, or an odd answer), so role names were judged "
                "by OpenPAI v1.6+'s rule (its init container finds only lowercase a-z0-9 role names); pass "
                f"--openpai-before-1.6 (or {contract.OPENPAI_BEFORE_1_6}=1) if the cluster is older")

    def storages(self) -> RestStorages:
        return RestStorages(self.client(timeout=10.0))

    def stacks(self, client: PaiClient, job_id: str) -> int:
        raise PaijobError(
            f"paijob stacks reaches local jobs only; on OpenPAI enable the ssh plugin (ssh: true), "
            f"ssh into a task of {job_id}, find paijob-runtime's pid (ps -eo pid,args | grep "
            f"'[p]aijob-runtime train') and kill -USR1 it: every node prints its ranks' stacks "
            f"into its log (paijob logs {job_id})"
        )

    def stored_job(self, job_id: str) -> Any:
        """The job as the cluster stored it (``GET /jobs/{id}/config``), or None."""
        return loaded_job(self.client().get_config(job_id), job_id)

    def missing_output(self, job_id: str, document: Any = None) -> str:
        try:
            job = document if document is not None else self.stored_job(job_id)
        except PaijobError:
            job = None
        return missing_output(job_id, self._target.name, self.job_state(job_id), job, local=False)

    def job_state(self, job_id: str) -> str | None:
        try:
            state = self.client(timeout=10.0).get_job(job_id)["jobStatus"]["state"]
        except PaijobError:
            return None
        return state if isinstance(state, str) else None

    def full_id(self, job: str) -> str:
        from paijob import copyout

        if "~" in job:
            return job
        if not self._target.user:
            raise copyout.OutputError(f"give the job as USER~{job}: the profile of cluster {self._target.name} "
                                      "names no user")
        return f"{self._target.user}~{job}"

    def _share(self, route: Route) -> bool:
        """Whether the route's storage is shared (else rest-server mounts its <user> folder: subPath)."""
        try:
            return self.storages().share(route.name)
        except PaijobError:
            return True

    def output_root(self, job_id: str, document: Any = None) -> tuple[Path, str]:
        from paijob import copyout
        from paijob.common.storage_route import job_route

        job = self.full_id(job_id)
        route = job_route(document if document is not None else self.stored_job(job))
        if route is None:
            raise copyout.OutputError(
                f"job {job} on cluster {self._target.name} keeps its {contract.OUTPUT_DIR} where paijob cannot "
                "reach it: submit it with --set storage=NAME (a storage of yours, GET /api/v2/storages) and "
                "`paijob cp` reads its output folder where this machine mounts that storage")
        user, name = job.split("~", 1)
        return self._mounted_output(route, user, name), job

    def _mounted_output(self, route: Route, user: str, name: str) -> Path:
        """A job's output folder where this machine mounts its storage (``--mount``)."""
        from paijob import copyout

        on_storage = route.folder(user, name, share=self._share(route))
        mount = self._target.mount(route.name)
        if mount is None:
            raise copyout.OutputError(self._unmounted(route, on_storage, user, name))
        folder = Path(mount) / on_storage
        if not folder.exists():  # a job that never wrote, or a storage not mounted where the profile says
            self._check_mount(route, mount, on_storage)
        return folder

    def _check_mount(self, route: Route, mount: str, on_storage: str) -> None:
        """Refuse to say "no such job" when the storage is not mounted where the profile says."""
        from paijob import copyout

        try:
            detail = self.client(timeout=10.0).storage(route.name)
        except PaijobError:
            detail = {}
        data = detail.get("data") if isinstance(detail, dict) else None
        nfs = f"{data['server']}:{data.get('path', '/')}" if detail.get("type") == "nfs" and isinstance(data, dict) \
            and isinstance(data.get("server"), str) else None
        problem = copyout.mount_problem(mount, nfs)
        if problem:
            raise copyout.OutputError(
                f"this machine does not mount storage {route.name} at {mount}: {problem}; mount it there "
                f"(GET /api/v2/storages/{route.name} says what it is) or add the profile again with the right "
                f"--mount {route.name}=PATH and --replace; the job's folder is {on_storage} on that storage")

    def _unmounted(self, route: Route, on_storage: str, user: str, name: str) -> str:
        """Where a job's output folder is, on a storage this machine does not mount (for a one-line error)."""
        from paijob.openpai.storages import where

        target = self._target
        try:
            kind = where(self.client(timeout=10.0).storage(route.name))
        except PaijobError:
            kind = "a storage"
        return (f"job {user}~{name}'s output folder is on storage {route.name} ({kind}) at {on_storage} "
                f"(in its tasks {route.in_task(user, name)}); this machine does not mount it: mount it and add the "
                f"profile again with --mount {route.name}=/where/it/is/mounted (`paijob cluster add {target.name} "
                f"--url {target.url} ... --mount ... --replace`), or copy that folder with the storage's own tools")

    def output_location(self, job_id: str, document: Any = None) -> str | None:
        """For a job on the storage route: the storage, the folder on it, the path in its tasks and where this
        machine mounts it; None where it cannot be told (no route, an unreadable config)."""
        from paijob.common.storage_route import job_route

        try:
            route = job_route(document if document is not None else self.stored_job(job_id))
        except PaijobError:
            return None
        if route is None or "~" not in job_id:
            return None
        user, name = job_id.split("~", 1)
        on_storage = route.folder(user, name, share=self._share(route))
        mount = self._target.mount(route.name)
        here = (f"here {Path(mount) / on_storage}" if mount else
                f"not mounted on this machine (`paijob cluster add {self._target.name} ... --mount {route.name}=PATH "
                f"--replace`)")
        return f"storage {route.name}, folder {on_storage} (in its tasks {route.in_task(user, name)}); {here}"
