"""What ``paijob-runtime`` tells the cluster about a task, as records: why it failed, and a stall.

Why records: the runtime's human lines (``paijob-runtime: error: worker rank 1 ... failed ...``) are for
people and may be reworded any day; the local cluster, ``paijob status`` and the portal read these records
instead, so no reader parses wording. This module is the one home of their format (marker, fields,
version), of the writer and of the reader; the runtime writes, the local cluster reads, both import it.

Four records: why a task failed, a stall, a slow rank, and the restarts of the workers inside the attempt. A failure record is one line in the task's
log, the last thing the runtime says::

    paijob-runtime: record {"v": 1, "kind": "failure", "node_rank": 0, "exit_code": 1, ...}

The log is what travels everywhere: on a real OpenPAI cluster a task's log and its exit diagnostics are all
there is. A stall record is a small JSON file that node 0's hang watch keeps where the local cluster asks
(:data:`paijob.common.contract.STALL_FILE`), while the job runs; a slow-rank record likewise, from node 0's
slow-rank doctor (:data:`paijob.common.contract.SLOW_FILE`): its latest verdict while the job runs, the
run's worst straggler once it ended. A restart (``--max-restarts``) is a line in node 0's log as it happens
(``paijob-runtime: record {"v": 1, "kind": "restart", ...}``), and the list of the attempt's restarts a file
(:data:`paijob.common.contract.RESTARTS_FILE`) that node 0 rewrites at each.

Distrust (issue 35). The job writes into the same log and can reach the same folder, so the reader is
strict and bounded: a line of at most :data:`MAX_LINE` characters, the exact fields and types, or nothing.
What the job cannot forge:

* a line under torch's ``[rankN]:`` prefix is never a record (the marker must start the line);
* only the *last* record counts: the runtime writes its record after every worker ended, so a record a
  worker printed earlier is superseded (a launcher's closing record gives way to the account just before
  it, which it sums up: :attr:`FailureRecord.closing`);
* where the cluster gives the runtime a key (the local cluster does, per task: :data:`contract.RECORD_KEY`),
  each record carries an HMAC of its fields under that key, and a record without the right one is ignored.
  The runtime takes the key out of its environment before any worker starts, and no worker's environment
  holds it, so a record a worker prints never passes.

The limit, said honestly: the key is in the environment of the task's shell, so a job's own commands (or a
process of the same user that reads ``/proc/PID/environ``) can sign a record; and without a key (a real
OpenPAI cluster), lines the job prints *after* ``paijob-runtime`` exits look like the runtime's. A record
misleads only the job's own status, never the cluster.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from paijob.common import untrusted
from paijob.common.durations import human_duration

VERSION = 1
MARKER = "paijob-runtime: record "
MAX_LINE = 4096  # characters of one record line; a failure record is well under 2000
MAX_TEXT = 400  # characters of one text field (a summary, an exception line)
MAX_RANKS = 1024  # ranks named in a stall record
MAX_STALL_BYTES = 4096  # a stall file's size; the runtime writes about 100 bytes
STALL_FRESH = 15.0  # seconds: an older stall record is a stall that ended


class RecordError(ValueError):
    """Text that is not a record in this module's exact form."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # a terminal's control characters (C0, DEL, C1)


def _text(value: str | None) -> str | None:
    """A text field as it may be written: one line without control characters (an exception message's
    colours are shown escaped), at most :data:`MAX_TEXT` characters."""
    if value is None:
        return None
    line = _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", " ".join(value.split()))
    return line if len(line) <= MAX_TEXT else line[:MAX_TEXT - 3] + "..."


@dataclass(frozen=True)
class FailureRecord:
    """Why a node's ``paijob-runtime`` failed: a worker's failure (``rank`` set) or its own reason."""

    node_rank: int | None  # the node that wrote the record (None: it failed before it knew)
    exit_code: int  # the exit code the failure means, that node's
    summary: str  # the headline, in the runtime's words ("worker rank 1 (...) failed with exit code 1")
    rank: int | None = None  # the failed worker's global rank; None: not a worker's failure (a hang, a lost node)
    worker_node: int | None = None  # the node rank the failed worker ran on
    local_rank: int | None = None
    how: str | None = None  # "exit code 1", "signal SIGSEGV"
    error: str | None = None  # Python's last line of the worker's traceback ("ValueError: bad batch")
    closing: bool = False  # the launcher's closing line: gives way to the account just before it
    where: str | None = None  # the script's line the error was raised at ("train.py:42 in step")

    def __post_init__(self) -> None:
        object.__setattr__(self, "summary", _text(self.summary) or "")
        object.__setattr__(self, "error", _text(self.error))
        object.__setattr__(self, "how", _text(self.how))
        object.__setattr__(self, "where", _text(self.where))

    @property
    def elsewhere(self) -> bool:
        """The failed worker ran on another node than the one that wrote this."""
        return self.worker_node is not None and self.worker_node != self.node_rank

    def describe(self) -> str:
        """One line for people (a task's exit diagnostics): the summary, where, and the error."""
        where = " (on another node)" if self.elsewhere else ""
        return f"{self.summary}{where}" + (f": {self.error}" if self.error else "") + (
            f" ({self.where})" if self.where else "")

    def as_json(self) -> dict[str, Any]:
        """The record's fields as JSON has them (the local cluster's ``paijobRootCause``)."""
        return {"v": VERSION, "kind": "failure", **asdict(self)}

    @classmethod
    def from_json(cls, data: object) -> FailureRecord:
        """The record in ``data`` (:meth:`as_json`'s form), or :class:`RecordError`."""
        if not isinstance(data, Mapping) or data.get("v") != VERSION or data.get("kind") != "failure":
            raise RecordError("not a version-1 failure record")
        fields = {key: value for key, value in data.items() if key not in ("v", "kind")}
        fields.setdefault("where", None)  # a record written before ``where`` was added has none
        if set(fields) != set(_FAILURE_TYPES):
            raise RecordError(f"fields {sorted(fields)}, expected {sorted(_FAILURE_TYPES)}")
        for key, types in _FAILURE_TYPES.items():
            value = fields[key]
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                raise RecordError(f"{key}: {type(value).__name__}")
            if isinstance(value, str) and (len(value) > MAX_TEXT or _CONTROL.search(value)):
                raise RecordError(f"{key}: not one line of at most {MAX_TEXT} characters without control characters")
        return cls(**fields)


_INT = (int,)
_OPTIONAL_INT = (int, type(None))
_OPTIONAL_TEXT = (str, type(None))
_FAILURE_TYPES: dict[str, tuple[type, ...]] = {
    "node_rank": _OPTIONAL_INT, "exit_code": _INT, "summary": (str,), "rank": _OPTIONAL_INT, "worker_node": _OPTIONAL_INT,
    "local_rank": _OPTIONAL_INT, "how": _OPTIONAL_TEXT, "error": _OPTIONAL_TEXT, "closing": (bool,),
    "where": _OPTIONAL_TEXT,
}


def _mac(key: str, fields: Mapping[str, Any]) -> str:
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()


def failure_line(record: FailureRecord, key: str | None = None) -> str:
    """The one log line that carries ``record`` (signed where the cluster gave a ``key``)."""
    fields = record.as_json()
    if key:
        fields["mac"] = _mac(key, fields)
    return MARKER + json.dumps(fields, separators=(",", ":"))


def read_failure_line(line: str, key: str | None = None) -> FailureRecord:
    """The record of one log line that :func:`failure_line` wrote, or :class:`RecordError`."""
    if not line.startswith(MARKER) or len(line) > MAX_LINE:
        raise RecordError("not a record line")
    try:
        fields = json.loads(line[len(MARKER):])
    except ValueError as error:
        raise RecordError(f"not JSON: {error}") from None
    if not isinstance(fields, dict):
        raise RecordError("not a JSON object")
    mac = fields.pop("mac", None)
    if key and not (isinstance(mac, str) and hmac.compare_digest(mac, _mac(key, fields))):
        raise RecordError("not signed with this task's key")
    return FailureRecord.from_json(fields)


def last_failure(log_text: str, key: str | None = None) -> FailureRecord | None:
    """The runtime's record of why the task failed: the last record line of ``log_text`` (None: none).

    A launcher's closing record gives way to the record just before it, the account it sums up.
    ``key``: the task's record key; records not signed with it are not the runtime's."""
    found: list[FailureRecord] = []
    for line in log_text.splitlines():
        if line.startswith(MARKER):
            try:
                found.append(read_failure_line(line.rstrip("\r"), key))
            except RecordError:
                continue
    if not found:
        return None
    if found[-1].closing and len(found) > 1 and not found[-2].closing:
        return found[-2]
    return found[-1]


# -- stalls ------------------------------------------------------------------------------------------


def rank_ranges(ranks: Iterable[int]) -> str:
    """``0, 2-7``: sorted ranks with runs folded."""
    values = sorted(set(ranks))
    parts: list[str] = []
    start = prev = None
    for value in values:
        if start is None:
            start = prev = value
        elif prev is not None and value == prev + 1:
            prev = value
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = value
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ", ".join(parts)


@dataclass(frozen=True)
class StallRecord:
    """Ranks that made no progress for ``seconds``, as node 0's hang watch saw them at ``time``
    (no ranks: no stall now)."""

    ranks: tuple[int, ...]
    seconds: int
    time: float = 0.0  # when it was written (time.time()): a stall record older than STALL_FRESH has ended

    def describe(self) -> str:
        """``no progress for 1 min 35 s on rank 1``, ``... on ranks 0, 2-7``: the line people read."""
        noun = "ranks" if len(self.ranks) > 1 else "rank"
        return f"no progress for {human_duration(self.seconds)} on {noun} {rank_ranges(self.ranks)}"

    def as_json(self) -> dict[str, Any]:
        """The record as data, with its version and kind (the local cluster's ``paijobStall``)."""
        return {"v": VERSION, "kind": "stall", "ranks": list(self.ranks), "seconds": self.seconds, "time": self.time}

    def to_json(self) -> str:
        return json.dumps(self.as_json())

    @classmethod
    def from_json(cls, text: str | bytes | Mapping[str, Any]) -> StallRecord:
        """The record :meth:`to_json` wrote (or :meth:`as_json`'s data), checked field by field, or
        :class:`RecordError`."""
        data = _record_object(text, "stall", {"ranks", "seconds", "time"})
        ranks, seconds, written = data["ranks"], data["seconds"], data["time"]
        if not isinstance(ranks, list) or len(ranks) > MAX_RANKS or not all(_count(r) for r in ranks):
            raise RecordError("ranks: not a list of ranks")
        if not _count(seconds) or not isinstance(written, (int, float)) or isinstance(written, bool):
            raise RecordError("seconds or time: not numbers")
        return cls(tuple(ranks), seconds, float(written))


def _record_object(text: str | bytes | Mapping[str, Any], kind: str, fields: set[str]) -> dict[str, Any]:
    """The JSON object of a version-1 record of ``kind`` with exactly ``fields`` (and ``v``, ``kind``),
    read bounded (:mod:`paijob.common.untrusted`; already parsed: as served in a job's detail), or
    :class:`RecordError`."""
    if isinstance(text, Mapping):
        data: Any = dict(text) if untrusted.depth(dict(text)) <= untrusted.MAX_DEPTH else None
        if data is None:
            raise RecordError("nested too deep")
    else:
        try:
            data = untrusted.loads(text)
        except ValueError as error:
            raise RecordError(f"not JSON: {error}") from None
    if not isinstance(data, dict) or set(data) != {"v", "kind", *fields} or data["v"] != VERSION or data["kind"] != kind:
        raise RecordError(f"not a version-1 {kind} record")
    return data


R = TypeVar("R")


def signed_text(fields: Mapping[str, Any], key: str | None) -> str:
    """A record file's JSON: its fields, and where the cluster gave a ``key``, their MAC (as a failure line's)."""
    data = dict(fields)
    if key:
        data["mac"] = _mac(key, data)
    return json.dumps(data)


def _read_record(path: str | os.PathLike[str], limit: int, parse: Callable[[Mapping[str, Any]], R],
                 key: str | None) -> R | None:
    """The record in the file at ``path`` (a regular file of at most ``limit`` bytes, no link) as ``parse``
    reads it, its MAC checked where the cluster holds the task's ``key`` (a file the job wrote has none);
    None: no such file, not the record, or not signed with ``key``."""
    data = untrusted.read_regular(os.fspath(path), limit)
    if data is None:
        return None
    try:
        fields = untrusted.loads(data)
    except ValueError:
        return None
    if not isinstance(fields, dict):
        return None
    mac = fields.pop("mac", None)
    if key and not (isinstance(mac, str) and hmac.compare_digest(mac, _mac(key, fields))):
        return None
    try:
        return parse(fields)
    except RecordError:
        return None


def _written(value: object, now: float) -> bool:
    """Whether a record's ``time`` is a time it could have been written: finite, and not in the future
    (a minute of clock skew allowed): a forged 1e300 or NaN would keep a line fresh forever."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and value <= now + 60.0)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**9


def read_stall(path: str | os.PathLike[str], now: float | None = None, key: str | None = None
               ) -> StallRecord | None:
    """The hang watch's stall record in ``path`` when it is fresh, else None.

    The file is in the task's folder, where the job can write too: it is read at most
    :data:`MAX_STALL_BYTES` (never through a link, never a FIFO) and kept only in the exact form
    :meth:`StallRecord.to_json` writes, signed with the task's ``key`` where the cluster gave one, so a job can
    neither make each status request read 150 MB nor put its own text in ``paijob status``."""
    record = _read_record(path, MAX_STALL_BYTES, StallRecord.from_json, key)
    now = time.time() if now is None else now
    if record is None or not _written(record.time, now):
        return None
    fresh = now - record.time < STALL_FRESH
    return record if fresh and record.ranks else None  # no ranks: the stall ended


# -- slow ranks --------------------------------------------------------------------------------------

SLOW_FRESH = 400.0  # seconds: the doctor says a persisting straggler again every 180 s; older, it went away
MAX_SLOW_BYTES = 256 * 1024  # a slow record's file: a line and each rank's figures (~150 bytes a rank)
MAX_LINE_TEXT = 1000  # characters of the doctor's line
SLOW_KINDS = ("rank", "node", "phase")
ACTIVITY_NAMES = ("collective", "data", "host", "compute", "other")


@dataclass(frozen=True)
class SlowRecord:
    """Node 0's slow-rank doctor's verdict at ``time``: its line, the rank(s) it names and every rank's
    figures (wait share, times it arrived last, activity shares, share waiting for a CPU where known); ``final``: the run's worst straggler,
    said as node 0 ended."""

    kind: str  # rank, node or phase (one rank working alone by design: not a straggler)
    line: str
    ranks: tuple[int, ...]
    figures: tuple[dict[str, Any], ...] = ()
    final: bool = False
    time: float = 0.0

    def as_json(self) -> dict[str, Any]:
        """The record as data, with its version and kind (the local cluster's ``paijobSlowRank``)."""
        return {"v": VERSION, "kind": "slow", "verdict": self.kind, "line": self.line, "ranks": list(self.ranks),
                "figures": list(self.figures), "final": self.final, "time": self.time}

    def to_json(self) -> str:
        return json.dumps(self.as_json())

    @classmethod
    def from_json(cls, text: str | bytes | Mapping[str, Any]) -> SlowRecord:
        """The record :meth:`to_json` wrote (or :meth:`as_json`'s data), checked field by field, or
        :class:`RecordError`."""
        data = _record_object(text, "slow", {"verdict", "line", "ranks", "figures", "final", "time"})
        problem = _slow_problem(data)
        if problem:
            raise RecordError(problem)
        return cls(data["verdict"], data["line"], tuple(data["ranks"]), tuple(data["figures"]), data["final"],
                   float(data["time"]))


def _slow_problem(data: dict[str, Any]) -> str | None:
    """What is wrong with a slow-rank record's fields (its keys already checked); None: nothing."""
    line, ranks, written, figures = data["line"], data["ranks"], data["time"], data["figures"]
    if data["verdict"] not in SLOW_KINDS or not isinstance(data["final"], bool):
        return "verdict or final: not the doctor's"
    if not isinstance(line, str) or len(line) > MAX_LINE_TEXT or _CONTROL.search(line):
        return "line: not one printable line"
    if not isinstance(ranks, list) or len(ranks) > MAX_RANKS or not all(_count(r) for r in ranks):
        return "ranks: not a list of ranks"
    if not isinstance(written, (int, float)) or isinstance(written, bool):
        return "time: not a number"
    if not isinstance(figures, list) or len(figures) > MAX_RANKS or not all(map(_figure, figures)):
        return "figures: not each rank's figures"
    return None


def _share(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1


def _figure(value: object) -> bool:
    """One rank's figures as the doctor writes them (:func:`paijob.runtime.watch.slow.verdict.figures`)."""
    keys = {"rank", "node_rank", "host", "local_rank", "wait_share", "last", "activity"}
    # cpu_wait (the share of the wall time waiting for a CPU): only where the rank's readings were known
    return (isinstance(value, dict) and set(value) in (keys, keys | {"cpu_wait"})
            and _share(value.get("cpu_wait", 0.0))
            and _count(value["rank"]) and _count(value["node_rank"]) and _count(value["last"])
            and isinstance(value["host"], str) and len(value["host"]) <= 64 and not _CONTROL.search(value["host"])
            and (value["local_rank"] is None or _count(value["local_rank"])) and _share(value["wait_share"])
            and isinstance(value["activity"], dict) and set(value["activity"]) <= set(ACTIVITY_NAMES)
            and all(map(_share, value["activity"].values())))


def read_slow(path: str | os.PathLike[str], *, running: bool, now: float | None = None,
              key: str | None = None) -> SlowRecord | None:
    """The slow-rank doctor's record in ``path``: while the job runs, its latest verdict if said within
    :data:`SLOW_FRESH` seconds; once it ended, whatever it said last (the run's worst straggler). Read as
    :func:`read_stall` reads (bounded, no link, the exact form or nothing, signed with ``key`` where given)."""
    record = _read_record(path, MAX_SLOW_BYTES, SlowRecord.from_json, key)
    now = time.time() if now is None else now
    if record is None or not _written(record.time, now):
        return None
    if running and now - record.time >= SLOW_FRESH:
        return None
    return record


# -- restarts --------------------------------------------------------------------------------------------

MAX_RESTARTS_KEPT = 128  # restarts in one record file (paijob-runtime allows at most 100 in an attempt)
MAX_RESTARTS_BYTES = 256 * 1024


@dataclass(frozen=True)
class RestartRecord:
    """One restart of every node's workers inside the attempt, as node 0 told it: restart ``number`` of
    ``limit`` (``--max-restarts``), after ``cause`` (the failure's headline, exception and line; ``exit_code``
    what it would have ended the node with), ``signature`` what a repeat is compared by, the new round's
    ``nodes`` and ``world_size``, ``lost_s`` seconds from the failure to the new workers' start, at ``time``."""

    number: int
    limit: int
    cause: str
    exit_code: int
    nodes: int
    world_size: int
    lost_s: float
    time: float
    signature: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "cause", _text(self.cause) or "")
        object.__setattr__(self, "signature", _text(self.signature))

    def describe(self) -> str:
        """``restart 1 of 2 after worker rank 1 (...) failed with exit code 1: ValueError: x (t.py:3 in f); 4.1s lost``"""
        return (f"restart {self.number} of {self.limit} after {self.cause}; {self.nodes} node(s), world size "
                f"{self.world_size}; {self.lost_s:.1f}s from the failure to the new workers")

    def as_json(self) -> dict[str, Any]:
        return {"v": VERSION, "kind": "restart", **asdict(self)}

    @classmethod
    def from_json(cls, data: object) -> RestartRecord:
        """The record in ``data`` (:meth:`as_json`'s form), or :class:`RecordError`."""
        if not isinstance(data, Mapping) or data.get("v") != VERSION or data.get("kind") != "restart":
            raise RecordError("not a version-1 restart record")
        fields = {key: value for key, value in data.items() if key not in ("v", "kind")}
        if set(fields) != set(_RESTART_TYPES):
            raise RecordError(f"fields {sorted(fields)}, expected {sorted(_RESTART_TYPES)}")
        for key, ok in _RESTART_TYPES.items():
            if not ok(fields[key]):
                raise RecordError(f"{key}: not a restart's")
        return cls(**{**fields, "lost_s": float(fields["lost_s"]), "time": float(fields["time"])})


def _seconds(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _line(value: object) -> bool:
    return isinstance(value, str) and len(value) <= MAX_TEXT and not _CONTROL.search(value)


_RESTART_TYPES: dict[str, Callable[[object], bool]] = {
    "number": _count, "limit": _count, "cause": _line,
    "exit_code": lambda v: isinstance(v, int) and not isinstance(v, bool) and -(1 << 16) < v < 1 << 16,
    "nodes": _count, "world_size": _count, "lost_s": _seconds, "time": _seconds,
    "signature": lambda v: v is None or _line(v),
}


def restart_line(record: RestartRecord, key: str | None = None) -> str:
    """The one log line that carries ``record`` (signed where the cluster gave a ``key``)."""
    fields = record.as_json()
    if key:
        fields["mac"] = _mac(key, fields)
    return MARKER + json.dumps(fields, separators=(",", ":"))


def restarts_in(log_text: str, key: str | None = None) -> list[RestartRecord]:
    """Every restart record in ``log_text``, in order (those not signed with ``key``, where given, are not the
    runtime's and are left out)."""
    found: list[RestartRecord] = []
    for line in log_text.splitlines():
        if not line.startswith(MARKER) or len(line) > MAX_LINE:
            continue
        try:
            fields = json.loads(line[len(MARKER):].rstrip("\r"))
        except ValueError:
            continue
        if not isinstance(fields, dict) or fields.get("kind") != "restart":
            continue
        mac = fields.pop("mac", None)
        if key and not (isinstance(mac, str) and hmac.compare_digest(mac, _mac(key, fields))):
            continue
        try:
            found.append(RestartRecord.from_json(fields))
        except RecordError:
            continue
    return found


def restarts_text(restarts: Iterable[RestartRecord], key: str | None = None) -> str:
    """The restarts file's text (:func:`read_restarts`): every restart of the attempt so far, signed."""
    kept = list(restarts)[-MAX_RESTARTS_KEPT:]
    return signed_text({"v": VERSION, "kind": "restarts", "restarts": [r.as_json() for r in kept]}, key)


def _restarts(fields: Mapping[str, Any]) -> list[RestartRecord]:
    if set(fields) != {"v", "kind", "restarts"} or fields["v"] != VERSION or fields["kind"] != "restarts":
        raise RecordError("not a version-1 restarts record")
    listed = fields["restarts"]
    if not isinstance(listed, list) or len(listed) > MAX_RESTARTS_KEPT:
        raise RecordError("restarts: not a list of restarts")
    return [RestartRecord.from_json(item) for item in listed]


def read_restarts(path: str | os.PathLike[str], key: str | None = None) -> list[RestartRecord]:
    """The restarts node 0 kept in ``path`` (a regular file, bounded, in the exact form, signed with ``key``
    where given); [] when there is none."""
    return _read_record(path, MAX_RESTARTS_BYTES, _restarts, key) or []
