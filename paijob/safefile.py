"""Writing an output file the way a user expects ``-o FILE`` to behave.

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
from pathlib import Path

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
        fd, temp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as error:
        raise PaijobError(
            f"cannot write {shown}: {error.strerror or error} (is {folder} writable?)"
        ) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), mode if mode is not None else 0o666 & ~_umask())
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except OSError as error:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise PaijobError(f"cannot write {shown}: {error.strerror or error}") from None
    fsync_folder(folder)


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
