"""A local task's storages, mounted as OpenPAI mounts them: only what its job's list says, where it says.

rest-server gives each task one volume per entry of the job's storage list (``models/v2/job/k8s.js``:599-616,
after 1044-1102; :func:`paijob.openpai.storages.mounts`): at ``mountPath`` (``/mnt/<name>`` by default), at
the user's own folder of a storage that is not shared. A local task has no container, so its ``/mnt`` is a
folder of its own (``PAIJOB_STORAGE_MOUNT``, :func:`paijob.local.layout.task_mounts`) holding a link to
each storage folder its job mounts there and nothing else. What a task writes under a path its job does
not mount stays in that folder, the task's own disk, as it stays on a container's: a job that would lose
its output on OpenPAI loses it here too. A mountPath outside ``/mnt`` cannot be stood in for: the task's
log says so once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from paijob.common import contract
from paijob.local import layout, storage
from paijob.openpai.storages import MOUNT_ROOT, Mount, mounts


def job_mounts(job: Mapping[str, Any], user: str) -> list[Mount]:
    """The volumes OpenPAI would give each task of ``job`` run by ``user`` on this cluster."""
    return mounts(job, user, storage.yours())


def unreachable(job: Mapping[str, Any], user: str) -> list[str]:
    """A line for each storage the job mounts where a local task cannot see it (outside ``/mnt``)."""
    return [f"storage {mount.name} is mounted at {mount.mount_path} on OpenPAI; a local task sees storages only "
            f"under {MOUNT_ROOT} (its ${contract.STORAGE_MOUNT}), so not there"
            for mount in job_mounts(job, user) if not mount.mount_path.startswith(MOUNT_ROOT + "/")]


def mount_all(state_dir: Path, root: Path, job: Mapping[str, Any], user: str) -> Path:
    """Make ``root`` the task's ``/mnt``: a link for each storage the job mounts under ``/mnt`` to its folder
    (the user's folder in a storage that is not shared), nothing else; returns ``root``. A retried task
    finds the same links made again."""
    root.mkdir(parents=True, exist_ok=True)
    for mount in job_mounts(job, user):
        if not mount.mount_path.startswith(MOUNT_ROOT + "/"):
            continue
        target = layout.storage(state_dir, mount.name) / mount.sub_path if mount.sub_path else \
            layout.storage(state_dir, mount.name)
        target.mkdir(parents=True, exist_ok=True)
        link = root / mount.mount_path[len(MOUNT_ROOT) + 1:]
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink():
            link.unlink()
        elif link.exists():  # a folder a mount above it made (/mnt/a over /mnt/a/b): the mount hides it
            continue
        os.symlink(target, link, target_is_directory=True)
    return root
