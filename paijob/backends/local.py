"""The embedded local cluster's side of :class:`paijob.backends.Backend`, through ``paijob.local.conveniences``
only (the import contract "The client reaches the local cluster ... only through ... local.conveniences")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paijob.backends.base import loaded_job, missing_output
from paijob.common import contract
from paijob.errors import PaijobError
from paijob.local import conveniences as local

if TYPE_CHECKING:
    from paijob.remote.client import PaiClient
    from paijob.remote.profiles import Cluster
    from paijob.workdir import Snapshot


@dataclass(frozen=True)
class LocalStorages:
    """The local cluster's storages, known without its server (which ``prepare`` does not start)."""

    names: list[str]

    def read_only(self, name: str) -> bool:
        return False  # its storages are folders of the state dir, all writable


class LocalBackend:
    """The local cluster: started on demand, its files on this machine, its tasks this user's processes."""

    sends_token = True  # it reads its own token when it is started for the submit
    pulls_images = False  # commands run in this Python environment
    node_key_in_secrets = False  # it hands each job its own (PAIJOB_NODE_KEY)

    def __init__(self, target: Cluster) -> None:
        self._target = target

    @property
    def target(self) -> Cluster:
        return self._target

    def client(self, *, timeout: float = 30.0, start: bool = True,
               on_note: Callable[[str], None] | None = None) -> PaiClient:
        from paijob.remote.client import PaiClient

        target = local.cluster(start=start, on_note=on_note)
        return PaiClient(target.url, target.token, user=target.user, api_path=target.api_path,
                         timeout=timeout, cluster_name=target.name)

    def snapshot_path(self, snap: Snapshot) -> Path | None:
        return local.snapshot_path(snap)

    def before_1_6(self, timeout: float) -> bool | None:
        return None  # it behaves as OpenPAI v1.6+ unless its own setting says otherwise

    def unknown_version(self) -> str:
        return ("the local cluster was not asked its version: it runs role names as OpenPAI v1.6+ does (set "
                f"{contract.OPENPAI_BEFORE_1_6}=1 to make it an older one), and they were judged by that rule")

    def storages(self) -> LocalStorages:
        return LocalStorages(local.storage_names())

    def stacks(self, client: PaiClient, job_id: str) -> int:
        """SIGUSR1 to the job's launchers; a job that has ended or not started, or whose tasks run no
        paijob-runtime, is an error saying so (a signal to nobody is not an answer)."""
        from paijob.openpai.jobstate import is_terminal

        state = client.get_job(job_id)["jobStatus"]["state"]
        name = self._target.name
        if is_terminal(state):
            raise PaijobError(f"job {job_id} has ended ({state}): its ranks are gone; `paijob logs {job_id} -c {name}` "
                              f"shows what they printed, `paijob status {job_id} -c {name}` how it ended")
        if state == "WAITING":
            raise PaijobError(f"job {job_id} has not started yet (WAITING): ask again once it runs "
                              f"(`paijob status {job_id} -c {name}`)")
        count = local.signal_stacks(job_id)
        if count == 0:
            raise PaijobError(f"job {job_id} is {state} but no paijob-runtime train process of it was found: its "
                              "tasks are starting, or their commands do not start paijob-runtime, which is what "
                              "prints the stacks (`py-spy dump --pid PID` does it for any Python process)")
        return count

    def full_id(self, job: str) -> str:
        return job if "~" in job else f"{local.user()}~{job}"

    def stored_job(self, job_id: str) -> Any:
        job_id = self.full_id(job_id)
        return loaded_job(local.stored_config(job_id), job_id)

    def missing_output(self, job_id: str, document: Any = None) -> str:
        try:
            job = document if document is not None else self.stored_job(job_id)
        except PaijobError:
            job = None
        return missing_output(job_id, self._target.name, self.job_state(job_id), job, local=True)

    def job_state(self, job_id: str) -> str | None:
        return local.stored_state(self.full_id(job_id))

    def output_root(self, job_id: str, document: Any = None) -> tuple[Path, str]:
        """Its own output folder for the job, or the job's folder on the local storage its route names; the
        job's stored config is read (from the store: the server may be down) where the caller has none."""
        from paijob.common.storage_route import job_route

        job_id = self.full_id(job_id)
        route = job_route(document if document is not None else self.stored_job(job_id))
        return local.output_folder(job_id, route), job_id

    def output_location(self, job_id: str, document: Any = None) -> str | None:
        return str(self.output_root(job_id, document)[0])
