"""The slow-rank doctor's verdict, pure: every rank's recent evidence in, who holds the job back and
what it does out (no I/O, no clock, no threads).

Why: a slow job costs more than a hung one and says nothing: one rank (a throttled GPU, a starved
DataLoader, a slow mount) makes every other rank wait at every collective. Three pieces of evidence
the runtime already has, at no per-step cost, name it:

* **when each rank enqueued each collective**: torch's flight recorder keeps every collective's
  process group, sequence number and creation time (``time_created_ns``), on gloo and NCCL alike.
  For one collective, every rank that enqueued it before the last one waits for the last one;
  what it waits is ``last - own`` (on clocks made comparable by each node's offset to node 0).
  The time these waits cover (each second once: collectives enqueued together, as DDP's buckets, wait
  at once; :func:`covered`) over the collectives seen, divided by the time between them, is each
  rank's **wait share**. This holds on a GPU too, where a rank's Python thread never waits inside
  ``all_reduce`` (NCCL is asynchronous): the late rank still *enqueues* last.
* **what each rank's main thread does**, from the sampler's once-a-second stacks counted by
  activity (:mod:`paijob.runtime.watch.frames`): in the DataLoader, computing, host-side work.
  Where the recorder is missing (torch 2.4's gloo; no rank kept a collective), the wait share is read
  from these samples instead (the share of samples inside a collective, which holds only where collectives block the
  Python thread: gloo).
* **how long each rank's threads waited for a CPU**: the kernel's run delay (``schedstat``) summed
  over the rank's threads, per second of wall time, with their time on a CPU (:func:`cpu_shares`).

The rules (thresholds below, pinned in ``tests/runtime/watch/slow/test_slow_verdict.py``):

* **quiet** unless the ranks that wait do so for at least :data:`THRESHOLD` (10 %) of the wall
  time on average, the ranks they wait for (those waiting at most half as much as the most
  waiting rank) are at most half of the job, and (recorder) cause at least :data:`LAST_SHARE` of
  the waiting by arriving last (or :data:`DOMINANT_SHARE` and :data:`DOMINANCE` times any other rank:
  with many collectives a step, the others' arrival jitter spreads some waiting over every rank):
  noise that makes a different rank late each step names no one.
  The waiting a collective costs is counted against the rank that arrived last, so the collectives
  from before a rank became slow (a neighbour that arrived mid-run) weigh what they cost, little;
* **a victim is not late**: a rank that waits less only because it finishes each collective after
  the late one (gloo's ring passes the late rank's data on through it, so it enqueues the next
  collective later than the others) causes almost none of the waiting itself; a rank causing less
  than :data:`CAUSE_MIN` of it is counted among the waiting, never among the late;
* **a node**, not ranks, when the late ranks are every rank of one node (of several);
* **a phase, not a straggler**, when the waiting sits in a few long pauses (the top
  one collective in :data:`PHASE_EVERY`, rounded up, hold :data:`PHASE_WAIT` of it, each of them about
  :data:`PHASE_PAUSE` or longer): one rank's evaluation or checkpoint that the script does by design,
  reported as such, with how many pauses the window held; pauses under :data:`PHASE_MIN_SECONDS` are
  hiccups (a busy machine, a garbage collection), no line, unless :data:`PHASE_REPEATS` or more add up to
  :data:`PHASE_COST` of the wall time (a checkpoint every few steps: a cost the user pays in silence
  otherwise). Short
  waits concentrated in one collective of many, one a step (a rank late before the first of a GPU
  step's DDP buckets), are no phase: the straggler rules judge them;
* **start-up is not judged**: nothing before every rank's first training step (the caller passes
  only the evidence after it);
* **a CPU taken from outside**: when the late rank(s) wait for a CPU (runnable, not running: the
  kernel's run delay, ``schedstat``) at least :data:`CPU_WAIT` of the wall time, at least
  :data:`CPU_WAIT_MARGIN` more than the waiting ranks (their median), and, of the time they want a
  CPU, get one at most :data:`CPU_SERVED_RATIO` as often as they do, that is what they are said to
  do (a cgroup's CPU quota, other processes on their cores), instead of their sampled activity.
  The last rule keeps a rank that merely computes more on a busy machine (runnable more often, so
  waiting more in all, but served as often per moment it wants a CPU) computing; it is a ratio, not
  a margin, because a busy machine serves every rank's short-lived I/O threads late (seen: the
  waiting ranks served half the time they wanted a CPU on a quiet 2-core machine, a fifth with six
  jobs on it, the rank under a 1 % quota one time in a hundred).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from paijob.runtime.watch.frames import ACTIVITIES

THRESHOLD = 0.10  # the waiting ranks wait at least this share of the wall time for the late one(s)
LATE_FRACTION = 0.5  # a rank waiting at most this fraction of the most waiting rank's share is late
LAST_SHARE = 0.7  # the late ranks cause at least this share of the waiting (by arriving last)
TIE_SECONDS = 0.0009765625  # 2**-10 s, about 1 ms (exact in binary): ranks arriving within it of the last one arrive last together
CAUSE_MIN = 0.15  # a rank causing less of the waiting is never late (a victim downstream of the late one)
DOMINANT_SHARE = 0.4  # ... or cause at least this share, and
DOMINANCE = 3.0  # ... this many times what any other rank caused (many collectives a step: jitter spreads)
MIN_PAIRS = 5  # consecutive collectives (both seen on every rank) needed to read wait shares
MIN_SAMPLES = 10  # samples per rank needed to read wait shares from the samples
PHASE_EVERY = 20  # a phase: the top one collective in this many (rounded up: a checkpoint every 20 steps)...
PHASE_WAIT = 0.8  # ... hold this share of the waiting
PHASE_MIN_SECONDS = 5.0  # a shorter longest pause is a hiccup: no line at all...
PHASE_COST = 0.15  # ... unless the pauses add up to this share of the wall time (a checkpoint every N steps)
PHASE_REPEATS = 3  # ... in at least this many pauses (one is a hiccup, however long the window)
PHASE_PAUSE = 1.0  # a phase's pauses last at least this long (their median): shorter ones, one a step, are a
#                    straggler late before one of many collectives a step (a GPU step's DDP buckets)
CPU_WAIT = 0.25  # the late rank(s) wait for a CPU at least this share of the wall time,
CPU_WAIT_MARGIN = 0.15  # ... this much more than the waiting ranks (their median),
CPU_SERVED_RATIO = 0.5  # ... and get a CPU, when runnable, at most this fraction as often as they do
MIN_CPU_SECONDS = 5.0  # CPU shares need readings at least this far apart

_DOING = {
    "data": "in the DataLoader",
    "compute": "computing",
    "host": "in host-side work",
    "other": "in its own code",
    "collective": "inside collectives",
    "cpu": "waiting for a CPU (a CPU quota, or other processes on its cores)",
}


@dataclass(frozen=True)
class Call:
    """One collective as a rank's flight recorder kept it: ``enqueued`` on that rank's clock (s)."""

    group: str
    seq: int
    op: str
    enqueued: float


@dataclass(frozen=True)
class RankWindow:
    """One rank's evidence over the window judged: its collectives, its samples by activity
    (``lines``: activity -> ``[call, "train.py:72"]``, the line most seen for it), and its main
    thread's shares of the wall time on a CPU and waiting for one (None: unknown; :func:`cpu_shares`)."""

    rank: int
    node_rank: int
    host: str
    local_rank: int | None
    calls: tuple[Call, ...] = ()
    activity: Mapping[str, int] = field(default_factory=dict)
    lines: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    cpu_run: float | None = None
    cpu_wait: float | None = None

    def name(self) -> str:
        local = "" if self.local_rank is None else f", local rank {self.local_rank}"
        return f"rank {self.rank} (node rank {self.node_rank}, host {self.host}{local})"

    def share(self, activity: str) -> float:
        total = sum(self.activity.values())
        return self.activity.get(activity, 0) / total if total else 0.0

    def line(self, activity: str) -> str:
        found = self.lines.get(activity)
        return f"{found[0]}() at {found[1]}" if found and len(found) >= 2 else ""


@dataclass(frozen=True)
class Waits:
    """What the collectives seen on every rank say: each rank's wait share, how often each arrived
    last, the waiting it caused by arriving last (seconds, summed over the collectives: what the
    others waited for it there), and the waiting per collective (for phases); ``source``
    ``recorder`` or ``samples`` (then ``last`` and ``caused`` are empty: unknown)."""

    share: dict[int, float]
    last: dict[int, int]
    caused: dict[int, float]
    per_call: list[float]
    op: str
    source: str
    period: float = 0.0  # seconds the collectives judged covered


@dataclass(frozen=True)
class SlowVerdict:
    """The doctor's finding: ``kind`` ``rank`` (the late rank(s)), ``node`` (every rank of one node)
    or ``phase`` (one rank works alone in a few long pauses: by design, not a straggler)."""

    kind: str
    late: tuple[RankWindow, ...]
    waiting: tuple[RankWindow, ...]
    wait_share: float
    op: str
    activity: str
    activity_share: float
    others_share: float
    longest_pause: float = 0.0
    source: str = "recorder"
    figures: tuple[dict[str, Any], ...] = ()
    pauses: int = 0  # a phase: how many pauses the window held
    period: float = 0.0  # seconds the window covered

    @property
    def culprits(self) -> tuple[int, ...]:
        return tuple(w.rank for w in self.late)

    def line(self) -> str:
        """The one line printed (without the ``paijob-runtime:`` prefix)."""
        waiting = ranks_phrase(w.rank for w in self.waiting)
        where = self._waiting_where()
        doing = self._doing()
        if self.kind == "phase":
            (one,) = self.late
            rhythm = f", {self.pauses} pauses in {self.period:.0f}s" if self.pauses > 1 else ""
            return (f"one rank works alone: {one.name()} works {doing} while {waiting} wait"
                    f"{where}, up to {self.longest_pause:.0f}s at a time{rhythm} ({self.wait_share:.0%} of "
                    f"the time): a phase of the script (an evaluation or checkpoint on one rank), "
                    f"not counted as a straggler")
        if self.kind == "node":
            first = min(self.late, key=lambda w: w.rank)
            return (f"slow node: node rank {first.node_rank} (host {first.host}, "
                    f"{ranks_phrase(self.culprits)}) holds the job back: {waiting} wait for it "
                    f"{self.wait_share:.0%} of the time{where}; every rank of the node arrives late "
                    f"by about the same amount (the machine, not one rank); its ranks spend "
                    f"{self.activity_share:.0%} of their time {doing}, the others {self.others_share:.0%}")
        names = ", ".join(w.name() for w in self.late)
        verb = "holds" if len(self.late) == 1 else "hold"
        return (f"slow rank: {names} {verb} the job back: {waiting} wait for "
                f"{'it' if len(self.late) == 1 else 'them'} {self.wait_share:.0%} of the time{where}; "
                f"{'it spends' if len(self.late) == 1 else 'they spend'} {self.activity_share:.0%} "
                f"of {'its' if len(self.late) == 1 else 'their'} time {doing}, the others "
                f"{self.others_share:.0%}")

    def _waiting_where(self) -> str:
        lines = [w.line("collective") for w in self.waiting if w.line("collective")]
        line = max(set(lines), key=lines.count) if lines else ""
        at = line.partition(" at ")[2]
        if self.op and at:
            return f" in {self.op} at {at}"
        return f" in {self.op}" if self.op else (f" in {line}" if line else "")

    def _doing(self) -> str:
        lines = [w.line(self.activity) for w in self.late if w.line(self.activity)]
        line = f" ({lines[0]})" if lines else ""
        return f"{_DOING.get(self.activity, self.activity)}{line}"

    def record(self) -> dict[str, Any]:
        """The verdict as data (``summary.json``, status): the line, who, and every rank's figures."""
        return {"kind": self.kind, "line": self.line(), "ranks": list(self.culprits),
                "nodes": sorted({w.node_rank for w in self.late}), "wait_share": round(self.wait_share, 3),
                "activity": self.activity, "source": self.source, "figures": list(self.figures)}


def ranks_phrase(ranks: Iterable[int]) -> str:
    """``rank 3``, ``ranks 0-2``, ``ranks 0, 2-5``."""
    found = sorted(set(ranks))
    runs: list[str] = []
    start = prev = None
    for rank in [*found, None]:
        if rank is not None and prev is not None and rank == prev + 1:
            prev = rank
            continue
        if start is not None:
            runs.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = rank
    return ("rank " if len(found) == 1 else "ranks ") + ", ".join(runs)


def cpu_shares(before: Sequence[float] | None, after: Sequence[float] | None) -> tuple[float, float] | None:
    """A rank's seconds on a CPU and waiting for one per second of wall time, between two readings
    ``[on CPU, run delay, when]`` (seconds summed over its threads, as
    :func:`paijob.runtime.watch.evidence.cpu_times` reads them: either may pass 1.0 where several
    threads run or wait at once); None: a reading missing, less than :data:`MIN_CPU_SECONDS` apart,
    or counts that went back (another process, or a thread that ended)."""
    if before is None or after is None:
        return None
    elapsed, run, delay = after[2] - before[2], after[0] - before[0], after[1] - before[1]
    if elapsed < MIN_CPU_SECONDS or run < 0 or delay < 0:
        return None
    return run / elapsed, delay / elapsed


def waits_from_calls(windows: Sequence[RankWindow], offsets: Mapping[int, float],
                     since: float = -math.inf) -> Waits | None:
    """Wait shares from the collectives every rank's recorder kept (clocks moved by each node's
    ``offsets`` to node 0's); only collectives last enqueued after ``since``. None: fewer than
    :data:`MIN_PAIRS` consecutive collectives seen on every rank."""
    common, ops = _seen_on_every_rank(windows, offsets)
    ranks = [w.rank for w in windows]
    spans: dict[int, list[tuple[float, float]]] = {rank: [] for rank in ranks}  # each rank's waits, from/to
    last = dict.fromkeys(ranks, 0)
    caused = dict.fromkeys(ranks, 0.0)
    per_call: list[float] = []
    by_op: dict[str, float] = {}
    period = 0.0
    for (group, seq), seen in sorted(common.items()):
        before = common.get((group, seq - 1))
        arrived = max(seen.values())
        if before is None or arrived < since:
            continue
        period += max(0.0, arrived - max(before.values()))
        for rank, when in seen.items():
            spans[rank].append((when, arrived))
        call_wait = arrived - min(seen.values())  # the first to arrive waits longest
        last[max(seen, key=lambda r: seen[r])] += 1
        latest = [rank for rank, when in seen.items() if arrived - when <= TIE_SECONDS]
        for rank in latest:  # ranks arriving together (a slow node's) share what they cost
            caused[rank] += call_wait / len(latest)
        per_call.append(call_wait)
        by_op[ops[(group, seq)]] = by_op.get(ops[(group, seq)], 0.0) + call_wait
    if len(per_call) < MIN_PAIRS or period <= 0:
        return None
    share = {rank: min(1.0, covered(waits) / period) for rank, waits in spans.items()}
    return Waits(share, last, caused, per_call, max(by_op, key=lambda op: by_op[op]), "recorder", period)


def covered(spans: Iterable[tuple[float, float]]) -> float:
    """Seconds within at least one of ``spans`` (from, to). Why not their sum: collectives enqueued one after
    another without waiting for each (DDP's gradient buckets, every NCCL call) wait for the late rank at once;
    summed, a DDP job's 30 buckets a step read as the others waiting 100 % of the time for a rank 60 ms late."""
    total, end = 0.0, -math.inf
    for start, stop in sorted(spans):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def _seen_on_every_rank(windows: Sequence[RankWindow], offsets: Mapping[int, float]
                        ) -> tuple[dict[tuple[str, int], dict[int, float]], dict[tuple[str, int], str]]:
    """The collectives every rank kept, ``(group, seq)`` -> rank -> when it enqueued it (on node 0's
    clock), and each one's op."""
    times: dict[tuple[str, int], dict[int, float]] = {}
    ops: dict[tuple[str, int], str] = {}
    for window in windows:
        offset = offsets.get(window.node_rank, 0.0)
        for call in window.calls:
            times.setdefault((call.group, call.seq), {})[window.rank] = call.enqueued - offset
            ops[(call.group, call.seq)] = call.op
    return {key: seen for key, seen in times.items() if len(seen) == len(windows)}, ops


def waits_from_samples(windows: Sequence[RankWindow]) -> Waits | None:
    """Wait shares as the share of each rank's samples inside a collective (gloo, no recorder);
    None: fewer than :data:`MIN_SAMPLES` samples on some rank."""
    if any(sum(w.activity.values()) < MIN_SAMPLES for w in windows):
        return None
    return Waits({w.rank: w.share("collective") for w in windows}, {}, {}, [], "", "samples")


def judge_slow(windows: Sequence[RankWindow], offsets: Mapping[int, float] | None = None, *,
               since: float = -math.inf, threshold: float = THRESHOLD) -> SlowVerdict | None:
    """Who the others wait for, and what it does; None while the job is balanced (see the module)."""
    if not windows:
        return None
    waits = _waits(windows, offsets or {}, since)
    if waits is None:
        return None
    split = _late_and_waiting(windows, waits, threshold)
    if split is None:
        return None
    late, waiting, wait_share = split
    pauses = phase_pauses(late, waits, wait_share)
    if pauses is None or (not pauses and not caused_most(waits, late)):
        return None
    kind = "phase" if pauses else _kind(late, windows)
    activity, mine, others = _what_it_does(late, waiting)
    cpu = None if pauses else cpu_waiting(late, waiting)
    if cpu is not None:  # a share of its time in the line: threads waiting together count once at most
        activity, mine, others = "cpu", min(1.0, cpu[0]), min(1.0, cpu[1])
    return SlowVerdict(kind=kind, late=tuple(late), waiting=tuple(waiting), wait_share=wait_share,
                       op=waits.op, activity=activity, activity_share=mine, others_share=others,
                       longest_pause=max(waits.per_call, default=0.0), source=waits.source,
                       figures=tuple(figures(windows, waits)), pauses=pauses, period=waits.period)


def phase_pauses(late: Sequence[RankWindow], waits: Waits, wait_share: float) -> int | None:
    """How many pauses of one late rank make a phase (a checkpoint, an evaluation): the count; 0: not a
    phase; None: a hiccup not worth a line (a busy machine, a garbage collection): short, cheap or rare."""
    pauses = heavy_pauses(waits.per_call)
    if len(late) != 1 or not is_phase(waits.per_call) or statistics.median(pauses) < PHASE_PAUSE:
        return 0
    longest = max(waits.per_call, default=0.0)
    if longest < PHASE_MIN_SECONDS and (wait_share < PHASE_COST or len(pauses) < PHASE_REPEATS):
        return None
    return sum(w >= statistics.median(pauses) / 2 for w in waits.per_call)


def _waits(windows: Sequence[RankWindow], offsets: Mapping[int, float], since: float) -> Waits | None:
    """From the recorder; from the samples only where no rank kept a collective (no recorder). With
    a recorder, too few collectives (yet, or none in a long pause) is no verdict: the samples would
    see only the pause."""
    if any(w.calls for w in windows):
        return waits_from_calls(windows, offsets, since)
    return waits_from_samples(windows)


def _late_and_waiting(windows: Sequence[RankWindow], waits: Waits, threshold: float
                      ) -> tuple[list[RankWindow], list[RankWindow], float] | None:
    """The late ranks (waiting at most :data:`LATE_FRACTION` of the most waiting rank's share), the
    waiting ones and their mean wait share; None: nobody waits ``threshold``, or no small late set."""
    top = max(waits.share.values())
    late = [w for w in windows if waits.share[w.rank] <= top * LATE_FRACTION
            and caused_share(waits, [w]) >= CAUSE_MIN]
    waiting = [w for w in windows if w not in late]
    if not late or not waiting or len(late) > len(windows) // 2:
        return None
    wait_share = statistics.fmean(waits.share[w.rank] for w in waiting)
    return (late, waiting, wait_share) if wait_share >= threshold else None


def caused_most(waits: Waits, late: Sequence[RankWindow]) -> bool:
    """Whether ``late`` caused the waiting: at least :data:`LAST_SHARE` of it, or at least
    :data:`DOMINANT_SHARE` and :data:`DOMINANCE` times what any other rank caused. The second holds where
    a step has many collectives: the late rank causes the wait before the first of them, and the
    arrival jitter of the others (tens a step) adds waiting caused by every rank a little (seen: 41
    all-reduces a step, rank 3 60 ms late: it caused 60 %, each other rank at most 15 %). True where
    unknown (the samples, without a recorder, say nothing about who arrived last)."""
    total = sum(waits.caused.values())
    if not waits.caused or total <= 0:
        return True
    ranks = {w.rank for w in late}
    mine = sum(waits.caused.get(rank, 0.0) for rank in ranks) / total
    others = max((caused / total for rank, caused in waits.caused.items() if rank not in ranks), default=0.0)
    return mine >= LAST_SHARE or (mine >= DOMINANT_SHARE and mine >= DOMINANCE * others)


def caused_share(waits: Waits, ranks: Sequence[RankWindow]) -> float:
    """The share of all the waiting that ``ranks`` caused by arriving last; 1.0 where unknown (the
    samples, without a recorder, say nothing about who arrived last)."""
    total = sum(waits.caused.values())
    if not waits.caused or total <= 0:
        return 1.0
    return sum(waits.caused.get(w.rank, 0.0) for w in ranks) / total


def _kind(late: Sequence[RankWindow], windows: Sequence[RankWindow]) -> str:
    """``node`` (every rank of one node, of several, and more than one) or ``rank``."""
    nodes = {w.node_rank for w in late}  # every rank of one node is never all of a job: some wait
    if len(nodes) == 1:
        node = next(iter(nodes))
        if {w.rank for w in late} == {w.rank for w in windows if w.node_rank == node} and len(late) > 1:
            return "node"
    return "rank"


def heavy_pauses(per_call: Sequence[float]) -> list[float]:
    """The fewest largest waits that hold :data:`PHASE_WAIT` of all the waiting (at least one)."""
    total = sum(per_call)
    found: list[float] = []
    for wait in sorted(per_call, reverse=True):
        found.append(wait)
        if sum(found) >= PHASE_WAIT * total:
            break
    return found or [0.0]


def is_phase(per_call: Sequence[float]) -> bool:
    """Whether the waiting sits in a few long pauses: the top one collective in :data:`PHASE_EVERY`,
    rounded up, hold :data:`PHASE_WAIT` of it. Rounded up, because a window cut between two pauses holds
    one collective fewer than their rhythm: a checkpoint every 20 steps of one collective, 4 pauses in a
    window of 79 collectives, rounded down kept 3 pauses of 4 (75 %) and said a straggler (seen in CI)."""
    total = sum(per_call)
    if total <= 0:
        return False
    top = -(-len(per_call) // PHASE_EVERY)
    return sum(sorted(per_call, reverse=True)[:top]) >= PHASE_WAIT * total


def _what_it_does(late: Sequence[RankWindow], waiting: Sequence[RankWindow]) -> tuple[str, float, float]:
    """The activity the late ranks spend most more time in than the waiting ones (outside
    collectives), its share on the late ranks, and on the others."""
    found = [(statistics.fmean(w.share(a) for w in late) - statistics.fmean(w.share(a) for w in waiting), a)
             for a in ACTIVITIES if a != "collective"]
    _margin, activity = max(found, key=lambda item: item[0])  # a tie: the first, in ACTIVITIES' order
    return (activity, statistics.fmean(w.share(activity) for w in late),
            statistics.fmean(w.share(activity) for w in waiting))


def cpu_waiting(late: Sequence[RankWindow], waiting: Sequence[RankWindow]) -> tuple[float, float] | None:
    """The late ranks' run delay per second of wall time and the waiting ranks' (their median), when
    the late ones' CPU is taken from outside (the module's rules); None: it is not, or unknown (a
    late rank without readings, or no waiting rank with them)."""
    known = [w for w in waiting if w.cpu_wait is not None and w.cpu_run is not None]
    if not known or any(w.cpu_wait is None or w.cpu_run is None for w in late):
        return None
    mine = statistics.fmean(w.cpu_wait or 0.0 for w in late)
    others = statistics.median(w.cpu_wait or 0.0 for w in known)
    served = statistics.fmean(map(_served, late))
    taken = (mine >= CPU_WAIT and mine >= others + CPU_WAIT_MARGIN
             and served <= CPU_SERVED_RATIO * statistics.median(map(_served, known)))
    return (mine, others) if taken else None


def _served(window: RankWindow) -> float:
    """How often the rank gets a CPU while runnable: its CPU time over its runnable time (1.0: it
    never waited, or it was never runnable, as a stopped rank)."""
    run, wait = window.cpu_run or 0.0, window.cpu_wait or 0.0
    return run / (run + wait) if run + wait > 0 else 1.0


def figures(windows: Sequence[RankWindow], waits: Waits) -> list[dict[str, Any]]:
    """Every rank's figures as data: its wait share, how often it arrived last, its activities, and
    (where known) its share of the wall time waiting for a CPU."""
    return [{"rank": w.rank, "node_rank": w.node_rank, "host": w.host, "local_rank": w.local_rank,
             "wait_share": round(waits.share.get(w.rank, 0.0), 3), "last": waits.last.get(w.rank, 0),
             "activity": {a: round(w.share(a), 3) for a in ACTIVITIES if w.activity.get(a)},
             **({} if w.cpu_wait is None else {"cpu_wait": round(min(1.0, w.cpu_wait), 3)})}
            for w in windows]
