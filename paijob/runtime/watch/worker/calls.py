"""A rank's last collectives as torch's flight recorder kept them, written once the failure account asks
(a mismatch's evidence: :mod:`paijob.runtime.watch.node.recorder` is the asking side).

No torch import: the recorder is read through ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from typing import Any

from paijob.runtime.watch import seal
from paijob.runtime.watch.folder import REQUEST_FILE, answer_path, request_nonce, write_new
from paijob.runtime.watch.frames import is_library

KEPT_PER_GROUP = 4  # last entries per process group a rank reports


_C10D_C = "torch._C._distributed_c10d"


def answer_calls_request(folder: str, rank: int, prepared: list[dict[str, Any]] | None = None, *,
                         sealed: seal.Seal | None = None) -> bool:
    """Write this rank's recent calls (``prepared``: as read ahead, else read now) once the agent asked (at
    each sample); whether an answer was written. An answer is written once, signed with this process's key
    (``sealed``, as its reports are); a rank without a recorder answers ``null``, so the agent need not wait
    for it."""
    path = answer_path(folder, rank)
    if not os.path.exists(os.path.join(folder, REQUEST_FILE)) or os.path.exists(path):
        return False
    nonce = request_nonce(folder)
    if nonce is None:
        return False
    text = json.dumps({"nonce": nonce, "calls": prepared if prepared is not None else recent_calls()})
    write_new(path, text if sealed is None else sealed.sign(text))
    return True


def recent_calls(limit: int = KEPT_PER_GROUP) -> list[dict[str, Any]] | None:
    """This process's last ``limit`` collectives of each process group as torch's flight
    recorder kept them, oldest first; None: torch is not loaded here, this torch has no
    recorder for its backend, or it is off. Each: ``{"group", "seq", "op", "sizes", "dtypes",
    "line"}`` (``line``: the innermost frame of the user's code that issued the call,
    ``train.py:42``, or None)."""
    dump = getattr(sys.modules.get(_C10D_C), "_dump_fr_trace", None)
    if dump is None:
        return None
    try:
        entries = pickle.loads(dump()).get("entries") or []  # noqa: S301 - torch's own bytes, this process's
    except Exception:  # noqa: BLE001 - another torch: say nothing rather than fail a worker
        return None
    calls = [_recorded_call(e) for e in entries if isinstance(e, dict) and not e.get("is_p2p")]
    kept: list[dict[str, Any]] = []
    for group in dict.fromkeys(c["group"] for c in calls):
        kept.extend(sorted((c for c in calls if c["group"] == group), key=lambda c: c["seq"])[-limit:])
    return kept or None


def _recorded_call(entry: dict[str, Any]) -> dict[str, Any]:
    """One entry of torch's recorder as the agent reads it. torch's frames are innermost first
    ({"name", "filename", "line"}); the line is the innermost one outside installed code."""
    frames = [f for f in entry.get("frames") or [] if isinstance(f, dict)]
    user = next((f for f in frames if f.get("filename") and not is_library(str(f["filename"]))
                 and not str(f["filename"]).startswith("<")), None)
    return {
        "group": str(entry.get("pg_id", "")),
        "seq": int(entry.get("collective_seq_id") or 0),
        "op": str(entry.get("profiling_name", "")).split(":")[-1],
        "sizes": [list(s) for s in entry.get("input_sizes") or []],
        "dtypes": [str(d) for d in entry.get("input_dtypes") or []],
        "line": f"{os.path.basename(str(user['filename']))}:{user.get('line')}" if user else None,
    }
