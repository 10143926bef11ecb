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
import time
from collections.abc import Callable, Mapping

from paijob.common import contract
from paijob.runtime.config import LaunchConfig
from paijob.runtime.failure import Failure
from paijob.runtime.netif import task_address
from paijob.runtime.watch.hangwatch import (
    ACCOUNT_WAIT,
    Channel,
    HangWatch,
    StoreChannel,
    stacks_folder,
)
from paijob.runtime.watch.launched import Launched
from paijob.runtime.watch.lifecycle import Watchers
from paijob.runtime.watch.notice import ACCOUNT, read_notice
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
        self.master = (dist.master_addr, dist.master_port)
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
                declare=link.declare if link else lambda failure: None, say=say, launched=launched,
                accounts=spawned)
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

    def explain_failure(self) -> Failure | None:
        """The command failed on its own: when a rank timed out in torch's own process-group
        timeout, the account naming the rank that never arrived, the same on every node. Node 0
        makes it; the others wait for it (bounded: :data:`ACCOUNT_WAIT`), from the store or,
        once node 0's command (whose rank 0 hosts the store) has ended, from node 0's notice
        (:attr:`notice`)."""
        if self.hang is None:
            return None
        if self.hang.node_rank == 0:
            return self.hang.account_now()
        if self.link is None or not self.hang.timed_out_here():
            return None
        deadline = time.monotonic() + ACCOUNT_WAIT
        while time.monotonic() < deadline:
            found = self.link.verdict() or self._account_notice()
            if found is not None:
                return found
            time.sleep(0.5)
        return None

    @property
    def notice(self) -> Failure | None:
        """Node 0's account of a timeout, when another node may not have read it from the store
        (to be served on the declared port once the command has ended); None: nothing to tell."""
        if self.hang is None or self.link is None or self.hang.node_rank != 0:
            return None
        account = self.hang.account
        return account if account is not None and not self.link.everyone_read else None

    def _account_notice(self) -> Failure | None:
        found = read_notice(*self.master, timeout=1.0)
        if found is None or found[0] != ACCOUNT:
            return None
        try:
            return Failure.from_json(found[1])
        except (ValueError, TypeError):
            return None

    @property
    def diagnosis(self) -> str | None:
        """What the port watch found wrong (the declared port free, another one taken)."""
        return self.port.diagnosis if self.port is not None else None
