"""The local cluster's storages: folders that its tasks see where OpenPAI would mount them.

A real cluster lists the storages a user may use at ``GET /api/v2/storages`` and mounts the ones a job's
list names (``extras.storages``, or the ``teamwise_storage`` plugin converted into it) at their
``mountPath`` (``/mnt/<name>`` by default), each storage that is not shared at its ``<user>`` folder
(rest-server ``models/v2/job/k8s.js``:599-616, 1044-1102, read in :mod:`paijob.openpai.storages`).
The local cluster runs tasks as plain processes, with nothing to mount into, so each storage is a folder
of the state dir (:func:`paijob.local.layout.storage`) and each task gets a folder of its own standing
for its ``/mnt`` (``PAIJOB_STORAGE_MOUNT``, which the templates read in place of ``/mnt``) holding a link
for each storage its job mounts, and nothing else: a job that writes to a storage it does not mount
writes to its task's own folder, and its output is not on the storage, as on OpenPAI.

Its storages, each one kind that rest-server serves:

* ``shared``: shared by every user (``share: true``), the user's;
* ``home``: per user (``share: false``): a task sees the user's own folder in it; the user's default
  storage (what ``extras.storages: []`` mounts);
* ``admin``: a storage the user may not use: not listed, 403 on ``GET /api/v2/storages/admin`` (storage.js
  ``get``: ``ForbiddenUserError``), and a job that names it is refused (``NoStorageError``).

The JSON shapes are rest-server's (``models/v2/storage.js``: the summary's entries ``{name, share,
volumeName, default}``; the detail ``{name, share, volumeName, type, data, readOnly, mountOptions}``,
without ``default``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from paijob.local import layout
from paijob.openpai.storages import Storage

NAME = "shared"  # the storage the templates' notes and the docs use
HOME = "home"
ADMIN = "admin"

LocalStorage = NamedTuple("LocalStorage", [("name", str), ("share", bool), ("default", bool), ("yours", bool)])

STORAGES = (
    LocalStorage(NAME, True, False, True),
    LocalStorage(HOME, False, True, True),
    LocalStorage(ADMIN, True, False, False),
)
MOUNT_OPTIONS = ["rw"]  # how the local folders are "mounted": read-write, as a PV's spec.mountOptions says


def names() -> list[str]:
    """The storages the user may use (a job that mounts another is refused at submit)."""
    return [entry.name for entry in STORAGES if entry.yours]


def yours() -> dict[str, Storage]:
    """The user's storages as ``GET /api/v2/storages`` lists them, by name."""
    return {entry.name: Storage(entry.name, entry.share, entry.default) for entry in STORAGES if entry.yours}


def _find(name: str) -> LocalStorage | None:
    return next((entry for entry in STORAGES if entry.name == name), None)


def summary(default_only: bool = False) -> dict[str, Any]:
    """``GET /api/v2/storages``: the storages the user may use, in rest-server's shape; ``default_only``
    (``?default=true``): only the user's default ones, which a job with an empty ``extras.storages`` gets
    (rest-server ``models/v2/storage.js`` ``list``)."""
    return {"storages": [{"name": entry.name, "share": entry.share, "volumeName": entry.name,
                          "default": entry.default}
                         for entry in STORAGES if entry.yours and (entry.default or not default_only)]}


def detail(state_dir: Path, name: str) -> dict[str, Any] | None:
    """``GET /api/v2/storages/{name}`` for a storage the user may use (storage.js ``convertVolumeDetail``
    of a volume rest-server cannot name the kind of: ``other``; ``data.path`` says where it is on this
    machine); None for a storage the cluster does not have. :func:`forbidden` first."""
    entry = _find(name)
    if entry is None:
        return None
    return {"name": entry.name, "share": entry.share, "volumeName": entry.name, "type": "other",
            "data": {"path": str(layout.storage(state_dir, entry.name))}, "readOnly": False,
            "mountOptions": list(MOUNT_OPTIONS)}


def forbidden(name: str) -> bool:
    """A storage the cluster has that the user may not use (storage.js ``get``: 403 ``ForbiddenUserError``)."""
    entry = _find(name)
    return entry is not None and not entry.yours
