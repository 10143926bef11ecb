"""What the nodes' watches say to each other through the job's store: every key, its writer and its reader.

Why one module: the doctors on every node share what they see with node 0 over the store the nodes
already share (the rendezvous store that node 0's agent hosts in ``per-gpu`` mode, the script's own store
in ``per-node`` mode: :mod:`paijob.runtime.watch.node.storelink`). That store is readable and writable by
anything that reaches its port, the job's own code included, so what is read back is read strictly: bounded
JSON (:mod:`paijob.common.untrusted`), exact fields and types (:func:`~paijob.runtime.watch.ranks.from_published`),
and a value that does not pass is dropped and counted (:attr:`StoreChannel.refused`), never believed and never
fatal.

=================================  ==================================  ====================================
key                                written by                          read by
=================================  ==================================  ====================================
``paijob/progress/<node>``         every node's hang doctor, 1/s       node 0's hang doctor
``paijob/slow/<node>``             every node's slow-rank doctor       node 0's slow-rank doctor
``paijob/calls/<node>``            a node's hang doctor, on a verdict  node 0's hang verdict (the sequence)
``paijob/stacks/wanted``           node 0, or SIGUSR1 on any node      every node's hang doctor
``paijob/stacks/<node>/<request>`` every node's hang doctor            node 0 (the stacks file)
``paijob/clock/<node>/...``        node k asks, node 0 answers         :mod:`paijob.runtime.watch.slow.clock`
``paijob/round/<r>/end``           node 0, once round r failed         every node (restart or end, and why)
``paijob/round/<r>/arrived/<n>``   node n, its workers stopped         node 0 (the restart barrier)
``paijob/round/<r>/go``            node 0, every node arrived          every node (round r's nodes, its port)
``paijob/round/current``           node 0, as each round starts        a node that starts late (joins the next)
=================================  ==================================  ====================================

**Rounds.** A restart (``--max-restarts``) starts round r of the workers inside the same attempt. Everything
a round's workers and doctors say goes under keys of that round (:func:`round_key`: round 0 as above, round r
under ``paijob/r<r>/...``), the failure records of the node watch too
(:mod:`paijob.runtime.watch.node.liveness`): what round r said never reaches round r+1, whose doctors start
afresh. The round's own keys (its end, the barrier) are the only ones written across rounds.

A single-node job shares nothing: :class:`Channel` is the quiet one. No torch import: the store is anything
with TCPStore's ``set``/``get``/``check``/``add``.

**Signed.** The store listens on node 0's port with no authentication: on OpenPAI every host of the cluster
reaches it (host network), and the job's own code writes to it (it is the workers' rendezvous store). So every
value paijob-runtime writes there carries an HMAC-SHA256 under the job's node key, bound to the key it is
written under (:class:`NodeSeal`), and every value it reads is believed only with that MAC: the nodes use the
store through :class:`SignedStore`, which seals what is set and opens what is got (a value without the right
MAC reads as absent, and is counted). The node key is the job's own (:func:`paijob.runtime.held.node_key`):
the local cluster hands it to every task of the job, on OpenPAI it is the job's secret that ``paijob submit``
adds. Counters (``add``) cannot carry a MAC: each one paijob acts on is paired with a signed value (a request
for stacks is a signed marker; a failure is a signed record the counter only announces).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from paijob.common import untrusted
from paijob.runtime.watch.ranks import RankState, from_published

PROGRESS_KEY = "paijob/progress/{node}"
SLOW_KEY = "paijob/slow/{node}"  # a node's ranks' evidence for the slow-rank doctor
CALLS_KEY = "paijob/calls/{node}"  # a node's ranks' recent collectives, for node 0's hang verdict
STACKS_WANTED_KEY = "paijob/stacks/wanted"  # a counter: SIGUSR1 or a verdict asks every node
STACKS_REQUEST_KEY = "paijob/stacks/request/{request}"  # the signed marker that makes a request real
STACKS_KEY = "paijob/stacks/{node}/{request}"
ROUND_END_KEY = "paijob/round/{round}/end"  # node 0's word on how round <round> ended: a restart, or the end
ROUND_ARRIVED_KEY = "paijob/round/{round}/arrived/{node}"  # node <node> stopped its workers, waits for round <round>
ROUND_GO_KEY = "paijob/round/{round}/go"  # node 0: round <round> starts, with these nodes, its workers' store there
ROUND_CURRENT_KEY = "paijob/round/current"  # node 0: the round the workers are at (absent: the first)
MAX_VALUE = 4 << 20  # bytes of one value read back (a node's stacks of many ranks are the largest)
MAX_CALLS = 1024  # collectives of one rank in a published calls value


SEALED = b"paijob-mac1:"  # a sealed value: this, the MAC's 64 hex digits, ":", the value


class NodeSeal:
    """The job's node key, with which every node signs what it writes into the store and checks what it reads.
    ``key`` None: the job has none (rendered by an older paijob, or paijob-runtime run by hand): values are
    written and read unsigned, as before, still read strictly."""

    def __init__(self, key: bytes | None) -> None:
        self._key = key
        self._lock = threading.Lock()
        self.refused = 0  # values read without the right MAC (a stranger's, the job's, or a corrupt one)

    @property
    def signs(self) -> bool:
        return self._key is not None

    def _mac(self, name: str, value: bytes) -> bytes:
        assert self._key is not None
        digest = hmac.new(self._key, name.encode("utf-8", "surrogateescape") + b"\0" + value, hashlib.sha256)
        return digest.hexdigest().encode("ascii")

    def seal(self, name: str, value: str | bytes) -> bytes:
        """``value`` as written under the store key ``name``: with its MAC, bound to that key."""
        data = value.encode("utf-8") if isinstance(value, str) else value
        return data if self._key is None else SEALED + self._mac(name, data) + b":" + data

    def open(self, name: str, sealed: bytes | str | None) -> bytes | None:
        """What ``sealed`` (read under ``name``) says, when its MAC is this job's for that key; None otherwise
        (counted in :attr:`refused`: never believed, never an error)."""
        if sealed is None:
            return None
        data = sealed.encode("utf-8", "surrogateescape") if isinstance(sealed, str) else bytes(sealed)
        if self._key is None:
            return data
        head, mac_end = len(SEALED), len(SEALED) + 64
        if data.startswith(SEALED) and data[mac_end:mac_end + 1] == b":" and hmac.compare_digest(
                data[head:mac_end], self._mac(name, data[mac_end + 1:])):
            return data[mac_end + 1:]
        with self._lock:
            self.refused += 1
        return None


class SignedStore:
    """The job's store as the nodes' watches use it: every value set is sealed, every value got is opened
    (:class:`NodeSeal`; a value without the right MAC reads as None, as if absent), counters pass through."""

    def __init__(self, store: Any, seal: NodeSeal) -> None:
        self.store = store
        self.seal = seal

    def set(self, name: str, value: str | bytes) -> None:
        self.store.set(name, self.seal.seal(name, value))

    def get(self, name: str) -> bytes | None:
        return self.seal.open(name, self.store.get(name))

    def check(self, names: list[str]) -> bool:
        return bool(self.store.check(names))

    def add(self, name: str, amount: int) -> int:
        return int(self.store.add(name, amount))


def round_key(round_number: int, key: str) -> str:
    """``key`` (``paijob/...``) as round ``round_number`` of the workers writes it: round 0's keys as they are,
    a later round's under ``paijob/r<round>/``, so no record or report of one round is read in the next."""
    if round_number == 0 or not key.startswith("paijob/"):
        return key
    return f"paijob/r{round_number}/{key[len('paijob/'):]}"


class RoundStore:
    """The job's store as round ``round_number`` uses it: every key under :func:`round_key` (a
    :class:`SignedStore` below binds each value's MAC to the round's key, so a value moved across rounds
    is not believed either)."""

    def __init__(self, store: Any, round_number: int) -> None:
        self.store = store
        self.round = round_number

    def set(self, name: str, value: str | bytes) -> None:
        self.store.set(round_key(self.round, name), value)

    def get(self, name: str) -> Any:
        return self.store.get(round_key(self.round, name))

    def check(self, names: list[str]) -> bool:
        return bool(self.store.check([round_key(self.round, name) for name in names]))

    def add(self, name: str, amount: int) -> int:
        return int(self.store.add(round_key(self.round, name), amount))


class Channel:
    """How the nodes share what their doctors see: nothing, on a single node (the store's is
    :class:`StoreChannel`)."""

    refused = 0  # values read back that were not in their exact form (dropped)

    def publish(self, node_rank: int, states: Sequence[RankState]) -> None:
        """This node's rank states, for node 0's hang doctor."""

    def gather(self, nnodes: int, node_rank: int) -> list[RankState]:
        """Every other node's rank states as it last published them."""
        return []

    def publish_calls(self, node_rank: int, calls: Mapping[int, Sequence[Sequence[Any]]]) -> None:
        """This node's ranks' recent collectives (``[group, seq, op, enqueued]``), for node 0's hang verdict."""

    def gather_calls(self, nnodes: int, node_rank: int) -> dict[int, list[list[Any]]]:
        """Every other node's ranks' recent collectives, by rank."""
        return {}

    def stacks_wanted(self) -> int:
        return 0

    def want_stacks(self) -> int:
        return 0

    def send_stacks(self, node_rank: int, request: int, text: str) -> None:
        pass

    def collect_stacks(self, nnodes: int, request: int, timeout: float) -> dict[int, str]:
        return {}

    def publish_slow(self, node_rank: int, text: str) -> None:
        pass

    def gather_slow(self, nnodes: int, node_rank: int) -> list[str]:
        return []

    def get_text(self, key: str) -> str | None:
        return None

    def set_text(self, key: str, text: str) -> None:
        pass


class StoreChannel(Channel):
    """Over the job's store: every call bounded (``call(fn)`` returns None when the store fails or is slow)."""

    def __init__(self, call: Callable[..., Any]) -> None:
        self.call = call
        self.refused = 0
        self._wanted = 0  # the newest request for stacks found signed

    def publish(self, node_rank: int, states: Sequence[RankState]) -> None:
        self.set_text(PROGRESS_KEY.format(node=node_rank), json.dumps([asdict(s) for s in states]))

    def gather(self, nnodes: int, node_rank: int) -> list[RankState]:
        found: list[RankState] = []
        for text in self._others(PROGRESS_KEY, nnodes, node_rank):
            value = self._loads(text)
            try:
                if not isinstance(value, list):
                    raise ValueError("not a list")
                found.extend(from_published(item) for item in value)
            except ValueError:
                self.refused += 1
        return found

    def publish_calls(self, node_rank: int, calls: Mapping[int, Sequence[Sequence[Any]]]) -> None:
        self.set_text(CALLS_KEY.format(node=node_rank), json.dumps({str(r): list(c) for r, c in calls.items()}))

    def gather_calls(self, nnodes: int, node_rank: int) -> dict[int, list[list[Any]]]:
        found: dict[int, list[list[Any]]] = {}
        for text in self._others(CALLS_KEY, nnodes, node_rank):
            value = self._loads(text)
            if not isinstance(value, dict):
                self.refused += value is not None
                continue
            for rank, calls in value.items():
                checked = _calls(calls)
                if rank.isdigit() and checked is not None:
                    found[int(rank)] = checked
                else:
                    self.refused += 1
        return found

    def publish_slow(self, node_rank: int, text: str) -> None:
        self.set_text(SLOW_KEY.format(node=node_rank), text)

    def gather_slow(self, nnodes: int, node_rank: int) -> list[str]:
        return self._others(SLOW_KEY, nnodes, node_rank)

    def get_text(self, key: str) -> str | None:
        """The text under ``key``: None when absent, too large or (through a :class:`SignedStore`) unsigned."""
        def get(store: Any) -> bytes | None:
            return store.get(key) if store.check([key]) else None

        value = self.call(get)
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace") if len(value) <= MAX_VALUE else None
        return value if isinstance(value, str) and len(value) <= MAX_VALUE else None

    def set_text(self, key: str, text: str) -> None:
        self.call(lambda store: store.set(key, text))

    def _others(self, key_format: str, nnodes: int, node_rank: int) -> list[str]:
        """What every other node published under ``key_format`` (those that did), each call bounded."""
        texts = [self.get_text(key_format.format(node=node)) for node in range(nnodes) if node != node_rank]
        return [text for text in texts if text]

    def _loads(self, text: str) -> Any:
        """``text`` as bounded JSON; None (counted) when it is not."""
        try:
            return untrusted.loads(text)
        except ValueError:
            self.refused += 1
            return None

    def stacks_wanted(self) -> int:
        """The newest request for every node's stacks that a node of the job made (its signed marker there):
        a counter the job's code or a stranger bumps asks for nothing."""
        value = int(self.call(lambda store: int(store.add(STACKS_WANTED_KEY, 0))) or 0)
        if value > self._wanted and self.get_text(STACKS_REQUEST_KEY.format(request=value)) is not None:
            self._wanted = value
        return self._wanted

    def want_stacks(self) -> int:
        """Ask every node for its stacks (SIGUSR1 here, or node 0's verdict): the request's number."""
        value = int(self.call(lambda store: int(store.add(STACKS_WANTED_KEY, 1))) or 0)
        if value:
            self.set_text(STACKS_REQUEST_KEY.format(request=value), "1")
            self._wanted = max(self._wanted, value)
        return value

    def send_stacks(self, node_rank: int, request: int, text: str) -> None:
        self.set_text(STACKS_KEY.format(node=node_rank, request=request), text)

    def collect_stacks(self, nnodes: int, request: int, timeout: float) -> dict[int, str]:
        found: dict[int, str] = {}
        deadline = time.monotonic() + timeout
        while len(found) < nnodes - 1 and time.monotonic() < deadline:
            for node in range(1, nnodes):
                if node not in found:
                    text = self.get_text(STACKS_KEY.format(node=node, request=request))
                    if text:
                        found[node] = text
            time.sleep(0.2)
        return found


def _calls(value: object) -> list[list[Any]] | None:
    """One rank's published calls, ``[group, seq, op, enqueued]`` each; None: not that form."""
    if not isinstance(value, list) or len(value) > MAX_CALLS:
        return None
    for call in value:
        if not (isinstance(call, list) and len(call) == 4 and isinstance(call[0], str) and len(call[0]) <= 16
                and isinstance(call[1], int) and isinstance(call[2], str) and len(call[2]) <= 40
                and isinstance(call[3], (int, float))):
            return None
    return value
