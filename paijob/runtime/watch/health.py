"""The front door into the watch: what a node's launcher starts, stops and asks, in every mode.

A launcher holds one health object by its Protocol and nothing else of the watch (an import-linter contract
in ``setup.cfg`` says so): :class:`NodeHealth` is what both modes ask (start it before the workers, a
verdict while they run, the account of a failure once they failed, stop it when the node ends);
:class:`AgentHealth` adds what torch's elastic agent tells and asks (``per-gpu``: its phases, its workers'
failures, a stop by signal), :class:`ProcessHealth` what ``supervise`` does (``per-node`` and
``dataparallel``: the one process's pid, the master's port, node 0's notice after it ended). The door builds
everything behind it, both doctors included, whether the hang doctor is on or not:

* the node's eyes and tick (:mod:`~paijob.runtime.watch.node.eyes`): one look at the workers a second, handed
  to the hang doctor (:mod:`~paijob.runtime.watch.hang`, off with ``--hang-timeout 0``) and the slow-rank
  doctor (:mod:`~paijob.runtime.watch.slow`), which know nothing of each other;
* ``per-gpu``: the node watch (heartbeats, failure records, the deadlines of its waits,
  :mod:`~paijob.runtime.watch.node.liveness`) and the account of a failure
  (:mod:`~paijob.runtime.watch.node.accounting`), which reads the agent only through the torch-free
  :class:`~paijob.runtime.watch.node.workers.WorkerGroup`;
* ``per-node`` on several nodes: the link to the script's own store through which the nodes' doctors talk
  (:mod:`~paijob.runtime.watch.node.storelink`), and on node 0 the master's port
  (:mod:`~paijob.runtime.watch.node.portwatch`).

Every watcher lives under one start/stop group (:class:`~paijob.runtime.watch.lifecycle.Watchers`). A new
watcher goes behind this door: built and grouped here, never wired in a launcher.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from paijob.common import contract, exitcodes
from paijob.common.records import RestartRecord, restart_line, restarts_text
from paijob.runtime import held
from paijob.runtime.config import HangSettings, LaunchConfig
from paijob.runtime.failure import Failure, choose_root_cause, stopped_by_signal
from paijob.runtime.netif import task_address
from paijob.runtime.watch.channel import Channel, NodeSeal, RoundStore, SignedStore, StoreChannel
from paijob.runtime.watch.folder import clear_round, write_new
from paijob.runtime.watch.hang.doctor import HangWatch
from paijob.runtime.watch.hang.stacks import stacks_folder
from paijob.runtime.watch.hang.verdict import waiting_phrase
from paijob.runtime.watch.lifecycle import Watchers
from paijob.runtime.watch.node.accounting import ACCOUNT_WAIT, Accounting, read_tail
from paijob.runtime.watch.node.believed import Launched
from paijob.runtime.watch.node.eyes import Eyes, NodeTick
from paijob.runtime.watch.node.liveness import (
    DONE_KEY,
    RECOVERING,
    RELEASED_KEY,
    STORE_OP_TIMEOUT,
    NodeWatch,
    first_line,
)
from paijob.runtime.watch.node.notice import ABORT, ACCOUNT, read_notice, serve_notice
from paijob.runtime.watch.node.portwatch import MasterPortWatch
from paijob.runtime.watch.node.restarts import Decision, decide, signature
from paijob.runtime.watch.node.rounds import NotJoined, RoundPlan, Rounds
from paijob.runtime.watch.node.storelink import StoreLink, store_client
from paijob.runtime.watch.node.workers import WorkerGroup
from paijob.runtime.watch.seal import KeyBox
from paijob.runtime.watch.settings import WatchSettings
from paijob.runtime.watch.slow.doctor import SlowDoctor

# What a launcher may take from the watch besides its health: the failure record's helpers a launcher's
# own messages use, and what node 0's notice says before the watchers start.
__all__ = ["AgentHealth", "NodeHealth", "NotJoined", "ProcessHealth", "RoundPlan", "agent_health", "first_line", "host_name",
           "node_0_notice", "process_health", "read_tail"]

NOTICE_LINGER = 30.0  # per-node: how long node 0 answers the waiting nodes after a diagnosis
NOTICE_WAIT = 5.0  # per-node: how long a node whose ranks failed at once looks for node 0's notice
# per-node: how much longer than the hang timeout another node waits for node 0's word before it judges
# on its own (node 0 judges a stopped rank 0 within ~15 s of its timeout, then stops its ranks: ours fail)
NODE_0_GRACE = 60.0
LATE_NODE_LINGER = 60.0  # per-node: how long node 0 serves its account to nodes that have not read it
# torch's words for a store client that never got through (a start-up that never joined)
_UNREACHED = re.compile(r"trying to connect|Connection refused|Ping failed|failed to connect|connect\(\) ", re.IGNORECASE)


@runtime_checkable
class NodeHealth(Protocol):
    """What either launch mode starts, stops and asks of the watch."""

    def start(self) -> None:
        """Start every watcher of the node (before its workers start)."""
        ...

    def stop(self) -> None:
        """Stop and finish every watcher, once; after a success or a failure alike."""
        ...

    def verdict(self) -> Failure | None:
        """A verdict that ends this node's workers now (a hang, another node's failure); None: none."""
        ...

    def explain_failure(self) -> Failure | None:
        """The workers failed: the account that names the job's root cause, the same on every node;
        None: the workers' own failure stands."""
        ...


@runtime_checkable
class AgentHealth(NodeHealth, Protocol):
    """What torch's elastic agent (``per-gpu``) tells and asks besides: its main thread's phases, whose
    deadlines the node watch holds, and its workers' failures."""

    def phase(self, name: str, *, deadline: float | None = None, expired: Callable[[], Failure] | None = None,
              waiting_line: Callable[[float], str | None] | None = None, first_message_after: float = 30.0) -> None:
        """The agent's main thread starts ``name``; past ``deadline`` seconds ``expired()`` ends the node."""
        ...

    def join_the_others(self, timeout: float | None = None) -> None:
        """Connect this node to the job's store and start its heartbeats; ``timeout``: wait as long for the
        connection (None: do not wait)."""
        ...

    def workers_succeeded(self) -> None:
        """This node's workers succeeded: it waits in torch's exit barrier now."""
        ...

    def barrier_passed(self) -> None:
        """Past torch's exit barrier: heartbeats stop, node 0 keeps the store until the others left it."""
        ...

    def ended(self) -> None:
        """The node ends without a failure to account for: no verdict after this."""
        ...

    def workers_failed(self, failures: list[Failure]) -> Failure:
        """torch found this node's workers ``failures``: their root cause, told to the other nodes."""
        ...

    def before_workers_stop(self) -> None:
        """torch is about to stop every worker of this node (its poll found one failed)."""
        ...

    def stopped_by(self, signum: int) -> int:
        """torch stopped the workers for ``signum``: the other nodes are told; the node's exit code."""
        ...

    def restart(self, round_number: int, host_store: Callable[[], int]) -> RoundPlan | None:
        """This node's workers of round ``round_number`` failed (or were stopped for a verdict) and are stopped:
        the next round's plan once every node of it is there (``host_store()``: node 0 starts the new workers'
        store, its port); None: no restart, the job ends (:meth:`explain_failure` gives the root cause)."""
        ...

    def restarted(self) -> None:
        """The new round's workers started: the restart is told (node 0: its line and its record)."""
        ...

    def late_start(self) -> RoundPlan | NotJoined | None:
        """A node other than 0, connected to the job's store before its first rendezvous: None when the job is
        at its first round (start as usual); else it waits to join at the next restart: that round's plan, or
        how it ends without joining (the job finished, failed, or lost node 0)."""
        ...


@runtime_checkable
class ProcessHealth(NodeHealth, Protocol):
    """What ``supervise`` (``per-node``, ``dataparallel``: one process per node) tells and asks besides."""

    watches_hangs: bool  # a hang verdict may come (the hang doctor is on)

    def started(self, pid: int) -> None:
        """``supervise`` started the command as ``pid``."""
        ...

    def misconfigured(self, pid: int) -> str | None:
        """What the master's port says is wrong with the command ``pid`` (node 0), once; None: nothing (yet)."""
        ...

    def after_exit(self) -> None:
        """The command ended: node 0 tells the nodes that have not read it yet, on the freed port."""
        ...


def agent_health(config: LaunchConfig, workers: WorkerGroup, *, folder: str | None, connect: Callable[[], Any],
                 end_node: Callable[[Failure], None], say: Callable[[str], None], who: str = "") -> AgentHealth:
    """The door of a ``per-gpu`` node (:class:`PerGpuHealth`)."""
    return PerGpuHealth(WatchSettings.of(config), workers, folder=folder, connect=connect, end_node=end_node,
                        say=say, who=who)


def process_health(config: LaunchConfig, env: Mapping[str, str], say: Callable[[str], None], *,
                   watch_port: bool) -> ProcessHealth:
    """The door of a ``per-node`` or ``dataparallel`` node (:class:`OneProcessHealth`)."""
    return OneProcessHealth(WatchSettings.of(config), env, say, watch_port=watch_port)


def answer_stacks_requests(hang: HangWatch | None, say: Callable[[str], None]) -> None:
    """SIGUSR1 to the launcher (never a worker): every rank's stack on every node, the job goes on. With the
    hang doctor off, its being off is said once (it says its own timeouts as it starts)."""
    if hang is None:
        say(HangSettings(timeout=0).described())
        signal.signal(signal.SIGUSR1, lambda *_: say(
            "stacks on request: the hang watch is off (--hang-timeout 0), no stacks to print"))
    else:
        signal.signal(signal.SIGUSR1, lambda *_: hang.request_stacks())


def node_0_notice(addr: str, port: int) -> tuple[str, bool] | None:
    """What node 0 serves on the master's port once its command ended (``per-node``), for a node that
    arrives then, and whether the job failed: its diagnosis (the job stopped, False), or its account of
    the job's failure (a start-up timeout that named this node as never joined, True); None: no
    notice (or not signed with the job's node key: not node 0's), the port is the script's store."""
    found = read_notice(addr, port)
    if found is None:
        return None
    kind, text = found
    opened = notice_seal().open(NOTICE_KEY.format(kind=kind), text)
    if opened is None:
        return None
    message = opened.decode("utf-8", "replace")
    if kind == ABORT:
        return f"node rank 0 stopped the job: {message}", False
    try:
        account = Failure.from_json(message)
    except ValueError:
        return None
    return f"node rank 0's command had already failed, before this node started its own: {account.headline()}", True


NOTICE_KEY = "paijob/notice/{kind}"  # what a notice's MAC is bound to


def notice_seal() -> NodeSeal:
    """The job's node key, for node 0's notices on the master's port (a port anyone on its host may take)."""
    return NodeSeal(held.node_key())


def host_name(environ: Mapping[str, str]) -> str:
    """This task's address as the other nodes know it, else the host's name (for the reports)."""
    found = task_address(environ)
    return found[0] if found else socket.gethostname()


class Doctors:
    """The node's eyes on its workers and both doctors they feed, built alike in every mode; a restart
    (:meth:`new_round`) gives the new workers new doctors, fed by the same eyes."""

    def __init__(self, settings: WatchSettings, folder: str, launched: Launched, *, channel: Channel,
                 declare: Callable[[Failure], None], say: Callable[[str], None], node_rank: int, nnodes: int,
                 world_size: int, accounts: bool = False) -> None:
        host = host_name(os.environ)
        self.settings, self.folder, self.host = settings, folder, host
        self._declare, self._say, self._accounts = declare, say, accounts
        self.eyes = Eyes(folder, node_rank=node_rank, host=host, interval=settings.hang.interval,
                         launched=launched, say=say)
        self.hang, self.slow = self._doctors(channel, node_rank, nnodes, world_size)
        self.tick = NodeTick(self.eyes, [d for d in (self.hang, self.slow) if d is not None], say)

    def _doctors(self, channel: Channel, node_rank: int, nnodes: int, world_size: int
                 ) -> tuple[HangWatch | None, SlowDoctor]:
        settings, folder, host, say = self.settings, self.folder, self.host, self._say
        hang = HangWatch(
            settings.hang, folder=folder, node_rank=node_rank, nnodes=nnodes, world_size=world_size, host=host,
            stacks_dir=stacks_folder(settings.log_dir, os.environ), channel=channel, declare=self._declare, say=say,
            eyes=self.eyes.look, accounts=self._accounts, stall_file=settings.stall_file,
            record_key=settings.record_key, sealed_by=self.eyes.sealed_by) if settings.hang.enabled else None
        slow = SlowDoctor(node_rank=node_rank, nnodes=nnodes, world_size=world_size, folder=folder,
                          say=say, publish=channel.publish_slow, gather=channel.gather_slow,
                          get=channel.get_text, put=channel.set_text,
                          record_file=settings.slow_file, record_key=settings.record_key,
                          sealed_by=self.eyes.sealed_by)
        return hang, slow

    def new_round(self, channel: Channel, *, node_rank: int, nnodes: int, world_size: int) -> None:
        """A restart: the old workers' files go, both doctors start afresh on the new workers (their first
        step is judged as a first step again), and the slow-rank doctor keeps the run's worst straggler."""
        clear_round(self.folder)
        self.eyes.node_rank = node_rank  # the node's rank in the round (fewer nodes after a lost one: --min-nodes)
        worst = self.slow.worst
        self.hang, self.slow = self._doctors(channel, node_rank, nnodes, world_size)
        self.slow.worst = worst
        self.tick.doctors = [d for d in (self.hang, self.slow) if d is not None]

    def watchers(self) -> tuple[Any, ...]:
        """In start order: the tick first; stopped and finished in reverse (the slow-rank doctor's final
        summary before the folder goes with the eyes)."""
        return (self.tick, self)

    # both doctors as one watcher of the node (a restart swaps them; the node's group keeps this one)
    def start(self) -> None:
        if self.hang is not None:
            self.hang.start()
        self.slow.start()

    def stop(self) -> None:
        self.slow.stop()
        if self.hang is not None:
            self.hang.stop()

    def finish(self) -> None:
        self.slow.finish()
        if self.hang is not None:
            self.hang.finish()


class OneProcessHealth:
    """The master's port (node 0 of a multi-node ``per-node`` job), both doctors and their store link."""

    def __init__(self, settings: WatchSettings, env: Mapping[str, str], say: Callable[[str], None], *,
                 watch_port: bool) -> None:
        spawned = settings.spawned
        self.settings = settings
        self.seal = NodeSeal(settings.node_key)  # every value in the job's store signed with the job's key
        self.port = MasterPortWatch(settings.master_port, port_label=settings.port_label) if watch_port else None
        self.diagnosis: str | None = None  # what the port watch found wrong (the declared port free, another taken)
        self.master = (settings.master_addr, settings.master_port)
        self.pids: list[int] = []  # the one process, once started: its samplers are believed
        self.link: StoreLink | None = None
        self.doctors: Doctors | None = None
        folder = env.get(contract.HANG_DIR)
        if folder:
            if spawned and settings.multi_node:
                seal = self.seal
                self.link = StoreLink(settings.master_addr, settings.master_port, prefix=settings.run_id,
                                      node_rank=settings.node_rank, nnodes=settings.nnodes,
                                      connect=lambda: SignedStore(store_client(settings.master_addr,
                                                                               settings.master_port,
                                                                               settings.run_id), seal))
            launched = Launched(ranks=lambda: {0: self.pids[0]} if self.pids and not spawned else {},
                                roots=lambda: self.pids if spawned else (), keys=KeyBox.open(folder))
            link = self.link
            self.doctors = Doctors(
                settings, folder, launched, channel=StoreChannel(link.call) if link else Channel(),
                declare=link.declare if link else lambda failure: None, say=say,
                node_rank=settings.node_rank if spawned else 0, nnodes=settings.nnodes if spawned else 1,
                world_size=settings.world_size if spawned else 1, accounts=spawned)
        self.hang = self.doctors.hang if self.doctors is not None else None
        self.watches_hangs = self.hang is not None
        self._watchers = Watchers(self.link, *(self.doctors.watchers() if self.doctors else ()))
        self._say = say

    def start(self) -> None:
        answer_stacks_requests(self.hang, self._say)
        self._watchers.start()

    def stop(self) -> None:
        self._watchers.stop()

    def started(self, pid: int) -> None:
        self.pids.append(pid)

    def misconfigured(self, pid: int) -> str | None:
        if self.port is None or self.diagnosis is not None:
            return None
        self.diagnosis = self.port(pid)
        return self.diagnosis

    def verdict(self) -> Failure | None:
        """The hang verdict that ends this node, once (node 0's, or read from it); None: none yet."""
        if self.link is not None:
            return self.link.verdict() or self._node_0_unheard()
        return self.hang.take_verdict() if self.hang is not None else None

    def _node_0_unheard(self) -> Failure | None:
        """Another node's own verdict when the script's store (in node 0's rank 0) has answered nothing
        for the hang timeout and :data:`NODE_0_GRACE` more while every rank here waits: node 0, which
        judges, is stopped, frozen or cut off (alive, it would have judged and stopped its ranks by then,
        and ours would have failed). None: not (yet) so."""
        hang, link = self.hang, self.link
        if hang is None or link is None or hang.node_rank == 0:
            return None
        silent = link.unanswered_for()
        if silent < hang.settings.timeout + NODE_0_GRACE:
            return None
        states = hang.local_states()
        if not states or not all(s.c10d or s.idle_for >= hang.settings.timeout for s in states):
            return None
        settings = self.settings
        return Failure(
            node_rank=settings.node_rank, rank=None, local_rank=None, returncode=None, secondary=False,
            time=time.time(), exit_status=exitcodes.INFRA_FAILURE,
            reason=(f"node rank 0 stopped answering: the job's store at {settings.master} (hosted by its rank "
                    f"0) has not answered for {silent:.0f}s, and node 0's hang watch, which judges, sent no "
                    f"verdict; here {waiting_phrase(states)}: node 0 is stopped, frozen or cut off from this node"))

    def explain_failure(self) -> Failure | None:
        """The command failed on its own: when a rank timed out in torch's own process-group
        timeout, the account naming the rank that never arrived, the same on every node. Node 0
        makes it; the others wait for it (bounded: :data:`ACCOUNT_WAIT`), from the store or,
        once node 0's command (whose rank 0 hosts the store) has ended, from node 0's notice."""
        if self.hang is None:
            return None
        if self.hang.node_rank == 0:
            return self.hang.account_now()
        if self.link is None:
            return None
        errors = self.hang.local_errors()
        if not errors:
            return None
        # a rank timed out: node 0's account comes through the store or its notice; a rank that failed
        # at once (its store gone: node 0's notice answered in its place) looks for the notice briefly
        deadline = time.monotonic() + (ACCOUNT_WAIT if self.hang.timed_out_here() else NOTICE_WAIT)
        while time.monotonic() < deadline:
            found = self.link.verdict() or self._account_notice()
            if found is not None:
                return found
            time.sleep(0.5)
        return self._never_reached(errors)

    def _never_reached(self, errors: dict[int, str]) -> Failure | None:
        """No account came from node 0, and every rank of this node failed to reach the job's store
        (connecting timed out, or was refused): this node never joined. None: they failed otherwise."""
        if not errors or not all(_UNREACHED.search(text) for text in errors.values()):
            return None
        settings = self.settings
        ranks = sorted(errors)
        return Failure(
            node_rank=settings.node_rank, rank=None, local_rank=None, returncode=1, secondary=False,
            time=time.time(), overrides=True,
            reason=(f"start-up: node rank {settings.node_rank} (ranks {ranks[0]}-{ranks[-1]}) never joined: its "
                    f"ranks could not reach the job's store at {settings.master} (MASTER_ADDR:MASTER_PORT) "
                    f"before their timeout; node 0's rank 0 hosts it, and had ended or was not there yet (see "
                    f"node 0's log): start every node within the timeout, or pass init_process_group a longer "
                    f"timeout="))

    @property
    def notice(self) -> Failure | None:
        """Node 0's account of a timeout, or its hang verdict, when another node may not have read it
        from the store (to be served on the declared port once the command has ended: a verdict on a
        stopped rank 0, whose store answered no one); None: nothing to tell."""
        if self.hang is None or self.link is None or self.hang.node_rank != 0:
            return None
        account = self.hang.account or self.link.declared
        return account if account is not None and not self.link.everyone_read else None

    def _account_notice(self) -> Failure | None:
        found = read_notice(*self.master, timeout=1.0)
        opened = self.seal.open(NOTICE_KEY.format(kind=ACCOUNT), found[1]) if found and found[0] == ACCOUNT else None
        try:
            return None if opened is None else Failure.from_json(opened)
        except ValueError:
            return None

    def after_exit(self) -> None:
        """Once the command has ended, the declared port is free (the script's store ended with
        it): node 0 serves the other nodes there what it diagnosed, or its account of a timeout."""
        settings = self.settings
        if self.diagnosis is not None:
            serve_notice(settings.master_port, ABORT, self._sealed(ABORT, self.diagnosis), peers=settings.nnodes - 1,
                         linger=min(settings.master_timeout, NOTICE_LINGER))
        elif self.notice is not None:  # until every other node read it; a node that starts late reads it too
            serve_notice(settings.master_port, ACCOUNT, self._sealed(ACCOUNT, self.notice.to_json()),
                         peers=settings.nnodes - 1,
                         linger=max(ACCOUNT_WAIT + 5.0, min(settings.master_timeout, LATE_NODE_LINGER)))

    def _sealed(self, kind: str, message: str) -> str:
        """A notice's message with the MAC of the job's node key (bound to its kind): nothing else on the port
        speaks for node 0."""
        return self.seal.seal(NOTICE_KEY.format(kind=kind), message.replace("\n", " ")).decode("utf-8", "replace")


class PerGpuHealth:
    """The node watch, both doctors and the account of a failure of a ``per-gpu`` node."""

    def __init__(self, settings: WatchSettings, workers: WorkerGroup, *, folder: str | None,
                 connect: Callable[[], Any], end_node: Callable[[Failure], None],
                 say: Callable[[str], None], who: str = "") -> None:
        """``folder``: the workers' samplers' folder (None: no doctors); ``connect()`` makes this node's
        own store client; ``end_node(failure)`` is the watchdog's way out (it stops the workers: the
        watch sends no signal)."""
        self.settings = settings
        self._say = say
        self.seal = NodeSeal(settings.node_key)  # every value in the job's store signed with the job's key
        seal = self.seal
        self.node = NodeWatch(settings, connect=lambda: SignedStore(connect(), seal), end_node=end_node, say=say,
                              who=who)
        self.workers, self.folder = workers, folder
        self.doctors = self._doctors(workers, folder) if folder else None
        self.hang = self.doctors.hang if self.doctors is not None else None
        self.accounting = self._accounting(settings.nnodes, settings.world_size)
        self._watchers = Watchers(self.node, *(self.doctors.watchers() if self.doctors else ()))
        self.rounds = Rounds(self.node)
        self.round = 0  # the round of the workers: each restart starts the next
        self.plan: RoundPlan | None = None  # the round's nodes and store, from the first restart on
        self.history: list[RestartRecord] = []  # the restarts so far (node 0 compares a failure with the last)
        self._decided: tuple[Failure, Decision] | None = None  # the round that failed: its root cause, node 0's word

    def _accounting(self, nnodes: int, world_size: int) -> Accounting:
        return Accounting(self.workers, self.node, nnodes=nnodes, world_size=world_size, hang=self.hang,
                          folder=self.folder, sealed_by=self.doctors.eyes.sealed_by if self.doctors else None,
                          primary_wait=self.settings.heartbeat_timeout + 5.0)

    def _doctors(self, workers: WorkerGroup, folder: str) -> Doctors:
        """The workers' samplers report into ``folder`` (named in their environment:
        :func:`paijob.common.contract.worker_env`); node 0 judges."""
        settings, node = self.settings, self.node

        def declare(failure: Failure) -> None:
            node.publish(failure)
            node.declare(failure)

        return Doctors(settings, folder, Launched(ranks=lambda: workers.rank_pids, keys=KeyBox.open(folder)),
                       channel=StoreChannel(node.call) if settings.multi_node else Channel(), declare=declare,
                       say=self._say, node_rank=settings.node_rank, nnodes=settings.nnodes,
                       world_size=settings.world_size)

    def start(self) -> None:
        """SIGUSR1 asks for every rank's stack on every node (the job goes on); every watcher starts."""
        answer_stacks_requests(self.hang, self._say)
        self._watchers.start()

    def stop(self) -> None:
        self._watchers.stop()

    def phase(self, name: str, *, deadline: float | None = None, expired: Callable[[], Failure] | None = None,
              waiting_line: Callable[[float], str | None] | None = None, first_message_after: float = 30.0) -> None:
        self.node.enter(name, deadline=deadline, expired=expired, waiting_line=waiting_line,
                        first_message_after=first_message_after)

    def join_the_others(self, timeout: float | None = None) -> None:
        self.node.start_heartbeats()
        if timeout is not None:
            self.node.wait_connected(timeout)

    def workers_succeeded(self) -> None:
        self.node.mark_done()
        self.node.enter("exit barrier")

    def barrier_passed(self) -> None:
        waiting = []
        if self.settings.node_rank == 0 and self.plan is not None:  # nodes that came back wait to join: tell them
            waiting = self.rounds.waiting(self.round + 1, self.plan.nodes)
        self.node.release(waiting=len(waiting))

    def ended(self) -> None:
        self.node.close()

    def verdict(self) -> Failure | None:
        """Another node's failure record, a lost node or the hang watch's verdict: this node's
        workers must stop. Where it says gloo aborted a rank for a collective's size, this node's
        live workers are asked for their calls first."""
        if not self.node.failed:
            return None
        records = self.node.records()
        self.accounting.ask_calls_after_size_abort(records)
        return choose_root_cause(records)

    def workers_failed(self, failures: list[Failure]) -> Failure:
        return self.accounting.workers_failed(failures)

    def before_workers_stop(self) -> None:
        self.accounting.before_workers_stop()

    def explain_failure(self) -> Failure | None:
        """The root cause, once this node's workers failed or were stopped for a peer (after a restart was
        refused: node 0's); then this node is counted out (node 0, the store's host, lingers until the others
        read why)."""
        if self._decided is not None:
            root: Failure | None = self._decided[0]
        else:
            root = self.accounting.root_cause()
            if self.settings.max_restarts and root is not None:
                self._say(f"not restarting: no restart left (--max-restarts {self.settings.max_restarts} used)")
        self.node.finish_after_failure(linger=5.0)
        self.node.close()
        return root

    def stopped_by(self, signum: int) -> int:
        """torch has stopped our workers for ``signum``: tell the other nodes why before they see
        us vanish; the node's exit code."""
        settings = self.settings
        name = signal.Signals(signum).name
        self.node.publish(
            Failure(
                node_rank=settings.node_rank, rank=None, local_rank=None, returncode=None,
                secondary=False, time=time.time(),
                reason=(
                    f"node rank {settings.node_rank} received {name} and stopped its workers (the job "
                    f"was stopped, or the task preempted)"
                ),
            )
        )
        self.node.finish_after_failure(linger=3.0)
        self.node.close()
        self._say(stopped_by_signal(signum, f"node rank {settings.node_rank}'s {settings.nproc_per_node} worker(s)"))
        return exitcodes.from_signal(signum)

    # -- restarts (--max-restarts) -------------------------------------------------------------
    def restart(self, round_number: int, host_store: Callable[[], int]) -> RoundPlan | None:
        settings = self.settings
        wait = settings.heartbeat_timeout + ACCOUNT_WAIT + settings.grace_period + 30.0
        limit = wait + settings.rendezvous_timeout + 60.0
        self.node.enter(RECOVERING, deadline=limit, expired=lambda: self._infrastructure(
            f"the restart after round {round_number} did not complete within {limit:.0f}s"))
        root = self.accounting.root_cause() or self._infrastructure("the workers failed for an unknown reason")
        decision, root = self._decide(round_number, root, wait)
        self._decided = (root, decision)
        if not decision.restart:
            self._say(decision.why)
            return None
        plan = self._next_round(round_number + 1, decision, host_store)
        if isinstance(plan, str):
            self._say(f"not restarting: {plan}")
            self._decided = (self._infrastructure(plan), decision)
            return None
        self._begin_round(plan)
        return plan

    def _infrastructure(self, reason: str) -> Failure:
        return Failure(node_rank=self.settings.node_rank, rank=None, local_rank=None, returncode=None,
                       secondary=False, time=time.time(), reason=reason)

    def _decide(self, round_number: int, root: Failure, wait: float) -> tuple[Decision, Failure]:
        """Node 0's decision on the failed round and its root cause (node 0 makes and tells it, every other
        node reads it: every node tells the same story); no word from node 0: no restart."""
        settings = self.settings
        if settings.node_rank == 0 or settings.nnodes == 1:
            decision = decide(root, done=round_number, max_restarts=settings.max_restarts, history=self.history,
                              nnodes=settings.nnodes, lost=set(self.node.lost_nodes), finished=self._finished(),
                              min_nodes=settings.min_nodes)
            if settings.nnodes > 1:
                self.rounds.tell_end(round_number, decision, root)
            return decision, root
        heard = self.rounds.hear_end(round_number, wait)
        if heard is None:
            found = choose_root_cause([root, *self.node.records()]) or root
            return Decision(False, "not restarting: node rank 0 gave no word on the restart (see its log)"), found
        return heard

    def _finished(self) -> list[int]:
        """Node 0: the nodes whose workers had succeeded (they wait in torch's exit barrier, and cannot start
        again with the others)."""
        def done(store: Any) -> list[int]:
            return [node for node in range(self.settings.nnodes) if store.check([DONE_KEY.format(node=node)])]

        return (self.node.call(done) or []) if self.settings.nnodes > 1 else []

    def _next_round(self, round_number: int, decision: Decision, host_store: Callable[[], int]) -> RoundPlan | str:
        """Every node of the next round arrived (node 0 waits, then starts its store and says go); its plan,
        or why it does not start."""
        settings = self.settings
        if settings.nnodes == 1:
            return RoundPlan(round_number, (0,), host_store(), 0)
        self.rounds.arrive(round_number)
        if settings.node_rank != 0:
            return self.rounds.wait_go(round_number, timeout=settings.rendezvous_timeout + 30.0)
        least = settings.min_nodes or settings.nnodes
        nodes = self.rounds.gather(round_number, decision.nodes, timeout=float(settings.rendezvous_timeout),
                                   enough=lambda arrived: len(arrived) >= least)
        for node in set(nodes) - set(decision.nodes):
            self.node.rejoined(node)
            self._say(f"node rank {node} came back (its task was retried) and joins restart {round_number}")
        if len(nodes) < least:
            missing = ", ".join(str(node) for node in decision.nodes if node not in nodes)
            reason = (f"node rank {missing} did not come back for restart {round_number} within --master-timeout "
                      f"({settings.rendezvous_timeout}s)")
            self.rounds.abort(round_number, reason)
            return reason
        port = host_store()
        self.rounds.go(round_number, nodes, port)
        return RoundPlan(round_number, nodes, port, 0)

    def _begin_round(self, plan: RoundPlan) -> None:
        """The watch on the new round: its failure records, its doctors, its account (in the round's keys)."""
        settings, node = self.settings, self.node
        self.round, self.plan = plan.round, plan
        node.new_round(plan.round)
        nnodes = len(plan.nodes)
        world_size = nnodes * settings.nproc_per_node
        if self.doctors is not None:
            current = plan.round

            def call(fn: Callable[[Any], Any], timeout: float = STORE_OP_TIMEOUT) -> Any:
                return node.call(lambda store: fn(RoundStore(store, current)), timeout)

            channel = StoreChannel(call) if nnodes > 1 else Channel()
            self.doctors.new_round(channel, node_rank=plan.group_rank, nnodes=nnodes, world_size=world_size)
            self.hang = self.doctors.hang
            answer_stacks_requests(self.hang, self._say)
        self.accounting = self._accounting(nnodes, world_size)

    def restarted(self) -> None:
        """Node 0 (every node says the line too): which restart of how many, after what, on which world, and
        the seconds from the failure to the new workers' start; node 0 keeps its record."""
        assert self._decided is not None and self.plan is not None, "restart() said restart"
        root, decision = self._decided
        self._decided = None
        settings, plan = self.settings, self.plan
        now = time.time()
        record = RestartRecord(number=plan.round, limit=settings.max_restarts, cause=decision.why,
                               exit_code=root.exit_code, nodes=len(plan.nodes),
                               world_size=len(plan.nodes) * settings.nproc_per_node,
                               lost_s=round(max(0.0, now - root.time), 1), time=now, signature=signature(root))
        self.history.append(record)
        self._say(f"restart {record.number} of {record.limit} after {record.cause}: every node's workers started "
                  f"again ({record.nodes} node(s), world size {record.world_size}), {record.lost_s:.1f}s after "
                  f"the failure; they resume from their last checkpoint, where the script keeps one")
        if settings.node_rank == 0:
            self._keep_restarts(record)

    def _keep_restarts(self, record: RestartRecord) -> None:
        """Node 0: the restart as a record in its log (what travels everywhere), and the list of the attempt's
        restarts where the cluster asks and beside the workers' files (rank 0's summary)."""
        key = self.settings.record_key
        self._say(restart_line(record, key).removeprefix("paijob-runtime: "))  # the line says who it is
        text = restarts_text(self.history, key)
        for path in (self.settings.restarts_file, os.path.join(self.folder, contract.RESTARTS_NAME)
                     if self.folder else None):
            if path:
                try:
                    write_new(path, text)
                except OSError:
                    pass

    def late_start(self) -> RoundPlan | NotJoined | None:
        settings, node = self.settings, self.node
        if settings.node_rank == 0 or settings.nnodes == 1 or not settings.max_restarts:
            return None
        node.wait_connected(STORE_OP_TIMEOUT)
        current = self.rounds.current()
        if current == 0:
            return None
        node.new_round(current)  # what the rounds before said is theirs
        node.enter("joining")
        self._say(f"the job's workers are at restart {current} (this task was retried, or started late): node rank "
                  f"{settings.node_rank} joins them at the next restart")
        wanted = current + 1
        self.rounds.arrive(wanted)
        while True:
            plan = self.rounds.wait_go(wanted, timeout=1.0)
            if isinstance(plan, RoundPlan):
                self._begin_round(plan)
                return plan
            ended = self._ended_without_us(wanted - 1)
            if ended is not None:
                return ended
            if plan.startswith(f"node rank {settings.node_rank} was left out") or self.rounds.current() >= wanted:
                wanted = max(wanted, self.rounds.current()) + 1  # a restart went without it: the next one
                self.rounds.arrive(wanted)

    def _ended_without_us(self, round_number: int) -> NotJoined | None:
        """Whether the job ended while this late node waited to join: node 0's workers finished, node 0 refused
        a restart, or node 0 is gone."""
        node = self.node
        if node.store_lost or (node.fatal is not None and node.fatal.node_rank == 0):
            root = node.fatal
            return NotJoined(exitcodes.INFRA_FAILURE, "node rank 0 was lost while this node waited to join", root)
        if node.call(lambda store: store.check([DONE_KEY.format(node=0)])):
            node.call(lambda store: store.add(RELEASED_KEY, 1))  # node 0 may go: this node read the end
            return NotJoined(exitcodes.OK, "the job's workers finished without this node (it waited to join at a "
                                           "restart that did not come)")
        ended = self.rounds.ended(round_number)
        if ended is not None and not ended[0].restart:
            return NotJoined(ended[1].exit_code, ended[0].why, ended[1])
        return None
