"""``per-gpu`` mode: torch's elastic agent, plus cross-node failure propagation.

Imports torch (only ``paijob.runtime.launch`` imports this module, lazily).

torch's :class:`LocalElasticAgent` starts one worker per local rank with the
``static`` rendezvous (node rank fixed; ``max_restarts`` is ``--max-restarts``), sets ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``... and stops every local worker when one fails.
The rendezvous store (a ``TCPStore`` served by node rank 0's agent at
``MASTER_ADDR:MASTER_PORT``) is shared with the workers
(``TORCHELASTIC_USE_AGENT_STORE=True``), so ``init_process_group("env://")``
in the workers joins it as a client.

What torch alone does not do is tell the *other* nodes (their workers would
sit in a collective until a timeout) or bound its own waits on a real
network. :class:`PaijobAgent` adds, over that same store (see
:mod:`paijob.runtime.watch.node.liveness` for the threads that do it):

* a failure record (``paijob/failure/<node>``): written by the node whose
  worker failed, polled by every other node about once a second, which then
  stops its own workers and exits with the root cause's code;
* heartbeats (``paijob/hb/<node>``), counted by node 0: a node silent for
  ``--heartbeat-timeout`` is lost, and node 0 publishes that as the record;
* non-zero nodes notice node 0 vanishing (a store error, or a store call
  unanswered for ``--heartbeat-timeout``);
* a watchdog that ends the node (exit 143) when a store call or the
  rendezvous outlives its deadline: nothing waits on the network unbounded;
* ``paijob/finished``: node 0 hosts the store, so after a failure it lingers
  (a few seconds at most) until the others have read the record.

**Restarts** (``--max-restarts N``, torch's ``max_restarts``): when the round of workers fails (a worker here,
another node's record, a hang the hang watch names), torch's loop calls :meth:`PaijobAgent._restart_workers`:
the workers stop, the watch decides with every node whether to start them again (node 0's word; the same
failure twice, a permanent one or a lost node ends the job: :mod:`paijob.runtime.watch.health`), and all nodes
start round r together: torch's ``TORCHELASTIC_RESTART_COUNT`` is r. The static rendezvous reuses one store,
whose keys the last round's workers left (a process group's addresses, its barriers' counters): each round's
workers meet in a store of their own that node 0 starts for that round (a port the kernel picks, as torch's
c10d rendezvous does for each of its rounds), and the agents' own keys of the round (rank assignment, the exit
barrier) go under the round's prefix.
"""

from __future__ import annotations

import inspect
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any

# c10d logs every failed store call with its full C++ stack: pages on each node
# once the master is gone. This agent reports that in one line instead, so its
# own c10 logging stays at ERROR; c10 reads the level once, when torch loads, and
# the workers get the user's own setting back below.
_CPP_LOG_LEVEL = "TORCH_CPP_LOG_LEVEL"
_user_cpp_log_level = os.environ.get(_CPP_LOG_LEVEL)
os.environ.setdefault(_CPP_LOG_LEVEL, "ERROR")

from torch.distributed.elastic.agent.server.api import RunResult, Worker, WorkerSpec, WorkerState  # noqa: E402
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent  # noqa: E402
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException, Std  # noqa: E402
from torch.distributed.elastic.rendezvous import RendezvousParameters  # noqa: E402
from torch.distributed.elastic.rendezvous import registry as rdzv_registry  # noqa: E402

from paijob.common import contract, exitcodes  # noqa: E402
from paijob.openpai.taskenv import (  # noqa: E402
    PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX,
    PAI_CURRENT_TASK_ROLE_NAME,
)
from paijob.runtime.config import LaunchConfig  # noqa: E402
from paijob.runtime.console import say  # noqa: E402
from paijob.runtime.failure import Failure, report_root_cause  # noqa: E402
from paijob.runtime.groups import group_alive, signal_group  # noqa: E402
from paijob.runtime.netif import task_address  # noqa: E402
from paijob.runtime.watch.health import (  # noqa: E402
    AgentHealth,
    NotJoined,
    RoundPlan,
    agent_health,
    first_line,
    read_tail,
)

if _user_cpp_log_level is None:
    os.environ.pop(_CPP_LOG_LEVEL, None)

log = logging.getLogger("paijob.runtime")
_TAIL_BYTES = 64 * 1024  # of the message torch's @record wrote for a failed worker


def _accepts(function: Any, name: str) -> bool:
    """Whether ``function`` takes a parameter called ``name`` (torch's signatures vary)."""
    return name in inspect.signature(function).parameters


# torch's elastic agent changed between releases (checked against 2.4.1, 2.11.0, 2.13.0):
# ``LocalElasticAgent.__init__`` takes ``shutdown_timeout`` only from 2.12 on, and
# ``_shutdown`` is ``(death_sig, is_restart)`` in 2.4-2.10, ``(death_sig)`` in 2.11,
# ``(death_sig, timeout)`` from 2.12. Feature-detect once, here.
_INIT_TAKES_SHUTDOWN_TIMEOUT = _accepts(LocalElasticAgent.__init__, "shutdown_timeout")
_SHUTDOWN_TAKES_TIMEOUT = _accepts(LocalElasticAgent._shutdown, "timeout")  # noqa: SLF001


class RestartsEnded(Exception):  # noqa: N818 - a way out of torch's loop, not an error
    """The watch refused a restart (or it could not start): the round's failure ends the node."""


class NeverJoined(Exception):  # noqa: N818 - a way out of torch's loop, not an error
    """A node that started late waited to join at a restart, and the job ended first (:class:`NotJoined`)."""

    def __init__(self, outcome: NotJoined) -> None:
        super().__init__(outcome.why)
        self.outcome = outcome


class PaijobAgent(LocalElasticAgent):
    def __init__(self, spec: WorkerSpec, logs_specs: DefaultLogsSpecs, config: LaunchConfig,
                 worker_env: Mapping[str, str] | None = None) -> None:
        extra: dict[str, Any] = {}
        if _INIT_TAKES_SHUTDOWN_TIMEOUT:
            extra["shutdown_timeout"] = config.grace_period
        super().__init__(
            spec,
            logs_specs,
            start_method="spawn",
            log_line_prefix_template="[rank${rank}]: ",
            **extra,
        )
        self.config = config
        self.grace_period = config.grace_period
        self.node_rank = config.dist.node_rank
        self.nnodes = config.dist.nnodes
        self.assigned_ranks: list[int] = []
        self.rank_pids: dict[int, int] = {}
        self._pgids: set[int] = set()
        # local ranks torch had found failed before anything of ours (torch's close, the watchdog) signalled a
        # worker: a signal among those came from outside paijob-runtime (None: nothing of ours signalled yet)
        self._failed_before_we_stopped: set[int] | None = None
        self.health: AgentHealth | None = None  # the door into the watch: set by run_per_gpu before run()
        self.log_root: str | None = None  # a folder of our own, removed when the node ends
        # What the workers get beyond this process's environment (paijob.common.contract.worker_env)
        self.worker_env = {k: v for k, v in (worker_env or {}).items() if os.environ.get(k) != v}
        self.first_ranks: list[int] = []  # torch's ranks of the first round (a restart on fewer nodes changes them)
        self.plan: RoundPlan | None = None  # the round after a restart: its nodes, its workers' store
        self._first_store: Any = None  # round 0's store (the rendezvous's, under the run id)
        self._round_store: Any = None  # node 0: the store the round's workers meet in (from round 1 on)

    # -- worker lifecycle -------------------------------------------------
    def _start_workers(self, worker_group: Any) -> dict[int, Any]:
        pids = super()._start_workers(worker_group)
        self._failed_before_we_stopped = None
        self._ask_before_closing()
        self._pgids.update(int(pid) for pid in pids.values())
        self.assigned_ranks = [w.global_rank for w in worker_group.workers]
        self.rank_pids = {w.global_rank: int(pids[w.local_rank]) for w in worker_group.workers
                          if w.local_rank in pids}  # what the hang watch believes (watch.launched)
        return pids

    def _setup_local_watchdog(self, envs: dict[int, dict[str, str]]) -> None:
        """torch's hook just before it starts the workers with ``envs``: add the worker contract.

        torch's own per-worker variables (``RANK``, ``LOCAL_RANK``...) win; so the launcher's
        own environment never has to carry what only its workers need.
        """
        plan = self.plan
        for local_rank, env in envs.items():
            envs[local_rank] = {**self.worker_env, **env}
            if plan is not None:  # a round after a restart: this node's place in it
                envs[local_rank].update({"NODE_RANK": str(plan.group_rank), "NNODES": str(len(plan.nodes))})
        super()._setup_local_watchdog(envs=envs)

    def _shutdown(self, *args: Any, **kwargs: Any) -> None:
        """torch's shutdown (called with whatever this torch passes), then our process groups.

        Where torch's ``_shutdown`` has no ``timeout``, the workers are first stopped
        here with ``PContext.close`` so that ``--grace-period`` holds (torch would wait
        its fixed 30 s); torch's own close then finds them gone.
        """
        for pgid in self._pgids:  # a stopped worker handles the SIGTERM below only once continued
            signal_group(pgid, signal.SIGCONT)
        if not _SHUTDOWN_TAKES_TIMEOUT and self._pcontext is not None:
            death_sig = kwargs.get("death_sig", args[0] if args else signal.SIGTERM)
            self._pcontext.close(death_sig, timeout=self.grace_period)
        super()._shutdown(*args, **kwargs)
        # Workers run in their own sessions; whatever they left behind in their
        # process groups (data-loader workers, shells) goes too: no orphans.
        for pgid in self._pgids:
            signal_group(pgid, signal.SIGKILL)

    def _exit_barrier(self) -> None:
        health = self._health()  # told what the main thread does: its phases hold the deadlines
        health.workers_succeeded()
        super()._exit_barrier()
        health.barrier_passed()

    # -- restarts -------------------------------------------------------------
    def _restart_workers(self, worker_group: Any) -> None:
        """torch's loop, the round failed and a restart is left: stop the workers, ask the watch (every node
        agrees), then start the next round's; :class:`RestartsEnded` when the job ends instead."""
        self._stop_workers(worker_group)
        worker_group.state = WorkerState.STOPPED
        health = self._health()
        plan = health.restart(self.plan.round if self.plan else 0, self._host_round_store)
        if plan is None:
            raise RestartsEnded
        self.plan = plan
        self._initialize_workers(worker_group)
        health.restarted()

    def _host_round_store(self) -> int:
        """Node 0: a store for the next round's workers alone, on a port the kernel picks; its port."""
        from datetime import timedelta

        from torch.distributed import TCPStore

        previous = self._round_store
        self._round_store = TCPStore(self.config.dist.master_addr, 0, is_master=True, wait_for_workers=False,
                                     timeout=timedelta(seconds=self.config.rendezvous_timeout))
        del previous  # the last round's workers are gone
        return int(self._round_store.port)

    def _next_round(self, worker_group: Any, plan: RoundPlan) -> None:
        """torch's ``_rendezvous`` for a round after a restart, every node already agreed (the watch's
        barrier): the round's nodes and ranks, its store under the round's prefix, its workers' own store."""
        from torch.distributed import PrefixStore

        spec = worker_group.spec
        size = spec.local_world_size
        group_rank, nodes = plan.group_rank, len(plan.nodes)
        store = PrefixStore(f"round{plan.round}", self._first_store)
        self._store = store  # type: ignore[assignment]  # torch types it None until its rendezvous
        worker_group.workers = [
            Worker(local_rank=i, global_rank=group_rank * size + i, role_rank=group_rank * size + i,
                   world_size=nodes * size, role_world_size=nodes * size)
            for i in range(size)
        ]
        worker_group.store = store
        worker_group.group_rank = group_rank
        worker_group.group_world_size = nodes
        worker_group.master_addr = self.config.dist.master_addr
        worker_group.master_port = plan.port
        self._health().phase("running")

    # -- rendezvous -----------------------------------------------------------
    def _rendezvous(self, worker_group: Any) -> None:
        if self.plan is not None:
            self._next_round(worker_group, self.plan)
            return
        health = self._health()  # told what the main thread does: its phases hold the deadlines
        spec = worker_group.spec
        master = self.config.master
        limit = float(self.config.rendezvous_timeout)
        others = self.nnodes - 1
        if self.node_rank != 0 and self.nnodes > 1:
            # Something accepts connections on the master's port (wait_for_master saw to
            # that); make sure it is a store before torch's client waits on it forever.
            health.phase(
                "handshake", deadline=limit, expired=lambda: self._squatter(master, limit),
                waiting_line=lambda waited: (
                    f"connected to the master's port {master}, waiting for its rendezvous "
                    f"store to answer ({waited:.0f}s of --master-timeout {limit:.0f}s)"
                ),
            )
            health.join_the_others(timeout=limit + 5)
            if self._joined_late(worker_group):
                return
        health.phase(
            "rendezvous",
            deadline=limit + 15,  # torch's own timeout (the same limit) normally fires first
            expired=lambda: Failure(
                node_rank=self.node_rank, rank=None, local_rank=None, returncode=None,
                secondary=False, time=time.time(),
                reason=f"the rendezvous at {master} did not complete within {limit:.0f}s",
            ),
            waiting_line=lambda waited: (
                f"waiting for {others} other node(s) to join the rendezvous at {master} "
                f"({waited:.0f}s of --master-timeout {limit:.0f}s)"
                if others else None
            ),
            first_message_after=10.0,
        )
        super()._rendezvous(worker_group)
        self._first_store = self._store
        self.first_ranks = [w.global_rank for w in worker_group.workers]
        if others:
            say(
                f"all {self.nnodes} nodes joined the rendezvous at {master}; starting "
                f"{spec.local_world_size} worker(s)"
            )
        health.phase("running")
        health.join_the_others()

    def _joined_late(self, worker_group: Any) -> bool:
        """The job is past its first round (this task was retried, ``--min-nodes``): join it at its next
        restart, with the round's count of restarts; False: the job is at its first round, start as usual."""
        late = self._health().late_start()
        if late is None:
            return False
        if isinstance(late, NotJoined):
            raise NeverJoined(late)
        info = worker_group.spec.rdzv_handler.next_rendezvous()  # the static store's client (no barrier)
        self._first_store = info.store if hasattr(info, "store") else info[0]
        self._remaining_restarts = max(0, worker_group.spec.max_restarts - late.round)
        self.plan = late
        self._next_round(worker_group, late)
        return True

    def _squatter(self, master: str, limit: float) -> Failure:
        return Failure(
            node_rank=0, rank=None, local_rank=None, returncode=None, secondary=False,
            time=time.time(),
            reason=(
                f"the master's port {master} accepts connections but did not answer as a "
                f"rendezvous store within --master-timeout ({limit:.0f}s): another process "
                f"holds that port on the master's host, or the master task does not run "
                f"paijob-runtime with the same --port-label"
            ),
        )

    def _health(self) -> AgentHealth:
        assert self.health is not None, "run_per_gpu sets agent.health"
        return self.health

    def end_node(self, failure: Failure) -> None:
        """The watchdog's way out: report the root cause, stop the workers now."""
        self._we_stop()
        report_root_cause(failure, self.node_rank)
        for pgid in self._pgids:
            signal_group(pgid, signal.SIGTERM)
            signal_group(pgid, signal.SIGCONT)  # a stopped worker (T state) handles SIGTERM only once continued
        deadline = time.monotonic() + min(10.0, self.grace_period)
        while time.monotonic() < deadline and any(group_alive(p) for p in self._pgids):
            time.sleep(0.1)
        for pgid in self._pgids:
            signal_group(pgid, signal.SIGKILL)
        self.remove_logs()

    def remove_logs(self) -> None:
        """The workers' output copies torch's tailer reads: ours to remove, not TMPDIR's."""
        if self.log_root is not None:
            shutil.rmtree(self.log_root, ignore_errors=True)

    # -- monitoring ---------------------------------------------------------
    def _ask_before_closing(self) -> None:
        """torch's poll stops every worker (``PContext.close``) in the same call that finds one
        failed: where gloo aborted that one for a collective's size, the others must be asked
        for their calls first, so the watch is told just before torch's close, whoever calls it."""
        pcontext = self._pcontext
        if pcontext is None:
            return
        close = pcontext.close

        def close_after_asking(*args: Any, **kwargs: Any) -> Any:
            self._we_stop()
            self._health().before_workers_stop()
            return close(*args, **kwargs)

        pcontext.close = close_after_asking  # type: ignore[method-assign]

    def _monitor_workers(self, worker_group: Any) -> RunResult:
        result = super()._monitor_workers(worker_group)
        if result.state == WorkerState.FAILED:
            self._health().workers_failed(self._describe_failures(result))
            return result
        if result.state == WorkerState.HEALTHY and self._health().verdict() is not None:
            return RunResult(state=WorkerState.FAILED)
        return result

    def _we_stop(self) -> None:
        """Something of ours is about to signal the workers: the failures torch found until now are theirs."""
        if self._failed_before_we_stopped is None:
            found = getattr(self._pcontext, "_failures", None)
            self._failed_before_we_stopped = set(found) if isinstance(found, dict) else set()

    def _describe_failures(self, result: RunResult) -> list[Failure]:
        """torch's failed workers as paijob's failure records. A worker that we stopped (SIGTERM/SIGKILL once
        another failed) is no cause; one that a signal ended before anything of ours sent one was killed from
        outside (the OOM killer, a user's kill): a cause, said at once. What a worker's own error says (a
        peer's knock-on?) its record tells the watch, not its traceback."""
        candidates = []
        before = self._failed_before_we_stopped
        for global_rank, failure in result.failures.items():
            signalled = failure.exitcode in (-signal.SIGTERM, -signal.SIGKILL)
            by_us = signalled and before is not None and failure.local_rank not in before
            candidates.append(
                Failure(
                    node_rank=self.node_rank,
                    rank=global_rank,
                    local_rank=failure.local_rank,
                    returncode=failure.exitcode,
                    secondary=by_us,
                    time=float(failure.timestamp),
                    tail=self._tail(failure),
                    error=killed_from_outside(failure.exitcode) if signalled and not by_us else "",
                )
            )
        return candidates

    def _tail(self, failure: Any) -> str:
        data = failure.error_file_data or {}
        message = data.get("message") if isinstance(data, dict) else None
        if isinstance(message, dict):  # written by @record in the worker
            text = str(message.get("message", ""))
            stack = message.get("extraInfo", {}).get("py_callstack")
            return (stack or text)[-_TAIL_BYTES:]
        return self.log_tail(failure.local_rank)

    def log_tail(self, local_rank: int) -> str:
        """The last traceback (or lines) in the output copy of local rank ``local_rank``."""
        return read_tail(self._pcontext.stderrs.get(local_rank) if self._pcontext is not None else None)


def killed_from_outside(returncode: int) -> str:
    """What a worker ended by a signal that paijob-runtime did not send died of, for the record."""
    name = signal.Signals(-returncode).name
    hint = " (the OOM killer? `dmesg` on the host says)" if returncode == -signal.SIGKILL else ""
    return f"killed by {name} from outside paijob-runtime{hint}"


def _connect_store(master_addr: str, master_port: int, run_id: str, timeout: float) -> Any:
    """paijob's own client of the rendezvous store (torch's agent holds the lock of its own)."""
    from datetime import timedelta

    from torch.distributed import PrefixStore, TCPStore

    client = TCPStore(
        master_addr, master_port, is_master=False, timeout=timedelta(seconds=timeout),
        wait_for_workers=False,
    )
    return PrefixStore(run_id, client)


def _port_taken(error: BaseException) -> bool:
    text = str(error)
    return "EADDRINUSE" in text or "address already in use" in text.lower()


def _who() -> str:
    """``role:index at address`` of this task, for other nodes' messages about it."""

    role = os.environ.get(PAI_CURRENT_TASK_ROLE_NAME, "")
    index = os.environ.get(PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX, "")
    found = task_address(os.environ)
    where = f" at {found[0]}" if found else ""
    return f"{role}:{index}{where}" if role else where.strip()


def _quiet_torch_elastic(verbose: bool) -> None:
    """torch's elastic agent logs what paijob reports better, at WARNING and ERROR.

    A failure would otherwise print ``W... Sending process N closing signal SIGTERM``
    and ``E... failed (exitcode: 1) local_rank: ...`` before paijob's own line, and a
    stop ``Received 15 death signal``. paijob names the root cause and the stop
    itself, so those loggers only speak with ``-v`` or a ``LOGLEVEL`` of the user's.
    Called once the rendezvous handler is made: every elastic module is loaded.
    """
    if verbose or "LOGLEVEL" in os.environ:
        return
    prefix = "torch.distributed.elastic"
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if (name == prefix or name.startswith(prefix + ".")) and isinstance(logger, logging.Logger):
            logger.setLevel(logging.CRITICAL)
    logging.getLogger(prefix).setLevel(logging.CRITICAL)  # loggers made later inherit it


def _worker_spec(config: LaunchConfig) -> WorkerSpec:
    dist = config.dist
    params = RendezvousParameters(
        backend="static",
        endpoint=config.master,
        run_id=config.run_id,
        min_nodes=dist.nnodes,
        max_nodes=dist.nnodes,
        rank=dist.node_rank,
        timeout=config.rendezvous_timeout,
    )
    return WorkerSpec(
        role="trainer",
        local_world_size=dist.nproc_per_node,
        entrypoint=sys.executable,
        args=config.command.python_args(),
        rdzv_handler=rdzv_registry.get_rendezvous_handler(params),
        max_restarts=config.max_restarts,
        monitor_interval=0.1,
        master_addr=dist.master_addr,
        master_port=dist.master_port,
    )


def run_per_gpu(config: LaunchConfig, worker_env: Mapping[str, str] | None = None
                ) -> tuple[int, Failure | None]:
    """Run this node's workers; return (exit code, root cause or None).

    Without ``--log-dir`` the workers' output copies (torch's tailer reads them; the
    root cause's tail comes from them) live in a folder of this run's own under
    ``TMPDIR``, removed when the node ends, however it ends.
    """
    spec = _worker_spec(config)
    log_root = None if config.log_dir else tempfile.mkdtemp(prefix="paijob-runtime-logs-")
    logs_specs = DefaultLogsSpecs(log_dir=config.log_dir or log_root, redirects=Std.ALL,
                                  tee=Std.ALL)
    agent = PaijobAgent(spec, logs_specs, config, worker_env)
    agent.log_root = log_root
    dist = config.dist
    health = agent.health = agent_health(
        config, agent,
        folder=agent.worker_env.get(contract.HANG_DIR) or os.environ.get(contract.HANG_DIR),
        connect=lambda: _connect_store(dist.master_addr, dist.master_port, config.run_id,
                                       config.heartbeat_timeout),
        end_node=agent.end_node, say=say, who=_who(),
    )
    os.environ.setdefault("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT")
    _quiet_torch_elastic(config.verbose)
    health.start()
    try:
        return _run_agent(agent, health, config)
    finally:
        health.stop()
        agent.remove_logs()


def _run_agent(agent: PaijobAgent, health: AgentHealth, config: LaunchConfig
               ) -> tuple[int, Failure | None]:
    dist = config.dist
    try:
        result = agent.run()
    except SignalException as error:
        return health.stopped_by(error.sigval), None
    except RestartsEnded:
        result = None
    except NeverJoined as late:
        health.ended()
        say(late.outcome.why)
        return late.outcome.code, late.outcome.root
    except Exception as error:
        health.ended()
        if agent.assigned_ranks:  # workers had started: a bug, keep the traceback
            raise
        raise _rendezvous_error(config, error) from error
    if agent.first_ranks and agent.first_ranks != config.expected_ranks():
        log.warning(
            "paijob-runtime: torch assigned ranks %s, expected %s", agent.first_ranks,
            config.expected_ranks(),
        )
    if result is not None and result.state == WorkerState.SUCCEEDED:
        # The exit barrier released the store (barrier_passed): no store call here.
        health.ended()
        return exitcodes.OK, None
    root = health.explain_failure()
    if root is None:
        return exitcodes.INFRA_FAILURE, Failure(
            node_rank=dist.node_rank, rank=None, local_rank=None, returncode=None,
            secondary=False, time=time.time(), reason="the worker group failed for an unknown reason",
        )
    return root.exit_code, root


def _rendezvous_error(config: LaunchConfig, error: Exception) -> exitcodes.InfrastructureError:
    """The node never got its workers started: say where the rendezvous broke, in one line."""
    dist = config.dist
    if dist.node_rank == 0 and _port_taken(error):
        return exitcodes.InfrastructureError(
            f"node rank 0 cannot host the rendezvous store: port {dist.master_port} on this "
            f"host is taken by another process ({first_line(error)}). OpenPAI gives each task "
            f"its declared ports; a process outside this task holds it. The retry of this "
            f"task (exit 143) normally gets a free port"
        )
    return exitcodes.InfrastructureError(
        f"rendezvous at {config.master} failed for node rank {dist.node_rank} of "
        f"{dist.nnodes}: {first_line(error).rstrip('.')}. Node rank 0 waits up to "
        f"--master-timeout ({config.rendezvous_timeout}s) for every node to join; check that "
        f"all {dist.nnodes} tasks are running (extras.gangAllocation keeps them starting "
        f"together) and that the port is not taken by another process on the master's host"
    )
