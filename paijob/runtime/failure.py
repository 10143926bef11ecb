"""Failure records the nodes of one job exchange, picking the root cause, and reporting it.

No torch: the launcher (:mod:`paijob.runtime.launch`), torch's agent
(:mod:`paijob.runtime.agent`) and the node watch all report through here.
"""

from __future__ import annotations

import json
import math
import re
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from paijob.common import exitcodes, untrusted
from paijob.common.records import FailureRecord
from paijob.runtime.console import say, tell

# An exception whose words match this says a peer went away: a consequence, not the root cause.
_SECONDARY = re.compile(
    r"Connection closed by peer|Connection reset by peer|DistNetworkError|DistBackendError|"
    r"NCCL communicator was aborted|recvBytes|Broken pipe|ProcessGroupGloo.*(timed out|closed)|"
    r"Socket Timeout|connection refused",
    re.IGNORECASE,
)
# torch's own process-group timeout, in a rank's error (gloo's "Timed out waiting", NCCL's watchdog)
_TIMED_OUT = re.compile(r"timed out|timeout|Watchdog caught collective operation", re.IGNORECASE)
# torch prefixes a worker's uncaught-exception lines with "[rankN]:".
_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")


def is_consequence(error: BaseException) -> bool:
    """Whether ``error`` says a peer went away (a connection closed or reset, a communicator aborted):
    a knock-on of another rank's failure, not a root cause. Judged in the worker, on the exception
    itself (its type and message), never on a traceback's text."""
    text = f"{type(error).__name__}: {error}"
    return bool(_SECONDARY.search(text)) or any(
        cls.__name__ in ("DistNetworkError", "DistBackendError") for cls in type(error).__mro__)


def said_timeout(text: str) -> bool:
    """Whether an error says torch's own process-group timeout fired (in the rank that waited)."""
    return bool(_TIMED_OUT.search(text))


def first_timed_out(failures: Sequence[Failure]) -> Failure | None:
    """The earliest worker failure whose error says a collective timed out (torch's own
    process-group timeout); None: none did."""
    timed_out = [f for f in failures if f.rank is not None and said_timeout(f.error or f.tail or "")]
    return min(timed_out, key=lambda f: f.time) if timed_out else None


def strip_rank_prefix(line: str) -> str:
    return _RANK_PREFIX.sub("", line)


@dataclass
class Failure:
    """Why a node stopped: a worker's failure, or an infrastructure reason (``rank`` None)."""

    node_rank: int
    rank: int | None
    local_rank: int | None
    returncode: int | None  # Popen style: negative = killed by that signal
    secondary: bool
    time: float
    tail: str = ""
    reason: str = ""
    detail: str = ""  # lines that explain ``reason`` (the hang watch's culprit frames)
    exit_status: int | None = None  # this node's exit code, where not the worker's (a hang: 124)
    overrides: bool = False  # the hang watch's account of a timeout: beats the timed-out worker's own
    # this node's ranks' last collectives from torch's flight recorder, by rank (a mismatch's evidence:
    # paijob.runtime.watch.node.recorder); keys are strings, as JSON has them
    calls: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    left: bool = False  # a rank that left the job (exit code 0, its process group up): ``reason`` says where
    # from the worker's own error record (paijob.runtime.watch.folder.WorkerError), never from its traceback:
    error: str = ""  # Python's last line of the traceback: "ValueError: bad batch"
    where: str = ""  # the script's line it was raised at: "train.py:42 in step"

    @classmethod
    def leaving(cls, *, node_rank: int, rank: int, local_rank: int | None, time: float, reason: str) -> Failure:
        """A rank whose code ended with exit code 0 while its process group was still up: the root
        cause when its peers then fail for the connection it closed (or wait for it) and nothing
        else failed. It beats consequences, never a failure of its own."""
        return cls(node_rank=node_rank, rank=rank, local_rank=local_rank, returncode=0, secondary=False,
                   time=time, reason=reason, left=True)

    @property
    def exit_code(self) -> int:
        if self.exit_status is not None:
            return self.exit_status
        if self.returncode is None:
            return exitcodes.INFRA_FAILURE
        return exitcodes.from_worker_status(self.returncode) or exitcodes.USER_FAILURE

    def headline(self) -> str:
        if self.rank is None or self.left:
            return self.reason
        status = exitcodes.describe_status(self.returncode or 0)
        return (
            f"worker rank {self.rank} (node rank {self.node_rank}, local rank "
            f"{self.local_rank}) failed with {status}"
        )

    def record(self, node_rank: int, job_wide: bool = False) -> FailureRecord:
        """What node ``node_rank`` tells the cluster of this failure (:mod:`paijob.common.records`);
        ``job_wide``: an account every node gives alike (the hang watch's), never "on another node"."""
        worker = self.rank is not None
        return FailureRecord(
            node_rank=node_rank, exit_code=self.exit_code, summary=self.headline(), rank=self.rank,
            worker_node=self.node_rank if worker and not job_wide else None, local_rank=self.local_rank,
            how=exitcodes.describe_status(self.returncode or 0) if worker else None,
            error=self.error or None, where=(self.where or None) if worker else None,  # a hang's is in its summary
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> Failure:
        """A failure another node published (:meth:`to_json`), read as strictly as a record: bounded JSON,
        exactly these fields, each of its type and size, never ``cls(**value)`` of whatever came;
        :class:`ValueError` for anything else (the store is within reach of the job and of the network)."""
        if len(text) > MAX_FAILURE:
            raise ValueError(f"a failure of more than {MAX_FAILURE} bytes")
        value = untrusted.loads(text)
        if not isinstance(value, dict) or set(value) != set(_FAILURE_FIELDS):
            raise ValueError("not a failure: its fields")
        wrong = [name for name, ok in _FAILURE_FIELDS.items() if not ok(value[name])]
        if wrong:
            raise ValueError(f"not a failure: {', '.join(wrong)}")
        calls = {rank: [c for c in map(checked_call, found) if c is not None] for rank, found in value["calls"].items()}
        return cls(**{**value, "time": float(value["time"]), "calls": calls})


MAX_FAILURE = 1 << 20  # bytes of a failure read back from the store (a mismatch's account with its calls: a few kB)
MAX_CALLS = 64  # recorded calls of one rank in a failure


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31


def _code(value: object) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and -256 < value < 1 << 16)


def _text(limit: int) -> Callable[[object], bool]:
    return lambda value: isinstance(value, str) and len(value) <= limit


def _calls_ok(value: object) -> bool:
    return isinstance(value, dict) and len(value) <= 4096 and all(
        isinstance(rank, str) and rank.isdigit() and isinstance(found, list) and len(found) <= MAX_CALLS
        and all(isinstance(call, dict) and isinstance(call.get("seq"), int) for call in found)
        for rank, found in value.items())


# each field of a published failure, and what its value must be
_FAILURE_FIELDS: dict[str, Callable[[object], bool]] = {
    "node_rank": _count, "rank": lambda v: v is None or _count(v), "local_rank": lambda v: v is None or _count(v),
    "returncode": _code, "secondary": lambda v: isinstance(v, bool),
    "time": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
    "tail": _text(64 * 1024), "reason": _text(8 * 1024), "detail": _text(64 * 1024), "exit_status": _code,
    "overrides": lambda v: isinstance(v, bool), "calls": _calls_ok, "left": lambda v: isinstance(v, bool),
    "error": _text(1024), "where": _text(1024),
}


def checked_call(entry: Any) -> dict[str, Any] | None:
    """One collective as a rank's flight recorder gave it (``{"group", "seq", "op", "sizes", "dtypes",
    "line"}``), its texts printable and short, its lists bounded; None where it is not that."""
    if not isinstance(entry, dict) or not isinstance(entry.get("seq"), int):
        return None
    sizes = entry.get("sizes")
    if not isinstance(sizes, list) or not all(
            isinstance(size, list) and all(isinstance(n, int) for n in size) for size in sizes):
        return None
    line = entry.get("line")
    dtypes = entry.get("dtypes")
    return {"group": _printable(entry.get("group"), 16), "seq": entry["seq"],
            "op": _printable(entry.get("op"), 40), "sizes": [size[:8] for size in sizes[:8]],
            "dtypes": [_printable(d, 24) for d in dtypes][:8] if isinstance(dtypes, list) else [],
            "line": _printable(line, 120) if line is not None else None}


def _printable(value: Any, limit: int) -> str:
    return "".join(ch for ch in str(value) if ch.isprintable())[:limit]


def choose_root_cause(failures: list[Failure]) -> Failure | None:
    """The hang watch's account of a process-group timeout beats the failure it explains;
    primary failures beat consequences (peer-connection errors, workers we stopped), a rank
    that left the job early beats only consequences, a worker beats an infrastructure reason,
    then the earliest wins."""
    if not failures:
        return None
    return min(failures, key=lambda f: (not f.overrides, f.secondary, f.left, f.rank is None, f.time))


def report_root_cause(root: Failure, node_rank: int) -> None:
    """Say why the job failed, once, after every worker's own output: headline, then its tail."""
    # the hang watch judges the whole job, and accounts for a timeout from every rank's state
    job_wide = root.exit_status == exitcodes.HANG or root.overrides
    where = "" if root.node_rank == node_rank or job_wide else " (on another node)"
    # its own line: a worker stopped mid-line (a stopped rank continued to be killed, a progress bar)
    # would otherwise run into it
    print(file=sys.stderr)
    say(f"error: {root.headline()}{where}")
    for line in root.detail.splitlines():
        print(f"  {line}", file=sys.stderr)
    if root.tail:
        say("root cause, last lines of that worker's stderr:")
        for line in root.tail.splitlines():
            print(f"  {line}", file=sys.stderr)
    sys.stderr.flush()
    tell(root.record(node_rank, job_wide))


def stopped_by_signal(signum: int, what: str) -> str:
    """The last line of a node stopped from outside (``paijob stop``, preemption, Ctrl-C)."""
    name = signal.Signals(signum).name
    return (
        f"stopped: received {name}, so {what} stopped (the job was stopped, or the task "
        f"preempted); exit {exitcodes.from_signal(signum)}"
    )
