"""The watchers of a ``per-node`` or ``dataparallel`` node, as the one thing its launcher starts and stops.

That node runs one process (the user's command) under :func:`paijob.runtime.launch.supervise`; its
health is: the hang watch over that process's ranks (its ``mp.spawn`` children in ``per-node``
mode), on several nodes the link to the script's own store through which the nodes' watches
talk, and on node 0 the master's port. :class:`OneProcessHealth` builds them from the launch
config, starts them together, answers ``supervise``'s questions (a verdict? a misconfigured
port?) and stops them together (:class:`~paijob.runtime.watch.lifecycle.Watchers`).
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable, Mapping

from paijob.common import contract
from paijob.runtime.config import LaunchConfig
from paijob.runtime.netif import task_address
from paijob.runtime.watch.failures import Failure
from paijob.runtime.watch.hangwatch import Channel, HangWatch, StoreChannel, stacks_folder
from paijob.runtime.watch.launched import Launched
from paijob.runtime.watch.lifecycle import Watchers
from paijob.runtime.watch.portwatch import MasterPortWatch
from paijob.runtime.watch.storelink import StoreLink


def answer_stacks_requests(hang: HangWatch | None, say: Callable[[str], None]) -> None:
    """SIGUSR1 to the launcher (never a worker): every rank's stack on every node, the job goes on."""
    if hang is None:
        signal.signal(signal.SIGUSR1, lambda *_: say(
            "stacks on request: the hang watch is off (--hang-timeout 0), no stacks to print"))
    else:
        signal.signal(signal.SIGUSR1, lambda *_: hang.request_stacks())


def host_name(environ: Mapping[str, str]) -> str:
    """This task's address as the other nodes know it, else the host's name (for the reports)."""
    found = task_address(environ)
    return found[0] if found else socket.gethostname()


class OneProcessHealth:
    """The master's port (node 0 of a multi-node ``per-node`` job), the hang watch and its store link."""

    def __init__(self, config: LaunchConfig, env: Mapping[str, str], say: Callable[[str], None],
                 *, watch_port: bool) -> None:
        dist = config.dist
        spawned = config.mode == "per-node"
        self.port = (MasterPortWatch(dist.master_port, port_label=dist.port_label)
                     if watch_port else None)
        self.pids: list[int] = []  # the one process, once started: its samplers are believed
        self.link: StoreLink | None = None
        self.hang: HangWatch | None = None
        folder = env.get(contract.HANG_DIR)
        if config.hang.enabled and folder:
            if spawned and config.multi_node:
                self.link = StoreLink(dist.master_addr, dist.master_port, prefix=config.run_id,
                                      node_rank=dist.node_rank, nnodes=dist.nnodes)
            launched = Launched(ranks=lambda: {0: self.pids[0]} if self.pids and not spawned else {},
                                roots=lambda: self.pids if spawned else ())
            link = self.link
            self.hang = HangWatch(
                config.hang, folder=folder, node_rank=dist.node_rank if spawned else 0,
                nnodes=dist.nnodes if spawned else 1, world_size=dist.world_size if spawned else 1,
                host=host_name(os.environ), stacks_dir=stacks_folder(config.log_dir, os.environ),
                channel=StoreChannel(link.call) if link else Channel(),
                declare=link.declare if link else lambda failure: None, say=say, launched=launched)
        self._watchers = Watchers(self.link, self.hang)
        self._say = say

    def start(self) -> None:
        answer_stacks_requests(self.hang, self._say)
        self._watchers.start()

    def stop(self) -> None:
        self._watchers.stop()

    def started(self, pid: int) -> None:
        """``supervise`` started the command as ``pid``."""
        self.pids.append(pid)

    def verdict(self) -> Failure | None:
        """The hang verdict that ends this node, once (node 0's, or read from it); None: none yet."""
        if self.link is not None:
            return self.link.verdict()
        return self.hang.take_verdict() if self.hang is not None else None

    @property
    def diagnosis(self) -> str | None:
        """What the port watch found wrong (the declared port free, another one taken)."""
        return self.port.diagnosis if self.port is not None else None
