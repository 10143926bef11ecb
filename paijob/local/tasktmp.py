"""A local task's TMPDIR: short, whatever the state folder, the job's name and HOME (issue 53 item 6).

A task's temporary files live in its work folder (``<state>/work/<user>~<job>/<attempt>/<role>-<index>/.tmp``,
0700): like a container's own ``/tmp``, what it leaves there stays with the job and goes with ``local prune``,
never in the laptop's TMPDIR. But a Unix socket's path holds at most 107 bytes, and multiprocessing puts its
listener at ``$TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX`` (32 more): with a long state path or job name every
DataLoader worker failed with ``OSError: AF_UNIX path too long`` and the ranks sat in ``next()``.

So TMPDIR names that folder through a link in a short private folder: ``/tmp/paijob-tmp-XXXXXXXX/t`` (26 bytes),
the folder made by ``tempfile.mkdtemp`` (0700, a name no one else can take or list, so no other user reads the
link to learn the job's name), removed when the task ends; a folder left by a server that died is removed when
the next one starts (:func:`sweep`). The base is the server's own temporary folder when it is short, else the
first usable of ``/tmp``, ``/var/tmp``, ``/dev/shm``; where none is, TMPDIR stays the real folder.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

PREFIX = "paijob-tmp-"
LINK = "t"
SHORT_BASE = 24  # bytes: a base up to this long keeps TMPDIR under 40, and sockets under it well within 107
BASES = ("/tmp", "/var/tmp", "/dev/shm")  # noqa: S108 - the folders themselves, judged before use
SOCKET_ROOM = 107 - 40  # a TMPDIR longer than this leaves too little for a socket's name under it


def _usable(base: str) -> bool:
    """A folder where a private folder can be made safely: a real folder (not a link), writable by this user,
    and either sticky (no one removes or renames another's entry) or this user's own and closed to others."""
    try:
        st = os.lstat(base)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or not os.access(base, os.W_OK | os.X_OK):
        return False
    return bool(st.st_mode & stat.S_ISVTX) or (st.st_uid == os.getuid() and not st.st_mode & 0o022)


def bases() -> list[str]:
    """Where short folders may be made, best first."""
    own = tempfile.gettempdir()
    found = [own] if len(os.fsencode(own)) <= SHORT_BASE else []
    return [base for base in dict.fromkeys([*found, *BASES]) if _usable(base)]


def short(real: Path) -> tuple[str, Path | None]:
    """(TMPDIR for a task whose temporary folder is ``real``, the short folder made for it or None).

    ``real`` is made 0700 if it is not there. The short folder holds one link, ``t``, to ``real``."""
    real.mkdir(mode=0o700, exist_ok=True)
    for base in bases():
        try:
            folder = Path(tempfile.mkdtemp(prefix=PREFIX, dir=base))
        except OSError:
            continue
        try:
            (folder / LINK).symlink_to(real.resolve())
        except OSError:
            remove(folder)
            continue
        return str(folder / LINK), folder
    return str(real), None


def remove(folder: Path | None) -> None:
    """Remove a short folder ``short`` made (its link, and anything a task put beside it; never what the link
    names: ``rmtree`` removes a link, it does not follow it)."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def sweep(work: Path) -> list[str]:
    """Remove this user's short folders whose link names a folder under ``work`` (the state dir's work
    folder, when no task of it runs: a server that died left them) or names nothing any more; the removed."""
    inside = os.path.realpath(work).rstrip("/") + "/"
    removed = []
    for base in bases():
        try:
            entries = list(os.scandir(base))
        except OSError:
            continue
        for entry in entries:
            if not entry.name.startswith(PREFIX):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                target = os.readlink(os.path.join(entry.path, LINK))
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and (
                    target.startswith(inside) or not os.path.exists(target)):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
    return removed
