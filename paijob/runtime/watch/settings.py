"""What the watch needs to know of its node's launch, and nothing more.

Why: the launch's whole config (:class:`~paijob.runtime.config.LaunchConfig`: the command, the precision, the
apex options, the layout...) used to travel into every room of the watch, one parameter that walked 23 modules.
The door (:mod:`paijob.runtime.watch.health`) turns it into this small frozen value once; everything behind the
door takes :class:`WatchSettings`, so a test builds one in a line and a new launch option never reaches a doctor
by accident. No torch import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from paijob.common import contract
from paijob.runtime import held
from paijob.runtime.config import HangSettings

if TYPE_CHECKING:
    from paijob.runtime.config import LaunchConfig


@dataclass(frozen=True)
class WatchSettings:
    """Where the node sits in the job, how long it waits for the others, and the hang doctor's limits."""

    node_rank: int = 0
    nnodes: int = 1
    world_size: int = 1
    nproc_per_node: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = 0
    port_label: str | None = "SynPort"
    run_id: str = "paijob"
    mode: str = "per-gpu"
    hang: HangSettings = HangSettings()
    heartbeat_timeout: float = 60.0  # a silent peer is lost after this long
    grace_period: float = 30.0  # what workers get between SIGTERM and SIGKILL
    master_timeout: float = 600.0  # every wait for the other nodes (the master's port, the rendezvous)
    log_dir: str | None = None  # where the stacks file goes (else the job's output folder)
    # what the cluster handed the runtime alone (paijob.runtime.held): the job's node key (None: values in the
    # store go unsigned), where the local cluster wants the stall and the slow-rank records
    node_key: bytes | None = field(default=None, repr=False)
    record_key: str | None = field(default=None, repr=False)  # signs the stall and slow-rank record files
    stall_file: str | None = None
    slow_file: str | None = None
    restarts_file: str | None = None  # where the local cluster wants the attempt's restarts
    max_restarts: int = 0  # --max-restarts
    min_nodes: int | None = None  # --min-nodes (None: every node)

    @classmethod
    def of(cls, config: LaunchConfig) -> WatchSettings:
        """The watch's part of a node's launch config."""
        dist = config.dist
        return cls(node_rank=dist.node_rank, nnodes=dist.nnodes, world_size=dist.world_size,
                   nproc_per_node=dist.nproc_per_node, master_addr=dist.master_addr,
                   master_port=dist.master_port, port_label=dist.port_label, run_id=config.run_id,
                   mode=config.mode, hang=config.hang, heartbeat_timeout=config.heartbeat_timeout,
                   grace_period=config.grace_period, master_timeout=config.master_timeout,
                   log_dir=config.log_dir, node_key=held.node_key(),
                   record_key=held.value(contract.RECORD_KEY), stall_file=held.value(contract.STALL_FILE),
                   slow_file=held.value(contract.SLOW_FILE), restarts_file=held.value(contract.RESTARTS_FILE),
                   max_restarts=config.max_restarts, min_nodes=config.min_nodes)

    @property
    def master(self) -> str:
        return f"{self.master_addr}:{self.master_port}"

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1

    @property
    def spawned(self) -> bool:
        """``per-node``: the ranks are the ``mp.spawn`` children of the node's one process."""
        return self.mode == "per-node"

    @property
    def rendezvous_timeout(self) -> int:
        """torch's rendezvous takes whole seconds; at least one."""
        return int(max(1, self.master_timeout))
