"""The hang watch: the thread on every node that reads its workers' sampler files, shares them, and (node 0)
acts on the verdict; the verdict itself is pure (:mod:`paijob.runtime.watch.hang.verdict`).

Each worker's sampler (:mod:`paijob.runtime.watch.worker.sampler`) writes where its main
thread is and when it was last active. Each node runs one :class:`HangWatch`
thread that reads its workers' files once a second (only those it can vouch
for: :mod:`paijob.runtime.watch.node.believed`) and publishes a short summary per
rank over the channel the nodes already share (the rendezvous store); node 0
gathers every node's summary and judges (:func:`~paijob.runtime.watch.hang.verdict.judge`).

A verdict is reported first (one report in node 0's log; every node prints it
as its root cause), every rank's full stack (every Python thread) is written to
a file, and then the job ends with :data:`HANG_EXIT` on every node.

What it does to a worker: nothing. It reads files and ``/proc``; it never sends
a worker a signal (a signal wakes a C call that holds the GIL: the user's code
would see EINTR). A worker whose sampler is silent is read from the dump
faulthandler's own watchdog thread writes (armed by the sampler), a stopped one
from outside its process by py-spy (:mod:`paijob.runtime.watch.node.outside`: no
signal, no ptrace-stop). No torch import.
"""

from __future__ import annotations

import json
import linecache
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from typing import Any

from paijob.common import contract, procfs, untrusted
from paijob.common.records import StallRecord
from paijob.runtime.config import HangSettings
from paijob.runtime.failure import Failure
from paijob.runtime.watch.node import outside
from paijob.runtime.watch.node.believed import Launched, read_file, read_reports
from paijob.runtime.watch.lifecycle import Ticker
from paijob.runtime.watch.worker.sampler import MAX_ERROR, write_new
from paijob.runtime.watch.slow.doctor import SlowDoctor
from paijob.runtime.watch.hang.verdict import (
    HANG_EXIT,
    STALE_AFTER,
    RankState,
    Verdict,
    account_of_timeout,
    first_timed_out,
    judge,
    never_arrived,
    report_frames,
    stall,
    timed_out_state,
)

STACKS_FILE = "paijob-stacks.txt"
# seconds a node waits for node 0's account (of a collective's timeout, of a mismatch): node 0 asks its
# ranks for their calls (recorder.ANSWER_WAIT), then waits for the other nodes' words (MISMATCH_WAIT)
ACCOUNT_WAIT = 20.0
STACKS_WAIT = 5.0  # how long node 0 waits for the other nodes' full stacks
MAX_THREADS = 8  # other threads of a rank kept in its summary

PROGRESS_KEY = "paijob/progress/{node}"
SLOW_KEY = "paijob/slow/{node}"  # a node's ranks' evidence for the slow-rank doctor
STACKS_WANTED_KEY = "paijob/stacks/wanted"  # a counter: SIGUSR1 or a verdict asks every node
STACKS_KEY = "paijob/stacks/{node}/{request}"

_DUMP_THREAD = re.compile(r"^(?:Current thread|Thread) 0x([0-9a-fA-F]+)")
_DUMP_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


def parse_dump(text: str) -> dict[int, list[list[Any]]]:
    """faulthandler's dump (every thread, innermost frame first) as thread id -> frames,
    outermost first like a sampler's."""
    threads: dict[int, list[list[Any]]] = {}
    current: list[list[Any]] | None = None
    for line in text.splitlines():
        header = _DUMP_THREAD.match(line)
        if header:
            current = threads.setdefault(int(header.group(1), 16), [])
            continue
        frame = _DUMP_FRAME.match(line)
        if frame and current is not None:
            current.insert(0, [frame.group(1), int(frame.group(2)), frame.group(3)])
    return threads


def never_read(rank: int, node_rank: int, seconds: float) -> RankState:
    """A rank of another node whose state never reached node 0 (not judged; ``seconds``: how long the
    watch has looked)."""
    return RankState(rank=rank, node_rank=node_rank, host="", local_rank=None, idle_for=0.0, busy=False,
                     cpu_share=0.0, wait=None, collective=False, first_progress=False, stale_for=seconds,
                     unseen=True)


def unseen_since(state: RankState, seconds: float) -> RankState:
    """``state``, read ``seconds`` ago and unreadable since: counted as a rank of the job, not judged
    (:attr:`RankState.unseen`), ``stale_for`` how long it has not been seen."""
    return replace(state, unseen=True, stale_for=seconds)


def outside_stacks(report: dict[str, Any], read: outside.Read | None) -> tuple[dict[str, Any] | None, str]:
    """A stopped rank's stacks as py-spy read them from outside, in its sampler report's shape
    (``frames``, ``threads``), and ``""``; or None and why not (``""``: no read was made)."""
    if read is None:
        return None, ""
    main, others = read.split(int(report.get("pid") or 0), report.get("main_thread"))
    if main is None or not main.frames:
        return None, read.why or "py-spy did not find its main thread"
    return {"frames": main.frames,
            "threads": [{"name": t.name, "ident": t.ident, "frames": t.frames} for t in others]}, ""


def summarise(report: dict[str, Any], *, node_rank: int, host: str, now: float,
              interval: float, exited: bool = False, stopped: bool = False,
              dump: str = "", outside_read: outside.Read | None = None) -> RankState:
    """A worker's sampler file as the rank state node 0 judges (durations, not clock times).

    ``dump``: faulthandler's watchdog dump of the rank; ``outside_read``: a stopped rank's stacks as
    py-spy read them (:func:`main_and_threads` says which is believed); a read that found nothing
    says why (``unread``), and the rank stays at its last sample's line."""
    age = max(0.0, now - float(report.get("time", now)))
    stale_for = max(0.0, age - interval)
    seen, unread = outside_stacks(report, outside_read if stopped else None)
    frames, threads, source = main_and_threads(report, dump, seen)
    left = report.get("left")
    if isinstance(left, dict) and _frame(left.get("where")):
        frames = [left["where"]]  # where its code ended: the place its sampler last saw is older
    return RankState(
        rank=int(report["rank"]),
        node_rank=node_rank,
        host=host,
        local_rank=report.get("local_rank"),
        idle_for=max(0.0, now - min(now, float(report.get("active_at", now)))),
        busy=bool(report.get("busy")) and age < STALE_AFTER,
        cpu_share=float(report.get("cpu_share", 0.0)),
        wait=report.get("wait"),
        collective=bool(report.get("collective")),
        first_progress=bool(report.get("first_progress")),
        stale_for=stale_for,
        where=report_frames(frames),
        loader_worker=report.get("loader_worker"),
        exited=exited,
        c10d=bool(report.get("c10d")),
        longest_wait=float(report.get("longest_wait", 0.0)),
        quiet_for=max(0.0, now - min(now, float(report.get("data_moved_at", now)))),
        stopped=stopped,
        dumped=source == "dump",
        threads=[[name, report_frames(stack)] for name, stack in threads[:MAX_THREADS]],
        error=str(report.get("error") or "")[:MAX_ERROR],
        outside=source == "outside",
        unread=unread,
        left=isinstance(left, dict) and _frame(left.get("where")),
    )


def _frame(value: Any) -> bool:
    """Whether ``value`` is one ``[file, line, function]`` frame as a sampler writes it."""
    return (isinstance(value, list) and len(value) == 3 and isinstance(value[0], str)
            and isinstance(value[1], int) and isinstance(value[2], str))


def main_and_threads(report: dict[str, Any], dump: str,
                     seen: dict[str, Any] | None) -> tuple[list[list[Any]], list[list[Any]], str]:
    """A rank's main-thread frames, its other threads ([name, frames]), and whence: ``outside``
    (``seen``: a stopped rank read now by py-spy), ``dump`` (faulthandler's watchdog dump, when its
    sampler is silent: where the main thread is, not where the last sample saw it) or ``report``."""
    if seen is not None:  # read now: newer than the dump and the report
        return seen["frames"], [[t["name"], t["frames"]] for t in seen["threads"]], "outside"
    if dump:  # the sampler clears it before each sample: a dump is newer than the report
        found = parse_dump(dump)
        main = found.pop(int(report.get("main_thread") or 0), None)
        if main:
            named = {t.get("ident"): t.get("name") for t in report.get("threads") or []}
            return main, [[named.get(ident) or f"thread 0x{ident:x}", stack]
                          for ident, stack in found.items()], "dump"
    threads = [[t.get("name", "?"), t.get("frames") or []] for t in report.get("threads") or []]
    return report.get("frames") or [], threads, "report"


def process_ended(pid: object) -> bool:
    """Whether a worker's process is gone (or a zombie): a rank that finished early is no straggler."""
    if not isinstance(pid, int):
        return False
    stat = procfs.read_stat(pid)
    return stat is None or stat.zombie


def process_stopped(pid: object) -> bool:
    """Whether a worker's process is stopped (T state: SIGSTOP, a debugger): it runs nothing."""
    stat = procfs.read_stat(pid) if isinstance(pid, int) else None
    return stat is not None and stat.stopped


# -- full stacks -------------------------------------------------------------------------


def stack_text(report: dict[str, Any], header: str) -> str:
    """A rank's whole stack as Python prints a traceback (outermost first): the main thread, then
    every other Python thread its sampler saw while the main thread stood still."""
    lines = [header, "Stack of the main thread (most recent call last):"]
    lines.extend(_traceback(report.get("frames") or []))
    for thread in report.get("threads") or []:
        lines.append(f"Stack of thread {thread.get('name', '?')!r} (most recent call last):")
        lines.extend(_traceback(thread.get("frames") or []))
    return "\n".join(lines)


def _traceback(frames: Sequence[Sequence[Any]]) -> list[str]:
    lines = []
    for file, line, function in frames:
        lines.append(f'  File "{file}", line {line}, in {function}')
        source = linecache.getline(str(file), int(line)).strip()
        if source:
            lines.append(f"    {source}")
    return lines


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

    def publish_slow(self, node_rank: int, text: str) -> None:
        pass

    def get_text(self, key: str) -> str | None:
        return None

    def set_text(self, key: str, text: str) -> None:
        pass

    def gather_slow(self, nnodes: int, node_rank: int) -> list[str]:
        return []


class StoreChannel(Channel):
    """Over the rendezvous store: every call bounded (``call(fn, timeout)`` returns None on failure)."""

    def __init__(self, call: Callable[..., Any]) -> None:
        self.call = call

    def publish(self, node_rank: int, states: list[RankState]) -> None:
        text = json.dumps([asdict(s) for s in states])
        self.call(lambda store: store.set(PROGRESS_KEY.format(node=node_rank), text))

    def gather(self, nnodes: int, node_rank: int) -> list[RankState]:
        return [RankState(**item) for text in self._others(PROGRESS_KEY, nnodes, node_rank)
                for item in json.loads(text)]

    def publish_slow(self, node_rank: int, text: str) -> None:
        self.call(lambda store: store.set(SLOW_KEY.format(node=node_rank), text))

    def get_text(self, key: str) -> str | None:
        def get(store: Any) -> bytes | None:
            return store.get(key) if store.check([key]) else None

        value = self.call(get)
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

    def set_text(self, key: str, text: str) -> None:
        self.call(lambda store: store.set(key, text))

    def gather_slow(self, nnodes: int, node_rank: int) -> list[str]:
        return self._others(SLOW_KEY, nnodes, node_rank)

    def _others(self, key_format: str, nnodes: int, node_rank: int) -> list[str]:
        """What every other node published under ``key_format`` (those that did), each call bounded."""
        texts = [self.get_text(key_format.format(node=node)) for node in range(nnodes) if node != node_rank]
        return [text for text in texts if text]

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


class HangWatch(Ticker):
    """One node's hang watch thread (node 0 also judges): a :class:`Ticker` reading its workers'
    files every ``settings.interval`` seconds."""

    def __init__(
        self,
        settings: HangSettings,
        *,
        folder: str,
        node_rank: int,
        nnodes: int,
        world_size: int,
        host: str,
        stacks_dir: str | None,
        channel: Channel,
        declare: Callable[[Failure], None],
        say: Callable[[str], None],
        launched: Launched | None = None,
        accounts: bool = False,
    ) -> None:
        super().__init__("paijob-hangwatch", settings.interval, say)
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
        self._stacks_request = threading.Event()
        self._stacks_seen = 0
        self.launched = launched  # None: every file in the folder is believed (tests)
        self._straggler_reported = False
        self.verdict: Verdict | None = None
        self.last_states: list[RankState] = []
        self._running: dict[int, RankState] = {}
        self.stall_file = os.environ.get(contract.STALL_FILE) or None
        self._stall: StallRecord | None = None
        self._stall_written = 0.0
        self._declared: Failure | None = None
        self.accounts = accounts  # per-node mode: the ranks' samplers note a timeout (node 0 accounts for it)
        self.account: Failure | None = None  # node 0's account of torch's own timeout (accounts)
        self._remote: list[RankState] = []  # the other nodes' ranks at the last gather
        self._remote_read: dict[int, tuple[float, list[RankState]]] = {}  # node: when read, its ranks
        self._began = time.time()  # when the watch was made: how long a rank never read has been unseen
        self._seen: set[int] = set()  # every rank whose state was ever read (node 0: every node's)
        self._left: dict[int, RankState] = {}  # ranks seen ended with their process group up (node 0: every node's)
        self._evidence = threading.Lock()  # the tick and account_now both update it
        self.slow = SlowDoctor(node_rank=node_rank, nnodes=nnodes, world_size=world_size, folder=folder,
                               read=read_file, say=say, publish=channel.publish_slow,
                               gather=channel.gather_slow, get=channel.get_text, put=channel.set_text,
                               record_file=os.environ.get(contract.SLOW_FILE) or None)

    def start(self) -> None:
        self._say(self.settings.described())
        super().start()

    def finish(self) -> None:
        """The slow-rank doctor's final summary; the workers' sampler files go with the node (the
        stacks file stays)."""
        self.slow.finish()
        if self.launched is not None and self.launched.keys is not None:
            self.launched.keys.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def take_verdict(self) -> Failure | None:
        """The failure a final verdict declared, once (for a launcher that polls, not listens)."""
        failure, self._declared = self._declared, None
        return failure

    def request_stacks(self) -> None:
        """SIGUSR1: print every rank's stack on every node (from a signal handler: set a flag)."""
        self._stacks_request.set()

    def tick(self) -> None:
        now = time.time()
        reports, local = self._read_local(now)
        if self.nnodes > 1:
            self.channel.publish(self.node_rank, local)
        self.slow.look(now, reports, local)
        if self._stacks_request.is_set():
            self._stacks_request.clear()
            self._stacks_seen = max(self._stacks_seen, self.channel.want_stacks())
            self._say(self.local_stacks(reports, "stacks on request (SIGUSR1)"))
        elif self.nnodes > 1:
            wanted = self.channel.stacks_wanted()
            if wanted > self._stacks_seen:
                self._stacks_seen = wanted
                self.slow.share(reports, local)  # node 0's verdict reads their recent collectives too
                text = self.local_stacks(reports, "stacks asked for (SIGUSR1, or a hang verdict)")
                self.channel.send_stacks(self.node_rank, wanted, text)
                self._say(text)
        if self.node_rank != 0 or self.verdict is not None or self.account is not None:
            return
        remote = self._gather_remote(local, now) if self.nnodes > 1 else []
        with self._evidence:
            self._remote = remote
            states = self._note_evidence(local + remote)
            account = self._account(states, now)
        if account is not None:
            self._declare(account)  # the other nodes read it from the store, while it lives
            return
        self._keep_stall_file(states)
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
        self._end(verdict, reports, local)

    def _gather_remote(self, local: list[RankState], now: float) -> list[RankState]:
        """The other nodes' ranks as they published them through the store.

        In ``per-node`` mode that store lives in the script's rank 0 (on this node): while rank 0's
        process is stopped the store answers no one, and a node that cannot be read counts as last read,
        its ranks counted as unseen (not judged: :func:`unseen_since`). Without this node 0 judged
        nothing (the other nodes' ranks missing) and the job hung silently, where rank 0's stopped
        process, seen here, is the verdict."""
        remote = self.channel.gather(self.nnodes, self.node_rank)
        read = {s.node_rank for s in remote}
        for node in read:
            self._remote_read[node] = (now, [s for s in remote if s.node_rank == node])
        if not (self.accounts and any(s.rank == 0 and s.stopped for s in local)):
            return remote
        found = remote + [unseen_since(s, now - read_at) for node, (read_at, states) in sorted(self._remote_read.items())
                          if node not in read for s in states]
        known = {s.rank for s in local + found}  # a node never read (rank 0 stopped before: a slow start-up)
        per_node = max(1, self.world_size // self.nnodes)
        return found + [never_read(rank, rank // per_node, now - self._began)
                        for rank in range(self.world_size) if rank not in known]

    def _note_evidence(self, states: list[RankState]) -> list[RankState]:
        """``states`` sorted by rank; where each rank was while it ran kept as the evidence for a
        timeout's account (a rank that ended or raised stays where it was last seen running)."""
        states.sort(key=lambda s: s.rank)
        self._seen.update(s.rank for s in states)
        for state in states:
            if not state.exited and not state.error and not state.unseen:
                self._running[state.rank] = state
            if state.exited and state.left:
                self._left.setdefault(state.rank, state)
        self.last_states = [self._running[rank] for rank in sorted(self._running)]
        return states

    def _account(self, states: list[RankState], now: float) -> Failure | None:
        """Node 0 (``accounts``): a rank's sampler noted torch's own process-group timeout: the
        account naming the rank that never arrived (kept in :attr:`account`); None: none."""
        if not self.accounts or self.account is not None:
            return None
        failed = timed_out_state(states)
        self.account = None if failed is None else account_of_timeout(
            failed, self.last_states, now, world_size=self.world_size, nnodes=self.nnodes, seen=self._seen)
        return self.account

    def account_now(self) -> Failure | None:
        """Node 0, once the node's command has failed: the account of torch's own timeout from its
        ranks' files read now and the other nodes' last summaries (a child that timed out ends
        within milliseconds, before the next look). None: no rank timed out, or no account."""
        if self.node_rank != 0 or not self.accounts:
            return None
        now = time.time()
        _reports, local = self._read_local(now)
        with self._evidence:
            if self.account is not None:
                return self.account
            return self._account(self._note_evidence(local + self._remote), now)

    def left_ranks(self) -> list[RankState]:
        """The ranks that left the job (their code ended with the process group up) as this node
        knows now: its own, read now, and on node 0 every node's from their last summaries."""
        now = time.time()
        _reports, local = self._read_local(now)
        with self._evidence:
            self._note_evidence(local + self._remote)
            return [self._left[rank] for rank in sorted(self._left)]

    def local_states(self) -> list[RankState]:
        """This node's ranks as their samplers report now."""
        return self._read_local(time.time())[1]

    def local_errors(self) -> dict[int, str]:
        """The errors this node's ranks' functions ended with, as their samplers noted them (now), by rank."""
        return {s.rank: s.error for s in self._read_local(time.time())[1] if s.error}

    def timed_out_here(self) -> bool:
        """Whether a rank of this node noted torch's own process-group timeout (its file, now)."""
        return timed_out_state(self._read_local(time.time())[1]) is not None

    def _read_local(self, now: float) -> tuple[dict[int, dict[str, Any]], list[RankState]]:
        """This node's believed sampler files, and each one's rank state as of ``now``."""
        reports = read_reports(self.folder, self.launched)
        for rank in self.launched.take_forged() if self.launched is not None else ():
            self._say(f"hang watch: rank{rank}.json named rank {rank}'s process but was not written by it (no "
                      f"valid seal of its own): not believed; rank {rank} is judged by its last own report")
        return reports, [self._summarise(rank, report, now) for rank, report in reports.items()]

    def _summarise(self, rank: int, report: dict[str, Any], now: float) -> RankState:
        pid = report.get("pid")
        stopped = process_stopped(pid)
        return summarise(report, node_rank=self.node_rank, host=self.host, now=now,
                         interval=self.settings.interval, exited=process_ended(pid),
                         stopped=stopped, dump=self._faulthandler_dump(rank),
                         outside_read=outside.STOPPED.stacks(pid) if stopped and isinstance(pid, int) else None)

    def _end(self, verdict: Verdict, reports: dict[int, dict[str, Any]], local: list[RankState]) -> None:
        """Report first (every stack to a file), end second (every node, exit HANG_EXIT). The other
        nodes publish their ranks' recent collectives as they send their stacks: the verdict says
        what the ranks' flight recorders show, read after that."""
        self._say(f"hang watch: hang: no rank made progress for {verdict.waited:.0f}s "
                  f"({verdict.limit.short()}); collecting every rank's stack, then stopping the job")
        path = self.write_all_stacks(reports)
        verdict = self.verdict = replace(verdict, calls=self.slow.recorded_calls(reports, local))
        headline = verdict.headline(self.settings)
        detail = verdict.detail()
        if path:
            detail.append(f"every rank's full stack: {path}")
        self._declared = Failure(
            node_rank=self.node_rank,
            rank=None, local_rank=None, returncode=None, secondary=False, time=time.time(),
            reason=headline, detail="\n".join(detail), exit_status=HANG_EXIT,
        )
        self._declare(self._declared)

    def _keep_stall_file(self, states: Sequence[RankState]) -> None:
        """Where the cluster asks (the local cluster): the current stall record (no ranks: none)."""
        if not self.stall_file:
            return
        found = stall(states, self.settings) or StallRecord(ranks=(), seconds=0)
        now = time.monotonic()
        if found == self._stall and now - self._stall_written < 5.0:
            return
        self._stall, self._stall_written = found, now
        try:
            write_new(self.stall_file, replace(found, time=time.time()).to_json())
        except OSError:
            self.stall_file = None

    def explain_timeout(self, failures: Sequence[Failure]) -> Failure | None:
        """torch's own process-group timeout fired first (in a rank that waited): name the rank
        that never arrived, from node 0's last look before the failure. None: nothing to add."""
        if self.node_rank != 0 or not self.last_states:
            return None
        failed = first_timed_out(failures)
        return None if failed is None else never_arrived(failed, self.last_states)

    def local_stacks(self, reports: dict[int, dict[str, Any]], why: str) -> str:
        """Every local rank's stack, every Python thread, as text (a silent rank: faulthandler's
        watchdog dump; a stopped one: py-spy's read from outside, else its last sample and why)."""
        parts = [f"{why}: node rank {self.node_rank} ({self.host}), {len(reports)} rank(s)"]
        now = time.time()
        for rank in sorted(reports):
            report = reports[rank]
            state = self._summarise(rank, report, now)
            header = (f"--- {state.name()}, pid {report.get('pid')}, inactive for "
                      f"{state.idle_for:.0f}s, CPU {state.cpu_share:.0%}"
                      + (f", waits in {state.wait}" if state.wait else "")
                      + (", stopped (T state)" if state.stopped else ""))
            dump = self._faulthandler_dump(rank)
            seen, _why = outside_stacks(report, outside.STOPPED.stacks(report["pid"]) if state.stopped else None)
            if seen is not None:
                parts.append(stack_text(seen, f"{header}: every thread as py-spy read it from outside "
                                              f"the stopped process"))
            elif dump and state.silent:
                parts.append(f"{header}, its sampler silent for {state.stale_for:.0f}s: every thread "
                             f"as faulthandler's watchdog wrote it (most recent call first):\n{dump}")
            else:
                parts.append(stack_text(report, header + (f": its last sample ({state.unread})"
                                                          if state.unread else "")))
            loader = self._loader_stack(report, state)
            if loader:
                parts.append(loader)
        return "\n".join(parts)

    def _loader_stack(self, report: dict[str, Any], state: RankState) -> str:
        """The stack of the DataLoader worker a rank waits for, from that worker's own report
        (``fork<pid>.json``), believed only from a child of the rank's process."""
        if state.wait != "DataLoader" or not state.loader_worker:
            return ""
        worker_id, pid = state.loader_worker
        forked = read_forked(self.folder, pid, report.get("pid")) if pid else None
        if forked is None:
            return ""
        header = f"    its DataLoader worker {worker_id} (pid {pid}):"
        return header + "\n" + "\n".join("    " + line for line in _traceback(forked.get("frames") or []))

    def _faulthandler_dump(self, rank: int) -> str:
        """What faulthandler's watchdog wrote for ``rank`` (its sampler missed a few samples)."""
        data = read_file(os.path.join(self.folder, f"rank{rank}.stack"))
        return data.decode("utf-8", "replace").strip() if data else ""

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


def write_stacks_file(folder: str | None, name: str, text: str) -> str | None:
    """Write ``text`` to a new file ``folder/name`` (``name-1``... when taken); its path, or None
    when the folder cannot be written. Created exclusively and never through a link: a link
    planted under that name is left alone. ``folder`` None: a new temporary folder."""
    try:
        folder = folder or tempfile.mkdtemp(prefix="paijob-stacks-")
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    stem, dot, ext = name.rpartition(".")
    for attempt in range(100):
        path = os.path.join(folder, name if attempt == 0 else f"{stem}-{attempt}{dot}{ext}")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o644)
        except FileExistsError:
            continue
        except OSError:
            return None
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        return os.path.abspath(path)
    return None


def read_forked(folder: str, pid: int, parent: object) -> dict[str, Any] | None:
    """``fork<pid>.json`` (:func:`~paijob.runtime.watch.worker.sampler.watch_forked_child`), when ``pid``
    is a live child of ``parent`` with the start time the file says; None otherwise."""
    data = read_file(os.path.join(folder, f"fork{pid}.json"))
    try:
        report = untrusted.loads(data) if data else None
    except ValueError:
        return None
    stat = procfs.read_stat(pid)
    if (not isinstance(report, dict) or stat is None or report.get("pid") != pid
            or stat.ppid != parent or report.get("start_time") != stat.start_time):
        return None
    return report


def stacks_folder(log_dir: str | None, environ: dict[str, str] | os._Environ[str]) -> str | None:
    """Where the stacks file goes: ``--log-dir``, else the job's output folder, else None (a
    new temporary folder); never the working directory, the user's checkout."""
    return log_dir or environ.get(contract.OUTPUT_DIR) or None
