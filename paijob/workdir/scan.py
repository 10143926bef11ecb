"""Walking a workdir: what goes into the snapshot, and what is left out and why.

Nothing here opens a file: every decision comes from ``lstat`` (through
``os.scandir``), so a FIFO, a socket or a device is listed and skipped, never
read, and nothing can block. Symbolic links are never followed while
walking: a link whose target stays inside the workdir is shipped as a
relative link; one that leaves it (or dangles outside) is listed, unless a
``.paijobignore`` names it exactly (``!data/link``), then its target is shipped
in its place. A folder that cannot be listed is an error naming it, or with
``skip_unreadable`` a listed skip. The walk stops as soon as the file count
passes ``max_files``, so a tree of 100,000 files is refused in a moment.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from paijob.workdir import rules
from paijob.workdir.rules import Rules, WorkdirError

BLOCK = 4096  # what a small file costs on the task's disk


@dataclass(frozen=True)
class Entry:
    """One member of the snapshot: a folder, a regular file (read from ``source``) or a relative link."""

    rel: str
    kind: str  # "dir", "file" or "link"
    size: int = 0
    source: str = ""
    link: str = ""
    mode: int = 0o644  # permission bits, kept in the archive (a 0600 file stays 0600)
    named: bool = False  # a .paijobignore names it exactly: shipped even if it looks secret


@dataclass
class Scan:
    root: Path
    entries: list[Entry] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)
    links_out: list[str] = field(default_factory=list)
    special: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    ignored: int = 0  # entries left out by ignore files
    defaults: bool = False  # no .paijobignore at the top: paijob init's rules applied

    @property
    def files(self) -> list[Entry]:
        return [e for e in self.entries if e.kind == "file"]

    @property
    def content_bytes(self) -> int:
        return sum(e.size for e in self.entries)

    @property
    def unpacked_bytes(self) -> int:
        """What the tree takes on the task's disk: whole blocks per file and folder."""
        return sum(-(-max(e.size, 1) // BLOCK) * BLOCK for e in self.entries if e.kind != "link")


@dataclass(frozen=True)
class _Folder:
    real: str  # where to list it
    rel: str  # its path in the snapshot ("" for the root)
    rules: Rules


class _Walker:
    def __init__(self, root: Path, max_files: int | None, skip_unreadable: bool, guarded: Iterable[Path],
                 private: Iterable[Path] = ()) -> None:
        self.root = root
        self.guarded = frozenset(_identity(path) for path in guarded if os.path.exists(path))
        self.private = frozenset(_identity(path) for path in private if os.path.exists(path))
        self.real_root = os.path.realpath(root)
        self.secret_prefix = rules.secret_prefix(self.real_root)
        self.scan = Scan(root)
        self.max_files = max_files
        self.skip_unreadable = skip_unreadable
        self.seen_folders: set[tuple[int, int]] = set()
        self.count = 0

    def run(self) -> Scan:
        top = Rules().inside(rules.load_layer(self.root, "", defaults=True))
        self.scan.defaults = not os.path.lexists(self.root / rules.PAIJOBIGNORE)
        stack = [_Folder(self.real_root, "", top)]
        while stack:
            stack.extend(reversed(self.list_folder(stack.pop())))
        self.scan.entries.sort(key=lambda e: e.rel)
        return self.scan

    def unreadable(self, rel: str, error: OSError) -> None:
        if not self.skip_unreadable:
            raise WorkdirError(f"--workdir {self.root}: cannot read {rel or '.'} ({error.strerror or error}); "
                               "make it readable, list it in .paijobignore, or pass --skip-unreadable")
        self.scan.unreadable.append(rel or ".")

    def list_folder(self, folder: _Folder) -> list[_Folder]:
        try:
            st = os.stat(folder.real)
            self.seen_folders.add((st.st_dev, st.st_ino))
            with os.scandir(folder.real) as listing:
                children = sorted(listing, key=lambda d: d.name)
        except OSError as error:
            self.unreadable(folder.rel, error)
            return []
        here = folder.rules
        if folder.rel:
            here = here.inside(rules.load_layer(Path(folder.real), folder.rel + "/", defaults=False))
        subfolders = []
        for child in children:
            found = self.visit(child, folder.rel + "/" + child.name if folder.rel else child.name, here)
            if found is not None:
                subfolders.append(found)
        return subfolders

    def visit(self, child: os.DirEntry[str], rel: str, here: Rules) -> _Folder | None:
        try:
            st = child.stat(follow_symlinks=False)
        except FileNotFoundError:  # removed since the listing: not part of the tree any more
            return None
        except OSError as error:
            self.unreadable(rel, error)
            return None
        is_dir = stat.S_ISDIR(st.st_mode)
        if child.name in rules.ALWAYS_SKIPPED or here.ignored(rel, is_dir):
            self.scan.ignored += 1
            return None
        if rules.looks_secret(self.secret_prefix + rel, is_dir) and not here.is_named(rel) \
                and not (is_dir and here.names_inside(rel)):
            self.scan.secrets.append(rel + ("/" if is_dir else ""))
            return None
        if (st.st_dev, st.st_ino) in self.guarded:
            self.scan.secrets.append(rel)
            return None
        if (st.st_dev, st.st_ino) in self.private:
            self.scan.secrets.append(f"{rel} (a values file of this job with a secrets: map; never shipped)")
            return None
        if is_dir:
            self.add(Entry(rel, "dir", mode=stat.S_IMODE(st.st_mode)))
            return _Folder(child.path, rel, here)
        if stat.S_ISREG(st.st_mode):
            self.add(Entry(rel, "file", st.st_size, child.path, mode=stat.S_IMODE(st.st_mode),
                           named=here.is_named(rel)))
            return None
        if stat.S_ISLNK(st.st_mode):
            return self.visit_link(child.path, rel, here)
        self.scan.special.append(f"{rel} ({_kind(st.st_mode)})")
        return None

    def visit_link(self, path: str, rel: str, here: Rules) -> _Folder | None:
        target = os.path.realpath(path)
        inside = target == self.real_root or target.startswith(self.real_root.rstrip("/") + "/")
        if inside:
            in_tree = os.path.relpath(target, self.real_root)
            self.add(Entry(rel, "link", link=os.path.relpath(in_tree, os.path.dirname(rel) or ".")))
            return None
        if not here.is_named(rel):
            self.scan.links_out.append(f"{rel} -> {os.readlink(path)}")
            return None
        try:  # named exactly: ship what it points to
            st = os.stat(target)
        except OSError as error:
            self.unreadable(rel, error)
            return None
        if (st.st_dev, st.st_ino) in self.guarded:
            self.scan.secrets.append(rel)
        elif stat.S_ISREG(st.st_mode):
            self.add(Entry(rel, "file", st.st_size, target, mode=stat.S_IMODE(st.st_mode), named=True))
        elif stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) not in self.seen_folders:
            self.add(Entry(rel, "dir", mode=stat.S_IMODE(st.st_mode)))
            return _Folder(target, rel, here)
        else:
            self.scan.special.append(f"{rel} -> {target} ({_kind(st.st_mode)})")
        return None

    def add(self, entry: Entry) -> None:
        self.scan.entries.append(entry)
        self.count += entry.kind == "file"
        if self.max_files is not None and self.count > self.max_files:
            raise WorkdirError(
                f"--workdir {self.root} holds more than {self.max_files} files (limit); list what the job does "
                f"not need in {self.root / rules.PAIJOBIGNORE} (gitignore syntax), or pass --force")


def _identity(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISDIR, "folder"), (stat.S_ISREG, "file")):
        if test(mode):
            return name
    return "special file"


def walk(root: Path, *, max_files: int | None = None, skip_unreadable: bool = False,
         guarded: Iterable[Path] = (), private: Iterable[Path] = ()) -> Scan:
    """Everything under ``root`` that goes into a snapshot, and what was left out (``guarded`` and
    ``private`` files always: see ``pack.snapshot``)."""
    return _Walker(root, max_files, skip_unreadable, guarded, private).run()
