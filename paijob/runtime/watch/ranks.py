"""The rank state both doctors read, and the look that carries it: one per node tick, the same for both.

Why here, at the watch's root: the hang doctor (:mod:`paijob.runtime.watch.hang`) and the slow-rank doctor
(:mod:`paijob.runtime.watch.slow`) judge the same ranks from the same believed sampler reports, and know
nothing of each other. The node's eyes (:mod:`paijob.runtime.watch.node.eyes`) read this node's workers once a
tick into a :class:`Look` and hand it to every :class:`Doctor`; a rank's report becomes a :class:`RankState`
here (:func:`summarise`: durations, not clock times). Another node's states reach node 0 through the store
and are read back as strictly as a record (:meth:`RankState.from_published`): exact fields and types,
bounded, never ``cls(**value)``.

Pure: no I/O, no clock (``now`` is given), no torch.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from paijob.runtime.watch.folder import MAX_ERROR
from paijob.runtime.watch.frames import is_library

STALE_AFTER = 10.0  # a sampler silent this long (seconds, at least 5 intervals) cannot run


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
    inside: str | None = None  # its own code runs under this call's frames (all_gather_object, backward): not a wait
    peer: int | None = None  # the global rank its blocking send or recv waits for (``wait``: send or recv)

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


MAX_THREADS = 8  # other threads of a rank kept in its summary

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


def summarise(report: Mapping[str, Any], *, node_rank: int, host: str, now: float,
              interval: float, exited: bool = False, stopped: bool = False,
              dump: str = "", seen: Mapping[str, Any] | None = None, unread: str = "") -> RankState:
    """A worker's sampler file as the rank state the doctors judge (durations, not clock times).

    ``dump``: faulthandler's watchdog dump of the rank; ``seen``: a stopped rank's stacks as py-spy
    read them from outside (:func:`main_and_threads` says which is believed); a read that found
    nothing says why (``unread``), and the rank stays at its last sample's line."""
    age = max(0.0, now - float(report.get("time", now)))
    stale_for = max(0.0, age - interval)
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
        inside=_inside(report.get("inside")),
        peer=_peer(report.get("peer")),
    )


def _inside(value: object) -> str | None:
    """The call a rank's own code runs inside, as its sampler said it (a short name), or None."""
    return value[:MAX_TEXT] if isinstance(value, str) and value else None


def _peer(value: object) -> int | None:
    """The other rank of a blocking send or recv, as its sampler said it (a global rank), or None."""
    return value if isinstance(value, int) and _rank_ok(value) else None


def _frame(value: Any) -> bool:
    """Whether ``value`` is one ``[file, line, function]`` frame as a sampler writes it."""
    return (isinstance(value, list) and len(value) == 3 and isinstance(value[0], str)
            and isinstance(value[1], int) and isinstance(value[2], str))


def main_and_threads(report: Mapping[str, Any], dump: str,
                     seen: Mapping[str, Any] | None) -> tuple[list[list[Any]], list[list[Any]], str]:
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


@dataclass(frozen=True)
class Look:
    """One look at this node's workers, at ``now`` (``time.time()``): their believed sampler reports by
    global rank, each one's :class:`RankState`, faulthandler's dumps of the silent ones and the stacks
    py-spy read of the stopped ones (by rank; for a stacks file)."""

    now: float
    reports: Mapping[int, Mapping[str, Any]]
    states: list[RankState]
    dumps: Mapping[int, str] = field(default_factory=dict)
    seen: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)


class Doctor(Protocol):
    """What the node's tick hands each look to (the hang and the slow-rank doctors)."""

    def look(self, look: Look) -> None:
        """Act on ``look`` (never raises: a doctor's error is said once, the tick goes on)."""
        ...


# -- another node's ranks, as published through the store ----------------------------------------------

MAX_TEXT = 512  # characters of a file name, a function, a host or a wait's name in a published state
MAX_FRAMES = 8  # frames of one stack in a published state (report_frames keeps 5)
_FLAGS = ("busy", "collective", "first_progress", "exited", "c10d", "stopped", "dumped", "outside", "left", "unseen")
_SECONDS = ("idle_for", "cpu_share", "stale_for", "longest_wait", "quiet_for")


def _text_ok(value: object, limit: int = MAX_TEXT) -> bool:
    return isinstance(value, str) and len(value) <= limit


def _frames_ok(value: object) -> bool:
    return isinstance(value, list) and len(value) <= MAX_FRAMES and all(
        _frame(f) and len(f[0]) <= MAX_TEXT and len(f[2]) <= MAX_TEXT for f in value)


def _rank_ok(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 20


def _number_ok(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and 0 <= value < 1e9)


def _loader_ok(value: object) -> bool:
    return value is None or (isinstance(value, list) and len(value) == 2 and _rank_ok(value[0])
                             and (value[1] is None or _rank_ok(value[1])))


def _threads_ok(value: object) -> bool:
    return isinstance(value, list) and len(value) <= MAX_THREADS and all(
        isinstance(t, list) and len(t) == 2 and _text_ok(t[0]) and _frames_ok(t[1]) for t in value)


# each field of a published rank state, and what its value must be
_PUBLISHED: dict[str, Any] = {
    "rank": _rank_ok, "node_rank": _rank_ok, "local_rank": lambda v: v is None or _rank_ok(v),
    "host": _text_ok, "wait": lambda v: v is None or _text_ok(v), "inside": lambda v: v is None or _text_ok(v),
    "where": _frames_ok, "peer": lambda v: v is None or _rank_ok(v),
    "error": lambda v: _text_ok(v, MAX_ERROR), "unread": _text_ok, "threads": _threads_ok,
    "loader_worker": _loader_ok,
    **{flag: lambda v: isinstance(v, bool) for flag in _FLAGS},
    **{seconds: _number_ok for seconds in _SECONDS},
}


def _published_problem(item: Mapping[str, Any]) -> str | None:
    """The first field of one published rank state that is not of its form (its keys already checked);
    None: none."""
    return next((name for name, ok in _PUBLISHED.items() if not ok(item[name])), None)


def from_published(item: object) -> RankState:
    """One rank state as another node published it (:func:`dataclasses.asdict` of a :class:`RankState`),
    checked field by field; :class:`ValueError` for anything else (an unknown or missing field, a wrong
    type, a text or a list past its bound)."""
    names = {f.name for f in fields(RankState)}
    if not isinstance(item, dict) or set(item) != names:
        raise ValueError("not a published rank state")
    problem = _published_problem(item)
    if problem:
        raise ValueError(f"published rank state: {problem}")
    return RankState(**item)
