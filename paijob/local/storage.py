"""The local cluster's storage: one folder that tasks see as OpenPAI's ``/mnt/<name>``.

A real cluster lists the storages a user may use at ``GET /api/v2/storages`` and
mounts the ones a job names (the ``teamwise_storage`` runtime plugin or
``extras.storages``) at ``/mnt/<name>``. The local cluster runs tasks as plain
processes, with nothing to mount into, so it serves one storage, ``shared``, as
the folder ``<state dir>/storages/shared`` (:func:`paijob.local.layout.storage`) and tells each task where the mounts are
(``PAIJOB_STORAGE_MOUNT``, which the templates read in place of ``/mnt``). The JSON
shapes are rest-server's (swagger ``StorageSummary`` / ``StorageDetail``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paijob.local import layout

NAME = "shared"


def names() -> list[str]:
    """The storages the user may use (a job that mounts another is refused at submit)."""
    return [NAME]


def summary(default_only: bool = False) -> dict[str, Any]:
    """``GET /api/v2/storages``: the storages the user may use, in rest-server's shape; ``default_only``
    (``?default=true``): only the user's default ones, which a job with an empty ``extras.storages`` gets
    (rest-server ``models/v2/storage.js``). The local storage is not a default one."""
    listed = [{"name": name, "share": True, "volumeName": name, "default": False} for name in names()]
    return {"storages": [entry for entry in listed if entry["default"] or not default_only]}


def detail(state_dir: Path, name: str) -> dict[str, Any] | None:
    """``GET /api/v2/storages/{name}``; None for a storage the cluster does not have."""
    if name != NAME:
        return None
    return {"name": NAME, "share": True, "volumeName": NAME, "default": False, "readOnly": False, "type": "other",
            "data": {"path": str(layout.storage(state_dir, NAME))}}
