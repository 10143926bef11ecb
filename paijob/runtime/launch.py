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
    ``[rank<N>]:``. ``--local-rank-arg`` also passes ``--local_rank=<N>``
    (scripts written for ``torch.distributed.launch``).
``per-node``
    The command runs once per node with ``MASTER_ADDR``, ``MASTER_PORT``,
    ``NODE_RANK``, ``NNODES``, ``NPROC_PER_NODE``, ``WORLD_SIZE`` set, for
    scripts that ``mp.spawn`` their own workers.
``dataparallel``
    One process that sees every GPU (``nn.DataParallel``); one node only.

Before anything joins the rendezvous, non-zero nodes wait (``--master-timeout``)
for the master's port to accept connections. Exit codes: see
:mod:`paijob.runtime.exitcodes`. SIGTERM/SIGINT are passed on to the workers,
which get ``--grace-period`` seconds before SIGKILL; workers run in their own
process groups, which are killed whole.

This module imports torch only inside :func:`launch` for ``per-gpu`` mode.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from paijob.errors import PaijobError
from paijob.runtime import exitcodes
from paijob.runtime.env import DistEnv
from paijob.runtime.netif import socket_ifname_env
from paijob.runtime.probe import wait_for_master

log = logging.getLogger("paijob.runtime")

MODES = ("per-gpu", "per-node", "dataparallel")
LOCAL_RANK_MACRO = "${local_rank}"  # torch.distributed.elastic.utils.macros.Macros.local_rank
RECIPES_MODULE = "paijob.runtime.recipes"
APEX_COMPAT_MODULE = "paijob.runtime.apex_compat"
APEX_DETECT_MODULE = "paijob.runtime.apex_compat.detect"


class LaunchError(PaijobError):
    """The command to launch is wrong (script missing, bad mode for the layout...)."""


@dataclass(frozen=True)
class WorkerCommand:
    """What each worker runs, as arguments to ``python``.

    Exactly one of ``script``, ``module``, ``recipe`` is set.
    """

    script: str | None = None
    module: str | None = None
    recipe: str | None = None
    args: tuple[str, ...] = ()
    local_rank_arg: bool = False
    apex_compat: str = "auto"  # auto | on | off

    def python_args(self, local_rank: int | str = LOCAL_RANK_MACRO) -> tuple[str, ...]:
        """Arguments after ``python`` (``-u`` first: unbuffered, so prefixes line up)."""
        extra = (f"--local_rank={local_rank}",) if self.local_rank_arg else ()
        if self.recipe is not None:
            return ("-u", "-m", RECIPES_MODULE, self.recipe, *extra, *self.args)
        if self.module is not None:
            return ("-u", "-m", self.module, *extra, *self.args)
        assert self.script is not None
        if self.uses_apex_compat():
            return ("-u", "-m", APEX_COMPAT_MODULE, self.script, *extra, *self.args)
        return ("-u", self.script, *extra, *self.args)

    def uses_apex_compat(self) -> bool:
        if self.script is None or self.apex_compat == "off":
            return False
        if self.apex_compat == "on":
            return True
        if importlib.util.find_spec(APEX_DETECT_MODULE.rsplit(".", 1)[0]) is None:
            return False
        if importlib.util.find_spec(APEX_DETECT_MODULE) is None:
            return False
        detect = importlib.import_module(APEX_DETECT_MODULE)
        return bool(detect.script_needs_apex_compat(self.script))

    def check(self) -> None:
        if self.script is not None and not os.path.isfile(self.script):
            raise LaunchError(
                f"training script {self.script!r} not found (working directory "
                f"{os.getcwd()!r}); give a path relative to the task's working directory, "
                f"or use -m MODULE"
            )


def launch(
    dist: DistEnv,
    command: WorkerCommand,
    *,
    mode: str = "per-gpu",
    master_timeout: float = 600.0,
    grace_period: int = 30,
    heartbeat_timeout: float = 60.0,
    log_dir: str | None = None,
) -> int:
    """Run this node's workers to completion; return the process exit code."""
    if mode not in MODES:
        raise LaunchError(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    command.check()
    if mode == "dataparallel" and dist.nnodes > 1:
        raise LaunchError(
            f"--mode dataparallel runs one process on one node, but this job has "
            f"{dist.nnodes} nodes; use --mode per-gpu (DistributedDataParallel) or run the "
            f"role with instances: 1"
        )
    _announce(dist, mode)
    os.environ.update(socket_ifname_env(os.environ, say=_say))  # collectives bind to our address
    if dist.node_rank != 0 and dist.nnodes > 1:
        wait_for_master(
            dist.master_addr,
            dist.master_port,
            timeout=master_timeout,
            port_label=dist.port_label,
            log=_say,
        )
    if mode == "per-gpu":
        return _launch_per_gpu(dist, command, master_timeout, grace_period, heartbeat_timeout,
                               log_dir)
    env = dict(os.environ)
    env.update(dist.node_env())
    env.setdefault("PYTHONUNBUFFERED", "1")
    if mode == "dataparallel":
        env.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"})
    cmd = [sys.executable, *command.python_args(0)]
    return supervise(cmd, env, grace_period=grace_period, what=f"node rank {dist.node_rank}")


def _launch_per_gpu(
    dist: DistEnv,
    command: WorkerCommand,
    master_timeout: float,
    grace_period: int,
    heartbeat_timeout: float,
    log_dir: str | None,
) -> int:
    from paijob.runtime.agent import run_per_gpu  # imports torch

    for key, value in dist.node_env().items():
        os.environ[key] = value
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    # Each worker would otherwise start one intra-op thread per core, and N
    # workers on one node would fight over the cores (torchrun sets 1, which
    # starves CPU training instead). A user's own OMP_NUM_THREADS wins.
    cores = len(os.sched_getaffinity(0))
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, cores // dist.nproc_per_node)))
    run_id = dist.job_name or "paijob"
    code, root = run_per_gpu(
        master_addr=dist.master_addr,
        master_port=dist.master_port,
        node_rank=dist.node_rank,
        nnodes=dist.nnodes,
        nproc=dist.nproc_per_node,
        args=command.python_args(),
        run_id=run_id,
        rendezvous_timeout=int(max(1, master_timeout)),
        grace_period=grace_period,
        heartbeat_timeout=heartbeat_timeout,
        log_dir=log_dir,
        expected_ranks=[dist.rank(i) for i in range(dist.nproc_per_node)],
    )
    if root is not None:
        report_root_cause(root, dist.node_rank)
    return code


def report_root_cause(root: object, node_rank: int) -> None:
    headline = root.headline()  # type: ignore[attr-defined]
    where = "" if getattr(root, "node_rank", node_rank) == node_rank else " (on another node)"
    _say(f"error: {headline}{where}")
    tail = getattr(root, "tail", "")
    if tail:
        _say("root cause, last lines of that worker's stderr:")
        for line in tail.splitlines():
            print(f"  {line}", file=sys.stderr)
    sys.stderr.flush()


def supervise(
    cmd: Sequence[str],
    env: Mapping[str, str],
    *,
    grace_period: float,
    what: str = "worker",
) -> int:
    """Run one process in its own process group; forward SIGTERM/SIGINT/SIGHUP with a grace period."""
    proc = subprocess.Popen(list(cmd), env=dict(env), start_new_session=True)
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if not received:
            received.append(signum)
            _signal_group(proc.pid, signum)

    handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    previous = {sig: signal.signal(sig, forward) for sig in handled}
    try:
        deadline: float | None = None
        while True:
            try:
                returncode = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            if received and deadline is None:
                deadline = time.monotonic() + grace_period
            if deadline is not None and time.monotonic() >= deadline:
                _say(f"{what} did not stop within {grace_period:.0f}s; sending SIGKILL")
                _signal_group(proc.pid, signal.SIGKILL)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _signal_group(proc.pid, signal.SIGKILL)  # leftovers of the group: no orphans
    if received:
        return exitcodes.from_signal(received[0])
    if returncode != 0:
        _say(f"error: {what} failed with {exitcodes.describe_status(returncode)}")
    return exitcodes.from_worker_status(returncode)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _announce(dist: DistEnv, mode: str) -> None:
    where = "standalone" if not dist.openpai else f"role {dist.role} task {dist.task_index}"
    if mode == "dataparallel":
        _say(f"{where}: one process driving {dist.gpus} visible GPU(s), mode {mode}")
        return
    ranks = f"{dist.rank_offset}..{dist.rank_offset + dist.nproc_per_node - 1}"
    _say(
        f"{where}: node rank {dist.node_rank}/{dist.nnodes}, {dist.nproc_per_node} worker(s) "
        f"(ranks {ranks} of {dist.world_size}), master {dist.master_addr}:{dist.master_port}, "
        f"backend {dist.backend}, mode {mode}"
    )


def _say(message: str) -> None:
    print(f"paijob-runtime: {message}", file=sys.stderr, flush=True)
