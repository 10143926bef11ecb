"""The restart rounds between the nodes: node 0's word on how a round ended, and the barrier before the next.

A restart (``--max-restarts``) is a round of every node's workers started again together inside the same
attempt. Between two rounds, over the job's store (every value signed: :class:`~paijob.runtime.watch.channel.
SignedStore`; the keys are :mod:`paijob.runtime.watch.channel`'s ``paijob/round/<r>/...``):

1. every node stops its workers and makes its account of the failure (the same on every node);
2. node 0 decides (:func:`~paijob.runtime.watch.node.restarts.decide`) and writes its word, ``end``: restart
   or not, why, the next round's nodes and the root cause; every other node reads it (so every node tells
   node 0's story, and none restarts alone);
3. on a restart each node writes ``arrived/<node>`` for the next round; node 0 waits for every node of it
   (a node found lost meanwhile is left out where ``--min-nodes`` allows), starts the new round's store for
   the workers and writes ``go``: the round's nodes and that store's port; every node reads it and starts its
   workers, its group rank its place among those nodes.

A node that starts while the job is past its first round (its task was retried as a new pod, ``--min-nodes``)
reads ``current`` and arrives for the round after it: node 0 takes it in at the next restart.

Every wait is bounded, and ends early when node 0 is gone (the store is its). No torch import.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from paijob.common import untrusted
from paijob.runtime.failure import Failure
from paijob.runtime.watch.channel import (
    ROUND_ARRIVED_KEY,
    ROUND_CURRENT_KEY,
    ROUND_END_KEY,
    ROUND_GO_KEY,
)
from paijob.runtime.watch.node.restarts import Decision

POLL = 0.1  # seconds between two reads of a key waited for
MAX_NODES = 4096


@dataclass(frozen=True)
class RoundPlan:
    """Round ``round`` of the workers: its ``nodes`` (node ranks of the job, in group-rank order) and the port
    of the store its workers meet in (node 0's, for that round alone); ``node_rank`` this node's."""

    round: int
    nodes: tuple[int, ...]
    port: int
    node_rank: int

    @property
    def group_rank(self) -> int:
        """This node's rank in the round (its place among the round's nodes)."""
        return self.nodes.index(self.node_rank)


@dataclass(frozen=True)
class NotJoined:
    """A node that started late never joined the job's workers: it ends with ``code`` (0: they finished
    without it), ``why`` said, ``root`` the job's root cause where it failed."""

    code: int
    why: str
    root: Failure | None = None


class Link(Protocol):
    """What the rounds need of the node watch (:class:`~paijob.runtime.watch.node.liveness.NodeWatch`)."""

    node_rank: int
    nnodes: int
    lost_nodes: set[int]
    store_lost: bool

    def call(self, fn: Callable[[Any], Any], timeout: float = ...) -> Any: ...


class Rounds:
    """One node's side of the rounds' store protocol (its calls bounded by the node watch's :meth:`call`)."""

    def __init__(self, link: Link) -> None:
        self.link = link

    # -- how a round ended ------------------------------------------------------------
    def tell_end(self, round_number: int, decision: Decision, root: Failure) -> None:
        """Node 0: its decision on round ``round_number`` and the root cause, for every other node."""
        text = json.dumps({"restart": decision.restart, "why": decision.why, "nodes": list(decision.nodes),
                           "cause": root.to_json()})
        self.link.call(lambda store: store.set(ROUND_END_KEY.format(round=round_number), text))

    def hear_end(self, round_number: int, timeout: float) -> tuple[Decision, Failure] | None:
        """Node 0's decision on round ``round_number`` and its root cause; None: none came within ``timeout``
        (or node 0 is gone)."""
        value = self._wait(ROUND_END_KEY.format(round=round_number), timeout)
        if not isinstance(value, dict) or set(value) != {"restart", "why", "nodes", "cause"}:
            return None
        restart, why, nodes, cause = value["restart"], value["why"], _nodes(value["nodes"]), value["cause"]
        if not isinstance(restart, bool) or not isinstance(why, str) or nodes is None or not isinstance(cause, str):
            return None
        try:
            root = Failure.from_json(cause)
        except ValueError:
            return None
        return Decision(restart, why[:1000], nodes), root

    # -- the barrier before the next -----------------------------------------------------
    def arrive(self, round_number: int) -> None:
        """This node stopped its workers and waits for round ``round_number``."""
        node = self.link.node_rank
        self.link.call(lambda store: store.set(ROUND_ARRIVED_KEY.format(round=round_number, node=node), "1"))

    def gather(self, round_number: int, nodes: Sequence[int], timeout: float,
               enough: Callable[[list[int]], bool]) -> tuple[int, ...]:
        """Node 0: the nodes of ``nodes`` that arrived for round ``round_number``, once all did, or once the
        ones not there yet are lost and ``enough(arrived)``, or after ``timeout`` seconds (what arrived); with
        every other node of the job that arrived for it too (one that came back: it joins), in rank order."""
        deadline = time.monotonic() + timeout
        arrived: list[int] = []
        while True:
            arrived = [node for node in nodes if node == self.link.node_rank or self._arrived(round_number, node)]
            missing = [node for node in nodes if node not in arrived]
            if not missing or time.monotonic() >= deadline or (
                    all(node in self.link.lost_nodes for node in missing) and enough(arrived)):
                back = [node for node in range(self.link.nnodes)
                        if node not in nodes and self._arrived(round_number, node)]
                return tuple(sorted([*arrived, *back]))
            time.sleep(POLL)

    def _arrived(self, round_number: int, node: int) -> bool:
        key = ROUND_ARRIVED_KEY.format(round=round_number, node=node)
        return self.link.call(lambda store: store.get(key) if store.check([key]) else None) == b"1"

    def waiting(self, round_number: int, nodes: Sequence[int]) -> list[int]:
        """Node 0: the nodes other than ``nodes`` that arrived for round ``round_number`` (they came back and
        wait to join it)."""
        return [node for node in range(self.link.nnodes) if node not in nodes and self._arrived(round_number, node)]

    def go(self, round_number: int, nodes: Sequence[int], port: int) -> None:
        """Node 0: round ``round_number`` starts on ``nodes``; its workers meet in the store at ``port``."""
        text = json.dumps({"nodes": list(nodes), "port": port, "abort": ""})
        self.link.call(lambda store: store.set(ROUND_GO_KEY.format(round=round_number), text))
        self.link.call(lambda store: store.set(ROUND_CURRENT_KEY, json.dumps(round_number)))

    def current(self) -> int:
        """The round the job's workers are at, as node 0 said (0: the first, or nothing said)."""
        found = self.link.call(
            lambda store: store.get(ROUND_CURRENT_KEY) if store.check([ROUND_CURRENT_KEY]) else None)
        try:
            value = untrusted.loads(found) if isinstance(found, bytes) else 0
        except ValueError:
            return 0
        return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 20 else 0

    def ended(self, round_number: int) -> tuple[Decision, Failure] | None:
        """Node 0's word on round ``round_number``, if it said one (no wait)."""
        key = ROUND_END_KEY.format(round=round_number)
        if self.link.call(lambda store: store.check([key])) is not True:
            return None
        return self.hear_end(round_number, timeout=1.0)

    def abort(self, round_number: int, reason: str) -> None:
        """Node 0: round ``round_number`` does not start (``reason``): every node ends."""
        text = json.dumps({"nodes": [], "port": 0, "abort": reason})
        self.link.call(lambda store: store.set(ROUND_GO_KEY.format(round=round_number), text))

    def wait_go(self, round_number: int, timeout: float) -> RoundPlan | str:
        """Node 0's go for round ``round_number``: the plan, or why there is none (node 0's reason, or that no
        word came)."""
        value = self._wait(ROUND_GO_KEY.format(round=round_number), timeout)
        if not isinstance(value, dict) or set(value) != {"nodes", "port", "abort"}:
            return (f"node rank 0 did not start restart {round_number} within {timeout:.0f}s" if not
                    self.link.store_lost else "node rank 0 (the master, the job's store) was lost during the restart")
        nodes, port, abort = _nodes(value["nodes"]), value["port"], value["abort"]
        if isinstance(abort, str) and abort:
            return abort[:1000]
        if nodes is None or not isinstance(port, int) or not 0 < port < 65536:
            return "node rank 0's word on the restart was not in its form"
        if self.link.node_rank not in nodes:
            return (f"node rank {self.link.node_rank} was left out of restart {round_number} (node rank 0 found it "
                    f"lost); the others go on without it")
        return RoundPlan(round_number, nodes, port, self.link.node_rank)

    def _wait(self, key: str, timeout: float) -> Any:
        """The JSON under ``key`` (signed), once it is there; None after ``timeout`` or once node 0 is gone."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.link.store_lost:
            found = self.link.call(lambda store: store.get(key) if store.check([key]) else None)
            if isinstance(found, bytes):
                try:
                    return untrusted.loads(found)
                except ValueError:
                    return None
            time.sleep(POLL)
        return None


def _nodes(value: object) -> tuple[int, ...] | None:
    """A list of node ranks as published (distinct, in range); None: not that."""
    if not isinstance(value, list) or len(value) > MAX_NODES:
        return None
    if not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < MAX_NODES for n in value):
        return None
    return tuple(value) if len(set(value)) == len(value) else None
