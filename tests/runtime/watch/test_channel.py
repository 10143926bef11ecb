"""What the nodes' watches read from the store is read strictly (paijob.runtime.watch.channel): another
node's rank states, recent collectives and failures come back exactly in their form, or are dropped and
counted, never believed and never fatal (the store is within reach of the job's own code)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest
from watch_helpers import DictStore

from paijob.runtime.failure import Failure
from paijob.runtime.watch.channel import (
    CALLS_KEY,
    PROGRESS_KEY,
    NodeSeal,
    SignedStore,
    StoreChannel,
)
from paijob.runtime.watch.ranks import RankState, from_published


def state(rank: int, **extra: Any) -> RankState:
    return RankState(rank=rank, node_rank=1, host="10.0.0.6", local_rank=rank % 2, idle_for=3.0, busy=False,
                     cpu_share=0.0, wait="all_reduce", collective=True, first_progress=True, stale_for=0.0,
                     where=[["/job/train.py", 12, "step"]], c10d=True, **extra)


@pytest.fixture
def store() -> DictStore:
    return DictStore()


def channel_over(store: DictStore) -> StoreChannel:
    return StoreChannel(lambda fn: fn(store))


def test_another_nodes_states_come_back_as_they_were_published(store: DictStore):
    channel_over(store).publish(1, [state(2), state(3, threads=[["loader", [["/job/d.py", 4, "get"]]]])])
    reader = channel_over(store)
    assert reader.gather(2, 0) == [state(2), state(3, threads=[["loader", [["/job/d.py", 4, "get"]]]])]
    assert reader.refused == 0


@pytest.mark.parametrize("value", [
    {**asdict(state(2)), "evil": 1},  # a field the watch does not know (was: TypeError killed the watch)
    {k: v for k, v in asdict(state(2)).items() if k != "busy"},  # one missing
    {**asdict(state(2)), "idle_for": float("nan")},
    {**asdict(state(2)), "idle_for": "3"},
    {**asdict(state(2)), "rank": -1},
    {**asdict(state(2)), "busy": 1},
    {**asdict(state(2)), "host": "h" * 10_000},
    {**asdict(state(2)), "where": [["/job/train.py", 12]]},
    {**asdict(state(2)), "threads": [["t", [["f", 1, "g"]]]] * 100},
    {**asdict(state(2)), "loader_worker": [1, "x"]},
    7, "rank", None,
])
def test_a_state_not_in_its_exact_form_is_dropped_and_counted(store: DictStore, value: Any):
    with pytest.raises(ValueError):
        from_published(value)
    store.set(PROGRESS_KEY.format(node=1), json.dumps([value, asdict(state(3))]))
    reader = channel_over(store)
    assert reader.gather(2, 0) == [] and reader.refused == 1  # the whole node's value: one refusal


@pytest.mark.parametrize("text", ["[" * 50_000, "not json", '{"a": 1}', "[" * 60 + "]" * 60])
def test_deep_huge_or_odd_values_are_refused_without_an_error(store: DictStore, text: str):
    store.set(PROGRESS_KEY.format(node=1), text)
    store.set(CALLS_KEY.format(node=1), text)
    reader = channel_over(store)
    assert reader.gather(2, 0) == [] and reader.gather_calls(2, 0) == {}
    assert reader.refused >= 1


def test_recent_collectives_come_back_only_in_their_form(store: DictStore):
    channel_over(store).publish_calls(1, {2: [["0", 5, "all_reduce", 10.5]], 3: [["0", 5, "barrier", 11.0]]})
    assert channel_over(store).gather_calls(2, 0) == {2: [["0", 5, "all_reduce", 10.5]],
                                                      3: [["0", 5, "barrier", 11.0]]}
    store.set(CALLS_KEY.format(node=1), json.dumps({"2": [["0", "5", "all_reduce", 1.0]], "x": [],
                                                    "3": [["0", 6, "barrier", 2.0]]}))
    reader = channel_over(store)
    assert reader.gather_calls(2, 0) == {3: [["0", 6, "barrier", 2.0]]} and reader.refused == 2


def failure(**extra: Any) -> Failure:
    return Failure(node_rank=1, rank=3, local_rank=1, returncode=1, secondary=False, time=100.0,
                   tail="Traceback ...\nValueError: bad", error="ValueError: bad", where="train.py:3 in step",
                   calls={"3": [{"group": "0", "seq": 5, "op": "all_reduce", "sizes": [[2]], "dtypes": ["Float"],
                                 "line": "train.py:3"}]}, **extra)


def test_a_failure_from_the_store_comes_back_as_it_was_published():
    assert Failure.from_json(failure().to_json()) == failure()
    assert Failure.from_json(failure(reason="x", exit_status=124, overrides=True).to_json()).exit_code == 124


@pytest.mark.parametrize("change", [
    {"evil": 1}, {"time": float("nan")}, {"rank": "3"}, {"secondary": "no"}, {"reason": "r" * 100_000},
    {"calls": {"x": []}}, {"calls": {"3": [{"seq": "5"}]}}, {"exit_status": 1 << 40},
])
def test_a_failure_not_in_its_form_is_a_value_error_never_a_type_error(change: dict[str, Any]):
    data = {**json.loads(failure().to_json()), **change}
    with pytest.raises(ValueError):
        Failure.from_json(json.dumps(data))


def test_a_deep_failure_is_a_value_error():
    with pytest.raises(ValueError):
        Failure.from_json("[" * 50_000)
    with pytest.raises(ValueError):
        Failure.from_json("x" * (2 << 20))


def test_a_value_is_believed_only_with_the_jobs_mac_for_its_own_key(store: DictStore):
    """Issue 55: the store answers anyone who reaches its port; what the nodes write carries the MAC of the
    job's node key, bound to the key it is written under, and nothing else is believed."""
    seal = NodeSeal(b"the job's node key, 32 bytes...")
    signed = SignedStore(store, seal)
    signed.set("paijob/progress/1", "[]")
    assert signed.get("paijob/progress/1") == b"[]" and seal.refused == 0
    store.set("paijob/progress/1", "[]")  # a stranger's (or the job's own) unsigned value
    assert signed.get("paijob/progress/1") is None and seal.refused == 1
    store.set("paijob/progress/1", NodeSeal(b"another job's key.............").seal("paijob/progress/1", "[]"))
    assert signed.get("paijob/progress/1") is None and seal.refused == 2
    store.set("paijob/progress/0", seal.seal("paijob/progress/1", "[]"))  # a genuine value replayed elsewhere
    assert signed.get("paijob/progress/0") is None and seal.refused == 3
    store.set("paijob/progress/1", seal.seal("paijob/progress/1", "[]")[:-1] + b"1")  # tampered after signing
    assert signed.get("paijob/progress/1") is None and seal.refused == 4
    assert signed.add("paijob/stacks/wanted", 2) == 2 and signed.check(["paijob/progress/1"])
    unkeyed = NodeSeal(None)  # a job rendered before node keys: plain values, still read strictly above
    assert unkeyed.seal("k", "v") == b"v" and unkeyed.open("k", b"v") == b"v" and not unkeyed.signs


def test_only_a_signed_request_asks_the_nodes_for_their_stacks(store: DictStore):
    """A counter bumped by the job's code (or a stranger) asked for 82 stacks whose reason was untrue."""
    seal = NodeSeal(b"k" * 32)
    node = StoreChannel(lambda fn: fn(SignedStore(store, seal)))
    for _ in range(82):
        store.add("paijob/stacks/wanted", 1)
    assert node.stacks_wanted() == 0
    other = StoreChannel(lambda fn: fn(SignedStore(store, seal)))
    request = other.want_stacks()  # SIGUSR1 on another node, or node 0's verdict: its marker is signed
    assert request == 83 and node.stacks_wanted() == 83
    store.add("paijob/stacks/wanted", 1)
    assert node.stacks_wanted() == 83  # the bump after it asks for nothing more
