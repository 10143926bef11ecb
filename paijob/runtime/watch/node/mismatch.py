"""Collectives whose calls disagree between ranks, from what the failed workers said (pure).

Why it is read after the failure, not watched: gloo aborts the rank that receives a
message larger than its own call expects within milliseconds, long before any
sample, and the sampler never looks at a collective's arguments (it never changes
or inspects the user's objects). Three sources, best first:

* With ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (torch checks every collective's
  fingerprint across ranks before running it: one small extra collective per
  call) every rank raises "Detected mismatch between collectives on ranks. Rank
  2 is running collective: CollectiveFingerPrint(... TensorShape=[1000] ...),
  but Rank 1 is running ...". The ranks whose call differs from most are named,
  with their calls and their script lines (from their tracebacks).
* Otherwise, torch's flight recorder (:mod:`paijob.runtime.watch.node.recorder`): the
  ranks gloo did not abort say what they called, with the line that called it.
  At the first collective where their calls part, the ranks whose call differs
  from most are named. Where every rank that could say agrees, and only the
  receiver could not, the receiver's own call is the one that differs.
* Otherwise (an old torch, a rank that could not answer) only the receiver speaks
  (``op.preamble.length <= op.nbytes. 1000 vs 500``). It is named as what it is,
  the receiver, not the cause, with the sizes and what the others said.

Node 0 makes the account; like a timeout's, it overrides the workers' own failures,
so every node prints it. No torch import, no I/O.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from paijob.runtime.failure import Failure
from paijob.runtime.watch.frames import is_library

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


def undecided(failures: Sequence[Failure], world_size: int | None = None) -> bool:
    """Whether what was said so far names no rank whose call differs, though the ranks do say
    their calls (torch's fingerprints, its flight recorder): more ranks' words, from the other
    nodes, may tell."""
    found = _account(failures, world_size)
    speaking = len(calls_said(failures)) >= 2 or bool(recorded_calls(failures))
    return found is not None and not found[1] and speaking


def script_line(tail: str) -> str | None:
    """``train.py:12`` of the innermost user frame of a traceback in ``tail``; None: none."""
    user = [(file, line) for file, line, _function in _FRAME.findall(tail) if not is_library(file)]
    if not user:
        return None
    file, line = user[-1]
    return f"{file.rsplit('/', 1)[-1]}:{line}"


def mismatch_account(failures: Sequence[Failure], world_size: int | None = None) -> Failure | None:
    """The account of a collective whose calls disagree, or None: no failure says so.
    ``world_size``: the job's ranks (whether every rank but the receiver said its call)."""
    found = _account(failures, world_size)
    return None if found is None else found[0]


def size_abort(failures: Sequence[Failure]) -> Failure | None:
    """The first worker gloo aborted for receiving more than its call expected, or None."""
    return next((f for f in sorted(failures, key=lambda f: f.time)
                 if f.rank is not None and _GLOO_SIZE.search(f.tail or "")), None)


def said_size_abort(failures: Sequence[Failure]) -> bool:
    """Whether any failure (a worker's, or an account that carries its words) says gloo aborted
    a rank for a collective's size."""
    return any(_GLOO_SIZE.search(f.tail or "") for f in failures)


def _account(failures: Sequence[Failure], world_size: int | None) -> tuple[Failure, bool] | None:
    """(the account, whether it names the rank(s) whose call differs), or None."""
    calls = calls_said(failures)
    if len(calls) >= 2:
        return _named(failures, calls), odd_ranks(calls) != sorted(calls)
    receiver = size_abort(failures)
    if receiver is None:
        return None
    recorded = recorded_calls(failures)
    named = _from_recorder(receiver, failures, recorded, world_size)
    return (named, True) if named is not None else (_receiver(receiver, recorded, world_size), False)


# -- torch's flight recorder -------------------------------------------------------------------

def recorded_calls(failures: Sequence[Failure]) -> dict[int, list[dict[str, Any]]]:
    """Every rank's recent collectives, as the nodes' records carry them (first record wins)."""
    found: dict[int, list[dict[str, Any]]] = {}
    for failure in failures:
        for rank, calls in (failure.calls or {}).items():
            if calls and str(rank).isdigit():
                found.setdefault(int(rank), calls)
    return found


def describe(call: dict[str, Any]) -> str:
    """``all_reduce [2000] Float``: a recorded call's collective, input sizes and dtypes."""
    sizes = " ".join("[" + ", ".join(str(n) for n in size) + "]" for size in call.get("sizes") or [])
    dtypes = ",".join(dict.fromkeys(str(d) for d in call.get("dtypes") or []))
    return " ".join(part for part in (str(call.get("op", "?")), sizes, dtypes) if part)


def parting(recorded: dict[int, list[dict[str, Any]]]) -> dict[int, dict[str, Any]]:
    """Each rank's call at the first collective (by torch's sequence number, per process group)
    where the ranks' recorded calls differ; where none differ, at the last collective every
    rank recorded (of the group most ranks recorded). Ranks whose buffer no longer holds it
    are left out."""
    agreed: dict[int, dict[str, Any]] = {}
    for group in sorted({str(c.get("group")) for calls in recorded.values() for c in calls}):
        by_rank = {rank: seqs for rank, seqs in (
            (rank, {int(c.get("seq", 0)): c for c in calls if str(c.get("group")) == group})
            for rank, calls in recorded.items()) if seqs}
        differ, last = _parting_in_group(by_rank)
        if differ:
            return differ
        if len(last) > len(agreed):
            agreed = last
    return agreed


def _parting_in_group(by_rank: dict[int, dict[int, dict[str, Any]]]
                      ) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
    """(each rank's call at the first sequence number where the calls differ, or {}; each
    rank's call at the last sequence number every rank recorded)."""
    last = min(max(seqs) for seqs in by_rank.values())
    for seq in sorted({s for seqs in by_rank.values() for s in seqs if s <= last}):
        at = {rank: seqs[seq] for rank, seqs in by_rank.items() if seq in seqs}
        if len({describe(c) for c in at.values()}) > 1:
            return at, {}
    return {}, {rank: seqs[last] for rank, seqs in by_rank.items() if last in seqs}


def _from_recorder(receiver: Failure, failures: Sequence[Failure],
                   recorded: dict[int, list[dict[str, Any]]], world_size: int | None) -> Failure | None:
    """The account from the flight recorder, or None: what the ranks said names nobody."""
    at = parting(recorded)
    what = {rank: describe(call) for rank, call in at.items()}
    lines = {rank: call.get("line") for rank, call in at.items()}
    aborted = receiver.rank not in what
    if len(set(what.values())) > 1:
        named = _odd_recorded(receiver, what, lines, aborted)
    elif aborted and len(what) >= 2 and world_size is not None and len(what) == world_size - 1:
        named = _receiver_odd(receiver, what, lines)
    else:
        named = None
    if named is None:
        return None
    culprit, phrases = named
    return Failure(
        node_rank=_node_of(failures).get(culprit, receiver.node_rank), rank=None, local_rank=None,
        returncode=receiver.returncode, secondary=False, time=receiver.time - 1e-3,
        overrides=True, reason="mismatched collectives (torch's flight recorder): " + "; ".join(phrases))


def _odd_recorded(receiver: Failure, what: dict[int, str], lines: dict[int, Any],
                  aborted: bool) -> tuple[int, list[str]] | None:
    """(the first odd rank, the account's phrases) where one call is the most common; None: two
    calls, as many ranks each (either may be wrong)."""
    odd = odd_ranks(what)
    if odd == sorted(what):
        return None
    common = sorted(set(what) - set(odd))
    phrases = [*(_call(rank, what[rank], lines[rank]) for rank in odd),
               _call_of(common, what[common[0]], lines[common[0]])]
    if aborted:
        phrases.append(f"gloo aborted rank {receiver.rank} (the receiver: {_got_expected(receiver)})")
    return odd[0], phrases


def _receiver_odd(receiver: Failure, what: dict[int, str],
                  lines: dict[int, Any]) -> tuple[int, list[str]]:
    """Every rank but the receiver said the same call: the receiver's own is the one that differs."""
    common = sorted(what)
    phrases = [f"rank {receiver.rank}'s call differs: gloo aborted it on receiving "
               f"{_got_expected(receiver)}, and every other rank calls the same",
               _call_of(common, what[common[0]], lines[common[0]])]
    return (receiver.rank if receiver.rank is not None else common[0]), phrases


def _node_of(failures: Sequence[Failure]) -> dict[int, int]:
    """Each rank's node rank, from the failures and the calls the nodes' records carry."""
    where = {f.rank: f.node_rank for f in failures if f.rank is not None}
    for failure in failures:
        for rank in failure.calls or {}:
            where.setdefault(int(rank), failure.node_rank)
    return where


def _call(rank: int, what: str, line: str | None) -> str:
    return f"rank {rank} calls {what}" + (f" at {line}" if line else "")


def _call_of(ranks: Sequence[int], what: str, line: str | None) -> str:
    return f"{_ranks(ranks)} call{'s' if len(ranks) == 1 else ''} {what}" + (f" at {line}" if line else "")


def _got_expected(receiver: Failure) -> str:
    found = _GLOO_SIZE.search(receiver.tail or "")
    got, expected = found.groups() if found else ("?", "?")
    return f"{got} bytes where its own call expected {expected}"


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


def _receiver(failure: Failure, recorded: dict[int, list[dict[str, Any]]],
              world_size: int | None = None) -> Failure:
    at = parting(recorded)
    who = (f"gloo aborted rank {failure.rank} (node rank {failure.node_rank}, local rank "
           f"{failure.local_rank}) on receiving {_got_expected(failure)}")
    if at:  # what the others said, though it names nobody
        said = "; ".join(_call(rank, describe(call), call.get("line")) for rank, call in sorted(at.items()))
        how = (f"; the other ranks' calls (torch's flight recorder): {said}; from these alone "
               f"the call that differs cannot be told")
    else:
        how = (f": it is the receiver, not necessarily the rank whose call differs (another size, "
               f"dtype or collective). To have that rank named with its line, run again with "
               f"{DEBUG_VARIABLE}=DETAIL in the task's environment (torch then checks every "
               f"collective's shapes across ranks before running it, at a cost)")
    silent = sorted(set(range(world_size)) - set(recorded) - {failure.rank}) if world_size and recorded else []
    if silent:  # the account names who could not say their calls, never silently less
        how += (f"; {_ranks(silent)} did not say {'their calls' if len(silent) > 1 else 'its call'} "
                f"(ended or stopped before the recorder was read)")
    return Failure(
        node_rank=failure.node_rank, rank=None, local_rank=None, returncode=failure.returncode,
        secondary=False, time=failure.time - 1e-3, tail=failure.tail, overrides=True,
        reason=f"mismatched collectives: {who}{how}")


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)
