"""Whether a failed round is restarted (node 0's decision, pure) and the rounds' store protocol (a fake store)."""

from __future__ import annotations

import threading

import pytest
from suite_helpers import wait_until
from test_liveness import FakeStore, ends, make_watch  # noqa: F401 - ends: the fixture

from paijob.common import exitcodes
from paijob.common.records import RestartRecord
from paijob.runtime.failure import Failure
from paijob.runtime.watch.channel import NodeSeal, RoundStore, SignedStore, round_key
from paijob.runtime.watch.node.restarts import Decision, decide, permanent, signature
from paijob.runtime.watch.node.rounds import RoundPlan, Rounds


def worker(error: str = "ValueError: bad batch", where: str = "train.py:42 in step", code: int = 1,
           tail: str = "", rank: int = 1) -> Failure:
    return Failure(node_rank=1, rank=rank, local_rank=0, returncode=code, secondary=False, time=100.0,
                   error=error, where=where, tail=tail)


def hang(where: str = "train.py:57 in all_reduce") -> Failure:
    return Failure(node_rank=0, rank=None, local_rank=None, returncode=None, secondary=False, time=100.0,
                   reason="hang: no rank made progress for 601s", exit_status=exitcodes.HANG, where=where)


def restarted_after(failure: Failure) -> RestartRecord:
    return RestartRecord(number=1, limit=3, cause="x", exit_code=failure.exit_code, nodes=2, world_size=4,
                         lost_s=1.0, time=101.0, signature=signature(failure))


def test_a_first_failure_of_a_worker_is_restarted_on_every_node():
    found = decide(worker(), done=0, max_restarts=2, history=[], nnodes=3)
    assert found == Decision(True, "worker rank 1 (node rank 1, local rank 0) failed with exit code 1: "
                                   "ValueError: bad batch (train.py:42 in step)", (0, 1, 2))


def test_the_same_exception_at_the_same_line_twice_in_a_row_is_a_bug():
    first = worker()
    found = decide(worker(rank=3), done=1, max_restarts=5, history=[restarted_after(first)], nnodes=2)
    assert not found.restart
    assert found.why == ("the same failure twice in a row: ValueError: bad batch at train.py:42 in step (before "
                         "restart 1 and after it): a bug, not a fault; not restarting")


@pytest.mark.parametrize("second", [worker(error="ValueError: other batch"), worker(where="train.py:43 in step"),
                                    hang("train.py:42 in step")])
def test_another_message_line_or_kind_is_another_failure(second: Failure):
    assert decide(second, done=1, max_restarts=5, history=[restarted_after(worker())], nnodes=2).restart


def test_the_same_hang_at_the_same_line_twice_is_a_bug_a_hang_elsewhere_is_not():
    history = [restarted_after(hang())]
    assert not decide(hang(), done=1, max_restarts=3, history=history, nnodes=2).restart
    assert decide(hang("train.py:60 in barrier"), done=1, max_restarts=3, history=history, nnodes=2).restart


def test_a_failure_without_an_exception_is_never_called_the_same():
    killed = worker(error="", where="", code=-9)
    assert signature(killed) is None
    assert decide(killed, done=1, max_restarts=3, history=[restarted_after(killed)], nnodes=2).restart


def test_no_restart_is_left_after_max_restarts():
    found = decide(worker(), done=2, max_restarts=2, history=[], nnodes=2)
    assert found == Decision(False, "no restart left (--max-restarts 2 used)")


@pytest.mark.parametrize(("failure", "why"), [
    (worker(code=127, error=""), "exit code 127: a command this image cannot run"),
    (worker(code=2, error="SystemExit: 2"), "exit code 2: a configuration error"),
    (worker(error="ModuleNotFoundError: No module named 'apex'"), "ModuleNotFoundError: a module this image lacks"),
    (worker(error="", tail="ImportError: cannot import name 'x'"), "OpenPAI reports as 232 (ContainerImportError"),
    (worker(error="", tail="SyntaxError: invalid syntax"), "231 (ContainerSyntaxError"),
    (worker(code=136, error=""), "OpenPAI reports as 136"),
])
def test_what_openpai_never_retries_or_a_bad_argument_is_never_restarted(failure: Failure, why: str):
    assert why in (permanent(failure) or "")
    found = decide(failure, done=0, max_restarts=3, history=[], nnodes=2)
    assert not found.restart and found.why.startswith("not restarting: ") and why in found.why


@pytest.mark.parametrize("failure", [worker(), worker(code=-9, error=""), worker(code=139, error=""), hang()])
def test_a_fault_openpai_would_retry_may_recover(failure: Failure):
    assert permanent(failure) is None


def test_a_node_stopped_from_outside_or_that_finished_ends_the_job():
    stopped = Failure(node_rank=1, rank=None, local_rank=None, returncode=None, secondary=False, time=1.0,
                      reason="node rank 1 received SIGTERM and stopped its workers")
    found = decide(stopped, done=0, max_restarts=2, history=[], nnodes=2)
    assert not found.restart and "(not a worker's failure)" in found.why
    found = decide(worker(), done=0, max_restarts=2, history=[], nnodes=2, finished=[1])
    assert not found.restart and "the workers of node rank 1 had already finished" in found.why


def test_a_lost_node_ends_the_job_unless_min_nodes_lets_the_others_go_on():
    lost = Failure(node_rank=2, rank=None, local_rank=None, returncode=None, secondary=False, time=1.0,
                   reason="node rank 2 stopped sending heartbeats")
    found = decide(lost, done=0, max_restarts=2, history=[], nnodes=3, lost=[2])
    assert not found.restart and "the job needs all 3 nodes" in found.why
    found = decide(lost, done=0, max_restarts=2, history=[], nnodes=3, lost=[2], min_nodes=2)
    assert found == Decision(True, "node rank 2 was lost; going on with 2 of 3 nodes (--min-nodes 2)", (0, 1))
    found = decide(lost, done=0, max_restarts=2, history=[], nnodes=3, lost=[1, 2], min_nodes=2)
    assert not found.restart and "fewer than --min-nodes 2" in found.why
    found = decide(lost, done=0, max_restarts=2, history=[], nnodes=3, lost=[0], min_nodes=1)
    assert not found.restart and "node rank 0, which hosts the job's store, was lost" in found.why


def test_each_rounds_keys_are_its_own_and_signed_for_that_round():
    assert round_key(0, "paijob/failure/1") == "paijob/failure/1"
    assert round_key(2, "paijob/failure/1") == "paijob/r2/failure/1"
    store = FakeStore()
    seal = NodeSeal(b"k" * 32)
    RoundStore(SignedStore(store, seal), 2).set("paijob/progress/0", "x")
    assert "paijob/r2/progress/0" in store.data
    store.data["paijob/r3/progress/0"] = store.data["paijob/r2/progress/0"]  # moved to another round
    assert RoundStore(SignedStore(store, seal), 3).get("paijob/progress/0") is None
    assert RoundStore(SignedStore(store, seal), 2).get("paijob/progress/0") == b"x"


def test_a_failure_record_of_one_round_never_reaches_the_next(ends):  # noqa: F811 - the fixture
    store = FakeStore()
    master, peer = make_watch(store, 0, 2, ends, heartbeat_timeout=5.0), make_watch(store, 1, 2, ends, 5.0)
    try:
        for watch in (master, peer):
            watch.enter("running")
            watch.start_heartbeats()
        wait_until(lambda: store.check(["paijob/hb/1"]))
        peer.publish(worker())
        wait_until(lambda: master.failed)
        for watch in (master, peer):
            watch.new_round(1)
        assert not master.failed and master.records() == []
        peer.publish(worker(error="ValueError: round 1"))
        wait_until(lambda: master.failed)
        assert [f.error for f in master.records()] == ["ValueError: round 1"]
        assert "paijob/r1/failure/1" in store.data and "paijob/failures" in store.data
    finally:
        for watch in (master, peer):
            watch.close()


def test_node_0s_word_and_the_barrier_bring_every_node_to_the_same_round(ends):  # noqa: F811 - the fixture
    store = FakeStore()
    signed = SignedStore(store, NodeSeal(b"k" * 32))
    watches = [make_watch(signed, node, 3, ends, heartbeat_timeout=5.0) for node in range(3)]  # type: ignore[arg-type]
    try:
        for watch in watches:
            watch.enter("running")
            watch.start_heartbeats()
        wait_until(lambda: all(w.wait_connected(1.0) for w in watches))
        rounds = [Rounds(w) for w in watches]
        rounds[0].tell_end(0, Decision(True, "a worker failed", (0, 1, 2)), worker())
        heard = rounds[2].hear_end(0, timeout=5.0)
        assert heard is not None and heard[0] == Decision(True, "a worker failed", (0, 1, 2))
        assert heard[1].error == "ValueError: bad batch"
        plans: dict[int, object] = {}

        def other(node: int) -> None:
            rounds[node].arrive(1)
            plans[node] = rounds[node].wait_go(1, timeout=10.0)

        threads = [threading.Thread(target=other, args=(node,)) for node in (1, 2)]
        for thread in threads:
            thread.start()
        assert rounds[0].gather(1, (0, 1, 2), timeout=10.0, enough=lambda arrived: False) == (0, 1, 2)
        rounds[0].go(1, (0, 1, 2), 4321)
        for thread in threads:
            thread.join(10)
        assert plans == {1: RoundPlan(1, (0, 1, 2), 4321, 1), 2: RoundPlan(1, (0, 1, 2), 4321, 2)}
        rounds[0].abort(2, "node rank 1 did not come back")
        assert rounds[1].wait_go(2, timeout=5.0) == "node rank 1 did not come back"
        assert rounds[1].wait_go(3, timeout=0.3) == "node rank 0 did not start restart 3 within 0s"
        store.data["paijob/round/4/go"] = b'{"nodes": [0, 1], "port": 5, "abort": ""}'  # unsigned: not node 0's
        assert "did not start" in str(rounds[1].wait_go(4, timeout=0.3))
        rounds[0].go(5, (0, 1), 99)
        assert "was left out of restart 5" in str(rounds[2].wait_go(5, timeout=5.0))
    finally:
        for watch in watches:
            watch.close()


def test_a_signature_is_the_error_and_its_line_both_and_at_most_400_characters():
    assert signature(worker(where="")) is None and signature(worker(error="")) is None
    long = signature(worker(error="ValueError: " + "x" * 500))
    assert long is not None and len(long) == 400 and long.startswith("ValueError: xxx")
    left = Failure.leaving(node_rank=0, rank=1, local_rank=1, time=1.0, reason="rank 1 ended at train.py:9")
    assert signature(left) == "left: rank 1 ended at train.py:9"
    history = [RestartRecord(number=1, limit=3, cause="x", exit_code=0, nodes=2, world_size=4, lost_s=1.0,
                             time=2.0, signature=signature(left))]
    assert not decide(left, done=1, max_restarts=3, history=history, nnodes=2).restart


def test_only_the_last_restarts_failure_is_compared():
    history = [restarted_after(worker()), restarted_after(hang())]
    assert not decide(hang(), done=2, max_restarts=5, history=history, nnodes=2).restart
    found = decide(worker(), done=2, max_restarts=5, history=history, nnodes=2)
    assert found.restart  # the same as two restarts ago, not as the last: a flaky fault, not a bug


def test_a_permanent_failure_names_what_openpais_exit_spec_matched():
    found = permanent(worker(error="", tail="ImportError: cannot import name 'x'"))
    assert found == ("exit code 1, which OpenPAI reports as 232 (ContainerImportError, \"ImportError: cannot "
                     "import name 'x'\") and never retries")
    assert permanent(worker(code=136, error="")) == ("exit code 136, which OpenPAI reports as 136 "
                                                     "(ContainerSigFpeReceived) and never retries")


def test_every_node_needed_says_so_when_one_is_lost():
    found = decide(worker(), done=0, max_restarts=2, history=[], nnodes=3, lost=[2], min_nodes=3)
    assert found == Decision(False, "not restarting: node rank 2 was lost and the job needs all 3 nodes "
                                    "(--min-nodes lets the others go on without it)")
