"""``paijob local prune``: free the disk that finished local jobs use.

A finished job (SUCCEEDED, FAILED, STOPPED) keeps its task working folders
(``work/``), its logs (``logs/``) and its output folder (``outputs/``) in the
state dir until pruned. Prune removes work folders and logs, and output
folders only when asked (they hold results and checkpoints), plus workdir
snapshots no active job uses. Job records stay in the store: as on OpenPAI a
job name is never reusable, and ``paijob status`` still answers (without
logs). Works with the server up or down; active jobs are never touched.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from paijob.errors import PaijobError
from paijob.local.store import Store
from paijob.openpai.jobstate import is_terminal

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


def prune(state_dir: Path, *, older_than: float = 0.0, outputs: bool = False, dry_run: bool = False,
          now: float | None = None) -> PruneReport:
    """Remove the files of jobs that finished more than ``older_than`` seconds ago."""
    report = PruneReport()
    database = state_dir / "jobs.sqlite"
    if not database.exists():
        return report
    store = Store(database)
    try:
        jobs = store.jobs()
    finally:
        store.close()
    cutoff_ms = ((now if now is not None else time.time()) - older_than) * 1000
    active_configs = [job["config"] for job in jobs if not is_terminal(job["state"])]
    folders = ("work", "logs", "outputs") if outputs else ("work", "logs")
    for job in jobs:
        if not is_terminal(job["state"]) or (job["completed_time"] or 0) > cutoff_ms:
            continue
        job_id = f"{job['username']}~{job['name']}"
        found = [state_dir / folder / job_id for folder in folders if (state_dir / folder / job_id).exists()]
        if found:
            report.jobs.append(job_id)
            report.paths.extend(found)
    snapshots = state_dir / "snapshots"
    if snapshots.is_dir():
        for archive in sorted(snapshots.glob("*.tar.gz")):
            if not any(archive.name in config for config in active_configs):
                report.paths.append(archive)
    report.bytes = sum(_size(path) for path in report.paths)
    if not dry_run:
        for path in report.paths:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    return report
