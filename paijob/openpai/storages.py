"""OpenPAI's storages as data: which ones a job mounts, and rest-server's storage answers, parsed.

From rest-server (``models/v2/job/k8s.js``, copy in ``shared/reference/openpai/upstream``):
a job mounts the storages of ``extras.storages`` (``[{name, mountPath?, share?,
readOnly?}]``) at ``mountPath`` or ``/mnt/<name>``; a job without
``extras.storages`` but with the ``teamwise_storage`` runtime plugin has its
``parameters.storageConfigNames`` turned into that list at submit (the plugin
with no names: the user's default storages). A name that is not among the user's
storages (``GET /api/v2/storages``, swagger ``StorageSummary``) is refused at submit
with ``NoStorageError``. ``GET /api/v2/storages/{name}`` (``StorageDetail``) says
what the storage is (``nfs`` ``{server, path}``, ``samba`` ``{address}``,
``azureFile`` ``{shareName, accountName}``, ``azureBlob`` ``{containerName,
accountName}``); its secrets (``password``, ``accountKey``, ``accountSASToken``)
are never shown.

How rest-server turns the list into the task pod's volumes (``k8s.js``, microsoft/pai at a95d942): a job
without ``extras.storages`` but with the plugin gets the plugin's names (1044-1064); an empty list becomes the
user's default storages, each ``{name, share}`` (1067-1075); every named entry's ``share`` is the storage's
own, whatever the job wrote (1092), and so is ``readOnly`` (1100); then each entry is one volume
``<name>-volume`` mounted at ``mountPath`` or ``/mnt/<name>``, at the user's folder (``subPath: <user>``)
when ``share`` is false, read-only when ``readOnly`` (599-616). Kubernetes then refuses a pod whose volumes
share a name or whose mounts share a path (``pkg/apis/core/validation/validation.go``: ``ValidateVolumes``,
"Duplicate value"; ``ValidateVolumeMounts``, "must be unique"), after the job waited in the queue.

Pure; no I/O.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

PLUGIN = "teamwise_storage"
PLUGINS_KEY = "com.microsoft.pai.runtimeplugin"
MOUNT_ROOT = "/mnt"
_SECRET_FIELDS = ("password", "accountKey", "accountSASToken", "key", "token")


# One entry of ``GET /api/v2/storages`` (the functional form: no second pass of typing over a class).
Storage = NamedTuple("Storage", [("name", str), ("share", bool), ("default", bool)])

# One entry of a job's storage list as rest-server mounts it: its index in ``extras.storages`` (None: not
# written by the job: the plugin's or a default storage), the storage, and where a task sees it.
Entry = NamedTuple("Entry", [("index", "int | None"), ("name", str), ("mount_path", str)])

# One volume of a task, as k8s.js:599-616 makes it: where it is mounted, the folder of the storage it shows
# (``""``: its top; ``<user>`` for a storage that is not shared), and whether it is read-only.
Mount = NamedTuple("Mount", [("name", str), ("mount_path", str), ("sub_path", str), ("read_only", bool)])

# What a task's container needs at these paths, so a storage mounted on one (or over one: ``/usr``) breaks
# the container, and OpenPAI's own mounts there (k8s.js:463-532, 750-798) make the path a duplicate.
SYSTEM_FOLDERS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root",
                  "/run", "/sbin", "/sys", "/usr", "/var", "/usr/local/pai", "/usr/local/pai-config", "/dev/shm")
# Nothing may be mounted inside these: the kernel's and OpenPAI's runtime's own folders.
NO_MOUNT_INSIDE = ("/proc", "/sys", "/dev", "/usr/local/pai")
# A volume name is a DNS-1123 label (ValidateVolumes): rest-server names it ``<storage>-volume``.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
VOLUME_SUFFIX = "-volume"


def job_storages(job: Any) -> list[str]:
    """The storage names a job mounts, as rest-server reads them (``extras.storages``, else the plugin's)."""
    extras = job.get("extras") if isinstance(job, dict) else None
    if not isinstance(extras, dict):
        return []
    listed = extras.get("storages")
    if isinstance(listed, list):
        return [str(item["name"]) for item in listed if isinstance(item, dict) and item.get("name")]
    names: list[str] = []
    plugins = extras.get(PLUGINS_KEY)
    for plugin in plugins if isinstance(plugins, list) else ():
        if isinstance(plugin, dict) and plugin.get("plugin") == PLUGIN:  # rest-server: the last one sets the list
            parameters = plugin.get("parameters")
            given = parameters.get("storageConfigNames") if isinstance(parameters, dict) else None
            names = [str(name) for name in given if name] if isinstance(given, list) else []
    return names


def listed(job: Any) -> list[Any] | None:
    """``extras.storages`` as rest-server reads it after converting the ``teamwise_storage`` plugin
    (k8s.js:1044-1064: only for a job without a list; a plugin without names makes ``[]``); None: the job
    mounts no storage (no list, no plugin, or a value that is not a list)."""
    extras = job.get("extras") if isinstance(job, dict) else None
    if not isinstance(extras, dict):
        return None
    own = extras.get("storages")
    if own not in (None, False, 0, ""):  # k8s.js tests `!config.extras.storages`: JavaScript's falsy values
        return own if isinstance(own, list) else None
    plugins = extras.get(PLUGINS_KEY)
    converted: list[Any] | None = None
    for plugin in plugins if isinstance(plugins, list) else ():
        if isinstance(plugin, dict) and plugin.get("plugin") == PLUGIN:  # the last one sets the list
            parameters = plugin.get("parameters")
            given = parameters.get("storageConfigNames") if isinstance(parameters, dict) else None
            converted = [{"name": name} for name in given] if isinstance(given, list) else []
    if converted is not None:
        return converted
    return own if isinstance(own, list) else None


def default_mount_path(name: str) -> str:
    return f"{MOUNT_ROOT}/{name}"


def entries(job: Any) -> list[Entry]:
    """The named entries of the job's storage list (``listed``), each with the path rest-server mounts it
    at (``mountPath``, else ``/mnt/<name>``); an empty list has none (it means the default storages)."""
    extras = job.get("extras") if isinstance(job, dict) else None
    written = isinstance(extras, dict) and isinstance(extras.get("storages"), list)
    found = []
    for index, item in enumerate(listed(job) or ()):
        if isinstance(item, dict) and item.get("name"):
            path = item.get("mountPath")
            found.append(Entry(index if written else None, str(item["name"]),
                               str(path) if path else default_mount_path(str(item["name"]))))
    return found


def mount_path_problem(path: Any) -> str | None:
    """Why a storage cannot be mounted at ``path`` in a task (None: it can): not an absolute, plain path, or a
    folder the container itself needs."""
    if not isinstance(path, str) or not path:
        return "a mountPath is an absolute folder path such as /mnt/data"
    if not path.startswith("/") or posixpath.normpath(path) != path or "//" in path or not path.isprintable():
        return (f"mountPath {path!r} is not a plain absolute path (no '..', '.', '//' or trailing '/'): the "
                f"container runtime refuses it or mounts it somewhere else than written; use one like /mnt/data")
    if ":" in path:
        return f"mountPath {path!r} contains ':', which Kubernetes refuses in a mount path"
    for folder in SYSTEM_FOLDERS:
        if path == folder or folder.startswith(path.rstrip("/") + "/") or path == "/":
            return (f"mountPath {path} would hide {folder}, which the task's container needs (its programs, "
                    f"libraries, settings, or OpenPAI's runtime and /dev/shm); mount the storage under /mnt")
    for folder in NO_MOUNT_INSIDE:
        if path.startswith(folder + "/"):
            return f"mountPath {path} is inside {folder}, which the kernel or OpenPAI's runtime owns; mount it under /mnt"
    return None


def pod_problems(job: Any) -> Iterator[tuple[tuple[Any, ...], str]]:
    """(path in the job, message) for each storage entry that rest-server accepts but that makes a task pod
    Kubernetes refuses after the wait, or that breaks the container: two volumes of one storage, two
    storages on one path, a volume name that is not a DNS-1123 label, a mountPath that is not a plain
    folder of the storage's own."""
    names: dict[str, int | None] = {}
    paths: dict[str, str] = {}
    for entry in entries(job):
        where: tuple[Any, ...] = ("extras", "storages", entry.index) if entry.index is not None else \
            ("extras", PLUGINS_KEY)
        volume = entry.name + VOLUME_SUFFIX
        if entry.name in names:
            yield where + ("name",), (
                f"storage '{entry.name}' is listed twice: rest-server makes one volume '{volume}' for each "
                f"entry, and Kubernetes refuses a pod with two volumes of one name (ValidateVolumes: "
                f"\"Duplicate value\") after the job waited in the queue; keep one entry for it")
        elif len(volume) > 63 or not _DNS_LABEL.match(volume):
            yield where + ("name",), (
                f"storage name '{entry.name}' makes the volume name '{volume}', which Kubernetes refuses (a "
                f"DNS-1123 label: lowercase letters, digits and '-', at most 63 characters); no storage of "
                f"OpenPAI can have that name: GET /api/v2/storages lists yours")
        names.setdefault(entry.name, entry.index)
        problem = mount_path_problem(entry.mount_path) if entry.index is not None else None
        if problem:
            yield where + ("mountPath",), problem
        elif entry.mount_path in paths and paths[entry.mount_path] != entry.name:
            yield where + ("mountPath",), (
                f"storages '{paths[entry.mount_path]}' and '{entry.name}' are both mounted at {entry.mount_path}: "
                f"Kubernetes refuses a container with two mounts on one path (ValidateVolumeMounts: \"must be "
                f"unique\") after the job waited in the queue; give each its own mountPath")
        paths.setdefault(entry.mount_path, entry.name)


def mounts(job: Any, user: str, yours: Mapping[str, Storage], read_only: Iterable[str] = ()) -> list[Mount]:
    """The volumes rest-server gives each task of ``job`` (k8s.js:1067-1102, 599-616) for ``user``, whose
    storages are ``yours`` (``GET /api/v2/storages``, by name); ``read_only``: the storages mounted read-only.
    A storage that is not the user's is left out (submit refuses it: ``unknown_storages``)."""
    items = listed(job)
    if items is None:
        return []
    if not items:  # "add default storages if config is empty"
        chosen = [Entry(None, s.name, default_mount_path(s.name)) for s in yours.values() if s.default]
    else:
        chosen = [entry for entry in entries(job) if entry.name in yours]
    locked = set(read_only)
    return [Mount(entry.name, entry.mount_path, "" if yours[entry.name].share else user, entry.name in locked)
            for entry in chosen]


def ignored_plugin_storages(job: Any) -> list[str]:
    """The storages a ``teamwise_storage`` plugin names that rest-server will not mount: it converts the
    plugin into ``extras.storages`` only for a job without ``extras.storages`` of its own, and openpai-runtime
    ignores the plugin itself. A job whose own list names them already loses nothing."""
    extras = job.get("extras") if isinstance(job, dict) else None
    if not isinstance(extras, dict) or not isinstance(extras.get("storages"), list) or not extras["storages"]:
        return []
    listed = set(job_storages(job))
    plugin_only = job_storages({"extras": {PLUGINS_KEY: extras.get(PLUGINS_KEY)}})
    return [name for name in plugin_only if name not in listed]


def unknown_storages(job: Any, available: Iterable[str]) -> list[str]:
    """The storages ``job`` mounts that are not among ``available`` (the user's, ``GET /api/v2/storages``).

    rest-server's submit refuses the first of them: 404 ``NoStorageError``,
    ``Storage NAME is not found.``; the client checks the same before the queue.
    """
    mine = set(available)
    return [name for name in job_storages(job) if name not in mine]


def summary_problem(data: Any) -> str | None:
    """What is wrong with a ``GET /api/v2/storages`` answer (None: a ``StorageSummary``)."""
    storages = data.get("storages") if isinstance(data, dict) else None
    if not isinstance(storages, list):
        return "an object with a list 'storages' was expected"
    if not all(isinstance(item, dict) and isinstance(item.get("name"), str) for item in storages):
        return "each storage needs a string 'name'"
    return None


def parse_summary(data: dict[str, Any]) -> list[Storage]:
    """A checked (``summary_problem``) ``StorageSummary`` as records."""
    return [Storage(item["name"], item.get("share") is not False, item.get("default") is True)
            for item in data["storages"]]


def _public_fields(data: Any) -> dict[str, Any]:
    """A storage's ``data`` without its secrets (keys, passwords), scalars only."""
    fields = data if isinstance(data, dict) else {}
    return {k: v for k, v in fields.items() if k not in _SECRET_FIELDS and isinstance(v, (str, int))}


def where(detail: Any) -> str:
    """A ``StorageDetail`` for people, secrets left out: ``nfs 10.0.0.5:/data``, ``samba //host/share``."""
    if not isinstance(detail, dict):
        return "a storage"
    kind = str(detail.get("type") or "unknown")
    shown = _public_fields(detail.get("data"))
    if kind == "nfs" and "server" in shown:
        return f"nfs {shown['server']}:{shown.get('path', '/')}"
    if kind == "samba" and "address" in shown:
        return f"samba {shown['address']}"
    if kind in ("azureFile", "azureBlob"):
        share = shown.get("shareName") or shown.get("containerName") or "?"
        return f"{kind} {share} (account {shown.get('accountName', '?')})"
    fields = ", ".join(f"{k} {v}" for k, v in sorted(shown.items()))
    return f"{kind}{' (' + fields + ')' if fields else ''}"
