"""``--workdir DIR``: ship a snapshot of a project folder with a job.

Every task of the job starts in a copy of DIR as it was at submit time, so the
relative paths in a user's script and data resolve as they do on the laptop.

How the snapshot travels depends on the cluster; both ways end in one command
put first in every task role's ``commands`` (OpenPAI's rest-server joins a
role's commands with newlines into one script, see
``middlewares/v2/protocol.js``, and the local cluster does the same, so its
``cd`` holds for the rest):

* **local cluster**: the gzip'd tar is stored in the cluster's state dir
  (``snapshots/<sha256>.tar.gz``, content-addressed, so resubmitting the same
  tree stores nothing new) and each task unpacks it into its fresh working
  directory. Snapshots up to ``MAX_SNAPSHOT_BYTES`` (100 MB before
  compression) are accepted, larger ones only with ``--force``.
* **real OpenPAI cluster**: the archive travels inside the job YAML itself,
  base64-encoded in that first command, and each task unpacks it into
  ``/tmp/paijob-workdir``. Nothing has to be configured, but the job text
  goes through OpenPAI's REST server and is stored with the job, so the
  compressed archive must stay under ``MAX_INLINE_BYTES`` (64 KiB): code and
  small configs, not data. Larger projects: bake an image, ``git clone`` in
  ``setup``, or put the files on a storage the job mounts.

What is left out: ``.git``, ``.venv``/``venv``, ``__pycache__``,
``.paijob`` and the patterns of the top-level ``.gitignore`` and
``.paijobignore`` (a subset of gitignore syntax: ``*``/``?``/``[...]``,
``**``, a leading ``/`` anchors, a trailing ``/`` means folders only, ``!``
re-includes). Everything here except ``store_local`` is pure: no cluster, no
network.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import io
import os
import re
import shlex
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from paijob.errors import PaijobError
from paijob.openpai import jsyaml
from paijob.safefile import atomic_write

ALWAYS_SKIPPED = (".git", ".hg", ".svn", ".venv", "venv", "__pycache__", ".paijob", ".mypy_cache",
                  ".pytest_cache", ".ruff_cache")
IGNORE_FILES = (".gitignore", ".paijobignore")
MAX_SNAPSHOT_BYTES = 100 * 1024 * 1024
MAX_INLINE_BYTES = 64 * 1024
INLINE_DIR = "/tmp/paijob-workdir"


class WorkdirError(PaijobError):
    """The folder cannot be shipped as asked (missing, too big, no mechanism for this cluster)."""


# --------------------------------------------------------------------------- ignore rules


@dataclass(frozen=True)
class Rule:
    pattern: str
    negate: bool
    dir_only: bool
    anchored: bool

    def matches(self, path: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        if self.anchored:
            return _glob(self.pattern, path)
        # a pattern without a slash matches the name at any depth
        return _glob(self.pattern, path.rsplit("/", 1)[-1]) or _glob("**/" + self.pattern, path)


def _glob(pattern: str, path: str) -> bool:
    """gitignore-style match of a whole relative path: ``**`` spans folders, ``*`` stays within one."""
    return _regex(pattern).fullmatch(path) is not None


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 1:]:
            close = pattern.index("]", i + 1)
            body = pattern[i + 1:close].replace("\\", "\\\\")
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = close + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def parse_ignore(text: str) -> list[Rule]:
    """The rules of one ignore file, in order (a later rule wins)."""
    rules = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = "/" in line
        line = line.lstrip("/")
        if line:
            rules.append(Rule(line, negate, dir_only, anchored))
    return rules


def ignored(rules: list[Rule], path: str, is_dir: bool) -> bool:
    verdict = False
    for rule in rules:
        if rule.matches(path, is_dir):
            verdict = not rule.negate
    return verdict


def load_rules(root: Path) -> list[Rule]:
    rules: list[Rule] = []
    for name in IGNORE_FILES:
        file = root / name
        if file.is_file():
            rules.extend(parse_ignore(file.read_text(encoding="utf-8", errors="replace")))
    return rules


# --------------------------------------------------------------------------- snapshot


@dataclass(frozen=True)
class Snapshot:
    """A folder packed as a gzip'd tar, with what it holds."""

    root: Path
    files: tuple[str, ...]
    size: int  # bytes before compression
    archive: bytes

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.archive).hexdigest()

    def describe(self) -> str:
        return (f"workdir {self.root}: {len(self.files)} files, {human_size(self.size)} "
                f"({human_size(len(self.archive))} compressed)")


def human_size(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def list_files(root: Path) -> list[tuple[str, int]]:
    """(relative path, size) of every regular file that goes into the snapshot, sorted."""
    rules = load_rules(root)
    found: list[tuple[str, int]] = []
    for folder, dirs, files in os.walk(root):
        rel_folder = os.path.relpath(folder, root).replace(os.sep, "/")
        prefix = "" if rel_folder == "." else rel_folder + "/"
        dirs[:] = sorted(d for d in dirs if d not in ALWAYS_SKIPPED and not ignored(rules, prefix + d, True)
                         and not os.path.islink(os.path.join(folder, d)))
        for name in sorted(files):
            rel = prefix + name
            path = os.path.join(folder, name)
            if ignored(rules, rel, False) or not os.path.isfile(path):
                continue
            found.append((rel, os.path.getsize(path)))
    return sorted(found)


def snapshot(root: str | Path, *, force: bool = False, limit: int = MAX_SNAPSHOT_BYTES) -> Snapshot:
    """Pack ``root`` as it is now; refuse more than ``limit`` bytes unless ``force``.

    The archive is deterministic (sorted names, zero mtimes and owners), so the
    same tree gives the same digest.
    """
    folder = Path(root).expanduser().resolve()
    if not folder.is_dir():
        raise WorkdirError(f"--workdir {root}: no such folder")
    entries = list_files(folder)
    size = sum(s for _, s in entries)
    if size > limit and not force:
        biggest = sorted(entries, key=lambda e: -e[1])[:3]
        names = ", ".join(f"{n} ({human_size(s)})" for n, s in biggest)
        raise WorkdirError(
            f"--workdir {root} holds {human_size(size)} in {len(entries)} files, over the "
            f"{human_size(limit)} limit (largest: {names}); list what the job does not need in "
            f"{folder / '.paijobignore'} (gitignore syntax), or pass --force")
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as zipped, \
            tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, _ in entries:
            info = tar.gettarinfo(str(folder / rel), arcname=rel)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(folder / rel, "rb") as handle:
                tar.addfile(info, handle)
    return Snapshot(folder, tuple(n for n, _ in entries), size, buffer.getvalue())


# --------------------------------------------------------------------------- shipping


def local_command(archive_path: Path) -> str:
    """Unpack a stored snapshot into the task's (fresh) working directory."""
    return f"tar -xzf {shlex.quote(str(archive_path))}"


def inline_command(snap: Snapshot) -> str:
    """Unpack a snapshot carried in the command itself into ``INLINE_DIR`` and go there."""
    if len(snap.archive) > MAX_INLINE_BYTES:
        raise WorkdirError(
            f"{snap.describe()}: too big to carry inside the job (limit {human_size(MAX_INLINE_BYTES)} "
            "compressed, OpenPAI stores the job text); leave data out with .paijobignore, or ship the "
            "code another way: an image built from runtime/Dockerfile, `--set 'setup=[git clone ...]'`, "
            "or a storage the job mounts")
    data = base64.b64encode(snap.archive).decode("ascii")
    return (f"rm -rf {INLINE_DIR} && mkdir -p {INLINE_DIR} && cd {INLINE_DIR} && "
            f"echo {data} | base64 -d | tar -xz")


def store_local(snap: Snapshot, state_dir: Path) -> Path:
    """Keep the archive in the local cluster's state dir; returns its path."""
    folder = state_dir / "snapshots"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"{snap.digest}.tar.gz"
    if not path.exists():
        atomic_write(path, snap.archive)
    return path


def prepend_command(text: str, command: str) -> str:
    """The job YAML with ``command`` first in every task role's commands."""
    job: Any = jsyaml.load_job(text, "the job").value
    if not isinstance(job, dict) or not isinstance(job.get("taskRoles"), dict):
        raise WorkdirError("the job has no taskRoles to start in the workdir")
    for role in job["taskRoles"].values():
        if isinstance(role, dict):
            role["commands"] = [command, *(role.get("commands") or [])]
    return yaml.safe_dump(job, sort_keys=False, width=1 << 30, allow_unicode=True)
