"""This worker process as the sampler reads it: its threads' CPU and I/O counters (``/proc/self``), its
start time, torch's count of its collectives, and whether it is still a rank of a process group.

No torch import: torch is read from ``sys.modules`` only when the script loaded it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_C10D_MODULE = "torch.distributed.distributed_c10d"


# Every process group the sampler has read, kept until the process ends. Were the sampler's
# thread to drop a group's last reference (the main thread destroyed the group while it read),
# the group's destructor would run here, joining gloo's threads with the GIL held: the deadlock
# paijob.runtime.recipes.distributed.leave_process_group describes. Kept, the group also outlives
# a user's DDP model freed after destroy_process_group (torch 2.4's reducer is another last
# owner). Workers end without finalisation (paijob.runtime.worker.finish): these go with them.
_READ_GROUPS: dict[int, object] = {}


def collectives_issued() -> int | None:
    """How many collectives this process has issued on all its process groups, from torch's own
    sequence numbers; None while ``torch.distributed`` is not loaded or has no group.

    Read from the sampler thread: the getter only reads a counter. A backend without sequence
    numbers (MPI, a third-party one) counts nothing; another torch release that lacks the
    calls: None, and the sampled stack alone tells completed collectives.
    """
    c10d = sys.modules.get(_C10D_MODULE)
    world = getattr(c10d, "_world", None)
    try:
        groups = list(world.pg_map) if world is not None else []
    except Exception:  # noqa: BLE001 - changed while read (a group being made), or another torch
        return None
    total: int | None = None
    for group in groups:
        _READ_GROUPS.setdefault(id(group), group)
        try:
            total = (total or 0) + int(group._get_sequence_number_for_group())  # noqa: SLF001
        except Exception:  # noqa: BLE001 - a backend without sequence numbers
            continue
    return total


def thread_cpu(tid: int) -> tuple[float | None, int]:
    """(CPU seconds (user + system) of thread ``tid`` of this process, bytes read); None
    without /proc."""
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as handle:
            text = handle.read()
        fields = text.rpartition(b")")[2].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS, len(text)
    except (OSError, IndexError, ValueError):
        return None, 0


def thread_run_delay(tid: int) -> tuple[float | None, int]:
    """(Seconds thread ``tid`` of this process has spent runnable but waiting for a CPU (the second field
    of its ``schedstat``), bytes read); None without it (a kernel without ``CONFIG_SCHED_INFO``).

    Why: a thread that computes on a crowded machine (more runnable threads than cores, or a CPU quota)
    gets a few percent of a CPU a second and would read as idle by its CPU time alone; it wants a CPU the
    whole time, and that is what busy means to the watch."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat", "rb") as handle:
            text = handle.read()
        return int(text.split()[1]) / 1e9, len(text)
    except (OSError, IndexError, ValueError):
        return None, 0


def thread_io(tid: int) -> tuple[int, int]:
    """(bytes thread ``tid`` of this process read and wrote through system calls (rchar + wchar of
    ``/proc/self/task/<tid>/io``), bytes of that file itself); (0, 0) without it.

    The main thread's, not the process's: other threads' traffic is no progress of the rank's (the
    rendezvous store that rank 0 hosts in ``per-node`` mode answers the other ranks all the time)."""
    try:
        with open(f"/proc/self/task/{tid}/io", "rb") as handle:
            text = handle.read()
    except OSError:
        return 0, 0
    total = 0
    for line in text.splitlines():
        if line.startswith((b"rchar:", b"wchar:")):
            total += int(line.split()[1])
    return total, len(text)


def process_io() -> int:
    """Bytes every thread of this process read and wrote through system calls (``/proc/self/io``
    rchar + wchar); 0 without it. gloo moves a collective's data in threads of its own."""
    try:
        with open("/proc/self/io", "rb") as handle:
            text = handle.read()
    except OSError:
        return 0
    return sum(int(line.split()[1]) for line in text.splitlines()
               if line.startswith((b"rchar:", b"wchar:")))


def leaving_frame(error: BaseException | None, target: str, function: str = "<module>") -> list[Any]:
    """Where a rank's code ended: the frame that raised ``SystemExit`` (``sys.exit`` is C: the
    traceback's last frame is its caller), else the end of ``function`` in ``target`` (line 0)."""
    tb = error.__traceback__ if error is not None else None
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return [target, 0, function]
    return [tb.tb_frame.f_code.co_filename, tb.tb_lineno, tb.tb_frame.f_code.co_name]


def in_process_group() -> bool:
    """Whether this process is still a rank of an initialised process group of more than one
    rank (torch already loaded: a script that never imported torch is in none)."""
    c10d = sys.modules.get(_C10D_MODULE)
    try:
        return bool(c10d is not None and c10d.is_initialized() and c10d.get_world_size() > 1)
    except Exception:  # noqa: BLE001 - a torch whose group is half torn down: not a rank any more
        return False


def own_start_time() -> int:
    """This process's start time in clock ticks since boot (``/proc/self/stat`` field 22); with
    the pid it names the process: a pid reused later has another. 0 without /proc."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            return int(handle.read().rpartition(b")")[2].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


try:
    _CLOCK_TICKS = float(os.sysconf("SC_CLK_TCK"))
except (AttributeError, ValueError, OSError):
    _CLOCK_TICKS = 100.0
