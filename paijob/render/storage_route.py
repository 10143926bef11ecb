"""The storage route: a job's output folder on an OpenPAI storage (values ``storage`` and ``storagePath``).

``storage: NAME`` adds ``{name: NAME, mountPath: /mnt/NAME}`` to ``extras.storages`` (rest-server
mounts the storage there in every task: :func:`mount`) and points the job's output folder
(``PAIJOB_OUTPUT_DIR``) at ``/mnt/NAME/<storagePath>/<user>/<job>``, a folder of its
own per job that outlives the tasks. The user and job come from the task's
``PAI_USER_NAME`` / ``PAI_JOB_NAME`` at run time, so a name given at submit
(``--name``, ``--unique-suffix``) is the one used. ``/mnt`` is
``$PAIJOB_STORAGE_MOUNT`` where that is set (the local cluster, which has no
container to mount into). ``paijob cp`` reads the route back from the job's
commands (``read_route``), so the one export line this module writes is the record.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, NamedTuple

from paijob.common.contract import OUTPUT_DIR, STORAGE_MOUNT
from paijob.errors import PaijobError
from paijob.openpai.storages import MOUNT_ROOT
from paijob.openpai.taskenv import PAI_JOB_NAME

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_PREFIX = f'export {OUTPUT_DIR}="${{{STORAGE_MOUNT}:-{MOUNT_ROOT}}}"/'
_SUFFIX = f'/"$PAI_USER_NAME/${{{PAI_JOB_NAME}#*~}}" && mkdir -p "${OUTPUT_DIR}"'


class StorageValueError(PaijobError):
    """``storage`` / ``storagePath`` values that cannot make an output folder."""


class Route(NamedTuple):
    """Where a job's output folder is: on storage ``name``, at ``folder`` (``SUB/USER/JOB``) under its root."""

    name: str
    subpath: str

    def folder(self, user: str, job: str, *, share: bool = True) -> str:
        """The folder's path from the storage's root; ``share`` False: OpenPAI mounts the storage's
        ``<user>`` folder at ``/mnt/NAME`` (rest-server k8s.js ``subPath``), so the path starts there."""
        return "/".join(part for part in ("" if share else user, self.subpath, user, job) if part)

    def in_task(self, user: str, job: str) -> str:
        return f"{MOUNT_ROOT}/{self.name}/{self.folder(user, job)}"


def _subpath(path: Any) -> str:
    text = "" if path is None else str(path).strip("/")
    parts = [p for p in text.split("/") if p]
    if any(p in (".", "..") for p in parts) or not text.isprintable():
        raise StorageValueError(f"storagePath {path!r} must be a plain folder path under the storage (no '..', "
                                f"no control characters such as a tab, CR or ESC)")
    return "/".join(parts)


def output_export(name: Any, path: Any = None, output_dir: Any = None) -> str:
    """The command that points ``PAIJOB_OUTPUT_DIR`` at the job's folder on storage ``name``."""
    if output_dir:
        raise StorageValueError("set storage (the output folder on an OpenPAI storage) or outputDir (a path "
                                "you mount yourself), not both")
    if not isinstance(name, str) or not _NAME.match(name):
        raise StorageValueError(f"storage {name!r} is not a storage name (letters, digits, '.', '_' and '-'); "
                                "the cluster's GET /api/v2/storages lists yours")
    sub = _subpath(path)
    return _PREFIX + shlex.quote(f"{name}/{sub}" if sub else name) + _SUFFIX


def mount(name: str) -> dict[str, Any]:
    """The ``extras.storages`` entry that mounts storage ``name`` at ``/mnt/NAME``: OpenPAI's documented form
    since v1.0, which rest-server turns into the task pod's volume (``models/v2/job/k8s.js``). Not the
    ``teamwise_storage`` runtime plugin: openpai-runtime has ignored it since 2020, and rest-server converts
    it only for a job without ``extras.storages`` of its own."""
    return {"name": name, "mountPath": f"{MOUNT_ROOT}/{name}"}


def read_route(commands: Any) -> Route | None:
    """The route a job's commands hold (``output_export``'s line), or None (none, or one render would refuse:
    ``paijob cp`` never follows a ``..`` it reads back from a job's config)."""
    for command in commands if isinstance(commands, list) else ():
        if isinstance(command, str) and command.startswith(_PREFIX) and command.endswith(_SUFFIX):
            middle = command[len(_PREFIX):-len(_SUFFIX)]
            try:
                (words,) = [shlex.split(middle)]
            except ValueError:
                return None
            if len(words) != 1:
                return None
            name, _, sub = words[0].partition("/")
            try:  # read back from a job's config, which anyone may have written: checked as render checks it
                if not _NAME.match(name) or _subpath(sub) != sub:
                    return None
            except StorageValueError:
                return None
            return Route(name, sub)
    return None


def job_route(job: Any) -> Route | None:
    """The route of a job (its first role that has one)."""
    roles = job.get("taskRoles") if isinstance(job, dict) else None
    for role in roles.values() if isinstance(roles, dict) else ():
        route = read_route(role.get("commands") if isinstance(role, dict) else None)
        if route is not None:
            return route
    return None
