"""Shared pieces of the verbs that talk to a cluster: options, the client (through ``paijob.api``), display."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import yaml

from paijob.common import records
from paijob.openpai.jobstate import is_terminal
from paijob.openpai.rest import tasks_of

if TYPE_CHECKING:  # the client (requests) is imported when a verb runs, not to build `paijob --help`
    from paijob.remote.client import PaiClient



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


def add_raw_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--raw", action="store_true",
                        help="write what the job wrote as is, control sequences included (by default they are "
                             "shown escaped on a terminal, colours kept; a pipe or file always gets them raw)")


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
    """``api.connect`` for ``-c`` (else the project's, else the current profile) and ``--timeout``.
    Read-only verbs pass ``start_local=False``: a local cluster that is down is then an error saying
    so, not started."""
    from paijob import api

    return api.connect(getattr(args, "cluster", None), timeout=getattr(args, "timeout", 30.0) or 30.0,
                       start_local=start_local, on_note=note)


def note(line: str) -> None:
    """Where the library's notes to the user go: one line on stderr."""
    print(line, file=sys.stderr)


def print_json(data: Any, out: TextIO | None = None) -> None:
    print(json.dumps(data, indent=2, sort_keys=False), file=out or sys.stdout)


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
    """From ``start`` to ``end`` (a server's milliseconds; no end: until now), as paijob writes every duration
    (``paijob.common.durations``: ``0.4 s``, ``42 s``, ``3 min 14 s``, ``2 h 5 min``)."""
    from paijob import api

    begin = _ms(start)
    if begin is None:
        return "-"
    return api.human_duration(((_ms(end) or int(time.time() * 1000)) - begin) / 1000)


def table(rows: list[list[str]], out: TextIO | None = None) -> None:
    if not rows:
        return
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(),
              file=out or sys.stdout)


def _failed(detail: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(role, task) of the task that failed the job, when known."""
    status = detail["jobStatus"]
    role, index = status.get("appExitTriggerTaskRoleName"), status.get("appExitTriggerTaskIndex")
    for name, task in tasks_of(detail):
        if role is not None and (name, task.get("taskIndex")) != (role, index):
            continue
        code = task.get("containerExitCode")
        if task.get("taskState") == "FAILED" or (role is not None and code not in (None, 0)):
            return name, task
    return None


def failing_task(detail: dict[str, Any]) -> str | None:
    """``role/index exited with code N`` for the task that failed the job, when known."""
    failed = _failed(detail)
    if failed is None:
        return None
    name, task = failed
    return f"{name}/{task.get('taskIndex')} exited with code {task.get('containerExitCode')}"


def record_of(task: dict[str, Any]) -> records.FailureRecord | None:
    """paijob-runtime's record of why ``task`` failed (``paijobRootCause``: the local cluster has it from the
    task's log; a real cluster's task has none), checked field by field; None where there is none."""
    try:
        return records.FailureRecord.from_json(task.get("paijobRootCause"))
    except records.RecordError:
        return None


@dataclass(frozen=True)
class RootCause:
    """Why the job failed, as paijob-runtime recorded it: the failed worker (``record.rank``) and the task it
    ran in, or the runtime's own reason (a hang, a lost node, a start-up that failed)."""

    record: records.FailureRecord
    task: str | None  # role/index of the task the failed worker ran in (or whose runtime said it), when known

    def __str__(self) -> str:
        record = self.record
        error = (f": {record.error}" if record.error else "") + (f" ({record.where})" if record.where else "")
        if record.rank is None:
            return record.summary + error
        where = f" on {self.task}" if self.task else ""
        return f"rank {record.rank}{where} failed with {record.how or 'an error'}" + error


def root_cause(detail: dict[str, Any]) -> RootCause | None:
    """The root cause from paijob-runtime's records of the tasks (None: none has one).

    Which task OpenPAI names (``appExitTriggerTaskRoleName``) is only the first to exit: when rank 1 raises,
    node 0 may learn of it and exit first, and the attempt then stops rank 1's task. Every node's
    paijob-runtime names the same root cause; a node reporting its own worker beats one reporting a worker
    "on another node", whose task follows from paijob-runtime's layout (node ranks count the tasks in role
    order); a worker's failure beats a runtime's own reason (a launcher's closing line), and the task that
    failed the job comes first among equals.
    """
    found = []
    failed = _failed(detail)
    for order, (role, task) in enumerate(tasks_of(detail)):
        record = record_of(task)
        if record is not None:
            trigger = failed is not None and failed[1] is task
            found.append(((record.rank is None, record.elsewhere, not trigger, order), f"{role}/{task.get('taskIndex')}",
                          record))
    if not found:
        return None
    _key, where, record = min(found, key=lambda item: item[0])
    node = record.worker_node
    return RootCause(record, _task_of_node(detail, node) if record.elsewhere and node is not None else where)


def _task_of_node(detail: dict[str, Any], node_rank: int) -> str | None:
    for role, task in tasks_of(detail):
        if node_rank == 0:
            return f"{role}/{task.get('taskIndex')}"
        node_rank -= 1
    return None


def outcome_line(job_id: str, detail: dict[str, Any]) -> str:
    """The one line a finished job ends with; a failed one leads with the root cause, then what OpenPAI saw."""
    status = detail["jobStatus"]
    state = status["state"]
    text = f"job {job_id} {state}"
    if state == "FAILED":
        cause = root_cause(detail)
        failing = failing_task(detail)
        if cause and failing:
            text += f": {cause} (OpenPAI: {failing})"
        elif cause or failing:
            text += f": {cause or failing}"
        elif status.get("appExitDiagnostics"):
            text += f": {status['appExitDiagnostics']}"
    elif state == "STOPPED" and status.get("appExitDiagnostics"):
        text += f" ({status['appExitDiagnostics']})"
    text += f" after {duration(status.get('launchedTime') or status.get('createdTime'), status.get('completedTime'))}"
    return text


def slow_rank_headline(detail: dict[str, Any]) -> str | None:
    """The slow-rank doctor's line about a job (the local cluster's ``paijobSlowRank``), ``(over the run)``
    once the job ended; None without one. A job that succeeded still had a rank the others waited for."""
    slow = detail.get("jobStatus", {}).get("paijobSlowRank")
    if not isinstance(slow, dict) or not isinstance(slow.get("line"), str):
        return None
    return slow["line"] + (" (over the run)" if slow.get("final") is True else "")


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


R = TypeVar("R", records.StallRecord, records.SlowRecord)


def served_record(kind: type[R], served: object) -> R | None:
    """A record the local cluster serves (as data, with its version and kind), read strictly; None: none."""
    if not isinstance(served, dict):
        return None
    try:
        return kind.from_json(served)
    except records.RecordError:
        return None
