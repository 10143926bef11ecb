"""``paijob cp``: copying files out of a job's output folder (``PAIJOB_OUTPUT_DIR``).

Every task of a job sees the same folder in ``PAIJOB_OUTPUT_DIR``, kept across
the job's attempts and task retries, so a retried attempt finds the
checkpoints of the one before. On the local cluster it is
``<state dir>/outputs/<user~name>`` (``paijob.local.layout.output``), made
by the task runner. On a real OpenPAI cluster it is the template value
``outputDir``, or a folder on the storage the job names (``storage: NAME``,
OpenPAI's ``teamwise_storage`` plugin); ``api.copy_output`` finds the folder
(the local state dir, or where this machine mounts that storage) and this
module copies out of it.

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
* a source keeps the name it was given: ``JOB:latest dest/`` writes
  ``dest/latest`` even when ``latest`` is a link (the job does not choose
  which of the user's files is written);
* an existing file in DEST is never replaced unless DEST names that file
  (``JOB:a.pt dest/a.pt``) or ``force``: ``plan`` lists them and refuses, and
  a file that appears meanwhile is kept (the copy is linked in, never
  renamed over it);
* holes stay holes: only the source's data (``SEEK_DATA``) and no run of
  zeros is written, so a 5 GB sparse file costs what it holds; ``plan``
  measures the total first (for a preview above ``PREVIEW_BYTES``) and
  refuses what would not fit in DEST's free space;
* the JOB part must be a job id (``NAME`` or ``USER~NAME``), and PATH may not
  climb out with ``..``.

``plan`` only reads; ``copy`` writes; nothing here imports the client.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from paijob.errors import PaijobError
from paijob.openpai.names import NAME_PATTERN, js_match

CHUNK = 1 << 20
PREVIEW_BYTES = 100 * 1024 * 1024  # a copy bigger than this is announced with its size before it starts


class OutputError(PaijobError):
    """A ``paijob cp`` source or destination that cannot be used as given."""


@dataclass(frozen=True)
class CopyPlan:
    """One copy, checked and measured before a byte is written (``plan``); ``copy`` carries it out."""

    real_root: str  # the job's output folder, links resolved
    source: str  # what is copied, links resolved
    target: Path  # where it lands
    is_dir: bool
    overwrite: bool  # existing files in the way may be replaced (--force, or DEST names the file)
    files: int = 0
    size: int = 0  # bytes as ``ls -l`` counts them
    data: int = 0  # bytes that hold data, what the copy writes (holes excluded)
    existing: tuple[str, ...] = ()  # destination paths that would be replaced

    @property
    def big(self) -> bool:
        """Worth announcing with its size before it starts."""
        return self.size > PREVIEW_BYTES


@dataclass
class CopyReport:
    """What ``copy_out`` wrote, and what it left out with the reason."""

    target: Path
    files: int = 0
    skipped: list[str] = field(default_factory=list)

    def skip(self, path: str, why: str) -> None:
        self.skipped.append(f"{path} ({why})")


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


def _copy_data(reader: int, writer: int, size: int) -> None:
    """Copy ``size`` bytes, writing only data: the source's holes (``SEEK_DATA``) and runs of zeros stay holes."""
    seek_data, seek_hole = getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)
    offset = 0
    while offset < size:
        start, end = offset, size
        if seek_data is not None and seek_hole is not None:
            try:
                start = os.lseek(reader, offset, seek_data)
                end = min(os.lseek(reader, start, seek_hole), size)
            except OSError as error:
                if error.errno == errno.ENXIO:  # nothing but a hole up to the end
                    break
                if error.errno != errno.EINVAL:  # EINVAL: no SEEK_DATA on this filesystem, read it all
                    raise
                start, end = offset, size
        position = start
        while position < end:
            chunk = os.pread(reader, min(CHUNK, end - position), position)
            if not chunk:  # the file shrank: the size check after the copy says so
                break
            if chunk.count(0) != len(chunk):
                os.pwrite(writer, chunk, position)
            position += len(chunk)
        offset = end
    os.ftruncate(writer, size)


def _data_bytes(found: os.stat_result) -> int:
    """What a file's copy takes on disk: its allocated blocks (a sparse file's holes cost nothing)."""
    return min(found.st_size, found.st_blocks * 512)


class _Copier:
    """One copy: the output folder's real path, the report, the umask."""

    def __init__(self, real_root: str, report: CopyReport, overwrite: bool) -> None:
        self.real_root = real_root
        self.report = report
        self.overwrite = overwrite
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
                writer = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
                try:
                    _copy_data(reader.fileno(), writer, before.st_size)
                finally:
                    os.close(writer)
                after = os.fstat(reader.fileno())
                if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
                    self.report.skip(self.shown(source), "changed while copying, not copied: copy it again")
                    return
                if not self.land(temp, target):
                    self.report.skip(self.shown(source), f"{target} exists, kept (--force replaces it)")
                    return
            finally:
                temp.unlink(missing_ok=True)
        self.report.files += 1

    def land(self, temp: Path, target: Path) -> bool:
        """Put the finished copy at ``target``; False when a file is there and may not be replaced."""
        if self.overwrite:
            os.replace(temp, target)
            return True
        try:
            os.link(temp, target)  # atomic, and never over a file that appeared since the plan
        except FileExistsError:
            return False
        except OSError:  # a filesystem without hard links
            if os.path.lexists(target):
                return False
            os.replace(temp, target)
        return True

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
        if existing is not None and not self.overwrite:
            self.report.skip(shown, f"{target} exists, kept (--force replaces it)")
            return
        if existing is not None:
            target.unlink()
        os.symlink(link, target)
        self.report.files += 1

    def place(self, source: str, target: Path) -> bool:
        """True when ``target`` may take a file: absent, or a regular file that may be replaced."""
        existing = _lstat(target)
        if existing is None or (stat.S_ISREG(existing.st_mode) and self.overwrite):
            return True
        if stat.S_ISREG(existing.st_mode):
            self.report.skip(self.shown(source), f"{target} exists, kept (--force replaces it)")
            return False
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


def _measure(source: str, target: Path) -> tuple[int, int, int, list[str]]:
    """Files, bytes, data bytes under folder ``source``, and what already exists where they would land."""
    files = size = data = 0
    existing: list[str] = []
    stack = [(source, target)]
    while stack:
        folder, into = stack.pop()
        try:
            with os.scandir(folder) as listing:
                children = list(listing)
        except OSError:  # vanished or unreadable: the copy lists it
            continue
        for child in children:
            try:
                found = child.stat(follow_symlinks=False)
            except OSError:
                continue
            landing = into / child.name
            there = _lstat(landing)
            if stat.S_ISDIR(found.st_mode):
                if there is None or stat.S_ISDIR(there.st_mode):
                    stack.append((child.path, landing))
                continue
            if stat.S_ISREG(found.st_mode):
                files, size, data = files + 1, size + found.st_size, data + _data_bytes(found)
            if there is not None and (stat.S_ISREG(there.st_mode) or stat.S_ISLNK(there.st_mode)) and \
                    (stat.S_ISREG(found.st_mode) or stat.S_ISLNK(found.st_mode)):
                existing.append(str(landing))
    return files, size, data, sorted(existing)


def _free_bytes(target: Path) -> int | None:
    folder = target if target.is_dir() else target.parent
    try:
        found = os.statvfs(folder)
    except OSError:
        return None
    return found.f_bavail * found.f_frsize


def plan(root: Path, path: str, dest: Path, job: str, *, force: bool = False) -> CopyPlan:
    """Check and measure the copy of ``root/path`` to ``dest`` without writing anything.

    Refuses (unless ``force``) to replace existing files DEST does not name,
    and what would not fit in DEST's free space.
    """
    source, found = _source(root, path, job)
    is_dir = stat.S_ISDIR(found.st_mode)
    if not is_dir and not stat.S_ISREG(found.st_mode):
        raise OutputError(f"{job}:{path} is {_describe(found.st_mode)}; only files and folders are copied")
    parts = _parts(path)
    name = parts[-1] if parts else Path(source).name  # the name given, not a link's target's
    target = destination(dest, name, is_dir=is_dir, contents=not parts)
    _check_landing(target, is_dir)
    if is_dir and _inside(source, os.path.realpath(target)):
        raise OutputError(f"DEST {dest} is inside {job}:{path or '.'}; a folder cannot be copied into itself")
    if is_dir:
        files, size, data, existing = _measure(source, target)
    else:
        files, size, data = 1, found.st_size, _data_bytes(found)
        existing = [str(target)] if _lstat(target) is not None else []
    named = not is_dir and target == dest  # DEST names the file: replacing it is what was asked
    copy_plan = CopyPlan(os.path.realpath(root), source, target, is_dir, force or named, files, size, data,
                         tuple(existing))
    _refuse_replacing(copy_plan, f"{job}:{path or '.'}")
    if not force:
        _refuse_overfilling(copy_plan, f"{job}:{path or '.'}")
    return copy_plan


def _refuse_replacing(copy_plan: CopyPlan, what: str) -> None:
    """paijob cp never overwrites a file DEST does not name, unless --force."""
    existing = copy_plan.existing
    if existing and not copy_plan.overwrite:
        shown = ", ".join(existing[:5]) + (f" and {len(existing) - 5} more" if len(existing) > 5 else "")
        raise OutputError(f"{what}: {len(existing)} file(s) already in DEST would be replaced "
                          f"({shown}); paijob cp never overwrites: pass --force, name the target file, or copy "
                          "to a new folder")


def _refuse_overfilling(copy_plan: CopyPlan, what: str) -> None:
    """A copy that would not fit in the free space where it lands (unless --force)."""
    from paijob.workdir.pack import human_size

    free = _free_bytes(copy_plan.target)
    if free is not None and copy_plan.data > free:
        raise OutputError(f"{what} holds {human_size(copy_plan.data)} of data ({copy_plan.files} file(s)), more "
                          f"than the {human_size(free)} free where {copy_plan.target} is: make room or copy a part "
                          "(--force tries anyway)")


def copy(copy_plan: CopyPlan, job: str, path: str) -> CopyReport:
    """Carry out a ``plan``: copy the file or folder like ``cp -r``, carefully; see the module docstring."""
    report = CopyReport(copy_plan.target)
    copier = _Copier(copy_plan.real_root, report, copy_plan.overwrite)
    if copy_plan.is_dir:
        copier.copy_tree(copy_plan.source, copy_plan.target)
    else:
        copier.copy_file(copy_plan.source, copy_plan.target)
        if report.skipped:
            raise OutputError(f"{job}:{path}: {report.skipped[0]}")
    return report


def copy_out(root: Path, path: str, dest: Path, job: str, *, force: bool = False) -> CopyReport:
    """``plan`` then ``copy``: ``root/path`` (a file or a folder) to ``dest``."""
    return copy(plan(root, path, dest, job, force=force), job, path)


# Filesystems a storage can be (a network or FUSE one); a folder on any other is this machine's own disk.
NETWORK_FILESYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "beegfs", "gpfs",
                       "9p", "afs", "davfs")


def mount_problem(mount: str, expected_source: str | None = None, mounts_file: str = "/proc/self/mounts") -> str | None:
    """Why ``mount`` (where the profile says this machine mounts a storage) cannot hold a job's outputs: it
    is missing, not a folder, an empty folder that nothing is mounted on, a folder on this machine's own
    disk (the mount table says what holds it: a copy is not the storage), or a mount of another server than
    ``expected_source`` (``SERVER:/path`` of an NFS storage); None when it looks right. So ``paijob cp`` tells
    "this machine does not mount that storage there" from "no such job"."""
    path = Path(mount)
    if not path.is_dir():
        return f"{mount} does not exist or is not a folder"
    point = str(path.resolve())
    source = _mounted_source(point, mounts_file)
    if source is None:
        try:
            empty = next(path.iterdir(), None) is None
        except OSError as error:
            return f"{mount} cannot be read ({error.strerror})"
        if empty:
            return f"nothing is mounted on {mount} (an empty folder)"
        holder = _holding_mount(point, mounts_file)
        if holder is not None and not _network(holder[2]):
            return (f"nothing is mounted on {mount}: it is a folder on this machine's own disk ({holder[2]} "
                    f"{holder[0]}, mounted at {holder[1]}), not the storage")
        return None  # a folder inside a mount of the storage (or no mount table to tell)
    if expected_source and source.rstrip("/") != expected_source.rstrip("/"):
        return f"{mount} is a mount of {source}, not of the storage ({expected_source})"
    return None


def _network(fstype: str) -> bool:
    return fstype in NETWORK_FILESYSTEMS or fstype.startswith("fuse")


def _mount_table(mounts_file: str) -> list[tuple[str, str, str]]:
    """(source, mount point, filesystem) of each line of the mount table, in its order; [] when unreadable."""
    try:
        with open(mounts_file, encoding="utf-8", errors="replace") as handle:
            lines = handle.read(1 << 20).splitlines()
    except OSError:
        return []
    table = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 3:
            table.append((fields[0], fields[1].replace("\\040", " "), fields[2]))
    return table


def _mounted_source(point: str, mounts_file: str) -> str | None:
    """What is mounted on ``point`` (the mount table's first field), or None when nothing is."""
    found = None
    for source, where, _ in _mount_table(mounts_file):
        if where == point:
            found = source  # the last mount on a point is the one seen
    return found


def _holding_mount(point: str, mounts_file: str) -> tuple[str, str, str] | None:
    """The mount that holds ``point`` (the longest mount point above it; the last of equals), or None."""
    best = None
    for source, where, kind in _mount_table(mounts_file):
        inside = where == "/" or point == where or point.startswith(where.rstrip("/") + "/")
        if inside and (best is None or len(where) >= len(best[1])):
            best = (source, where, kind)
    return best


LIST_LIMIT = 1000  # entries `paijob cp --list` shows: a folder of checkpoints, not a dataset


Listed = NamedTuple("Listed", [("path", str), ("kind", str), ("size", int)])


def listing(root: Path, path: str, job: str, limit: int = LIST_LIMIT) -> tuple[list[Listed], bool]:
    """What ``job:path`` holds, without copying a byte (``paijob cp --list``): each entry's path from
    ``path``, its kind (``file``, ``folder``, ``link``, ``other``) and size, links not followed, sorted; and
    whether there was more than ``limit``."""
    source, found = _source(root, path, job)
    if not stat.S_ISDIR(found.st_mode):
        return [Listed(os.path.basename(source), "file", found.st_size)], False
    entries: list[Listed] = []
    for folder, names, files in os.walk(source, followlinks=False):
        names.sort()
        for name in sorted(names + files):
            full = os.path.join(folder, name)
            info = _lstat(Path(full))
            if info is None:
                continue
            kind = ("link" if stat.S_ISLNK(info.st_mode) else "folder" if stat.S_ISDIR(info.st_mode)
                    else "file" if stat.S_ISREG(info.st_mode) else "other")
            entries.append(Listed(os.path.relpath(full, source), kind, info.st_size if kind == "file" else 0))
            if len(entries) > limit:
                return sorted(entries[:limit]), True
    return sorted(entries), False


RESULTS_SHOWN = 10  # files `paijob status` shows of a job's output folder
RESULTS_SCANNED = 20_000  # entries it looks at, at most: a folder of checkpoints, not a dataset

Results = NamedTuple("Results", [("files", list[Listed]), ("count", int), ("more", bool)])


def newest(root: Path, limit: int = RESULTS_SHOWN, scanned: int = RESULTS_SCANNED) -> Results:
    """The regular files of ``root`` (a job's output folder), newest first, at most ``limit``; how many files it
    holds; and whether there were more than ``scanned`` entries to look at (then ``count`` is a lower bound).
    Links are not followed (the job chose them); a folder that cannot be read is skipped."""
    import heapq

    kept: list[tuple[float, str, int]] = []
    count = seen = 0
    for folder, names, files in os.walk(root, followlinks=False):
        names.sort()
        for name in files:
            seen += 1
            if seen > scanned:
                break
            info = _lstat(Path(folder) / name)
            if info is None or not stat.S_ISREG(info.st_mode):
                continue
            count += 1
            item = (info.st_mtime, os.path.relpath(os.path.join(folder, name), root), info.st_size)
            if len(kept) < limit:
                heapq.heappush(kept, item)
            elif item > kept[0]:
                heapq.heapreplace(kept, item)
        if seen > scanned:
            break
    ordered = sorted(kept, key=lambda item: (-item[0], item[1]))
    return Results([Listed(path, "file", size) for _, path, size in ordered], count, seen > scanned)
