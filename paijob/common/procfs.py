"""Linux ``/proc``: which processes exist, and each one's state, parent, group and session.

One reader for ``/proc/<pid>/stat`` (proc(5)), shared by the runtime (the
agent's wait for a process group, the master-port watch's session scan) and
the local cluster (its tracker's process tree, its server liveness check).
The standard library only, no torch: this ships into task images, and the
local cluster imports it too.

The ``comm`` field (2nd) is the executable name in parentheses and may itself
hold spaces or ``)``; the fields after the *last* ``)`` are fixed. A process
can vanish between listing ``/proc`` and reading its ``stat``: that, an
unreadable or a malformed file all read as "no such process" (None).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

ZOMBIE = "Z"


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` paijob reads (proc(5) fields 1, 3-6 and 22)."""

    pid: int
    state: str  # R running, S sleeping, D disk sleep, Z zombie, T stopped, ...
    ppid: int
    pgrp: int
    session: int
    start_time: int = 0  # clock ticks after boot: with the pid, it names one process (a pid is reused)

    @property
    def stopped(self) -> bool:
        """Stopped by a signal (SIGSTOP, SIGTSTP) or a tracer: it runs no code until continued."""
        return self.state in ("T", "t")

    @property
    def zombie(self) -> bool:
        """Exited and waiting for its parent to reap it: dead for every purpose of ours."""
        return self.state == ZOMBIE


def parse_stat(pid: int, text: bytes) -> ProcStat | None:
    """``/proc/<pid>/stat``'s content as a :class:`ProcStat`; None when it is malformed."""
    fields = text.rpartition(b")")[2].split()
    if len(fields) < 4:
        return None
    try:
        start = int(fields[19]) if len(fields) > 19 else 0
        return ProcStat(pid, fields[0].decode("ascii", "replace"), int(fields[1]), int(fields[2]),
                        int(fields[3]), start)
    except ValueError:
        return None


def read_stat(pid: int) -> ProcStat | None:
    """Process ``pid``'s stat; None when it does not exist (or /proc cannot tell)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    return parse_stat(pid, text)


def pids() -> list[int]:
    """Every process id visible in ``/proc`` (none where there is no /proc)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    return [int(entry) for entry in entries if entry.isdigit()]


def processes() -> Iterator[ProcStat]:
    """The stat of every visible process (those that vanish meanwhile are skipped)."""
    for pid in pids():
        stat = read_stat(pid)
        if stat is not None:
            yield stat
