"""Reading a file under a folder without ever leaving it, whatever is swapped in while it is read.

Checking a path by name and then opening it by name is a race: between the two, a file can become a
link to ``~/.config/gh/hosts.yml`` (issue 55: 3 renders of 150 read the secret). Here nothing is opened
by a name that was checked earlier: the walk starts from the folder's own descriptor and opens each
part of the path relative to the previous one (``openat``, Python's ``dir_fd``) with ``O_NOFOLLOW``. A
link met on the way is read (``readlinkat``) and its target walked the same way, from the folder's root
for an absolute target that lies in the folder, from where it was for a relative one; a ``..`` steps
back to the descriptor before, and never above the folder. What is opened at the end is what was
walked to, so a link swapped in at any moment is either walked (and confined) or refused.

:func:`read_beneath` is the one entry; its failures are typed (:class:`Outside`, :class:`NotRegular`)
or ``None`` for a path that is not there, and never a traceback for any path form (a NUL byte, a name
longer than the system allows, a lone surrogate, a folder, a FIFO, a device).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence

MAX_LINKS = 40  # as the kernel's own limit on links followed in one path (ELOOP)
_NOT_THERE = (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Outside(Exception):  # noqa: N818 - a verdict, not an error of the program
    """A link on the path leads out of the folder; ``target`` is where it points (as written, normalised)."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.target = target


class NotRegular(Exception):  # noqa: N818
    """The path names something other than a regular file; ``kind`` says what (``folder``, ``FIFO``, ...)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class TooManyLinks(Exception):  # noqa: N818
    """More than :data:`MAX_LINKS` links on the way (a loop)."""


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words."""
    for test, name in ((stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISLNK, "link"), (stat.S_ISREG, "file")):
        if test(mode):
            return name
    return "special file"


def split(name: str) -> list[str]:
    """A relative name's parts (``a//b/./c`` -> ``[a, b, c]``); ``..`` is kept, for the walk to judge."""
    return [part for part in name.split("/") if part not in ("", ".")]


def _valid(part: str) -> bool:
    """A name the system can take: no NUL, encodable (a lone surrogate is not), short enough."""
    if "\0" in part:
        return False
    try:
        encoded = os.fsencode(part)
    except UnicodeError:
        return False
    return len(encoded) <= 255


class _Walk:
    """One walk's state: the stack of open folders (the root first) and the parts still to walk."""

    def __init__(self, folder: str, parts: Sequence[str]) -> None:
        self.folder = folder
        self.fds = [os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
        self.names: list[str] = []
        self.todo = list(reversed(parts))
        self.links = 0
        self.last_link = ""

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def here(self, *more: str) -> str:
        return os.path.join(self.folder, *self.names, *more)

    def up(self) -> None:
        if len(self.fds) == 1:
            raise Outside(self.last_link or os.path.normpath(self.here("..")))
        os.close(self.fds.pop())
        self.names.pop()

    def follow(self, part: str) -> None:
        """``part`` is a link: walk its target instead (from the root for an absolute one in the folder)."""
        self.links += 1
        if self.links > MAX_LINKS:
            raise TooManyLinks
        try:
            target = os.readlink(part, dir_fd=self.fds[-1])
        except OSError as error:
            if error.errno != errno.EINVAL:  # EINVAL: no longer a link (swapped since the lstat): walk it again
                raise
            self.retry(part)
            return
        self.last_link = os.path.normpath(target if os.path.isabs(target) else self.here(target))
        if os.path.isabs(target):
            rest = _inside(self.folder, target)
            if rest is None:
                raise Outside(self.last_link)
            for fd in self.fds[1:]:
                os.close(fd)
            del self.fds[1:]
            self.names = []
            self.todo.extend(reversed(rest))
        else:
            self.todo.extend(reversed(split(target)))

    def enter(self, part: str, st: os.stat_result) -> None:
        try:
            fd = os.open(part, _DIR_FLAGS, dir_fd=self.fds[-1])
        except OSError as error:
            if error.errno not in (errno.ELOOP, errno.ENOTDIR):  # became a link or a file since the lstat
                raise
            self.retry(part)
            return
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):  # swapped since: walk it again
            os.close(fd)
            self.retry(part)
            return
        self.fds.append(fd)
        self.names.append(part)

    def retry(self, part: str) -> None:
        self.links += 1  # a part that keeps changing under the walk counts as a link: bounded
        if self.links > MAX_LINKS:
            raise TooManyLinks
        self.todo.append(part)

    def read(self, part: str, limit: int | None) -> tuple[bytes, str] | None:
        """The file ``part`` of the current folder, opened without following a link; None: swapped, walk again."""
        try:
            fd = os.open(part, _FILE_FLAGS, dir_fd=self.fds[-1])
        except OSError as error:
            if error.errno == errno.ELOOP:  # became a link since the lstat
                self.retry(part)
                return None
            raise
        with os.fdopen(fd, "rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise NotRegular(kind_of(mode))
            data = handle.read() if limit is None else handle.read(limit + 1)
        return data, self.here(part)

    def step(self, limit: int | None) -> tuple[bytes, str] | None:
        part = self.todo.pop()
        if part in ("", "."):
            return None
        if part == "..":
            self.up()
            return None
        if not _valid(part):
            raise FileNotFoundError(errno.ENOENT, "not a valid file name")
        st = os.stat(part, dir_fd=self.fds[-1], follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            self.follow(part)
        elif self.todo:
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "not a folder")
            self.enter(part, st)
        elif not stat.S_ISREG(st.st_mode):
            raise NotRegular(kind_of(st.st_mode))
        else:
            return self.read(part, limit)
        return None


def _inside(folder: str, target: str) -> list[str] | None:
    """The parts of absolute ``target`` below ``folder`` (also when ``target`` names it through a link
    above it, such as ``/tmp`` for ``/private/tmp``), or None when it lies elsewhere. Only which part of
    the folder to walk is decided here: the walk itself never leaves the folder."""
    for candidate in (target, _real(target)):
        if candidate is None:
            continue
        if candidate == folder or candidate.startswith(folder.rstrip("/") + "/"):
            return split(candidate[len(folder):])
    return None


def _real(path: str) -> str | None:
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return None


def read_beneath(folder: str, parts: Sequence[str], limit: int | None = None) -> tuple[bytes, str] | None:
    """The bytes of the regular file at ``parts`` under ``folder`` (a resolved path) and its path there (no
    link in it), reading at most ``limit + 1`` bytes when a limit is given (the caller judges the size).

    None: nothing there (a missing part, a file where a folder should be, a name the system cannot take).
    Raises :class:`Outside` (a link leads out of ``folder``, or ``..`` climbs above it), :class:`NotRegular`
    (a folder, a FIFO, a device: never opened for reading), :class:`TooManyLinks`, and ``OSError`` for
    what the system refuses (a folder that cannot be read, ``EACCES``).
    """
    try:
        walk = _Walk(folder, parts)
    except OSError as error:
        if error.errno in _NOT_THERE:
            return None
        raise
    try:
        while walk.todo:
            found = walk.step(limit)
            if found is not None:
                return found
        raise NotRegular("folder")  # the walk ended on a folder (the name was empty or only "..")
    except OSError as error:
        if error.errno in _NOT_THERE:
            return None
        if error.errno == errno.ELOOP:
            raise TooManyLinks from None
        raise
    finally:
        walk.close()
