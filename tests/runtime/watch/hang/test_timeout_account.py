"""``per-node`` mode, torch's own process-group timeout fires first: every node prints node 0's
account (the rank that never arrived), from the ranks' noted errors, the store while it lives,
and node 0's notice on the declared port once the store has ended with the script's rank 0.

The two-node jobs that produce these run in hang/test_hang_doctor.py (slow stage)."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import free_port
from watch_helpers import DictStore, watched_node

from paijob.runtime.config import HangSettings
from paijob.runtime.failure import Failure
from paijob.runtime.watch.channel import StoreChannel
from paijob.runtime.watch.node.notice import (
    ABORT,
    ACCOUNT,
    read_abort_notice,
    read_notice,
    serve_notice,
)
from paijob.runtime.watch.node.storelink import StoreLink
from paijob.runtime.watch.worker.sampler import Sampler
from paijob.runtime.watch.worker.spawn import noting_errors
from paijob.runtime.watch.worker.stack import error_line as error_text

GLOO_TIMEOUT = ("RuntimeError: [/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 15000ms "
                "for recv operation to complete")
C10D = "/venv/site-packages/torch/distributed/distributed_c10d.py"


def serving(port: int, kind: str, message: str, peers: int) -> tuple[threading.Thread, list[int]]:
    served: list[int] = []
    thread = threading.Thread(target=lambda: served.append(
        serve_notice(port, kind, message, peers=peers, linger=20.0)))
    thread.start()
    deadline = time.time() + 10
    while True:  # listening yet? (a bare connection that says nothing is not a reader)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return thread, served
        except OSError:
            assert time.time() < deadline
            time.sleep(0.05)


def test_the_notice_counts_only_readers_not_store_clients_or_probes():
    """A store client knocking on the port (it speaks first, in its own protocol) or a probe that
    connects and leaves must not use up the one reader node 0 waits for."""
    port = free_port()
    account = Failure(node_rank=0, rank=None, local_rank=None, returncode=1, secondary=False,
                      time=1.0, reason="torch's process-group timeout fired ...", detail="a\nb",
                      overrides=True)
    thread, served = serving(port, ACCOUNT, account.to_json(), peers=1)
    with socket.create_connection(("127.0.0.1", port), timeout=2) as store_client:
        store_client.sendall(b"\x0b\x00\x00\x00\xce\xf7\x85\x3c")  # a store's first bytes
        assert store_client.recv(65536).startswith(ACCOUNT.encode())
    found = read_notice("127.0.0.1", port)
    thread.join(10)
    assert served == [1]
    assert found is not None and found[0] == ACCOUNT
    assert Failure.from_json(found[1]) == account  # the detail's lines survive the one-line notice
    assert read_abort_notice("127.0.0.1", port, timeout=0.5) is None  # node 0 has left


def test_a_diagnosis_notice_is_read_as_before_and_a_store_is_no_notice():
    port = free_port()
    thread, served = serving(port, ABORT, "the script listens on 12355", peers=1)
    assert read_abort_notice("127.0.0.1", port) == "the script listens on 12355"
    thread.join(10)
    with socket.socket() as silent:  # a store: accepts, never speaks first
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        assert read_notice("127.0.0.1", silent.getsockname()[1], timeout=0.5) is None


def test_a_spawned_ranks_error_is_noted_in_its_report_at_once_and_raised_unchanged(tmp_path: Path):
    sampler = Sampler(str(tmp_path), 2, interval=1.0, local_rank=0)
    sampler.write(sampler.sample())
    error = RuntimeError("[/gloo] Timed out waiting 15000ms\nfor recv operation")

    def train(index: int) -> None:
        raise error

    with pytest.raises(RuntimeError) as raised:
        noting_errors(train, sampler)(0)
    assert raised.value is error
    noted = json.loads((tmp_path / "rank2.json").read_text())
    assert noted["error"] == "RuntimeError: [/gloo] Timed out waiting 15000ms for recv operation"
    sampler.write({**sampler.sample(), "error": ""})  # a sample taken before the error was noted
    assert json.loads((tmp_path / "rank2.json").read_text())["error"] == noted["error"]
    assert error_text(ValueError("x")) == "ValueError: x"


def report(rank: int, *, line: int, wait: str | None, error: str = "") -> dict[str, Any]:
    """A live rank's sampler file: in ``wait`` (a collective) at train.py:line, or outside any."""
    now = time.time()
    frames: list[list[Any]] = [["/job/train.py", 5, "<module>"], ["/job/train.py", line, "train"]]
    if wait:
        frames.append([C10D, 3252, wait])
    return {"rank": rank, "local_rank": rank % 2, "pid": os.getpid(), "time": now,
            "active_at": now - 14, "data_moved_at": now - 14, "wait": wait,
            "collective": wait is not None, "c10d": wait is not None, "frames": frames,
            "error": error}


class Node:
    """One node's hang watch over a folder of hand-written sampler files, its channel a store."""

    def __init__(self, tmp_path: Path, node_rank: int, link: StoreLink) -> None:
        self.folder = tmp_path / f"node{node_rank}"
        self.folder.mkdir()
        self.node = watched_node(self.folder, settings=HangSettings(timeout=600), node_rank=node_rank, nnodes=2,
                                 world_size=4, host="127.0.0.1", stacks_dir=str(tmp_path),
                                 channel=StoreChannel(link.call), accounts=True)
        self.declared = self.node.declared
        assert self.node.hang is not None
        self.watch = self.node.hang

    def write(self, rank: int, **fields: Any) -> None:
        (self.folder / f"rank{rank}.json").write_text(json.dumps(report(rank, **fields)))


@pytest.fixture
def nodes(tmp_path: Path) -> list[Node]:
    store = DictStore()
    links = [StoreLink("127.0.0.1", 1, prefix="p", node_rank=n, nnodes=2, connect=lambda: store)
             for n in (0, 1)]
    found = [Node(tmp_path, n, links[n]) for n in (0, 1)]
    # ranks 0, 2, 3 wait in all_reduce at train.py:16; rank 1 (node 0) never arrives (train.py:15)
    found[0].write(0, line=16, wait="all_reduce")
    found[0].write(1, line=15, wait=None)
    found[1].write(2, line=16, wait="all_reduce")
    found[1].write(3, line=16, wait="all_reduce")
    return found


NAMED = ("torch's process-group timeout fired in rank {waiter}'s all_reduce at train.py:16; the rank "
         "that never arrived: rank 1 (node rank 0, host 127.0.0.1, local rank 1) is stuck at "
         "train.py:15 in train, outside any collective")


def test_node_0_accounts_for_a_timeout_on_another_node_while_the_store_lives(nodes: list[Node]):
    """Node 1's rank timed out first: node 0 reads its noted error through the store at its next
    look and declares the account (which the other nodes read from the store)."""
    nodes[1].node.tick(), nodes[0].node.tick()  # everyone running: no account
    assert nodes[0].declared == [] and nodes[0].watch.account is None
    nodes[1].write(2, line=16, wait=None, error=GLOO_TIMEOUT)  # it left the collective, raising
    nodes[1].node.tick(), nodes[0].node.tick()
    assert [f.reason for f in nodes[0].declared] == [NAMED.format(waiter=2)]
    assert nodes[0].watch.account == nodes[0].declared[0]
    assert nodes[1].watch.timed_out_here() and not nodes[0].watch.timed_out_here()


def test_node_0_accounts_at_once_when_its_own_command_failed_before_its_next_look(nodes: list[Node]):
    """Node 0's rank 0 timed out, its command ended in milliseconds: the account comes from the
    files read now and the other node's last summaries, the ended ranks where they last ran."""
    nodes[1].node.tick(), nodes[0].node.tick()
    nodes[0].write(0, line=16, wait=None, error=GLOO_TIMEOUT)
    nodes[0].write(1, line=30, wait=None, error="KeyboardInterrupt")  # torch stopped the culprit
    account = nodes[0].watch.account_now()
    assert account is not None and account.reason == NAMED.format(waiter=0)
    assert nodes[1].watch.account_now() is None  # only node 0 judges
    assert nodes[0].watch.account_now() is account  # once made, the same


def test_no_account_without_a_timeout_or_in_per_gpu_mode(nodes: list[Node]):
    nodes[1].node.tick(), nodes[0].node.tick()
    nodes[0].write(0, line=16, wait=None, error="ValueError: bad label")
    assert nodes[0].watch.account_now() is None
    nodes[0].write(0, line=16, wait=None, error=GLOO_TIMEOUT)
    nodes[0].watch.accounts = False  # per-gpu: torch's agent has the failures, the agent accounts
    assert nodes[0].watch.account_now() is None
