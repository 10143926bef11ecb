"""Packing a scanned workdir into a deterministic gzip'd tar, reading each file safely.

A file is opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked with ``fstat``
before a byte is read: a file replaced by a FIFO or a link since the walk is
refused, never waited on. A file whose size or modification time changes
while it is read is an error naming it (the snapshot would not be what was
on disk). Every file is read for private-key and credential markers
(``PRIVATE KEY-----``, a service account's ``"private_key"``, an npm token),
as they are and base64-encoded, and for access tokens of known shapes (Hugging
Face ``hf_...``, GitHub ``ghp_...``), before it is packed; files of any size are
read in chunks (``KeySniffer``), a big one twice (sniffed, then packed). A key
stored under an innocent name is left out and listed like a secret-looking
name, and so is a YAML or JSON file with a top-level ``secrets:`` map (a values
file holding a job's OpenPAI secrets: the job masks its own ``secrets``, not a
copy of them in the snapshot). Permission bits are kept (a 0600 file stays 0600 when unpacked);
folders keep theirs with the owner's rwx added, so a task can always clean up.

Sizes are what travels and what lands: ``tar_bytes`` (the archive before
compression, headers included), ``compressed`` and ``unpacked_bytes`` (whole
disk blocks per file, what each task writes). The limits apply to what lands,
plus a file count: 100,000 one-byte files are 100 KB of content but 400 MB on
the task's disk.
"""

from __future__ import annotations

import base64
import dataclasses
import errno
import gzip
import hashlib
import io
import os
import re
import stat
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import yaml

from paijob.workdir import rules, scan
from paijob.workdir.rules import WorkdirError

MAX_SNAPSHOT_BYTES = 100 * 1024 * 1024  # unpacked, on each task's disk
MAX_SNAPSHOT_FILES = 10_000
CHUNK = 1024 * 1024  # files up to this size are read once, into memory; bigger ones are read twice
SECRET_MARKERS = (b"PRIVATE KEY-----", b'"private_key":', b"aws_secret_access_key", b"PRIVATE KEY BLOCK-----",
                  b":_authToken=")
_SPACE = b" \t\r\n\v\f"
# Access tokens by their documented shapes, as gitleaks' rules find them: Hugging Face (hf_ + 34 letters), GitHub
# (classic, OAuth, app, fine-grained), GitLab (glpat-), AWS access key ids (AKIA, ASIA, ...), Slack (xoxb- ...),
# OpenAI and Anthropic keys (sk-, sk-proj-, sk-ant-...), and a URL with a password (postgres://user:PW@host).
TOKEN = re.compile(rb"(?<![A-Za-z0-9_])(?:hf_[A-Za-z]{30,40}|gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{59,90}"
                   rb"|glpat-[A-Za-z0-9_-]{20,50}|(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}"
                   rb"|xox[abposr]-[A-Za-z0-9-]{10,200}|sk-(?:proj-|ant-|svcacct-|admin-)?[A-Za-z0-9_-]{20,200})"
                   rb"(?![A-Za-z0-9_])"
                   rb"|[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s:/@'\"]{1,100}:[^\s/@$<{%'\"][^\s/@'\"]{0,200}@")
TOKEN_LONGEST = 330  # the longest TOKEN match (a URL with a password): kept across chunks
# A top-level `secrets:` key holding a map, block (`secrets:` then an indented line) or flow (`secrets: {a: b}`),
# or an anchor, alias or tag that may stand for one; JSON's `"secrets": {"a"`.
SECRETS_MAP = re.compile(rb"""^(?:secrets|"secrets"|'secrets')[ \t]*:[ \t]*(?:\{[ \t]*[^\s}]|[&*!]|"""
                         rb"""(?:\#[^\n]*)?\r?\n(?:[ \t]*(?:\#[^\n]*)?\r?\n)*[ \t]+[^\s\#])""", re.MULTILINE)
JSON_SECRETS_MAP = re.compile(rb'"secrets"\s*:\s*\{\s*"')
VALUES_SUFFIXES = (".yaml", ".yml", ".json", ".values")


def _base64_forms(marker: bytes) -> tuple[bytes, ...]:
    """What ``marker`` looks like inside base64 text, at each of the three byte alignments."""
    forms = []
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + marker)
        forms.append(encoded[-(-shift * 8 // 6):(shift + len(marker)) * 8 // 6])
    return tuple(forms)


class KeySniffer:
    """Finds key material in a stream of chunks, as text or base64 (line breaks anywhere), in constant memory."""

    PLAIN = SECRET_MARKERS
    ENCODED = tuple(form for marker in SECRET_MARKERS for form in _base64_forms(marker))

    def __init__(self) -> None:
        self.found = False
        self._plain_tail = b""
        self._encoded_tail = b""
        self._keep = max(TOKEN_LONGEST + 1, *(len(marker) for marker in self.PLAIN + self.ENCODED)) - 1

    def feed(self, chunk: bytes) -> bool:
        """Look at the next chunk; True once a marker or a token has been seen."""
        if self.found:
            return True
        plain = self._plain_tail + chunk
        encoded = self._encoded_tail + chunk.translate(None, _SPACE)
        self.found = any(marker in plain for marker in self.PLAIN) or \
            any(form in encoded for form in self.ENCODED) or TOKEN.search(plain) is not None
        self._plain_tail, self._encoded_tail = plain[-self._keep:], encoded[-self._keep:]
        return self.found


@dataclass(frozen=True)
class Snapshot:
    """A folder packed as a gzip'd tar, with what it holds and what was left out."""

    root: Path
    files: tuple[str, ...]
    size: int  # bytes of file content
    archive: bytes
    tar_bytes: int = 0
    unpacked_bytes: int = 0
    left_out: tuple[str, ...] = ()  # one line per reason, for the user

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.archive).hexdigest()

    def describe(self) -> str:
        return (f"workdir {self.root}: {len(self.files)} files, {human_size(self.size)} of content, "
                f"{human_size(len(self.archive))} compressed, unpacks to {human_size(self.unpacked_bytes)}")


def human_size(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def _listing(items: list[str], limit: int = 8) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def left_out_lines(found: scan.Scan, sniffed: list[str]) -> tuple[str, ...]:
    lines = []
    if found.defaults:
        defaults = [line for line in rules.default_ignore_lines() if line.strip() and not line.startswith("#")]
        lines.append(f"no {rules.PAIJOBIGNORE} in the workdir: left out {', '.join(defaults)} as `paijob init`'s "
                     "would (write your own to change that)")
    secrets = found.secrets + sniffed
    if secrets:
        lines.append(f"left out {len(secrets)} secret-looking path(s): {_listing(secrets)} (never shipped unless "
                     "named exactly in .paijobignore, e.g. !config/.env)")
    if found.links_out:
        lines.append(f"left out {len(found.links_out)} link(s) out of the workdir: {_listing(found.links_out)} "
                     "(name one with !PATH in .paijobignore to ship its target)")
    if found.special:
        lines.append(f"skipped {len(found.special)} special file(s): {_listing(found.special)}")
    if found.unreadable:
        lines.append(f"skipped {len(found.unreadable)} unreadable path(s): {_listing(found.unreadable)}")
    return tuple(lines)


def _open_regular(entry: scan.Entry, root: Path) -> tuple[BinaryIO, os.stat_result]:
    """Open a file the walk found regular, refusing anything it has become since; never blocks."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(entry.source, flags)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise WorkdirError(f"--workdir {root}: {entry.rel} became a link while packing; try again") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise WorkdirError(f"--workdir {root}: {entry.rel} is no longer a regular file; try again")
    return os.fdopen(fd, "rb"), st


def _changed(before: os.stat_result, after: os.stat_result) -> bool:
    return (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns)


class _Packer:
    def __init__(self, root: Path, tar: tarfile.TarFile, skip_unreadable: bool) -> None:
        self.root, self.tar, self.skip_unreadable = root, tar, skip_unreadable
        self.sniffed: list[str] = []
        self.unreadable: list[str] = []
        self.shipped: list[scan.Entry] = []

    def info(self, entry: scan.Entry) -> tarfile.TarInfo:
        info = tarfile.TarInfo(entry.rel)
        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
        if entry.kind == "dir":
            info.type, info.mode = tarfile.DIRTYPE, (entry.mode | 0o700) & 0o777
        elif entry.kind == "link":
            info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, entry.link
        else:
            info.mode = entry.mode & 0o777  # no setuid, setgid or sticky bit from a workdir
        return info

    def _unreadable(self, entry: scan.Entry, error: PermissionError | FileNotFoundError) -> None:
        """A file that cannot be read is refused, or left out with --skip-unreadable (a vanished one always refused)."""
        if not self.skip_unreadable or isinstance(error, FileNotFoundError):
            verb = "vanished while packing" if isinstance(error, FileNotFoundError) else "cannot be read"
            raise WorkdirError(f"--workdir {self.root}: {entry.rel} {verb} ({error.strerror}); make it readable, "
                               "list it in .paijobignore, or pass --skip-unreadable") from None
        self.unreadable.append(entry.rel)

    def add(self, entry: scan.Entry) -> None:
        info = self.info(entry)
        if entry.kind != "file":
            self.tar.addfile(info)
            self.shipped.append(entry)
            return
        try:
            handle, before = _open_regular(entry, self.root)
        except (PermissionError, FileNotFoundError) as error:
            self._unreadable(entry, error)
            return
        with handle:
            info.size = before.st_size
            data = handle.read(CHUNK + 1)
            body: BinaryIO = io.BytesIO(data)
            if not entry.named and _holds_key(handle, data):
                self.sniffed.append(f"{entry.rel} (holds a private key, credential or access token)")
                return
            if not entry.named and _holds_secrets_map(entry.rel, data):
                self.sniffed.append(f"{entry.rel} (a top-level secrets: map)")
                return
            if len(data) > CHUNK:  # then pack it from the start
                handle.seek(0)
                body = handle
            try:
                self.tar.addfile(info, body)
            except OSError:  # tarfile: "unexpected end of data", the file shrank
                raise WorkdirError(f"--workdir {self.root}: {entry.rel} changed while packing; try again") from None
            if _changed(before, os.fstat(handle.fileno())) or (body is not handle and len(data) != info.size):
                raise WorkdirError(f"--workdir {self.root}: {entry.rel} changed while packing; try again")
        self.shipped.append(dataclasses.replace(entry, size=before.st_size))


def _holds_key(handle: BinaryIO, data: bytes) -> bool:
    """Does the file (its first ``data``, then the rest of ``handle`` if it is bigger) hold a private key?"""
    sniffer = KeySniffer()
    if not sniffer.feed(data) and len(data) > CHUNK:
        for chunk in iter(lambda: handle.read(CHUNK), b""):  # a big file: sniff all of it first
            if sniffer.feed(chunk):
                break
    return sniffer.found


def _holds_secrets_map(rel: str, data: bytes) -> bool:
    """Is ``rel`` a YAML or JSON file whose first ``data`` (a values file is small) has a top-level ``secrets:`` map?

    Judged by what a YAML parser reads (JSON is YAML here), so every form a values file may take counts: a
    UTF-8 BOM, ``? secrets``, ``"secr\\u0065ts"``, a flow map on the next line, several documents. Only text no
    parser reads (a Jinja template, a file cut at ``CHUNK``) falls back to the patterns, which err on the side
    of leaving a file out."""
    if not rel.lower().endswith(VALUES_SUFFIXES):
        return False
    try:
        documents = list(yaml.safe_load_all(data))
    except (yaml.YAMLError, RecursionError, ValueError):
        return SECRETS_MAP.search(data) is not None or JSON_SECRETS_MAP.search(data) is not None
    return any(isinstance(document, dict) and any(key == "secrets" and isinstance(value, dict) and value
                                                   for key, value in document.items())
               for document in documents)


def check_limits(found: scan.Scan, limit: int) -> None:
    """Refuse a tree that would unpack to more than ``limit`` bytes on each task's disk."""
    unpacked = found.unpacked_bytes
    if unpacked <= limit:
        return
    biggest = sorted(found.files, key=lambda e: -e.size)[:3]
    names = ", ".join(f"{e.rel} ({human_size(e.size)})" for e in biggest)
    raise WorkdirError(
        f"--workdir {found.root} unpacks to {human_size(unpacked)} ({len(found.files)} files, "
        f"{human_size(found.content_bytes)} of content), over the {human_size(limit)} limit (largest: {names}); "
        f"list what the job does not need in {found.root / rules.PAIJOBIGNORE} (gitignore syntax), or pass --force")


def snapshot(root: str | Path, *, force: bool = False, limit: int = MAX_SNAPSHOT_BYTES,
             max_files: int = MAX_SNAPSHOT_FILES, skip_unreadable: bool = False,
             guarded: Iterable[Path] = (), private: Iterable[Path] = ()) -> Snapshot:
    """Pack ``root`` as it is now; refuse more than ``limit`` bytes or ``max_files`` files unless ``force``.

    ``guarded``: files that never ship (paijob's own profile store); a workdir
    holding one, or a credential home, is refused unless ``force``, and then
    the first line of ``left_out`` says so and lists what ships from it.
    ``private``: files that never ship either, listed as left out (the values
    files of this job that hold a ``secrets:`` map), whatever their form.
    The archive is deterministic (sorted names, zero mtimes and owners, the
    files' own permission bits), so the same tree gives the same digest.
    """
    guarded = tuple(guarded)
    folder = Path(root).expanduser()
    if not folder.is_dir():
        raise WorkdirError(f"--workdir {root}: no such folder")
    folder = folder.resolve()
    forced = rules.refuse_root(folder, guarded=guarded, force=force)
    found = scan.walk(folder, max_files=None if force else max_files, skip_unreadable=skip_unreadable,
                      guarded=guarded, private=private)
    if not force:
        check_limits(found, limit)
    if not found.files and found.ignored:
        raise WorkdirError(f"--workdir {root}: every file is left out by the ignore rules (.gitignore, "
                           ".paijobignore, or the defaults); nothing would be shipped: check for a pattern such "
                           "as '**' or '*'")
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as zipped, \
            tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
        packer = _Packer(folder, tar, skip_unreadable)
        for entry in found.entries:
            packer.add(entry)
    tar_bytes = tar.offset
    found.unreadable.extend(packer.unreadable)
    shipped = packer.shipped
    unpacked = scan.Scan(folder, shipped).unpacked_bytes
    files = tuple(e.rel for e in shipped if e.kind == "file")
    left_out = left_out_lines(found, packer.sniffed)
    if forced is not None:
        left_out = (f"--force: --workdir {folder} {forced}; it ships {len(files)} file(s), readable by every "
                    f"user of the cluster: {_listing(list(files), 20) or 'none'}", *left_out)
    return Snapshot(folder, files, sum(e.size for e in shipped), buffer.getvalue(), tar_bytes, unpacked, left_out)
