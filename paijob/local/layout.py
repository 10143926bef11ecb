"""The local cluster's state dir, file by file: the one module that knows where anything lies in it.

Which folder: ``$PAIJOB_LOCAL_STATE_DIR``, else ``$XDG_STATE_HOME/paijob/local``, else
``~/.local/state/paijob/local`` (:func:`state_dir`). What it holds::

    token                  the REST API's bearer token (0600, new at every ``up``)
    server.json            pid, port and url of the running server
    server.log             the server's output
    up.lock                held while ``up`` checks and starts the server
    portal-open.html       the page ``paijob local open`` hands the browser
    cluster-id             this state dir's random id (marks its task processes)
    record-secret          the key each task's record key is made from (0600, made once)
    jobs.sqlite            jobs, attempts, tasks (``local.store``), with SQLite's -wal and -shm
    logs/JOB/ATTEMPT/ROLE/INDEX/TASK_ATTEMPT/   a task's logs; logs/JOB.pruned once prune took them
    work/JOB/ATTEMPT/ROLE-INDEX/               a task's working folder
    work/JOB/ATTEMPT/ROLE-INDEX/.mnt/          its /mnt (``PAIJOB_STORAGE_MOUNT``): links to the storages it mounts
    outputs/JOB/           the job's output folder (``PAIJOB_OUTPUT_DIR``), kept across attempts
    snapshots/DIGEST.tar.gz                    workdir snapshots, by content
    storages/NAME/         the local storages (each task's ``/mnt`` links to those its job mounts)
    running/UID            the main process of each running task

Everything else (the server, its engine, prune, the client's conveniences) asks here; nothing outside
``paijob.local`` names a path in it (``local.conveniences`` is the client's door).
"""

from __future__ import annotations

import os
from pathlib import Path

from paijob.common import contract

TOKEN = "token"
SERVER_INFO = "server.json"
SERVER_LOG = "server.log"
UP_LOCK = "up.lock"
PORTAL_PAGE = "portal-open.html"
CLUSTER_ID = "cluster-id"
RECORD_SECRET = "record-secret"
DATABASE = "jobs.sqlite"
LOGS = "logs"
WORK = "work"
OUTPUTS = "outputs"
SNAPSHOTS = "snapshots"
STORAGES = "storages"
RUNNING = "running"
PRUNED_SUFFIX = ".pruned"


def state_dir() -> Path:
    """The state dir this environment names (it may not exist yet)."""
    explicit = os.environ.get(contract.LOCAL_STATE_DIR)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "paijob" / "local"


def database(root: Path) -> Path:
    """The job store (``local.store.Store``)."""
    return root / DATABASE


def logs(root: Path) -> Path:
    """The folder of every job's task logs."""
    return root / LOGS


def task_logs(root: Path, job_id: str, attempt: int, role: str, index: int, task_attempt: int) -> Path:
    """One task attempt's log folder."""
    return logs(root) / job_id / str(attempt) / role / str(index) / str(task_attempt)


def pruned_mark(root: Path, job_id: str) -> Path:
    """The file saying when ``paijob local prune`` removed the job's logs."""
    return logs(root) / f"{job_id}{PRUNED_SUFFIX}"


def work(root: Path) -> Path:
    """The folder of every task's working folder."""
    return root / WORK


def task_work(root: Path, job_id: str, attempt: int, role: str, index: int) -> Path:
    """One task's working folder in one job attempt (its ``.tmp`` is the task's TMPDIR, named by a short link:
    ``local.tasktmp``)."""
    return work(root) / job_id / str(attempt) / f"{role}-{index}"


def task_mounts(root: Path, job_id: str, attempt: int, role: str, index: int) -> Path:
    """A task's stand-in for ``/mnt`` (``PAIJOB_STORAGE_MOUNT``): links to the storages its job mounts."""
    return task_work(root, job_id, attempt, role, index) / ".mnt"


# A Unix socket's path holds at most 107 bytes (sun_path), and multiprocessing binds its listener at
# TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX (a DataLoader worker handing a tensor over): a task's TMPDIR leaves room.
def output(root: Path, job_id: str) -> Path:
    """The output folder of job ``user~name`` (``PAIJOB_OUTPUT_DIR``), shared by its attempts."""
    return root / OUTPUTS / job_id


def job_folders(root: Path, job_id: str, *, outputs: bool) -> list[Path]:
    """The job's own folders that prune may remove: work and logs, and with ``outputs`` its output folder."""
    return [root / WORK / job_id, logs(root) / job_id, *([output(root, job_id)] if outputs else [])]


def snapshots(root: Path) -> Path:
    """The folder of workdir snapshots."""
    return root / SNAPSHOTS


def snapshot(root: Path, digest: str) -> Path:
    """Where the snapshot of content ``digest`` is kept (the same tree, the same file)."""
    return snapshots(root) / f"{digest}.tar.gz"


def storages(root: Path) -> Path:
    """The folder of the local storages' folders."""
    return root / STORAGES


def storage(root: Path, name: str) -> Path:
    """Storage ``name``'s folder on this machine."""
    return storages(root) / name


def running(root: Path) -> Path:
    """The records of running tasks' main processes (``local.tracking.Records``)."""
    return root / RUNNING
