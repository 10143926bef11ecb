"""Which sampler files the hang watch believes: those of the processes this launcher started.

A worker can write anything into the folder its sampler writes to (it runs the user's code). A
file is believed only when it is ``rank<N>.json`` for rank N, is no link, and names a process
(pid and start time, from ``/proc``) that this launcher started for that rank, or a child of
one (``mp.spawn``); a rank's process, once vouched for, is the only one believed for that rank.
Where the watch holds its samplers' keys (:mod:`paijob.runtime.watch.seal`), a file must also carry
the MAC of that very process: another process of the job that copies a rank's pid and start time
into a file of its own (issue 46 row 8) is not believed either. A forged file (another rank's
numbers, another pid, a pid reused, a MAC it could not make) is not believed, nor a genuine report
older than the one believed (an old file put back): the rank's last believed report stands in for
it, and ages (a rank whose own reports are overwritten looks silent, and is named so): a forger can
blame no one and hide no rank.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from paijob.common import procfs, untrusted
from paijob.runtime.watch.folder import read_file, report_rank
from paijob.runtime.watch.seal import KeyBox

MAX_DEPTH = 8  # how far up the parent chain a child is looked for (mp.spawn: 1)


class Launched:
    """The processes a node started: ``ranks()`` gives global rank -> pid where the launcher
    knows it (``per-gpu``, ``dataparallel``), ``roots()`` the pids whose children may report
    too (``per-node``: the ``mp.spawn`` children of the one process)."""

    def __init__(self, ranks: Callable[[], Mapping[int, int]] | None = None,
                 roots: Callable[[], Iterable[int]] | None = None, *, keys: KeyBox | None = None) -> None:
        """``keys``: the samplers' keys (a report must carry its process's MAC); None: pid and start
        time alone (a system that cannot tell a datagram's sender, a test)."""
        self._ranks = ranks or dict
        self._roots = roots or tuple
        self.keys = keys
        self._vouched: dict[int, tuple[int, int]] = {}  # rank -> (pid, start time)
        self.believed: dict[int, dict[str, Any]] = {}  # rank -> its last believed report
        self.forged: set[int] = set()  # ranks whose file named their process without its MAC, not yet told
        self._told: set[int] = set()

    def vouch(self, rank: int, report: Mapping[str, Any], data: bytes = b"") -> bool:
        """Whether ``report`` (the file of ``rank``, ``data`` its bytes) is its own sampler's."""
        pid, start = report.get("pid"), report.get("start_time")
        if report.get("rank") != rank or not isinstance(pid, int) or not isinstance(start, int):
            return False
        known = self._vouched.get(rank)
        if known is None:
            stat = procfs.read_stat(pid)
            if stat is None or stat.zombie or stat.start_time != start or not self._ours(rank, stat):
                return False
        elif known != (pid, start):
            return False  # a rank's process, once vouched for (it may have ended since), is the only one
        if self.keys is not None and not self.keys.verify(rank, pid, start, data):
            self.forged.add(rank)  # its process's numbers, not its MAC
            return False
        self._vouched[rank] = (pid, start)
        return True

    def consider(self, rank: int, data: bytes | None) -> None:
        """Believe ``data`` as ``rank``'s report when it is its own sampler's (:meth:`vouch`) and not older
        than the one believed."""
        report = _parse(data)
        if (report is not None and report.get("rank") == rank and self.vouch(rank, report, data or b"")
                and not _older(report, self.believed.get(rank))):
            self.believed[rank] = report

    def sealed_by(self, rank: int, pid: int, data: bytes) -> bool:
        """Whether ``data`` (an answer or an error record of ``rank``'s) was signed by process ``pid`` with the
        key it sent as ``rank``'s; True where the watch holds no keys. The process may have ended (an error
        record is read once it has): its start time is the one vouched for, or the one its key came with."""
        if self.keys is None:
            return True
        known = self._vouched.get(rank)
        if known is not None and known[0] == pid:
            start: int | None = known[1]
        else:
            stat = procfs.read_stat(pid)
            start = stat.start_time if stat is not None and not stat.zombie else self.keys.start_of(pid)
        return start is not None and self.keys.verify(rank, pid, start, data)

    def take_forged(self) -> list[int]:
        """The ranks whose file failed its MAC since the last call (each told once a run)."""
        found = sorted(self.forged - self._told)
        self._told.update(found)
        self.forged.clear()
        return found

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


def read_reports(folder: str, launched: Launched | None) -> dict[int, dict[str, Any]]:
    """Every believed sampler report of ``folder`` (:class:`Launched`), by global rank: its file, or the
    copy its sampler sent the watch (:mod:`~paijob.runtime.watch.seal`), whichever is newer; a rank's
    last believed report stands while neither is (a file overwritten or removed by another process).
    ``launched`` None: every well-formed file (a test's own folder)."""
    found: dict[int, dict[str, Any]] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        names = []
    keys = launched.keys if launched is not None else None
    if keys is not None:
        keys.look()  # a sampler sends its key before its first report: filed before that is read
    for name in names:
        rank = report_rank(name)
        if rank is None:
            continue
        data = read_file(os.path.join(folder, name))
        if launched is not None:
            launched.consider(rank, data)
            continue
        report = _parse(data)
        if report is not None and report.get("rank") == rank:
            found[rank] = report
    if launched is None:
        return found
    for rank, data in keys.reports() if keys is not None else []:
        launched.consider(rank, data)
    return {rank: launched.believed[rank] for rank in sorted(launched.believed)}


def _older(report: Mapping[str, Any], believed: Mapping[str, Any] | None) -> bool:
    """Whether ``report`` was written before ``believed`` by the same process (an old file put back: its
    sample count, then its time, is behind)."""
    if believed is None or believed.get("pid") != report.get("pid"):
        return False
    try:
        return (int(report.get("seq") or 0), float(report.get("time") or 0.0)) < \
            (int(believed.get("seq") or 0), float(believed.get("time") or 0.0))
    except (TypeError, ValueError):
        return True


def _parse(data: bytes | None) -> dict[str, Any] | None:
    try:
        report = untrusted.loads(data) if data is not None else None
    except ValueError:
        return None
    return report if isinstance(report, dict) else None
