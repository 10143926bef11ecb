"""A store whose host process stopped (issue 43 row 4): the link tells silence from absence, and node 0's
watch judges a stopped store host with the other nodes' ranks as last read, counted but not judged.

The whole jobs (a stopped rank 0, a frozen node 0, in both modes) are in test_hang_shapes.py (slow stage).
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from paijob.runtime.config import HangSettings
from paijob.runtime.watch.channel import Channel
from paijob.runtime.watch.hang.doctor import HangWatch
from paijob.runtime.watch.node import storelink
from paijob.runtime.watch.node.storelink import StoreLink
from paijob.runtime.watch.ranks import Look, RankState


class Store:
    def get(self, key: str) -> bytes:
        return b"x"


def linked(connects: list[float]) -> StoreLink:
    def connect() -> Store:
        connects.append(time.monotonic())
        return Store()

    link = StoreLink("127.0.0.1", 1, prefix="p", node_rank=1, nnodes=2, connect=connect)
    assert link.call(lambda store: store.get("k"), timeout=1.0) == b"x"
    return link


def test_a_call_that_lasts_its_timeout_starts_the_silence_and_the_next_try_waits_a_quiet_retry(monkeypatch):
    monkeypatch.setattr(storelink, "QUIET_RETRY", 0.6)
    connects: list[float] = []
    link = linked(connects)
    assert link.unanswered_for() == 0.0
    release = threading.Event()
    assert link.call(lambda store: release.wait(10), timeout=0.2) is None  # the store's process stopped
    assert link.unanswered_for() >= 0.2  # counted from when the call began
    assert link.call(lambda store: store.get("k")) is None  # no new connection before the quiet retry
    assert len(connects) == 1
    time.sleep(0.7)
    assert link.call(lambda store: store.get("k")) == b"x"  # tried again, it answers: silence over
    assert len(connects) == 2 and link.unanswered_for() == 0.0
    release.set()


def test_a_call_refused_at_once_is_absence_not_silence(monkeypatch):
    monkeypatch.setattr(storelink, "RECONNECT_EVERY", 0.1)

    def refused(store: object) -> bytes:
        raise RuntimeError("Connection reset by peer")  # the store is gone, not stopped

    connects: list[float] = []
    link = linked(connects)
    assert link.call(refused, timeout=1.0) is None
    assert link.unanswered_for() == 0.0
    time.sleep(0.15)
    assert link.call(lambda store: store.get("k")) == b"x" and len(connects) == 2  # tried again soon


def test_a_store_client_timeout_of_its_own_is_silence_too(monkeypatch):
    """torch's TCPStore raises its own timeout at about the same moment as our bound: judged by how long
    the call lasted, not by which of the two fired."""
    def own_timeout(store: object) -> bytes:
        time.sleep(0.45)
        raise RuntimeError("Socket Timeout")

    link = linked([])
    assert link.call(own_timeout, timeout=0.5) is None
    assert link.unanswered_for() > 0.0


def test_closing_does_not_wait_out_calls_into_a_store_silent_past_a_quiet_retry(monkeypatch):
    monkeypatch.setattr(storelink, "QUIET_RETRY", 0.3)
    monkeypatch.setattr(storelink, "CLOSE_WAIT", 10.0)
    link = linked([])
    release = threading.Event()
    assert link.call(lambda store: release.wait(30), timeout=0.2) is None  # stuck in torch for good
    time.sleep(0.35)
    began = time.monotonic()
    link.close()
    assert time.monotonic() - began < storelink.CLOSE_WAIT / 2  # the silent store's short wait, not CLOSE_WAIT
    release.set()


class Channel2(Channel):
    """Node 1's ranks readable until the store stops answering."""

    def __init__(self, states: list[RankState]) -> None:
        self.states = states

    def gather(self, nnodes: int, node_rank: int) -> list[RankState]:
        return list(self.states)


def NO_EYES() -> Look:  # noqa: N802 - these tests hand the doctor its states
    raise AssertionError("these tests read no folder")


def state(rank: int, **extra: object) -> RankState:
    return RankState(rank=rank, node_rank=rank // 2, host="h", local_rank=rank % 2, idle_for=2.0, busy=False,
                     cpu_share=0.0, wait="all_reduce", collective=True, first_progress=True, stale_for=0.0,
                     c10d=True, **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize("per_node", [True, False])
def test_node_0_counts_the_unread_node_as_last_read_only_while_its_own_rank_0_is_stopped(per_node: bool,
                                                                                         tmp_path: Path):
    channel = Channel2([state(2), state(3)])
    watch = HangWatch(HangSettings(timeout=10), folder=str(tmp_path), node_rank=0, nnodes=2, world_size=4,
                      host="h", stacks_dir=None, channel=channel, declare=lambda failure: None,
                      say=lambda line: None, eyes=NO_EYES, accounts=per_node)
    local = [state(0), state(1)]
    assert [s.rank for s in watch._gather_remote(local, 100.0)] == [2, 3]  # noqa: SLF001
    channel.states = []  # the store stopped answering
    assert watch._gather_remote(local, 105.0) == []  # noqa: SLF001 - rank 0 runs: nothing stands in
    stopped = [replace(local[0], stopped=True), local[1]]
    found = watch._gather_remote(stopped, 112.0)  # noqa: SLF001
    if not per_node:  # per-gpu: the store is paijob-runtime's own, never in a rank
        assert found == []
        return
    assert [(s.rank, s.unseen, s.stale_for, s.idle_for) for s in found] == [(2, True, 12.0, 2.0),
                                                                            (3, True, 12.0, 2.0)]
    channel.states = [state(2), state(3)]  # readable again
    assert [(s.rank, s.unseen) for s in watch._gather_remote(stopped, 113.0)] == [(2, False), (3, False)]  # noqa: SLF001


def test_node_0_counts_a_node_it_never_read_as_unseen_while_its_rank_0_is_stopped(tmp_path: Path):
    """Rank 0 stopped before node 0's watch ever read node 1 (a slow start-up, a busy machine): node 1's
    ranks still count, unseen since the watch began, and the stopped rank 0 is judged."""
    channel = Channel2([])
    watch = HangWatch(HangSettings(timeout=10), folder=str(tmp_path), node_rank=0, nnodes=2, world_size=4,
                      host="h", stacks_dir=None, channel=channel, declare=lambda failure: None,
                      say=lambda line: None, eyes=NO_EYES, accounts=True)
    local = [replace(state(0), stopped=True), state(1)]
    found = watch._gather_remote(local, time.time() + 30)  # noqa: SLF001
    assert [(s.rank, s.node_rank, s.unseen) for s in found] == [(2, 1, True), (3, 1, True)]
    assert all(29 < s.stale_for < 32 for s in found)
    assert watch._gather_remote([state(0), state(1)], time.time()) == []  # noqa: SLF001 - rank 0 runs
