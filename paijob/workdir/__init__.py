"""``--workdir DIR``: ship a snapshot of a project folder with a job.

Every task of the job starts in a copy of DIR as it was at submit time, so the
relative paths in a user's script and data resolve as they do on the laptop.

* ``rules``: what is left out (ignore files as git reads them, built-in skips,
  secret-looking paths) and which workdirs are refused outright;
* ``scan``: the walk (lstat only: links, special files, unreadable folders);
* ``pack``: the deterministic archive, safe reads, sizes and limits;
* ``carry``: how the archive travels (local state dir, or once in the job's
  ``parameters`` on a real cluster) under the server's body limit.

Everything except ``carry.store_local`` (which only a real submit calls) is pure: no cluster, no
network, no file written.
"""

from __future__ import annotations

from paijob.workdir.carry import (
    INLINE_DIR,
    PARAMETER,
    carried,
    embed,
    inline_command,
    local_command,
    prepend_command,
    store_local,
)
from paijob.workdir.pack import (
    MAX_SNAPSHOT_BYTES,
    MAX_SNAPSHOT_FILES,
    Snapshot,
    human_size,
    snapshot,
)
from paijob.workdir.rules import WorkdirError
from paijob.workdir.scan import walk

__all__ = ["INLINE_DIR", "MAX_SNAPSHOT_BYTES", "MAX_SNAPSHOT_FILES", "PARAMETER", "Snapshot", "WorkdirError",
           "carried", "embed", "human_size", "inline_command", "list_files", "local_command", "prepend_command",
           "snapshot", "store_local", "walk"]


def list_files(root: str) -> list[tuple[str, int]]:
    """(relative path, size) of every regular file that goes into the snapshot, sorted."""
    from pathlib import Path

    return [(e.rel, e.size) for e in walk(Path(root).resolve()).files]
