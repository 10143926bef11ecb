"""Collectives whose calls disagree (paijob.runtime.watch.node.mismatch): the receiver gloo aborts is not
blamed; from torch's flight recorder (what the ranks gloo did not abort called) or its fingerprint
check the ranks whose call differs are named with their lines. The two-node jobs run in
hang/test_hang_doctor.py (slow stage)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from paijob.runtime.failure import Failure, choose_root_cause
from paijob.runtime.watch.node.accounting import Accounting, read_tail
from paijob.runtime.watch.node.mismatch import (
    calls_said,
    describe,
    mismatch_account,
    odd_ranks,
    parting,
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



def call(seq: int, size: int, dtype: str = "Float", line: str | None = "train.py:12",
         op: str = "all_reduce", group: str = "0") -> dict[str, Any]:
    """One entry of a rank's answer (paijob.runtime.watch.node.recorder.recent_calls)."""
    return {"group": group, "seq": seq, "op": op, "sizes": [[size]], "dtypes": [dtype], "line": line}


def recorded(node_rank: int, calls: dict[int, list[dict[str, Any]]]) -> Failure:
    """A node's record carrying its live ranks' answers (they were stopped: SIGTERM)."""
    return Failure(node_rank=node_rank, rank=None, local_rank=None, returncode=None, secondary=True,
                   time=11.0, calls={str(rank): entries for rank, entries in calls.items()})


RECEIVER = failure(0, GLOO_ABORT, code=-6)
BEFORE = [call(4, 1000), call(5, 1000)]  # the steps every rank took alike
ODD_1 = [RECEIVER, recorded(0, {1: [*BEFORE, call(6, 2000, line="train.py:14")]}),
         recorded(1, {2: [*BEFORE, call(6, 1000)], 3: [*BEFORE, call(6, 1000)]})]

# (name, failures, the account's reason must start with, None: no account); a job of 4 ranks
TABLE = [
    ("three ranks' words: the one whose call differs, with its line", DETAIL_ALL,
     "mismatched collectives (torch's fingerprint check): rank 1 calls ALLREDUCE [2000] Float at "
     "train.py:12; ranks 0, 2 call ALLREDUCE [1000] Float"),
    ("two ranks that disagree: either may be wrong, both named", DETAIL_ALL[:2],
     "mismatched collectives (torch's fingerprint check): rank 0 calls ALLREDUCE [1000] Float at "
     "train.py:12; rank 1 calls ALLREDUCE [2000] Float at train.py:12"),
    ("the recorder: the rank whose call differs, with its line; the receiver said as such", ODD_1,
     "mismatched collectives (torch's flight recorder): rank 1 calls all_reduce [2000] Float at "
     "train.py:14; ranks 2, 3 call all_reduce [1000] Float at train.py:12; gloo aborted rank 0 (the "
     "receiver: 1000 bytes where its own call expected 500)"),
    ("the recorder: a dtype differs", [RECEIVER, recorded(0, {1: [call(6, 1000, "Double")]}),
                                       recorded(1, {2: [call(6, 1000)], 3: [call(6, 1000)]})],
     "mismatched collectives (torch's flight recorder): rank 1 calls all_reduce [1000] Double at "
     "train.py:12; ranks 2, 3 call all_reduce [1000] Float"),
    ("the recorder: every rank but the receiver agrees, so the receiver's call differs",
     [RECEIVER, recorded(0, {1: [call(6, 1000)]}), recorded(1, {2: [call(6, 1000)], 3: [call(6, 1000)]})],
     "mismatched collectives (torch's flight recorder): rank 0's call differs: gloo aborted it on "
     "receiving 1000 bytes where its own call expected 500, and every other rank calls the same; "
     "ranks 1, 2, 3 call all_reduce [1000] Float at train.py:12"),
    ("the recorder, one rank of three silent: the receiver is not blamed on too little",
     [RECEIVER, recorded(0, {1: [call(6, 1000)]}), recorded(1, {2: [call(6, 1000)]})],
     "mismatched collectives: gloo aborted rank 0 (node rank 0, local rank 0) on receiving 1000 "
     "bytes where its own call expected 500; the other ranks' calls (torch's flight recorder): "
     "rank 1 calls all_reduce [1000] Float at train.py:12; rank 2 calls all_reduce [1000] Float at train.py:12; "
     "from these alone the call that differs cannot be told; rank 3 did not say its call (ended or "
     "stopped before the recorder was read)"),
    ("the fingerprints beat the recorder", [*DETAIL_ALL, *ODD_1[1:]],
     "mismatched collectives (torch's fingerprint check): rank 1 calls ALLREDUCE [2000] Float"),
    ("gloo aborted the receiver, nobody else said: named as the receiver, with the way to the cause",
     [RECEIVER],
     "mismatched collectives: gloo aborted rank 0 (node rank 0, local rank 0) on receiving 1000 bytes "
     "where its own call expected 500: it is the receiver, not necessarily the rank whose call differs"),
    ("an ordinary failure is no mismatch", [failure(0, "ValueError: bad label")], None),
]


@pytest.mark.parametrize(("name", "failures", "reason"), TABLE, ids=[row[0] for row in TABLE])
def test_the_mismatch_table(name, failures, reason):  # type: ignore[no-untyped-def]
    account = mismatch_account(failures, world_size=4)
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


def test_two_ranks_that_disagree_in_the_recorder_name_nobody_and_more_words_are_waited_for():
    """A job of 2 ranks: the receiver gloo aborted and the one other rank; either call may be the
    wrong one. The account says both; undecided tells node 0 to wait for more nodes' words."""
    failures = [RECEIVER, recorded(0, {1: [call(6, 2000)]})]
    account = mismatch_account(failures, world_size=2)
    assert account is not None and "the call that differs cannot be told" in account.reason
    assert "rank 1 calls all_reduce [2000] Float at train.py:12" in account.reason
    assert undecided(failures, world_size=4) and not undecided(ODD_1, world_size=4)
    assert not undecided([RECEIVER], world_size=4)  # nobody speaks: waiting cannot help


def test_the_calls_compared_are_where_the_ranks_part_not_merely_the_last():
    """A rank's ring buffer runs ahead (asynchronous calls) or lags: the ranks are compared at the
    first sequence number where their recorded calls differ, within the group."""
    ahead = {0: [call(5, 10), call(6, 20), call(7, 30)], 1: [call(5, 10), call(6, 99)],
             2: [call(5, 10), call(6, 20)]}
    at = parting(ahead)
    assert {rank: entry["seq"] for rank, entry in at.items()} == {0: 6, 1: 6, 2: 6}
    assert describe(at[1]) == "all_reduce [99] Float"
    agree = {0: [call(5, 10), call(6, 20)], 1: [call(5, 10)], 2: [call(4, 1), call(5, 10)]}
    assert {rank: entry["seq"] for rank, entry in parting(agree).items()} == {0: 5, 1: 5, 2: 5}
    other_group = {0: [call(1, 8, group="1")], 1: [call(1, 9, group="1")], 2: [call(1, 8, group="1")]}
    assert describe(parting(other_group)[1]) == "all_reduce [9] Float"
    assert parting({}) == {}
    assert describe({"op": "broadcast", "sizes": [[3, 4], [2]], "dtypes": ["Half", "Half"]}) == \
        "broadcast [3, 4] [2] Half"


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


class FakeLauncher:
    """A launcher as the watch sees it (paijob.runtime.watch.node.workers.Launcher), without torch: the
    ranks it runs (by local rank) and what each one's output ends with."""

    def __init__(self, node_rank: int, tails: dict[int, str], pids: dict[int, int] | None = None) -> None:
        self.node_rank = node_rank
        self.assigned_ranks = list(tails)
        self.rank_pids = pids or {}
        self.tails = list(tails.values())

    def log_tail(self, local_rank: int) -> str:
        return self.tails[local_rank] if local_rank < len(self.tails) else ""


def node(node_rank: int, watch: ReplayedWatch, local: list[Failure], stopped: list[Failure],
         recorded_calls: dict[str, list[dict[str, Any]]] | None = None) -> Accounting:
    """Node ``node_rank`` of two (4 ranks) whose workers failed with ``local`` (torch's report) or,
    stopped for a peer, left ``stopped``'s output."""
    launcher = FakeLauncher(node_rank, {f.rank: f.tail for f in stopped if f.rank is not None})
    accounting = Accounting(launcher, watch, nnodes=2, world_size=4)  # type: ignore[arg-type]
    accounting.local_failure = local[0] if local else None
    accounting.local_failures = local
    accounting.recorded_calls = recorded_calls or {}
    return accounting


def test_node_0_waits_for_the_other_node_not_for_its_own_record_read_back():
    """What CI's busy machine showed: node 0's first poll held only its own record (the store
    holds every node's), and it named no rank."""
    own, node1 = DETAIL_ALL[0], DETAIL_ALL[2]
    watch = ReplayedWatch([[own], [own, node1]])
    records = node(0, watch, DETAIL_ALL[:2], []).with_mismatch_account([])
    account = records[-1]
    assert account.reason.startswith("mismatched collectives (torch's fingerprint check): rank 1 calls "
                                     "ALLREDUCE [2000] Float at train.py:12; ranks 0, 2 call"), account.reason
    assert watch.published == [account]


def test_a_node_stopped_for_a_peer_publishes_what_its_ranks_said_then_waits_for_node_0():
    """Its ranks raised but had not exited when node 0's record stopped them: torch reports no
    failure of theirs, their output still holds the fingerprints node 0 needs."""
    stopped = [failure(2, said(2, "1000", 1, "2000")), failure(3, "")]
    watch = ReplayedWatch([[DETAIL_ALL[0]]])
    node(1, watch, [], stopped).with_mismatch_account([DETAIL_ALL[0]])
    assert [f.tail for f in watch.published] == [stopped[0].tail] and watch.waited_for_account
    # A node whose own failure torch reported published it already: nothing twice.
    watch = ReplayedWatch([[DETAIL_ALL[0]]])
    node(1, watch, [DETAIL_ALL[2]], []).with_mismatch_account([DETAIL_ALL[0]])
    assert watch.published == [] and watch.waited_for_account


def test_node_0_waits_for_the_other_nodes_recorded_calls_then_names_the_rank():
    """Without the fingerprint check: node 0's own live rank said its call, node 1's ranks said
    theirs in node 1's record; node 0 waits for that record, then names rank 1 on every node."""
    ours = {"1": [*BEFORE, call(6, 2000, line="train.py:14")]}
    receiver = failure(0, GLOO_ABORT, code=-6)
    watch = ReplayedWatch([[receiver], [receiver, ODD_1[2]]])
    accounting = node(0, watch, [receiver], [], recorded_calls=ours)
    receiver.calls = ours  # set where the agent published its local failure
    account = accounting.with_mismatch_account([])[-1]
    assert account.reason.startswith("mismatched collectives (torch's flight recorder): rank 1 calls "
                                     "all_reduce [2000] Float at train.py:14"), account.reason
    assert watch.published == [account]


def test_a_node_stopped_for_a_peer_publishes_its_ranks_recorded_calls():
    """Node 1's ranks were stopped for node 0's failure: no traceback says anything, but their
    recorders did; node 1 publishes that (once) and waits for node 0's account."""
    stopped = [failure(2, ""), failure(3, "")]
    ours = {"2": [call(6, 1000)], "3": [call(6, 1000)]}
    watch = ReplayedWatch([[RECEIVER]])
    node(1, watch, [], stopped, recorded_calls=ours).with_mismatch_account([RECEIVER])
    assert [f.calls for f in watch.published] == [ours] and watch.waited_for_account


def test_a_worker_torch_stopped_still_gives_the_odd_ranks_line(tmp_path):
    """torch 2.4, one run in eight: rank 1 (the odd one) was stopped by torch as rank 0 failed, and
    torch 2.4 reports no worker it stopped; rank 1 was named without sizes.py:13. Once every worker
    has ended, the node adds what its stopped workers wrote, and re-reads a tail that named no line
    (a traceback written as torch stopped it)."""
    logs = {0: tmp_path / "rank0.err", 1: tmp_path / "rank1.err"}
    logs[0].write_text(said(0, "1000", 1, "2000"))
    logs[1].write_text(said(1, "2000", 0, "1000"))
    launcher = SimpleNamespace(node_rank=0, assigned_ranks=[0, 1], rank_pids={},
                               log_tail=lambda local_rank: read_tail(str(logs[local_rank])))
    agent = Accounting(launcher, ReplayedWatch([[]]), nnodes=2, world_size=4)  # type: ignore[arg-type]
    agent.local_failures = [failure(0, "")]
    before = mismatch_account([*agent.local_failures, DETAIL_ALL[2]])
    assert before is not None and "rank 1 calls ALLREDUCE [2000] Float;" in before.reason  # no line
    agent.complete_local_failures()
    assert [f.rank for f in agent.local_failures] == [0, 1]
    after = mismatch_account([*agent.local_failures, DETAIL_ALL[2]])
    assert after is not None and after.reason.startswith(
        "mismatched collectives (torch's fingerprint check): rank 1 calls ALLREDUCE [2000] Float at "
        "train.py:12; ranks 0, 2 call"), after.reason
