"""``per-gpu`` mode: torch's elastic agent, plus cross-node failure propagation.

Imports torch (only ``paijob.runtime.launch`` imports this module, lazily).

torch's :class:`LocalElasticAgent` starts one worker per local rank with the
``static`` rendezvous (node rank fixed, ``max_restarts=0``), sets ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``... and stops every local worker when one fails.
The rendezvous store (a ``TCPStore`` served by node rank 0's agent at
``MASTER_ADDR:MASTER_PORT``) is shared with the workers
(``TORCHELASTIC_USE_AGENT_STORE=True``), so ``init_process_group("env://")``
in the workers joins it as a client.

What torch alone does not do is tell the *other* nodes: their workers would
sit in a collective until a timeout. :class:`PaijobAgent` adds, over that same
store:

* a failure record (``paijob/failure/<node>``): written by the node whose
  worker failed, polled by every other node about once a second, which then
  stops its own workers and exits with the root cause's code;
* heartbeats (``paijob/hb/<node>``), counted by node 0: a node whose agent
  vanished without a record is reported as lost (an infrastructure failure);
* non-zero nodes notice node 0 vanishing as a store error;
* ``paijob/finished``: node 0 hosts the store, so after a failure it lingers
  (a few seconds at most) until the others have read the record.
"""

from __future__ import annotations

import inspect
import logging
import os
import signal
import time
from typing import Any

from torch.distributed.elastic.agent.server.api import RunResult, WorkerSpec, WorkerState
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException, Std
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous import registry as rdzv_registry
from torch.distributed.elastic.utils.store import store_timeout

from paijob.runtime import exitcodes
from paijob.runtime.failures import Failure, choose_root_cause, looks_secondary, strip_rank_prefix

log = logging.getLogger("paijob.runtime")

FAILURE_COUNT_KEY = "paijob/failures"
FAILURE_KEY = "paijob/failure/{node}"
HEARTBEAT_KEY = "paijob/hb/{node}"
DONE_KEY = "paijob/done/{node}"
FINISHED_KEY = "paijob/finished"

_TAIL_BYTES = 64 * 1024
_TAIL_LINES = 40
_STORE_OP_TIMEOUT = 10.0


def _accepts(function: Any, name: str) -> bool:
    """Whether ``function`` takes a parameter called ``name`` (torch's signatures vary)."""
    return name in inspect.signature(function).parameters


# torch's elastic agent changed between releases (checked against 2.4.1, 2.11.0, 2.13.0):
# ``LocalElasticAgent.__init__`` takes ``shutdown_timeout`` only from 2.12 on, and
# ``_shutdown`` is ``(death_sig, is_restart)`` in 2.4-2.10, ``(death_sig)`` in 2.11,
# ``(death_sig, timeout)`` from 2.12. Feature-detect once, here.
_INIT_TAKES_SHUTDOWN_TIMEOUT = _accepts(LocalElasticAgent.__init__, "shutdown_timeout")
_SHUTDOWN_TAKES_TIMEOUT = _accepts(LocalElasticAgent._shutdown, "timeout")  # noqa: SLF001


class PaijobAgent(LocalElasticAgent):
    def __init__(
        self,
        spec: WorkerSpec,
        logs_specs: DefaultLogsSpecs,
        *,
        node_rank: int,
        nnodes: int,
        grace_period: int,
        heartbeat_timeout: float,
        log_line_prefix_template: str | None,
        poll_interval: float = 1.0,
    ) -> None:
        extra: dict[str, Any] = {}
        if _INIT_TAKES_SHUTDOWN_TIMEOUT:
            extra["shutdown_timeout"] = grace_period
        super().__init__(
            spec,
            logs_specs,
            start_method="spawn",
            log_line_prefix_template=log_line_prefix_template,
            **extra,
        )
        self.grace_period = grace_period
        self.node_rank = node_rank
        self.nnodes = nnodes
        self.heartbeat_timeout = heartbeat_timeout
        self.poll_interval = poll_interval
        self.local_failure: Failure | None = None
        self.remote_failures: list[Failure] = []
        self.assigned_ranks: list[int] = []
        self._pgids: set[int] = set()
        self._last_poll = 0.0
        self._heartbeats: dict[int, tuple[int, float]] = {}
        self.lost_nodes: set[int] = set()

    # -- worker lifecycle -------------------------------------------------
    def _start_workers(self, worker_group: Any) -> dict[int, Any]:
        pids = super()._start_workers(worker_group)
        self._pgids.update(int(pid) for pid in pids.values())
        self.assigned_ranks = [w.global_rank for w in worker_group.workers]
        return pids

    def _shutdown(self, *args: Any, **kwargs: Any) -> None:
        """torch's shutdown (called with whatever this torch passes), then our process groups.

        Where torch's ``_shutdown`` has no ``timeout``, the workers are first stopped
        here with ``PContext.close`` so that ``--grace-period`` holds (torch would wait
        its fixed 30 s); torch's own close then finds them gone.
        """
        if not _SHUTDOWN_TAKES_TIMEOUT and self._pcontext is not None:
            death_sig = kwargs.get("death_sig", args[0] if args else signal.SIGTERM)
            self._pcontext.close(death_sig, timeout=self.grace_period)
        super()._shutdown(*args, **kwargs)
        # Workers run in their own sessions; whatever they left behind in their
        # process groups (data-loader workers, shells) goes too: no orphans.
        for pgid in self._pgids:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _exit_barrier(self) -> None:
        self._store_call(lambda s: s.set(DONE_KEY.format(node=self.node_rank), "1"))
        super()._exit_barrier()

    # -- monitoring ---------------------------------------------------------
    def _monitor_workers(self, worker_group: Any) -> RunResult:
        result = super()._monitor_workers(worker_group)
        if result.state == WorkerState.FAILED:
            self.local_failure = self._describe_local_failure(result)
            self._publish(self.local_failure)
            return result
        if result.state != WorkerState.HEALTHY or self.nnodes == 1:
            return result
        now = time.monotonic()
        if now - self._last_poll < self.poll_interval:
            return result
        self._last_poll = now
        store: Any = self._store
        try:
            with store_timeout(store, _STORE_OP_TIMEOUT):
                store.add(HEARTBEAT_KEY.format(node=self.node_rank), 1)
                if int(store.add(FAILURE_COUNT_KEY, 0)) > 0:
                    self.remote_failures = self.read_failures()
                    return RunResult(state=WorkerState.FAILED)
                if self.node_rank == 0:
                    lost = self._lost_peers(store, now)
                    if lost:
                        self.lost_nodes.update(lost)
                        self.remote_failures = [
                            Failure(
                                node_rank=lost[0], rank=None, local_rank=None, returncode=None,
                                secondary=False, time=time.time(),
                                reason=(
                                    f"node rank {lost[0]} stopped sending heartbeats for "
                                    f"{self.heartbeat_timeout:.0f}s: its task was lost "
                                    f"(node failure, container killed, or network partition)"
                                ),
                            )
                        ]
                        return RunResult(state=WorkerState.FAILED)
        except Exception as error:  # the store lives in node 0's agent
            self.remote_failures = [
                Failure(
                    node_rank=0, rank=None, local_rank=None, returncode=None, secondary=True,
                    time=time.time(),
                    reason=(
                        f"lost the rendezvous store at {worker_group.master_addr}:"
                        f"{worker_group.master_port} hosted by node rank 0 ({error}); "
                        f"the master task stopped or its node was lost"
                    ),
                )
            ]
            return RunResult(state=WorkerState.FAILED)
        return result

    def _lost_peers(self, store: Any, now: float) -> list[int]:
        lost = []
        for node in range(1, self.nnodes):
            if store.check([DONE_KEY.format(node=node)]):
                continue
            count = int(store.add(HEARTBEAT_KEY.format(node=node), 0))
            seen = self._heartbeats.get(node)
            if seen is None or seen[0] != count:
                self._heartbeats[node] = (count, now)
            elif now - seen[1] > self.heartbeat_timeout:
                lost.append(node)
        return lost

    def _describe_local_failure(self, result: RunResult) -> Failure:
        candidates = []
        for global_rank, failure in result.failures.items():
            tail = self._tail(failure)
            # Workers we stopped ourselves (SIGTERM/SIGKILL after another failed) are not causes.
            killed_by_us = failure.exitcode in (-signal.SIGTERM, -signal.SIGKILL)
            candidates.append(
                Failure(
                    node_rank=self.node_rank,
                    rank=global_rank,
                    local_rank=failure.local_rank,
                    returncode=failure.exitcode,
                    secondary=killed_by_us or looks_secondary(tail),
                    time=float(failure.timestamp),
                    tail=tail,
                )
            )
        root = choose_root_cause(candidates)
        assert root is not None
        return root

    def _tail(self, failure: Any) -> str:
        data = failure.error_file_data or {}
        message = data.get("message") if isinstance(data, dict) else None
        if isinstance(message, dict):  # written by @record in the worker
            text = str(message.get("message", ""))
            stack = message.get("extraInfo", {}).get("py_callstack")
            return (stack or text)[-_TAIL_BYTES:]
        path = None
        if self._pcontext is not None:
            path = self._pcontext.stderrs.get(failure.local_rank)
        if not path or not os.path.exists(path):
            return ""
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - _TAIL_BYTES))
            text = fh.read().decode("utf-8", errors="replace")
        start = text.rfind("Traceback (most recent call last)")
        lines = (text[start:] if start >= 0 else text).rstrip().splitlines()
        # torch prefixes a worker's uncaught traceback lines with "[rankN]:"; drop that.
        lines = [strip_rank_prefix(line) for line in lines]
        return "\n".join(lines[-_TAIL_LINES:])

    # -- store helpers --------------------------------------------------------
    def _store_call(self, fn: Any) -> Any:
        store = getattr(self, "_store", None)
        if store is None:
            return None
        try:
            with store_timeout(store, _STORE_OP_TIMEOUT):
                return fn(store)
        except Exception as error:
            log.debug("store operation failed: %s", error)
            return None

    def _publish(self, failure: Failure) -> None:
        if self.nnodes == 1:
            return

        def publish(store: Any) -> None:
            store.set(FAILURE_KEY.format(node=self.node_rank), failure.to_json())
            store.add(FAILURE_COUNT_KEY, 1)

        self._store_call(publish)

    def read_failures(self) -> list[Failure]:
        def read(store: Any) -> list[Failure]:
            found = []
            for node in range(self.nnodes):
                key = FAILURE_KEY.format(node=node)
                if store.check([key]):
                    found.append(Failure.from_json(store.get(key)))
            return found

        return self._store_call(read) or []

    def wait_for_primary_failure(self, timeout: float) -> list[Failure]:
        """When our own failure looks like a consequence, give the real one time to arrive."""
        deadline = time.monotonic() + timeout
        while True:
            records = self.read_failures()
            if any(not f.secondary for f in records) or time.monotonic() >= deadline:
                return records
            time.sleep(0.2)

    def finish_after_failure(self, linger: float) -> None:
        """Count this node out; node 0 (the store host) lingers so the others can read why."""
        self._store_call(lambda s: s.add(FINISHED_KEY, 1))
        if self.node_rank != 0 or self.nnodes == 1:
            return
        deadline = time.monotonic() + linger
        while time.monotonic() < deadline:
            done = self._store_call(lambda s: int(s.add(FINISHED_KEY, 0)))
            if done is None or done >= self.nnodes - len(self.lost_nodes):
                return
            time.sleep(0.2)


def run_per_gpu(
    *,
    master_addr: str,
    master_port: int,
    node_rank: int,
    nnodes: int,
    nproc: int,
    args: tuple[str, ...],
    run_id: str,
    rendezvous_timeout: int,
    grace_period: int,
    heartbeat_timeout: float,
    log_dir: str | None,
    expected_ranks: list[int],
    prefix_output: bool = True,
) -> tuple[int, Failure | None]:
    """Run this node's workers; return (exit code, root cause or None)."""
    import sys

    params = RendezvousParameters(
        backend="static",
        endpoint=f"{master_addr}:{master_port}",
        run_id=run_id,
        min_nodes=nnodes,
        max_nodes=nnodes,
        rank=node_rank,
        timeout=rendezvous_timeout,
    )
    spec = WorkerSpec(
        role="trainer",
        local_world_size=nproc,
        entrypoint=sys.executable,
        args=args,
        rdzv_handler=rdzv_registry.get_rendezvous_handler(params),
        max_restarts=0,
        monitor_interval=0.1,
        master_addr=master_addr,
        master_port=master_port,
    )
    logs_specs = DefaultLogsSpecs(log_dir=log_dir, redirects=Std.ALL, tee=Std.ALL)
    agent = PaijobAgent(
        spec,
        logs_specs,
        node_rank=node_rank,
        nnodes=nnodes,
        grace_period=grace_period,
        heartbeat_timeout=heartbeat_timeout,
        log_line_prefix_template="[rank${rank}]: " if prefix_output else None,
    )
    os.environ.setdefault("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT")
    try:
        result = agent.run()
    except SignalException as error:
        agent.finish_after_failure(linger=0)
        return exitcodes.from_signal(error.sigval), None
    except Exception as error:
        if agent.assigned_ranks:  # workers had started: a bug, keep the traceback
            raise
        raise exitcodes.InfrastructureError(
            f"rendezvous at {master_addr}:{master_port} failed for node rank {node_rank} of "
            f"{nnodes}: {str(error).rstrip('.')}. Node rank 0 waits up to --master-timeout "
            f"({rendezvous_timeout}s) for every node to join; check that all {nnodes} tasks "
            f"are running (extras.gangAllocation keeps them starting together) and that the "
            f"port is not taken by another process on the master's host"
        ) from error
    if agent.assigned_ranks and agent.assigned_ranks != expected_ranks:
        log.warning(
            "paijob-runtime: torch assigned ranks %s, expected %s", agent.assigned_ranks,
            expected_ranks,
        )
    if result is not None and result.state == WorkerState.SUCCEEDED:
        # No store call here: torch's exit barrier has passed, so node 0 may
        # already have closed the store, and c10d would print a C++ trace on
        # the other nodes for a connection nobody needs any more.
        return exitcodes.OK, None
    records: list[Failure] = []
    if agent.local_failure is not None:
        records.append(agent.local_failure)
    records.extend(agent.remote_failures)
    if nnodes > 1 and not any(not f.secondary for f in records):
        records.extend(agent.wait_for_primary_failure(timeout=2.0))
    root = choose_root_cause(records)
    agent.finish_after_failure(linger=5.0)
    if root is None:
        return exitcodes.INFRA_FAILURE, Failure(
            node_rank=node_rank, rank=None, local_rank=None, returncode=None, secondary=False,
            time=time.time(), reason="the worker group failed for an unknown reason",
        )
    return root.exit_code, root
