"""What a local job asks for against what this machine has.

The local cluster enforces no GPU, CPU or memory limit (every task is a plain
process), so a job written for 4 nodes x 8 GPUs runs as 32 CPU processes on a
laptop. It says so, once per job, in the first task's log.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Machine:
    gpus: int
    cpus: int
    memory_mb: int


def this_machine(gpus: int) -> Machine:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError, AttributeError):
        memory_mb = 0
    return Machine(gpus, cpus, memory_mb)


def warnings(requests: Iterable[tuple[int, int, int, int]], machine: Machine) -> list[str]:
    """Lines for each resource the job's tasks ask for in total beyond ``machine``.

    ``requests``: one (instances, gpu, cpu, memoryMB) per task role.
    """
    gpu = cpu = memory = 0
    for instances, role_gpu, role_cpu, role_memory in requests:
        gpu += instances * role_gpu
        cpu += instances * role_cpu
        memory += instances * role_memory
    lines = []
    if gpu > machine.gpus:
        lines.append(f"the job asks for {gpu} GPU(s) in all, this machine has {machine.gpus}: tasks share "
                     "what there is" + (" (none: training runs on CPU)" if machine.gpus == 0 else ""))
    if cpu > machine.cpus:
        lines.append(f"the job asks for {cpu} CPU core(s) in all, this machine has {machine.cpus}")
    if machine.memory_mb and memory > machine.memory_mb:
        lines.append(f"the job asks for {memory} MB of memory in all, this machine has {machine.memory_mb} MB")
    if lines:
        lines.append("the local cluster does not enforce GPUs, CPUs or memory: every task runs as a process "
                     "here; size the job for this machine (e.g. --set instances=2 --set gpu=0)")
    return lines
