"""The rank state both doctors read (paijob.runtime.watch.ranks): a sampler's report summarised as durations,
faulthandler's dump and py-spy's read believed over the last sample, and another node's published state read
back field by field, at the edges of every bound."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

import pytest

from paijob.runtime.watch.folder import MAX_ERROR
from paijob.runtime.watch.ranks import (
    MAX_FRAMES,
    MAX_TEXT,
    MAX_THREADS,
    STALE_AFTER,
    Look,
    RankState,
    call_order,
    from_published,
    left_phrase,
    main_and_threads,
    parse_dump,
    report_frames,
    summarise,
)

NOW = 1000.0
LIB = "/venv/site-packages/torch/distributed/distributed_c10d.py"


def report(**extra: Any) -> dict[str, Any]:
    return {"rank": 3, "local_rank": 1, "pid": 7, "time": NOW - 2.0, "active_at": NOW - 30.0,
            "data_moved_at": NOW - 40.0, "busy": True, "cpu_share": 0.5, "wait": "all_reduce", "collective": True,
            "first_progress": True, "c10d": True, "longest_wait": 2.5, "main_thread": 11,
            "frames": [["/job/train.py", 9, "<module>"], ["/job/train.py", 4, "step"], [LIB, 3252, "all_reduce"]],
            **extra}


def test_a_report_becomes_durations_as_of_now():
    state = summarise(report(), node_rank=1, host="10.0.0.6", now=NOW, interval=1.0)
    assert (state.rank, state.node_rank, state.host, state.local_rank) == (3, 1, "10.0.0.6", 1)
    assert (state.idle_for, state.quiet_for, state.stale_for) == (30.0, 40.0, 1.0)  # 2 s old, 1 s interval
    assert state.busy and state.cpu_share == 0.5 and state.wait == "all_reduce" and state.collective and state.c10d
    assert state.first_progress and state.longest_wait == 2.5 and not state.exited and not state.stopped
    assert state.where == [["/job/train.py", 4, "step"], ["/job/train.py", 9, "<module>"], [LIB, 3252, "all_reduce"]]
    assert state.location == "train.py:4" and not state.silent and not state.odd


def test_a_report_older_than_stale_after_is_not_busy_and_its_future_times_count_as_now():
    old = summarise(report(time=NOW - STALE_AFTER), node_rank=0, host="h", now=NOW, interval=1.0)
    assert not old.busy and not old.silent and old.stale_for == STALE_AFTER - 1.0  # silent one interval later
    silent = summarise(report(time=NOW - STALE_AFTER - 1.0), node_rank=0, host="h", now=NOW, interval=1.0)
    assert silent.silent and silent.stale_for == STALE_AFTER
    fresh = summarise(report(time=NOW - STALE_AFTER + 0.5), node_rank=0, host="h", now=NOW, interval=1.0)
    assert fresh.busy
    future = summarise(report(time=NOW + 50, active_at=NOW + 50, data_moved_at=NOW + 50), node_rank=0, host="h",
                       now=NOW, interval=1.0)
    assert (future.idle_for, future.quiet_for, future.stale_for) == (0.0, 0.0, 0.0)
    bare = summarise({"rank": 0}, node_rank=0, host="h", now=NOW, interval=1.0, exited=True, stopped=True)
    assert (bare.idle_for, bare.cpu_share, bare.wait, bare.where, bare.threads, bare.error) == (0.0, 0.0, None, [], [], "")
    assert bare.exited and bare.stopped and not bare.busy


def test_an_error_is_kept_at_its_bound_and_a_left_rank_is_where_its_code_ended():
    state = summarise(report(error="e" * (MAX_ERROR + 5)), node_rank=0, host="h", now=NOW, interval=1.0)
    assert state.error == "e" * MAX_ERROR
    left = summarise(report(left={"where": ["/job/train.py", 12, "<module>"]}), node_rank=0, host="h", now=NOW,
                     interval=1.0, exited=True)
    assert left.left and left.where == [["/job/train.py", 12, "<module>"]]
    assert left_phrase(left).endswith("exited with code 0 at train.py:12")
    for not_a_frame in (["/job/train.py", "12", "<module>"], [12, 12, "<module>"], ["/job/train.py", 12, 12],
                        ["/job/train.py", 12], "train.py:12"):
        odd = summarise(report(left={"where": not_a_frame}), node_rank=0, host="h", now=NOW, interval=1.0)
        assert not odd.left and odd.location == "train.py:4"  # not a frame: the last sample stands
    ended = replace(left, where=[["/job/train.py", 0, "main"]])
    assert left_phrase(ended).endswith("exited with code 0 at the end of main")
    alive = replace(left, exited=False)
    assert "ended its code at train.py:12 but its process has not exited" in left_phrase(alive)
    assert left_phrase(replace(left, where=[])).endswith("exited with code 0")


DUMP = ('Timeout (0:00:03)!\nThread 0x0000000000000010 (most recent call first):\n'
        '  File "/job/train.py", line 30 in holder\n\n'
        'Current thread 0x000000000000000b (most recent call first):\n'
        '  File "/job/train.py", line 77 in step\n  File "/job/train.py", line 88 in run\n'
        '  File "/job/train.py", line 90 in <module>\n'
        'not a frame\n')


def test_the_call_a_ranks_own_code_runs_inside_is_kept_at_its_bound():
    """Issue 53: the sampler's word for the collective a rank's own code runs under (``__reduce__`` inside
    ``all_gather_object``) reaches the verdict, cut to MAX_TEXT; anything but a non-empty string is none."""
    inside = summarise(report(inside="all_gather_object"), node_rank=0, host="h", now=NOW, interval=1.0)
    assert inside.inside == "all_gather_object"
    long = summarise(report(inside="x" * (MAX_TEXT + 3)), node_rank=0, host="h", now=NOW, interval=1.0)
    assert long.inside == "x" * MAX_TEXT
    for nothing in ("", 7, ["all_gather_object"], None):
        assert summarise(report(inside=nothing), node_rank=0, host="h", now=NOW, interval=1.0).inside is None


def test_the_other_rank_of_a_blocking_send_or_recv_is_kept_when_it_is_a_rank():
    """Issue 53: the sampler's ``peer`` (the global rank a blocking send or recv waits for) reaches the
    verdict; anything but a rank in bounds is none."""
    peer = summarise(report(wait="recv", peer=0), node_rank=0, host="h", now=NOW, interval=1.0)
    assert peer.peer == 0
    assert summarise(report(peer=(1 << 20) - 1), node_rank=0, host="h", now=NOW, interval=1.0).peer == (1 << 20) - 1
    for nothing in (-1, 1 << 20, True, 1.0, "1", None):
        assert summarise(report(peer=nothing), node_rank=0, host="h", now=NOW, interval=1.0).peer is None
    assert summarise(report(), node_rank=0, host="h", now=NOW, interval=1.0).peer is None


def test_faulthandlers_dump_is_read_outermost_first_by_thread():
    assert parse_dump(DUMP) == {16: [["/job/train.py", 30, "holder"]],
                                11: [["/job/train.py", 90, "<module>"], ["/job/train.py", 88, "run"],
                                     ["/job/train.py", 77, "step"]]}
    assert parse_dump('  File "/x.py", line 1 in f\n') == {}  # a frame before any thread: no thread of it
    assert parse_dump("") == {}


def test_the_freshest_source_of_a_ranks_stack_wins():
    seen = {"frames": [["/job/train.py", 5, "<module>"]], "threads": [{"name": "t", "frames": [["/job/t.py", 1, "f"]]}]}
    assert main_and_threads(report(), DUMP, seen) == ([["/job/train.py", 5, "<module>"]],
                                                      [["t", [["/job/t.py", 1, "f"]]]], "outside")
    frames, threads, source = main_and_threads(report(threads=[{"name": "holder", "ident": 16}]), DUMP, None)
    assert source == "dump" and frames[-1] == ["/job/train.py", 77, "step"] and threads == [
        ["holder", [["/job/train.py", 30, "holder"]]]]
    unnamed = main_and_threads(report(), DUMP, None)[1]
    assert unnamed == [["thread 0x10", [["/job/train.py", 30, "holder"]]]]
    other = main_and_threads(report(main_thread=99), DUMP, None)  # the dump lacks its main thread
    assert other[2] == "report" and other[0] == report()["frames"]
    plain = main_and_threads(report(threads=[{"name": "w", "frames": [["/job/w.py", 2, "g"]]}, {}]), "", None)
    assert plain == (report()["frames"], [["w", [["/job/w.py", 2, "g"]]], ["?", []]], "report")
    state = summarise(report(), node_rank=0, host="h", now=NOW, interval=1.0, dump=DUMP)
    assert state.dumped and state.silent and state.location == "train.py:77" and not state.outside
    stopped = summarise(report(), node_rank=0, host="h", now=NOW, interval=1.0, stopped=True, seen=seen, unread="")
    assert stopped.outside and not stopped.dumped and stopped.threads == [["t", [["/job/t.py", 1, "f"]]]]
    unread = summarise(report(), node_rank=0, host="h", now=NOW, interval=1.0, stopped=True, unread="why")
    assert unread.unread == "why" and not unread.outside


def test_only_the_first_threads_are_kept():
    many = [{"name": f"t{i}", "frames": []} for i in range(MAX_THREADS + 3)]
    assert len(summarise(report(threads=many), node_rank=0, host="h", now=NOW, interval=1.0).threads) == MAX_THREADS


def test_the_users_lines_come_first_and_go_back_in_call_order():
    frames = [["/job/train.py", 9, "<module>"], ["/job/train.py", 4, "step"], [LIB, 80, "wrapper"], [LIB, 3252, "all_reduce"]]
    where = report_frames(frames)
    assert where == [["/job/train.py", 4, "step"], ["/job/train.py", 9, "<module>"], [LIB, 3252, "all_reduce"],
                     [LIB, 80, "wrapper"]]
    assert call_order(where) == frames
    library = [[LIB, i, f"f{i}"] for i in range(8)]
    assert report_frames(library) == list(reversed(library))[:5]
    assert call_order(report_frames(library)) == library[3:]
    assert report_frames(frames, limit=2) == [["/job/train.py", 4, "step"], ["/job/train.py", 9, "<module>"]]


def state(**extra: Any) -> dict[str, Any]:
    found = RankState(rank=2, node_rank=1, host="10.0.0.6", local_rank=0, idle_for=3.0, busy=False, cpu_share=0.0,
                      wait="all_reduce", collective=True, first_progress=True, stale_for=0.0,
                      where=[["/job/train.py", 12, "step"]], loader_worker=[0, 77],
                      threads=[["loader", [["/job/d.py", 4, "get"]]]])
    return {**asdict(found), **extra}


@pytest.mark.parametrize("change", [
    {"rank": 0}, {"rank": (1 << 20) - 1}, {"local_rank": None}, {"wait": None}, {"host": "h" * MAX_TEXT},
    {"error": "e" * MAX_ERROR}, {"idle_for": 0}, {"idle_for": 1e9 - 1}, {"loader_worker": None},
    {"loader_worker": [0, None]}, {"threads": [["t", []]] * MAX_THREADS}, {"where": [["/f.py", 1, "g"]] * MAX_FRAMES},
    {"where": [["f" * MAX_TEXT, 1, "g" * MAX_TEXT]]}, {"peer": 0}, {"peer": None},
])
def test_a_published_state_at_its_bounds_is_read_back(change: dict[str, Any]):
    assert asdict(from_published(state(**change))) == state(**change)


@pytest.mark.parametrize("change", [
    {"rank": -1}, {"rank": 1 << 20}, {"rank": True}, {"rank": 2.0}, {"node_rank": "1"}, {"local_rank": -1},
    {"wait": 3}, {"wait": "w" * (MAX_TEXT + 1)}, {"host": "h" * (MAX_TEXT + 1)}, {"host": None},
    {"error": "e" * (MAX_ERROR + 1)}, {"unread": None}, {"idle_for": -0.5}, {"idle_for": 1e9},
    {"idle_for": float("inf")}, {"cpu_share": True}, {"busy": 0}, {"unseen": None},
    {"loader_worker": [0]}, {"loader_worker": [0, 1, 2]}, {"loader_worker": [-1, 1]}, {"loader_worker": [0, -1]},
    {"loader_worker": (0, 1)}, {"threads": [["t", []]] * (MAX_THREADS + 1)}, {"threads": [["t"]]},
    {"threads": [[1, []]]}, {"threads": [["t", [["f", 1]]]]}, {"threads": "t"},
    {"where": [["/f.py", 1, "g"]] * (MAX_FRAMES + 1)}, {"where": [["f" * (MAX_TEXT + 1), 1, "g"]]},
    {"where": [["f", 1, "g" * (MAX_TEXT + 1)]]}, {"where": [["f", "1", "g"]]}, {"where": "f"},
    {"peer": -1}, {"peer": "1"}, {"peer": True},
])
def test_a_published_state_past_a_bound_or_of_another_type_is_refused(change: dict[str, Any]):
    with pytest.raises(ValueError):
        from_published(state(**change))


@pytest.mark.parametrize("value", [{**state(), "evil": 1}, {k: v for k, v in state().items() if k != "unseen"},
                                   list(state().items()), "state", None])
def test_a_published_state_with_other_fields_or_not_an_object_is_refused(value: Any):
    with pytest.raises(ValueError, match="not a published rank state"):
        from_published(value)


def test_a_look_carries_what_the_eyes_read():
    found = summarise(report(), node_rank=0, host="h", now=NOW, interval=1.0)
    look = Look(now=NOW, reports={3: report()}, states=[found], dumps={3: DUMP}, seen={3: {"frames": []}})
    assert (look.now, look.reports[3]["pid"], look.states, look.dumps[3], look.seen[3]) == (
        NOW, 7, [found], DUMP, {"frames": []})
    assert Look(NOW, {}, []).dumps == {} and Look(NOW, {}, []).seen == {}
