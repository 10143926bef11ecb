"""Task logs as they grow: ``paijob logs`` and ``paijob run`` print them through ``LogFollower``.

OpenPAI's REST API gives, per job attempt, role, index and task attempt, the
URIs of a task's stdout, stderr and both interleaved; each is read from the
offset reached so far, so a follow never repeats or loses a line, and memory
stays flat whatever the size of a log.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TextIO

from paijob import termsafe
from paijob.errors import PaijobError
from paijob.openpai.jobstate import is_terminal
from paijob.openpai.rest import tasks_of

if TYPE_CHECKING:
    from paijob.remote.client import PaiClient
    from paijob.remote.log_times import LogTimes

MAX_LINE = 1024 * 1024  # a log "line" longer than this is printed in pieces



@dataclass
class _Stream:
    uri: str
    offset: int = 0
    partial: bytes = b""
    partial_at: int = 0  # the log offset of partial's first byte
    times: LogTimes | None = None  # when each byte was written, where the cluster records it


@dataclass
class LogFollower:
    """Prints task logs as they grow, each line prefixed ``role/index``."""

    client: PaiClient
    job_id: str
    role: str | None = None
    index: int | None = None
    stream: str = "all"
    out: TextIO = field(default_factory=lambda: sys.stdout)
    prefix: bool = True
    rank: int | None = None  # only lines paijob-runtime prefixed [rank<N>]:
    timestamps: bool = False  # prefix the UTC time the line was written (local cluster), else read
    tail: int | None = None  # of what is there at the first poll, only the last N lines per task
    escape: bool = False  # show control sequences escaped (termsafe.line): ``out`` is a terminal
    tails: dict[tuple[int, str, int, int], deque[str]] = field(default_factory=dict)
    streams: dict[tuple[int, str, int, int], _Stream] = field(default_factory=dict)
    announced: set[tuple[int, str, int, int]] = field(default_factory=set)
    done: set[tuple[int, str, int, int]] = field(default_factory=set)
    warned: bool = False
    on_note: Callable[[str], None] | None = None  # hears what the user should be told beside the logs

    def check(self, detail: dict[str, Any]) -> None:
        """Refuse a ``role`` or ``index`` that no task of the job has (else nothing would print, silently)."""
        roles = detail.get("taskRoles") or {}
        if self.role is not None and self.role not in roles:
            raise PaijobError(f"job {self.job_id} has no role {self.role!r} (roles: {', '.join(roles) or 'none'})")
        if self.index is None:
            return
        indexes = sorted({int(task["taskIndex"]) for role, task in tasks_of(detail)
                          if self.role is None or role == self.role})
        if indexes and self.index not in indexes:  # none listed yet: the job is still being set up
            which = f"role {self.role!r}" if self.role is not None else "any role"
            known = f"{indexes[0]} to {indexes[-1]}" if indexes else "none"
            raise PaijobError(f"job {self.job_id} has no task with index {self.index} in {which} "
                              f"(task indexes: {known}); pick one with --index")

    def _note(self, line: str) -> None:
        if self.on_note is not None:
            self.on_note(line)

    def wanted(self, role: str, index: int) -> bool:
        return (self.role is None or role == self.role) and (self.index is None or index == self.index)

    def poll(self, detail: dict[str, Any]) -> None:
        attempt = int(detail["jobStatus"].get("attemptId") or 0)
        for key in sorted(k for k in self.streams if k[0] < attempt and k not in self.done):
            self._read(key, final=True)  # what an earlier job attempt wrote last
            self.done.add(key)
        for role, task in tasks_of(detail):
            index = int(task["taskIndex"])
            if not self.wanted(role, index) or task.get("taskState") == "WAITING":
                continue
            task_attempt = int(task.get("attemptId") or 0)
            # earlier task attempts (retries) first, so nothing they wrote is lost
            for earlier in range(task_attempt + 1):
                self._read((attempt, role, index, earlier))

    def _read(self, key: tuple[int, str, int, int], final: bool = False) -> None:
        stream = self.streams.get(key)
        if stream is None:
            from paijob.remote.errors import NoJobError

            try:
                uris = self.client.log_locations(self.job_id, *key)
            except NoJobError:
                if not self.warned:
                    self.warned = True
                    self._note(f"paijob: no logs for {key[1]}/{key[2]} through the REST API (yet); older "
                               "OpenPAI versions only show them in the web portal")
                return
            if self.stream not in uris:
                return
            stream = self.streams[key] = _Stream(uris[self.stream])
            if self.timestamps:
                from paijob.remote.log_times import LogTimes

                stream.times = LogTimes.beside(self.client, stream.uri)
        current = stream
        read_to = stream.offset

        def take(data: bytes) -> None:  # lines are printed as they arrive: memory stays flat
            nonlocal read_to
            read_to += len(data)
            lines = (current.partial + data).split(b"\n")
            current.partial = lines.pop()
            sizes = [len(line) + 1 for line in lines]  # with its newline
            if len(current.partial) > MAX_LINE:
                lines.append(current.partial)
                sizes.append(len(current.partial))
                current.partial = b""
            starts = []
            for size in sizes:
                starts.append(current.partial_at)
                current.partial_at += size
            self._lines(key, lines, [self._when(current, start, read_to) for start in starts])

        stream.offset = self.client.stream_log(stream.uri, stream.offset, take)
        if final and stream.partial:
            self._lines(key, [stream.partial], [self._when(stream, stream.partial_at, stream.offset)])
            stream.partial = b""

    def _when(self, stream: _Stream, start: int, read_to: int) -> float | None:
        """When the line at ``start`` was written (``--timestamps``): recorded by the cluster, else now."""
        if not self.timestamps:
            return None
        written = stream.times.at(start, read_to) if stream.times is not None else None
        return written if written is not None else time.time()

    def _lines(self, key: tuple[int, str, int, int], lines: list[bytes], whens: list[float | None]) -> None:
        if not lines:
            return
        if key not in self.announced and (key[0] > 0 or key[3] > 0):
            self._emit(key, f"--- job attempt {key[0]}, task attempt {key[3]} ---", whens[0])
        self.announced.add(key)
        for line, when in zip(lines, whens, strict=True):
            self._emit(key, line.decode("utf-8", "replace"), when)
        self.out.flush()

    def _emit(self, key: tuple[int, str, int, int], line: str, when: float | None = None) -> None:
        if self.rank is not None and not line.startswith(f"[rank{self.rank}]:"):
            return
        if self.timestamps:
            moment = datetime.fromtimestamp(time.time() if when is None else when, timezone.utc)
            line = moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ ") + line
        if self.tail is not None:
            self.tails.setdefault(key, deque(maxlen=self.tail)).append(line)
            return
        self._write(key, line)

    def _write(self, key: tuple[int, str, int, int], line: str) -> None:
        if self.escape:
            line = termsafe.line(line)
        if self.prefix:
            self.out.write(f"{key[1]}/{key[2]} | {line}\n")
        else:
            self.out.write(line + "\n")

    def flush_tail(self) -> None:
        """Print what ``tail`` kept, then stream every later line."""
        kept, self.tail, self.tails = self.tails, None, {}
        for key in sorted(kept):
            for line in kept[key]:
                self._write(key, line)  # already filtered and stamped

    def finish(self) -> None:
        for key in sorted(self.streams):
            if key not in self.done:
                self._read(key, final=True)
                self.done.add(key)
        self.flush_tail()

    def follow(self, interval: float = 0.5, on_update: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Print logs until the job ends; returns the final job detail."""
        while True:
            detail = self.client.get_job(self.job_id)
            if on_update:
                on_update(detail)
            self.poll(detail)
            self.flush_tail()
            if is_terminal(detail["jobStatus"]["state"]):
                self.poll(detail)
                self.finish()
                return detail
            time.sleep(interval)
