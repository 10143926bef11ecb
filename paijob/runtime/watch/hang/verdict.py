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

The threaded watcher that gathers the states and acts on a verdict is
:mod:`paijob.runtime.watch.hang.doctor`; the rules are pinned on plain data in
``tests/runtime/watch/test_verdict.py``.
"""

from __future__ import annotations

import linecache
import os
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from paijob.common import exitcodes
from paijob.common.records import StallRecord, rank_ranges
from paijob.runtime.config import HangSettings
from paijob.runtime.failure import Failure
from paijob.runtime.watch.worker.sampler import is_library
from paijob.runtime.watch.hang.sequence import sequence_phrase

HANG_EXIT = exitcodes.HANG
STALE_AFTER = 10.0  # a sampler silent this long (seconds, at least 5 intervals) cannot run
_TIMED_OUT = re.compile(r"timed out|timeout|Watchdog caught collective operation", re.IGNORECASE)



@dataclass
class RankState:
    """What node 0 knows about one rank (the summary a node publishes)."""

    rank: int
    node_rank: int
    host: str
    local_rank: int | None
    idle_for: float  # seconds since it was last active (stack moved, CPU, storage I/O)
    busy: bool
    cpu_share: float
    wait: str | None  # all_reduce, barrier, backward, DataLoader... None: its own code
    collective: bool
    first_progress: bool  # past its first training step (collectives seen rising in several samples)
    stale_for: float  # seconds its sampler has been silent beyond the interval
    where: list[list[Any]] = field(default_factory=list)  # innermost frames, user code first
    loader_worker: list[int | None] | None = None  # (id, pid) of the DataLoader worker it waits for
    exited: bool = False  # its process has ended: it waits for nothing (judged no more)
    c10d: bool = False  # it waits inside a torch.distributed call (all_reduce, barrier, recv...)
    longest_wait: float = 0.0  # its longest wait inside one such call so far (seconds)
    quiet_for: float = 0.0  # seconds since any of its threads last moved data (a transfer)
    stopped: bool = False  # its process is stopped (T state in /proc: SIGSTOP, a debugger)
    dumped: bool = False  # ``where`` comes from faulthandler's watchdog dump (its sampler is silent)
    threads: list[list[Any]] = field(default_factory=list)  # [name, frames as ``where``] of its other threads
    error: str = ""  # the exception that ended its function (an ``mp.spawn`` child's, noted by its sampler)
    outside: bool = False  # a stopped rank: ``where`` and ``threads`` read now from outside its process (py-spy)
    unread: str = ""  # a stopped rank whose stack could not be read from outside: why, and the way to it
    left: bool = False  # its code ended (exit code 0) with its process group still up; ``where``: where it ended
    unseen: bool = False  # node 0 cannot read it now (the store it reports through is stopped): as last read

    @property
    def silent(self) -> bool:
        """Its sampler cannot run (a C call holding the GIL): faulthandler's watchdog wrote its
        stack, or no sample came for :data:`STALE_AFTER` seconds."""
        return self.dumped or self.stale_for >= STALE_AFTER

    @property
    def odd(self) -> bool:
        """Not where a waiting rank is: silent, stopped, or outside any collective."""
        return self.silent or self.stopped or not self.collective

    @property
    def location(self) -> str:
        """``train.py:42`` of the innermost user frame (or the innermost frame)."""
        if not self.where:
            return "an unknown place"
        file, line, _function = self.where[0]
        return f"{os.path.basename(file)}:{line}"

    def name(self) -> str:
        local = "" if self.local_rank is None else f", local rank {self.local_rank}"
        return f"rank {self.rank} (node rank {self.node_rank}, host {self.host}{local})"


def report_frames(frames: Sequence[Sequence[Any]], *, limit: int = 5) -> list[list[Any]]:
    """The innermost frames (``frames`` is outermost first), user code first: the user's innermost
    lines, innermost first, then the library call they made (:func:`call_order` puts them back)."""
    inner = list(reversed(frames))
    user = [list(f) for f in inner if not is_library(str(f[0]))]
    library: list[list[Any]] = []
    for f in inner:  # library frames inside the innermost user frame
        if not is_library(str(f[0])):
            break
        library.append(list(f))
    return (user[:3] + library[-2:])[:limit] if user else [list(f) for f in inner[:limit]]


def call_order(where: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """``where`` (:func:`report_frames`) in the order of the calls, outermost first, as Python prints
    a traceback: the user's lines outer to inner, then the library call and what it called."""
    user = [list(f) for f in where if not is_library(str(f[0]))]
    library = [list(f) for f in where if is_library(str(f[0]))]
    if not user:
        return list(reversed([list(f) for f in where]))
    return [*reversed(user), *reversed(library)]


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
            parts.append(_named(self.culprits, MISMATCHED[2:] if mismatched else self.why))
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


def _named(culprits: Sequence[RankState], why: str) -> str:
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
    return (f"{_ranks_phrase(sorted(s.rank for s in states))} (node rank{'s' if len(nodes) > 1 else ''} "
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
    """``no progress for 95s on rank 1``: :func:`stall`, in the words people read."""
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


def left_phrase(state: RankState) -> str:
    """``rank 3 (...) exited with code 0 at train.py:12``: where a rank that left ended (``where``: the
    frame of its ``sys.exit``, line 0 for the end of its script or function)."""
    if not state.where:
        return f"{state.name()} exited with code 0"
    file, line, function = state.where[0]
    name = os.path.basename(str(file)) if function == "<module>" else function
    place = f"at {os.path.basename(str(file))}:{line}" if line else f"at the end of {name}"
    if not state.exited:  # its code ended, its process not: a thread that never ends, an atexit handler
        return f"{state.name()} ended its code {place} but its process has not exited"
    return f"{state.name()} exited with code 0 {place}"


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
    (``all_reduce`` on some ranks, ``broadcast`` on another): calls that can never complete
    each other, in whatever phase. Nothing a healthy job does before its first step looks like
    it (a rank loading data or building a model is outside any call), so the first-step
    allowance does not apply. Point-to-point calls differ by design and are left out."""
    calls = {s.wait for s in states}
    return all(s.c10d and s.wait and not s.odd for s in states) and len(calls) > 1 and not calls & POINT_TO_POINT


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


def first_timed_out(failures: Sequence[Failure]) -> Failure | None:
    """The earliest worker failure whose output says a collective timed out (torch's own
    process-group timeout); None: none did."""
    timed_out = [f for f in failures if f.rank is not None and _TIMED_OUT.search(f.tail or "")]
    return min(timed_out, key=lambda f: f.time) if timed_out else None


def timed_out_state(states: Sequence[RankState]) -> RankState | None:
    """The first rank (lowest) whose function ended with torch's process-group timeout, as its
    sampler noted it (``per-node`` mode: the ``mp.spawn`` children); None: none did."""
    return next((s for s in sorted(states, key=lambda s: s.rank) if _TIMED_OUT.search(s.error)), None)


def account_of_timeout(failed: RankState, last_states: Sequence[RankState], now: float,
                       world_size: int | None = None, nnodes: int = 1,
                       seen: Collection[int] = ()) -> Failure | None:
    """:func:`never_joined` or :func:`never_arrived` for a rank whose sampler noted the timeout (no
    worker failure record: ``per-node`` mode, where the node's one process fails for all its ranks)."""
    failure = Failure(node_rank=failed.node_rank, rank=failed.rank, local_rank=failed.local_rank,
                      returncode=1, secondary=False, time=now, tail=failed.error)
    return (never_joined(failure, last_states, {*seen, *(s.rank for s in last_states)}, world_size, nnodes)
            or never_arrived(failure, last_states))


def never_joined(failed: Failure, last_states: Sequence[RankState], seen: Collection[int],
                 world_size: int | None, nnodes: int) -> Failure | None:
    """The root cause for ``failed`` (a rank whose start-up or collective timed out) when ranks of the
    job were never seen at all: their node's paijob-runtime never reached the store the watches share
    (it started too late, or cannot reach it), or they failed before it did. ``seen``: every rank the
    watch ever saw. None: every rank was seen."""
    if not world_size:
        return None
    missing = sorted(set(range(world_size)).difference(seen))
    waiter = next((s for s in last_states if s.rank == failed.rank), None)
    if not missing or waiter is None:
        return None
    per_node = max(1, world_size // max(1, nnodes))
    nodes = sorted({rank // per_node for rank in missing})
    where = f"{waiter.wait} at {waiter.location}" if waiter.wait else waiter.location
    noun = "node rank" if len(nodes) == 1 else "node ranks"
    reason = (f"start-up: {noun} {rank_ranges(nodes)} ({_ranks_phrase(missing)}) never joined: torch's timeout "
              f"fired in rank {failed.rank}'s {where} while it waited for them, and the watch never saw them "
              f"(their paijob-runtime did not reach the job's store in time: started late, cannot reach "
              f"MASTER_ADDR:MASTER_PORT, or failed first: see that node's log); start every node within the timeout, or pass init_process_group a "
              f"longer timeout=")
    return Failure(node_rank=nodes[0], rank=None, local_rank=None, returncode=failed.returncode,
                   secondary=False, time=failed.time - 1e-3, reason=reason, overrides=True)


def _ranks_phrase(ranks: Sequence[int]) -> str:
    return ("ranks " if len(ranks) > 1 else "rank ") + rank_ranges(ranks)


def never_arrived(failed: Failure, last_states: Sequence[RankState]) -> Failure | None:
    """The root cause for ``failed`` (a rank whose collective timed out): the rank(s) not where
    the others waited at the last look. None: ``failed`` was not in a collective, or every rank
    was."""
    # the dead ranks' samplers fall silent as they exit: judge by where each one was
    states = [replace(s, stale_for=0.0) for s in last_states]
    waiter = next((s for s in states if s.rank == failed.rank), None)
    culprits, why = pick_culprits(states)
    culprits = [s for s in culprits if s.rank != failed.rank]
    if waiter is None or not waiter.collective or not culprits:
        return None
    reason = (
        f"torch's process-group timeout fired in rank {failed.rank}'s {waiter.wait} at "
        f"{waiter.location}; the rank that never arrived: "
        + _named(culprits, why)
    )
    return Failure(node_rank=culprits[0].node_rank, rank=None, local_rank=None,
                   returncode=failed.returncode, secondary=False, time=failed.time - 1e-3,
                   reason=reason, detail="\n".join(culprit_detail(culprits)), overrides=True)
