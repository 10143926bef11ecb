"""Watching the other nodes of a job: heartbeats, failure records, and waits that end.

Why: a TCPStore call has no deadline of its own that holds on a real
network. ``add`` on a partitioned link blocks until the kernel gives up on
the TCP connection (about 15 minutes), and a client that reached a foreign
process on the master's port waits for an answer forever. So every node
runs two daemon threads beside torch's elastic agent:

* the **heartbeat** thread, on a store client of its own (torch's agent
  holds its client's lock for the whole exit barrier): about once a second
  it counts this node's heartbeat, looks for failure records, and on node 0
  checks every peer's count. A peer whose count stalls for
  ``heartbeat_timeout`` is *lost*: node 0 publishes that as the job's
  failure record, so every node names the same lost node;
* the **watchdog** thread, which needs no network: it ends the node when a
  store call (the heartbeat's, the rendezvous, any bounded call) has been
  blocked past its deadline, when another node failed while this one waits
  in torch's exit barrier, and when the main thread, busy in a call that
  cannot be interrupted, has not ended the node soon after a fatal verdict.
  It prints the root cause in one line, stops the workers and exits with the
  root cause's code (143 for a lost node or store).

Messages while waiting for the rendezvous come from the watchdog too: at
most one line every 30 seconds. This module does not import torch; the store
is anything with TCPStore's ``add``/``set``/``get``/``check`` methods.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from paijob.common import exitcodes
from paijob.runtime.failure import Failure, choose_root_cause
from paijob.runtime.watch.channel import round_key
from paijob.runtime.watch.lifecycle import StoreTimeout, Ticker, bounded
from paijob.runtime.watch.settings import WatchSettings

FAILURE_COUNT_KEY = "paijob/failures"
FAILURE_KEY = "paijob/failure/{node}"
HEARTBEAT_KEY = "paijob/hb/{node}"
WHO_KEY = "paijob/who/{node}"
DONE_KEY = "paijob/done/{node}"  # this node's workers succeeded: no heartbeats needed
EXITED_KEY = "paijob/exited/{node}"  # this node is ending after a failure
FINISHED_KEY = "paijob/finished"
RELEASED_KEY = "paijob/released"  # passed torch's exit barrier (or saw the job end without it); node 0 may go

STORE_OP_TIMEOUT = 10.0
WATCHDOG_EVERY = 0.2  # seconds between the watchdog's looks
WAIT_MESSAGE_EVERY = 30.0
RECOVERING = "recovering"  # the main thread's phase between a failed round and the next (its own deadline)
T = TypeVar("T")
__all__ = ["NodeWatch", "StoreTimeout", "bounded", "first_line"]


def first_line(error: BaseException) -> str:
    """c10d errors carry pages of C++ frames after their first line; keep that line."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _shown(said: bytes) -> str:
    """A node's ``role:index at address`` as it wrote it: one short printable line."""
    return "".join(ch for ch in said.decode("utf-8", "replace") if ch.isprintable())[:120]


def lost_reason(named: dict[int, str], heartbeat_timeout: float) -> str:
    """Node 0's words for the nodes ``named`` (node rank -> `` (who it said it is)``) that fell silent."""
    if len(named) == 1:
        node, who = next(iter(named.items()))
        return (f"node rank {node}{who} stopped sending heartbeats for {heartbeat_timeout:.0f}s: its task was lost "
                f"(node failure, container killed, or network partition)")
    # every peer at once: more likely this node's own network
    names = ", ".join(f"{node}{who}" for node, who in named.items())
    return (f"node ranks {names} stopped sending heartbeats for {heartbeat_timeout:.0f}s: their tasks were lost, "
            f"or node rank 0 (this node) lost its network")


def read_failures(client: Any, nnodes: int, current: int) -> tuple[list[Failure], int]:
    """Every node's failure record of round ``current`` in the store, and how many were refused: one not in its
    exact form (or unsigned) is dropped and counted, never believed and never taken for the store's loss."""
    found, refused = [], 0
    for node in range(nnodes):
        key = round_key(current, FAILURE_KEY.format(node=node))
        if client.check([key]):
            data = client.get(key)  # None: not signed with the job's node key
            try:
                if data is None:
                    raise ValueError("not signed with the job's node key")
                found.append(Failure.from_json(data))
            except ValueError:
                refused += 1
    return found, refused


def master_lost(node_rank: int, master: str, how: str) -> Failure:
    """Node ``node_rank``'s verdict that the rendezvous store (node 0's agent, at ``master``) is gone."""
    if node_rank == 0:
        reason = f"node rank 0 lost its own rendezvous store at {master}: {how}"
    else:
        reason = (
            f"node rank 0 (the master, rendezvous store at {master}) was lost: {how}; "
            f"its task stopped, its node failed, or the network between us is cut"
        )
    return Failure(
        node_rank=0, rank=None, local_rank=None, returncode=None, secondary=False,
        time=time.time(), reason=reason,
    )


class NodeWatch:
    """Heartbeats and failure records of one node, and the deadlines that bound its waits."""

    def __init__(
        self,
        settings: WatchSettings,
        *,
        connect: Callable[[], Any],
        end_node: Callable[[Failure], None],
        say: Callable[[str], None],
        who: str = "",
        poll_interval: float = 1.0,
    ) -> None:
        """``connect()`` makes this node's own store client; ``end_node(failure)`` is the
        watchdog's way out; ``who`` names this task in other nodes' messages."""
        self.node_rank = settings.node_rank
        self.nnodes = settings.nnodes
        self.master = settings.master
        self.heartbeat_timeout = settings.heartbeat_timeout
        self.grace_period: float = settings.grace_period
        self.poll_interval = poll_interval
        self.who = who
        # the rendezvous may take --master-timeout; connecting our client waits as long
        self.connect_timeout = settings.rendezvous_timeout + 5.0
        self._connect = connect
        self._end_node = end_node
        self._say = say
        self._client: Any = None
        self._lock = threading.Lock()
        self._ended = False
        self.fatal: Failure | None = None
        self._fatal_at = 0.0
        self.store_lost = False
        self.remote_failures: list[Failure] = []
        self.refused = 0  # failure records read from the store that were not in their exact form
        self.lost_nodes: set[int] = set()
        self._seen_failures = 0
        self._records_since: float | None = None
        self._heartbeats: dict[int, tuple[int, float]] = {}
        # the round of the workers (a restart starts the next): failure records are the round's own
        self.round = 0
        # what the main thread is doing, and until when it may block
        self.phase = "starting"
        self._phase_started = time.monotonic()
        self._phase_deadline: float | None = None
        self._phase_expired: Callable[[], Failure] | None = None
        self._waiting_line: Callable[[float], str | None] | None = None
        self._next_wait_message = 0.0
        # the call blocking right now (heartbeat or bounded), if any: (start, what)
        self._blocked: dict[int, tuple[float, float]] = {}
        self._watchdog = _Watchdog(self)
        self._heartbeat: _Heartbeat | None = None

    # -- one watcher among the node's others (lifecycle.Watchers) ----------------------
    def start(self) -> None:
        """The watchdog starts; the heartbeats start with the rendezvous (:meth:`start_heartbeats`)."""
        self._watchdog.start()

    def stop(self) -> None:
        self.close()

    def finish(self) -> None:
        """Nothing is held past :meth:`stop` (the store client goes with the process)."""

    # -- phases of the main thread ------------------------------------------
    def enter(
        self,
        phase: str,
        *,
        deadline: float | None = None,
        expired: Callable[[], Failure] | None = None,
        waiting_line: Callable[[float], str | None] | None = None,
        first_message_after: float = WAIT_MESSAGE_EVERY,
    ) -> None:
        """The main thread starts ``phase``; past ``deadline`` seconds ``expired()`` ends the node."""
        now = time.monotonic()
        self.phase = phase
        self._phase_started = now
        self._phase_deadline = None if deadline is None else now + deadline
        self._phase_expired = expired
        self._waiting_line = waiting_line
        self._next_wait_message = now + first_message_after

    # -- the heartbeat thread ------------------------------------------------
    def start_heartbeats(self) -> None:
        """Connect our own store client and start beating (multi-node jobs only)."""
        if self.nnodes == 1 or self._heartbeat is not None:
            return
        self._heartbeat = _Heartbeat(self)
        self._heartbeat.start()

    def _beat(self) -> None:
        """One heartbeat (the heartbeat thread's tick); the first connects our own client."""
        if self._client is None:
            client = self._guarded(self._connect, limit=self.connect_timeout)
            # A round trip: some torch releases return from connecting to anything that
            # accepts (a squatter on the master's port); a store answers ``check`` at once.
            self._guarded(lambda: client.check([WHO_KEY.format(node=0)]), limit=self.connect_timeout)
            self._client = client
            if self.who:
                self._guarded(lambda: client.set(WHO_KEY.format(node=self.node_rank), self.who))
        self._beat_once()

    def _beat_once(self) -> None:
        client = self._client
        self._guarded(lambda: client.add(HEARTBEAT_KEY.format(node=self.node_rank), 1))
        if self.node_rank == 0:
            silent = self._silent_peers()
            if silent:
                self._declare_lost(silent)
        current = self.round  # a record read for a round that has ended since is not this round's
        count = int(self._guarded(lambda: client.add(round_key(current, FAILURE_COUNT_KEY), 0)))
        if count > self._seen_failures:
            records = self._guarded(lambda: self._read_failures(current))
            with self._lock:
                if current != self.round:
                    return
                self._seen_failures = count
                self.remote_failures = records
                if self._records_since is None:
                    self._records_since = time.monotonic()

    def rejoined(self, node: int) -> None:
        """Node 0: node ``node``, once lost, came back and joins the next round: its heartbeats count again."""
        with self._lock:
            self.lost_nodes.discard(node)
            self._heartbeats.pop(node, None)

    def new_round(self, round_number: int) -> None:
        """A restart: round ``round_number`` starts; the last round's records stay its own, the lost nodes lost."""
        with self._lock:
            self.round, self.fatal, self.remote_failures = round_number, None, []
            self._seen_failures, self._records_since = 0, None

    def _silent_peers(self) -> list[int]:
        client = self._client
        now = time.monotonic()
        silent = []
        for node in range(1, self.nnodes):
            if node in self.lost_nodes:
                continue
            gone = [DONE_KEY.format(node=node), EXITED_KEY.format(node=node)]
            if any(self._guarded(partial(client.check, [key])) for key in gone):
                continue
            count = int(self._guarded(partial(client.add, HEARTBEAT_KEY.format(node=node), 0)))
            seen = self._heartbeats.get(node)
            if seen is None or seen[0] != count:
                self._heartbeats[node] = (count, now)
            elif now - seen[1] > self.heartbeat_timeout:
                silent.append(node)
        return silent

    def _declare_lost(self, nodes: list[int]) -> None:
        """Node 0's verdict on silent peers, published as the job's failure record."""
        client = self._client

        def who(node: int) -> str:
            key = WHO_KEY.format(node=node)
            said = self._guarded(lambda: client.get(key)) if self._guarded(lambda: client.check([key])) else None
            return f" ({_shown(said)})" if said else ""  # None: not signed by the node itself

        reason = lost_reason({node: who(node) for node in nodes}, self.heartbeat_timeout)
        silent_since = min((self._heartbeats[node][1] for node in nodes if node in self._heartbeats),
                           default=time.monotonic())  # when its count last moved: the failure's time
        failure = Failure(
            node_rank=nodes[0], rank=None, local_rank=None, returncode=None, secondary=False,
            time=time.time() - (time.monotonic() - silent_since), reason=reason,
        )
        self.lost_nodes.update(nodes)
        current = self.round
        record = round_key(current, FAILURE_KEY.format(node=nodes[0]))
        if not self._guarded(lambda: client.check([record])):
            self._guarded(lambda: client.set(record, failure.to_json()))
            self._guarded(lambda: client.add(round_key(current, FAILURE_COUNT_KEY), 1))
        self.declare(failure)

    def _read_failures(self, current: int = 0) -> list[Failure]:
        found, refused = read_failures(self._client, self.nnodes, current)
        self.refused += refused
        return found

    def _guarded(self, fn: Callable[[], T], limit: float | None = None) -> T:
        """Run a store call on this thread, with the watchdog holding its deadline."""
        ident = threading.get_ident()
        self._blocked[ident] = (time.monotonic(), limit or self.heartbeat_timeout)
        try:
            return fn()
        finally:
            self._blocked.pop(ident, None)

    # -- verdicts -------------------------------------------------------------
    def declare(self, failure: Failure) -> None:
        """A fatal verdict from a thread: the main loop stops the workers, or the watchdog does."""
        with self._lock:
            if self.fatal is not None:
                return
            self.fatal = failure
            self._fatal_at = time.monotonic()
            if failure.node_rank == 0 and self.node_rank != 0:
                self.store_lost = True

    @property
    def failed(self) -> bool:
        """Whether the main loop should stop this node's workers now."""
        return self.fatal is not None or bool(self.remote_failures)

    def records(self) -> list[Failure]:
        with self._lock:
            found = list(self.remote_failures)
            if self.fatal is not None and self.fatal not in found:
                found.append(self.fatal)
        return found

    # -- the watchdog ------------------------------------------------------------
    def _watch(self) -> None:
        """One look of the watchdog thread (its tick, every 0.2 s)."""
        if self._ended:
            return
        now = time.monotonic()
        self._expire_phase(now)  # an expired phase knows its reason best (e.g. a squatter)
        self._expire_blocked_calls(now)
        if self.phase == "exit barrier" and self.fatal is None:
            self._judge_from_the_barrier(now)
        self._say_waiting_line(now)
        if self.fatal is not None:
            self._end_when_stuck(self.fatal, now)

    def _expire_phase(self, now: float) -> None:
        """Past the main thread's phase deadline: its own reason ends the node."""
        if self._phase_deadline is None or now <= self._phase_deadline:
            return
        if self._phase_expired is not None and self.fatal is None:
            self.declare(self._phase_expired())
        if self.fatal is not None:
            self._end(self.fatal)

    def _expire_blocked_calls(self, now: float) -> None:
        """A store call blocked past its deadline: the master is lost."""
        for started, limit in list(self._blocked.values()):
            if now - started > limit and self.fatal is None:
                self.declare(master_lost(self.node_rank, self.master, f"it did not answer for {limit:.0f}s"))

    def _say_waiting_line(self, now: float) -> None:
        """At most one line every WAIT_MESSAGE_EVERY seconds about what the main thread waits for."""
        if self._waiting_line is None or now < self._next_wait_message:
            return
        self._next_wait_message = now + WAIT_MESSAGE_EVERY
        line = self._waiting_line(now - self._phase_started)
        if line:
            self._say(line)

    def _end_when_stuck(self, fatal: Failure, now: float) -> None:
        """After a fatal verdict the main thread ends the node itself when it can; when it is
        stuck in a call that cannot be interrupted (exit barrier, rendezvous, a store call), or
        takes too long, end it from here."""
        blocking = self.phase in ("handshake", "rendezvous", "exit barrier")
        # a restart's own phase has a deadline of its own (it may wait for every node's account)
        late = now - self._fatal_at > self.grace_period + 20 and self.phase != RECOVERING
        if blocking or late:
            self._end(fatal)

    def _judge_from_the_barrier(self, now: float) -> None:
        """This node's workers succeeded, another node's failed: torch's exit barrier would
        wait for it (300 s) and then report success. End with that failure instead, as the
        nodes still training do; a consequence alone waits for its cause a while first."""
        with self._lock:
            records = list(self.remote_failures)
            since = self._records_since
        if not records or since is None:
            return
        primary = any(not f.secondary for f in records)
        if primary or now - since > self.heartbeat_timeout + 5:
            root = choose_root_cause(records)
            if root is not None:
                self.declare(root)

    def _end(self, failure: Failure) -> None:
        if self._ended:
            return
        self._ended = True
        try:
            self._end_node(failure)
        finally:
            os._exit(failure.exit_code or exitcodes.INFRA_FAILURE)

    # -- bounded calls for the main thread -----------------------------------------
    def call(self, fn: Callable[[Any], T], timeout: float = STORE_OP_TIMEOUT) -> T | None:
        """``fn(store)`` on our client, at most ``timeout`` seconds; None when it fails."""
        client = self._client
        if client is None or self.store_lost:
            return None
        try:
            return bounded(lambda: fn(client), timeout)
        except StoreTimeout:
            if self.node_rank != 0:
                self.store_lost = True
            return None
        except Exception:  # noqa: BLE001 - the store is gone; the caller has a fallback
            if self.node_rank != 0:
                self.store_lost = True
            return None

    def wait_connected(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self._client is None and self.fatal is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return self._client is not None

    def publish(self, failure: Failure) -> None:
        """Tell every node why this one fails (node 0 relays lost peers the same way)."""
        if self.nnodes == 1:
            return
        if self._heartbeat is not None:
            self.wait_connected(STORE_OP_TIMEOUT)

        current = self.round

        def publish(store: Any) -> None:
            store.set(round_key(current, FAILURE_KEY.format(node=self.node_rank)), failure.to_json())
            store.add(round_key(current, FAILURE_COUNT_KEY), 1)

        self.call(publish)

    def mark_done(self) -> None:
        """This node's workers succeeded: node 0 stops expecting its heartbeats."""
        if self.nnodes > 1:
            self.call(lambda s: s.set(DONE_KEY.format(node=self.node_rank), "1"))

    def wait_for_primary(self, have: list[Failure], timeout: float) -> list[Failure]:
        """When every failure seen so far looks like a consequence (a peer's connection
        broke), wait for the cause: a record from the failing node, node 0's verdict on a
        lost node, or this node losing the master."""
        return self.wait_for(lambda records: any(not f.secondary for f in [*have, *records]), timeout)

    def wait_for(self, enough: Callable[[list[Failure]], bool], timeout: float) -> list[Failure]:
        """The failure records, once ``enough(records)`` or after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            records = self.records()
            if enough(records) or time.monotonic() >= deadline:
                return records
            time.sleep(0.2)

    def wait_for_account(self, timeout: float) -> list[Failure]:
        """Wait for node 0's account of a timeout (a record that ``overrides``): torch's timeout
        fired in a rank of ours that waited, and node 0 names the rank that never arrived, from
        the states every node shares. Every node then prints that one root cause."""
        return self.wait_for(lambda records: any(f.overrides for f in records), timeout)

    def finish_after_failure(self, linger: float) -> None:
        """Count this node out; node 0 (the store host) lingers so the others can read why."""
        self.enter("finishing")
        if self.nnodes == 1:
            return
        self.call(lambda s: s.set(EXITED_KEY.format(node=self.node_rank), "1"))
        self.call(lambda s: s.add(FINISHED_KEY, 1))
        if self.node_rank != 0:
            return
        deadline = time.monotonic() + linger
        while time.monotonic() < deadline:
            done = self.call(lambda s: int(s.add(FINISHED_KEY, 0)))
            if done is None or done >= self.nnodes - len(self.lost_nodes):
                return
            time.sleep(0.2)

    def release(self, linger: float = 10.0, waiting: int = 0) -> None:
        """After torch's exit barrier: stop beating; node 0 keeps the store up until every
        node has stopped using it, so nobody sees it vanish (no C++ trace, no false alarm), the
        ``waiting`` nodes that came back to join a restart that never came included."""
        self.enter("released")
        self.stop_heartbeats()
        if self.nnodes == 1:
            return
        if self.node_rank != 0:
            self.call(lambda s: s.add(RELEASED_KEY, 1))
            return
        deadline = time.monotonic() + linger
        others = self.nnodes - 1 - len(self.lost_nodes - {0}) + waiting  # a lost node never releases
        while time.monotonic() < deadline:
            released = self.call(lambda s: int(s.add(RELEASED_KEY, 0)))
            if released is None or released >= others:
                return
            time.sleep(0.1)

    def stop_heartbeats(self) -> None:
        """Stop beating; wait briefly for a call in flight, never for a store that is gone."""
        beat = self._heartbeat
        if beat is None:
            return
        beat.stop()
        if not self.store_lost:
            beat.join(timeout=2.0)

    def close(self) -> None:
        """The node ends normally: no watchdog verdict after this."""
        self.stop_heartbeats()
        self._ended = True
        self._watchdog.stop()


class _Heartbeat(Ticker):
    """The heartbeat thread: about once a second, :meth:`NodeWatch._beat`. An error is a verdict:
    the store lives in node 0's agent, so the master is lost (no more beats)."""

    def __init__(self, node: NodeWatch) -> None:
        super().__init__("paijob-heartbeat", node.poll_interval, node._say, at_once=True)  # noqa: SLF001
        self.node = node

    def tick(self) -> None:
        self.node._beat()  # noqa: SLF001 - the node's own thread

    def failed(self, error: Exception) -> bool:
        if not self.stopped:
            self.node.declare(master_lost(self.node.node_rank, self.node.master,
                                          f"the connection to it failed ({first_line(error)})"))
        return False


class _Watchdog(Ticker):
    """The watchdog thread: every 0.2 s, :meth:`NodeWatch._watch` (no network, no store)."""

    def __init__(self, node: NodeWatch) -> None:
        super().__init__("paijob-watchdog", WATCHDOG_EVERY, node._say)  # noqa: SLF001
        self.node = node

    def tick(self) -> None:
        self.node._watch()  # noqa: SLF001 - the node's own thread
