"""The slow-rank doctor's evidence: what each worker counts and keeps, and how its node reads it back.

Why a file of its own: the doctor (:mod:`paijob.runtime.watch.slow.verdict`) needs, per rank, its
samples counted by activity and when it enqueued its recent collectives. The sampler
(:mod:`paijob.runtime.watch.worker.sampler`) already looks at the main thread once a second; here it only
counts that look (a dictionary increment), and every :data:`WRITE_EVERY` seconds reads torch's
flight recorder **without stack traces** (about 1 ms for 256 entries, on the sampler's thread, never
on the training step) and writes ``rank<N>.slow.json`` beside its ``rank<N>.json``. Nothing is
added to a training step: the recorder records every collective anyway (it is on for the hang
watch's mismatch account), and its ring buffer keeps the last :data:`~paijob.common.contract.FLIGHT_RECORDER_ENTRIES`.

The node's agent reads a rank's file only for a rank whose ``rank<N>.json`` it believes (the same
pid and start time): a job's own files are never trusted further than that. It reads the rank's threads'
CPU time and **run delay** itself (:func:`cpu_times`, the kernel's ``schedstat``: time spent runnable
but waiting for a CPU, which a cgroup's CPU quota or other processes on its cores make grow). Why the
agent, not the worker: a rank under a 1 % CPU quota is the one whose sampler writes late (in CI's busy slow
stage the throttled rank had no CPU figures in the doctor's window, and was named for "its own code"); the
agent's reading is as fresh as its look, and no rank can write it.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
import os
import pickle
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from paijob.common import untrusted
from paijob.runtime.watch.folder import MAX_EVIDENCE, evidence_path
from paijob.runtime.watch.frames import ACTIVITIES, activity_of, line_of

WRITE_EVERY = 5.0  # seconds between two writes of rank<N>.slow.json (and two reads of the recorder)
KEEP_SECONDS = 30.0  # a rank keeps the collectives enqueued in this many seconds before its newest,
MIN_KEPT_CALLS = 256  # and, whatever their age, its newest this many (the recorder's ring: a long pause's call)
MAX_KEPT_CALLS = 4096  # and at most this many of them (the newest), per file
MAX_LINES = 16  # distinct lines counted per activity (the rest are not named)
_C10D_C = "torch._C._distributed_c10d"


class Evidence:
    """One worker's counts (by activity, and the line most seen for each) and its recent collectives."""

    def __init__(self, folder: str, rank: int, *, is_library: Callable[[str], bool],
                 write: Callable[[str, str], None]) -> None:
        self.path = evidence_path(folder, rank)
        self.rank = rank
        self._is_library = functools.lru_cache(maxsize=4096)(is_library)  # a file's answer never changes
        self._write = write
        self.activity: dict[str, int] = {}
        # activity -> the call and the function making it -> line -> samples: a loop's lines are one place
        self.lines: dict[str, dict[str, dict[str, int]]] = {}
        self.calls: dict[tuple[str, int], list[Any]] = {}
        self.written_at = 0.0

    def count(self, frames: Sequence[Sequence[Any]], *, busy: bool, started: bool = True) -> str:
        """Count one sample of the main thread; its activity. Its line is counted only once the rank is past
        its first training step (``started``): the doctor names the line a rank spends its time on while it
        trains, and the seconds of imports before that (busy, one line) outweighed a loop's lines for minutes."""
        activity = activity_of(frames, busy=busy, is_library=self._is_library)
        self.activity[activity] = self.activity.get(activity, 0) + 1
        line = line_of(frames, activity, is_library=self._is_library) if started else None
        if line is not None:
            seen = self.lines.setdefault(activity, {})
            key = f"{line[0]}\t{line[2]}\t{line[1].rpartition(':')[0]}"  # the call, in which function of which file
            if key in seen or len(seen) < MAX_LINES:
                counted = seen.setdefault(key, {})
                if line[1] in counted or len(counted) < MAX_LINES:
                    counted[line[1]] = counted.get(line[1], 0) + 1
        return activity

    def note_calls(self, entries: Sequence[Mapping[str, Any]] | None) -> None:
        """Keep the collectives of the recorder's ``entries`` enqueued within :data:`KEEP_SECONDS` of the
        newest, and the newest :data:`MIN_KEPT_CALLS` whatever their age (at most :data:`MAX_KEPT_CALLS`).

        Why by time, not by count: node 0 compares its own ranks' files, read at its look, with another
        node's, published at that node's look up to a look (10 s) earlier. A job of hundreds of collectives a
        second fills the recorder's ring (``TORCH_FR_BUFFER_SIZE``, 256) in a second or two; what each read
        keeps is added to what earlier reads kept, so a rank's file holds the bursts of the last slots, and
        every rank (reading at the same wall-clock slots: :meth:`due`) holds the same bursts. Why the newest
        :data:`MIN_KEPT_CALLS` too: the collective a rank's long pause held (an evaluation of 30 s or more)
        was enqueued by the waiting ranks as long before their next ones; kept by time alone it left their
        files with the first collective after the pause, and the pause was never seen (:func:`kept_calls`)."""
        for entry in entries or ():
            if entry.get("is_p2p") or not isinstance(entry.get("time_created_ns"), int):
                continue
            key = (str(entry.get("pg_id", "")), int(entry.get("collective_seq_id") or 0))
            op = str(entry.get("profiling_name", "")).split(":")[-1]
            self.calls[key] = [key[0], key[1], op, entry["time_created_ns"] / 1e9]
        self.calls = {k: self.calls[k] for k in kept_calls(self.calls)}

    def due(self, now: float) -> bool:
        """Whether a write is due: once per :data:`WRITE_EVERY` seconds of the wall clock, the same
        slot on every rank (their recorders are then read within a sample of each other, so
        the collectives each keeps overlap)."""
        return int(now // WRITE_EVERY) != int(self.written_at // WRITE_EVERY)

    def write(self, now: float, report: Mapping[str, Any]) -> None:
        """Read the recorder and write the file (``report``: the sample just taken, for who and when)."""
        self.note_calls(recorded_entries())
        self.written_at = now
        lines = {activity: _most_seen(seen) for activity, seen in self.lines.items() if seen}
        self._write(self.path, json.dumps({
            "rank": self.rank, "pid": report.get("pid"), "start_time": report.get("start_time"),
            "time": now, "first_progress": report.get("first_progress"),
            "activity": self.activity, "lines": lines,
            "calls": sorted(self.calls.values(), key=lambda c: (c[0], c[1])),
        }, separators=(",", ":")))


def kept_calls(calls: Mapping[tuple[str, int], Sequence[Any]]) -> list[tuple[str, int]]:
    """The keys of ``calls`` (``(group, seq)`` -> ``[group, seq, op, enqueued]``) to keep, oldest first: those
    enqueued within :data:`KEEP_SECONDS` of the newest, or that ended then (the next call of their group was
    enqueued then), or among the newest :data:`MIN_KEPT_CALLS`; and the call before each (the doctor reads a
    collective's wait from the one before it); the newest :data:`MAX_KEPT_CALLS` of them.

    Why by its end too: the collective a rank's 30 s evaluation held was enqueued by the waiting ranks 30 s
    before it ended. Kept only among the newest 256, it left their files 256 collectives after the pause (ten
    seconds at 26 a second): two file writes, and a node-0 look every 10 s that had to fall between them,
    after node 1's look had published its ranks' (a busy machine's slow stage missed the phase)."""
    if not calls:
        return []
    by_age = sorted(calls, key=lambda k: calls[k][3])
    since = calls[by_age[-1]][3] - KEEP_SECONDS
    oldest = min(calls[by_age[-MIN_KEPT_CALLS:][0]][3], since)
    first = bisect.bisect_left(by_age, oldest, key=lambda k: calls[k][3])
    ended = [k for k in by_age[:first] if calls.get((k[0], k[1] + 1), (0, 0, 0, -math.inf))[3] >= since]
    kept = ended + by_age[first:]  # oldest first: a group's calls are numbered one after another
    before: dict[str, tuple[str, int]] = {}
    for group, seq in kept:
        before.setdefault(group, (group, seq - 1))
    keys = set(kept) | {key for key in before.values() if key in calls}
    return [k for k in by_age if k in keys][-MAX_KEPT_CALLS:]


def _most_seen(seen: Mapping[str, Mapping[str, int]]) -> list[Any]:
    """``[call, "train.py:72", samples]``: the call (and function) most seen, at its line most seen."""
    key = max(seen, key=lambda k: sum(seen[k].values()))
    at = max(seen[key], key=seen[key].__getitem__)
    return [key.split("\t")[0], at, sum(seen[key].values())]


MAX_TASKS_READ = 4096  # a process with more threads is not read (unknown): a look stays bounded whatever a job does


def cpu_times(tasks: str = "/proc/self/task") -> list[float] | None:
    """``[on CPU, run delay, when]`` in seconds: the CPU time and the time spent runnable but waiting
    for a CPU of every thread of the process (``tasks``: its ``/proc/<pid>/task`` folder), summed
    since each started (``schedstat``'s first two fields, ns), and ``time.monotonic()`` as read;
    None: no such files (a kernel without schedstat, not Linux, a process that ended), not their form,
    or more than :data:`MAX_TASKS_READ` threads.

    Why every thread, not the main one: the training is held up by whichever of its threads waits
    for a CPU. Under a CPU quota, gloo's I/O thread waits most (seen: 86 % of the wall time under a
    1 % quota, the main thread 30 %, because it mostly sleeps waiting for that I/O thread); on a GPU
    it is the main thread launching kernels. A thread that ended takes its counts with it: the sum
    may go back, and such a pair of readings is not used (see ``straggler.cpu_shares``)."""
    try:
        names = os.listdir(tasks)
    except OSError:
        return None
    if len(names) > MAX_TASKS_READ:
        return None
    run = delay = 0
    read = 0
    for name in names:
        try:
            with open(os.path.join(tasks, name, "schedstat"), "rb") as handle:
                fields = handle.read(256).split()
            run, delay, read = run + int(fields[0]), delay + int(fields[1]), read + 1
        except (OSError, ValueError, IndexError):
            continue  # the thread ended since the listing, or not schedstat's form
    if not read:
        return None
    return [run / 1e9, delay / 1e9, time.monotonic()]


def recorded_entries() -> list[dict[str, Any]] | None:
    """The flight recorder's entries of this process, without stack traces; None: torch is not
    loaded, this torch has no recorder for its backend, or it is off."""
    dump = getattr(sys.modules.get(_C10D_C), "_dump_fr_trace", None)
    if dump is None:
        return None
    try:
        entries = pickle.loads(dump(includeStackTraces=False)).get("entries")  # noqa: S301 - torch's own bytes
    except Exception:  # noqa: BLE001 - another torch: say nothing rather than fail a worker
        return None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else None


SealedBy = Callable[[int, int, bytes], bool]  # (rank, pid, data): signed by that rank's own process?


def process_cpu(pid: int) -> list[float] | None:
    """A process's :func:`cpu_times`, read from outside it (by the node's agent)."""
    return cpu_times(f"/proc/{pid}/task")


def read_evidence(folder: str, reports: Mapping[int, Mapping[str, Any]], read: Callable[[str], bytes | None],
                  sealed_by: SealedBy | None = None, cpu_of: Callable[[int], list[float] | None] | None = None
                  ) -> dict[int, dict[str, Any]]:
    """Each believed rank's evidence file (``reports``: the believed ``rank<N>.json`` by rank; a file is kept
    only with the same pid and start time, and where the watch holds the samplers' keys, signed by that very
    process: another rank swapping two ranks' files is not believed), well-formed parts only, with its
    process's CPU readings as ``cpu_of`` reads them now (:func:`process_cpu`; None: not read, for a reader
    that needs only the calls). A ``cpu`` the file carries is never believed."""
    found: dict[int, dict[str, Any]] = {}
    for rank, report in reports.items():
        data = read(evidence_path(folder, rank))
        pid = report.get("pid")
        if data is not None and sealed_by is not None and not (isinstance(pid, int) and sealed_by(rank, pid, data)):
            continue
        try:
            value = untrusted.loads(data[:MAX_EVIDENCE]) if data and len(data) <= MAX_EVIDENCE else None
        except ValueError:
            continue
        if (not isinstance(value, dict) or value.get("rank") != rank or value.get("pid") != report.get("pid")
                or value.get("start_time") != report.get("start_time")):
            continue
        found[rank] = {**checked(value), "cpu": cpu_of(pid) if cpu_of and isinstance(pid, int) else None}
    return found


def checked(value: Mapping[str, Any]) -> dict[str, Any]:
    """A rank's evidence with only the parts of the expected shape (numbers, short printable text)."""
    activity = _of(value, "activity", dict)
    lines = _of(value, "lines", dict)
    calls = _of(value, "calls", list)
    return {
        "first_progress": value.get("first_progress") is True,
        "activity": {a: n for a, n in activity.items() if a in ACTIVITIES and isinstance(n, int) and n >= 0},
        "lines": {a: [_text(v[0], 40), _text(v[1], 120)] for a, v in lines.items()
                  if a in ACTIVITIES and isinstance(v, list) and len(v) >= 2},
        "calls": [[_text(c[0], 16), c[1], _text(c[2], 40), float(c[3])] for c in calls[:MAX_KEPT_CALLS]
                  if isinstance(c, list) and len(c) == 4 and isinstance(c[1], int)
                  and isinstance(c[3], (int, float))],
        "cpu": _cpu(value.get("cpu")),
    }


def _cpu(value: Any) -> list[float] | None:
    """``[on CPU, run delay, when]`` as another node's agent published it (:func:`cpu_times`): three
    finite numbers, none negative; None otherwise (unknown)."""
    if not isinstance(value, list) or len(value) != 3:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
               for v in value):
        return None
    return [float(v) for v in value]


def _of(value: Mapping[str, Any], key: str, kind: type) -> Any:
    """``value[key]`` when it is a ``kind``, else an empty one."""
    found = value.get(key)
    return found if isinstance(found, kind) else kind()


def _text(value: Any, limit: int) -> str:
    return "".join(ch for ch in str(value) if ch.isprintable())[:limit]
