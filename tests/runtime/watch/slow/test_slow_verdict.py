"""The slow-rank doctor's verdict (paijob.runtime.watch.slow.verdict) and the sampler's activities
(paijob.runtime.watch.frames) on synthetic jobs: who is named, as what, and when it stays quiet."""

from __future__ import annotations

import os

import pytest
from slow_helpers import BALANCED, HOSTS, LINES, jitter, simulate, simulate_steps, windows

from paijob.common import records
from paijob.runtime.watch.frames import activity_of, is_library, line_of
from paijob.runtime.watch.slow.verdict import (
    CPU_SERVED_RATIO,
    CPU_WAIT,
    CPU_WAIT_MARGIN,
    MIN_CPU_SECONDS,
    THRESHOLD,
    TIE_SECONDS,
    Call,
    RankWindow,
    Waits,
    caused_most,
    covered,
    cpu_shares,
    heavy_pauses,
    is_phase,
    judge_slow,
    ranks_phrase,
)


def test_a_balanced_job_names_no_one():
    assert judge_slow(windows(simulate(jitter))) is None


def test_one_rank_slow_in_compute_is_named_with_what_it_does():
    activity = {3: {"collective": 2, "compute": 90, "data": 8}}
    verdict = judge_slow(windows(simulate(lambda r, s: 0.05 if r == 3 else 0.0), activity=activity))
    assert verdict is not None and verdict.kind == "rank" and verdict.culprits == (3,)
    assert verdict.wait_share == pytest.approx(0.05 / 0.151, abs=0.01)
    assert verdict.activity == "compute"
    assert verdict.line() == (
        "slow rank: rank 3 (node rank 1, host 10.0.0.6, local rank 1) holds the job back: ranks 0-2 "
        "wait for it 33% of the time in all_reduce at train.py:88; it spends 90% of its time "
        "computing (backward() at train.py:80), the others 70%")


def test_one_rank_slow_in_data_loading_names_the_dataloader_line():
    activity = {1: {"collective": 2, "compute": 35, "data": 63}}
    verdict = judge_slow(windows(simulate(lambda r, s: 0.07 if r == 1 else jitter(r, s)), activity=activity))
    assert verdict is not None and verdict.culprits == (1,) and verdict.activity == "data"
    assert "it spends 63% of its time in the DataLoader (next() at train.py:72), the others 10%" in verdict.line()
    assert "ranks 0, 2-3 wait for it" in verdict.line()


@pytest.mark.parametrize(("extra", "named"), [
    (0.0105, False),  # the others wait ~9.5 % of the time: under the threshold
    (0.0125, True),   # ~11 %
    (0.2, True),
])
def test_the_threshold_is_ten_percent_of_the_wall_time(extra, named):
    verdict = judge_slow(windows(simulate(lambda r, s: extra if r == 2 else 0.0)))
    assert (verdict is not None) is named
    if verdict:
        assert verdict.wait_share >= THRESHOLD


def test_every_rank_of_one_node_late_by_the_same_amount_is_a_slow_node():
    verdict = judge_slow(windows(simulate(lambda r, s: 0.04 + jitter(r, s) if r >= 2 else jitter(r, s))))
    assert verdict is not None and verdict.kind == "node" and verdict.culprits == (2, 3)
    assert verdict.line().startswith("slow node: node rank 1 (host 10.0.0.6, ranks 2-3) holds the job "
                                     "back: ranks 0-1 wait for it")


def test_two_late_ranks_on_different_nodes_are_ranks_not_a_node():
    verdict = judge_slow(windows(simulate(lambda r, s: 0.05 if r in (1, 3) else 0.0)))
    assert verdict is not None and verdict.kind == "rank" and verdict.culprits == (1, 3)
    assert "hold the job back: ranks 0, 2 wait for them" in verdict.line()


def test_one_node_of_a_single_node_job_is_never_a_slow_node():
    calls = simulate(lambda r, s: 0.05 if r == 1 else 0.0, ranks=2, per_node=2)
    verdict = judge_slow(windows(calls))
    assert verdict is not None and verdict.kind == "rank" and verdict.culprits == (1,)


def test_a_rank_zero_evaluation_by_design_is_a_phase_not_a_straggler():
    activity = {0: {"collective": 5, "compute": 40, "host": 55}}
    calls = simulate(lambda r, s: 30.0 if (r, s) == (0, 60) else jitter(r, s))
    verdict = judge_slow(windows(calls, activity=activity))
    assert verdict is not None and verdict.kind == "phase" and verdict.culprits == (0,)
    assert verdict.activity == "host"
    assert verdict.line().startswith("one rank works alone: rank 0 (node rank 0, host 10.0.0.5, local rank 0) "
                                     "works in host-side work (evaluate() at train.py:95) while ranks 1-3 wait "
                                     "in all_reduce at train.py:88, up to 30s at a time")
    assert verdict.line().endswith("not counted as a straggler")


def test_a_short_hiccup_says_nothing():
    assert judge_slow(windows(simulate(lambda r, s: 2.0 if (r, s) == (2, 50) else jitter(r, s)))) is None


def test_noise_that_makes_a_different_rank_late_each_step_names_no_one():
    """The others wait > 10 %, yet no rank is late most of the time: nobody holds the job back."""
    def rotating(rank, step):
        return 0.05 if rank == (step * 3) % 4 or (rank == 1 and step % 2) else 0.0

    assert judge_slow(windows(simulate(rotating))) is None


def test_more_than_half_of_the_job_late_is_not_a_straggler():
    assert judge_slow(windows(simulate(lambda r, s: 0.05 if r > 0 else 0.0))) is None


def test_hosts_clocks_are_compared_through_their_offsets():
    """Node 1's clock is 0.3 s ahead: without its offset its ranks look late at every step."""
    calls = simulate(lambda r, s: 0.05 if r == 0 else 0.0, clock={1: 0.3})
    assert judge_slow(windows(calls)).culprits == (2, 3)  # type: ignore[union-attr]
    verdict = judge_slow(windows(calls), {1: 0.3})
    assert verdict is not None and verdict.culprits == (0,)


def test_collectives_before_the_first_training_step_are_not_judged():
    """A rank that arrived 60 s late at the first collective (loading data) is start-up."""
    calls = simulate(lambda r, s: 60.0 if (r, s) == (3, 1) else jitter(r, s))
    since = calls[3][1].enqueued + 0.001  # every rank past its first step once it arrived
    assert judge_slow(windows(calls), since=since) is None
    assert judge_slow(windows(calls)) is not None  # the same evidence, start-up included


def test_without_the_recorder_the_samples_say_who_waits():
    calls = {rank: [] for rank in range(4)}  # torch 2.4's gloo: no rank kept a collective
    waiting = {"collective": 40, "compute": 60}
    activity = {0: waiting, 1: waiting, 2: waiting, 3: {"collective": 1, "data": 80, "compute": 19}}
    verdict = judge_slow(windows(calls, activity=activity))
    assert verdict is not None and verdict.source == "samples" and verdict.culprits == (3,)
    assert verdict.activity == "data" and verdict.wait_share == pytest.approx(0.4)
    few = {rank: {"collective": 4, "compute": 1} for rank in range(3)} | {3: {"compute": 5}}
    assert judge_slow(windows(calls, activity=few)) is None
    some = simulate(lambda r, s: 0.05 if r == 3 else 0.0, steps=4)  # a recorder, too few collectives yet
    assert judge_slow(windows(some, activity=activity)) is None


def test_the_record_carries_every_ranks_figures():
    verdict = judge_slow(windows(simulate(lambda r, s: 0.05 if r == 3 else 0.0)))
    assert verdict is not None
    record = verdict.record()
    assert record["kind"] == "rank" and record["ranks"] == [3] and record["nodes"] == [1]
    assert [f["rank"] for f in record["figures"]] == [0, 1, 2, 3]
    assert record["figures"][3]["last"] == 119 and record["figures"][3]["wait_share"] < 0.01
    assert record["figures"][0]["activity"] == {"collective": 0.2, "data": 0.1, "compute": 0.7}


@pytest.mark.parametrize(("waits", "phase"), [
    ([0.0] * 99 + [30.0], True),
    ([0.0] * 99 + [0.5], True),  # however short (the caller drops pauses under 5 s)
    ([0.0] * 9 + [30.0], True),  # 10 collectives: the top one
    ([0.0] * 8 + [10.0, 10.0], False),  # ... and only the top one
    ([0.0] * 8 + [1.0, 4.0], True),  # exactly 80 %
    ([0.05] * 100, False),
    ([0.05] * 90 + [1.0] * 10, False),  # a slow batch every tenth step: a straggler, not a phase
    ([0.0] * 10, False),
    ([0.0] * 75 + [3.0] * 4, True),  # a pause every 20 collectives, the window cut between two: 79, top 4
    ([0.0] * 77 + [3.0] * 4, True),  # 81: the top 5
    ([0.0] * 56 + [3.0] * 4, False),  # a pause every 15: the top 3 hold 75 %
    ([0.0] * 38 + [3.0] * 3, True),  # 41: the top 3 (one in 21 would be 2 of them, 67 %)
])
def test_a_phase_is_a_few_long_pauses(waits, phase):
    assert is_phase(waits) is phase


@pytest.mark.parametrize(("ranks", "said"), [
    ([3], "rank 3"), ([0, 1, 2], "ranks 0-2"), ([0, 2, 3, 4, 5], "ranks 0, 2-5"), ([5, 1], "ranks 1, 5"),
])
def test_ranks_phrase(ranks, said):
    assert ranks_phrase(ranks) == said


TORCH = os.path.join(os.sep, "venv", "lib", "site-packages", "torch")
TRAIN = os.path.join(os.sep, "work", "train.py")


def frames(*names):
    return [list(frame) for frame in names]


@pytest.mark.parametrize(("stack", "busy", "activity", "line"), [
    (frames((TRAIN, 88, "<module>"), (f"{TORCH}/distributed/distributed_c10d.py", 2800, "all_reduce")),
     False, "collective", ["all_reduce", "train.py:88"]),
    (frames((TRAIN, 44, "<module>"), (f"{TORCH}/distributed/c10d_logger.py", 83, "wrapper"),
            (f"{TORCH}/distributed/distributed_c10d.py", 2800, "barrier")),
     False, "collective", ["barrier", "train.py:44"]),
    (frames((TRAIN, 72, "<module>"), (f"{TORCH}/utils/data/dataloader.py", 700, "__next__"),
            (f"{TORCH}/utils/data/_utils/fetch.py", 50, "fetch"), (TRAIN, 20, "__getitem__")),
     True, "data", ["next", "train.py:72"]),
    (frames((TRAIN, 95, "<module>"), (TRAIN, 40, "evaluate")), True, "host", ["evaluate", "train.py:40"]),
    (frames((TRAIN, 97, "<module>"), (f"{TORCH}/serialization.py", 900, "save")), True, "host",
     ["save", "train.py:97"]),
    (frames((TRAIN, 80, "<module>"), (f"{TORCH}/_tensor.py", 600, "backward")), True, "compute",
     ["backward", "train.py:80"]),
    # idle in backward: DDP's reducer waits there for the gradients' all-reduces (issue 53: counted as compute)
    (frames((TRAIN, 80, "<module>"), (f"{TORCH}/_tensor.py", 600, "backward"),
            (f"{TORCH}/autograd/graph.py", 800, "_engine_run_backward")), False, "collective",
     ["backward", "train.py:80"]),
    (frames((TRAIN, 60, "<module>"), (TRAIN, 30, "step_once")), True, "compute", ["step_once", "train.py:30"]),
    # the script's own code under a collective's frames (rank 0's __getstate__ waits for its checkpoint writer
    # inside all_gather_object): its own work, not a wait for the others (issue 53)
    (frames((TRAIN, 25, "<module>"), (f"{TORCH}/distributed/distributed_c10d.py", 3100, "all_gather_object"),
            (f"{TORCH}/distributed/distributed_c10d.py", 2900, "_object_to_tensor"), (TRAIN, 16, "__getstate__"),
            (f"{os.path.dirname(os.__file__)}/threading.py", 600, "wait")), False,
     "other", ["wait", "train.py:16"]),
    (frames((TRAIN, 25, "<module>"), (f"{TORCH}/distributed/distributed_c10d.py", 3100, "all_gather_object"),
            (TRAIN, 16, "save_checkpoint")), True, "host", ["save_checkpoint", "train.py:16"]),
    (frames((TRAIN, 61, "<module>"), (f"{os.path.dirname(os.__file__)}/time.py", 1, "sleep")), False,
     "other", ["sleep", "train.py:61"]),
])
def test_one_sample_is_one_activity_and_a_line(stack, busy, activity, line):
    assert activity_of(stack, busy=busy, is_library=is_library) == activity
    assert line_of(stack, activity, is_library=is_library)[:2] == line


def test_with_the_recorder_on_a_long_pause_is_never_judged_from_the_samples():
    """Rank 0 evaluates alone; no collective completes meanwhile, so none is newer than the start of
    judging: the samples (ranks 1-3 inside all_reduce, rank 0 not) must not make it a straggler."""
    waiting = {"collective": 40, "compute": 0}
    activity = {0: {"host": 40}, 1: waiting, 2: waiting, 3: waiting}
    calls = simulate(jitter)
    since = max(call.enqueued for found in calls.values() for call in found) + 1
    assert judge_slow(windows(calls, activity=activity), since=since) is None
    no_recorder = {rank: [] for rank in calls}
    assert judge_slow(windows(no_recorder, activity=activity)) is not None  # what the samples alone say


# -- the edges of each rule ---------------------------------------------------------------------

def exact_calls(late, *, ranks=4, steps=40):
    """Collectives one second apart on exact clocks; ``late(rank, seq)``: how many seconds that rank
    enqueues that collective after the others (whole and half seconds: exact in binary)."""
    calls = {rank: [] for rank in range(ranks)}
    now = 1000.0
    for seq in range(1, steps + 1):
        arrived = {rank: now + late(rank, seq) for rank in range(ranks)}
        for rank, when in arrived.items():
            calls[rank].append(Call("0", seq, "all_reduce", when))
        now = max(arrived.values()) + 1.0
    return calls


def sampled(shares, *, per_node=2):
    """Windows without collectives whose samples put each rank ``shares[rank]`` hundredths inside one."""
    return [RankWindow(rank, rank // per_node, HOSTS[rank // per_node], rank % per_node, (),
                       {"collective": share, "compute": 100 - share}, LINES) for rank, share in enumerate(shares)]


def test_just_enough_collectives_since_the_start_of_judging_are_judged():
    """5 consecutive pairs (MIN_PAIRS), the first of them last enqueued exactly at ``since``."""
    calls = simulate(lambda r, s: 0.05 if r == 3 else 0.0, steps=7)
    since = max(found[2].enqueued for found in calls.values())  # seq 3: pairs 3-7 counted
    assert judge_slow(windows(calls), since=since) is not None
    assert judge_slow(windows(calls), since=since + 1e-6) is None  # 4 pairs


def test_collectives_all_enqueued_at_once_give_no_wait_shares():
    calls = {rank: [Call("0", seq, "all_reduce", 1000.0) for seq in range(1, 20)] for rank in range(4)}
    assert judge_slow(windows(calls)) is None


def test_a_job_of_one_rank_has_no_straggler():
    assert judge_slow(windows(simulate(lambda r, s: 0.0, ranks=1))) is None
    assert judge_slow([]) is None


@pytest.mark.parametrize(("last", "named"), [(70, True), (69, False)])
def test_the_late_rank_must_cause_seventy_percent_of_the_waiting(last, named):
    """Rank 3 arrives 2 s late in ``last`` of 100 collectives; in the others rank 2 is 2 s late."""
    def late(rank, seq):
        if seq <= last + 1:
            return 2.0 if rank == 3 else 0.0
        return 2.0 if rank == 2 else 0.0

    verdict = judge_slow(windows(exact_calls(late, steps=101)))
    assert (verdict is not None and verdict.culprits == (3,)) is named


def test_a_rank_late_in_few_collectives_but_for_long_is_the_one_waited_for():
    """What counts is the waiting caused, not how often a rank arrives last: rank 3 arrives 2 s late in
    30 of 100 collectives, rank 2 a few ms late in the other 70 (as a rank does whose neighbour
    turned slow mid-run, or a victim downstream of the late rank in gloo's ring)."""
    def late(rank, seq):
        if seq <= 31:
            return 2.0 if rank == 3 else 0.0
        return 0.005 if rank == 2 else 0.0

    verdict = judge_slow(windows(exact_calls(late, steps=101)))
    assert verdict is not None and verdict.culprits == (3,)


def test_a_victim_that_waits_less_is_not_named_with_the_late_rank():
    """Rank 2 finishes each collective after the late rank 3 (gloo's ring passes the late data on
    through it) and so enqueues the next one a little later than ranks 0-1: its wait share is under
    half the most waiting rank's, but it causes almost none of the waiting. Only rank 3 is named."""
    verdict = judge_slow(windows(exact_calls(lambda rank, seq: {3: 0.5, 2: 0.375}.get(rank, 0.0), steps=101)))
    assert verdict is not None and verdict.kind == "rank" and verdict.culprits == (3,)  # not "slow node: node rank 1"
    assert [w.rank for w in verdict.waiting] == [0, 1, 2]


def test_a_pause_of_five_seconds_is_a_phase_and_a_shorter_one_a_hiccup():
    def pause(seconds):
        return exact_calls(lambda rank, seq: seconds if (rank, seq) == (0, 30) else 0.0)

    verdict = judge_slow(windows(pause(5.0)))
    assert verdict is not None and verdict.kind == "phase" and verdict.longest_pause == 5.0
    assert verdict.pauses == 1 and ", up to 5s at a time (" in verdict.line()  # one pause: no rhythm to tell
    assert judge_slow(windows(pause(4.5))) is None
    two = exact_calls(lambda rank, seq: 5.0 if rank == 0 and seq in (20, 40) else 0.0, steps=60)
    twice = judge_slow(windows(two))
    assert twice is not None and twice.kind == "phase" and twice.pauses == 2
    assert f", up to 5s at a time, 2 pauses in {twice.period:.0f}s (" in twice.line()


def test_the_thresholds_edges_from_the_samples():
    """Exact shares: rank 0 waits 10 % (the threshold), rank 1 5 % (half of it: late)."""
    verdict = judge_slow(sampled([10, 5], per_node=2))
    assert verdict is not None and verdict.culprits == (1,) and verdict.wait_share == THRESHOLD
    assert judge_slow(sampled([10, 6], per_node=2)) is None  # rank 1 not late enough
    assert judge_slow(sampled([9, 4], per_node=2)) is None  # under the threshold


def test_ten_samples_a_rank_are_enough_and_nine_are_not():
    def counted(n):
        return [RankWindow(r, 0, HOSTS[0], r, (), {"collective": n if r == 0 else 0, "compute": 0 if r == 0 else n},
                           LINES) for r in range(2)]

    assert judge_slow(counted(10)) is not None
    assert judge_slow(counted(9)) is None


def test_one_rank_per_node_is_a_slow_rank_not_a_slow_node():
    verdict = judge_slow(windows(simulate(lambda r, s: 0.05 if r == 1 else 0.0, ranks=2, per_node=1), per_node=1))
    assert verdict is not None and verdict.kind == "rank" and verdict.culprits == (1,)


def test_the_samples_line_names_the_waiting_ranks_call():
    verdict = judge_slow(sampled([40, 40, 40, 1]))
    assert verdict is not None and verdict.source == "samples"
    assert "ranks 0-2 wait for it 40% of the time in all_reduce() at train.py:88; it spends" in verdict.line()
    assert [f["last"] for f in verdict.record()["figures"]] == [0, 0, 0, 0]  # no collective seen
    bare = [RankWindow(w.rank, w.node_rank, w.host, w.local_rank, (), w.activity, {}) for w in sampled([40, 40, 40, 1])]
    assert "ranks 0-2 wait for it 40% of the time; it spends 99% of its time computing, the others 60%" in (
        judge_slow(bare).line())  # type: ignore[union-attr]
    only_op = judge_slow([RankWindow(w.rank, w.node_rank, w.host, w.local_rank, w.calls, w.activity, {})
                          for w in windows(simulate(slow_rank_3))])
    assert only_op is not None and " of the time in all_reduce; it spends" in only_op.line()


def slow_rank_3(rank, step):
    return 0.05 if rank == 3 else 0.0


def test_several_late_ranks_are_described_by_the_first_ones_line():
    lines = {1: {"compute": ["matmul", "a.py:1"]}, 3: {"compute": ["conv", "b.py:2"]}}
    activity = {1: {"compute": 90, "collective": 10}, 3: {"compute": 90, "collective": 10}}
    calls = simulate(lambda r, s: 0.05 if r in (1, 3) else 0.0)
    found = [RankWindow(w.rank, w.node_rank, w.host, w.local_rank, w.calls, activity.get(w.rank, BALANCED),
                        lines.get(w.rank, LINES)) for w in windows(calls)]
    verdict = judge_slow(found)
    assert verdict is not None and "computing (matmul() at a.py:1)" in verdict.line()


def test_what_a_late_rank_does_is_never_the_collectives_it_waits_in():
    """A late rank seen inside collectives more than the others (it arrives last, then waits for
    the data to move) is described by what else it does; a tie goes to the first activity."""
    activity = {3: {"collective": 80, "compute": 20}} | {r: {"collective": 10, "compute": 90} for r in range(3)}
    verdict = judge_slow(windows(simulate(slow_rank_3), activity=activity))
    assert verdict is not None and verdict.activity == "data" and verdict.activity_share == 0.0


def test_figures_and_the_record_are_rounded_to_three_places():
    activity = {r: {"collective": 1, "compute": 2} for r in range(4)}
    verdict = judge_slow(sampled([0, 0, 0, 0]))
    assert verdict is None
    calls = exact_calls(lambda rank, seq: 1.0 if rank == 3 else 0.0, steps=40)
    verdict = judge_slow(windows(calls, activity=activity))
    assert verdict is not None
    assert verdict.record()["wait_share"] == 0.5
    assert verdict.record()["figures"][0]["activity"] == {"collective": 0.333, "compute": 0.667}
    thirds = judge_slow(windows(exact_calls(lambda rank, seq: 0.5 if rank == 3 else 0.0), activity=activity))
    assert thirds is not None and thirds.record()["wait_share"] == 0.333
    assert thirds.record()["figures"][0]["wait_share"] == 0.333


def test_a_window_without_samples_has_no_shares_and_a_short_line_is_none():
    window = RankWindow(0, 0, "h", None, (), {}, {"data": ["next"]})
    assert window.share("data") == 0.0 and window.line("data") == "" and window.line("host") == ""


# -- a CPU taken from outside (a cgroup's quota, other processes on the rank's cores) -----------------

OTHERS_CPU = (0.3, 0.02)  # the waiting ranks: on a CPU 30 % of the wall time, waiting for one 2 %
CPU_PHRASE = "waiting for a CPU (a CPU quota, or other processes on its cores)"


def with_cpu(found, shares):
    """``found`` windows with each rank's (on CPU, waiting for a CPU) shares: ``shares[rank]`` or the others'."""
    from dataclasses import replace

    return [replace(w, cpu_run=shares.get(w.rank, OTHERS_CPU)[0], cpu_wait=shares.get(w.rank, OTHERS_CPU)[1])
            for w in found]


def slow_rank_3_computing(rank, step):
    return 0.05 if rank == 3 else 0.0


COMPUTING = {3: {"collective": 2, "compute": 90, "data": 8}}


def test_a_rank_whose_cpu_is_taken_from_outside_is_said_to_wait_for_a_cpu():
    """The measured case: a busy process under a 20 % quota runs 0.2 and waits 0.8 of the wall time."""
    found = with_cpu(windows(simulate(slow_rank_3_computing), activity=COMPUTING), {3: (0.2, 0.78)})
    verdict = judge_slow(found)
    assert verdict is not None and verdict.kind == "rank" and verdict.culprits == (3,)
    assert verdict.activity == "cpu" and (verdict.activity_share, verdict.others_share) == (0.78, 0.02)
    assert verdict.line().endswith(f"; it spends 78% of its time {CPU_PHRASE}, the others 2%"), verdict.line()
    assert [f["cpu_wait"] for f in verdict.record()["figures"]] == [0.02, 0.02, 0.02, 0.78]


@pytest.mark.parametrize(("late", "others", "cpu"), [
    ((0.2, CPU_WAIT), (0.3, 0.02), True),  # exactly the share
    ((0.2, CPU_WAIT - 0.001), (0.3, 0.02), False),
    ((0.2, 0.3 + CPU_WAIT_MARGIN), (0.9, 0.3), True),  # exactly the margin above the others
    ((0.2, 0.3 + CPU_WAIT_MARGIN - 0.001), (0.9, 0.3), False),
    ((0.25, 0.75), (0.5, 0.5), True),  # served a quarter of its runnable time, the others half: exactly the ratio
    ((0.26, 0.74), (0.5, 0.5), False),  # ... just over it
    ((0.4, 0.6), (0.04, 0.06), False),  # a rank that computes more on a busy machine: served as often
    ((0.02, 1.9), (0.1, 0.4), True),  # measured: a 1 % quota (two threads waiting at once), six jobs on 2 cores
    ((0.02, 1.9), (0.02, 0.08), True),  # ... others served only a fifth of the time: still a CPU taken
])
def test_the_cpu_rules_edges(late, others, cpu):
    assert CPU_SERVED_RATIO == 0.5
    found = with_cpu(windows(simulate(slow_rank_3_computing), activity=COMPUTING),
                     {3: late, 0: others, 1: others, 2: others})
    verdict = judge_slow(found)
    assert verdict is not None and verdict.culprits == (3,)
    assert verdict.activity == ("cpu" if cpu else "compute"), verdict.line()
    assert (CPU_PHRASE in verdict.line()) is cpu


def test_a_stopped_rank_is_not_waiting_for_a_cpu():
    """SIGSTOP (or a debugger): neither on a CPU nor runnable; described by its samples."""
    found = with_cpu(windows(simulate(slow_rank_3_computing), activity=COMPUTING), {3: (0.0, 0.0)})
    verdict = judge_slow(found)
    assert verdict is not None and verdict.activity == "compute" and "cpu_wait" in verdict.record()["figures"][3]


def test_the_cpu_wait_figure_is_rounded_to_three_places():
    found = with_cpu(windows(simulate(slow_rank_3_computing), activity=COMPUTING), {3: (0.2, 0.78456)})
    verdict = judge_slow(found)
    assert verdict is not None and verdict.record()["figures"][3]["cpu_wait"] == 0.785


def test_the_others_cpu_wait_is_their_median():
    """One waiting rank that itself waits for a CPU does not hide the late one's (the median, not the mean)."""
    found = with_cpu(windows(simulate(slow_rank_3_computing), activity=COMPUTING),
                     {3: (0.2, 0.5), 0: (0.1, 0.9), 1: (0.3, 0.02), 2: (0.3, 0.04)})
    verdict = judge_slow(found)
    assert verdict is not None and verdict.activity == "cpu" and verdict.others_share == 0.04


def test_without_cpu_readings_a_rank_is_described_by_its_samples():
    base = windows(simulate(slow_rank_3_computing), activity=COMPUTING)
    from dataclasses import replace

    late_unknown = with_cpu(base, {3: (0.2, 0.8)})
    late_unknown[3] = replace(late_unknown[3], cpu_wait=None)
    late_run_unknown = with_cpu(base, {3: (0.2, 0.8)})
    late_run_unknown[3] = replace(late_run_unknown[3], cpu_run=None)
    others_unknown = [replace(w, cpu_run=None) if w.rank != 3 else w for w in with_cpu(base, {3: (0.2, 0.8)})]
    for found in (base, late_unknown, late_run_unknown, others_unknown):
        verdict = judge_slow(found)
        assert verdict is not None and verdict.activity == "compute", verdict.line()
    one_known = with_cpu(base, {3: (0.2, 0.8)})
    one_known[:2] = [replace(w, cpu_wait=None) for w in one_known[:2]]  # the waiting ones known: enough
    verdict = judge_slow(one_known)
    assert verdict is not None and verdict.activity == "cpu" and verdict.others_share == 0.02
    assert "cpu_wait" not in verdict.record()["figures"][0] and verdict.record()["figures"][2]["cpu_wait"] == 0.02


def test_a_whole_node_waiting_for_a_cpu_is_said_so():
    def node_1(rank, step):
        return 0.05 if rank // 2 == 1 else 0.0

    found = with_cpu(windows(simulate(node_1)), {2: (0.2, 0.7), 3: (0.2, 0.8)})
    verdict = judge_slow(found)
    assert verdict is not None and verdict.kind == "node"
    assert verdict.line().endswith(f"its ranks spend 75% of their time {CPU_PHRASE}, the others 2%"), verdict.line()


def test_a_phase_is_described_by_what_it_does_even_while_waiting_for_a_cpu():
    def evaluation(rank, step):
        return 30.0 if rank == 0 and step == 60 else 0.0

    activity = {0: {"collective": 5, "host": 60, "compute": 35}}
    verdict = judge_slow(with_cpu(windows(simulate(evaluation), activity=activity), {0: (0.2, 0.8)}))
    assert verdict is not None and verdict.kind == "phase" and verdict.activity == "host"


@pytest.mark.parametrize(("before", "after", "shares"), [
    ([10.0, 1.0, 100.0], [13.0, 9.0, 110.0], (0.3, 0.8)),
    ([10.0, 1.0, 100.0], [10.0, 1.0, 100.0 + MIN_CPU_SECONDS], (0.0, 0.0)),  # just far enough apart
    ([10.0, 1.0, 100.0], [13.0, 9.0, 100.0 + MIN_CPU_SECONDS - 0.01], None),  # too close
    ([10.0, 1.0, 100.0], [9.0, 9.0, 110.0], None),  # the counts went back: another process
    ([10.0, 1.0, 100.0], [13.0, 0.5, 110.0], None),
    ([10.0, 1.0, 100.0], [30.0, 30.0, 110.0], (2.0, 2.9)),  # several threads at once: more than the wall time
    (None, [13.0, 9.0, 110.0], None),
    ([10.0, 1.0, 100.0], None, None),
])
def test_cpu_shares_between_two_readings(before, after, shares):
    assert cpu_shares(before, after) == shares


def test_threads_waiting_together_show_as_all_of_the_time_at_most():
    """Run delay summed over a rank's threads can pass the wall time (two threads under a quota wait at
    once); the line and the record say a share of its time: 100 % at most, still a valid record."""
    found = with_cpu(windows(simulate(slow_rank_3_computing), activity=COMPUTING), {3: (0.02, 1.9)})
    verdict = judge_slow(found)
    assert verdict is not None and verdict.activity == "cpu"
    assert verdict.line().endswith(f"; it spends 100% of its time {CPU_PHRASE}, the others 2%"), verdict.line()
    figures = verdict.record()["figures"]
    assert figures[3]["cpu_wait"] == 1.0
    assert all(records._figure(f) for f in figures)


@pytest.mark.parametrize(("apart", "culprits"), [(TIE_SECONDS, (2, 3)), (2 * TIE_SECONDS, (3,))])
def test_ranks_arriving_within_a_millisecond_arrive_last_together(apart, culprits):
    """Both ranks of node 1 late by half a second, rank 2 ``apart`` earlier than rank 3: within the tie
    they share the waiting they cause (a slow node); further apart, rank 2 causes none of it."""
    verdict = judge_slow(windows(exact_calls(lambda rank, seq: {3: 0.5, 2: 0.5 - apart}.get(rank, 0.0), steps=101)))
    assert verdict is not None and verdict.culprits == culprits
    assert verdict.kind == ("node" if len(culprits) == 2 else "rank")


@pytest.mark.parametrize(("second", "culprits"), [(15, (1, 3)), (14, (3,))])
def test_a_rank_causing_fifteen_percent_of_the_waiting_can_be_late(second, culprits):
    """Rank 3 arrives 1 s late in most collectives (rank 1 0.5 s), rank 1 1 s late in ``second`` of 100
    (rank 3 0.5 s): rank 1 causes ``second`` % of the waiting, late from 15 % (CAUSE_MIN) on."""
    def late(rank, seq):
        first = seq <= 101 - second
        return {3: 1.0 if first else 0.5, 1: 0.5 if first else 1.0}.get(rank, 0.0)

    verdict = judge_slow(windows(exact_calls(late, steps=101)))
    assert verdict is not None and verdict.culprits == culprits


def test_a_victim_is_told_apart_on_short_windows_too():
    """Less than a second of waiting caused in all (few short collectives): the same rule, not unknown."""
    verdict = judge_slow(windows(simulate(lambda rank, step: {3: 0.05, 2: 0.0375}.get(rank, 0.0), steps=15)))
    assert verdict is not None and verdict.kind == "rank" and verdict.culprits == (3,)


@pytest.mark.parametrize("per_step", [11, 30, 41])
def test_a_rank_late_before_one_of_many_collectives_a_step_is_a_straggler_not_a_phase(per_step):
    """Issue 53: with 20 or more collectives a step, the waiting sits in one of them (the first, where the
    late rank arrives), which made it a short 'phase', said nothing of: it is a straggler."""
    calls = simulate_steps(lambda r, s: 0.06 if r == 3 else jitter(r, s), per_step=per_step)
    verdict = judge_slow(windows(calls))
    assert verdict is not None and verdict.kind == "rank" and verdict.culprits == (3,), verdict
    assert judge_slow(windows(simulate_steps(jitter, per_step=per_step))) is None  # balanced: quiet


def async_buckets(late, *, per_step=30, steps=40, base=0.125, spacing=0.0009765625):
    """Each step every rank computes ``base`` + ``late(rank)`` seconds, then enqueues ``per_step`` collectives
    ``spacing`` apart without waiting for any (DDP's gradient buckets; every NCCL call); the step ends once the
    last rank enqueued its last."""
    done = 1000.0
    calls = {rank: [] for rank in range(4)}
    seq = 0
    for _step in range(steps):
        start = {rank: done + base + late(rank) for rank in calls}
        for bucket in range(per_step):
            seq += 1
            for rank, when in start.items():
                calls[rank].append(Call("0", seq, "all_reduce", when + bucket * spacing))
        done = max(start.values()) + per_step * spacing
    return calls


def test_waits_for_collectives_enqueued_together_count_once():
    """A DDP job's 30 buckets a step, rank 3 62.5 ms late: the others wait for it once a step (from their
    first bucket to its last), not 30 times (summed, the line said they waited 100 % of the time)."""
    verdict = judge_slow(windows(async_buckets(lambda r: 0.0625 if r == 3 else 0.0)))
    assert verdict is not None and verdict.culprits == (3,), verdict
    step = 0.125 + 0.0625 + 30 * 0.0009765625
    # the window's first step counts its waits but not all of its time: a little over the per-step share
    assert verdict.wait_share == pytest.approx((0.0625 + 29 * 0.0009765625) / step, rel=0.05), verdict.line()


@pytest.mark.parametrize(("spans", "seconds"), [
    ([], 0.0),
    ([(0.0, 1.0), (0.5, 2.0)], 2.0),  # overlapping
    ([(3.0, 4.0), (0.0, 1.0)], 2.0),  # apart, in any order
    ([(0.0, 2.0), (0.5, 1.0)], 2.0),  # one inside another
    ([(0.0, 1.0), (1.0, 1.5)], 1.5),  # touching
    ([(1.0, 1.0)], 0.0),  # no wait at all (the last to arrive)
])
def test_covered_counts_each_second_once(spans, seconds):
    assert covered(spans) == seconds


def test_short_pauses_of_one_rank_that_add_up_are_said_as_a_phase_with_their_share():
    """Issue 53: rank 0 checkpointing 3 s every 20 steps cost the job most of its time, in pauses each
    under the 5 s a single phase needs: said once as a phase, with how many pauses and their share."""
    activity = {0: {"collective": 5, "compute": 20, "host": 75}}
    calls = simulate(lambda r, s: 3.0 if r == 0 and s % 20 == 19 else jitter(r, s), steps=120)
    verdict = judge_slow(windows(calls, activity=activity))
    assert verdict is not None and verdict.kind == "phase" and verdict.culprits == (0,), verdict
    assert verdict.wait_share > 0.5 and verdict.pauses == 6
    assert ", up to 3s at a time, 6 pauses in 30s (60% of the time): a phase of the script" in verdict.line()
    assert "works in host-side work (evaluate() at train.py:95)" in verdict.line()
    two = simulate(lambda r, s: 3.0 if r == 0 and s in (40, 90) else jitter(r, s), steps=120)
    assert judge_slow(windows(two, activity=activity)) is None  # two pauses: hiccups, however long the window


def test_a_checkpoint_every_20_steps_is_a_phase_wherever_the_window_is_cut():
    """CI's busy slow stage: the window held 4 pauses of rank 0's checkpoint (one every 20 collectives) in
    fewer than 80 collectives; the top 5 % rounded down kept 3 of the 4, and rank 0 was called a straggler."""
    activity = {0: {"collective": 5, "compute": 20, "host": 75}}
    for steps in range(60, 101):
        calls = simulate(lambda r, s: 3.0 if r == 0 and s % 20 == 19 else jitter(r, s), steps=steps)
        verdict = judge_slow(windows(calls, activity=activity))
        assert verdict is not None and verdict.kind == "phase" and verdict.culprits == (0,), (steps, verdict)


@pytest.mark.parametrize(("caused", "named"), [
    ({0: 0.58, 1: 0.71, 2: 0.60, 3: 2.90}, True),  # measured: 41 all-reduces a step, rank 3 60 ms late (60 %)
    ({0: 0.20, 1: 0.20, 2: 0.20, 3: 1.40}, True),  # 70 %: the first rule
    ({0: 0.24, 1: 0.38, 2: 0.25, 3: 0.13}, False),  # noise with one rank late every other step: no one
    ({0: 0.10, 1: 0.10, 2: 0.10, 3: 0.60}, True),  # 67 %, 6 x any other
    ({0: 0.13, 1: 0.13, 2: 0.35, 3: 0.39}, False),  # 39 %: under DOMINANT_SHARE, however dominant elsewhere
    ({0: 0.00, 1: 0.00, 2: 0.35, 3: 0.65}, False),  # 65 %, but rank 2 caused 35 %: under 3 x
    ({0: 3 / 16, 1: 3 / 16, 2: 1 / 16, 3: 9 / 16}, True),  # 56 %, exactly 3 x (exact in binary): named
    ({0: 0.0, 3: 0.0}, True),  # nobody caused any waiting: unknown, as without a recorder
])
def test_the_late_rank_causes_most_of_the_waiting_or_far_more_than_any_other(caused, named):
    waits = Waits(share={r: 0.2 for r in caused}, last={}, caused=caused, per_call=[], op="", source="recorder")
    late = [RankWindow(3, 1, "h", 1)]
    assert caused_most(waits, late) is named
    assert caused_most(Waits({}, {}, {}, [], "", "samples"), late)  # unknown: the samples say nothing



def paced_calls(late, *, ranks=4, steps=100, spacing=0.125):
    """Collectives ``spacing`` apart on exact clocks (binary fractions: every difference exact);
    ``late(rank, seq)``: how many seconds that rank enqueues that collective after the others."""
    calls = {rank: [] for rank in range(ranks)}
    now = 1000.0
    for seq in range(1, steps + 1):
        arrived = {rank: now + late(rank, seq) for rank in range(ranks)}
        for rank, when in arrived.items():
            calls[rank].append(Call("0", seq, "all_reduce", when))
        now = max(arrived.values()) + spacing
    return calls


def test_three_pauses_of_a_second_that_cost_a_quarter_of_the_time_are_a_phase_at_their_edges():
    """The edges of a phase made of short pauses: pauses of exactly PHASE_PAUSE (1 s), exactly
    PHASE_REPEATS (3) of them, and a pause of exactly half the typical one counted, a third not."""
    pauses = {20: 1.0, 40: 1.0, 60: 1.0, 70: 0.5, 75: 0.375}
    verdict = judge_slow(windows(paced_calls(lambda r, s: pauses.get(s, 0.0) if r == 0 else 0.0)))
    assert verdict is not None and verdict.kind == "phase" and verdict.culprits == (0,), verdict
    assert verdict.pauses == 4 and verdict.longest_pause == 1.0  # 1, 1, 1 and 0.5 (= 1 / 2); not 0.375
    three = judge_slow(windows(paced_calls(lambda r, s: 1.0 if r == 0 and s in (20, 40, 60) else 0.0)))
    assert three is not None and three.kind == "phase" and three.pauses == 3, three  # exactly PHASE_REPEATS
    shorter = {s: w / 2 for s, w in pauses.items()}  # the same pauses at half a second: no phase
    straggler = judge_slow(windows(paced_calls(lambda r, s: shorter.get(s, 0.0) if r == 0 else 0.0)))
    assert straggler is not None and straggler.kind == "rank" and straggler.pauses == 0
    assert heavy_pauses([4.0, 1.0]) == [4.0] and heavy_pauses([]) == [0.0]  # 80 % reached: stop there
