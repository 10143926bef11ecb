"""Atomic, checksummed, rotated checkpoints, and finding the newest good one.

A checkpoint is an ordinary ``torch.save`` file (so ``torch.load`` opens it)
named ``ckpt-e{epoch:04d}-s{step:06d}.pt`` after the position training
resumes from, plus a ``.sha256`` sidecar. Writing goes to a temporary file in
the same folder, is fsync'ed, then renamed over the final name (and the
folder fsync'ed), so a crash leaves either the old set or the new file, never
half a file under a checkpoint name. Loading verifies the checksum when the
sidecar exists; a file that fails (truncated, corrupted, or whose sidecar is
itself unreadable) is skipped with a warning and the previous one is used.
Temporary files a killed writer left behind are removed by the next
successful save (and by :func:`remove_stale_temporaries` at start-up).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from paijob.common.safefile import atomic_write

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^ckpt-e(\d{4,})-s(\d{6,})\.pt$")
# What safefile.atomic_write's temporary names look like for a checkpoint or its sidecar.
TEMP_RE = re.compile(r"^\.ckpt-e\d{4,}-s\d{6,}\.pt(\.sha256)?\..+\.tmp$")
SIDECAR_RE = re.compile(r"^([0-9a-f]{64})\s+(\d+)\s*$")


@dataclass(frozen=True, order=True)
class CheckpointRef:
    epoch: int
    step: int
    path: Path


def checkpoint_name(epoch: int, step: int) -> str:
    return f"ckpt-e{epoch:04d}-s{step:06d}.pt"


class _HashingWriter:
    def __init__(self, handle: Any, die_after: int | None = None) -> None:
        self.handle = handle
        self.digest = hashlib.sha256()
        self.size = 0
        self.die_after = die_after  # fault injection: the process dies (as by SIGKILL) past this many bytes

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.digest.update(view)
        self.size += view.nbytes
        written = self.handle.write(view)
        if self.die_after is not None and self.size >= self.die_after:
            self.handle.flush()
            os._exit(137)  # a crash halfway through the write: the temporary file stays, unfinished
        return written

    def flush(self) -> None:
        self.handle.flush()


def save_checkpoint(folder: str | os.PathLike[str], epoch: int, step: int, state: dict[str, Any],
                    keep: int = 3, die_after: int | None = None) -> Path:
    """Write ``state`` atomically as the checkpoint for resume position (epoch, step); rotate. ``die_after``:
    fault injection (``PAIJOB_FAULT_AT``'s ``save``), the process dies past that many bytes of it."""
    base = Path(folder)
    base.mkdir(parents=True, exist_ok=True)
    path = base / checkpoint_name(epoch, step)
    holder: dict[str, _HashingWriter] = {}

    def write(handle: Any) -> None:
        writer = _HashingWriter(handle, die_after)
        holder["w"] = writer
        torch.save(state, writer)  # type: ignore[arg-type]

    atomic_write(path, write)
    writer = holder["w"]
    sidecar = f"{writer.digest.hexdigest()}  {writer.size}\n".encode()
    atomic_write(path.with_name(path.name + ".sha256"), sidecar)
    for old in list_checkpoints(base)[:-keep] if keep > 0 else []:
        for victim in (old.path, old.path.with_name(old.path.name + ".sha256")):
            try:
                victim.unlink()
            except OSError:
                pass
    remove_stale_temporaries(base)
    return path


def remove_stale_temporaries(folder: str | os.PathLike[str]) -> list[Path]:
    """Delete the temporary files of writes that never finished (a process killed mid-save).

    Only names ``atomic_write`` creates for checkpoints are touched; one writer (rank 0) saves
    at a time, so a temporary file seen here is never one still being written.
    """
    base = Path(folder)
    if not base.is_dir():
        return []
    removed = []
    for entry in base.iterdir():
        if TEMP_RE.match(entry.name) and entry.is_file():
            try:
                entry.unlink()
            except OSError:
                continue
            removed.append(entry)
    return removed


def list_checkpoints(folder: str | os.PathLike[str]) -> list[CheckpointRef]:
    """Checkpoints in ``folder``, oldest first (by resume position)."""
    base = Path(folder)
    if not base.is_dir():
        return []
    refs = []
    for entry in base.iterdir():
        match = NAME_RE.match(entry.name)
        if match and entry.is_file():
            refs.append(CheckpointRef(int(match.group(1)), int(match.group(2)), entry))
    return sorted(refs)


class CorruptCheckpoint(Exception):
    pass


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load one checkpoint, verifying its checksum sidecar when present."""
    target = Path(path)
    sidecar = target.with_name(target.name + ".sha256")
    data = target.read_bytes()
    if sidecar.is_file():
        digest, size = _read_sidecar(sidecar)
        if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
            raise CorruptCheckpoint(f"{target}: checksum mismatch (size {len(data)}, expected {size})")
    import io

    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:
        raise CorruptCheckpoint(f"{target}: cannot be loaded ({error})") from error
    if not isinstance(state, dict) or "model" not in state:
        raise CorruptCheckpoint(f"{target}: not a paijob recipe checkpoint")
    return state


def _read_sidecar(sidecar: Path) -> tuple[str, int]:
    """``<sha256 hex>  <size>``; anything else means the sidecar (so the pair) is not trustworthy."""
    try:
        text = sidecar.read_bytes().decode("ascii")
    except UnicodeDecodeError:
        text = ""
    match = SIDECAR_RE.match(text)
    if match is None:
        raise CorruptCheckpoint(f"{sidecar}: checksum sidecar is not '<sha256> <size>' ({text[:60]!r})")
    return match.group(1), int(match.group(2))


def load_newest(folder: str | os.PathLike[str]) -> tuple[CheckpointRef, dict[str, Any]] | None:
    """The newest checkpoint that loads; broken newer ones are skipped with a warning."""
    for ref in reversed(list_checkpoints(folder)):
        try:
            return ref, load_checkpoint(ref.path)
        except (CorruptCheckpoint, OSError) as error:
            log.warning("paijob: skipping unusable checkpoint: %s; trying the previous one", error)
    return None
