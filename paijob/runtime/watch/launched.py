"""Which sampler files the hang watch believes: those of the processes this launcher started.

A worker can write anything into the folder its sampler writes to (it runs the user's code). A
file is believed only when it is ``rank<N>.json`` for rank N, is no link, and names a process
(pid and start time, from ``/proc``) that this launcher started for that rank, or a child of
one (``mp.spawn``); a rank's process, once vouched for, is the only one believed for that rank.
A forged file (another rank's numbers, another pid, a pid reused) is not believed: the rank's
last believed report stands in for it, and ages (a rank whose own reports are overwritten looks
silent, and is named so): a forger can blame no one and hide no rank.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from paijob.common import procfs, untrusted

MAX_REPORT = 1 << 20  # bytes: a sampler file is a few kB; anything larger is not one
MAX_DEPTH = 8  # how far up the parent chain a child is looked for (mp.spawn: 1)


class Launched:
    """The processes a node started: ``ranks()`` gives global rank -> pid where the launcher
    knows it (``per-gpu``, ``dataparallel``), ``roots()`` the pids whose children may report
    too (``per-node``: the ``mp.spawn`` children of the one process)."""

    def __init__(self, ranks: Callable[[], Mapping[int, int]] | None = None,
                 roots: Callable[[], Iterable[int]] | None = None) -> None:
        self._ranks = ranks or dict
        self._roots = roots or tuple
        self._vouched: dict[int, tuple[int, int]] = {}  # rank -> (pid, start time)
        self.believed: dict[int, dict[str, Any]] = {}  # rank -> its last believed report

    def vouch(self, rank: int, report: Mapping[str, Any]) -> bool:
        """Whether ``report`` (the file of ``rank``) is its own sampler's."""
        pid, start = report.get("pid"), report.get("start_time")
        if report.get("rank") != rank or not isinstance(pid, int) or not isinstance(start, int):
            return False
        known = self._vouched.get(rank)
        if known is not None:
            return known == (pid, start)  # it may have ended since: still the same process
        stat = procfs.read_stat(pid)
        if stat is None or stat.zombie or stat.start_time != start or not self._ours(rank, stat):
            return False
        self._vouched[rank] = (pid, start)
        return True

    def _ours(self, rank: int, stat: procfs.ProcStat) -> bool:
        expected = self._ranks().get(rank)
        if expected is not None:
            return expected == stat.pid
        roots = set(self._roots())
        parent, depth = stat.ppid, 0
        while parent > 1 and depth < MAX_DEPTH:
            if parent in roots:
                return True
            found = procfs.read_stat(parent)
            parent, depth = (found.ppid if found else 0), depth + 1
        return False

    def pids(self) -> set[int]:
        """The processes vouched for so far (the only ones this watch may act on)."""
        return {pid for pid, _start in self._vouched.values()}


def read_file(path: str) -> bytes | None:
    """A file's bytes, read without following a link and at most :data:`MAX_REPORT`; None: no
    such file, a link, or too large."""
    return untrusted.read_regular(path, MAX_REPORT)


def read_reports(folder: str, launched: Launched | None) -> dict[int, dict[str, Any]]:
    """Every believed sampler file in ``folder`` (:class:`Launched`), by global rank.
    ``launched`` None: every well-formed file (a test's own folder)."""
    found: dict[int, dict[str, Any]] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return found
    for name in names:
        digits = name[len("rank"):-len(".json")] if name.startswith("rank") and name.endswith(".json") else ""
        if not digits.isdigit():
            continue
        rank = int(digits)
        report = _parse(read_file(os.path.join(folder, name)))
        if report is None or report.get("rank") != rank:
            report = None
        elif launched is not None and not launched.vouch(rank, report):
            report = None
        if launched is not None:
            if report is not None:
                launched.believed[rank] = report
            report = launched.believed.get(rank)
        if report is not None:
            found[rank] = report
    return found


def _parse(data: bytes | None) -> dict[str, Any] | None:
    try:
        report = untrusted.loads(data) if data is not None else None
    except ValueError:
        return None
    return report if isinstance(report, dict) else None
