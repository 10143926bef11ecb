"""The slow-rank doctor on node 0 (paijob.runtime.watch.slowwatch): when it judges, when it speaks,
what it says at the end, and what it takes from the other nodes."""

from __future__ import annotations

import json

from test_straggler import jitter, simulate

from paijob.runtime.watch.slowwatch import PERSIST, PREFIX, SlowDoctor, _parsed

BALANCED = {"collective": 20, "compute": 70, "data": 10}


def ranks(extra, *, progress=True, step=0, activity=None):
    """Every rank as the nodes publish it, its collectives from :func:`simulate` (4 ranks, 2 nodes),
    its activity counts grown by ``step`` looks."""
    calls = simulate(extra)
    grown = activity or {}
    return [{"rank": r, "node_rank": r // 2, "host": f"10.0.0.{5 + r // 2}", "local_rank": r % 2,
             "exited": False, "first_progress": progress,
             "activity": {a: n * (step + 1) for a, n in grown.get(r, BALANCED).items()},
             "lines": {"collective": ["all_reduce", "train.py:88"]},
             "calls": [[c.group, c.seq, c.op, c.enqueued] for c in found]} for r, found in calls.items()]


def doctor(said, **kwargs):
    return SlowDoctor(node_rank=0, nnodes=2, world_size=4, folder="/nonexistent", read=lambda p: None,
                      say=said.append, **kwargs)


def slow3(rank, step):
    return 0.05 if rank == 3 else 0.0


def test_a_straggler_is_said_once_it_persisted_then_every_few_minutes(monkeypatch):
    said: list[str] = []
    found = doctor(said, repeat=180.0)
    found.since = 0.0  # every collective of the simulation is past start-up
    for look in range(PERSIST - 1):
        assert found.judge(10.0 * look, ranks(slow3, step=look)) is not None
    assert said == []
    found.judge(10.0 * PERSIST, ranks(slow3, step=PERSIST))
    assert len(said) == 1 and said[0].startswith(PREFIX + "slow rank: rank 3 (node rank 1")
    found.judge(100.0, ranks(slow3))
    assert len(said) == 1
    found.judge(30.0 + 180.0, ranks(slow3))
    assert len(said) == 2
    found.finish()
    assert said[-1] == PREFIX + "over the run: " + found.worst.line()  # type: ignore[union-attr]


def test_a_straggler_that_comes_and_goes_is_not_said():
    said: list[str] = []
    found = doctor(said)
    found.since = 0.0
    for look in range(3 * PERSIST):
        found.judge(10.0 * look, ranks(slow3 if look % 2 else jitter))
    assert said == []
    found.finish()
    assert said == []  # nothing to sum up


def test_nothing_is_judged_before_every_rank_is_past_its_first_step():
    said: list[str] = []
    found = doctor(said)
    assert found.judge(1005.0, ranks(slow3, progress=False)) is None
    assert found.since is None
    found.judge(2000.0, ranks(slow3))
    assert found.since == 2000.0  # from here on: the simulation's collectives (1000-1020) are all older
    assert found.judge(2010.0, ranks(slow3)) is None


def test_a_phase_is_said_at_once_and_as_a_phase():
    said: list[str] = []
    found = doctor(said)
    found.since = 0.0
    found.judge(10.0, ranks(lambda r, s: 30.0 if (r, s) == (0, 60) else jitter(r, s)))
    assert len(said) == 1 and said[0].startswith(PREFIX + "one rank works alone: rank 0")
    found.finish()
    assert len(said) == 1  # a phase is no straggler of the run


def test_activities_are_counted_over_the_window_not_since_the_start():
    said: list[str] = []
    found = doctor(said)
    found.since = 0.0
    first = ranks(slow3, activity={3: {"data": 100}})
    found.judge(10.0, first)
    later = ranks(slow3, activity={3: {"data": 100}})
    later[3]["activity"] = {"data": 100, "compute": 50}
    found.judge(20.0, later)
    windows = found.windows(later)
    assert windows[3].activity == {"data": 0, "compute": 50}


def test_a_doctor_that_meets_an_error_says_it_once_and_never_raises():
    said: list[str] = []

    def gather(nnodes, node_rank):
        raise RuntimeError("the store went away")

    found = doctor(said, gather=gather)
    found.look(100.0, {}, [])
    found.look(200.0, {}, [])
    assert said == [PREFIX + "RuntimeError: the store went away"]


def test_a_node_publishes_its_ranks_and_node_0_reads_only_their_shape():
    published: list[tuple[int, str]] = []
    other = SlowDoctor(node_rank=1, nnodes=2, world_size=4, folder="/nonexistent", read=lambda p: None,
                       say=print, publish=lambda node, text: published.append((node, text)))
    other.look(100.0, {}, [])
    other.look(105.0, {}, [])  # not due yet
    assert published == [(1, "[]")]
    hostile = json.dumps([{"rank": 2, "node_rank": 1, "host": "h" * 100, "local_rank": "x",
                           "first_progress": True, "calls": [["0", 1, "all_reduce", 1.0], "junk"],
                           "activity": {"data": 1, "evil": 2}}, {"rank": "3"}, 7])
    assert _parsed(hostile) == [{"rank": 2, "node_rank": 1, "host": "h" * 64, "local_rank": None,
                                 "exited": False, "first_progress": True, "activity": {"data": 1},
                                 "lines": {}, "calls": [["0", 1, "all_reduce", 1.0]]}]
    assert _parsed("not json") == [] and _parsed('{"rank": 1}') == []
