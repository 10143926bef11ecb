"""Start this node's share of the training world: ``paijob-runtime train``.

Modes (``--mode``):

``per-gpu`` (default)
    One worker process per GPU (``--nproc-per-node``), started and watched by
    torch's elastic agent (static rendezvous, node rank fixed, no restarts;
    see :mod:`paijob.runtime.agent`). Each worker gets ``RANK``,
    ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``,
    ``NODE_RANK``, ``NNODES``, ``NPROC_PER_NODE``, ``MASTER_ADDR``,
    ``MASTER_PORT``, ``PAIJOB_BACKEND`` and, unless set already,
    ``OMP_NUM_THREADS`` = cores / workers; its output lines are prefixed
    ``[rank<N>]:``. ``--local-rank-arg`` also passes the local rank as an
    argument (scripts written for ``torch.distributed.launch``): see
    :func:`paijob.runtime.config.local_rank_style`.
``per-node``
    The command runs once per node with ``MASTER_ADDR``, ``MASTER_PORT``,
    ``NODE_RANK``, ``NNODES``, ``NPROC_PER_NODE``, ``WORLD_SIZE`` set, for
    scripts that ``mp.spawn`` their own workers (each child gets the worker
    wrapper's sampler and clean exit: :mod:`paijob.runtime.watch.worker.spawn`).
``dataparallel``
    One process that sees every GPU (``nn.DataParallel``); one node only.
``horovod``
    This process is one slot started by ``mpirun`` / ``horovodrun``: its rank
    comes from the launcher's variables (see :func:`paijob.runtime.env.compute_mpi_slot`),
    it exports torchrun's names for it, and runs the script in this very process
    (no further launch), with the same precision and apex-compat handling.

Every worker runs through :mod:`paijob.runtime.worker` (dies with its
launcher, exits with the script's own code without finalisation races), and
output reaches this process's stdout/stderr line by line.

Before anything joins the rendezvous, non-zero nodes wait (``--master-timeout``)
for the master's port to accept connections. Exit codes: see
:mod:`paijob.common.exitcodes`. SIGTERM/SIGINT are passed on to the workers,
which get ``--grace-period`` seconds before SIGKILL; workers run in their own
process groups, which are killed whole.

This module imports torch only inside :func:`launch` for ``per-gpu`` mode (a node other than 0 starts that
import while it waits for the master: :func:`_importing_meanwhile`).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from paijob.common import exitcodes
from paijob.common.contract import worker_env
from paijob.common.records import FailureRecord
from paijob.errors import PaijobError
from paijob.runtime.config import LaunchConfig, LaunchError, WorkerCommand
from paijob.runtime.console import line_buffered_stdio, say, tell
from paijob.runtime.env import MpiSlot
from paijob.runtime.failure import Failure, report_root_cause, stopped_by_signal
from paijob.runtime.groups import signal_group
from paijob.runtime.netif import socket_ifname_env
from paijob.runtime.probe import wait_for_master
from paijob.runtime.watch.health import node_0_notice, process_health
from paijob.runtime.worker import finish, run_as_main

log = logging.getLogger("paijob.runtime")

INDUCTOR_CACHE_DIR = "TORCHINDUCTOR_CACHE_DIR"  # torch's name; default $TMPDIR/torchinductor_<user>


def launch(config: LaunchConfig) -> int:
    """Run this node's workers to completion; return the process exit code."""
    line_buffered_stdio()
    config.command.check()
    dist = config.dist
    _announce(config)
    if dist.node_rank != 0 and config.multi_node:
        with _importing_meanwhile("paijob.runtime.agent" if config.mode == "per-gpu" else None):
            _wait_for_master(config)
    with _watch_folder() as watch_dir:
        env = _worker_env(config, watch_dir)
        with _private_compile_cache(env):
            if config.mode == "per-gpu":
                return _launch_per_gpu(config, env)
            return _launch_one_process(config, env)


@contextlib.contextmanager
def _importing_meanwhile(module: str | None) -> Iterator[None]:
    """Import ``module`` on a thread while the block runs: the agent's torch import (2-3 s on a busy
    machine) then overlaps the wait for the master instead of following it, and every node but 0 starts
    its workers that much sooner. Joined before leaving, so the process never exits inside an import; an
    import that fails here is left for the real one to report."""
    if module is None:
        yield
        return

    def load() -> None:
        with contextlib.suppress(BaseException):
            importlib.import_module(module)

    thread = threading.Thread(target=load, name="paijob-import", daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()


@contextlib.contextmanager
def _watch_folder() -> Iterator[str]:
    """Where the workers' samplers write (both doctors read it, the hang doctor on or off); removed when
    the node ends."""
    folder = tempfile.mkdtemp(prefix="paijob-hang-")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _private_compile_cache(env: dict[str, str]) -> Iterator[None]:
    """torch's compile cache in a folder of this run's own, removed when the node ends.

    torch creates ``$TMPDIR/torchinductor_<user>`` in every worker (2.13 does it with the first
    optimizer, compiled or not) and never removes it: a laptop's TMPDIR keeps one per user forever. A
    ``TORCHINDUCTOR_CACHE_DIR`` the user set is theirs to keep (set it to reuse compiled kernels across
    runs).
    """
    if env.get(INDUCTOR_CACHE_DIR):
        yield
        return
    folder = tempfile.mkdtemp(prefix="paijob-runtime-inductor-")
    env[INDUCTOR_CACHE_DIR] = folder
    try:
        yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _worker_env(config: LaunchConfig, hang_dir: str | None) -> dict[str, str]:
    """What every worker of this node starts with (:func:`paijob.common.contract.worker_env`), the
    hang watch's folder and interval included: assembled here once, for every mode."""
    dist = config.dist
    base = dict(os.environ)
    base.update(socket_ifname_env(base, say=say))  # the workers' collectives bind to our address
    return worker_env(
        base,
        dist.node_env(),
        mode=config.mode,
        launcher_pid=os.getpid(),  # per-gpu: torch's agent starts the workers, but from here
        precision=config.precision,
        world_size=dist.world_size,
        workers=dist.nproc_per_node,
        cores=len(os.sched_getaffinity(0)),
        hang_dir=hang_dir,
        hang_interval=config.hang.interval,
    )


def _launch_one_process(config: LaunchConfig, env: Mapping[str, str]) -> int:
    """``per-node`` and ``dataparallel``: the command once on this node, supervised here, its
    health watched through one door (:class:`~paijob.runtime.watch.health.ProcessHealth`)."""
    dist = config.dist
    cmd = [sys.executable, *config.command.python_args(0)]
    watch_port = config.mode == "per-node" and dist.node_rank == 0 and config.multi_node and _has_proc_net()
    health = process_health(config, env, say, watch_port=watch_port)
    health.start()
    try:
        code = supervise(cmd, env, grace_period=config.grace_period, what=f"node rank {dist.node_rank}",
                         node_rank=dist.node_rank, misconfigured=health.misconfigured,
                         hung=health.verdict if health.watches_hangs else None,
                         started=health.started, explain=health.explain_failure)
    finally:
        health.stop()
    health.after_exit()  # the declared port is free now: node 0's notice goes there
    return code


def _has_proc_net() -> bool:
    return os.path.exists("/proc/net/tcp")


def _wait_for_master(config: LaunchConfig) -> None:
    """Wait for node rank 0's port; in ``per-node`` mode, read node 0's notice if it sent one."""
    dist = config.dist
    notice = config.mode == "per-node"
    try:
        wait_for_master(
            dist.master_addr,
            dist.master_port,
            timeout=config.master_timeout,
            port_label=dist.port_label,
            log=say,
        )
    except PaijobError:
        found = node_0_notice(dist.master_addr, dist.master_port) if notice else None
        if found is None:
            raise
        raise _notice_error(*found) from None
    found = node_0_notice(dist.master_addr, dist.master_port) if notice else None
    if found is not None:
        raise _notice_error(*found)


def _notice_error(reason: str, failed: bool) -> LaunchError:
    """Node 0's notice as this node's error: exit 1 where node 0's command failed (its account), 2 where
    node 0 stopped the job for what it diagnosed (a script on the wrong port)."""
    error = LaunchError(reason)
    if failed:
        error.exit_code = exitcodes.USER_FAILURE
    return error


def launch_horovod(slot: MpiSlot, command: WorkerCommand, precision: str | None = None) -> int:
    """Run the command in this process as MPI slot ``slot.rank``; never returns normally."""
    line_buffered_stdio()
    command.check()
    if slot.local_rank == 0:
        say(
            f"horovod slot: node {slot.node_rank}, ranks {slot.rank}..."
            f"{slot.rank + slot.local_size - 1} of {slot.size} on this node, backend "
            f"{slot.backend}"
        )
    # The worker is this very process: the contract goes into its own environment.
    os.environ.update(worker_env(os.environ, slot.worker_env(), mode="horovod", precision=precision))
    target = command.target_args(slot.local_rank)
    if target[0] == "-m":
        finish(run_as_main(target[1], target[2:], module=True))
    finish(run_as_main(target[0], target[1:]))


def _launch_per_gpu(config: LaunchConfig, env: Mapping[str, str]) -> int:
    from paijob.runtime.agent import run_per_gpu  # imports torch

    dist = config.dist
    code, root = run_per_gpu(config, env)
    if root is not None:
        report_root_cause(root, dist.node_rank)
    return code


def supervise(
    cmd: Sequence[str],
    env: Mapping[str, str],
    *,
    grace_period: float,
    what: str = "worker",
    misconfigured: Callable[[int], str | None] | None = None,
    hung: Callable[[], Failure | None] | None = None,
    started: Callable[[int], None] | None = None,
    explain: Callable[[], Failure | None] | None = None,
    node_rank: int = 0,
) -> int:
    """Run one process in its own process group; forward SIGTERM/SIGINT/SIGHUP with a grace period.

    ``misconfigured(pid)`` is asked about once a second what is wrong with the command (the master's
    port); when it says something, the command is stopped like on SIGTERM and the exit code is 2. ``hung()``
    is the hang watch's verdict: the command is stopped the same way, the verdict is the
    root cause and the exit code 124; it is asked once more when the command failed on its own,
    and then ``explain()``: an account of the failure (torch's own timeout: the rank that never
    arrived) that becomes the root cause. ``started(pid)`` learns the command's pid. A failure ends with
    the record of this node (``node_rank``) for the cluster (:func:`~paijob.runtime.console.tell`).
    """
    proc = subprocess.Popen(list(cmd), env=dict(env), start_new_session=True)
    if started is not None:
        started(proc.pid)
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if not received:
            received.append(signum)
            signal_group(proc.pid, signum)

    handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    previous = {sig: signal.signal(sig, forward) for sig in handled}
    verdicts: list[Failure] = []
    diagnoses: list[str] = []
    try:
        returncode = _wait(proc, received, misconfigured, grace_period=grace_period, what=what, hung=hung,
                           verdicts=verdicts, diagnoses=diagnoses)
        if returncode != 0 and hung is not None and not verdicts and not received:
            verdicts.extend(_late_account(hung, explain))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        signal_group(proc.pid, signal.SIGKILL)  # leftovers of the group: no orphans
    if received:
        say(stopped_by_signal(received[0], what))
        return exitcodes.from_signal(received[0])
    if diagnoses:
        tell(FailureRecord(node_rank, exitcodes.CONFIG_ERROR, diagnoses[0]))  # said when it was found
        return exitcodes.CONFIG_ERROR
    if verdicts:
        report_root_cause(verdicts[0], node_rank)
        return verdicts[0].exit_code
    code = exitcodes.from_worker_status(returncode)
    if returncode != 0:
        summary = f"{what} failed with {exitcodes.describe_status(returncode)}"
        say(f"error: {summary}")
        tell(FailureRecord(node_rank, code, summary, closing=True))  # sums up an account its command gave
    return code


def _late_account(hung: Callable[[], Failure | None],
                  explain: Callable[[], Failure | None] | None) -> list[Failure]:
    """The command failed on its own: a verdict on its way (it failed because of it: a peer
    stopped), else ``explain()``'s account of the failure; [] when neither has one."""
    late = hung()
    if late is None and explain is not None:
        late = explain()
    return [] if late is None else [late]


def _wait(proc: subprocess.Popen[bytes], received: list[int], misconfigured: Callable[[int], str | None] | None, *,
          grace_period: float, what: str, hung: Callable[[], Failure | None] | None = None,
          verdicts: list[Failure] | None = None, diagnoses: list[str] | None = None) -> int:
    """Wait for ``proc``; once a signal was ``received``, ``misconfigured`` diagnosed something (added to
    ``diagnoses``) or ``hung()`` gave the hang watch's verdict (added to ``verdicts``), give it
    ``grace_period`` seconds, then SIGKILL its group. Returns its ``returncode``."""
    deadline: float | None = None
    while True:
        try:
            return proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        if not received and _must_stop(proc.pid, misconfigured, hung, verdicts, diagnoses):
            signal_group(proc.pid, signal.SIGTERM)
            signal_group(proc.pid, signal.SIGCONT)  # a stopped process handles it once continued
            deadline = time.monotonic() + grace_period
        if received and deadline is None:
            deadline = time.monotonic() + grace_period
        if deadline is not None and time.monotonic() >= deadline:
            say(f"{what} did not stop within {grace_period:.0f}s; sending SIGKILL")
            signal_group(proc.pid, signal.SIGKILL)


def _must_stop(pid: int, misconfigured: Callable[[int], str | None] | None,
               hung: Callable[[], Failure | None] | None, verdicts: list[Failure] | None,
               diagnoses: list[str] | None) -> bool:
    """Whether ``misconfigured(pid)`` has just diagnosed something (added to ``diagnoses``) or ``hung()``
    just gave a verdict (added to ``verdicts``): each is asked until it answers, and answers once."""
    if misconfigured is not None and diagnoses is not None and not diagnoses:
        diagnosis = misconfigured(pid)
        if diagnosis is not None:
            diagnoses.append(diagnosis)
            say(f"error: {diagnosis}")
            return True
    if hung is not None and verdicts is not None and not verdicts:
        verdict = hung()
        if verdict is not None:
            verdicts.append(verdict)
            return True
    return False


def _announce(config: LaunchConfig) -> None:
    dist, mode = config.dist, config.mode
    where = "standalone" if not dist.openpai else f"role {dist.role} task {dist.task_index}"
    if mode == "dataparallel":
        say(f"{where}: one process driving {dist.gpus} visible GPU(s), mode {mode}")
        return
    ranks = f"{dist.rank_offset}..{dist.rank_offset + dist.nproc_per_node - 1}"
    say(
        f"{where}: node rank {dist.node_rank}/{dist.nnodes}, {dist.nproc_per_node} worker(s) "
        f"(ranks {ranks} of {dist.world_size}), master {config.master}, "
        f"backend {dist.backend}, mode {mode}"
    )
