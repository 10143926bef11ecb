"""The job output folder: ``PAIJOB_OUTPUT_DIR``, and copying files out of it (``paijob cp``).

Every task of a job sees the same folder in ``PAIJOB_OUTPUT_DIR``, kept across
the job's attempts and task retries, so a retried attempt finds the
checkpoints of the one before. On the local cluster it is
``<state dir>/outputs/<user~name>``, made by the task runner. On a real
OpenPAI cluster it is the template value ``outputDir``: a path on a storage
the job mounts (OpenPAI's storage plugin); paijob cannot reach that storage
from the laptop, so ``paijob cp`` serves the local cluster only and says so.

The folder was written by the job, which is untrusted code, so the copy is
``cp -r`` done carefully:

* a link is never followed out of the output folder: inside the copied tree a
  link whose target stays in the output folder is recreated as a relative
  link; links out, dangling links and loops are listed and skipped, as are
  FIFOs, sockets and devices (never opened: ``O_NONBLOCK | O_NOFOLLOW`` and
  ``fstat`` before a byte is read, so nothing can block);
* a file that vanishes or changes while it is copied (a job rotating its
  checkpoints) is listed and not written, never half-copied;
* copies get the mode ``cp`` gives a new file: ``0666`` (``0777`` when the
  source is executable) less the user's umask; the local cluster's own
  ``0600`` (it runs with umask 077) is not carried over;
* the JOB part must be a job id (``NAME`` or ``USER~NAME``), and PATH may not
  climb out with ``..``.

Pure apart from ``copy_out``; nothing here imports the client.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from paijob.errors import PaijobError
from paijob.openpai.names import NAME_PATTERN, js_match

OUTPUT_ENV = "PAIJOB_OUTPUT_DIR"
CHUNK = 1 << 20


class OutputError(PaijobError):
    """A ``paijob cp`` source or destination that cannot be used as given."""


@dataclass
class CopyReport:
    """What ``copy_out`` wrote, and what it left out with the reason."""

    target: Path
    files: int = 0
    skipped: list[str] = field(default_factory=list)

    def skip(self, path: str, why: str) -> None:
        self.skipped.append(f"{path} ({why})")


def local_output_dir(state_dir: Path, job_id: str) -> Path:
    """The output folder of job ``user~name`` on the local cluster whose state is in ``state_dir``."""
    return state_dir / "outputs" / job_id


def split_source(source: str) -> tuple[str, str]:
    """``JOB:PATH`` -> (JOB, PATH); JOB is ``NAME`` or ``USER~NAME``; PATH may be empty (the whole folder)."""
    job, sep, path = source.partition(":")
    if not sep or not job:
        raise OutputError(f"{source!r}: give JOB:PATH, e.g. demo1:checkpoints/last.pt (JOB as in "
                          "`paijob status`; PATH inside the job's output folder, '.' for all of it)")
    parts = job.split("~", 1)
    if not all(js_match(NAME_PATTERN, part) for part in parts):
        raise OutputError(f"{source!r}: {job!r} is not a job id; JOB is NAME or USER~NAME with letters, digits, "
                          "_ and - only (as in `paijob list`)")
    return job, path


def _parts(path: str) -> list[str]:
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise OutputError(f"{path!r}: '..' is not allowed; give a path inside the job's output folder")
    return parts


def _inside(real_root: str, path: str) -> bool:
    return path == real_root or path.startswith(real_root.rstrip("/") + "/")


def resolve_inside(root: Path, path: str) -> Path:
    """``root/path`` with links resolved, refusing a path that leaves ``root`` (``..``, a link out)."""
    real_root = os.path.realpath(root)
    target = os.path.realpath(os.path.join(real_root, *_parts(path)))
    if not _inside(real_root, target):
        raise OutputError(f"{path!r} is outside the job's output folder (a link out of it?)")
    return Path(target)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _describe(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"), (stat.S_ISREG, "a file"),
                       (stat.S_ISLNK, "a link")):
        if test(mode):
            return name
    return "a special file"


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


class _Copier:
    """One copy: the output folder's real path, the report, the umask."""

    def __init__(self, real_root: str, report: CopyReport) -> None:
        self.real_root = real_root
        self.report = report
        self.umask = _umask()

    def shown(self, source: str) -> str:
        return os.path.relpath(source, self.real_root)

    def copy_file(self, source: str, target: Path) -> None:
        """Copy one regular file to ``target`` through a temporary file; list it if it changes meanwhile."""
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(source, flags)
        except FileNotFoundError:
            self.report.skip(self.shown(source), "vanished while copying")
            return
        except OSError as error:
            self.report.skip(self.shown(source), error.strerror or str(error))
            return
        with os.fdopen(fd, "rb") as reader:
            before = os.fstat(reader.fileno())
            if not stat.S_ISREG(before.st_mode):
                self.report.skip(self.shown(source), f"now {_describe(before.st_mode)}, not copied")
                return
            mode = 0o777 if before.st_mode & stat.S_IXUSR else 0o666
            temp = target.parent / f".{target.name}.paijob-cp.{os.getpid()}"
            try:
                with open(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode), "wb") as writer:
                    for chunk in iter(lambda: reader.read(CHUNK), b""):
                        writer.write(chunk)
                after = os.fstat(reader.fileno())
                if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
                    temp.unlink()
                    self.report.skip(self.shown(source), "changed while copying, not copied: copy it again")
                    return
                os.replace(temp, target)
            except BaseException:
                temp.unlink(missing_ok=True)
                raise
        self.report.files += 1

    def copy_link(self, source: str, target: Path) -> None:
        """Recreate a link whose target stays in the output folder as a relative link; list the others."""
        shown = self.shown(source)
        try:
            os.stat(source)
        except FileNotFoundError:
            self.report.skip(shown, f"dangling link to {os.readlink(source)}")
            return
        except OSError as error:
            why = "link loop" if error.errno == errno.ELOOP else error.strerror or str(error)
            self.report.skip(shown, why)
            return
        resolved = os.path.realpath(source)
        if not _inside(self.real_root, resolved):
            self.report.skip(shown, f"link out of the job's output folder, to {os.readlink(source)}")
            return
        link = os.path.relpath(resolved, os.path.realpath(os.path.dirname(source)))
        existing = _lstat(target)
        if existing is not None and not stat.S_ISLNK(existing.st_mode):
            self.report.skip(shown, f"{target} is {_describe(existing.st_mode)} in the way")
            return
        if existing is not None:
            target.unlink()
        os.symlink(link, target)
        self.report.files += 1

    def place(self, source: str, target: Path) -> bool:
        """True when ``target`` may take a file: absent or a regular file (never a link, folder or FIFO)."""
        existing = _lstat(target)
        if existing is None or stat.S_ISREG(existing.st_mode):
            return True
        self.report.skip(self.shown(source), f"{target} is {_describe(existing.st_mode)} in the way")
        return False

    def copy_tree(self, source: str, target: Path) -> None:
        """Copy the folder ``source`` into the (existing or new) folder ``target``; links are never followed."""
        stack = [(source, target)]
        while stack:
            folder, into = stack.pop()
            existing = _lstat(into)
            if existing is None:
                os.mkdir(into)  # 0777 less the umask, as cp
            elif not stat.S_ISDIR(existing.st_mode):
                self.report.skip(self.shown(folder), f"{into} is {_describe(existing.st_mode)} in the way")
                continue
            try:
                with os.scandir(folder) as listing:
                    children = sorted(listing, key=lambda entry: entry.name)
            except FileNotFoundError:
                self.report.skip(self.shown(folder), "vanished while copying")
                continue
            except OSError as error:
                self.report.skip(self.shown(folder), error.strerror or str(error))
                continue
            for child in children:
                stack.extend(self.copy_entry(child.path, into / child.name))

    def copy_entry(self, source: str, target: Path) -> list[tuple[str, Path]]:
        """Copy one entry of a folder; returns the subfolder to walk next, if it is one."""
        mode = _lstat(Path(source))
        if mode is None:
            self.report.skip(self.shown(source), "vanished while copying")
        elif stat.S_ISDIR(mode.st_mode):
            return [(source, target)]
        elif stat.S_ISLNK(mode.st_mode):
            self.copy_link(source, target)
        elif stat.S_ISREG(mode.st_mode):
            if self.place(source, target):
                self.copy_file(source, target)
        else:
            self.report.skip(self.shown(source), _describe(mode.st_mode) + ", not copied")
        return []


def destination(dest: Path, name: str, *, is_dir: bool, contents: bool) -> Path:
    """Where a source called ``name`` lands for ``DEST`` (``contents``: JOB:. copies into DEST itself)."""
    try:
        found = os.lstat(dest)
    except FileNotFoundError:
        parent = dest.parent
        if not parent.is_dir():
            raise OutputError(f"DEST {dest}: its folder {parent} does not exist; create it first") from None
        return dest
    if stat.S_ISLNK(found.st_mode):
        if dest.is_dir():  # the user's own link to a folder: copy into that folder
            return dest if contents else dest / name
        raise OutputError(f"DEST {dest} is a link (to {os.readlink(dest)}) that is not a folder; give the path "
                          "it points to, or remove the link")
    if stat.S_ISDIR(found.st_mode):
        return dest if contents else dest / name
    if stat.S_ISREG(found.st_mode):
        if is_dir:
            raise OutputError(f"DEST {dest} is a file; a folder cannot be copied onto it: give a folder or a new path")
        return dest
    raise OutputError(f"DEST {dest} is {_describe(found.st_mode)}; give a file or folder path")


def _check_landing(target: Path, is_dir: bool) -> None:
    found = _lstat(target)
    if found is None:
        return
    if is_dir and not stat.S_ISDIR(found.st_mode):
        raise OutputError(f"{target} is {_describe(found.st_mode)}; a folder cannot be copied onto it")
    if not is_dir and not stat.S_ISREG(found.st_mode):
        raise OutputError(f"{target} is {_describe(found.st_mode)}; a file cannot be copied onto it")


def _source(root: Path, path: str, job: str) -> tuple[str, os.stat_result]:
    root_stat = _lstat(root)
    if root_stat is None or not stat.S_ISDIR(root_stat.st_mode):
        why = "is a link, not the folder the cluster made" if root_stat and stat.S_ISLNK(root_stat.st_mode) else \
            "does not exist: the job never started on this cluster, or the id is wrong (see `paijob list`)"
        raise OutputError(f"job {job}'s output folder {root} {why}")
    source = str(resolve_inside(root, path))
    try:
        return source, os.stat(source)
    except FileNotFoundError:
        parent = Path(source).parent
        present = sorted(p.name + ("/" if p.is_dir() else "") for p in parent.iterdir()) if parent.is_dir() else []
        raise OutputError(f"{job}:{path}: no such file in the job's output folder {root} "
                          f"(there: {', '.join(present[:10]) or 'nothing'})") from None
    except OSError as error:
        why = "a link loop" if error.errno == errno.ELOOP else (error.strerror or str(error))
        raise OutputError(f"{job}:{path}: cannot be copied ({why})") from None


def copy_out(root: Path, path: str, dest: Path, job: str) -> CopyReport:
    """Copy ``root/path`` (a file or a folder) to ``dest`` like ``cp -r``, carefully; see the module docstring."""
    source, found = _source(root, path, job)
    is_dir = stat.S_ISDIR(found.st_mode)
    if not is_dir and not stat.S_ISREG(found.st_mode):
        raise OutputError(f"{job}:{path} is {_describe(found.st_mode)}; only files and folders are copied")
    contents = not _parts(path)
    target = destination(dest, Path(source).name, is_dir=is_dir, contents=contents)
    _check_landing(target, is_dir)
    if is_dir and _inside(source, os.path.realpath(target)):
        raise OutputError(f"DEST {dest} is inside {job}:{path or '.'}; a folder cannot be copied into itself")
    report = CopyReport(target)
    copier = _Copier(os.path.realpath(root), report)
    if is_dir:
        copier.copy_tree(source, target)
    else:
        copier.copy_file(source, target)
        if report.skipped:
            raise OutputError(f"{job}:{path}: {report.skipped[0]}")
    return report
