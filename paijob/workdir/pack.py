"""Packing a scanned workdir into a deterministic gzip'd tar, reading each file safely.

A file is opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked with ``fstat``
before a byte is read: a file replaced by a FIFO or a link since the walk is
refused, never waited on. A file that changes while it is read is an error naming
it (the snapshot would not be what was on disk): its size, modification *and change*
times are compared before and after (a modification time can be set back, a change
time cannot), its path is looked at again after packing, and a big file, read twice
(judged, then packed), must hash the same both times. Every file is read for
private-key and credential markers (``PRIVATE KEY-----``, a service account's
``"private_key"``, an npm token), as they are and base64-encoded, and for access
tokens and credentials of known shapes (gitleaks' default rules, a URL with a
password, ``AccountKey=``, ...: ``paijob.common.credentials``), before it is packed;
files of any size are read in chunks (``KeySniffer``). A key stored under an
innocent name is left out and listed like a secret-looking name, and so is a file,
whatever its name (``m9.yaml~``, ``.bak``, ``.txt``), that a YAML parser reads as a
top-level ``secrets:`` map, anywhere in it (a values file holding a job's OpenPAI
secrets: the job masks its own ``secrets``, not a copy of them in the snapshot).
Permission bits are kept (a 0600 file stays 0600 when unpacked);
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
import stat
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from paijob.common import credentials
from paijob.workdir import rules, scan
from paijob.workdir.rules import WorkdirError

MAX_SNAPSHOT_BYTES = 100 * 1024 * 1024  # unpacked, on each task's disk
MAX_SNAPSHOT_FILES = 10_000
CHUNK = 1024 * 1024  # files up to this size are read once, into memory; bigger ones are read twice
PARSE_LIMIT = 4 * 1024 * 1024  # a file that may hold a secrets map is parsed up to this size, else patterns judge
SECRET_MARKERS = (b"PRIVATE KEY-----", b'"private_key":', b"aws_secret_access_key", b"PRIVATE KEY BLOCK-----",
                  b":_authToken=")
_SPACE = b" \t\r\n\v\f"
# Access tokens and credentials by their documented shapes (gitleaks' default rules, a URL with a password, ...):
# paijob.common.credentials, on RE2. A stream keeps its longest match across chunks.
TOKEN_LONGEST = credentials.LONGEST
# What a file that may be a values file with a top-level ``secrets:`` map shows, whatever its name (``m9.yaml~``,
# ``.bak``, ``.txt``, a ``.j2``): the word, or a double-quoted key with an escape (``"secr\\u0065ts":``). Only such
# a file is parsed (RE2, linear; the UTF-16 BOM is checked apart).
VALUES_HINT = rb'''secrets|"[^"]{0,200}\\[^"]{0,200}"[ \t]*:'''
# The fallback for text no YAML parser reads (a Jinja template, a file too big to parse): a top-level ``secrets:``
# key holding a map, block (``secrets:`` then an indented line) or flow (``secrets: {a: b}``), or an anchor, alias
# or tag that may stand for one; JSON's ``"secrets": {"a"``. Errs on the side of leaving a file out.
SECRETS_MAP = (rb'''(?m)^(?:secrets|"secrets"|'secrets')[ \t]*:[ \t]*(?:\{[ \t]*[^\s}]|[&*!]|'''
               rb'''(?:\#[^\n]*)?\r?\n(?:[ \t]*(?:\#[^\n]*)?\r?\n)*[ \t]+[^\s\#])'''
               rb'''|"secrets"\s*:\s*\{\s*"''')
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


@lru_cache(maxsize=1)
def _patterns() -> tuple[Any, Any]:
    import re2  # type: ignore[import-not-found,import-untyped,unused-ignore]  # google-re2: install_requires

    return re2.compile(VALUES_HINT), re2.compile(SECRETS_MAP)


def _base64_forms(marker: bytes) -> tuple[bytes, ...]:
    """What ``marker`` looks like inside base64 text, at each of the three byte alignments."""
    forms = []
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + marker)
        forms.append(encoded[-(-shift * 8 // 6):(shift + len(marker)) * 8 // 6])
    return tuple(forms)


class KeySniffer:
    """Finds key material in a stream of chunks, as text or base64 (line breaks anywhere), in constant memory;
    also whether the text may hold a top-level ``secrets:`` map (``values_hint``, ``map_pattern``)."""

    PLAIN = SECRET_MARKERS
    ENCODED = tuple(form for marker in SECRET_MARKERS for form in _base64_forms(marker))

    def __init__(self) -> None:
        self.found = False
        self.values_hint = False  # worth parsing as YAML: it may hold a secrets map
        self.map_pattern = False  # SECRETS_MAP matched: what judges a file no parser reads
        self._started = False
        self._plain_tail = b""
        self._encoded_tail = b""
        self._keep = max(TOKEN_LONGEST + 1, 420, *(len(marker) for marker in self.PLAIN + self.ENCODED)) - 1

    def feed(self, chunk: bytes) -> bool:
        """Look at the next chunk; True once a marker or a token has been seen."""
        if not self._started:
            self._started = True
            self.values_hint = chunk.startswith(_UTF16_BOMS)
        plain = self._plain_tail + chunk
        hint, secrets_map = _patterns()
        self.values_hint = self.values_hint or hint.search(plain) is not None
        self.map_pattern = self.map_pattern or (self.values_hint and secrets_map.search(plain) is not None)
        if not self.found:
            encoded = self._encoded_tail + chunk.translate(None, _SPACE)
            self.found = any(marker in plain for marker in self.PLAIN) or \
                any(form in encoded for form in self.ENCODED) or credentials.found_in(plain)
            self._encoded_tail = encoded[-self._keep:]
        self._plain_tail = plain[-self._keep:]
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


class _Changed(Exception):  # noqa: N818
    """The file changed between two reads of one snapshot."""


def _changed(before: os.stat_result, after: os.stat_result) -> bool:
    """Did the file change between two looks? Size, modification and change times: the modification time
    can be set back (``touch -d``, ``os.utime``), the change time cannot (issue 55)."""
    return (before.st_size, before.st_mtime_ns, before.st_ctime_ns) != (after.st_size, after.st_mtime_ns,
                                                                          after.st_ctime_ns)


def _second_look(source: str, before: os.stat_result, handle: BinaryIO) -> bool:
    """After packing: is the file read unchanged, and does its path still name it? True: changed."""
    if _changed(before, os.fstat(handle.fileno())):
        return True
    try:
        now = os.stat(source, follow_symlinks=False)
    except OSError:
        return True
    return (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino) or _changed(before, now)


class _Hashing:
    """A file read through, its bytes hashed on the way (what was packed, to compare with what was judged)."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.hash = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.hash.update(data)
        return data


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
            try:
                judged = None if entry.named else _judge(handle, data)
            except _Changed:
                raise WorkdirError(f"--workdir {self.root}: {entry.rel} changed while packing; try again") from None
            if judged is not None and judged[0]:
                self.sniffed.append(f"{entry.rel} ({judged[0]})")
                return
            body: Any = io.BytesIO(data)
            if len(data) > CHUNK:  # then pack it from the start, hashed: what is packed is what was judged
                handle.seek(0)
                body = _Hashing(handle)
            try:
                self.tar.addfile(info, body)
            except OSError:  # tarfile: "unexpected end of data", the file shrank
                raise WorkdirError(f"--workdir {self.root}: {entry.rel} changed while packing; try again") from None
            again = body.hash.digest() != judged[1] if isinstance(body, _Hashing) and judged else False
            if again or _second_look(entry.source, before, handle) or (len(data) <= CHUNK and len(data) != info.size):
                raise WorkdirError(f"--workdir {self.root}: {entry.rel} changed while packing; try again")
        self.shipped.append(dataclasses.replace(entry, size=before.st_size))


def _judge(handle: BinaryIO, data: bytes) -> tuple[str, bytes]:
    """(why the file stays out, or "" to ship it; the SHA-256 of what was judged, for a big file) of a file
    whose first ``data`` was read from ``handle``: a big one is read to its end first.

    A file that may hold a top-level ``secrets:`` map (``VALUES_HINT``), whatever its name, is parsed as
    YAML (JSON is YAML here), the whole of it up to ``PARSE_LIMIT``: a values file's ``secrets:`` after
    its first megabyte counts as well (issue 55). Raises ``_Changed`` when a second read differs."""
    sniffer = KeySniffer()
    digest = hashlib.sha256(data)
    sniffer.feed(data)
    big = len(data) > CHUNK
    if big:
        for chunk in iter(lambda: handle.read(CHUNK), b""):  # a big file: sniff all of it first
            digest.update(chunk)
            sniffer.feed(chunk)
    if sniffer.found:
        return "holds a private key, credential or access token", b""
    if not sniffer.values_hint:
        return "", digest.digest()
    text = data
    if big and handle.tell() <= PARSE_LIMIT:
        handle.seek(0)
        text = handle.read()
        if hashlib.sha256(text).digest() != digest.digest():
            raise _Changed
    elif big:
        text = b""  # too big to parse: the patterns judge
    parsed = _top_level_secrets(text) if text else None
    has_map = sniffer.map_pattern if parsed is None else parsed
    return ("a top-level secrets: map" if has_map else ""), digest.digest()


def _top_level_secrets(data: bytes) -> bool | None:
    """Does YAML (or JSON) text ``data`` have a non-empty top-level ``secrets:`` map in any document? None: it
    is not YAML. Judged by what a parser reads, so every form a values file may take counts: a UTF-8 BOM,
    ``? secrets``, ``"secr\\u0065ts"``, a flow map on the next line, an alias, several documents.

    Read as parser events (libyaml's, ~5 times faster than building the documents: 0.5 s for 600,000
    numbers) and stopped at the first answer; a top-level merge key (``<<``) is judged on the documents."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: fast, and bounded in depth
    try:
        return _secrets_in_events(yaml.parse(data, Loader=loader))
    except _MergeKey:
        pass
    except (yaml.YAMLError, RecursionError, ValueError, TypeError, OverflowError):
        return None
    try:
        documents = list(yaml.load_all(data, Loader=loader))  # noqa: S506 - a safe loader
    except (yaml.YAMLError, RecursionError, ValueError, TypeError, OverflowError):
        return None
    return any(isinstance(document, dict) and any(key == "secrets" and isinstance(value, dict) and value
                                                   for key, value in document.items())
               for document in documents)


class _MergeKey(Exception):  # noqa: N818
    """A top-level ``<<``: what it merges is judged on the built documents."""


_STR_TAGS = (None, "!", "tag:yaml.org,2002:str")


def _is_secrets(event: Any, names: set[str]) -> bool:
    """Is this node the key ``secrets`` (as a string, or an alias of one)?"""
    if isinstance(event, yaml.AliasEvent):
        return event.anchor in names
    return isinstance(event, yaml.ScalarEvent) and event.value == "secrets" and event.tag in _STR_TAGS


class _RootKeys:
    """Parser events -> whether a root mapping has the key ``secrets`` with a non-empty mapping value."""

    def __init__(self) -> None:
        self.full: set[str] = set()  # anchors of non-empty mappings
        self.names: set[str] = set()  # anchors of the scalar "secrets"
        self.depth = 0
        self.root_map = self.is_key = self.wanted = self.judge_next = False
        self.opened: str | None = None  # the anchor of the mapping the previous event opened

    def after_opening(self, event: Any) -> bool:
        """What the event after a mapping's start tells: the mapping is not empty. True: it was the value
        of ``secrets``."""
        if not isinstance(event, yaml.MappingEndEvent):
            if self.opened is not None:
                self.full.add(self.opened)
            if self.judge_next:
                return True
        self.judge_next, self.opened = False, None
        return False

    def event(self, event: Any) -> bool:
        """Take the next event; True once the answer is yes."""
        if self.after_opening(event):
            return True
        if isinstance(event, yaml.CollectionEndEvent):
            self.depth -= 1
            return False
        if not isinstance(event, yaml.NodeEvent):
            return False
        if isinstance(event, yaml.ScalarEvent) and event.anchor and _is_secrets(event, self.names):
            self.names.add(event.anchor)
        if self.depth == 0:
            self.root_map, self.is_key = isinstance(event, yaml.MappingStartEvent), True
        elif self.depth == 1 and self.root_map:
            if self.node(event):
                return True
        if isinstance(event, yaml.MappingStartEvent):
            self.opened = event.anchor
        if isinstance(event, yaml.CollectionStartEvent):
            self.depth += 1
        return False

    def node(self, event: Any) -> bool:
        """A key or a value of the root mapping."""
        key, self.is_key = self.is_key, not self.is_key
        if key:
            if isinstance(event, yaml.ScalarEvent) and event.value == "<<" and event.tag in (
                    None, "tag:yaml.org,2002:merge"):
                raise _MergeKey
            self.wanted = _is_secrets(event, self.names)
            return False
        wanted, self.wanted = self.wanted, False
        if wanted and isinstance(event, yaml.AliasEvent):
            return event.anchor in self.full
        self.judge_next = wanted and isinstance(event, yaml.MappingStartEvent)
        return False


def _secrets_in_events(events: Iterable[Any]) -> bool:
    keys = _RootKeys()
    return any(keys.event(event) for event in events)


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
