"""How a snapshot travels with a job, in one command first in every task role.

OpenPAI's rest-server joins a role's commands with newlines into one script
(``middlewares/v2/protocol.js``), and the local cluster does the same, so the
``cd`` of that first command holds for the rest.

* **local cluster**: the archive is stored in the cluster's state dir
  (``snapshots/<sha256>.tar.gz``, content-addressed, so resubmitting the same
  tree stores nothing new) and each task unpacks it into its fresh working
  directory. Storing (or reusing) a snapshot touches it, and ``local prune``
  keeps snapshots stored within the last hour and those of jobs not finished.
* **real OpenPAI cluster**: the archive travels inside the job text, once,
  base64 in ``parameters.paijobWorkdir``; each role's first command reads it
  as ``<% $parameters.paijobWorkdir %>`` (the rest-server renders the tag into
  each role's entrypoint) and unpacks it into ``$TMPDIR/paijob-workdir`` (``/tmp`` when
  TMPDIR is unset, as in a container; tasks sharing a machine, such as the local
  cluster's, each have their own TMPDIR, so one task's unpacking never removes another's). The job
  text goes through express's ``bodyParser.text()`` whose default limit is
  100 kB (``config/express.js``): a job over it is refused here, naming the
  workdir's share. The job text is stored with the job and every user of the
  cluster with a token can read it (``GET /api/v2/jobs/:name/config``).
"""

from __future__ import annotations

import base64
import copy
import os
import shlex
from pathlib import Path
from typing import Any, NamedTuple

from paijob.common.safefile import atomic_write
from paijob.openpai import jsyaml
from paijob.openpai.jsdump import dump_job
from paijob.openpai.jsyaml import SERVER_BODY_LIMIT
from paijob.workdir.pack import Snapshot, human_size
from paijob.workdir.rules import WorkdirError

INLINE_DIR = '"${TMPDIR:-/tmp}/paijob-workdir"'  # a shell word: quoted, with the default
PARAMETER = "paijobWorkdir"


def local_command(archive_path: Path) -> str:
    """Unpack a stored snapshot into the task's (fresh) working directory, or say why it cannot."""
    path = shlex.quote(str(archive_path))
    gone = shlex.quote(f"paijob: the workdir snapshot {archive_path} is gone (removed by hand or by an old "
                       "`paijob local prune`?); submit the job again")
    return f"{{ test -f {path} || {{ echo {gone} >&2; exit 1; }}; }} && tar -xzf {path}"


def inline_command() -> str:
    """Unpack the snapshot carried in the job's ``parameters`` into ``INLINE_DIR`` and go there."""
    return (f"rm -rf {INLINE_DIR} && mkdir -p {INLINE_DIR} && cd {INLINE_DIR} && "
            f"echo <% $parameters.{PARAMETER} %> | base64 -d | tar -xz")


def store_local(snap: Snapshot, path: Path) -> Path:
    """Keep the archive at ``path``, where the local cluster reads it (``paijob.local.layout.snapshot``: by
    content, so an existing file is the same archive and is only touched); returns ``path``.

    The one effect of this package: only a real submit takes it (``paijob.api.ship``).
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.exists():
        os.utime(path)  # recently stored: local prune leaves it for the job about to be submitted
    else:
        atomic_write(path, snap.archive)
    return path


def _load(text: str) -> dict[str, Any]:
    return _with_roles(jsyaml.load_job(text, "the job").value)


def _with_roles(job: Any) -> dict[str, Any]:
    if not isinstance(job, dict) or not isinstance(job.get("taskRoles"), dict):
        raise WorkdirError("the job has no taskRoles to start in the workdir")
    return job


def _editable(job: Any) -> dict[str, Any]:
    """A copy of ``job`` to edit: the caller's stays the job it checked."""
    return copy.deepcopy(_with_roles(job))


def _dump(job: dict[str, Any]) -> str:
    return dump_job(job, width=1 << 30, allow_unicode=True)


def prepend_command(text: str, command: str) -> str:
    """The job YAML with ``command`` first in every task role's commands."""
    job = _load(text)
    _prepend(job, command)
    return _dump(job)


def _prepend(job: dict[str, Any], command: str) -> None:
    for role in job["taskRoles"].values():
        if isinstance(role, dict):
            role["commands"] = [command, *(role.get("commands") or [])]


def embed(text: str, snap: Snapshot, limit: int = SERVER_BODY_LIMIT) -> str:
    """The job text carrying ``snap`` once in ``parameters``, unpacked first by every role."""
    return _embedded(_load(text), snap, limit)


def _embedded(job: dict[str, Any], snap: Snapshot, limit: int = SERVER_BODY_LIMIT) -> str:
    """``embed`` of a job mapping (edited in place)."""
    parameters = job.get("parameters")
    if parameters is None:
        parameters = job["parameters"] = {}
    if not isinstance(parameters, dict):
        raise WorkdirError("the job's parameters is not a mapping; the workdir travels in parameters."
                           f"{PARAMETER}")
    encoded = base64.b64encode(snap.archive).decode("ascii")
    parameters[PARAMETER] = encoded
    _prepend(job, inline_command())
    result = _dump(job)
    size = len(result.encode("utf-8"))
    if size > limit:
        raise WorkdirError(
            f"the job would be {human_size(size)}, over the {human_size(limit)} an OpenPAI server accepts "
            f"(express bodyParser.text's default limit, HTTP 413); the workdir {snap.root} is "
            f"{human_size(len(encoded))} of it ({len(snap.files)} files, {human_size(len(snap.archive))} "
            "compressed, base64): leave data out with .paijobignore, or ship the code another way: an image "
            "built from runtime/Dockerfile, `--set 'setup=[git clone ...]'`, or a storage the job mounts")
    return result


class Carried(NamedTuple):
    """A job that starts every task in a snapshot: its text, the job as the server reads that text
    (``paijob.openpai.jsdump`` wrote it), and lines saying how the snapshot travels."""

    text: str
    job: dict[str, Any]
    notes: list[str]


def carried(job: Any, snap: Snapshot, stored_at: Path | None) -> Carried:
    """``job`` (a loaded job mapping, left as it is) starting every task in ``snap``. Pure.

    ``stored_at``: where the local cluster keeps the archive (the text names it there;
    :func:`store_local` writes it when the job is really submitted), or None for a real
    cluster (the snapshot is carried in the job).
    """
    edited = _editable(job)
    if stored_at is not None:
        path = stored_at
        _prepend(edited, local_command(path))
        lines = [f"{snap.describe()}, kept in {path} (written when the job is submitted, never by --dry-run)"]
        return Carried(_dump(edited), edited, lines + list(snap.left_out))
    shipped = _embedded(edited, snap)
    lines = [f"{snap.describe()}, carried in the job's parameters.{PARAMETER} (unpacked in $TMPDIR/paijob-workdir; "
             "readable by every user of the cluster)"]
    return Carried(shipped, edited, lines + list(snap.left_out))
