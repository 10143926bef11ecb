"""What one node launches, decided once: :class:`WorkerCommand` and :class:`LaunchConfig`.

Like torch's ``launcher/api.py`` ``LaunchConfig``, one frozen object carries
everything the launcher, torch's elastic agent (:mod:`paijob.runtime.agent`)
and the node watch (:mod:`paijob.runtime.watch.node.liveness`) need: the layout
(:class:`~paijob.runtime.env.DistEnv`), the command, the mode and the limits.
``paijob-runtime train`` parses its options once
(:mod:`paijob.common.options`), builds one config, and hands it down; nothing
below re-derives a value or passes the layout on field by field.

No torch import here.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import re
import sys
from dataclasses import dataclass
from importlib.machinery import ModuleSpec, PathFinder

from paijob.common import contract
from paijob.common.cwd_safe import module_args
from paijob.common.options import (
    DEFAULT_HANG_FIRST_TIMEOUT,
    DEFAULT_HANG_HARD_LIMIT,
    DEFAULT_HANG_TIMEOUT,
    HANG_CALIBRATION_FLOOR,
    HANG_CALIBRATION_MULTIPLE,
    LOCAL_RANK_STYLES,
    MAX_RESTARTS,
    MODES,
)
from paijob.errors import PaijobError
from paijob.runtime.env import DistEnv

LOCAL_RANK_MACRO = "${local_rank}"  # torch.distributed.elastic.utils.macros.Macros.local_rank
WORKER_MODULE = "paijob.runtime.worker"
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


MIN_HANG_TIMEOUT = 3.0  # seconds: below a few of the sampler's 1 s intervals a timeout judges noise


@dataclass(frozen=True)
class HangSettings:
    """The hang watch's limits in seconds (:mod:`paijob.runtime.watch.hang.doctor`); ``timeout`` 0: off.

    ``first_timeout`` applies until every rank has completed a collective (data loading,
    ``torch.compile``); a busy straggler is ended at ``hard_limit`` times the timeout.
    ``calibrate`` (``timeout`` is the default, not the user's): a stall with every rank inside
    a ``torch.distributed`` call is judged on ``calibration_multiple`` times the longest such
    wait seen, at least ``calibration_floor`` (:func:`paijob.runtime.watch.hang.doctor.calibrated_limit`).
    """

    timeout: float = DEFAULT_HANG_TIMEOUT
    first_timeout: float = DEFAULT_HANG_FIRST_TIMEOUT
    hard_limit: float = DEFAULT_HANG_HARD_LIMIT
    interval: float = 1.0
    calibrate: bool = False
    calibration_multiple: float = HANG_CALIBRATION_MULTIPLE
    calibration_floor: float = HANG_CALIBRATION_FLOOR
    source: str = "the default"  # how ``timeout`` was chosen: --hang-timeout, $PAIJOB_HANG_TIMEOUT

    @property
    def enabled(self) -> bool:
        return self.timeout > 0

    def check(self) -> None:
        if not math.isfinite(self.timeout) or self.timeout < 0 or 0 < self.timeout < MIN_HANG_TIMEOUT:
            raise LaunchError(f"--hang-timeout must be 0 (off) or at least {MIN_HANG_TIMEOUT:g} "
                              f"seconds (a few of the watch's 1 s samples), got {self.timeout:g}")
        _positive_seconds(self.first_timeout, "--hang-first-timeout")
        if self.first_timeout < MIN_HANG_TIMEOUT:
            raise LaunchError(f"--hang-first-timeout must be at least {MIN_HANG_TIMEOUT:g} seconds, "
                              f"got {self.first_timeout:g}")
        if not math.isfinite(self.hard_limit) or self.hard_limit < 1:
            raise LaunchError(f"--hang-hard-limit must be a multiple of --hang-timeout of at "
                              f"least 1, got {self.hard_limit}")

    def described(self) -> str:
        """The line a node logs as its watch starts: the timeouts in force and how they were chosen."""
        if not self.enabled:
            return "watching for hangs: off (--hang-timeout 0)"
        first = max(self.first_timeout, self.timeout)
        line = (f"watching for hangs: --hang-timeout {self.timeout:g}s ({self.source}"
                + (f"; --hang-timeout N or ${contract.HANG_TIMEOUT} changes it, 0 turns the watch off"
                   if self.source == "the default" else "")
                + f"); until a rank's first training step, --hang-first-timeout {first:g}s; a rank busy "
                  f"while the others wait is ended at {self.hard_limit:g} x the timeout")
        if self.calibrate:
            line += (f"; a stall with every rank inside a torch.distributed call is judged sooner, "
                     f"at {self.calibration_multiple:g} x the longest such wait seen (at least "
                     f"{self.calibration_floor:g}s)")
        return line


@dataclass(frozen=True)
class LaunchConfig:
    """One node's launch: where it sits, what it runs, how long it waits (checked on creation).

    ``master_timeout`` bounds every wait for the other nodes (the master's port, the
    rendezvous); ``grace_period`` is what workers get between SIGTERM and SIGKILL;
    ``heartbeat_timeout`` is how long a silent peer counts as alive; ``log_dir`` keeps
    each worker's output (None: the runtime's own copies are removed at exit);
    ``verbose`` lets torch's elastic agent log as it likes; ``hang`` are the hang watch's limits;
    ``max_restarts``: restarts of every node's workers inside the attempt (``per-gpu``); ``min_nodes``: the
    nodes that go on without a lost node other than 0 (None: every node, none may be lost).
    """

    dist: DistEnv
    command: WorkerCommand
    mode: str = "per-gpu"
    master_timeout: float = 600.0
    grace_period: int = 30
    heartbeat_timeout: float = 60.0
    log_dir: str | None = None
    verbose: bool = False
    precision: str | None = None  # --precision, passed to every worker (paijob.common.contract)
    hang: HangSettings = HangSettings()
    max_restarts: int = 0
    min_nodes: int | None = None

    def __post_init__(self) -> None:
        self.hang.check()
        self._check_recovery()
        launchable = [mode for mode in MODES if mode != "horovod"]
        if self.mode not in launchable:
            raise LaunchError(f"--mode must be one of {', '.join(launchable)}, got {self.mode!r}")
        _positive_seconds(self.master_timeout, "--master-timeout")
        _positive_seconds(self.heartbeat_timeout, "--heartbeat-timeout")
        if self.grace_period < 0:
            raise LaunchError(f"--grace-period must be >= 0, got {self.grace_period}")
        if self.mode == "dataparallel" and self.dist.nnodes > 1:
            raise LaunchError(
                f"--mode dataparallel runs one process on one node, but this job has "
                f"{self.dist.nnodes} nodes; use --mode per-gpu (DistributedDataParallel) or run "
                f"the role with instances: 1"
            )

    def _check_recovery(self) -> None:
        """``--max-restarts`` and ``--min-nodes`` where they can be honoured, else one line (exit 2)."""
        if not 0 <= self.max_restarts <= MAX_RESTARTS:
            raise LaunchError(f"--max-restarts must be from 0 to {MAX_RESTARTS}, got {self.max_restarts}")
        if self.max_restarts and self.mode != "per-gpu":
            raise LaunchError(
                f"--max-restarts needs --mode per-gpu: in --mode {self.mode} the script's own processes hold the "
                f"job's store (its rank 0), so no node can start them again with the others; drop --max-restarts, "
                f"or let paijob-runtime start one worker per GPU (--mode per-gpu)")
        nodes = self.min_nodes
        if nodes is None:
            return
        if self.mode != "per-gpu":
            raise LaunchError(
                f"--min-nodes needs --mode per-gpu: in --mode {self.mode} the script's own "
                f"init_process_group fixes the world size, which cannot shrink when a node is lost; drop --min-nodes")
        if not 1 <= nodes <= self.dist.nnodes:
            raise LaunchError(f"--min-nodes {nodes} must be from 1 to the job's {self.dist.nnodes} node(s)")
        if nodes < self.dist.nnodes and not self.max_restarts:
            raise LaunchError(
                f"--min-nodes {nodes} needs --max-restarts 1 or more: the nodes that go on without a lost one "
                f"start their workers again at the smaller world size, which is a restart")

    @property
    def run_id(self) -> str:
        """The rendezvous run id: the same on every node of the job (its name on OpenPAI)."""
        return self.dist.job_name or "paijob"

    @property
    def master(self) -> str:
        return f"{self.dist.master_addr}:{self.dist.master_port}"

    @property
    def rendezvous_timeout(self) -> int:
        """torch's rendezvous takes whole seconds; at least one."""
        return int(max(1, self.master_timeout))

    @property
    def multi_node(self) -> bool:
        return self.dist.nnodes > 1

    def expected_ranks(self) -> list[int]:
        """The global ranks this node's workers must get."""
        return [self.dist.rank(i) for i in range(self.dist.nproc_per_node)]


def _positive_seconds(value: float, option: str) -> None:
    if not math.isfinite(value) or value <= 0:
        raise LaunchError(f"{option} must be a positive number of seconds, got {value}")
