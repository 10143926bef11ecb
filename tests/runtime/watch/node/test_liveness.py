"""Heartbeats, failure records and bounded waits between nodes (no torch: a fake store)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from suite_helpers import wait_until

from paijob.runtime.failure import Failure
from paijob.runtime.probe import MasterUnreachableError, wait_for_master
from paijob.runtime.watch.channel import NodeSeal, SignedStore
from paijob.runtime.watch.node import liveness as nodewatch
from paijob.runtime.watch.node.liveness import NodeWatch, StoreTimeout, bounded, first_line
from paijob.runtime.watch.settings import WatchSettings


class FakeStore:
    """TCPStore's add/set/get/check on a dict; ``hang`` makes every call block forever."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.lock = threading.Lock()
        self.hang = threading.Event()
        self.never = threading.Event()

    def _maybe_hang(self) -> None:
        if self.hang.is_set():
            self.never.wait()

    def add(self, key: str, amount: int) -> int:
        self._maybe_hang()
        with self.lock:
            value = int(self.data.get(key, b"0")) + amount
            self.data[key] = str(value).encode()
            return value

    def set(self, key: str, value: str | bytes) -> None:
        self._maybe_hang()
        with self.lock:
            self.data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key: str) -> bytes:
        self._maybe_hang()
        with self.lock:
            return self.data[key]

    def check(self, keys: list[str]) -> bool:
        self._maybe_hang()
        with self.lock:
            return all(k in self.data for k in keys)


class Ended(Exception):
    pass


class Endings(list):  # type: ignore[type-arg]
    """The failures the watchdog ended the node with, and the exit codes it used."""

    exits: list[int]


@pytest.fixture
def ends(monkeypatch: pytest.MonkeyPatch) -> Iterator[Endings]:
    ended = Endings()
    ended.exits = []
    monkeypatch.setattr(nodewatch.os, "_exit", ended.exits.append)
    yield ended
    assert len(ended.exits) == len(ended)


def make_watch(store: FakeStore, node_rank: int, nnodes: int, ends: list[Failure],
               heartbeat_timeout: float = 0.6) -> NodeWatch:
    settings = WatchSettings(node_rank=node_rank, nnodes=nnodes, world_size=nnodes, master_addr="10.0.0.1",
                             master_port=29500, heartbeat_timeout=heartbeat_timeout, grace_period=0)
    watch = NodeWatch(
        settings, connect=lambda: store, end_node=ends.append, say=lambda line: None,
        who=f"worker:{node_rank} at 10.0.0.{node_rank + 1}", poll_interval=0.05,
    )
    watch.start()  # its watchdog starts with the node's other watchers (lifecycle.Watchers)
    return watch


def test_node_0_declares_a_silent_peer_lost_and_publishes_it_for_every_node(ends):
    store = FakeStore()
    master = make_watch(store, 0, 3, ends, heartbeat_timeout=2.0)
    peer = make_watch(store, 1, 3, ends, heartbeat_timeout=2.0)
    other = make_watch(store, 2, 3, ends, heartbeat_timeout=2.0)
    try:
        master.enter("running")
        for watch in (master, peer, other):
            watch.start_heartbeats()
        wait_until(lambda: store.check(["paijob/hb/2"]))
        other.close()  # node 2 falls silent without a word
        wait_until(lambda: master.fatal is not None)
        assert master.fatal is not None and master.fatal.node_rank == 2
        assert master.fatal.reason.startswith(
            "node rank 2 (worker:2 at 10.0.0.3) stopped sending heartbeats for 2s"
        )
        record = json.loads(store.get("paijob/failure/2"))
        assert record["reason"] == master.fatal.reason
        wait_until(lambda: peer.failed)  # node 1 reads node 0's verdict
        assert [f.node_rank for f in peer.records()] == [2]
        assert not ends  # the main loops end the nodes, not the watchdog
    finally:
        for watch in (master, peer, other):
            watch.close()


def test_a_node_that_said_it_finished_is_not_declared_lost(ends):
    store = FakeStore()
    master = make_watch(store, 0, 2, ends, heartbeat_timeout=0.3)
    try:
        store.set("paijob/done/1", "1")
        master.enter("running")
        master.start_heartbeats()
        time.sleep(1.0)
        assert master.fatal is None
    finally:
        master.close()


def test_an_unanswered_store_call_ends_a_node_blocked_in_the_exit_barrier(ends):
    store = FakeStore()
    peer = make_watch(store, 1, 2, ends, heartbeat_timeout=0.5)
    try:
        peer.enter("running")
        peer.start_heartbeats()
        wait_until(lambda: store.check(["paijob/hb/1"]))
        peer.enter("exit barrier")  # the main thread is stuck in torch's barrier
        store.hang.set()  # a partition: calls neither answer nor fail
        hung_at = time.monotonic()
        wait_until(lambda: bool(ends))
        assert 0.5 <= time.monotonic() - hung_at < 10.0
        assert ends[0].reason.startswith(
            "node rank 0 (the master, rendezvous store at 10.0.0.1:29500) was lost: "
            "it did not answer for 0s"
        )
        assert peer.store_lost
        assert peer.call(lambda s: s.add("x", 1)) is None  # no call waits on a lost store
    finally:
        peer.close()
        store.never.set()  # let the blocked heartbeat thread go


def test_a_main_loop_that_does_not_end_the_node_in_time_is_overruled(ends):
    store = FakeStore()
    peer = make_watch(store, 1, 2, ends, heartbeat_timeout=0.3)
    try:
        peer.grace_period = -19.5  # the main loop gets 0.5 s instead of grace + 20 s
        peer.enter("running")
        peer.declare(Failure(0, None, None, None, False, time.time(), reason="gone"))
        wait_until(lambda: bool(ends), timeout=5)
        assert ends[0].reason == "gone"
    finally:
        peer.close()


def test_an_expired_phase_ends_the_node_with_its_own_reason(ends):
    store = FakeStore()
    peer = make_watch(store, 1, 2, ends)
    try:
        squatter = Failure(0, None, None, None, False, time.time(), reason="not a store")
        peer.enter("handshake", deadline=0.3, expired=lambda: squatter)
        wait_until(lambda: bool(ends))
        assert ends == [squatter]
    finally:
        peer.close()


def test_waiting_lines_come_at_most_once_per_period(ends, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(nodewatch, "WAIT_MESSAGE_EVERY", 0.5)
    said: list[float] = []
    watch = make_watch(FakeStore(), 0, 2, ends)
    watch._say = lambda line: said.append(time.monotonic())  # noqa: SLF001 - the test's ear
    try:
        watch.enter("rendezvous", waiting_line=lambda waited: f"waiting {waited:.1f}",
                    first_message_after=0.0)
        time.sleep(1.2)
    finally:
        watch.close()
    assert 1 <= len(said) <= 3, said
    assert all(later - earlier >= 0.45 for earlier, later in zip(said, said[1:], strict=False)), said


def test_bounded_gives_the_result_the_error_or_a_timeout():
    assert bounded(lambda: 7, 1.0) == 7
    with pytest.raises(KeyError):
        bounded(lambda: {}["x"], 1.0)
    started = time.monotonic()
    with pytest.raises(StoreTimeout):
        bounded(lambda: threading.Event().wait(), 0.2)
    assert time.monotonic() - started < 10  # the call itself never returns: bounded, on however busy a machine


def test_first_line_drops_the_cpp_frames():
    error = RuntimeError("Connection reset by peer\nException raised from recvBytes\nframe #0: x")
    assert first_line(error) == "Connection reset by peer"
    assert first_line(RuntimeError()) == "RuntimeError"


def test_waiting_for_the_master_says_so_once_per_period():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: refused
        said: list[str] = []
        with pytest.raises(MasterUnreachableError):
            wait_for_master("127.0.0.1", port, timeout=2.0, interval=0.05, log=said.append,
                            message_every=0.5)
    assert said[0] == f"waiting up to 2s for the master at 127.0.0.1:{port} ..."
    assert 2 <= len(said) <= 4, said
    assert said[1].startswith(f"still waiting for the master at 127.0.0.1:{port} (")
    assert "last error:" in said[1]


def test_every_peer_silent_at_once_names_them_all_and_suspects_node_0s_own_network(ends):
    store = FakeStore()
    master = make_watch(store, 0, 3, ends, heartbeat_timeout=0.4)
    try:
        master.enter("running")
        master.start_heartbeats()
        wait_until(lambda: master.fatal is not None)
        assert master.fatal is not None
        assert master.fatal.reason == (
            "node ranks 1, 2 stopped sending heartbeats for 0s: their tasks were lost, or "
            "node rank 0 (this node) lost its network"
        )
        assert master.lost_nodes == {1, 2}
    finally:
        master.close()


def test_a_store_that_accepts_but_never_answers_is_not_taken_for_connected(ends):
    store = FakeStore()
    store.hang.set()  # connecting works, the first round trip never returns
    peer = make_watch(store, 1, 2, ends, heartbeat_timeout=30)  # the connect limit: not first
    try:
        peer.enter("handshake", deadline=0.5,
                   expired=lambda: Failure(0, None, None, None, False, time.time(), reason="squat"))
        peer.start_heartbeats()
        assert not peer.wait_connected(1.0)
        wait_until(lambda: bool(ends))
        assert ends[0].reason == "squat"
    finally:
        peer.close()
        store.never.set()


def test_a_failure_elsewhere_ends_a_node_waiting_in_the_exit_barrier_with_its_code(ends):
    store = FakeStore()
    peer = make_watch(store, 1, 2, ends, heartbeat_timeout=5.0)
    try:
        peer.enter("running")
        peer.start_heartbeats()
        wait_until(lambda: peer.wait_connected(0))
        peer.enter("exit barrier")  # our workers succeeded; torch waits for the others
        failed = Failure(0, 0, 0, 3, False, time.time(), tail="ValueError: bad batch")
        store.set("paijob/failure/0", failed.to_json())
        store.add("paijob/failures", 1)
        wait_until(lambda: bool(ends))
        assert ends == [failed] and ends.exits == [3]
    finally:
        peer.close()


def test_waiting_for_the_master_says_when_it_is_up():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening yet: refused
        said: list[str] = []
        waiting = threading.Thread(target=wait_for_master, args=("127.0.0.1", port),
                                   kwargs={"timeout": 60.0, "interval": 0.05, "log": said.append})
        waiting.start()
        wait_until(lambda: bool(said))
        sock.listen()  # the master comes up
        waiting.join(timeout=30)
    assert not waiting.is_alive()
    assert said[0] == f"waiting up to 60s for the master at 127.0.0.1:{port} ..."
    assert said[-1].startswith(f"the master at 127.0.0.1:{port} is up (after ")


@pytest.mark.parametrize("forged", [
    Failure(node_rank=1, rank=1, local_rank=1, returncode=1, secondary=False, time=1.0,
            error="MemoryError: FORGED BY A STRANGER").to_json(),  # well formed, but not signed
    "[" * 50_000,  # deep: was "the master was lost" (exit 143, retried 3 times by OpenPAI)
    '{"evil": 1}',
])
def test_a_failure_in_the_store_not_signed_with_the_jobs_key_is_ignored_never_fatal(ends, forged: str):
    """Issue 55: a stranger (or the job's own code) writes a failure record into the job's store: the nodes
    believe only what carries the job's node key's MAC; the forged one is counted, and the job goes on."""
    store = FakeStore()
    seal = NodeSeal(b"k" * 32)
    master = make_watch(SignedStore(store, seal), 0, 2, ends)  # type: ignore[arg-type]
    peer = make_watch(SignedStore(store, seal), 1, 2, ends)  # type: ignore[arg-type]
    try:
        for watch in (master, peer):
            watch.enter("running")
            watch.start_heartbeats()
        wait_until(lambda: store.check(["paijob/hb/1"]) and store.check(["paijob/hb/0"]))
        store.set("paijob/failure/1", forged)  # as the stranger writes it: straight into the store
        store.add("paijob/failures", 1)
        wait_until(lambda: seal.refused >= 2 or master.refused + peer.refused >= 2, what="both nodes read it")
        time.sleep(0.5)
        assert not master.failed and not peer.failed and not ends and not master.store_lost and not peer.store_lost
        real = Failure(node_rank=1, rank=3, local_rank=1, returncode=1, secondary=False, time=2.0, error="real")
        peer.publish(real)  # what node 1 itself says: signed, believed
        wait_until(lambda: master.failed)
        assert [f.error for f in master.records()] == ["real"]
    finally:
        for watch in (master, peer):
            watch.close()
