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

rest-server mounts exactly what the job's list says (``paijob.openpai.storages``), so a job whose own list
no longer mounts the route's storage at ``/mnt/NAME`` would write its output folder onto the container's
own disk and lose it: :func:`route_problem` says so and what to write instead (``paijob validate`` and
``submit`` refuse such a job; the local cluster, answering as rest-server, runs it and loses the folder
the same way). :func:`add_route` adds the route to a job file (``paijob render job.yaml --set storage=``).
"""

from __future__ import annotations

import re
import shlex
from typing import Any, NamedTuple

from paijob.common.contract import OUTPUT_DIR, STORAGE_MOUNT
from paijob.errors import PaijobError
from paijob.openpai.storages import (
    MOUNT_ROOT,
    PLUGINS_KEY,
    Entry,
    default_mount_path,
    entries,
    listed,
)
from paijob.openpai.taskenv import PAI_JOB_NAME

DEFAULT_FOLDER = "paijob"  # the templates' storagePath, and a job file's (`paijob render job.yaml --set storage=`)
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


def _entry_text(name: str) -> str:
    return f"{{name: {name}, mountPath: {default_mount_path(name)}}}"


def route_problem(job: Any, route: Route | None = None) -> tuple[tuple[Any, ...], str] | None:
    """Where and why the job's list does not mount its route's storage where the output folder is
    (``/mnt/NAME``), with what to write instead; None when it does (or the job has no route).

    rest-server mounts only the list (k8s.js:599-616), an empty list is the user's default storages
    (k8s.js:1067-1075), a storage listed twice is refused by Kubernetes (``openpai.storages.pod_problems``)."""
    route = route if route is not None else job_route(job)
    if route is None:
        return None
    name, want = route.name, default_mount_path(route.name)
    lost = (f"the job's output folder ({want}/..., storage: {name} in its commands) would be written to the "
            f"container's own disk and lost with it")
    items = listed(job)
    if items is None:
        return ("extras",), (f"the job mounts no storage, so {lost}; add extras.storages: "
                             f"[{_entry_text(name)}]")
    if not items:
        return ("extras", "storages"), (
            f"an empty list mounts only your default storages (rest-server k8s.js:1067-1075), at /mnt/<name>; "
            f"unless {name} is one of them, {lost}; write storages: [{_entry_text(name)}] and add the default "
            f"storages you use (GET /api/v2/storages?default=true lists them)")
    found = entries(job)
    mine = [entry for entry in found if entry.name == name]
    if len(mine) > 1:
        return None  # two volumes of one name: openpai.storages.pod_problems says it
    if not mine:
        return _not_listed(name, found, lost)
    entry = mine[0]
    if entry.mount_path == want:
        return None
    moved: tuple[Any, ...] = ("extras", "storages", entry.index, "mountPath") if entry.index is not None \
        else ("extras",)
    return moved, (f"storage {name} is mounted at {entry.mount_path}, not {want}: rest-server mounts it only "
                   f"where this list says (k8s.js:599-616), so {lost}; write mountPath: {want} (and read "
                   f"the storage there in your own commands); one storage cannot be mounted twice")


def _not_listed(name: str, found: list[Entry], lost: str) -> tuple[tuple[Any, ...], str]:
    """``route_problem`` of a list without the route's storage: what to add, and what to move off its path."""
    want = default_mount_path(name)
    taken = next((entry for entry in found if entry.mount_path == want), None)
    by_plugin = bool(found) and found[0].index is None
    what = "the teamwise_storage plugin, which rest-server turns into the list" if by_plugin else "extras.storages"
    listed_names = ", ".join(entry.name for entry in found) or "nothing"
    fix = f"add {_entry_text(name)} to extras.storages"
    if taken is not None:
        fix += f" and move storage {taken.name} off {want} (give it another mountPath)"
    where: tuple[Any, ...] = ("extras", PLUGINS_KEY) if by_plugin else ("extras", "storages")
    return where, (f"{what} mounts {listed_names} but not storage {name}, which holds the job's output "
                   f"folder: rest-server mounts only this list (k8s.js:599-616), so {lost}; {fix}")


def add_route(job: dict[str, Any], name: Any, path: Any = None) -> dict[str, Any]:
    """``job`` (a job file's mapping, edited in place) on the storage route: the export line first in every
    role's commands, and the storage mounted at ``/mnt/NAME`` in its list. Refuses, saying exactly what to
    edit, a job that already has a route to elsewhere or sets its output folder itself, and a list the
    route cannot join without changing what else it mounts (an empty list: the default storages; the
    plugin's list; the storage at another path; another storage at ``/mnt/NAME``)."""
    line = output_export(name, path)
    roles = job.get("taskRoles")
    if not isinstance(roles, dict) or not roles:
        raise StorageValueError("the job has no taskRoles to point at the storage")
    current = job_route(job)
    if current is not None and current != read_route([line]):
        raise StorageValueError(
            f"the job's output folder is already on storage {current.name} (its commands export "
            f"{OUTPUT_DIR} to {current.in_task('<user>', '<job>')}); edit that command in every role to: {line}")
    for role_name, role in roles.items() if current is None else ():
        for command in _commands(role):
            if re.search(rf"\b{OUTPUT_DIR}=", command):
                raise StorageValueError(
                    f"role {role_name}'s commands set {OUTPUT_DIR} themselves ({command[:80]!r}); remove that "
                    f"command and render again, or replace it by: {line}")
    _mount_in_list(job, str(name))
    for role in roles.values() if current is None else ():
        if isinstance(role, dict):
            role["commands"] = [line, *_commands(role)]
    problem = route_problem(job)
    if problem is not None:  # what the edits above did not foresee: never hand back a job that loses its output
        raise StorageValueError(problem[1])
    return job


def _commands(role: Any) -> list[str]:
    commands = role.get("commands") if isinstance(role, dict) else None
    return [c for c in commands if isinstance(c, str)] if isinstance(commands, list) else []


def _mount_in_list(job: dict[str, Any], name: str) -> None:
    """Storage ``name`` at ``/mnt/NAME`` in ``job``'s own list, where that changes nothing else it mounts."""
    extras = job.setdefault("extras", {})
    if not isinstance(extras, dict):
        raise StorageValueError("the job's extras is not a mapping; make it one to list the storage in it")
    if "storages" not in extras and listed(job) is not None:
        raise StorageValueError(
            f"the job mounts storages by the teamwise_storage plugin, which rest-server reads only for a job "
            f"without extras.storages; write them as extras.storages ({_entry_text('NAME')} each) with "
            f"{_entry_text(name)} among them, drop the plugin, and render again")
    if extras.get("storages") == []:
        raise StorageValueError(
            f"the job's extras.storages is [], which mounts your default storages (rest-server "
            f"k8s.js:1067-1075); a list with the route's storage would mount only what it names: write "
            f"storages: [{_entry_text(name)}] and add the default storages you use (GET "
            f"/api/v2/storages?default=true lists them), then render again")
    storages = extras.setdefault("storages", [])
    if not isinstance(storages, list):
        raise StorageValueError("the job's extras.storages is not a list; make it one to add the storage")
    for item in storages:
        if isinstance(item, dict) and item.get("name") == name:
            if (item.get("mountPath") or default_mount_path(name)) != default_mount_path(name):
                raise StorageValueError(
                    f"the job mounts storage {name} at {item['mountPath']}, and its output folder would be under "
                    f"{default_mount_path(name)}: write mountPath: {default_mount_path(name)} for it (and read "
                    f"it there in your commands), then render again")
            return
    for entry in entries(job):
        if entry.mount_path == default_mount_path(name):
            raise StorageValueError(
                f"the job mounts storage {entry.name} at {entry.mount_path}, where storage {name} must be for "
                f"the output folder: give {entry.name} another mountPath, then render again")
    storages.append(mount(name))
