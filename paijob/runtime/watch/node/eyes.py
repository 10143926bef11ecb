"""This node's eyes on its workers: their believed sampler reports, read once a tick into one look for both doctors.

Why on the node side: reading a worker's report is I/O with trust in it (whose process wrote it:
:mod:`~paijob.runtime.watch.node.believed`; whether that process is gone or stopped: ``/proc``; a stopped
one's stack read from outside by py-spy: :mod:`~paijob.runtime.watch.node.outside`). The doctors judge what
was read and know nothing of how: :class:`NodeTick` hands each a :class:`~paijob.runtime.watch.ranks.Look`
once a tick, and a doctor that must read now (an account once the workers failed) asks :meth:`Eyes.look`.
No torch import; no signal is ever sent to a worker.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from paijob.common import procfs
from paijob.runtime.watch.folder import read_stack_dump
from paijob.runtime.watch.lifecycle import Ticker
from paijob.runtime.watch.node import outside
from paijob.runtime.watch.node.believed import Launched, read_reports
from paijob.runtime.watch.ranks import Doctor, Look, summarise


class Eyes:
    """Reads this node's workers' folder into a :class:`Look` (only the reports :class:`Launched` believes;
    ``launched`` None: every well-formed file, a test's own folder)."""

    def __init__(self, folder: str, *, node_rank: int, host: str, interval: float,
                 launched: Launched | None, say: Callable[[str], None]) -> None:
        self.folder = folder
        self.node_rank = node_rank
        self.host = host
        self.interval = interval
        self.launched = launched
        self._say = say
        self._dropped_said = 0  # datagrams the watch's socket dropped, as last said

    def look(self, now: float | None = None) -> Look:
        """This node's ranks as their samplers report now."""
        now = time.time() if now is None else now
        reports = read_reports(self.folder, self.launched)
        for rank in self.launched.take_forged() if self.launched is not None else ():
            self._say(f"hang watch: rank{rank}.json named rank {rank}'s process but was not written by it (no "
                      f"valid seal of its own): not believed; rank {rank} is judged by its last own report")
        self._say_dropped()
        states, dumps, seen = [], {}, {}
        for rank, report in reports.items():
            pid = report.get("pid")
            stopped = process_stopped(pid)
            dump = read_stack_dump(self.folder, rank)
            read = outside.STOPPED.stacks(pid) if stopped and isinstance(pid, int) else None
            stacks, unread = outside_stacks(report, read)
            states.append(summarise(report, node_rank=self.node_rank, host=self.host, now=now,
                                    interval=self.interval, exited=process_ended(pid), stopped=stopped,
                                    dump=dump, seen=stacks, unread=unread))
            if dump:
                dumps[rank] = dump
            if stacks is not None:
                seen[rank] = stacks
        return Look(now, reports, states, dumps, seen)

    def _say_dropped(self) -> None:
        """Datagrams the watch's socket dropped (another user's, or in no form of ours: a flood) are said, the
        first and then each tenfold more: a flood costs the watch bounded work a look, and is not unsaid."""
        keys = self.launched.keys if self.launched is not None else None
        if keys is None or keys.dropped <= max(0, 10 * self._dropped_said - 1) or not keys.dropped:
            return
        self._dropped_said = keys.dropped
        others = sorted(keys.dropped_from)
        who = f" (from uid {', '.join(map(str, others[:4]))}: another user)" if others else ""
        self._say(f"watch: {keys.dropped} datagram(s) reached the watch's socket that were not this job's "
                  f"samplers'{who}; dropped")

    def sealed_by(self, rank: int, pid: int, data: bytes) -> bool:
        """Whether ``data`` was signed by ``rank``'s own process ``pid`` (True where no keys are held)."""
        return self.launched is None or self.launched.sealed_by(rank, pid, data)

    def close(self) -> None:
        """The node ends: the samplers' keys and their folder go (the stacks file, elsewhere, stays)."""
        if self.launched is not None and self.launched.keys is not None:
            self.launched.keys.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class NodeTick(Ticker):
    """Every ``interval`` seconds, one look at this node's workers, handed to every doctor in turn."""

    def __init__(self, eyes: Eyes, doctors: Sequence[Doctor], say: Callable[[str], None]) -> None:
        super().__init__("paijob-watch", eyes.interval, say)
        self.eyes = eyes
        self.doctors = list(doctors)

    def tick(self) -> None:
        look = self.eyes.look()
        for doctor in self.doctors:
            try:
                doctor.look(look)
            except Exception as error:  # noqa: BLE001 - one doctor's error never blinds the other
                self.failed(error)

    def finish(self) -> None:
        self.eyes.close()


def outside_stacks(report: Mapping[str, Any], read: outside.Read | None) -> tuple[dict[str, Any] | None, str]:
    """A stopped rank's stacks as py-spy read them from outside, in its sampler report's shape
    (``frames``, ``threads``), and ``""``; or None and why not (``""``: no read was made)."""
    if read is None:
        return None, ""
    main, others = read.split(int(report.get("pid") or 0), report.get("main_thread"))
    if main is None or not main.frames:
        return None, read.why or "py-spy did not find its main thread"
    return {"frames": main.frames,
            "threads": [{"name": t.name, "ident": t.ident, "frames": t.frames} for t in others]}, ""


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
