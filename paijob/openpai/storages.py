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

Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

PLUGIN = "teamwise_storage"
PLUGINS_KEY = "com.microsoft.pai.runtimeplugin"
MOUNT_ROOT = "/mnt"
_SECRET_FIELDS = ("password", "accountKey", "accountSASToken", "key", "token")


# One entry of ``GET /api/v2/storages`` (the functional form: no second pass of typing over a class).
Storage = NamedTuple("Storage", [("name", str), ("share", bool), ("default", bool)])


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
