"""Faults of the machine (a full disk above all) as the one line a job's exitDiagnostics gives.

A job the local cluster cannot go on running must end, saying why, even when
the reason is the machine and not the job: a full disk (the state dir, its
logs, a task's own folder), an I/O error, a bug of the cluster itself. The job
store reports a full database as ``OSError(ENOSPC)`` too, so one check covers
every place a write can fail.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
# what a task's own program prints when its folder's disk is full (strerror of ENOSPC and EDQUOT)
DISK_FULL_WORDS = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))


class MachineFault(Exception):
    """The machine failed a job where the job is not to blame: ``where`` says what was being done,
    ``cause`` what failed (None: ``where`` says it all; ``disk_full`` then says whether the disk is why)."""

    def __init__(self, where: str, cause: BaseException | None = None, *, disk_full: bool = False) -> None:
        super().__init__(where if cause is None else f"{where}: {cause}")
        self.where = where
        self.cause = cause
        self.disk_full = disk_full


def is_disk_full(error: BaseException | None) -> bool:
    if isinstance(error, MachineFault):
        return error.disk_full or is_disk_full(error.cause)
    return isinstance(error, OSError) and error.errno in DISK_FULL


def reason(error: BaseException) -> str:
    """One line for the job's diagnostics: ``disk full: ...`` for a full disk or quota, else what failed."""
    where = f"{error.where}: " if isinstance(error, MachineFault) else ""
    cause = error.cause if isinstance(error, MachineFault) else error
    if cause is None:
        return ("disk full: " if is_disk_full(error) else "local cluster error: ") + where[:-2]
    if is_disk_full(cause):
        assert isinstance(cause, OSError)
        what = f"cannot write {cause.filename}" if cause.filename else "cannot write"
        return f"disk full: {where}{what} ({cause.strerror})"
    return f"local cluster error: {where}{cause}"


def full_disk_at(path: Path) -> bool:
    """Is the filesystem holding ``path`` out of space for this user (nothing left to allocate)?"""
    try:
        stats = os.statvfs(path)
    except OSError:
        return False
    return stats.f_bavail == 0 or stats.f_favail == 0
