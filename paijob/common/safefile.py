"""Writing files so that a reader never sees half of one: paijob's one atomic write.

:func:`atomic_write` is the single place that writes a file atomically: a
temporary file in the same folder (``.NAME.XXXX.tmp``), fsync, ``os.replace``
over the final name, then an fsync of the folder so the rename survives a
crash; on any failure the temporary file is removed and the old file is left
alone. Profiles, the local cluster's token and server info, workdir
snapshots, checkpoints and ``-o FILE`` all go through it. Standard library
and ``paijob.errors`` only, so ``paijob.runtime`` may import it.

:func:`write_text` writes an output file the way a user expects ``-o FILE`` to behave:

* A regular file (or a new one) is replaced atomically: a temporary file in
  the same folder, fsync, then ``os.replace``, so a reader never sees half a
  file and a failed write leaves the old file alone. The old file's
  permission bits are kept; a new file gets ``0666 & ~umask`` as ``>`` would.
* A symlink is never replaced: the file it points to is written (atomically,
  at the target's path), as the shell's ``>`` writes through a link.
* Anything else that is not a folder — ``/dev/null`` and other character
  devices, a FIFO — is written in place, never renamed over (as root, a rename
  would replace ``/dev/null`` itself). Writing to a FIFO waits for a reader,
  like ``>`` does.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from paijob.errors import PaijobError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _resolve(path: Path) -> Path:
    """The path to write: ``path`` itself, or where its symlink (chain) points."""
    if not path.is_symlink():
        return path
    try:
        return Path(os.path.realpath(path, strict=True))
    except FileNotFoundError:
        # a dangling link: create its target, as `>` would
        return Path(os.path.realpath(path))
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise PaijobError(f"cannot write {path}: it is a symlink loop") from None
        raise PaijobError(f"cannot write {path}: {error.strerror or error}") from None


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` as described in the module docstring.

    Raises ``PaijobError`` with the path and the reason when it cannot.
    """
    given = Path(path)
    target = _resolve(given)
    shown = str(given) if target == given else f"{given} (-> {target})"
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as error:
        raise PaijobError(f"cannot write {shown}: {error.strerror or error}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise PaijobError(f"cannot write {shown}: it is a folder; give a file name")
    if mode is not None and not stat.S_ISREG(mode):
        _write_in_place(target, text, shown)
    else:
        _replace_atomically(target, text, shown, None if mode is None else stat.S_IMODE(mode))


def _write_in_place(target: Path, text: str, shown: str) -> None:
    try:
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        raise PaijobError(f"cannot write {shown}: {error.strerror or error}") from None


def _replace_atomically(target: Path, text: str, shown: str, mode: int | None) -> None:
    folder = target.parent
    if not folder.is_dir():
        raise PaijobError(f"cannot write {shown}: folder {folder} does not exist")
    try:
        atomic_write(target, text.encode("utf-8"), mode=mode if mode is not None else 0o666 & ~_umask())
    except OSError as error:
        hint = f" (is {folder} writable?)" if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else ""
        raise PaijobError(f"cannot write {shown}: {error.strerror or error}{hint}") from None


Content = bytes | Callable[[IO[bytes]], object]


def atomic_write(path: str | os.PathLike[str], content: Content, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``content`` so that readers see the old file or the whole new one.

    ``content`` is the bytes to write, or a function that writes them to the
    binary handle it is given (``torch.save``, ``yaml.dump`` into a stream).
    ``mode`` is the new file's permission bits, set before anything is
    written; without it the file is private to its owner (0600, mkstemp's).
    The folder must exist. Raises what the filesystem raised (``OSError``),
    or what ``content`` raised, after removing the temporary file.
    """
    target = Path(path)
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            if isinstance(content, bytes):
                handle.write(content)
            else:
                content(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    fsync_folder(target.parent)


def fsync_folder(folder: Path) -> None:
    """Make the rename durable; some filesystems cannot fsync a folder, which is fine."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
