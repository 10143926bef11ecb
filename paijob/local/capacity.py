"""What a local job asks for against what this machine has.

The local cluster enforces no GPU, CPU or memory limit (every task is a plain
process), so a job written for 4 nodes x 8 GPUs runs as 32 CPU processes on a
laptop. It says so, once per job, in the first task's log.

What it can never host is refused at submit (``refusals``): every task of a
job starts at once, so more tasks than ``TASKS_PER_CORE`` per core, more ports
than ``MAX_PORTS``, or requests beyond ``OVERSUBSCRIPTION`` times this machine
(far past any job meant to run here, like ``instances: 100000``) would only
wedge the machine, and the job would wait forever.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

TASKS_PER_CORE = 32  # every task is at least one process, all started at once
MAX_PORTS = 4096  # loopback ports a job's tasks hold at once; other programs on the machine need theirs
OVERSUBSCRIPTION = 256  # CPUs, memory, GPUs asked in all, as a multiple of what this machine has


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
    """Lines for each resource the job's tasks ask for in total beyond ``machine``, then what would fit.

    ``requests``: one (instances, gpu, cpu, memoryMB) per task role. The advice
    names only the values that exceed, each at the most that fits this machine.
    """
    roles = [request for request in requests if request[0] > 0]
    tasks = sum(instances for instances, *_ in roles)
    gpu, cpu, memory = (sum(request[0] * request[column] for request in roles) for column in (1, 2, 3))
    lines: list[str] = []
    if gpu > machine.gpus:
        lines.append(f"the job asks for {gpu} GPU(s) in all ({_breakdown(roles, 1, 'gpu')}), this machine has "
                     f"{machine.gpus}: tasks share what there is"
                     + (" (none: training runs on CPU)" if machine.gpus == 0 else ""))
    if cpu > machine.cpus:
        lines.append(f"the job asks for {cpu} CPU core(s) in all ({_breakdown(roles, 2, 'cpu')}), "
                     f"this machine has {machine.cpus}")
    if machine.memory_mb and memory > machine.memory_mb:
        lines.append(f"the job asks for {memory} MB of memory in all ({_breakdown(roles, 3, 'memoryMB')}), "
                     f"this machine has {machine.memory_mb} MB")
    if lines:
        lines.append("the local cluster does not enforce GPUs, CPUs or memory: every task runs as a process "
                     f"here; to fit this machine: {_fitting(roles, tasks, (gpu, cpu, memory), machine)}")
    return lines


def _fitting(roles: list[tuple[int, int, int, int]], tasks: int, totals: tuple[int, int, int],
             machine: Machine) -> str:
    """The ``--set`` values (the built-in templates' names) that bring what exceeds within ``machine``."""
    fits = []
    if tasks > machine.cpus and len(roles) == 1:
        fits.append(f"instances={machine.cpus}")
        tasks = machine.cpus
    gpu, cpu, memory = totals
    if gpu > machine.gpus:
        fits.append(f"gpu={machine.gpus // tasks}")
    if cpu > machine.cpus:
        fits.append(f"cpu={max(1, machine.cpus // tasks)}")
    if machine.memory_mb and memory > machine.memory_mb:
        fits.append(f"memoryMB={max(256, machine.memory_mb // tasks // 256 * 256)}")
    advice = " ".join(f"--set {fit}" for fit in fits)
    if tasks > machine.cpus:
        advice += f", and at most {machine.cpus} task(s) in all"
    return advice + " (the built-in templates' values; in a job file, each role's instances and resourcePerInstance)"


def _breakdown(roles: list[tuple[int, int, int, int]], column: int, name: str) -> str:
    """``2 task(s) × cpu 2 + 1 task(s) × cpu 4``: where a total comes from."""
    return " + ".join(f"{request[0]} task(s) × {name} {request[column]}" for request in roles if request[column])


class Ask(NamedTuple):
    """What one task role asks for, per task."""

    role: str
    instances: int
    gpu: int
    cpu: int
    memory_mb: int
    ports: int


def refusals(asks: Iterable[Ask], machine: Machine) -> list[str]:
    """Why the local cluster can never run a job on ``machine`` (empty: it can).

    Each line says what the job asks for in all, where that comes from, and the most this machine allows.
    """
    asks = [ask for ask in asks if ask.instances > 0]

    def total(field: str) -> tuple[int, str]:
        parts = [(ask.instances, getattr(ask, field), ask.role) for ask in asks if getattr(ask, field)]
        per_task = " + ".join(f"{role}: {n} task(s) × {value}" for n, value, role in parts)
        return sum(n * value for n, value, _ in parts), per_task

    tasks = sum(ask.instances for ask in asks)
    lines = []
    if tasks > TASKS_PER_CORE * machine.cpus:
        lines.append(f"{tasks} task(s) ({', '.join(f'{ask.role}: {ask.instances}' for ask in asks)}), "
                     f"while this machine starts at most {TASKS_PER_CORE * machine.cpus} at once "
                     f"({TASKS_PER_CORE} per CPU core, {machine.cpus} core(s))")
    ports, where = total("ports")
    if ports > MAX_PORTS:
        lines.append(f"{ports} port(s) in all ({where}), at most {MAX_PORTS}")
    cpu, where = total("cpu")
    if cpu > OVERSUBSCRIPTION * machine.cpus:
        lines.append(f"{cpu} CPU core(s) in all ({where}), at most {OVERSUBSCRIPTION} × this machine's "
                     f"{machine.cpus} = {OVERSUBSCRIPTION * machine.cpus}")
    memory, where = total("memory_mb")
    if machine.memory_mb and memory > OVERSUBSCRIPTION * machine.memory_mb:
        lines.append(f"{memory} MB of memory in all ({where}), at most {OVERSUBSCRIPTION} × this machine's "
                     f"{machine.memory_mb} MB = {OVERSUBSCRIPTION * machine.memory_mb} MB")
    # without a GPU every GPU asked becomes a training process on the CPU: it counts against the cores
    room, unit = (machine.gpus, "GPU(s)") if machine.gpus else (machine.cpus, "CPU core(s), no GPU")
    gpu, where = total("gpu")
    if gpu > OVERSUBSCRIPTION * room:
        lines.append(f"{gpu} GPU(s) in all ({where}), at most {OVERSUBSCRIPTION} × this machine's "
                     f"{room} {unit} = {OVERSUBSCRIPTION * room}")
    return lines
