"""The hang verdict, pure: every rank's state in, node 0's verdict out (no I/O, no clock, no threads).

* **hang**: no rank has been active for the timeout (``--hang-timeout``, or the
  longer ``--hang-first-timeout`` until every rank has made its first progress).
  The culprits are the ranks that are not where the others wait: outside any
  collective (a sleep, a blocking read, a DataLoader worker that never answers),
  silent (a C call holding the GIL), stopped (T state), or in a different
  collective than most. One stall is judged sooner, on a timeout *calibrated*
  from the job's own rhythm (:func:`calibrated_limit`): every rank idle inside a
  ``torch.distributed`` call, which no checkpoint save or evaluation can look like.
* **straggler**: some ranks wait for the timeout while others are busy (CPU,
  I/O, a moving stack). Reported once at the timeout, ended only when the
  wait reaches ``--hang-hard-limit`` times the timeout: a long checkpoint save
  or evaluation on one rank is not a hang.

The doctor that gathers the states and acts on a verdict is
:mod:`paijob.runtime.watch.hang.doctor`; the account of torch's own timeout, :mod:`~paijob.runtime.watch.hang.timeout`; the rules are pinned on plain data in
``tests/runtime/watch/hang/test_hang_verdict.py``.
"""

from __future__ import annotations

import linecache
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from paijob.common import exitcodes
from paijob.common.records import StallRecord, rank_ranges
from paijob.runtime.config import HangSettings
from paijob.runtime.watch.frames import is_library
from paijob.runtime.watch.hang.sequence import sequence_phrase
from paijob.runtime.watch.ranks import RankState, call_order, left_phrase

HANG_EXIT = exitcodes.HANG


# -- the verdict ------------------------------------------------------------------------


CALIBRATED = "calibrated"


@dataclass(frozen=True)
class Limit:
    """The timeout a verdict is judged on, and where it comes from: an option, or
    ``calibrated`` (then ``why`` says from what)."""

    seconds: float
    source: str  # --hang-timeout, --hang-first-timeout or calibrated
    why: str = ""

    def said(self) -> str:
        """``--hang-timeout 600s``, or ``calibrated 120s: ...``."""
        head = self.short()
        return f"{head}: {self.why}" if self.why else head

    def short(self) -> str:
        """``--hang-timeout 600s``, ``calibrated 120s``."""
        return f"{self.source} {self.seconds:.0f}s"


@dataclass
class Verdict:
    """Node 0's judgement: ``kind`` hang or straggler; ``final`` ends the job."""

    kind: str
    final: bool
    waited: float  # how long the waiting ranks have waited
    limit: Limit
    culprits: list[RankState]
    others: list[RankState]
    why: str  # how the culprits were told apart
    unseen: list[RankState] = field(default_factory=list)  # ranks node 0 cannot read now: not judged
    # rank -> its recent collectives as its flight recorder kept them, ``[group, seq, op, enqueued]``
    # (the slow-rank doctor's evidence; the watcher passes them in): :func:`~paijob.runtime.watch.hang.sequence.sequence_phrase`
    calls: Mapping[int, Sequence[Sequence[Any]]] = field(default_factory=dict)

    def headline(self, settings: HangSettings) -> str:
        if self.kind == "straggler":
            return self._straggler_headline(settings.hard_limit)
        longer = self._hang_line(self.sequence())
        return longer if len(longer) <= MAX_HEADLINE else self._hang_line("")

    def _hang_line(self, sequence: str) -> str:
        """The hang's headline; with ``sequence`` (the flight recorder's phrase) at its end, where it
        says how the calls differ: the culprits' own account of it shortened."""
        parts = [self.first_part()]
        if self.culprits:
            mismatched = sequence and self.why.endswith(MISMATCHED)
            parts.append(named(self.culprits, MISMATCHED[2:] if mismatched else self.why))
        else:
            parts.append(self.why)
        if self.others:
            parts.append(waiting_phrase(self.others))
        if self.unseen:
            parts.append(unseen_phrase(self.unseen))
        if sequence:
            parts.append(sequence)
        return "; ".join(parts) + f"; exit {HANG_EXIT}"

    def sequence(self) -> str:
        """What the judged ranks' flight recorders say of where their calls part (a hang); "": nothing."""
        if self.kind != "hang":
            return ""
        return sequence_phrase(self.calls, [s.rank for s in (*self.culprits, *self.others)])

    def first_part(self) -> str:
        """``hang: no rank made progress for 31s (--hang-timeout 20s)``: the headline's start."""
        return f"hang: no rank made progress for {self.waited:.0f}s ({self.limit.said()})"

    def _straggler_headline(self, hard_limit: float) -> str:
        option, seconds = self.limit.source, self.limit.seconds
        head = (f"straggler: {_join(straggler_phrase(s) for s in self.culprits)} while "
                f"{waiting_phrase(self.others)}")
        if self.final:
            return (f"hang: {head}; ended at the hard limit ({hard_limit:g} x "
                    f"{option} {seconds:.0f}s; a larger --hang-hard-limit or {option} allows "
                    f"longer); exit {HANG_EXIT}")
        return (f"{head}; not a hang while it works: ended at {hard_limit:g} x "
                f"{option} ({hard_limit * seconds:.0f}s) unless it finishes")

    def detail(self) -> list[str]:
        """The culprits' frames; first, what the flight recorders say when the headline had no room for it."""
        sequence = self.sequence()
        if sequence and len(self._hang_line(sequence)) > MAX_HEADLINE:
            return [sequence, *culprit_detail(self.culprits)]
        return culprit_detail(self.culprits)


MAX_NAMED = 4  # culprits named one by one in a headline; the rest are counted
MISMATCHED = ": mismatched collectives"  # how each account of ranks in calls that differ ends
MAX_HEADLINE = 400  # characters: the flight recorder's phrase goes to the detail lines rather than past it


def culprit_detail(culprits: Sequence[RankState]) -> list[str]:
    """The culprits' innermost frames in call order, with their source lines, and each of its
    other Python threads that runs user code (the other side of a deadlock)."""
    lines = []
    for state in culprits[:MAX_NAMED]:
        source = (" (faulthandler's watchdog: its sampler is silent)" if state.dumped
                  else " (read from outside its stopped process by py-spy)" if state.outside else "")
        lines.append(f"{state.name()}, inactive for {state.idle_for:.0f}s, CPU "
                     f"{state.cpu_share:.0%}{source}:")
        lines.extend(_frame_lines(state.where, "  "))
        for name, frames in state.threads:
            if any(not is_library(str(f[0])) for f in frames):
                lines.append(f"  its thread {name!r}:")
                lines.extend(_frame_lines(frames, "    "))
    if len(culprits) > MAX_NAMED:
        lines.append(f"... and {len(culprits) - MAX_NAMED} more: ranks "
                     f"{rank_ranges(s.rank for s in culprits[MAX_NAMED:])}")
    return lines


def _frame_lines(where: Sequence[Sequence[Any]], indent: str) -> list[str]:
    lines = []
    for file, line, function in call_order(where):
        source = linecache.getline(str(file), int(line)).strip()
        lines.append(f"{indent}{file}:{line} in {function}" + (f": {source}" if source else ""))
    return lines


def _join(phrases: Iterable[str]) -> str:
    return "; ".join(phrases)


def named(culprits: Sequence[RankState], why: str) -> str:
    """The first :data:`MAX_NAMED` culprits one by one, the rest counted (one short line)."""
    phrase = _join(stuck_phrase(s, why) for s in culprits[:MAX_NAMED])
    if len(culprits) > MAX_NAMED:
        rest = culprits[MAX_NAMED:]
        phrase += f"; and {len(rest)} more: ranks {rank_ranges(s.rank for s in rest)}"
    return phrase


def waiting_phrase(states: Sequence[RankState]) -> str:
    """``ranks 0, 2-7 wait in all_reduce at train.py:42 for 312s``, one group per place."""
    groups: dict[tuple[str, str], list[RankState]] = {}
    for state in states:
        groups.setdefault((state.wait or "", state.location), []).append(state)
    phrases = []
    ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), min(s.rank for s in item[1])))
    if len(ordered) > MAX_NAMED:  # one line, however many places: the largest groups, the rest counted
        rest = [s for _key, members in ordered[MAX_NAMED - 1:] for s in members]
        ordered = ordered[:MAX_NAMED - 1]
    else:
        rest = []
    for (wait, location), members in ordered:
        ranks = rank_ranges(s.rank for s in members)
        noun = "ranks" if len(members) > 1 else "rank"
        verb = "wait" if len(members) > 1 else "waits"
        what = f" in {wait}" if wait else ""
        waited = min(s.idle_for for s in members)
        phrases.append(f"{noun} {ranks} {verb}{what} at {location} for {waited:.0f}s")
    if rest:
        phrases.append(f"ranks {rank_ranges(s.rank for s in rest)} wait elsewhere")
    return ", ".join(phrases)


def unseen_phrase(states: Sequence[RankState]) -> str:
    """``ranks 2-3 (node rank 1) not seen for 31s: the store they report through is in a stopped
    process``: the ranks the verdict could not judge, and why."""
    nodes = sorted({s.node_rank for s in states})
    where = ", ".join(str(n) for n in nodes)
    seconds = min(s.stale_for for s in states)
    return (f"{ranks_phrase(sorted(s.rank for s in states))} (node rank{'s' if len(nodes) > 1 else ''} "
            f"{where}) not seen for {seconds:.0f}s: the store they report through is in a stopped process")


def stuck_phrase(state: RankState, why: str) -> str:
    if state.left:
        return f"{left_phrase(state)} while its process group was still up (it left the job)"
    if state.stopped:
        head = f"{state.name()} is stopped (T state in /proc: SIGSTOP or a debugger)"
        if state.outside:
            return f"{head} at {state.location} in {_function(state)}"
        hint = f" ({state.unread})" if state.unread else ""
        return f"{head}, last seen at {state.location} in {_function(state)}{hint}"
    if state.silent:
        seen = "is at" if state.dumped else "last seen at"
        return (f"{state.name()} does not answer (its sampler has been silent for "
                f"{state.stale_for:.0f}s: a C call holding the GIL), {seen} {state.location} in "
                f"{_function(state)}")
    if state.wait == "DataLoader":
        worker = ""
        if state.loader_worker:
            worker_id, pid = state.loader_worker
            worker = f" {worker_id}" + (f" (pid {pid})" if pid else "")
        return f"{state.name()} waits for its DataLoader worker{worker} at {state.location}"
    if state.collective:
        return f"{state.name()} waits in {state.wait} at {state.location} ({why})"
    if state.inside:  # its own code under a collective's frames (pickling, a custom backward, a hook)
        return f"{state.name()} is in its own code, {_function(state)} at {state.location}, inside {state.inside}"
    return (f"{state.name()} is stuck at {state.location} in {_function(state)}, outside any collective"
            + _unfed_queue(state))


_QUEUE = f"{os.sep}queue.py"


def _unfed_queue(state: RankState) -> str:
    """``, waiting on a queue that no live thread of its code feeds (...)``: a rank in ``Queue.get``
    whose other threads run none of the user's code (its producer thread died: threading printed its
    traceback). "" otherwise."""
    if not any(str(frame[0]).endswith(_QUEUE) and frame[2] == "get" for frame in state.where):
        return ""
    if any(not is_library(str(frame[0])) for _name, frames in state.threads for frame in frames):
        return ""
    return (", waiting on a queue that no live thread of its code feeds (a producer thread that died? "
            "its traceback is in the rank's output)")


def straggler_phrase(state: RankState) -> str:
    return (f"{state.name()} is busy at {state.location} in {_function(state)} "
            f"(CPU {state.cpu_share:.0%})")


def _function(state: RankState) -> str:
    return str(state.where[0][2]) if state.where else "?"


def pick_culprits(states: Sequence[RankState]) -> tuple[list[RankState], str]:
    """The ranks not where the others wait, and how they were told apart."""
    odd = [s for s in states if s.odd]
    if odd:
        return odd, "outside any collective"
    unanswered = unanswered_p2p(states)
    if unanswered is not None:
        return unanswered
    groups: dict[tuple[str, str], list[RankState]] = {}
    for state in states:
        groups.setdefault((state.wait or "", state.location), []).append(state)
    if len(groups) == 1:
        (wait, location), _members = next(iter(groups.items()))
        return [], (f"every rank waits in {wait} at {location}: the collective itself does not "
                    f"complete (a lost message, a network or GPU fault)")
    return _minority(groups)


def _minority(groups: dict[tuple[str, str], list[RankState]]) -> tuple[list[RankState], str]:
    """The ranks outside the largest groups of (call, line), and how they differ: another call, or the
    same call from another line."""
    largest = max(len(members) for members in groups.values())
    minority = [s for members in groups.values() if len(members) < largest for s in members]
    if not minority:
        return [], "the ranks wait in different collectives: mismatched collectives"
    majority_calls = {wait for (wait, _location), members in groups.items() if len(members) == largest}
    if all(s.wait in majority_calls for s in minority):  # the same call, from another line
        return minority, ("the same call as the other ranks, from another line (another process group, "
                          "or a call the others skipped or made earlier): mismatched collectives")
    return minority, "a different collective than the other ranks: mismatched collectives"


def stall_line(states: Sequence[RankState], settings: HangSettings) -> str | None:
    """``no progress for 1 min 35 s on rank 1``: :func:`stall`, in the words people read."""
    found = stall(states, settings)
    return found.describe() if found else None


def stall(states: Sequence[RankState], settings: HangSettings) -> StallRecord | None:
    """The ranks inactive for half the timeout (at most 30 s), while the job runs; when every rank is,
    the ones not where the others wait. None: none. (Its ``time`` is the writer's to stamp.)"""
    shown_after = min(30.0, settings.timeout / 2) if settings.enabled else 30.0
    running = [s for s in states if not s.exited]
    idle = [s for s in running if s.idle_for >= shown_after]
    if not idle:
        return None
    if len(idle) == len(running):
        culprits, _why = pick_culprits(idle)
        idle = culprits or idle
    return StallRecord(tuple(sorted({s.rank for s in idle})), round(min(s.idle_for for s in idle)))


def judge(states: Sequence[RankState], settings: HangSettings,
          expected_ranks: int | None = None) -> Verdict | None:
    """Node 0's verdict on every rank's state; None while the job makes progress.

    ``expected_ranks``: the world size; a rank not seen yet counts as starting (active).
    """
    running = judged_ranks(states, settings, expected_ranks)
    if not running:
        return None
    calibrated = calibrated_limit(running, settings)
    if calibrated is not None and all(min(s.idle_for, s.quiet_for) >= calibrated.seconds
                                      for s in running):
        verdict = verdict_at(running, calibrated, settings)
    else:
        verdict = verdict_at(running, configured_limit(running, settings), settings)
    if verdict is not None and verdict.kind == "hang" and ended_lately(states, verdict.limit):
        return None
    unseen = [s for s in states if s.unseen]
    if verdict is not None and unseen:
        verdict = replace(verdict, unseen=unseen)
    return blame_leavers(verdict, states)


def leavers(states: Sequence[RankState]) -> list[RankState]:
    """The ranks whose code ended (exit code 0) while their process group was up, earliest first."""
    return [s for s in states if s.exited and s.left]


def blame_leavers(verdict: Verdict | None, states: Sequence[RankState]) -> Verdict | None:
    """A hang whose ranks all wait inside ``torch.distributed`` calls while a rank of theirs has
    left (its code ended with its process group up): that rank is the culprit, whatever the
    waiting ranks look like (they wait for a rank that will never come)."""
    if verdict is None or verdict.kind != "hang":
        return verdict
    gone = leavers(states)
    waiting = [s for s in states if not s.exited]
    if not gone or not waiting or not all(s.c10d for s in waiting):
        return verdict
    return replace(verdict, culprits=gone, others=waiting, why=LEFT)


LEFT = "left the job: its code ended (exit code 0) with its process group still up"


def ended_lately(states: Sequence[RankState], limit: Limit) -> bool:
    """Whether a rank whose process has ended was active within ``limit``: until it ended, the
    job moved. Without this, the moment a busy rank finishes, the ranks that waited for it
    (their last report, a second or two old, still says they wait) look like a hang with no
    one active; seen under load with a rank 0 that saved a checkpoint for 14 s."""
    return any(s.exited and s.idle_for < limit.seconds for s in states)


def judged_ranks(states: Sequence[RankState], settings: HangSettings,
                 expected_ranks: int | None) -> list[RankState]:
    """The ranks to judge: none while the watch is off or a rank has not reported yet; a rank
    whose process has ended waits for nothing and is left out."""
    if not settings.enabled or not states:
        return []
    if expected_ranks is not None and len(states) < expected_ranks:
        return []
    return [s for s in states if not s.exited and not s.unseen]


def configured_limit(states: Sequence[RankState], settings: HangSettings) -> Limit:
    """``--hang-timeout``, or the longer ``--hang-first-timeout`` until every rank is past its
    first training step (a model built, data loaded: all of it before the first step).

    Before the first step, ``--hang-timeout`` still holds for a rank that never arrives: some
    ranks wait inside a collective while the others are outside any (or silent, or stopped);
    and for ranks inside calls that cannot match (:func:`cannot_match`).
    Every rank loading data after building DDP is outside a collective: the allowance holds."""
    started = all(s.first_progress for s in states)
    if (started or settings.first_timeout <= settings.timeout or never_arriving(states, settings.timeout)
            or cannot_match(states)):
        return Limit(settings.timeout, "--hang-timeout")
    return Limit(settings.first_timeout, "--hang-first-timeout")


def never_arriving(states: Sequence[RankState], timeout: float) -> bool:
    """Whether some ranks wait inside a collective for ranks that are not in one and have done
    nothing for ``timeout`` (a rank busy preparing data before the first step is a straggler
    under the first allowance, not a rank that never arrives)."""
    waiting = [s for s in states if s.collective and not s.odd]
    absent = [s for s in states if s not in waiting]
    return bool(waiting) and bool(absent) and all(s.idle_for >= timeout for s in absent)


# Calls in which ranks of one group legitimately differ (one sends, the other receives).
POINT_TO_POINT = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv"})


def cannot_match(states: Sequence[RankState]) -> bool:
    """Whether every rank waits inside a ``torch.distributed`` call and their calls differ
    (``all_reduce`` on some ranks, ``broadcast`` on another), or a blocking send or recv waits for a
    rank that is not in the other half of it (:func:`unanswered_p2p`): calls that can never complete
    each other, in whatever phase. Nothing a healthy job does before its first step looks like
    it (a rank loading data or building a model is outside any call), so the first-step
    allowance does not apply. Otherwise point-to-point calls differ by design and are left out."""
    calls = {s.wait for s in states}
    return all(s.c10d and s.wait and not s.odd for s in states) and (
        (len(calls) > 1 and not calls & POINT_TO_POINT) or unanswered_p2p(states) is not None)


BLOCKING_P2P = frozenset({"send", "recv"})  # the calls whose other rank the sampler reads (RankState.peer)
P2P_CYCLE = ("in a cycle of blocking sends and recvs, each waiting for the next: a deadlock (each pair's "
             "send must come before its recv on one side)")


def unanswered_p2p(states: Sequence[RankState]) -> tuple[list[RankState], str] | None:
    """The rank a blocking send or recv waits for when that rank is not in the other half of it, and
    how it was told: a pipeline whose rank 1 skipped one ``send`` leaves rank 2 in ``recv`` from it
    (and rank 3 in ``recv`` from rank 2) while rank 1 waits in the next collective. A chain of such
    waits is followed to the rank at its end; a chain that comes back to itself is a deadlock, and its
    ranks are the culprits. None: every send and recv whose other rank is known is answered, or none."""
    by_rank = {s.rank: s for s in states}
    for start in states:
        chain = [start]
        while True:
            waiting = chain[-1]
            if waiting.wait not in BLOCKING_P2P or waiting.peer is None:
                break
            peer = by_rank.get(waiting.peer)
            if peer is None or _answers(peer, waiting):
                break
            ranks = [s.rank for s in chain]
            if peer.rank in ranks:
                return chain[ranks.index(peer.rank):], P2P_CYCLE
            if peer.wait not in BLOCKING_P2P or peer.peer is None:
                return [peer], _missing_half(waiting)
            chain.append(peer)
    return None


def _answers(peer: RankState, waiting: RankState) -> bool:
    """Whether ``peer`` is in the other half of ``waiting``'s send or recv: the pair is made."""
    return peer.peer == waiting.rank and {peer.wait, waiting.wait} == BLOCKING_P2P


def _missing_half(waiting: RankState) -> str:
    """Why the rank ``waiting`` waits for is named: it never made the other half of the call."""
    if waiting.wait == "send":
        return f"never received what rank {waiting.rank} sends it in send at {waiting.location}: a missing recv"
    return f"never sent what rank {waiting.rank} waits for in recv at {waiting.location}: a missing send"


def calibrated_limit(states: Sequence[RankState], settings: HangSettings) -> Limit | None:
    """A timeout from the job's own rhythm, for the one stall nothing healthy looks like; None:
    the configured timeout holds.

    Only when ``--hang-timeout`` was not set, every rank has made progress, and every rank
    waits inside a ``torch.distributed`` call (all_reduce, barrier, recv...): a checkpoint save,
    an evaluation or ``torch.compile`` runs outside one, on at least one rank. Then the
    ranks wait for each other only (a lost message, mismatched collectives); :func:`judge`
    also wants no data moving in any rank's process for as long (a huge collective's
    transfer runs in gloo's own threads while the main thread waits). The timeout is ``calibration_multiple`` times the longest wait any rank had in one call so
    far, at least ``calibration_floor``, never above ``--hang-timeout``.
    """
    if not settings.calibrate:
        return None
    if not all(s.first_progress and s.c10d and not s.silent and not s.stopped for s in states):
        return None
    longest = max(s.longest_wait for s in states)
    seconds = max(settings.calibration_floor, settings.calibration_multiple * longest)
    if seconds >= settings.timeout:
        return None
    return Limit(seconds, CALIBRATED, (
        f"every rank waits in a torch.distributed call, the longest wait in one so far "
        f"was {longest:.0f}s, {settings.calibration_multiple:g} x that, at least "
        f"{settings.calibration_floor:.0f}s, --hang-timeout {settings.timeout:.0f}s holds "
        f"outside collectives"))


def verdict_at(states: Sequence[RankState], limit: Limit, settings: HangSettings) -> Verdict | None:
    """The verdict with ``limit`` as the timeout: a hang when no rank is active, a straggler when
    some are busy while the others wait; None before the timeout or while a rank is between."""
    waiting = [s for s in states if s.idle_for >= limit.seconds]
    if not waiting:
        return None
    active = [s for s in states if s.idle_for < limit.seconds]
    waited = min(s.idle_for for s in waiting)
    recent = max(3.0, 3 * settings.interval)  # a straggler was active this recently
    if any(s.idle_for > recent for s in active):
        return None  # a rank between busy and idle: judge again at the next look
    if not active:
        culprits, why = pick_culprits(states)
        others = [s for s in states if s not in culprits]
        return Verdict("hang", True, waited, limit, culprits, others, why)
    final = waited >= settings.hard_limit * limit.seconds
    return Verdict("straggler", final, waited, limit, active, waiting, "busy while the others wait")


def ranks_phrase(ranks: Sequence[int]) -> str:
    return ("ranks " if len(ranks) > 1 else "rank ") + rank_ranges(ranks)


