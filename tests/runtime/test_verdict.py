"""The hang verdict as pure functions (paijob.runtime.watch.verdict): rank states in, verdict out.

One table, one row per shape of stall; each row says who must be named and how. The real jobs
that produce these states run in test_hangs.py.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from paijob.common import exitcodes
from paijob.runtime.config import HangSettings
from paijob.runtime.watch.progress import classify_wait
from paijob.runtime.watch.verdict import (
    RankState,
    call_order,
    judge,
    rank_ranges,
    report_frames,
    stall_line,
    waiting_phrase,
)

C10D = "/venv/site-packages/torch/distributed/distributed_c10d.py"
LOCK = "/usr/lib/python3.11/threading.py"
SETTINGS = HangSettings(timeout=20, first_timeout=60, hard_limit=3)


def rank(n: int, idle: float = 25, *, wait: str | None = "all_reduce", line: int = 42,
         started: bool = True, busy: bool = False, **extra: object) -> RankState:
    frames = [["/job/train.py", 10, "<module>"], ["/job/train.py", line, "step"]]
    if wait:
        frames.append([C10D, 3252, wait])
    return RankState(rank=n, node_rank=n // 2, host=f"10.0.0.{n // 2}", local_rank=n % 2,
                     idle_for=idle, busy=busy, cpu_share=1.0 if busy else 0.0, wait=wait,
                     collective=wait is not None, first_progress=started, stale_for=0.0,
                     where=report_frames(frames), c10d=wait is not None, quiet_for=idle,
                     **extra)  # type: ignore[arg-type]


DEADLOCK_THREAD = ["worker", report_frames([["/job/train.py", 30, "holder"], [LOCK, 320, "acquire"]])]

# (name, states, settings, kind or None, must appear in headline + detail, must not appear)
TABLE = [
    ("one rank outside any collective", [rank(0), rank(1, wait=None, line=8)], SETTINGS,
     "hang", ["rank 1 (node rank 0, host 10.0.0.0, local rank 1) is stuck at train.py:8 in step"],
     ["rank 0 (node rank 0, host 10.0.0.0, local rank 0) is stuck"]),
    ("a stopped rank is named from /proc, not guessed", [rank(0), rank(1, stopped=True, line=7)],
     SETTINGS, "hang", ["rank 1 (node rank 0, host 10.0.0.0, local rank 1) is stopped (T state"],
     ["GIL"]),
    ("a silent rank is named where faulthandler's dump has it", [
        rank(0), rank(1, wait=None, line=77, dumped=True)], SETTINGS, "hang",
     ["does not answer", "a C call holding the GIL), is at train.py:77 in step"], ["last seen"]),
    ("the other side of a deadlock is in the detail", [
        rank(0), rank(1, wait=None, line=12, threads=[DEADLOCK_THREAD])], SETTINGS, "hang",
     ["its thread 'worker':", "/job/train.py:30 in holder"], []),
    ("every rank in the same collective: no culprit, says so", [rank(0), rank(1)], SETTINGS,
     "hang", ["every rank waits in all_reduce at train.py:42"], ["is stuck"]),
    ("before the first training step, every rank loading: the first allowance holds", [
        rank(0, wait=None, started=False), rank(1, wait=None, line=9, started=False)], SETTINGS,
     None, [], []),
    ("before the first training step, a rank that never arrives: --hang-timeout holds", [
        rank(0, started=False), rank(1, wait=None, started=False)], SETTINGS, "hang",
     ["(--hang-timeout 20s)", "rank 1 (node rank 0, host 10.0.0.0, local rank 1) is stuck"], []),
    ("before the first training step, rank 0 busy preparing while the others wait: a straggler "
     "under the first allowance (60 s), not ended at 3 x 20 s", [
         rank(0, idle=0, wait=None, busy=True, started=False), rank(1, idle=65, started=False)],
     SETTINGS, "straggler", ["not a hang while it works", "ended at 3 x --hang-first-timeout (180s)"],
     []),
    ("before the first training step, every rank in one collective: the first allowance holds", [
        rank(0, started=False), rank(1, started=False)], SETTINGS, None, [], []),
    ("a busy rank while the others wait: a straggler, not a hang", [
        rank(0), rank(1, idle=0, wait=None, busy=True)], SETTINGS, "straggler",
     ["not a hang while it works", "ended at 3 x --hang-timeout (60s)"], []),
    ("a busy rank past the hard limit: ended, and the line says how to allow longer", [
        rank(0, idle=61), rank(1, idle=0, wait=None, busy=True)], SETTINGS, "straggler",
     ["ended at the hard limit (3 x --hang-timeout 20s; a larger --hang-hard-limit or "
      "--hang-timeout allows longer); exit 124"], []),
    ("the defaults, before the first step: a rank that never arrives is judged at 600 s", [
        rank(0, idle=601, started=False), rank(1, idle=601, wait=None, started=False)],
     HangSettings(calibrate=True), "hang", ["(--hang-timeout 600s)", "rank 1 (node rank 0"], []),
    ("the defaults, before the first step: every rank loading for 20 min is healthy", [
        rank(0, idle=1200, wait=None, started=False), rank(1, idle=1200, wait=None, started=False)],
     HangSettings(calibrate=True), None, [], []),
    ("sixty ranks stuck in sixty places: one short line", [
        rank(n, wait=None, line=100 + n) for n in range(60)], SETTINGS, "hang",
     ["and 56 more: ranks 4-59"], []),
]


@pytest.mark.parametrize(("name", "states", "settings", "kind", "said", "unsaid"), TABLE,
                         ids=[row[0] for row in TABLE])
def test_the_verdict_table(name, states, settings, kind, said, unsaid):  # type: ignore[no-untyped-def]
    verdict = judge(states, settings, expected_ranks=len(states))
    if kind is None:
        assert verdict is None
        return
    assert verdict is not None and verdict.kind == kind
    assert verdict.kind != "straggler" or verdict.final == ("hard limit" in " ".join(said))
    text = verdict.headline(settings) + "\n" + "\n".join(verdict.detail())
    for phrase in said:
        assert phrase in text, text
    for phrase in unsaid:
        assert phrase not in text, text
    headline = verdict.headline(settings)
    assert len(headline) < 700 and headline.count("(") == headline.count(")")


def test_a_culprits_frames_are_shown_in_call_order():
    frames = [["/job/train.py", 10, "<module>"], ["/job/train.py", 30, "step"],
              [C10D, 3252, "all_reduce"], [C10D, 99, "_inner"]]
    where = report_frames(frames)
    assert where[0] == ["/job/train.py", 30, "step"]  # the location: the innermost user line
    assert call_order(where) == frames
    verdict = judge([rank(0, wait=None), rank(1)], SETTINGS, expected_ranks=2)
    assert verdict is not None
    detail = "\n".join(verdict.detail())
    assert detail.index("train.py:10 in <module>") < detail.index("train.py:42 in step")


def test_ranks_in_many_places_stay_on_one_short_line():
    states = [rank(n, line=n) for n in range(64)]
    verdict = judge([*states, rank(64, wait=None)], SETTINGS, expected_ranks=65)
    assert verdict is not None
    headline = verdict.headline(SETTINGS)
    assert "wait elsewhere" in headline and len(headline) < 400, headline


# -- the rules one by one (moved from test_hangs.py) ---------------------------------------


def state(rank: int, idle: float, *, wait: str | None = "all_reduce", line: int = 42,
          busy: bool = False, started: bool = True, stale: float = 0.0,
          longest_wait: float = 0.0) -> RankState:
    frames = [["/job/train.py", line, "main"]]
    if wait:
        frames.append([C10D, 3252, wait])
    return RankState(
        rank=rank, node_rank=rank // 2, host=f"10.0.0.{rank // 2}", local_rank=rank % 2,
        idle_for=idle, busy=busy, cpu_share=1.0 if busy else 0.0, wait=wait,
        collective=wait is not None, first_progress=started, stale_for=stale,
        where=report_frames(frames), c10d=wait is not None, longest_wait=longest_wait,
        quiet_for=idle,
    )


def test_a_rank_outside_any_collective_is_named_when_no_rank_moves_for_the_timeout():
    states = [state(0, 25), state(1, 25, wait=None, line=7), state(2, 24), state(3, 26)]
    verdict = judge(states, SETTINGS)
    assert verdict is not None and verdict.kind == "hang" and verdict.final
    assert [s.rank for s in verdict.culprits] == [1]
    line = verdict.headline(SETTINGS)
    assert line.startswith("hang: no rank made progress for 24s (--hang-timeout 20s); ")
    assert "rank 1 (node rank 0, host 10.0.0.0, local rank 1) is stuck at train.py:7 in main" in line
    assert "ranks 0, 2-3 wait in all_reduce at train.py:42 for 24s" in line
    assert line.endswith(f"; exit {exitcodes.HANG}")


def test_nothing_is_judged_before_the_timeout_or_while_a_rank_is_between_busy_and_idle():
    assert judge([state(0, 19), state(1, 19, wait=None)], SETTINGS) is None
    assert judge([state(0, 25), state(1, 10, wait=None)], SETTINGS) is None  # 10 s: neither
    assert judge([state(0, 25)], SETTINGS, expected_ranks=2) is None  # rank 1 still starting
    assert judge([state(0, 99), state(1, 99)], HangSettings(timeout=0)) is None  # off


def test_a_rank_that_ended_within_the_timeout_is_progress_not_a_hang():
    """Rank 0 finished its long save and exited; rank 1's last report still says it waits."""
    ended = replace(state(0, 1, wait=None, busy=True), exited=True)
    assert judge([ended, state(1, 25)], SETTINGS) is None
    long_gone = replace(state(0, 21, wait=None), exited=True)  # ended longer than the timeout ago
    verdict = judge([long_gone, state(1, 25)], SETTINGS)
    assert verdict is not None and verdict.kind == "hang" and [s.rank for s in verdict.others] == [1]


def test_before_the_first_training_step_the_longer_allowance_holds():
    # every rank outside a collective (building, loading): --hang-first-timeout
    states = [state(0, 30, wait=None, started=False), state(1, 30, wait=None, started=False)]
    assert judge(states, SETTINGS) is None
    verdict = judge([state(0, 61, wait=None, started=False), state(1, 61, wait=None)], SETTINGS)
    assert verdict is not None and "(--hang-first-timeout 60s)" in verdict.headline(SETTINGS)
    # ranks waiting inside a collective for one that never arrives: --hang-timeout
    verdict = judge([state(0, 21, started=False), state(1, 21, wait=None, started=False)], SETTINGS)
    assert verdict is not None and "(--hang-timeout 20s)" in verdict.headline(SETTINGS)


def test_the_rank_in_a_different_collective_than_most_is_the_culprit():
    states = [state(0, 25), state(1, 25, wait="barrier", line=50), state(2, 25), state(3, 25)]
    verdict = judge(states, SETTINGS)
    assert verdict is not None and [s.rank for s in verdict.culprits] == [1]
    assert "rank 1 (node rank 0, host 10.0.0.0, local rank 1) waits in barrier at train.py:50 " \
        "(a different collective than the other ranks: mismatched collectives)" in (
            verdict.headline(SETTINGS))


def test_every_rank_in_the_same_collective_names_no_culprit_but_says_so():
    verdict = judge([state(0, 25), state(1, 25)], SETTINGS)
    assert verdict is not None and verdict.culprits == []
    assert "every rank waits in all_reduce at train.py:42: the collective itself does not " \
        "complete" in verdict.headline(SETTINGS)


def test_a_silent_sampler_is_a_culprit_even_inside_a_collective():
    verdict = judge([state(0, 25), state(1, 25, stale=15)], SETTINGS)
    assert verdict is not None and [s.rank for s in verdict.culprits] == [1]
    assert "does not answer (its sampler has been silent for 15s" in verdict.headline(SETTINGS)


def test_a_busy_straggler_is_reported_at_the_timeout_and_ended_only_at_the_hard_limit():
    reported = judge([state(0, 25), state(1, 0.5, wait=None, busy=True)], SETTINGS)
    assert reported is not None and reported.kind == "straggler" and not reported.final
    assert "ended at 3 x --hang-timeout (60s) unless it finishes" in reported.headline(SETTINGS)
    ended = judge([state(0, 61), state(1, 0.5, wait=None, busy=True)], SETTINGS)
    assert ended is not None and ended.final
    assert ended.headline(SETTINGS).startswith(
        "hang: straggler: rank 1 (node rank 0, host 10.0.0.0, local rank 1) is busy at train.py:42")


def test_a_rank_that_finished_early_is_no_straggler_and_the_stall_line_names_the_culprit():
    finished = state(1, 500, wait=None)
    finished.exited = True
    assert judge([state(0, 0.5, wait=None, busy=True), finished], SETTINGS) is None
    assert stall_line([state(0, 0.5, busy=True), finished], SETTINGS) is None
    assert stall_line([state(0, 95), state(1, 96, wait=None)], SETTINGS) == "no progress for 96s on rank 1"
    assert stall_line([state(0, 12), state(1, 1, busy=True)], SETTINGS) == "no progress for 12s on rank 0"


def test_waiting_ranks_are_grouped_by_place_and_ranges_folded():
    assert rank_ranges([7, 0, 2, 3, 4, 5, 6]) == "0, 2-7"
    phrase = waiting_phrase([state(0, 30), state(2, 31), state(3, 32), state(5, 40, line=9)])
    assert phrase == ("ranks 0, 2-3 wait in all_reduce at train.py:42 for 30s, "
                      "rank 5 waits in all_reduce at train.py:9 for 40s")


def test_user_code_comes_first_in_the_reported_frames():
    frames = [["/job/train.py", 10, "<module>"], ["/job/train.py", 30, "step"],
              [threading.__file__, 320, "wait"]]
    assert report_frames(frames)[0] == ["/job/train.py", 30, "step"]
    assert classify_wait([["/job/train.py", 3, "m"], [C10D, 1, "barrier"]]) == ("barrier", True)
    loader = "/venv/site-packages/torch/utils/data/dataloader.py"
    assert classify_wait([["/job/train.py", 3, "m"], [loader, 1, "_next_data"]]) == (
        "DataLoader", False)


CALIBRATED = HangSettings(timeout=600, first_timeout=1800, calibrate=True)


def test_every_rank_idle_in_a_collective_is_judged_on_the_calibrated_timeout_and_says_why():
    states = [state(0, 125, longest_wait=3), state(1, 125, wait="barrier", line=50, longest_wait=2)]
    assert judge([state(0, 119), state(1, 119, wait="barrier")], CALIBRATED) is None  # the floor
    verdict = judge(states, CALIBRATED)
    assert verdict is not None and verdict.kind == "hang" and verdict.final
    line = verdict.headline(CALIBRATED)
    assert line.startswith(
        "hang: no rank made progress for 125s (calibrated 120s: every rank waits in a "
        "torch.distributed call, the longest wait in one so far was 3s, 10 x that, at least "
        "120s, --hang-timeout 600s holds outside collectives); "), line
    assert line.count("(") == line.count(")")
    # a longer wait seen before raises it: 10 x 30 s
    assert judge([state(0, 250, longest_wait=30), state(1, 250)], CALIBRATED) is None
    verdict = judge([state(0, 301, longest_wait=30), state(1, 301)], CALIBRATED)
    assert verdict is not None and verdict.limit.seconds == 300
    # data still moving (a huge collective's transfer, in gloo's threads): not yet
    transferring = [state(0, 125), state(1, 125)]
    transferring[1].quiet_for = 0.5
    assert judge(transferring, CALIBRATED) is None


def test_calibration_never_shortens_the_timeout_for_a_rank_outside_a_collective():
    """A checkpoint save or evaluation on rank 0 (idle: blocked on storage) while the others wait
    in a barrier: only --hang-timeout ends it, however short the steps were."""
    checkpoint = [state(0, 500, wait=None, line=80), state(1, 500, wait="barrier")]
    assert judge(checkpoint, CALIBRATED) is None
    verdict = judge([state(0, 601, wait=None, line=80), state(1, 601, wait="barrier")], CALIBRATED)
    assert verdict is not None and "(--hang-timeout 600s)" in verdict.headline(CALIBRATED)
    # a straggler busy in a collective's neighbourhood (backward is no torch.distributed call)
    backward = [state(0, 200), state(1, 200, wait=None)]
    backward[1].collective, backward[1].wait = True, "backward"
    assert judge(backward, CALIBRATED) is None


def test_calibration_waits_for_first_progress_is_off_for_a_chosen_timeout_and_never_lengthens():
    in_collectives = [state(0, 200, started=False), state(1, 200)]
    assert judge(in_collectives, CALIBRATED) is None
    chosen = HangSettings(timeout=600, first_timeout=1800)  # the user set --hang-timeout
    assert judge([state(0, 200), state(1, 200)], chosen) is None
    long_waits = [state(0, 599, longest_wait=70), state(1, 599)]  # 10 x 70 s > 600 s
    assert judge(long_waits, CALIBRATED) is None
    verdict = judge([state(0, 600, longest_wait=70), state(1, 600)], CALIBRATED)
    assert verdict is not None and "(--hang-timeout 600s)" in verdict.headline(CALIBRATED)
