"""Shared pieces of the verbs that talk to a cluster: options, client, job loading, log following."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TextIO

import yaml

from paijob.openpai.jobstate import is_terminal

if TYPE_CHECKING:  # the client (requests) is imported when a verb runs, not to build `paijob --help`
    from paijob.remote.client import PaiClient
    from paijob.remote.log_times import LogTimes

MAX_LINE = 1024 * 1024  # a log "line" longer than this is printed in pieces


# --------------------------------------------------------------------------- options


def add_cluster_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster")
    group.add_argument("-c", "--cluster", metavar="NAME",
                       help="cluster profile (see `paijob cluster list`); 'local' is the built-in local "
                            "cluster, also the default when none is configured")
    group.add_argument("--timeout", type=seconds, default=30.0, metavar="S",
                       help="the most seconds one request to the cluster may take, from connect to its "
                            "last byte (default 30); a request that runs out of time is not retried")


def seconds(text: str) -> float:
    """argparse type: a positive, finite number of seconds (not -1, nan or inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive, finite number of seconds, got {text!r}")
    return value


OUTPUT_FORMATS = ("table", "wide", "json", "yaml")


def add_output_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=OUTPUT_FORMATS, default="table",
                        help="table for people (default), wide (more columns), json or yaml for scripts")


def print_data(data: Any, fmt: str, out: TextIO | None = None) -> bool:
    """Print ``data`` as JSON or YAML when ``fmt`` asks for it; False for table/wide (the verb's own table)."""
    if fmt == "json":
        print_json(data, out)
        return True
    if fmt == "yaml":
        (out or sys.stdout).write(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
        return True
    return False


def client_for(args: argparse.Namespace, *, start_local: bool = True) -> PaiClient:
    """A client for ``-c`` (else the project's, else the current profile). Read-only verbs pass
    ``start_local=False``: a local cluster that is down is then an error saying so, not started."""
    from paijob.api import resolve_cluster
    from paijob.remote.client import PaiClient

    cluster = resolve_cluster(getattr(args, "cluster", None), start_local=start_local)
    if cluster.is_local and not start_local:
        from paijob.local import service

        cluster = service.local_cluster(start=False)
    return PaiClient(
        cluster.url,
        cluster.token,
        user=cluster.user,
        api_path=cluster.api_path,
        timeout=getattr(args, "timeout", 30.0) or 30.0,
        cluster_name=cluster.name,
    )


def print_json(data: Any, out: TextIO | None = None) -> None:
    print(json.dumps(data, indent=2, sort_keys=False), file=out or sys.stdout)


# --------------------------------------------------------------------------- jobs


# --------------------------------------------------------------------------- display


def _ms(value: Any) -> float | None:
    """A server's milliseconds-since-epoch field, or None when it is absent or not a usable number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value if 0 < value < 253402300800000 else None  # before year 10000


def when(ms: Any) -> str:
    value = _ms(ms)
    if value is None:
        return "-"
    return datetime.fromtimestamp(value / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(start: Any, end: Any) -> str:
    begin = _ms(start)
    if begin is None:
        return "-"
    seconds = ((_ms(end) or int(time.time() * 1000)) - begin) / 1000
    if seconds < 90:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def table(rows: list[list[str]], out: TextIO | None = None) -> None:
    if not rows:
        return
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(),
              file=out or sys.stdout)


def tasks_of(detail: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(role, status) for role, info in (detail.get("taskRoles") or {}).items()
            for status in info.get("taskStatuses") or []]


def failing_task(detail: dict[str, Any]) -> str | None:
    """``role/index exited with code N`` for the task that failed the job, when known."""
    status = detail["jobStatus"]
    role, index = status.get("appExitTriggerTaskRoleName"), status.get("appExitTriggerTaskIndex")
    for name, task in tasks_of(detail):
        if role is not None and (name, task.get("taskIndex")) != (role, index):
            continue
        code = task.get("containerExitCode")
        if task.get("taskState") == "FAILED" or (role is not None and code not in (None, 0)):
            return f"{name}/{task.get('taskIndex')} exited with code {code}"
    return None


def outcome_line(job_id: str, detail: dict[str, Any]) -> str:
    status = detail["jobStatus"]
    state = status["state"]
    text = f"job {job_id} {state}"
    if state == "FAILED":
        failing = failing_task(detail)
        if failing:
            text += f": {failing}"
        elif status.get("appExitDiagnostics"):
            text += f": {status['appExitDiagnostics']}"
    elif state == "STOPPED" and status.get("appExitDiagnostics"):
        text += f" ({status['appExitDiagnostics']})"
    text += f" after {duration(status.get('launchedTime') or status.get('createdTime'), status.get('completedTime'))}"
    return text


class Progress:
    """Task progress while waiting: one rewritten line on a TTY, a line per change otherwise."""

    def __init__(self, job_id: str, out: TextIO | None = None) -> None:
        self.job_id = job_id
        self.out = out or sys.stderr
        self.tty = self.out.isatty()
        self.last = ""

    def __call__(self, detail: dict[str, Any]) -> None:
        counts: dict[str, int] = {}
        for _, task in tasks_of(detail):
            counts[task["taskState"]] = counts.get(task["taskState"], 0) + 1
        tasks = ", ".join(f"{n} {state.lower()}" for state, n in sorted(counts.items()))
        status = detail["jobStatus"]
        line = f"{self.job_id}: {status['state']} (attempt {status.get('attemptId', 0)}; tasks: {tasks})"
        if line == self.last:
            return
        self.last = line
        if self.tty:
            self.out.write("\r\033[K" + line)
            if is_terminal(status["state"]):
                self.out.write("\n")
        else:
            self.out.write(line + "\n")
        self.out.flush()


# --------------------------------------------------------------------------- logs


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
    tails: dict[tuple[int, str, int, int], deque[str]] = field(default_factory=dict)
    streams: dict[tuple[int, str, int, int], _Stream] = field(default_factory=dict)
    announced: set[tuple[int, str, int, int]] = field(default_factory=set)
    done: set[tuple[int, str, int, int]] = field(default_factory=set)
    warned: bool = False

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
            from paijob.remote.client import NoJobError

            try:
                uris = self.client.log_locations(self.job_id, *key)
            except NoJobError:
                if not self.warned:
                    self.warned = True
                    print(f"paijob: no logs for {key[1]}/{key[2]} through the REST API (yet); older "
                          "OpenPAI versions only show them in the web portal", file=sys.stderr)
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
