"""The hang watch: which ranks make progress, node 0's verdict, and the one report that names the culprit.

Each worker's sampler (:mod:`paijob.runtime.watch.progress`) writes where its main
thread is and when it was last active. Each node's agent runs one
:class:`HangWatch` thread that reads its workers' files once a second and
publishes a short summary per rank over the channel the nodes already share
(the rendezvous store, through :class:`~paijob.runtime.watch.nodewatch.NodeWatch`);
node 0 gathers every node's summary and judges (:func:`judge`, pure):

* **hang**: no rank has been active for the timeout (``--hang-timeout``, or the
  longer ``--hang-first-timeout`` until every rank has completed a collective).
  The culprits are the ranks that are not where the others wait: outside any
  collective (a sleep, a blocking read, a DataLoader worker that never answers),
  silent (a C call holding the GIL), or in a different collective than most.
  One stall is judged sooner, on a timeout *calibrated* from the job's own
  rhythm (:func:`calibrated_limit`): every rank idle inside a
  ``torch.distributed`` call, which no checkpoint save or evaluation can look like.
* **straggler**: some ranks wait for the timeout while others are busy (CPU,
  I/O, a moving stack). Reported once at the timeout, ended only when the
  wait reaches ``--hang-hard-limit`` times the timeout: a long checkpoint save
  or evaluation on one rank is not a hang.

A verdict is reported first (one report in node 0's log; every node prints it
as its root cause), every rank's full stack is written to a file, and then the
job ends with :data:`HANG_EXIT` on every node.

No torch import.
"""

from __future__ import annotations

import json
import linecache
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from paijob.runtime.config import HangSettings
from paijob.runtime.watch.failures import Failure
from paijob.runtime.watch.progress import STACK_SIGNAL, is_library
from paijob.task import contract, exitcodes, procfs

HANG_EXIT = exitcodes.HANG
STALE_AFTER = 10.0  # a sampler silent this long (seconds, at least 5 intervals) cannot run
STACKS_FILE = "paijob-stacks.txt"
_TIMED_OUT = re.compile(r"timed out|timeout|Timeout|Watchdog caught collective operation")
STACKS_WAIT = 5.0  # how long node 0 waits for the other nodes' full stacks

PROGRESS_KEY = "paijob/progress/{node}"
STACKS_WANTED_KEY = "paijob/stacks/wanted"  # a counter: SIGUSR1 or a verdict asks every node
STACKS_KEY = "paijob/stacks/{node}/{request}"


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
    first_progress: bool  # completed a collective since it started
    stale_for: float  # seconds its sampler has been silent beyond the interval
    where: list[list[Any]] = field(default_factory=list)  # innermost frames, user code first
    loader_worker: list[int | None] | None = None  # (id, pid) of the DataLoader worker it waits for
    exited: bool = False  # its process has ended: it waits for nothing (judged no more)
    c10d: bool = False  # it waits inside a torch.distributed call (all_reduce, barrier, recv...)
    longest_wait: float = 0.0  # its longest wait inside one such call so far (seconds)
    quiet_for: float = 0.0  # seconds since any of its threads last moved data (a transfer)

    @property
    def silent(self) -> bool:
        return self.stale_for >= STALE_AFTER

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
    """The innermost frames, user code first: the user's innermost lines, then the library call."""
    inner = list(reversed(frames))
    user = [list(f) for f in inner if not is_library(str(f[0]))]
    library: list[list[Any]] = []
    for f in inner:  # library frames inside the innermost user frame
        if not is_library(str(f[0])):
            break
        library.append(list(f))
    return (user[:3] + library[-2:])[:limit] if user else [list(f) for f in inner[:limit]]


def summarise(report: dict[str, Any], *, node_rank: int, host: str, now: float,
              interval: float, exited: bool = False) -> RankState:
    """A worker's sampler file as the rank state node 0 judges (durations, not clock times)."""
    age = max(0.0, now - float(report.get("time", now)))
    return RankState(
        rank=int(report["rank"]),
        node_rank=node_rank,
        host=host,
        local_rank=report.get("local_rank"),
        idle_for=max(0.0, now - float(report.get("active_at", now))),
        busy=bool(report.get("busy")) and age < STALE_AFTER,
        cpu_share=float(report.get("cpu_share", 0.0)),
        wait=report.get("wait"),
        collective=bool(report.get("collective")),
        first_progress=int(report.get("collectives_done", 0)) > 0,
        stale_for=max(0.0, age - interval),
        where=report_frames(report.get("frames") or []),
        loader_worker=report.get("loader_worker"),
        exited=exited,
        c10d=bool(report.get("c10d")),
        longest_wait=float(report.get("longest_wait", 0.0)),
        quiet_for=max(0.0, now - float(report.get("data_moved_at", now))),
    )


def process_ended(pid: object) -> bool:
    """Whether a worker's process is gone (or a zombie): a rank that finished early is no straggler."""
    if not isinstance(pid, int):
        return False
    stat = procfs.read_stat(pid)
    return stat is None or stat.zombie


def read_reports(folder: str) -> dict[int, dict[str, Any]]:
    """Every worker's latest sampler file in ``folder``, by global rank."""
    found: dict[int, dict[str, Any]] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return found
    for name in names:
        if not (name.startswith("rank") and name.endswith(".json")):
            continue
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as handle:
                report = json.load(handle)
            found[int(report["rank"])] = report
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


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
        head = f"{self.source} {self.seconds:.0f}s"
        return f"{head}: {self.why}" if self.why else head


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

    def headline(self, settings: HangSettings) -> str:
        if self.kind == "straggler":
            return self._straggler_headline(settings.hard_limit)
        parts = [f"hang: no rank made progress for {self.waited:.0f}s ({self.limit.said()})"]
        if self.culprits:
            parts.append(_join(stuck_phrase(s, self.why) for s in self.culprits))
        else:
            parts.append(self.why)
        if self.others:
            parts.append(waiting_phrase(self.others))
        return "; ".join(parts) + f"; exit {HANG_EXIT}"

    def _straggler_headline(self, hard_limit: float) -> str:
        option, seconds = self.limit.source, self.limit.seconds
        head = (f"straggler: {_join(straggler_phrase(s) for s in self.culprits)} while "
                f"{waiting_phrase(self.others)}")
        if self.final:
            return (f"hang: {head}; ended at the hard limit ({hard_limit:g} x "
                    f"{option} {seconds:.0f}s); exit {HANG_EXIT}")
        return (f"{head}; not a hang while it works: ended at {hard_limit:g} x "
                f"{option} ({hard_limit * seconds:.0f}s) unless it finishes")

    def detail(self) -> list[str]:
        return culprit_detail(self.culprits)


def culprit_detail(culprits: Sequence[RankState]) -> list[str]:
    """The culprits' innermost frames, user code first, with their source lines."""
    lines = []
    for state in culprits:
        lines.append(f"{state.name()}, inactive for {state.idle_for:.0f}s, CPU "
                     f"{state.cpu_share:.0%}:")
        for file, line, function in state.where:
            source = linecache.getline(str(file), int(line)).strip()
            lines.append(f"  {file}:{line} in {function}" + (f": {source}" if source else ""))
    return lines


def _join(phrases: Iterable[str]) -> str:
    return "; ".join(phrases)


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


def waiting_phrase(states: Sequence[RankState]) -> str:
    """``ranks 0, 2-7 wait in all_reduce at train.py:42 for 312s``, one group per place."""
    groups: dict[tuple[str, str], list[RankState]] = {}
    for state in states:
        groups.setdefault((state.wait or "", state.location), []).append(state)
    phrases = []
    for (wait, location), members in sorted(groups.items(), key=lambda item: -len(item[1])):
        ranks = rank_ranges(s.rank for s in members)
        noun = "ranks" if len(members) > 1 else "rank"
        verb = "wait" if len(members) > 1 else "waits"
        what = f" in {wait}" if wait else ""
        waited = min(s.idle_for for s in members)
        phrases.append(f"{noun} {ranks} {verb}{what} at {location} for {waited:.0f}s")
    return ", ".join(phrases)


def stuck_phrase(state: RankState, why: str) -> str:
    if state.silent:
        return (f"{state.name()} does not answer (its sampler has been silent for "
                f"{state.stale_for:.0f}s: a C call holding the GIL?), last seen at {state.location}")
    if state.wait == "DataLoader":
        worker = ""
        if state.loader_worker:
            worker_id, pid = state.loader_worker
            worker = f" {worker_id}" + (f" (pid {pid})" if pid else "")
        return f"{state.name()} waits for its DataLoader worker{worker} at {state.location}"
    if state.collective:
        return f"{state.name()} waits in {state.wait} at {state.location} ({why})"
    return f"{state.name()} is stuck at {state.location} in {_function(state)}, outside any collective"


def straggler_phrase(state: RankState) -> str:
    return (f"{state.name()} is busy at {state.location} in {_function(state)} "
            f"(CPU {state.cpu_share:.0%})")


def _function(state: RankState) -> str:
    return str(state.where[0][2]) if state.where else "?"


def pick_culprits(states: Sequence[RankState]) -> tuple[list[RankState], str]:
    """The ranks not where the others wait, and how they were told apart."""
    odd = [s for s in states if s.silent or not s.collective]
    if odd:
        return odd, "outside any collective"
    groups: dict[tuple[str, str], list[RankState]] = {}
    for state in states:
        groups.setdefault((state.wait or "", state.location), []).append(state)
    if len(groups) == 1:
        (wait, location), _members = next(iter(groups.items()))
        return [], (f"every rank waits in {wait} at {location}: the collective itself does not "
                    f"complete (a lost message, a network or GPU fault)")
    largest = max(len(members) for members in groups.values())
    minority = [s for members in groups.values() if len(members) < largest for s in members]
    if minority:
        return minority, "a different collective than the other ranks: mismatched collectives"
    return [], "the ranks wait in different collectives: mismatched collectives"


def stall_line(states: Sequence[RankState], settings: HangSettings) -> str | None:
    """``no progress for 95s on rank 1``: ranks inactive for half the timeout (at most 30 s),
    while the job runs; when every rank is, the ones not where the others wait. None: none."""
    shown_after = min(30.0, settings.timeout / 2) if settings.enabled else 30.0
    running = [s for s in states if not s.exited]
    idle = [s for s in running if s.idle_for >= shown_after]
    if not idle:
        return None
    if len(idle) == len(running):
        culprits, _why = pick_culprits(idle)
        idle = culprits or idle
    noun = "ranks" if len(idle) > 1 else "rank"
    return f"no progress for {min(s.idle_for for s in idle):.0f}s on {noun} {rank_ranges(s.rank for s in idle)}"


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
    return verdict


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
    return [s for s in states if not s.exited]


def configured_limit(states: Sequence[RankState], settings: HangSettings) -> Limit:
    """``--hang-timeout``, or the longer ``--hang-first-timeout`` until every rank has completed
    a collective."""
    started = all(s.first_progress for s in states)
    if started or settings.first_timeout <= settings.timeout:
        return Limit(settings.timeout, "--hang-timeout")
    return Limit(settings.first_timeout, "--hang-first-timeout")


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
    if not all(s.first_progress and s.c10d and not s.silent for s in states):
        return None
    longest = max(s.longest_wait for s in states)
    seconds = max(settings.calibration_floor, settings.calibration_multiple * longest)
    if seconds >= settings.timeout:
        return None
    return Limit(seconds, CALIBRATED, (
        f"every rank waits in a torch.distributed call, and the longest wait in one so far "
        f"was {longest:.0f}s; {settings.calibration_multiple:g} x that, at least "
        f"{settings.calibration_floor:.0f}s; --hang-timeout {settings.timeout:.0f}s holds "
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
        + _join(stuck_phrase(s, why) for s in culprits)
    )
    return Failure(node_rank=culprits[0].node_rank, rank=None, local_rank=None,
                   returncode=failed.returncode, secondary=False, time=failed.time - 1e-3,
                   reason=reason, detail="\n".join(culprit_detail(culprits)), overrides=True)


# -- full stacks -------------------------------------------------------------------------


def stack_text(report: dict[str, Any], header: str) -> str:
    """A rank's whole main-thread stack as Python prints a traceback (outermost first)."""
    lines = [header, "Stack (most recent call last):"]
    for file, line, function in report.get("frames") or []:
        lines.append(f'  File "{file}", line {line}, in {function}')
        source = linecache.getline(str(file), int(line)).strip()
        if source:
            lines.append(f"    {source}")
    return "\n".join(lines)


# -- the thread on every node ------------------------------------------------------------


class Channel:
    """How nodes share summaries: a node's own (single-node jobs) or the rendezvous store."""

    def publish(self, node_rank: int, states: list[RankState]) -> None:
        pass

    def gather(self, nnodes: int, node_rank: int) -> list[RankState]:
        return []

    def stacks_wanted(self) -> int:
        return 0

    def want_stacks(self) -> int:
        return 0

    def send_stacks(self, node_rank: int, request: int, text: str) -> None:
        pass

    def collect_stacks(self, nnodes: int, request: int, timeout: float) -> dict[int, str]:
        return {}


class StoreChannel(Channel):
    """Over the rendezvous store: every call bounded (``call(fn, timeout)`` returns None on failure)."""

    def __init__(self, call: Callable[..., Any]) -> None:
        self.call = call

    def publish(self, node_rank: int, states: list[RankState]) -> None:
        text = json.dumps([asdict(s) for s in states])
        self.call(lambda store: store.set(PROGRESS_KEY.format(node=node_rank), text))

    def gather(self, nnodes: int, node_rank: int) -> list[RankState]:
        found: list[RankState] = []
        for node in range(nnodes):
            if node == node_rank:
                continue
            key = PROGRESS_KEY.format(node=node)

            def get(store: Any, key: str = key) -> bytes | None:
                return store.get(key) if store.check([key]) else None

            text = self.call(get)
            if text:
                found.extend(RankState(**item) for item in json.loads(text))
        return found

    def stacks_wanted(self) -> int:
        value = self.call(lambda store: int(store.add(STACKS_WANTED_KEY, 0)))
        return int(value or 0)

    def want_stacks(self) -> int:
        value = self.call(lambda store: int(store.add(STACKS_WANTED_KEY, 1)))
        return int(value or 0)

    def send_stacks(self, node_rank: int, request: int, text: str) -> None:
        key = STACKS_KEY.format(node=node_rank, request=request)
        self.call(lambda store: store.set(key, text))

    def collect_stacks(self, nnodes: int, request: int, timeout: float) -> dict[int, str]:
        found: dict[int, str] = {}
        deadline = time.monotonic() + timeout
        while len(found) < nnodes - 1 and time.monotonic() < deadline:
            for node in range(1, nnodes):
                if node in found:
                    continue
                key = STACKS_KEY.format(node=node, request=request)

                def get(store: Any, key: str = key) -> bytes | None:
                    return store.get(key) if store.check([key]) else None

                text = self.call(get)
                if text:
                    found[node] = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
            time.sleep(0.2)
        return found


class HangWatch:
    """One node's hang watch thread (node 0 also judges)."""

    def __init__(
        self,
        settings: HangSettings,
        *,
        folder: str,
        node_rank: int,
        nnodes: int,
        world_size: int,
        host: str,
        stacks_dir: str,
        channel: Channel,
        declare: Callable[[Failure], None],
        say: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self.folder = folder
        self.node_rank = node_rank
        self.nnodes = nnodes
        self.world_size = world_size
        self.host = host
        self.stacks_dir = stacks_dir
        self.channel = channel
        self._declare = declare
        self._say = say
        self._stop = threading.Event()
        self._stacks_request = threading.Event()
        self._stacks_seen = 0
        self._signalled: set[int] = set()  # pids sent STACK_SIGNAL while silent
        self._straggler_reported = False
        self.verdict: Verdict | None = None
        self.last_states: list[RankState] = []
        self.progress_file = os.environ.get(contract.PROGRESS_FILE) or None
        self._progress_line: str | None = None
        self._progress_written = 0.0
        self._declared: Failure | None = None
        self._said: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="paijob-hangwatch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def take_verdict(self) -> Failure | None:
        """The failure a final verdict declared, once (for a launcher that polls, not listens)."""
        failure, self._declared = self._declared, None
        return failure

    def request_stacks(self) -> None:
        """SIGUSR1: print every rank's stack on every node (from a signal handler: set a flag)."""
        self._stacks_request.set()

    # -- the loop -----------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self.settings.interval):
            try:
                self.tick()
            except Exception as error:  # noqa: BLE001 - never take the node down
                message = f"hang watch: {type(error).__name__}: {error}"
                if message not in self._said:  # once, not once a second
                    self._said.add(message)
                    self._say(message)

    def tick(self) -> None:
        now = time.time()
        reports = read_reports(self.folder)
        local = [summarise(r, node_rank=self.node_rank, host=self.host, now=now,
                           interval=self.settings.interval, exited=process_ended(r.get("pid")))
                 for r in reports.values()]
        self._dump_silent(local, reports)
        if self.nnodes > 1:
            self.channel.publish(self.node_rank, local)
        if self._stacks_request.is_set():
            self._stacks_request.clear()
            self._stacks_seen = max(self._stacks_seen, self.channel.want_stacks())
            self._say(self.local_stacks(reports, "stacks on request (SIGUSR1)"))
        elif self.nnodes > 1:
            wanted = self.channel.stacks_wanted()
            if wanted > self._stacks_seen:
                self._stacks_seen = wanted
                text = self.local_stacks(reports, "stacks asked for (SIGUSR1, or a hang verdict)")
                self.channel.send_stacks(self.node_rank, wanted, text)
                self._say(text)
        if self.node_rank != 0 or self.verdict is not None:
            return
        states = local + (self.channel.gather(self.nnodes, self.node_rank) if self.nnodes > 1 else [])
        states.sort(key=lambda s: s.rank)
        self.last_states = states
        self._keep_progress_file(states)
        verdict = judge(states, self.settings, expected_ranks=self.world_size)
        if verdict is None:
            self._straggler_reported = False
            return
        if not verdict.final:
            if not self._straggler_reported:
                self._straggler_reported = True
                self._say(f"warning: {verdict.headline(self.settings)}")
            return
        self.verdict = verdict
        self._end(verdict, reports)

    def _end(self, verdict: Verdict, reports: dict[int, dict[str, Any]]) -> None:
        """Report first (every stack to a file), end second (every node, exit HANG_EXIT)."""
        headline = verdict.headline(self.settings)
        self._say(f"hang watch: {headline.split('; ')[0]}; collecting every rank's stack, then "
                  f"stopping the job")
        path = self.write_all_stacks(reports)
        detail = verdict.detail()
        if path:
            detail.append(f"every rank's full stack: {path}")
        self._declared = Failure(
            node_rank=self.node_rank,
            rank=None, local_rank=None, returncode=None, secondary=False, time=time.time(),
            reason=headline, detail="\n".join(detail), exit_status=HANG_EXIT,
        )
        self._declare(self._declared)

    def _keep_progress_file(self, states: Sequence[RankState]) -> None:
        """Where the cluster asks (the local cluster): the current stall line, or none."""
        if not self.progress_file:
            return
        line = stall_line(states, self.settings)
        now = time.monotonic()
        if line == self._progress_line and now - self._progress_written < 5.0:
            return
        self._progress_line, self._progress_written = line, now
        text = json.dumps({"line": line, "time": time.time()})
        try:
            temp = f"{self.progress_file}.tmp"
            with open(temp, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(temp, self.progress_file)
        except OSError:
            self.progress_file = None

    def explain_timeout(self, failures: Sequence[Failure]) -> Failure | None:
        """torch's own process-group timeout fired first (in a rank that waited): name the rank
        that never arrived, from node 0's last look before the failure. None: nothing to add."""
        if self.node_rank != 0 or not self.last_states:
            return None
        failed = first_timed_out(failures)
        return None if failed is None else never_arrived(failed, self.last_states)

    def _dump_silent(self, local: list[RankState], reports: dict[int, dict[str, Any]]) -> None:
        """A rank whose sampler cannot run: faulthandler writes its stack (once per silence)."""
        for state in local:
            pid = reports[state.rank].get("pid")
            if not isinstance(pid, int) or state.exited:
                continue
            if state.silent and pid not in self._signalled:
                self._signalled.add(pid)
                try:
                    os.kill(pid, STACK_SIGNAL)
                except OSError:
                    pass
            elif not state.silent:
                self._signalled.discard(pid)

    def local_stacks(self, reports: dict[int, dict[str, Any]], why: str) -> str:
        """Every local rank's stack, as text (a silent rank: its faulthandler dump)."""
        parts = [f"{why}: node rank {self.node_rank} ({self.host}), {len(reports)} rank(s)"]
        now = time.time()
        for rank in sorted(reports):
            report = reports[rank]
            state = summarise(report, node_rank=self.node_rank, host=self.host, now=now,
                              interval=self.settings.interval)
            header = (f"--- {state.name()}, pid {report.get('pid')}, inactive for "
                      f"{state.idle_for:.0f}s, CPU {state.cpu_share:.0%}"
                      + (f", waits in {state.wait}" if state.wait else ""))
            parts.append(stack_text(report, header))
            if state.wait == "DataLoader" and state.loader_worker and state.loader_worker[1]:
                self._signal_for_stack(int(state.loader_worker[1]))  # the worker it waits for
            dump = self._faulthandler_dump(rank)
            if dump and (state.silent or state.wait == "DataLoader"):
                parts.append(f"faulthandler dump of rank {rank}'s process (its sampler is silent) "
                             f"or of the DataLoader worker it waits for:\n{dump}")
        return "\n".join(parts)

    def _signal_for_stack(self, pid: int) -> None:
        """faulthandler in ``pid`` (registered before the fork) writes its stack to rank<N>.stack."""
        try:
            os.kill(pid, STACK_SIGNAL)
        except OSError:
            return
        time.sleep(0.3)

    def _faulthandler_dump(self, rank: int) -> str:
        try:
            with open(os.path.join(self.folder, f"rank{rank}.stack"), encoding="utf-8",
                      errors="replace") as handle:
                return handle.read().strip()
        except OSError:
            return ""

    def write_all_stacks(self, reports: dict[int, dict[str, Any]]) -> str | None:
        """Node 0: every rank's full stack in one file (the other nodes' sent over the store)."""
        request = self.channel.want_stacks() if self.nnodes > 1 else 0
        self._stacks_seen = max(self._stacks_seen, request)
        texts = [self.local_stacks(reports, "hang watch")]
        if self.nnodes > 1:
            others = self.channel.collect_stacks(self.nnodes, request, STACKS_WAIT)
            for node in range(1, self.nnodes):
                texts.append(others.get(node, f"node rank {node}: its stacks did not arrive within "
                                              f"{STACKS_WAIT:.0f}s (see its own log)"))
        return write_stacks_file(self.stacks_dir, STACKS_FILE, "\n\n".join(texts) + "\n")


def write_stacks_file(folder: str, name: str, text: str) -> str | None:
    """Write ``text`` to ``folder/name``; its path, or None when the folder cannot be written."""
    path = os.path.join(folder, name)
    try:
        os.makedirs(folder, exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError:
        return None
    return os.path.abspath(path)


def stacks_folder(log_dir: str | None, environ: dict[str, str] | os._Environ[str]) -> str:
    """Where the stacks file goes: ``--log-dir``, else the job's output folder, else the working directory."""
    return log_dir or environ.get(contract.OUTPUT_DIR) or os.getcwd()


def stack_signal_name() -> str:
    return signal.Signals(STACK_SIGNAL).name
