"""Synthetic jobs for the slow-rank doctor's tests: every rank's collectives as gloo would enqueue them."""

from __future__ import annotations

from paijob.runtime.watch.slow.verdict import Call, RankWindow

HOSTS = {0: "10.0.0.5", 1: "10.0.0.6"}
BALANCED = {"collective": 20, "compute": 70, "data": 10}
LINES = {"collective": ["all_reduce", "train.py:88"], "compute": ["backward", "train.py:80"],
         "data": ["next", "train.py:72"], "host": ["evaluate", "train.py:95"]}


def simulate(extra, *, ranks=4, per_node=2, steps=120, base=0.1, op="all_reduce", clock=None):
    """Each step every rank computes ``base`` + ``extra(rank, step)`` seconds, then enqueues a
    blocking all_reduce that completes once the last rank enqueued it (as gloo does)."""
    clock = clock or {}
    done = 1000.0
    calls = {rank: [] for rank in range(ranks)}
    for step in range(steps):
        arrived = {rank: done + base + extra(rank, step) for rank in range(ranks)}
        for rank, when in arrived.items():
            calls[rank].append(Call("0", step + 1, op, when + clock.get(rank // per_node, 0.0)))
        done = max(arrived.values()) + 0.001
    return calls


def windows(calls, *, per_node=2, activity=None):
    activity = activity or {}
    return [RankWindow(rank, rank // per_node, HOSTS[rank // per_node], rank % per_node,
                       tuple(found), activity.get(rank, BALANCED), LINES)
            for rank, found in calls.items()]


def jitter(rank, step):
    """A few ms of deterministic noise, a different rank last each step."""
    return 0.004 * ((rank * 7 + step * 3) % 5) / 4


def simulate_steps(extra, *, per_step: int, ranks=4, per_node=2, steps=60, base=0.1, gap=0.002):
    """Each step every rank computes ``base`` + ``extra(rank, step)`` seconds, then enqueues ``per_step``
    blocking all_reduces back to back (a DDP model's gradient buckets, ``gap`` apart), each completing
    once the last rank enqueued it."""
    done = 1000.0
    calls = {rank: [] for rank in range(ranks)}
    seq = 0
    for step in range(steps):
        ready = {rank: done + base + extra(rank, step) for rank in range(ranks)}
        for _bucket in range(per_step):
            seq += 1
            for rank, when in ready.items():
                calls[rank].append(Call("0", seq, "all_reduce", when))
            done = max(ready.values()) + 0.0005
            ready = dict.fromkeys(ready, done + gap)
    return calls
