"""The slow-rank doctor on a node: every look, its ranks' evidence shared; on node 0, the verdict
(:mod:`paijob.runtime.watch.slow.verdict`) and when to say it.

Why fed by the node's tick (:class:`~paijob.runtime.watch.node.eyes.NodeTick` hands it each look, and it
acts every :data:`LOOK_EVERY` seconds): it reads the same believed sampler reports as the hang doctor, adds no
thread, and runs whether the hang doctor is on or not (``--hang-timeout 0``); the two know nothing of each
other. Each node
publishes its ranks' evidence (:mod:`paijob.runtime.watch.evidence`) under its own key of the
rendezvous store; node 0 gathers every node's, judges on the window since its previous look
(activities: the counts' growth over the last :data:`WINDOW_LOOKS` looks; collectives: those each
rank still keeps; time waiting for a CPU: over the last :data:`CPU_LOOKS` looks), and says:

* a straggler (a rank or a node) once it was found in :data:`PERSIST` looks in a row, then again
  every :data:`REPEAT` seconds while it lasts;
* a phase (one rank working alone in long pauses, by the script's design) at most every
  :data:`REPEAT` seconds, worded as such;
* nothing before every rank's first training step, nor about collectives enqueued before it;
* the worst straggler of the run once more as the node finishes (the final summary).

The other nodes' clocks are compared with node 0's through the store
(:mod:`paijob.runtime.watch.slow.clock`): node 0 answers at every tick, each other node asks once every
:data:`CLOCK_EVERY` looks once its ranks train (that look then waits up to 1.5 s for the answer) and publishes how far ahead it is with its
ranks; node 0 moves their enqueue times by that much.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from paijob.common import untrusted
from paijob.common.records import MAX_LINE_TEXT, SlowRecord, signed_text
from paijob.runtime.watch.evidence import SealedBy, checked, process_cpu, read_evidence
from paijob.runtime.watch.folder import SLOW_VERDICT, evidence_name, read_file, write_new
from paijob.runtime.watch.ranks import Look, RankState
from paijob.runtime.watch.slow import clock
from paijob.runtime.watch.slow.verdict import Call, RankWindow, SlowVerdict, cpu_shares, judge_slow

LOOK_EVERY = 10.0  # seconds between two looks
WINDOW_LOOKS = 6  # activities are counted over this many looks (a minute)
CPU_LOOKS = 2  # CPU shares over this many looks (20 s): within the PERSIST looks a straggler is late in a row
PERSIST = 3  # looks in a row that name the same rank(s) before a straggler is said
REPEAT = 180.0  # seconds between two lines about the same straggler (or phase)
PREFIX = "slow-rank doctor: "
CLOCK_EVERY = 6  # looks between two clock rounds of a node (a minute): clocks drift slowly
UNREADABLE_AFTER = 2  # looks before a rank's missing evidence is said (its first file comes 5 s into its run)

Publish = Callable[[int, str], None]
Gather = Callable[[int, int], list[str]]
MAX_CLOCK_AHEAD = 3600.0  # seconds: a node's clock said further off than this is not believed


class SlowDoctor:
    """One node's doctor: shares its ranks' evidence; node 0 judges and says (``say``)."""

    def __init__(self, *, node_rank: int, nnodes: int, world_size: int, folder: str,
                 say: Callable[[str], None], read: Callable[[str], bytes | None] = read_file,
                 publish: Publish | None = None, gather: Gather | None = None,
                 get: clock.Get | None = None, put: clock.Set | None = None,
                 every: float = LOOK_EVERY, repeat: float = REPEAT, record_file: str | None = None,
                 record_key: str | None = None, sealed_by: SealedBy | None = None) -> None:
        """``publish``/``gather``: a node's ranks' evidence over the store; ``get``/``put``: a key's
        text in the store (the clock rounds: :mod:`paijob.runtime.watch.slow.clock`); ``record_file``: where
        node 0 keeps its latest verdict as a record, where the cluster asks (``PAIJOB_SLOW_FILE``)."""
        # node 0's verdict: where the cluster asks, and beside the samplers' files for rank 0's summary
        ours = os.path.join(folder, SLOW_VERDICT)
        self.record_files = [f for f in (record_file, ours) if f] if node_rank == 0 else []
        self._record_key = record_key  # the task's: signs the records (the cluster checks the one it asked for)
        self._sealed_by = sealed_by  # whether a file was signed by a rank's own process (None: believed as read)
        self._unreadable: dict[int, float] = {}  # rank -> since when its evidence could not be read (said once)
        self.node_rank, self.nnodes, self.world_size = node_rank, nnodes, world_size
        self.folder = folder
        self._read, self._say = read, say
        self._publish, self._gather = publish, gather
        self.every, self.repeat = every, repeat
        self._looked = -float("inf")
        self._counts: deque[dict[int, dict[str, int]]] = deque(maxlen=WINDOW_LOOKS + 1)
        self._cpu: deque[dict[int, Any]] = deque(maxlen=CPU_LOOKS + 1)  # each rank's CPU reading, per look
        self.since: float | None = None  # node 0's time when every rank was first past its first step
        self._streak: tuple[tuple[int, ...], int] = ((), 0)
        self._said: dict[tuple[str, tuple[int, ...]], float] = {}
        self.verdict: SlowVerdict | None = None  # the latest verdict said
        self.worst: SlowVerdict | None = None  # the straggler said with the largest wait share
        self._errors: set[str] = set()
        self._get, self._put = get, put
        self.ahead = clock.Ahead()  # node k: how far its clock is ahead of node 0's
        self._round = 0
        self._looks = 0  # looks taken (the clock rounds come every CLOCK_EVERY of them)
        self._answered: dict[int, int] = {}  # node 0: the last clock round answered, per node

    def look(self, look: Look) -> None:
        """One tick of the node: act when a look is due. Never raises: the node's tick goes on
        whatever the doctor meets (an error is said once)."""
        now, reports, states = look.now, look.reports, look.states
        due = now - self._looked >= self.every
        if due:
            self._looked = now
        try:
            if self.node_rank == 0 and self.nnodes > 1 and self._get and self._put:
                clock.answer(self.nnodes, self._answered, self._get, self._put)  # every tick: fast answers
            if due:
                self._look(now, reports, states)
        except Exception as error:  # noqa: BLE001 - the doctor never stops the node's tick
            message = f"{PREFIX}{type(error).__name__}: {error}"
            if message not in self._errors:
                self._errors.add(message)
                self._say(message)

    def _look(self, now: float, reports: Mapping[int, Mapping[str, Any]], states: list[RankState]) -> None:
        mine = self._local(reports, states)
        self._looks += 1
        if self._clock_round_due(mine):
            self._round += 1
            found = clock.ask(self.node_rank, self._round, self._get, self._put)  # type: ignore[arg-type]
            if found is not None:
                self.ahead.add(*found)
            mine = [{**rank, "clock_ahead": self.ahead.estimate()} for rank in mine]
        if self.nnodes > 1 and self._publish is not None:
            self._publish(self.node_rank, json.dumps(mine))
        if self.node_rank != 0:
            return
        remote = [item for text in (self._gather(self.nnodes, self.node_rank) if self._gather else [])
                  for item in _parsed(text)]
        self.judge(now, mine + remote)

    def _clock_round_due(self, mine: list[dict[str, Any]]) -> bool:
        """Node k asks node 0's clock once every :data:`CLOCK_EVERY` looks, and only once its ranks are
        training: start-up (and a job that fails in its first seconds) pays nothing for it."""
        return (self.node_rank != 0 and self._get is not None and self._put is not None and bool(mine)
                and all(rank.get("first_progress") for rank in mine) and self._looks % CLOCK_EVERY == 1)

    def _local(self, reports: Mapping[int, Mapping[str, Any]], states: list[RankState]) -> list[dict[str, Any]]:
        """This node's ranks as published: who (from their rank states) and their evidence."""
        found = read_evidence(self.folder, reports, self._read, self._sealed_by, cpu_of=process_cpu)
        self._note_unreadable(reports, found)
        ahead = self.ahead.estimate() if self.node_rank else 0.0
        return [{"rank": s.rank, "node_rank": s.node_rank, "host": s.host, "local_rank": s.local_rank,
                 "exited": s.exited, "clock_ahead": ahead, **found[s.rank]} for s in states if s.rank in found]

    def _note_unreadable(self, reports: Mapping[int, Mapping[str, Any]], found: Mapping[int, Any]) -> None:
        """A believed rank whose evidence file cannot be read (missing after it had one, not a regular file,
        not signed by its own process) is said once, with since when: the doctor judges without it, and
        says so, instead of going silent."""
        now = time.time()
        for rank in reports:
            if rank in found:
                self._unreadable.pop(rank, None)
            elif rank not in self._unreadable and self._looks > UNREADABLE_AFTER:
                self._unreadable[rank] = now
                self._say(f"{PREFIX}rank {rank}'s evidence ({evidence_name(rank)}) cannot be read since "
                          f"{time.strftime('%H:%M:%S', time.localtime(now))} (not a regular file, or not written by "
                          f"rank {rank}'s own process): it is judged without it")

    def judge(self, now: float, ranks: list[dict[str, Any]]) -> SlowVerdict | None:
        """Node 0: the verdict on every rank's evidence, and the line when one is due."""
        live = [r for r in ranks if not r.get("exited")]
        if len(live) < max(2, self.world_size) or not all(r.get("first_progress") for r in live):
            self._streak = ((), 0)
            return None
        if self.since is None:
            self.since = now  # start-up is over: judge only from here on
        self._counts.append({r["rank"]: dict(r.get("activity") or {}) for r in live})
        self._cpu.append({r["rank"]: r.get("cpu") for r in live})
        offsets = {r["node_rank"]: float(r.get("clock_ahead") or 0.0) for r in live}
        verdict = judge_slow(self.windows(live), offsets, since=self.since)
        self._note(now, verdict)
        return verdict

    def windows(self, ranks: list[dict[str, Any]]) -> list[RankWindow]:
        """Each rank's window: its collectives, and its activities and CPU shares since the oldest look kept."""
        oldest = self._counts[0]
        oldest_cpu = self._cpu[0] if self._cpu else {}
        windows = []
        for r in sorted(ranks, key=lambda item: item["rank"]):
            before = oldest.get(r["rank"], {})
            activity = {a: n - before.get(a, 0) for a, n in (r.get("activity") or {}).items()}
            if len(self._counts) == 1 or sum(activity.values()) <= 0:
                activity = dict(r.get("activity") or {})
            calls = tuple(Call(str(c[0]), int(c[1]), str(c[2]), float(c[3])) for c in r.get("calls") or [])
            cpu = cpu_shares(oldest_cpu.get(r["rank"]), r.get("cpu")) or (None, None)
            windows.append(RankWindow(r["rank"], r["node_rank"], str(r["host"]), r.get("local_rank"),
                                      calls, activity, r.get("lines") or {}, *cpu))
        return windows

    def _note(self, now: float, verdict: SlowVerdict | None) -> None:
        """Say ``verdict`` when due: a straggler after :data:`PERSIST` looks, then every ``repeat``."""
        if verdict is None:
            self._streak = ((), 0)
            return
        key = (verdict.kind, verdict.culprits)
        culprits, count = self._streak
        self._streak = (verdict.culprits, count + 1 if culprits == verdict.culprits else 1)
        if verdict.kind != "phase" and self._streak[1] < PERSIST:
            return
        if now - self._said.get(key, -float("inf")) < self.repeat:
            return
        self._said[key] = now
        self.verdict = verdict
        if verdict.kind != "phase" and (self.worst is None or verdict.wait_share >= self.worst.wait_share):
            self.worst = verdict
        self._say(PREFIX + verdict.line())
        self._keep_record(verdict, final=False)

    def start(self) -> None:
        """Nothing to start: the node's tick hands it every look."""

    def stop(self) -> None:
        """No look after this one (the node's tick stops)."""

    def finish(self) -> None:
        """Node 0, as the node ends: the run's worst straggler once more (the final summary)."""
        if self.node_rank == 0 and self.worst is not None:
            self._say(f"{PREFIX}over the run: {self.worst.line()}")
            self._keep_record(self.worst, final=True)

    def _keep_record(self, verdict: SlowVerdict, *, final: bool) -> None:
        """The verdict as a record where the cluster asks (``paijob status``, the portal read it) and
        where rank 0's summary does (:data:`~paijob.runtime.watch.folder.SLOW_VERDICT`)."""
        if not self.record_files:
            return
        found = verdict.record()
        record = SlowRecord(kind=verdict.kind, line=found["line"][:MAX_LINE_TEXT], ranks=verdict.culprits,
                            figures=tuple(found["figures"]), final=final, time=time.time())
        for path in list(self.record_files):
            try:
                write_new(path, signed_text(record.as_json(), self._record_key))
            except OSError:
                self.record_files.remove(path)  # the folder went away: the doctor goes on, unrecorded there


def _parsed(text: str) -> list[dict[str, Any]]:
    """Another node's published ranks (its own evidence, already checked there; shapes checked again)."""
    try:
        value = untrusted.loads(text)
    except ValueError:
        return []
    if not isinstance(value, list):
        return []
    return [{"rank": r["rank"], "node_rank": r["node_rank"], "host": str(r.get("host"))[:64],
             "local_rank": r.get("local_rank") if isinstance(r.get("local_rank"), int) else None,
             "exited": r.get("exited") is True, "clock_ahead": _seconds(r.get("clock_ahead")), **checked(r)}
            for r in value if isinstance(r, dict) and isinstance(r.get("rank"), int)
            and isinstance(r.get("node_rank"), int)]


def _seconds(value: Any) -> float | None:
    """A node's clock offset as published: a finite number of seconds within :data:`MAX_CLOCK_AHEAD`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if abs(value) <= MAX_CLOCK_AHEAD else None
