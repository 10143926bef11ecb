"""Collectives whose calls disagree between ranks, from what the failed workers said (pure).

Why it is read from the failures, not watched: gloo aborts the rank that receives a
message larger than its own call expects within milliseconds, long before any
sample, and the sampler must not look at a collective's arguments (it never
changes or inspects the user's objects). So:

* Without ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` only the receiver speaks
  (``op.preamble.length <= op.nbytes. 1000 vs 500``). It is named as what it is,
  the receiver, not the cause, with the sizes, and the account says how to name
  the rank whose call differs.
* With ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (torch checks every collective's
  fingerprint across ranks before running it: one small extra collective per
  call) every rank raises "Detected mismatch between collectives on ranks. Rank
  2 is running collective: CollectiveFingerPrint(... TensorShape=[1000] ...),
  but Rank 1 is running ...". The ranks whose call differs from most are named,
  with their calls and their script lines (from their tracebacks).

Node 0 makes the account; like a timeout's, it overrides the workers' own failures,
so every node prints it. No torch import, no I/O.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from paijob.runtime.watch.failures import Failure
from paijob.runtime.watch.progress import is_library

DEBUG_VARIABLE = "TORCH_DISTRIBUTED_DEBUG"  # torch's name; DETAIL checks collectives' fingerprints
_FINGERPRINT = re.compile(
    r"Rank (\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=\d+, OpType=(\w+)"
    r"(?:, TensorShape=\[([^\]]*)\])?(?:, TensorDtypes=(\w+))?")
_GLOO_SIZE = re.compile(r"op\.preamble\.length <= op\.nbytes\. (\d+) vs (\d+)")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def calls_said(failures: Sequence[Failure]) -> dict[int, str]:
    """Each rank's call as torch's fingerprint check described it (``ALLREDUCE [2000] Float``)."""
    calls: dict[int, str] = {}
    for failure in failures:
        for rank, op, shape, dtype in _FINGERPRINT.findall(failure.tail or ""):
            what = op + (f" [{shape}]" if shape else "") + (f" {dtype}" if dtype else "")
            calls.setdefault(int(rank), what)
    return calls


def odd_ranks(calls: dict[int, str]) -> list[int]:
    """The ranks whose call differs from the most common one; every rank when no call is the
    most common (two ranks that disagree: either may be wrong)."""
    counts = Counter(calls.values()).most_common()
    if not counts:
        return []
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return sorted(calls)
    return sorted(rank for rank, call in calls.items() if call != counts[0][0])


def undecided(failures: Sequence[Failure]) -> bool:
    """Whether the fingerprints said so far leave no call the most common (more ranks' words
    would tell)."""
    calls = calls_said(failures)
    return len(calls) >= 2 and odd_ranks(calls) == sorted(calls)


def script_line(tail: str) -> str | None:
    """``train.py:12`` of the innermost user frame of a traceback in ``tail``; None: none."""
    user = [(file, line) for file, line, _function in _FRAME.findall(tail) if not is_library(file)]
    if not user:
        return None
    file, line = user[-1]
    return f"{file.rsplit('/', 1)[-1]}:{line}"


def mismatch_account(failures: Sequence[Failure]) -> Failure | None:
    """The account of a collective whose calls disagree, or None: no failure says so."""
    calls = calls_said(failures)
    if len(calls) >= 2:
        return _named(failures, calls)
    receiver = next((f for f in sorted(failures, key=lambda f: f.time)
                     if f.rank is not None and _GLOO_SIZE.search(f.tail or "")), None)
    return None if receiver is None else _receiver(receiver)


def _named(failures: Sequence[Failure], calls: dict[int, str]) -> Failure:
    odd = odd_ranks(calls)
    by_rank = {f.rank: f for f in failures if f.rank is not None}
    phrases = []
    for rank in odd:
        line = script_line(by_rank[rank].tail) if rank in by_rank else None
        phrases.append(f"rank {rank} calls {calls[rank]}" + (f" at {line}" if line else ""))
    others = sorted(set(calls) - set(odd))
    if others:
        common = calls[others[0]]
        phrases.append(f"{_ranks(others)} call{'s' if len(others) == 1 else ''} {common}")
    first = min(failures, key=lambda f: f.time)
    return Failure(
        node_rank=by_rank[odd[0]].node_rank if odd[0] in by_rank else first.node_rank,
        rank=None, local_rank=None, returncode=first.returncode, secondary=False,
        time=first.time - 1e-3, overrides=True,
        reason="mismatched collectives (torch's fingerprint check): " + "; ".join(phrases))


def _receiver(failure: Failure) -> Failure:
    found = _GLOO_SIZE.search(failure.tail or "")
    got, expected = found.groups() if found else ("?", "?")
    return Failure(
        node_rank=failure.node_rank, rank=None, local_rank=None, returncode=failure.returncode,
        secondary=False, time=failure.time - 1e-3, tail=failure.tail, overrides=True,
        reason=(
            f"mismatched collectives: rank {failure.rank} (node rank {failure.node_rank}, local "
            f"rank {failure.local_rank}) received {got} bytes where its own call expected "
            f"{expected}, and gloo aborted it: it is the receiver, not the cause; a peer's call "
            f"differs (another size, dtype or collective). To have the rank named with its line, "
            f"run again with {DEBUG_VARIABLE}=DETAIL in the task's environment (torch then checks "
            f"every collective's shapes across ranks before running it, at a cost)"))


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)
