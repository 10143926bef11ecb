"""The watch's folder: every file a worker writes and its node reads, by name, and how each is written and read.

Why one module: the worker side (:mod:`paijob.runtime.watch.worker`) and the node side (the doctors, the
failure account) meet only here, in a folder the launcher makes per node (``PAIJOB_HANG_DIR``). The job can
write into that folder too (it runs as the same user), so every file is written atomically and never through a
link (:func:`write_new`), and read bounded, never through a link and never a FIFO (:func:`read_file`). What a
reader believes beyond that (whose process wrote it, its MAC) is :mod:`paijob.runtime.watch.node.believed`'s.

=====================  ============================  ==================================================
file                   written by                    read by
=====================  ============================  ==================================================
``rank<N>.json``       the rank's sampler, 1/s       the node's eyes (both doctors' look)
``rank<N>.stack``      faulthandler's watchdog       the hang doctor (a rank whose sampler is silent)
``rank<N>.slow.json``  the rank's sampler, 1/5 s     the slow-rank doctor; the hang verdict (its calls)
``rank<N>.error.json`` the worker, as its code fails the failure account (type, message, file:line)
``rank<N>.calls.json`` the sampler, once asked       the failure account (a mismatch's evidence)
``calls.request``      the failure account           every sampler (answers once, with its nonce)
``fork<pid>.json``     a DataLoader worker's thread  the hang doctor (the worker a rank waits for)
``slow-verdict.json``  node 0's slow-rank doctor     rank 0's recipe summary
``restarts.json``      node 0's launcher, each restart rank 0's recipe summary
=====================  ============================  ==================================================

A restart (``--max-restarts``) clears the workers' files (:func:`clear_round`): the new workers write their own,
and nothing a stopped worker wrote is read as theirs; node 0's two records stay.

No torch import.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
from dataclasses import asdict, dataclass
from typing import Any

from paijob.common import contract, procfs, untrusted

MAX_REPORT = 1 << 20  # bytes: a sampler file is a few kB; anything larger is not one
MAX_ERROR = 500  # characters of an error's text kept in a report or an error record
MAX_ANSWER = 64 * 1024  # bytes of a calls answer read
MAX_EVIDENCE = 256 * 1024  # bytes of a rank's evidence file read
REQUEST_FILE = "calls.request"  # the failure account wants every live rank's calls
SLOW_VERDICT = contract.SLOW_VERDICT_NAME  # node 0's slow-rank verdict, for rank 0's summary


def report_path(folder: str, rank: int) -> str:
    """``rank<N>.json``: where the rank's sampler is and whether it moves."""
    return os.path.join(folder, f"rank{rank}.json")


def report_rank(name: str) -> int | None:
    """The rank a file name ``rank<N>.json`` is the report of; None: not a report's name."""
    digits = name[len("rank"):-len(".json")] if name.startswith("rank") and name.endswith(".json") else ""
    return int(digits) if digits.isdigit() else None


def stack_path(folder: str, rank: int) -> str:
    """``rank<N>.stack``: faulthandler's watchdog dump of a rank whose sampler cannot run."""
    return os.path.join(folder, f"rank{rank}.stack")


def evidence_name(rank: int) -> str:
    return f"rank{rank}.slow.json"


def evidence_path(folder: str, rank: int) -> str:
    """``rank<N>.slow.json``: the slow-rank doctor's evidence of one rank."""
    return os.path.join(folder, evidence_name(rank))


def error_path(folder: str, rank: int) -> str:
    """``rank<N>.error.json``: the failure that ended the rank's code, as a record (its type, message, line)."""
    return os.path.join(folder, f"rank{rank}.error.json")


def answer_path(folder: str, rank: int) -> str:
    """``rank<N>.calls.json``: a rank's last collectives, once the failure account asked."""
    return os.path.join(folder, f"rank{rank}.calls.json")


def fork_path(folder: str, pid: int) -> str:
    """``fork<pid>.json``: where a process forked from a worker (a DataLoader worker) is."""
    return os.path.join(folder, f"fork{pid}.json")


def write_new(path: str, text: str) -> None:
    """Replace ``path`` by ``text`` atomically, never through a link (the temporary file is created
    exclusively; a link planted under its name is removed first)."""
    temp = f"{path}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temp, path)


def read_file(path: str, limit: int = MAX_REPORT) -> bytes | None:
    """A file's bytes, read without following a link and at most ``limit``; None: no such file, a
    link, not a regular file, or too large."""
    return untrusted.read_regular(path, limit)


def read_stack_dump(folder: str, rank: int) -> str:
    """What faulthandler's watchdog wrote for ``rank`` (its sampler missed a few samples); "" when none."""
    data = read_file(stack_path(folder, rank))
    return data.decode("utf-8", "replace").strip() if data else ""


def clear_round(folder: str) -> None:
    """Remove every file the workers of the round that ended wrote or were asked for (their reports, stacks,
    evidence, error records, answers, the request, their forks'); node 0's records (the slow-rank verdict, the
    restarts) stay."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if name.startswith(("rank", "fork")) or name == REQUEST_FILE or name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))


def write_request(folder: str) -> None:
    """Ask every live rank of this node for its last collectives (idempotent). The request holds a fresh
    nonce that an answer must repeat, and answers already in the folder are removed first: an answer the job
    wrote before the request is never believed."""
    path = os.path.join(folder, REQUEST_FILE)
    if os.path.exists(path):
        return
    for name in os.listdir(folder):
        if name.startswith("rank") and name.endswith(".calls.json"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))
    write_new(path, secrets.token_hex(16))


def request_nonce(folder: str) -> str | None:
    """The request's nonce (:func:`write_request`), which an answer repeats; None: no request."""
    data = untrusted.read_regular(os.path.join(folder, REQUEST_FILE), 64)
    text = data.decode("ascii", "replace").strip() if data else ""
    return text if len(text) == 32 and all(c in "0123456789abcdef" for c in text) else None


def read_forked(folder: str, pid: int, parent: object) -> dict[str, Any] | None:
    """``fork<pid>.json``, when ``pid`` is a live child of ``parent`` with the start time the file says;
    None otherwise."""
    data = read_file(fork_path(folder, pid))
    try:
        report = untrusted.loads(data) if data else None
    except ValueError:
        return None
    stat = procfs.read_stat(pid)
    if (not isinstance(report, dict) or stat is None or report.get("pid") != pid
            or stat.ppid != parent or report.get("start_time") != stat.start_time):
        return None
    return report


MAX_WHERE = 300  # characters of an error record's ``where``
MAX_TYPE = 200  # characters of an exception type's name


@dataclass(frozen=True)
class WorkerError:
    """The exception that ended a rank's code, as its wrapper wrote it (as torch's ``@record`` error file
    does): the launcher reads this, never the traceback's text (that stays for the user to read).

    ``error`` is Python's own last line of the traceback (``ValueError: bad batch``); ``where`` the
    script's innermost line (``train.py:42 in step``); ``consequence``: the exception says a peer went
    away (a connection closed or reset, a collective aborted): a knock-on of another rank's failure,
    never a root cause."""

    rank: int
    pid: int
    start_time: int
    error: str
    where: str
    consequence: bool
    time: float

    def to_json(self) -> str:
        return json.dumps({"v": 1, "kind": "worker-error", **asdict(self)}, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: bytes | str) -> WorkerError:
        """The record :meth:`to_json` wrote, checked field by field; :class:`ValueError` for anything else."""
        value = untrusted.loads(data)
        if not isinstance(value, dict) or set(value) != {"v", "kind", *_ERROR_FIELDS}:
            raise ValueError("not a worker-error record")
        if value["v"] != 1 or value["kind"] != "worker-error":
            raise ValueError("not a version-1 worker-error record")
        wrong = [name for name, ok in _ERROR_FIELDS.items() if not ok(value[name])]
        if wrong:
            raise ValueError(f"worker-error record: {', '.join(wrong)}")
        return cls(value["rank"], value["pid"], value["start_time"], value["error"], value["where"],
                   value["consequence"], float(value["time"]))


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


_ERROR_FIELDS: dict[str, Any] = {  # each field of a worker-error record, and what its value must be
    "rank": _count, "pid": _count, "start_time": _count,
    "error": lambda v: isinstance(v, str) and len(v) <= MAX_ERROR + MAX_TYPE,
    "where": lambda v: isinstance(v, str) and len(v) <= MAX_WHERE,
    "consequence": lambda v: isinstance(v, bool),
    "time": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
}
