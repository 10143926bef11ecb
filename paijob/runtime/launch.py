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
    :func:`local_rank_style`.
``per-node``
    The command runs once per node with ``MASTER_ADDR``, ``MASTER_PORT``,
    ``NODE_RANK``, ``NNODES``, ``NPROC_PER_NODE``, ``WORLD_SIZE`` set, for
    scripts that ``mp.spawn`` their own workers.
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
:mod:`paijob.runtime.exitcodes`. SIGTERM/SIGINT are passed on to the workers,
which get ``--grace-period`` seconds before SIGKILL; workers run in their own
process groups, which are killed whole.

This module imports torch only inside :func:`launch` for ``per-gpu`` mode.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.machinery import ModuleSpec, PathFinder

from paijob.errors import PaijobError
from paijob.runtime import exitcodes
from paijob.runtime.cwd_safe import module_args
from paijob.runtime.env import DistEnv, MpiSlot
from paijob.runtime.netif import socket_ifname_env
from paijob.runtime.portwatch import MasterPortWatch, read_abort_notice, serve_abort_notice
from paijob.runtime.probe import wait_for_master
from paijob.runtime.worker import LAUNCHER_PID_VAR, finish, run_as_main

log = logging.getLogger("paijob.runtime")

MODES = ("per-gpu", "per-node", "dataparallel", "horovod")
LOCAL_RANK_MACRO = "${local_rank}"  # torch.distributed.elastic.utils.macros.Macros.local_rank
LOCAL_RANK_STYLES = ("auto", "dash", "underscore")
WORKER_MODULE = "paijob.runtime.worker"
NOTICE_LINGER = 30.0  # per-node: how long node 0 answers the waiting nodes after a diagnosis
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
    local_rank_arg: str | None = None  # None (off) or one of LOCAL_RANK_STYLES
    apex_compat: str = "auto"  # auto | on | off

    def python_args(self, local_rank: int | str = LOCAL_RANK_MACRO) -> tuple[str, ...]:
        """Arguments after ``python``: ``-u`` (unbuffered), the worker wrapper, the target."""
        return ("-u", *module_args(WORKER_MODULE), *self.target_args(local_rank))

    def target_args(self, local_rank: int | str = LOCAL_RANK_MACRO) -> tuple[str, ...]:
        """What :mod:`paijob.runtime.worker` runs: ``SCRIPT ARGS`` or ``-m MODULE ARGS``."""
        extra: tuple[str, ...] = ()
        if self.local_rank_arg:
            style = local_rank_style(self.local_rank_arg, self.source_path())
            flag = "--local-rank" if style == "dash" else "--local_rank"
            extra = (f"{flag}={local_rank}",)
        if self.recipe is not None:
            return ("-m", RECIPES_MODULE, self.recipe, *extra, *self.args)
        if self.module is not None:
            return ("-m", self.module, *extra, *self.args)
        assert self.script is not None
        if self.uses_apex_compat():
            return ("-m", APEX_COMPAT_MODULE, self.script, *extra, *self.args)
        return (self.script, *extra, *self.args)

    def source_path(self) -> str | None:
        """The file whose source says how it parses options (the script, or the module's file)."""
        if self.script is not None:
            return self.script
        if self.module is not None:
            spec = find_module_spec(self.module)
            return spec.origin if spec is not None else None
        return None

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
                f"{os.getcwd()!r}); if it is on your machine, `--workdir .` (or `workdir: .` in "
                f"paijob.yaml) ships the folder it is in with the job; else give a path relative to "
                f"the task's working directory, or use -m MODULE"
            )
        if self.module is not None and find_module_spec(self.module) is None:
            raise LaunchError(
                f"module {self.module!r} not found (working directory {os.getcwd()!r}, "
                f"python {sys.executable}); check its spelling, that its package is installed "
                f"in this image, or run from the folder that contains it"
            )


def find_module_spec(name: str) -> ModuleSpec | None:
    """Where ``python -m name`` (run from here) would find ``name``, without importing it.

    ``importlib.util.find_spec`` imports the parent packages, which could run a
    user's package ``__init__`` (and initialise CUDA) in the launcher; this walks
    the packages' search paths instead, the working directory first as ``-m`` does.
    """
    parts = name.split(".")
    if not all(part.isidentifier() for part in parts):
        return None
    spec = PathFinder.find_spec(parts[0], [os.getcwd()])
    if spec is None:  # installed, builtin, frozen, or behind an import hook: no import needed
        try:
            spec = importlib.util.find_spec(parts[0])
        except (ImportError, ValueError):
            return None
    for index in range(1, len(parts)):
        if spec is None or spec.submodule_search_locations is None:
            return None
        spec = PathFinder.find_spec(".".join(parts[: index + 1]), spec.submodule_search_locations)
    return spec


_LOCAL_RANK_OPTION = re.compile(r"""["']--local([-_])rank["']""")


def local_rank_style(requested: str, source: str | None) -> str:
    """How ``--local-rank-arg`` spells the flag: ``dash`` (``--local-rank=N``) or ``underscore``.

    ``torch.distributed.launch`` passed ``--local_rank`` before torch 2.0 and
    ``--local-rank`` since; argparse treats them as different options. ``auto``
    reads the script's source: the spelling it declares (``"--local-rank"`` or
    ``"--local_rank"`` in quotes) wins, ``dash`` when it declares both, and
    ``underscore`` (the older, more common spelling) when the source names
    neither or cannot be read.
    """
    if requested not in LOCAL_RANK_STYLES:
        raise LaunchError(
            f"--local-rank-arg must be one of {', '.join(LOCAL_RANK_STYLES)}, got {requested!r}"
        )
    if requested != "auto":
        return requested
    try:
        with open(source or "", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return "underscore"
    found = {match.group(1) for match in _LOCAL_RANK_OPTION.finditer(text)}
    return "dash" if "-" in found else "underscore"


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
    _line_buffered_stdio()
    if mode not in MODES or mode == "horovod":
        raise LaunchError(f"--mode must be one of {', '.join(MODES[:3])}, got {mode!r}")
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
        _wait_for_master(dist, master_timeout, notice=mode == "per-node")
    if mode == "per-gpu":
        return _launch_per_gpu(dist, command, master_timeout, grace_period, heartbeat_timeout,
                               log_dir)
    env = dict(os.environ)
    env.update(dist.node_env())
    env.setdefault("PYTHONUNBUFFERED", "1")
    env[LAUNCHER_PID_VAR] = str(os.getpid())
    if mode == "dataparallel":
        env.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"})
    cmd = [sys.executable, *command.python_args(0)]
    watch = None
    if mode == "per-node" and dist.node_rank == 0 and dist.nnodes > 1 and _has_proc_net():
        watch = MasterPortWatch(dist.master_port, port_label=dist.port_label)
    code = supervise(cmd, env, grace_period=grace_period, what=f"node rank {dist.node_rank}",
                     watch=watch)
    if watch is not None and watch.diagnosis is not None:
        # The declared port is free (that is the diagnosis): tell the waiting nodes there.
        serve_abort_notice(dist.master_port, watch.diagnosis, peers=2 * (dist.nnodes - 1),
                           linger=min(master_timeout, NOTICE_LINGER))
    return code


def _has_proc_net() -> bool:
    return os.path.exists("/proc/net/tcp")


def _wait_for_master(dist: DistEnv, master_timeout: float, *, notice: bool) -> None:
    """Wait for node rank 0's port; in ``per-node`` mode, read node 0's notice if it sent one."""
    try:
        wait_for_master(
            dist.master_addr,
            dist.master_port,
            timeout=master_timeout,
            port_label=dist.port_label,
            log=_say,
        )
    except PaijobError:
        reason = read_abort_notice(dist.master_addr, dist.master_port) if notice else None
        if reason is None:
            raise
        raise LaunchError(f"node rank 0 stopped the job: {reason}") from None
    reason = read_abort_notice(dist.master_addr, dist.master_port) if notice else None
    if reason is not None:
        raise LaunchError(f"node rank 0 stopped the job: {reason}")


def launch_horovod(slot: MpiSlot, command: WorkerCommand) -> int:
    """Run the command in this process as MPI slot ``slot.rank``; never returns normally."""
    _line_buffered_stdio()
    command.check()
    if slot.local_rank == 0:
        _say(
            f"horovod slot: node {slot.node_rank}, ranks {slot.rank}..."
            f"{slot.rank + slot.local_size - 1} of {slot.size} on this node, backend "
            f"{slot.backend}"
        )
    os.environ.update(slot.worker_env())
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    target = command.target_args(slot.local_rank)
    if target[0] == "-m":
        finish(run_as_main(target[1], target[2:], module=True))
    finish(run_as_main(target[0], target[1:]))


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
    os.environ[LAUNCHER_PID_VAR] = str(os.getpid())  # the agent starts the workers itself
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
    watch: MasterPortWatch | None = None,
) -> int:
    """Run one process in its own process group; forward SIGTERM/SIGINT/SIGHUP with a grace period.

    ``watch`` is asked about once a second whether the command is misconfigured; when
    it says so, the command is stopped like on SIGTERM and the exit code is 2.
    """
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
            if watch is not None and not received and watch.diagnosis is None:
                watch.diagnosis = watch(proc.pid)
                if watch.diagnosis is not None:
                    _say(f"error: {watch.diagnosis}")
                    _signal_group(proc.pid, signal.SIGTERM)
                    deadline = time.monotonic() + grace_period
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
    if watch is not None and watch.diagnosis is not None:
        return exitcodes.CONFIG_ERROR
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


def _line_buffered_stdio() -> None:
    """Pass worker output on line by line even when our stdout is a pipe (as on OpenPAI).

    torch's log tailer writes each worker line to this process's ``sys.stdout`` /
    ``sys.stderr`` without flushing; a pipe is block-buffered unless
    ``PYTHONUNBUFFERED`` was set before this process started.
    """
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)


def _say(message: str) -> None:
    print(f"paijob-runtime: {message}", file=sys.stderr, flush=True)
