"""Each rank's last collectives, as torch's flight recorder kept them (a mismatch's evidence).

Why: gloo aborts the rank that receives more bytes than its own call expects
within milliseconds, and its message names neither the sender nor the sender's
call. Which rank's call differs is known only inside the ranks. torch keeps it
there: its flight recorder (``TORCH_FR_BUFFER_SIZE``; gloo joined it in 2025,
pytorch#152614: torch 2.13 has it, torch 2.4 does not) records every collective
as it is issued, with its process group, sequence number, sizes, dtypes and the
Python stack that issued it, in a ring buffer in memory. It changes nothing the
program sees and costs about 1-2 us a collective on gloo
(``benchmarks/bench_hangwatch.py``). The launcher turns it on for gloo jobs
(:func:`paijob.common.contract.worker_env`).

Nobody reads it while the job is healthy. When a node's agent sees gloo's size
abort, it asks its live workers (a request file in the hang watch's folder); each
worker's sampler thread, at its next sample, writes this rank's last entries to
``rank<N>.calls.json`` (:func:`answer_request`). The agent stops the workers only
after they answered or :data:`ANSWER_WAIT` passed. No signal, no torch import:
the recorder is read only where torch is already loaded.

The account itself is pure (:mod:`paijob.runtime.watch.mismatch`).
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from typing import Any

from paijob.runtime.watch.progress import is_library, write_new

REQUEST_FILE = "calls.request"  # in the hang watch's folder: the agent wants every live rank's calls
ANSWER_WAIT = 3.0  # seconds an agent waits for its workers' answers (a sample comes once a second)
KEPT_PER_GROUP = 4  # last entries per process group a rank reports
MAX_ANSWER = 64 * 1024  # bytes of an answer read
_C10D_C = "torch._C._distributed_c10d"


def answer_path(folder: str, rank: int) -> str:
    return os.path.join(folder, f"rank{rank}.calls.json")


def requested(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, REQUEST_FILE))


def request(folder: str) -> None:
    """Ask every live worker of this node for its last collectives (idempotent)."""
    path = os.path.join(folder, REQUEST_FILE)
    if not os.path.exists(path):
        write_new(path, "")


def recent_calls(limit: int = KEPT_PER_GROUP) -> list[dict[str, Any]] | None:
    """This process's last ``limit`` recorded collectives of each process group, oldest first;
    None: torch is not loaded here, this torch has no flight recorder for its backend, or it is
    off. Each: ``{"group", "seq", "op", "sizes", "dtypes", "line"}`` (``line``: the innermost
    frame of the user's code that issued the call, ``train.py:42``, or None)."""
    c10d = sys.modules.get(_C10D_C)
    dump = getattr(c10d, "_dump_fr_trace", None)
    if dump is None:
        return None
    try:
        trace = pickle.loads(dump())  # torch's own bytes, from this process
        entries = trace.get("entries") or []
    except Exception:  # noqa: BLE001 - another torch: say nothing rather than fail a worker
        return None
    calls: list[dict[str, Any]] = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("is_p2p"):
            continue
        calls.append({
            "group": str(entry.get("pg_id", "")),
            "seq": int(entry.get("collective_seq_id") or 0),
            "op": str(entry.get("profiling_name", "")).split(":")[-1],
            "sizes": [list(s) for s in entry.get("input_sizes") or []],
            "dtypes": [str(d) for d in entry.get("input_dtypes") or []],
            "line": _user_line(entry.get("frames") or []),
        })
    kept: list[dict[str, Any]] = []
    for group in dict.fromkeys(c["group"] for c in calls):
        kept.extend(sorted((c for c in calls if c["group"] == group), key=lambda c: c["seq"])[-limit:])
    return kept or None


def answer_request(folder: str, rank: int) -> bool:
    """Write this rank's recent calls once the agent asked (called by the sampler at each
    sample); whether an answer was written. An answer is written once; a rank without a
    recorder answers ``null``, so the agent need not wait for it."""
    path = answer_path(folder, rank)
    if not requested(folder) or os.path.exists(path):
        return False
    write_new(path, json.dumps(recent_calls()))
    return True


def read_answers(folder: str, ranks: list[int]) -> dict[int, list[dict[str, Any]] | None]:
    """What the ranks among ``ranks`` that answered said (``None``: no recorder). An answer is
    a job's own file: read without following a link, at most :data:`MAX_ANSWER` bytes, and only
    well-formed entries are kept, their text printable and short (it is printed in the account)."""
    found: dict[int, list[dict[str, Any]] | None] = {}
    for rank in ranks:
        try:
            fd = os.open(answer_path(folder, rank), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as handle:
                value = json.loads(handle.read(MAX_ANSWER + 1)[:MAX_ANSWER])
        except (OSError, ValueError):
            continue
        calls = [c for c in map(_checked, value if isinstance(value, list) else []) if c is not None]
        found[rank] = calls or None
    return found


def _checked(entry: Any) -> dict[str, Any] | None:
    """``entry`` as :func:`recent_calls` writes it, or None where it is not."""
    if not isinstance(entry, dict) or not isinstance(entry.get("seq"), int):
        return None
    sizes = entry.get("sizes")
    if not isinstance(sizes, list) or not all(
            isinstance(size, list) and all(isinstance(n, int) for n in size) for size in sizes):
        return None
    line = entry.get("line")
    return {"group": _text(entry.get("group"), 16), "seq": entry["seq"],
            "op": _text(entry.get("op"), 40), "sizes": [size[:8] for size in sizes[:8]],
            "dtypes": [_text(d, 24) for d in entry.get("dtypes") or []][:8] if isinstance(
                entry.get("dtypes"), list) else [],
            "line": _text(line, 120) if line is not None else None}


def _text(value: Any, limit: int) -> str:
    return "".join(ch for ch in str(value) if ch.isprintable())[:limit]


def _user_line(frames: list[Any]) -> str | None:
    """``train.py:42``: the innermost frame outside installed code. torch's frames are innermost
    first ({"name", "filename", "line"})."""
    for frame in frames:
        filename = str(frame.get("filename", "")) if isinstance(frame, dict) else ""
        if filename and not is_library(filename) and not filename.startswith("<"):
            return f"{os.path.basename(filename)}:{frame.get('line')}"
    return None
