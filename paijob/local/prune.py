"""``paijob local prune``: free the disk that finished local jobs use.

A finished job (SUCCEEDED, FAILED, STOPPED) keeps its task working folders
(``work/``), its logs (``logs/``) and its output folder (``outputs/``) in the
state dir until pruned. Prune removes work folders and logs, and output
folders only when asked (they hold results and checkpoints), plus workdir
snapshots nothing needs. Job records stay in the store: as on OpenPAI a
job name is never reusable, and ``paijob status`` still answers (without
logs). Works with the server up or down; active jobs are never touched.

A snapshot is pinned, never removed, while a job that is not finished names
it in its config (a waiting job unpacks it when it starts, a running one on
each task retry), and for ``SNAPSHOT_GRACE`` seconds after it was stored or
reused: ``paijob run`` stores it before it submits the job, so a prune in
between must not take it away.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paijob.errors import PaijobError
from paijob.local import layout
from paijob.local.store import Store
from paijob.openpai.jobstate import is_terminal

SNAPSHOT_GRACE = 3600.0
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """``90s``, ``10m``, ``2h``, ``7d``, ``1w`` (or a bare number of seconds) -> seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if not match:
        raise PaijobError(f"duration {text!r}: give a number with a unit s, m, h, d or w, e.g. 7d")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


@dataclass
class PruneReport:
    jobs: list[str] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    bytes: int = 0


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _load_jobs(state_dir: Path) -> list[dict[str, Any]]:
    database = layout.database(state_dir)
    if not database.exists():
        return []
    store = Store(database)
    try:
        return list(store.jobs())
    finally:
        store.close()


def _finished_job_folders(state_dir: Path, jobs: list[dict[str, Any]], cutoff_ms: float,
                          outputs: bool) -> list[tuple[str, list[Path]]]:
    """(job id, its folders present) of every job that finished before ``cutoff_ms``."""
    found = []
    for job in jobs:
        if not is_terminal(job["state"]) or (job["completed_time"] or 0) > cutoff_ms:
            continue
        job_id = f"{job['username']}~{job['name']}"
        present = [folder for folder in layout.job_folders(state_dir, job_id, outputs=outputs) if folder.exists()]
        if present:
            found.append((job_id, present))
    return found


def unpinned_snapshots(state_dir: Path, jobs: list[dict[str, Any]], now: float) -> list[Path]:
    """Snapshots no unfinished job names and none stored or reused in the last ``SNAPSHOT_GRACE`` seconds."""
    snapshots = layout.snapshots(state_dir)
    if not snapshots.is_dir():
        return []
    active_configs = [str(job["config"] or "") for job in jobs if not is_terminal(job["state"])]
    removable = []
    for archive in sorted(snapshots.glob("*.tar.gz")):
        try:
            recent = now - archive.stat().st_mtime < SNAPSHOT_GRACE
        except FileNotFoundError:
            continue
        if not recent and not any(archive.name in config for config in active_configs):
            removable.append(archive)
    return removable


def _remove(paths: list[Path]) -> None:
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def prune(state_dir: Path, *, older_than: float = 0.0, outputs: bool = False, dry_run: bool = False,
          now: float | None = None) -> PruneReport:
    """Remove the files of jobs that finished more than ``older_than`` seconds ago, and unpinned snapshots."""
    report = PruneReport()
    jobs = _load_jobs(state_dir)
    current = now if now is not None else time.time()
    for job_id, present in _finished_job_folders(state_dir, jobs, (current - older_than) * 1000, outputs):
        report.jobs.append(job_id)
        report.paths.extend(present)
    report.paths.extend(unpinned_snapshots(state_dir, jobs, current))
    report.bytes = sum(_size(path) for path in report.paths)
    if not dry_run:
        _remove(report.paths)
        for path in report.paths:  # what `paijob logs` then says instead of "not found"
            if path.parent == layout.logs(state_dir):
                layout.pruned_mark(state_dir, path.name).write_text(f"{time.time():.0f}\n")
    return report


def pruned_note(state_dir: Path, job_id: str) -> str | None:
    """Why a finished job's logs are missing, when ``prune`` removed them (else None)."""
    try:
        when = float(layout.pruned_mark(state_dir, job_id).read_text())
    except (OSError, ValueError):
        return None
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(when))
    return (f"the logs of {job_id} were removed by `paijob local prune` on {stamp}; to keep logs, save them "
            "before pruning (`paijob logs JOB > JOB.log`) or prune only older jobs (`--older-than 7d`)")


def remove_job(state_dir: Path, job_id: str) -> PruneReport:
    """``paijob local rm JOB``: one finished job gone: its record (its name is free again), work folders, logs
    and output folder. Refused for a job that has not finished (stop it first) and for one that does not exist.
    Its folder on a storage (the storage route) stays, as a storage outlives jobs on OpenPAI."""
    user, _, name = job_id.partition("~")
    database = layout.database(state_dir)
    store = Store(database) if database.exists() else None
    try:
        state = store.delete_finished_job(user, name) if store is not None else None
    finally:
        if store is not None:
            store.close()
    if state is None:
        raise PaijobError(f"the local cluster has no job {job_id} (`paijob list -c local` lists yours)")
    if not is_terminal(state):
        raise PaijobError(f"job {job_id} is {state}: stop it first (`paijob stop {job_id} -c local`), then remove it")
    report = PruneReport(jobs=[job_id])
    report.paths = [folder for folder in layout.job_folders(state_dir, job_id, outputs=True) if folder.exists()]
    report.bytes = sum(_size(path) for path in report.paths)
    _remove(report.paths)
    layout.pruned_mark(state_dir, job_id).unlink(missing_ok=True)
    return report
