"""A local task's log files: written as the task runs, their end read once it exits.

Each task's folder under the state dir's ``logs/`` holds ``stdout``, ``stderr``
and the interleaved ``all`` (what the log manager serves), each with its
``NAME.times`` beside it. The files are 0600: a task's log may print secrets.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import IO

from paijob.openpai import exitspec


def log_tail(path: Path) -> str:
    """The end of a task's combined log, as much as openpai-runtime searches for exit patterns."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - exitspec.MAX_SEARCH_LOG_BYTES))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    # the local cluster's own notes are not the user's output (OpenPAI keeps its runtime log apart)
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("[paijob local]"))


def _private_file(path: str, flags: int) -> int:
    """``open`` opener: a new file is 0600 whatever the umask (task logs may print secrets)."""
    return os.open(path, flags, 0o600)


class LogSink:
    """Writes a task's stdout / stderr to their own files and to the interleaved ``all``.

    Beside each, ``NAME.times`` gets ``OFFSET UNIXTIME`` for every chunk as it
    arrives, before the chunk itself: ``paijob logs --timestamps`` stamps each
    line with when the task wrote it, not when paijob read it.

    A write that fails (a full disk) is kept as ``fault`` for the runner, which
    ends the job; the pipes are still drained, so the task never blocks on them.
    """

    def __init__(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        names = ("stdout", "stderr", "all")
        self.files = {name: open(log_dir / name, "ab", buffering=0, opener=_private_file) for name in names}
        self.times = {name: open(log_dir / f"{name}.times", "ab", buffering=0, opener=_private_file) for name in names}
        self.sizes = {name: os.fstat(handle.fileno()).st_size for name, handle in self.files.items()}
        self.lock = threading.Lock()
        self.fault: OSError | None = None

    def write(self, stream: str, data: bytes) -> None:
        with self.lock:
            stamp = f"{time.time():.3f}"
            for name in (stream, "all"):
                self.times[name].write(f"{self.sizes[name]} {stamp}\n".encode())
                self.files[name].write(data)
                self.sizes[name] += len(data)

    def pump(self, stream: str, pipe: IO[bytes]) -> None:
        read = getattr(pipe, "read1", pipe.read)  # whatever is there: progress bars need no newline
        try:
            for chunk in iter(lambda: read(65536), b""):
                if self.fault is not None:
                    continue
                try:
                    self.write(stream, chunk)
                except OSError as error:
                    self.fault = error
        finally:
            pipe.close()

    def close(self) -> None:
        for handle in (*self.files.values(), *self.times.values()):
            handle.close()
