"""Signalling the workers' process groups, written once for every launch mode.

Each worker (``per-gpu``) or the one command (``per-node``, ``dataparallel``) runs in a session and
process group of its own, so whatever it leaves behind (data-loader workers, shells) is stopped
with it. A group may be gone already, or belong to someone else by the time it is signalled;
neither is an error for a launcher that is ending its workers. The watch sends no signal
(:mod:`paijob.runtime.watch`): only the launchers import this.
"""

from __future__ import annotations

import os

from paijob.common import procfs


def signal_group(pgid: int, signum: int) -> None:
    """``signum`` to every process of group ``pgid``; a group that is gone is left alone."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies awaiting their reaper do not)."""
    return any(stat.pgrp == pgid and not stat.zombie for stat in procfs.processes())
