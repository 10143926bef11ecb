"""The front door into the watch (paijob.runtime.watch.health): either launch mode starts, stops and
asks the watch through one interface, and the failure accounting reads the launcher only through
the torch-free Launcher Protocol, so a fake launcher drives it here, without torch."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from runtime_helpers import ROOT

from paijob.runtime.config import HangSettings, LaunchConfig, WorkerCommand
from paijob.runtime.env import DistEnv
from paijob.runtime.failure import Failure
from paijob.runtime.watch.health import (
    AgentHealth,
    NodeHealth,
    PerGpuHealth,
    ProcessHealth,
    agent_health,
    process_health,
)
from paijob.runtime.watch.node.accounting import Accounting, read_tail
from paijob.runtime.watch.ranks import RankState
from paijob.runtime.watch.settings import WatchSettings

CLOSED = "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer"


class FakeLauncher:
    """Two workers (ranks 2 and 3 of node 1), their pids and what their output ends with."""

    node_rank = 1

    def __init__(self, pids: dict[int, int], tails: list[str]) -> None:
        self.assigned_ranks = list(pids)
        self.rank_pids = pids
        self.tails = tails

    def log_tail(self, local_rank: int) -> str:
        return self.tails[local_rank]


class FakeRecords:
    """The node's failure records: ``later`` is what the other nodes publish while this one waits."""

    def __init__(self, now: list[Failure], later: list[Failure]) -> None:
        self.now, self.later = now, later
        self.published: list[Failure] = []
        self.waited: list[float] = []

    def records(self) -> list[Failure]:
        return list(self.now)

    def publish(self, failure: Failure) -> None:
        self.published.append(failure)

    def wait_for(self, enough: Callable[[list[Failure]], bool], timeout: float) -> list[Failure]:
        self.waited.append(timeout)
        return [*self.now, *self.later]

    def wait_for_primary(self, have: list[Failure], timeout: float) -> list[Failure]:
        return self.wait_for(lambda records: any(not f.secondary for f in [*have, *records]), timeout)

    def wait_for_account(self, timeout: float) -> list[Failure]:
        return self.wait_for(lambda records: any(f.overrides for f in records), timeout)


def ended() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def worker(rank: int, tail: str, *, secondary: bool = False, at: float = 10.0) -> Failure:
    return Failure(node_rank=1, rank=rank, local_rank=rank - 2, returncode=1, secondary=secondary,
                   time=at, tail=tail)


def config(nnodes: int = 1, node_rank: int = 0, hang: float = 0) -> LaunchConfig:
    dist = DistEnv(master_addr="127.0.0.1", master_port=29500, node_rank=node_rank, nnodes=nnodes,
                   nproc_per_node=2, world_size=2 * nnodes, rank_offset=2 * node_rank, backend="gloo")
    return LaunchConfig(dist=dist, command=WorkerCommand(script="train.py"), heartbeat_timeout=7.0,
                        hang=HangSettings(timeout=hang))


def test_the_door_and_the_accounting_load_no_torch():
    probe = ("import sys, paijob.runtime.watch.health, paijob.runtime.watch.node.accounting\n"
             "print(sorted(m for m in ('torch', 'paijob.runtime.agent') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_exited_and_stopped_workers_come_from_the_launchers_ranks_pids_and_tails():
    running = subprocess.Popen(["sleep", "30"])
    launcher = FakeLauncher({2: ended(), 3: running.pid}, ["ValueError: bad label", "still training"])
    accounting = Accounting(launcher, FakeRecords([], []), nnodes=2, world_size=4)
    try:
        (exited,) = accounting.exited_workers()
        assert (exited.rank, exited.local_rank, exited.tail) == (2, 0, "ValueError: bad label")
        assert accounting.exited_workers() == []  # each exit is looked at once
        stopped = accounting.stopped_workers()
        assert [(f.rank, f.local_rank, f.tail) for f in stopped] == [
            (2, 0, "ValueError: bad label"), (3, 1, "still training")]
        assert all(f.secondary and f.returncode == -signal.SIGTERM for f in stopped)
    finally:
        running.kill()
        running.wait()


def test_a_workers_failure_is_published_as_its_root_cause_with_its_ranks_calls():
    records = FakeRecords([], [])
    accounting = Accounting(FakeLauncher({2: 1, 3: 1}, ["", ""]), records, nnodes=2, world_size=4)
    accounting.recorded_calls = {"3": [{"seq": 6, "op": "all_reduce"}]}
    consequence, cause = worker(2, CLOSED, secondary=True, at=9.0), worker(3, "ValueError: bad label")
    root = accounting.workers_failed([consequence, cause])
    assert root is cause and root.calls == accounting.recorded_calls
    assert records.published == [cause]
    assert accounting.root_cause() is cause


def test_a_node_whose_workers_only_lost_a_peer_waits_for_the_cause_on_several_nodes_only():
    lost = Failure(node_rank=0, rank=None, local_rank=None, returncode=None, secondary=False, time=11.0,
                   reason="node rank 0 stopped sending heartbeats")
    records = FakeRecords([], [lost])
    accounting = Accounting(FakeLauncher({2: 1, 3: 1}, ["", ""]), records, nnodes=2, world_size=4,
                            primary_wait=12.0)
    accounting.workers_failed([worker(2, CLOSED, secondary=True)])
    assert accounting.root_cause() is lost and records.waited == [12.0]
    alone = FakeRecords([], [lost])
    accounting = Accounting(FakeLauncher({2: 1}, [""]), alone, nnodes=1, world_size=2, primary_wait=12.0)
    consequence = worker(2, CLOSED, secondary=True)
    accounting.workers_failed([consequence])
    assert accounting.root_cause() is consequence and alone.waited == []


def test_a_tail_is_the_last_traceback_without_torchs_rank_prefix(tmp_path: Path):
    log = tmp_path / "stderr.log"
    log.write_text("[rank1]: step 1\nTraceback (most recent call last)\n[rank1]:   File \"train.py\", "
                   "line 3\nTraceback (most recent call last)\n[rank1]: ValueError: bad label\n")
    assert read_tail(str(log)) == "Traceback (most recent call last)\nValueError: bad label"
    assert read_tail(str(tmp_path / "missing")) == "" and read_tail(None) == ""


def test_the_per_gpu_node_watch_starts_and_stops_with_the_nodes_other_watchers():
    ends: list[Failure] = []
    health = PerGpuHealth(WatchSettings.of(config()), FakeLauncher({0: 1, 1: 1}, ["", ""]), folder=None,
                          connect=lambda: None, end_node=ends.append, say=lambda line: None)
    watchdog = health.node._watchdog  # noqa: SLF001 - the thread the group starts
    assert not watchdog._thread.is_alive()  # noqa: SLF001 - built, not started
    health.start()
    try:
        assert watchdog._thread.is_alive()  # noqa: SLF001
        assert health.verdict() is None
        lost = worker(2, "", at=1.0)
        health.node.declare(lost)
        assert health.verdict() is lost  # what ends this node's workers now
    finally:
        health.stop()
    watchdog.join(5.0)
    assert not watchdog._thread.is_alive() and ends == []  # noqa: SLF001


def test_either_launch_mode_asks_the_watch_through_one_interface():
    one = process_health(config(), {}, lambda line: None, watch_port=False)
    per_gpu = agent_health(config(), FakeLauncher({0: 1}, [""]), folder=None, connect=lambda: None,
                           end_node=lambda failure: None, say=lambda line: None)
    assert isinstance(one, ProcessHealth) and isinstance(per_gpu, AgentHealth)
    try:
        for health in (one, per_gpu):
            assert isinstance(health, NodeHealth)
            assert health.verdict() is None  # --hang-timeout 0
    finally:
        per_gpu.stop()
        one.stop()


class FakeHang:
    """The hang watch's part of an account: no timeout to explain, and the ranks that left."""

    def __init__(self, left: list) -> None:  # type: ignore[type-arg]
        self.left = left

    def explain_timeout(self, failures: list[Failure]) -> None:
        return None

    def left_ranks(self) -> list:  # type: ignore[type-arg]
        return self.left


def left_rank(rank: int, line: int = 12) -> RankState:
    return RankState(rank=rank, node_rank=1, host="10.0.0.1", local_rank=rank - 2, idle_for=3.0, busy=False,
                     cpu_share=0.0, wait=None, collective=False, first_progress=True, stale_for=0.0,
                     where=[["/job/train.py", line, "<module>"]], exited=True, left=True)


def test_a_rank_that_left_is_the_cause_of_its_peers_lost_connections_and_nothing_else():
    records = FakeRecords([], [])
    accounting = Accounting(FakeLauncher({2: 1, 3: 1}, ["", ""]), records, nnodes=2, world_size=4,
                            hang=FakeHang([left_rank(3)]), primary_wait=12.0)  # type: ignore[arg-type]
    accounting.workers_failed([worker(2, CLOSED, secondary=True)])
    root = accounting.root_cause()
    assert root is not None and root.left and records.published[-1] is root
    assert root.headline() == (
        "rank 3 (node rank 1, host 10.0.0.1, local rank 1) exited with code 0 at train.py:12 while ranks "
        "0-2 still needed it: it left the job with its process group up, and the collectives it was in "
        "failed (a script that ends early, or a sys.exit(0) on one rank)")
    assert root.exit_code == 1 and records.waited == []  # named at once: no wait for another cause
    # a failure of its own beats a rank that left (a script's end without destroy_process_group is common)
    records = FakeRecords([], [])
    accounting = Accounting(FakeLauncher({2: 1, 3: 1}, ["", ""]), records, nnodes=2, world_size=4,
                            hang=FakeHang([left_rank(3)]), primary_wait=12.0)  # type: ignore[arg-type]
    cause = worker(2, "ValueError: bad label", at=99.0)
    accounting.workers_failed([cause])
    assert accounting.root_cause() is cause and all(not f.left for f in records.published)


def test_a_restart_through_the_door_decides_tells_and_refuses_the_same_failure_twice(tmp_path: Path):
    """One node, no torch: a worker's failure starts round 1 (its store from the launcher, the restart said and
    kept); the same failure once more ends the node with it, in one line."""
    import dataclasses

    from paijob.common import records

    said: list[str] = []
    settings = dataclasses.replace(WatchSettings.of(dataclasses.replace(config(), max_restarts=2)),
                                   restarts_file=str(tmp_path / "restarts.json"))
    launcher = FakeLauncher({0: 1, 1: 1}, ["", ""])
    launcher.node_rank = 0
    health = PerGpuHealth(settings, launcher, folder=None, connect=lambda: None, end_node=lambda f: None,
                          say=said.append)
    boom = dataclasses.replace(worker(1, "", at=100.0), node_rank=0, local_rank=1, error="ValueError: boom",
                               where="train.py:9 in step")
    health.start()
    try:
        health.workers_failed([boom])
        plan = health.restart(0, host_store=lambda: 4321)
        assert plan is not None and (plan.round, plan.nodes, plan.port, plan.group_rank) == (1, (0,), 4321, 0)
        health.restarted()
        line = next(s for s in said if s.startswith("restart 1 of 2 after "))
        assert line.startswith("restart 1 of 2 after worker rank 1 (node rank 0, local rank 1) failed with exit "
                               "code 1: ValueError: boom (train.py:9 in step): every node's workers started again "
                               "(1 node(s), world size 2), ")
        told = records.read_restarts(tmp_path / "restarts.json")
        assert [(r.number, r.limit, r.signature) for r in told] == [(1, 2, "ValueError: boom at train.py:9 in step")]
        assert records.restarts_in("paijob-runtime: " + said[-1]) == told  # the record after the line
        health.workers_failed([dataclasses.replace(boom, time=200.0)])
        assert health.restart(1, host_store=lambda: 1 / 0) is None  # no store is started for a refused round
        assert said[-1] == ("the same failure twice in a row: ValueError: boom at train.py:9 in step (before "
                            "restart 1 and after it): a bug, not a fault; not restarting")
        root = health.explain_failure()
        assert root is not None and root.error == "ValueError: boom" and root.time == 200.0
    finally:
        health.stop()
