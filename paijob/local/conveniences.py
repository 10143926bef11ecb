"""The client's one door into the local cluster: what ``paijob.api`` needs of it besides its REST API.

Whatever a verb can ask a cluster goes through the REST client (``paijob.remote.client``), to the local
cluster as to a real one. What is left is named here, and the client imports nothing else from
``paijob.local`` (an import-linter contract in ``setup.cfg`` keeps it so):

* the cluster as a service: its profile (:func:`cluster`, started when down; :func:`address`, never
  started), and ``paijob local up / down / status / open / prune / rm`` (:func:`up`, :func:`down`,
  :func:`running`, :func:`portal_link`, :func:`open_in_browser`, :func:`prune`, :func:`remove`);
* a workdir snapshot, which a real cluster gets in the job text and the local one reads from its state
  dir (:func:`snapshot_path`: the job names it there; ``paijob.api.ship`` writes it before the submit);
* what is known without asking the server, which may be down: the user it runs jobs as (:func:`user`),
  the storages that user may use (:func:`storage_names`), a job's config as the server stored it
  (:func:`stored_config`) and where its output folder lies (:func:`output_folder`): ``paijob cp`` reads
  a stopped cluster's outputs too;
* what no REST route does: ask a running job's ``paijob-runtime`` for its ranks' stacks
  (:func:`signal_stacks`; a real cluster's tasks are reached over ssh).

Where anything lies in the state dir is :mod:`paijob.local.layout`'s to say, never the client's.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paijob.local import daemon, layout, storage, tracking
from paijob.local.prune import PruneReport, parse_duration
from paijob.local.prune import prune as prune_state
from paijob.local.prune import remove_job as remove_state

if TYPE_CHECKING:
    from paijob.common.storage_route import Route
    from paijob.remote.profiles import Cluster
    from paijob.workdir import Snapshot

__all__ = ["PruneReport", "address", "cluster", "down", "open_in_browser", "output_folder",
           "portal_link", "prune", "remove", "running", "signal_stacks", "snapshot_path", "state_dir", "storage_names",
           "stored_config", "stored_state", "up", "user"]


def state_dir() -> Path:
    """The local cluster's state dir (what the user is told it keeps its files in)."""
    return layout.state_dir()


# --------------------------------------------------------------------------- the cluster as a service


def cluster(*, start: bool = True, on_note: Callable[[str], None] | None = None) -> Cluster:
    """The local cluster's profile (url, user, token), started first when it is down and ``start``;
    ``on_note`` hears that it was started."""
    return daemon.local_cluster(start=start, on_note=on_note)


def address() -> Cluster:
    """The local cluster's profile without starting it or reading its token (dry runs)."""
    return daemon.local_cluster_address()


def up(port: int = 0) -> dict[str, Any]:
    """Start the local cluster unless it runs; its info (url, pid, ``already``, ``state_dir``)."""
    return {**daemon.up(port=port), "state_dir": str(layout.state_dir())}


def down() -> bool:
    """Stop the local cluster (its running jobs first); False when none was running."""
    return daemon.down()


def running() -> dict[str, Any] | None:
    """The running server's info (url, pid), or None when it is down."""
    return daemon.running(layout.state_dir())


def portal_link(on_note: Callable[[str], None] | None = None) -> str:
    """A one-time login link to the web portal (the cluster is started when down)."""
    return daemon.portal_link(on_note=on_note)


def open_in_browser(url: str) -> bool:
    """Open ``url`` in a graphical browser through a page only this user can read; False without one."""
    return daemon.open_in_browser(url)


def prune(older_than: str = "0s", *, outputs: bool = False, dry_run: bool = False) -> PruneReport:
    """Remove finished jobs' work folders and logs (and outputs): ``paijob local prune``."""
    return prune_state(layout.state_dir(), older_than=parse_duration(older_than), outputs=outputs, dry_run=dry_run)


def remove(job_id: str) -> PruneReport:
    """Remove one finished job, its record and its folders: ``paijob local rm`` (a running job is refused)."""
    return remove_state(layout.state_dir(), job_id if "~" in job_id else f"{user()}~{job_id}")


# --------------------------------------------------------------------------- what travels outside the REST API


def snapshot_path(snap: Snapshot) -> Path:
    """Where the local cluster keeps the workdir snapshot ``snap`` (by content) for the job that names it."""
    return layout.snapshot(layout.state_dir(), snap.digest)


def user() -> str:
    """The user the local cluster runs jobs as (a name that cannot be part of a path is refused)."""
    return daemon.local_user()


def storage_names() -> list[str]:
    """The storages the user may use on the local cluster (``GET /api/v2/storages``' names)."""
    return storage.names()


def _stored_row(job_id: str) -> dict[str, Any] | None:
    """Job ``user~name``'s row in the local cluster's store (None: no such job, or no store yet), read from
    its store, so it answers while the server is down."""
    from paijob.local.store import Store

    database = layout.database(layout.state_dir())
    if not database.exists() or "~" not in job_id:
        return None
    store = Store(database)
    try:
        return store.job(*job_id.split("~", 1))
    finally:
        store.close()


def stored_config(job_id: str) -> str | None:
    """Job ``user~name``'s config as the local cluster stored it (None: no such job, or no store yet)."""
    row = _stored_row(job_id)
    return row["config"] if row else None


def stored_state(job_id: str) -> str | None:
    """Job ``user~name``'s state as the local cluster stored it (None: no such job, or no store yet)."""
    row = _stored_row(job_id)
    return str(row["state"]) if row else None


def output_folder(job_id: str, route: Route | None = None) -> Path:
    """Where job ``user~name``'s output folder lies on this machine: its folder on the local storage its
    ``route`` names (the storage route; in the user's own folder of a storage that is not shared, as a task
    sees it) when the cluster has that storage, else its own output folder (``PAIJOB_OUTPUT_DIR``)."""
    root = layout.state_dir()
    mine = storage.yours()
    if route is not None and route.name in mine:
        user, name = job_id.split("~", 1)
        return layout.storage(root, route.name) / route.folder(user, name, share=mine[route.name].share)
    return layout.output(root, job_id)


def signal_stacks(job_id: str) -> int:
    """Send SIGUSR1 to every ``paijob-runtime train`` launcher of job ``job_id`` (each prints its ranks'
    stacks into its log; the job goes on); returns how many were signalled."""
    marker = tracking.job_marker(tracking.cluster_id(layout.state_dir()), job_id)
    pids = tracking.runtime_launchers(marker)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError:
            pass
    return len(pids)
