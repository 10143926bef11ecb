"""Collectives whose calls disagree (paijob.runtime.watch.mismatch): the receiver gloo aborts is not
blamed; with torch's fingerprint check the ranks whose call differs are named with their lines.
The two-node jobs run in test_hangs.py (slow stage)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from paijob.runtime.watch.failures import Failure, choose_root_cause
from paijob.runtime.watch.mismatch import (
    calls_said,
    mismatch_account,
    odd_ranks,
    script_line,
    undecided,
)

OPTIONS = ("TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu, layout=Strided "
           "(default), requires_grad=false (default), pinned_memory=false (default), "
           "memory_format=(nullopt)))")


def said(me: int, mine: str, other: int, theirs: str) -> str:
    """What torch's fingerprint check (TORCH_DISTRIBUTED_DEBUG=DETAIL) makes rank ``me`` raise."""
    def print_(rank: int, shape: str) -> str:
        return (f"Rank {rank} is running collective: CollectiveFingerPrint(SequenceNumber=5, "
                f"OpType=ALLREDUCE, TensorShape=[{shape}], TensorDtypes=Float, {OPTIONS}")
    return (f'[rank{me}]:   File "/job/train.py", line 12, in <module>\n'
            f'[rank{me}]:   File "/venv/lib/python3.11/site-packages/torch/distributed/'
            f'distributed_c10d.py", line 3245, in all_reduce\n'
            f"[rank{me}]: RuntimeError: Detected mismatch between collectives on ranks. "
            f"{print_(me, mine)}, but {print_(other, theirs)}.Collectives differ")


def failure(rank: int, tail: str, time: float = 10.0, code: int = 1) -> Failure:
    return Failure(node_rank=rank // 2, rank=rank, local_rank=rank % 2, returncode=code,
                   secondary=False, time=time, tail=tail)


DETAIL_ALL = [failure(0, said(0, "1000", 1, "2000")), failure(1, said(1, "2000", 0, "1000")),
              failure(2, said(2, "1000", 1, "2000"), 10.5)]
GLOO_ABORT = ("terminate called after throwing an instance of 'gloo::EnforceNotMet'\n  what():  "
              "[enforce fail at /gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. "
              "1000 vs 500. Received data size doesn't match expected size.")

# (name, failures, the account's reason must start with, None: no account)
TABLE = [
    ("three ranks' words: the one whose call differs, with its line", DETAIL_ALL,
     "mismatched collectives (torch's fingerprint check): rank 1 calls ALLREDUCE [2000] Float at "
     "train.py:12; ranks 0, 2 call ALLREDUCE [1000] Float"),
    ("two ranks that disagree: either may be wrong, both named", DETAIL_ALL[:2],
     "mismatched collectives (torch's fingerprint check): rank 0 calls ALLREDUCE [1000] Float at "
     "train.py:12; rank 1 calls ALLREDUCE [2000] Float at train.py:12"),
    ("gloo aborted the receiver: named as the receiver, with the sizes and the way to the cause",
     [failure(0, GLOO_ABORT, code=-6)],
     "mismatched collectives: rank 0 (node rank 0, local rank 0) received 1000 bytes where its own "
     "call expected 500, and gloo aborted it: it is the receiver, not the cause"),
    ("an ordinary failure is no mismatch", [failure(0, "ValueError: bad label")], None),
]


@pytest.mark.parametrize(("name", "failures", "reason"), TABLE, ids=[row[0] for row in TABLE])
def test_the_mismatch_table(name, failures, reason):  # type: ignore[no-untyped-def]
    account = mismatch_account(failures)
    if reason is None:
        assert account is None
        return
    assert account is not None and account.reason.startswith(reason), account.reason
    assert account.overrides and account.rank is None and account.exit_code == failures[0].exit_code
    assert choose_root_cause([*failures, account]) is account  # beats the workers' own, everywhere


def test_the_calls_and_the_odd_ones():
    assert calls_said(DETAIL_ALL) == {0: "ALLREDUCE [1000] Float", 1: "ALLREDUCE [2000] Float",
                                      2: "ALLREDUCE [1000] Float"}
    assert odd_ranks({0: "a", 1: "b", 2: "a", 3: "c"}) == [1, 3]
    assert odd_ranks({0: "a", 1: "b"}) == [0, 1] and odd_ranks({}) == []
    assert undecided(DETAIL_ALL[:2]) and not undecided(DETAIL_ALL) and not undecided([])
    assert script_line(said(0, "1", 1, "2")) == "train.py:12"
    assert script_line("no traceback") is None
    assert "TORCH_DISTRIBUTED_DEBUG=DETAIL" in (mismatch_account([failure(0, GLOO_ABORT)]) or failure(0, "")).reason


class ReplayedWatch:
    """A NodeWatch whose store shows ``polls`` one after another (each what a heartbeat reads)."""

    def __init__(self, polls: list[list[Failure]]) -> None:
        self.polls = polls
        self.published: list[Failure] = []
        self.waited_for_account = False

    def wait_for(self, enough: Callable[[list[Failure]], bool], timeout: float) -> list[Failure]:
        for records in self.polls:
            if enough(records):
                return records
        return self.polls[-1]

    def wait_for_account(self, timeout: float) -> list[Failure]:
        self.waited_for_account = True
        return self.polls[-1]

    def publish(self, failure: Failure) -> None:
        self.published.append(failure)


def node(node_rank: int, watch: ReplayedWatch, local: list[Failure],
         stopped: list[Failure]) -> tuple[Any, Any]:
    agent = SimpleNamespace(local_failure=local[0] if local else None, local_failures=local,
                            describe_stopped_workers=lambda: stopped, _watch=lambda: watch)
    config = SimpleNamespace(multi_node=True, dist=SimpleNamespace(node_rank=node_rank, nnodes=2))
    return agent, config


def test_node_0_waits_for_the_other_node_not_for_its_own_record_read_back():
    """What CI's busy machine showed: node 0's first poll held only its own record (the store
    holds every node's), and it named no rank."""
    from paijob.runtime.agent import _with_mismatch_account

    own, node1 = DETAIL_ALL[0], DETAIL_ALL[2]
    watch = ReplayedWatch([[own], [own, node1]])
    agent, config = node(0, watch, DETAIL_ALL[:2], [])
    records = _with_mismatch_account(agent, config, [])
    account = records[-1]
    assert account.reason.startswith("mismatched collectives (torch's fingerprint check): rank 1 calls "
                                     "ALLREDUCE [2000] Float at train.py:12; ranks 0, 2 call"), account.reason
    assert watch.published == [account]


def test_a_node_stopped_for_a_peer_publishes_what_its_ranks_said_then_waits_for_node_0():
    """Its ranks raised but had not exited when node 0's record stopped them: torch reports no
    failure of theirs, their output still holds the fingerprints node 0 needs."""
    from paijob.runtime.agent import _with_mismatch_account

    stopped = [failure(2, said(2, "1000", 1, "2000")), failure(3, "")]
    watch = ReplayedWatch([[DETAIL_ALL[0]]])
    agent, config = node(1, watch, [], stopped)
    _with_mismatch_account(agent, config, [DETAIL_ALL[0]])
    assert watch.published == [stopped[0]] and watch.waited_for_account
    # A node whose own failure torch reported published it already: nothing twice.
    watch = ReplayedWatch([[DETAIL_ALL[0]]])
    agent, config = node(1, watch, [DETAIL_ALL[2]], [])
    _with_mismatch_account(agent, config, [DETAIL_ALL[0]])
    assert watch.published == [] and watch.waited_for_account
