"""The hang verdict as pure functions (paijob.runtime.watch.hang.verdict): rank states in, verdict out.

One table, one row per shape of stall; each row says who must be named and how. The real jobs
that produce these states run in hang/test_hang_doctor.py.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace

import pytest

from paijob.common import exitcodes
from paijob.common.records import rank_ranges
from paijob.runtime.config import HangSettings
from paijob.runtime.failure import Failure, first_timed_out
from paijob.runtime.watch.hang.sequence import sequence_phrase
from paijob.runtime.watch.hang.timeout import account_of_timeout, never_arrived, timed_out_state
from paijob.runtime.watch.hang.verdict import (
    MAX_HEADLINE,
    culprit_detail,
    judge,
    stall_line,
    unseen_phrase,
    waiting_phrase,
)
from paijob.runtime.watch.ranks import RankState, call_order, report_frames
from paijob.runtime.watch.worker.stack import classify_wait

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
    ("a stopped rank read from outside (py-spy) is named at the line it stopped at", [
        rank(0), rank(1, stopped=True, line=7, outside=True)], SETTINGS, "hang",
     ["local rank 1) is stopped (T state in /proc: SIGSTOP or a debugger) at train.py:7 in step;",
      "(read from outside its stopped process by py-spy)"], ["last seen"]),
    ("a stopped rank py-spy could not read keeps its last sample's line and says why", [
        rank(0), rank(1, stopped=True, line=7, unread="py-spy is not installed: pip install py-spy")],
     SETTINGS, "hang", ["is stopped (T state in /proc: SIGSTOP or a debugger), last seen at train.py:7 in "
                        "step (py-spy is not installed: pip install py-spy);"], ["by py-spy"]),
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
    ("four ranks stuck: each one named, none counted", [
        rank(n, wait=None, line=100 + n) for n in range(4)], SETTINGS, "hang",
     ["rank 3 (node rank 1, host 10.0.0.1, local rank 1) is stuck at train.py:103"], ["more"]),
    ("five ranks stuck: four named, the fifth counted", [
        rank(n, wait=None, line=100 + n) for n in range(5)], SETTINGS, "hang",
     ["is stuck at train.py:103 in step, outside any collective; and 1 more: ranks 4; exit 124"],
     ["train.py:104 in step, outside"]),
    ("a sampler silent for exactly 10 s does not answer", [
        rank(0), replace(rank(1), stale_for=10.0)], SETTINGS, "hang",
     ["rank 1 (node rank 0, host 10.0.0.0, local rank 1) does not answer (its sampler has been "
      "silent for 10s: a C call holding the GIL), last seen at train.py:42 in step"], []),
    ("a rank waiting for its DataLoader worker names the worker and its pid", [
        rank(0), replace(rank(1, wait=None, line=8), wait="DataLoader", loader_worker=[3, 4242])],
     SETTINGS, "hang",
     ["rank 1 (node rank 0, host 10.0.0.0, local rank 1) waits for its DataLoader worker 3 "
      "(pid 4242) at train.py:8"], []),
    ("a DataLoader worker whose pid is unknown is named by its id", [
        rank(0), replace(rank(1, wait=None, line=8), wait="DataLoader", loader_worker=[3, None])],
     SETTINGS, "hang", ["waits for its DataLoader worker 3 at train.py:8"], ["pid"]),
    ("a DataLoader wait with no worker known", [
        rank(0), replace(rank(1, wait=None, line=8), wait="DataLoader")],
     SETTINGS, "hang", ["waits for its DataLoader worker at train.py:8"], []),
    ("a rank with no stack known is stuck at an unknown place", [
        rank(0), replace(rank(1, wait=None), where=[])], SETTINGS, "hang",
     ["rank 1 (node rank 0, host 10.0.0.0, local rank 1) is stuck at an unknown place in ?, "
      "outside any collective"], []),
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


# -- the rules one by one (moved from hang/test_hang_doctor.py) ---------------------------------------


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


def test_ranks_in_calls_that_cannot_match_are_judged_on_the_hang_timeout_before_the_first_step():
    # issue 43: rank 3 calls broadcast at step 4 while the others all_reduce; no rank has made its
    # first progress yet, but calls that differ never complete: --hang-timeout, not the allowance
    states = [state(0, 21, started=False), state(1, 21, started=False), state(2, 21, started=False),
              state(3, 21, wait="broadcast", line=50, started=False)]
    verdict = judge(states, SETTINGS)
    assert verdict is not None and verdict.kind == "hang" and [s.rank for s in verdict.culprits] == [3]
    assert "(--hang-timeout 20s)" in verdict.headline(SETTINGS)
    assert judge([replace(s, idle_for=19) for s in states], SETTINGS) is None  # not before it
    # the same call everywhere before the first step (a slow first all_reduce): the allowance holds
    assert judge([state(n, 30, started=False) for n in range(4)], SETTINGS) is None
    # a send facing a recv differ by design: the allowance holds
    assert judge([state(0, 30, wait="send", started=False), state(1, 30, wait="recv", started=False)],
                 SETTINGS) is None
    # one rank outside any call (loading data) is no mismatch: the never-arriving rule decides
    assert judge([state(0, 30, wait="broadcast", started=False), state(1, 30, wait=None, started=False),
                  state(2, 5, wait=None, busy=True, started=False)], SETTINGS) is None


def test_the_rank_in_a_different_collective_than_most_is_the_culprit():
    states = [state(0, 25), state(1, 25, wait="barrier", line=50), state(2, 25), state(3, 25)]
    verdict = judge(states, SETTINGS)
    assert verdict is not None and [s.rank for s in verdict.culprits] == [1]
    assert "rank 1 (node rank 0, host 10.0.0.0, local rank 1) waits in barrier at train.py:50 " \
        "(a different collective than the other ranks: mismatched collectives)" in (
            verdict.headline(SETTINGS))


def recorded(ops: list[str], *, group: str = "0", first: int = 1) -> list[list[object]]:
    """A rank's calls as its evidence keeps them: ``ops`` from sequence number ``first`` on."""
    return [[group, first + i, op, 100.0 + i] for i, op in enumerate(ops)]


def skipped_one(steps: int = 41, skipped: int = 1, first: int = 1) -> dict[int, list[list[object]]]:
    """Rank 1 skipped ``skipped`` of the loop's all_reduce calls and waits in the barrier after it."""
    loop = ["all_reduce"] * steps
    calls = {n: recorded(loop, first=first) for n in (0, 2, 3)}
    calls[1] = recorded(loop[skipped:] + ["barrier"], first=first)
    return calls


SKIPPED = ("flight recorder: collective #41 of the default group is barrier on rank 1, all_reduce on "
           "ranks 0, 2-3; rank 1 made 40 all_reduce calls, the others 41 (it skipped one)")


def test_the_flight_recorder_says_where_a_skipped_call_parts_the_ranks():
    """Issue 43: rank 1 skipped one all_reduce and waits in the barrier after the loop; the sampler sees
    only where it ended up, its recorder's sequence numbers show it is one collective behind."""
    states = [state(0, 25), state(1, 25, wait="barrier", line=50), state(2, 25), state(3, 25)]
    verdict = judge(states, SETTINGS)
    assert verdict is not None
    plain = verdict.headline(SETTINGS)
    told = replace(verdict, calls=skipped_one())
    assert told.headline(SETTINGS) == (
        "hang: no rank made progress for 25s (--hang-timeout 20s); rank 1 (node rank 0, host 10.0.0.0, local "
        "rank 1) waits in barrier at train.py:50 (mismatched collectives); ranks 0, 2-3 wait in all_reduce at "
        f"train.py:42 for 25s; {SKIPPED}; exit 124")
    assert plain == told.headline(SETTINGS).replace(
        "(mismatched collectives)", "(a different collective than the other ranks: mismatched collectives)"
    ).replace(f"; {SKIPPED}", "")
    assert told.detail() == verdict.detail()
    # the same call from another line: the sampler's account shortened the same way
    states = [state(0, 25), state(1, 25, line=5), state(2, 25), state(3, 25)]
    other_line = judge(states, SETTINGS)
    assert other_line is not None and "waits in all_reduce at train.py:5 (mismatched collectives); " in (
        replace(other_line, calls=skipped_one()).headline(SETTINGS))
    # a rank outside any collective keeps its account
    states = [state(0, 25), state(1, 25, wait=None, line=50), state(2, 25), state(3, 25)]
    outside = judge(states, SETTINGS)
    assert outside is not None and replace(outside, calls=skipped_one()).headline(SETTINGS) == (
        f"{outside.headline(SETTINGS)[:-len('; exit 124')]}; {SKIPPED}; exit 124")
    # every rank but one has evidence (a rank's file not read, or a recorder off): nothing is said
    for missing in ({n: c for n, c in skipped_one().items() if n != 1}, {**skipped_one(), 2: []}):
        assert replace(verdict, calls=missing).headline(SETTINGS) == plain
    for missing in ({n: c for n, c in skipped_one().items() if n != 1}, {**skipped_one(), 2: []}):
        assert sequence_phrase(missing, range(4)) == ""
    # a straggler is not a hang: no recorder phrase
    straggler = judge([state(0, 25), state(1, 0.5, wait=None, busy=True), state(2, 25), state(3, 25)], SETTINGS)
    assert straggler is not None and straggler.kind == "straggler"
    assert replace(straggler, calls=skipped_one()).sequence() == ""


def test_the_flight_recorder_phrase_counts_over_the_window_every_rank_kept():
    assert sequence_phrase(skipped_one(), range(4)) == SKIPPED
    assert sequence_phrase(skipped_one(), [0, 1, 2, 3, 3]) == SKIPPED
    # each keeps its newest calls only: counted over the collectives all of them kept
    calls = skipped_one(steps=300, first=1)
    calls[0] = calls[0][44:]  # rank 0 kept #45-#300
    calls[2] = calls[2][40:]
    assert sequence_phrase(calls, range(4)) == (
        "flight recorder: collective #300 of the default group is barrier on rank 1, all_reduce on "
        "ranks 0, 2-3; rank 1 made 255 all_reduce calls in collectives #45-#300, the others 256 (it "
        "skipped one)")
    behind = {n: recorded(["all_reduce"] * 3) for n in (0, 2, 3)}
    behind[1] = recorded(["all_reduce", "barrier", "barrier"])
    assert sequence_phrase(behind, range(4)).endswith(
        "collective #2 of the default group is barrier on rank 1, all_reduce on ranks 0, 2-3; rank 1 made 1 "
        "all_reduce call, the others 3 (it skipped 2)")
    # one call made and one missed: "call", not "calls"
    assert sequence_phrase(skipped_one(steps=2), range(4)).endswith(
        "; rank 1 made 1 all_reduce call, the others 2 (it skipped one)")
    # one call more than the others (the call they wait in is the odd one): counted the same way
    extra = {n: recorded(["all_reduce"] * 40 + ["barrier"]) for n in (0, 1, 3)}
    extra[2] = recorded(["all_reduce"] * 41)
    assert sequence_phrase(extra, range(4)) == (
        "flight recorder: collective #41 of the default group is all_reduce on rank 2, barrier on "
        "ranks 0-1, 3; rank 2 made 41 all_reduce calls, the others 40 (it made one more)")


def test_the_flight_recorder_phrase_names_the_minority_or_nobody():
    # two ranks (or two equal halves): who parted cannot be told, nothing is said
    calls = skipped_one()
    assert sequence_phrase({0: calls[0], 1: calls[1]}, [0, 1]) == ""
    assert sequence_phrase({**calls, 3: calls[1]}, range(4)) == ""
    # the same calls everywhere (the ranks wait in one collective), or one rank alone: nothing
    same = {n: recorded(["all_reduce"] * 41) for n in range(4)}
    assert sequence_phrase(same, range(4)) == ""
    assert sequence_phrase({0: calls[1]}, [0]) == ""
    assert sequence_phrase({}, []) == ""
    # several minorities, the smallest first; two ranks in one
    six = {n: recorded(["all_reduce", "all_reduce"]) for n in range(6)}
    six[1] = six[4] = recorded(["all_reduce", "barrier"])
    six[5] = recorded(["all_reduce", "broadcast"])
    assert sequence_phrase(six, range(6)) == (
        "flight recorder: collective #2 of the default group is broadcast on rank 5, barrier on ranks 1, "
        "4, all_reduce on ranks 0, 2-3; ranks 1, 4-5 made 1 all_reduce call, the others 2 (they skipped "
        "one)")
    # minorities of one size: by their lowest rank
    eight = {n: recorded(["all_reduce", "all_reduce"]) for n in range(8)}
    eight[1] = eight[4] = recorded(["all_reduce", "broadcast"])
    eight[2] = eight[3] = recorded(["all_reduce", "all_gather"])
    assert sequence_phrase(eight, range(8)).startswith(
        "flight recorder: collective #2 of the default group is broadcast on ranks 1, 4, all_gather on ranks "
        "2-3, all_reduce on ranks 0, 5-7; ")


def test_the_flight_recorder_phrase_leaves_out_counts_that_do_not_tell():
    # counts that differ among the others, or that are the same on both sides: the place alone
    calls = {n: recorded(["all_reduce", "all_reduce", "all_reduce"]) for n in (0, 3)}
    calls[1] = recorded(["all_reduce", "broadcast", "all_reduce"])
    calls[2] = recorded(["all_reduce", "all_reduce", "broadcast"])
    assert sequence_phrase(calls, range(4)) == (
        "flight recorder: collective #2 of the default group is broadcast on rank 1, all_reduce on ranks 0, 2-3")
    calls = {n: recorded(["all_reduce", "broadcast", "all_reduce", "all_reduce"]) for n in (0, 2, 3)}
    calls[1] = recorded(["all_reduce", "all_reduce", "all_reduce", "broadcast"])
    assert sequence_phrase(calls, range(4)) == (
        "flight recorder: collective #2 of the default group is all_reduce on rank 1, broadcast on ranks 0, 2-3")
    # the minority's counts differ among themselves
    calls = {n: recorded(["all_reduce"] * 4) for n in (0, 2, 3, 5)}
    calls[1] = recorded(["all_reduce", "barrier", "all_reduce", "all_reduce"])
    calls[4] = recorded(["all_reduce", "barrier", "barrier", "all_reduce"])
    assert sequence_phrase(calls, range(6)) == (
        "flight recorder: collective #2 of the default group is barrier on ranks 1, 4, all_reduce on "
        "ranks 0, 2-3, 5")


def test_the_flight_recorder_phrase_reads_each_process_group_on_its_own():
    calls = skipped_one()
    other = {n: recorded(["broadcast", "all_gather" if n == 2 else "broadcast"], group="9") for n in range(4)}
    tenth = {n: recorded(["broadcast", "all_gather" if n == 3 else "broadcast"], group="10") for n in range(4)}
    both = {n: other[n] + tenth[n] for n in range(4)}
    # group 9 before group 10 (by number), the default group first
    assert sequence_phrase(both, range(4)) == (
        "flight recorder: collective #2 of process group 9 is all_gather on rank 2, broadcast on ranks "
        "0-1, 3; rank 2 made 1 broadcast call, the others 2 (it skipped one)")
    assert sequence_phrase({n: both[n] + calls[n] for n in range(4)}, range(4)) == SKIPPED
    # a group some ranks do not call (a subgroup) is read on the ranks that do
    sub = {n: calls[n] + (recorded(["broadcast"], group="4") if n < 2 else []) for n in range(4)}
    assert sequence_phrase(sub, range(4)) == SKIPPED


def test_the_flight_recorder_phrase_goes_to_the_detail_rather_than_past_the_headline_limit():
    def verdict_with(host: str):  # type: ignore[no-untyped-def]
        states = [state(0, 25), replace(state(1, 25, wait="barrier", line=50), host=host), state(2, 25),
                  state(3, 25)]
        found = judge(states, SETTINGS)
        assert found is not None
        return replace(found, calls=skipped_one())

    short = verdict_with("h")
    assert MAX_HEADLINE == 400  # what a failure record keeps of a summary (records.MAX_TEXT)
    fits = verdict_with("h" * (400 - len(short.headline(SETTINGS)) + 1))
    assert len(fits.headline(SETTINGS)) == 400 and SKIPPED in fits.headline(SETTINGS)
    assert SKIPPED not in "\n".join(fits.detail())
    over = verdict_with("h" * (400 - len(short.headline(SETTINGS)) + 2))
    assert SKIPPED not in over.headline(SETTINGS) and over.headline(SETTINGS).endswith("for 25s; exit 124")
    assert over.detail()[0] == SKIPPED and over.detail()[1:] == culprit_detail(over.culprits)


def test_the_same_call_from_another_line_is_not_called_a_different_collective():
    """Issue 43: an all_reduce on another process group (or one the others skipped) was called "a
    different collective"; the sampler sees the same call at another line, and says that."""
    states = [state(0, 25), state(1, 25, line=50), state(2, 25), state(3, 25, wait="barrier", line=50)]
    verdict = judge(states, SETTINGS)
    assert verdict is not None and [s.rank for s in verdict.culprits] == [1, 3]
    assert "a different collective than the other ranks" in verdict.headline(SETTINGS)  # rank 3's barrier
    states = [state(0, 25), state(1, 25, line=50), state(2, 25), state(3, 25)]
    verdict = judge(states, SETTINGS)
    assert verdict is not None and [s.rank for s in verdict.culprits] == [1]
    assert "rank 1 (node rank 0, host 10.0.0.0, local rank 1) waits in all_reduce at train.py:50 " \
        "(the same call as the other ranks, from another line (another process group, or a call the " \
        "others skipped or made earlier): mismatched collectives)" in verdict.headline(SETTINGS)


def test_two_ranks_in_two_collectives_name_no_culprit_but_say_so():
    verdict = judge([state(0, 25), state(1, 25, wait="barrier", line=50)], SETTINGS)
    assert verdict is not None and verdict.culprits == []
    assert "; the ranks wait in different collectives: mismatched collectives; " in verdict.headline(SETTINGS)


def test_no_verdict_while_the_job_moves_even_with_a_rank_unseen():
    assert judge([state(0, 1), state(1, 1), replace(state(2, 1), unseen=True, stale_for=30.0)], SETTINGS) is None


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
    assert stall_line([state(0, 95), state(1, 96, wait=None)], SETTINGS) == "no progress for 1 min 36 s on rank 1"
    assert stall_line([state(0, 12), state(1, 1, busy=True)], SETTINGS) == "no progress for 12 s on rank 0"


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


# -- the limits: which timeout holds, and exactly when ------------------------------------

# (name, states, settings, expected (kind, final, limit as said) or None: nothing yet)
LIMITS = [
    ("every rank idle for exactly the timeout: a hang", [
        rank(0, idle=20), rank(1, idle=20, wait=None)], SETTINGS, ("hang", True, "--hang-timeout 20s")),
    ("one second short of the timeout: nothing", [
        rank(0, idle=19), rank(1, idle=19, wait=None)], SETTINGS, None),
    ("before the first step, a rank that never arrives is judged at exactly --hang-timeout", [
        rank(0, idle=20, started=False), rank(1, idle=20, wait=None, started=False)], SETTINGS,
     ("hang", True, "--hang-timeout 20s")),
    ("before the first step, a stopped rank inside the collective never arrives: --hang-timeout", [
        rank(0, started=False), rank(1, started=False, stopped=True)], SETTINGS,
     ("hang", True, "--hang-timeout 20s")),
    ("before the first step, every rank loading past the first allowance: --hang-first-timeout", [
        rank(0, idle=60, wait=None, started=False), rank(1, idle=60, wait=None, started=False)],
     SETTINGS, ("hang", True, "--hang-first-timeout 60s")),
    ("a --hang-first-timeout no longer than --hang-timeout: --hang-timeout is the one named", [
        rank(0, wait=None, started=False), rank(1, wait=None, started=False)],
     HangSettings(timeout=20, first_timeout=20, hard_limit=3), ("hang", True, "--hang-timeout 20s")),
    ("a straggler at exactly the hard limit is ended", [
        rank(0, idle=60), rank(1, idle=0, wait=None, busy=True)], SETTINGS,
     ("straggler", True, "--hang-timeout 20s")),
    ("a straggler just under the hard limit goes on", [
        rank(0, idle=59), rank(1, idle=0, wait=None, busy=True)], SETTINGS,
     ("straggler", False, "--hang-timeout 20s")),
    ("a rank active 3 s ago (three 1 s samples) is a straggler", [
        rank(0), rank(1, idle=3, wait=None, busy=True)], SETTINGS,
     ("straggler", False, "--hang-timeout 20s")),
    ("a rank last active 3.5 s ago is between busy and idle: judged at the next look", [
        rank(0), rank(1, idle=3.5, wait=None)], SETTINGS, None),
    ("with 2 s samples, a rank active 5 s ago (under three samples) is a straggler", [
        rank(0), rank(1, idle=5, wait=None, busy=True)],
     HangSettings(timeout=20, first_timeout=60, hard_limit=3, interval=2),
     ("straggler", False, "--hang-timeout 20s")),
    ("every rank in a torch.distributed call for exactly the calibrated 120 s: a hang", [
        rank(0, idle=120), rank(1, idle=120)], HangSettings(calibrate=True),
     ("hang", True, "calibrated 120s")),
    ("a calibrated timeout equal to --hang-timeout is --hang-timeout (10 x 60 s = 600 s)", [
        rank(0, idle=601, longest_wait=60), rank(1, idle=601)], HangSettings(calibrate=True),
     ("hang", True, "--hang-timeout 600s")),
    ("a rank that ended exactly the timeout ago is not progress: a hang", [
        rank(0, idle=20, wait=None, exited=True), rank(1, idle=25)], SETTINGS,
     ("hang", True, "--hang-timeout 20s")),
    ("a rank that ended within the timeout is progress", [
        rank(0, idle=19, wait=None, exited=True), rank(1, idle=25)], SETTINGS, None),
    ("a rank that has not reported yet, calibration on: nothing is judged", [
        rank(0, idle=700)], HangSettings(calibrate=True), None),
    ("every rank's process has ended: nothing to judge", [
        rank(0, idle=700, exited=True), rank(1, idle=700, exited=True)], HangSettings(calibrate=True),
     None),
]


@pytest.mark.parametrize(("name", "states", "settings", "expected"), LIMITS, ids=[row[0] for row in LIMITS])
def test_the_limits_table(name, states, settings, expected):  # type: ignore[no-untyped-def]
    verdict = judge(states, settings, expected_ranks=2)
    if expected is None:
        assert verdict is None
        return
    assert verdict is not None
    assert (verdict.kind, verdict.final, verdict.limit.short()) == expected


def test_the_same_evidence_gives_the_same_verdict_in_any_order():
    """Node 0 sorts the states by rank; the verdict must not depend on the order anyway."""
    states = [rank(0), rank(1, wait=None, line=8), rank(2), rank(3, stopped=True)]
    verdicts = [judge(order, SETTINGS) for order in (states, states[::-1], states[1:] + states[:1])]
    assert all(v is not None for v in verdicts)
    assert {tuple(sorted(s.rank for s in v.culprits)) for v in verdicts if v} == {(1, 3)}
    assert len({v.first_part() for v in verdicts if v}) == 1


# -- what the progress line and the headline say ------------------------------------------

# (name, states, settings, the line or None)
STALL_LINES = [
    ("idle for half the timeout (20 s): shown", [state(0, 10), state(1, 1, busy=True)], SETTINGS,
     "no progress for 10 s on rank 0"),
    ("idle for less than half the timeout: nothing", [state(0, 8), state(1, 1, busy=True)], SETTINGS,
     None),
    ("a long timeout: shown after 30 s", [state(0, 30), state(1, 1, busy=True)],
     HangSettings(timeout=600), "no progress for 30 s on rank 0"),
    ("a long timeout: not before 30 s", [state(0, 29), state(1, 1, busy=True)],
     HangSettings(timeout=600), None),
    ("the watch off: still shown after 30 s", [state(0, 30), state(1, 1, busy=True)],
     HangSettings(timeout=0), "no progress for 30 s on rank 0"),
    ("two idle ranks: both, the shortest idle time", [
        state(0, 12), state(1, 13), state(2, 1, busy=True)], SETTINGS, "no progress for 12 s on ranks 0-1"),
]


@pytest.mark.parametrize(("name", "states", "settings", "line"), STALL_LINES,
                         ids=[row[0] for row in STALL_LINES])
def test_the_stall_line_table(name, states, settings, line):  # type: ignore[no-untyped-def]
    assert stall_line(states, settings) == line


# (name, states, phrase)
WAITING = [
    ("two ranks in one place: plural", [state(0, 30), state(1, 31)],
     "ranks 0-1 wait in all_reduce at train.py:42 for 30s"),
    ("a rank outside any call: no 'in'", [state(0, 30, wait=None)], "rank 0 waits at train.py:42 for 30s"),
    ("the largest group first, whatever its ranks", [state(0, 30, line=9), state(1, 30), state(2, 30)],
     "ranks 1-2 wait in all_reduce at train.py:42 for 30s, rank 0 waits in all_reduce at train.py:9 for 30s"),
    ("four places: every one named", [state(n, 30, line=n) for n in range(4)],
     ", ".join(f"rank {n} waits in all_reduce at train.py:{n} for 30s" for n in range(4))),
    ("five places: three named, the rest counted", [state(n, 30, line=n) for n in range(5)],
     ", ".join(f"rank {n} waits in all_reduce at train.py:{n} for 30s" for n in range(3))
     + ", ranks 3-4 wait elsewhere"),
]


@pytest.mark.parametrize(("name", "states", "phrase"), WAITING, ids=[row[0] for row in WAITING])
def test_the_waiting_phrase_table(name, states, phrase):  # type: ignore[no-untyped-def]
    assert waiting_phrase(states) == phrase


USER = [["/job/train.py", n, f"f{n}"] for n in range(1, 6)]  # outermost first
LIB = [[C10D, n, f"c{n}"] for n in (100, 200, 300)]  # LIB[0] is what the user called

# (name, frames outermost first, reported frames, the same in call order)
FRAMES = [
    ("the user's three innermost lines, then the two library calls they made", USER + LIB,
     [USER[4], USER[3], USER[2], LIB[1], LIB[0]], [USER[2], USER[3], USER[4], LIB[0], LIB[1]]),
    ("no user code (a library thread): the innermost frames", [[LOCK, 1, "run"], [LOCK, 2, "wait"]],
     [[LOCK, 2, "wait"], [LOCK, 1, "run"]], [[LOCK, 1, "run"], [LOCK, 2, "wait"]]),
]


@pytest.mark.parametrize(("name", "frames", "reported", "ordered"), FRAMES, ids=[row[0] for row in FRAMES])
def test_the_reported_frames_table(name, frames, reported, ordered):  # type: ignore[no-untyped-def]
    assert report_frames(frames) == reported
    assert call_order(reported) == ordered


def test_the_detail_shows_each_culprits_header_its_source_lines_and_only_user_threads(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import time\ntime.sleep(600)\n")
    stuck = replace(rank(1, wait=None), where=[[str(script), 2, "<module>"]], cpu_share=0.25, threads=[
        ["loader", [[threading.__file__, 320, "wait"]]],  # library code only: not the other side of anything
        ["holder", [[str(script), 1, "hold"]]]])
    detail = culprit_detail([stuck, replace(rank(3, wait=None), dumped=True)])
    assert detail == [
        "rank 1 (node rank 0, host 10.0.0.0, local rank 1), inactive for 25s, CPU 25%:",
        f"  {script}:2 in <module>: time.sleep(600)",
        "  its thread 'holder':",
        f"    {script}:1 in hold: import time",
        "rank 3 (node rank 1, host 10.0.0.1, local rank 1), inactive for 25s, CPU 0% "
        "(faulthandler's watchdog: its sampler is silent):",
        "  /job/train.py:10 in <module>",  # the file is not here: no source line
        "  /job/train.py:42 in step",
    ]


@pytest.mark.parametrize(("count", "last", "lines"), [
    (4, "rank 3 (node rank 1, host 10.0.0.1, local rank 1), inactive for 25s, CPU 0%:", 4),
    (5, "... and 1 more: ranks 4", 5),
])
def test_the_detail_shows_four_culprits_and_counts_the_rest(count, last, lines):  # type: ignore[no-untyped-def]
    detail = culprit_detail([replace(rank(n, wait=None), where=[]) for n in range(count)])
    assert detail[-1] == last and len(detail) == lines


# -- torch's own process-group timeout fired first ---------------------------------------


def failure(rank: int | None, time: float, tail: str) -> Failure:
    return Failure(node_rank=0, rank=rank, local_rank=rank, returncode=1, secondary=False,
                   time=time, tail=tail)


TIMED_OUT = "RuntimeError: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL"
# (name, failures, the index of the one found or None)
TIMEOUTS = [
    ("no failure says timeout", [failure(0, 5, "ValueError: bad label")], None),
    ("no output at all", [failure(0, 5, "")], None),
    ("the NCCL watchdog's line", [failure(0, 5, "x"), failure(1, 6, TIMED_OUT)], 1),
    ("gloo's 'Timed out', in any case", [failure(2, 6, "RuntimeError: [/gloo] Timed out waiting"),
                                          failure(1, 7, "op timed out")], 0),
    ("the earliest of two, whatever the order", [failure(1, 9, TIMED_OUT), failure(0, 4, "Timeout")], 1),
    ("a node's own failure (no rank) is no collective's timeout", [
        failure(None, 1, "rendezvous timeout"), failure(1, 5, TIMED_OUT)], 1),
]


@pytest.mark.parametrize(("name", "failures", "found"), TIMEOUTS, ids=[row[0] for row in TIMEOUTS])
def test_the_timed_out_failure_table(name, failures, found):  # type: ignore[no-untyped-def]
    result = first_timed_out(failures)
    assert result is (None if found is None else failures[found])


# ranks 0 and 2 wait in all_reduce; ranks 1 (node 0) and 3 (node 1) never arrive
LAST_LOOK = [rank(0), rank(1, wait=None, line=12), rank(2), rank(3, wait=None, line=12)]


def test_the_rank_that_never_arrived_is_named_with_an_account_that_beats_the_timeout():
    """Every node prints the root cause with the highest priority and the earliest time: the
    account, node 0's, overrides the timed-out worker's own failure wherever it is read."""
    dying = [*LAST_LOOK[:2], replace(LAST_LOOK[2], stale_for=30.0), LAST_LOOK[3]]  # rank 2 exits
    account = never_arrived(failure(0, 100.0, TIMED_OUT), dying)
    assert account is not None
    assert account.reason == (
        "torch's process-group timeout fired in rank 0's all_reduce at train.py:42; the rank that "
        "never arrived: rank 1 (node rank 0, host 10.0.0.0, local rank 1) is stuck at train.py:12 "
        "in step, outside any collective; rank 3 (node rank 1, host 10.0.0.1, local rank 1) is "
        "stuck at train.py:12 in step, outside any collective")
    assert (account.node_rank, account.rank, account.returncode, account.overrides) == (0, None, 1, True)
    assert account.time < 100.0
    assert account.detail.splitlines()[0] == (
        "rank 1 (node rank 0, host 10.0.0.0, local rank 1), inactive for 25s, CPU 0%:")
    other_node = never_arrived(failure(0, 100.0, TIMED_OUT), [LAST_LOOK[0], LAST_LOOK[3]])
    assert other_node is not None and other_node.node_rank == 1


# (name, the rank that timed out, the last look)
NOTHING_TO_ADD = [
    ("the timed-out rank was not in a collective", 1, LAST_LOOK),
    ("the timed-out rank was not seen", 7, LAST_LOOK),
    ("every rank was in the same collective", 0, [rank(0), rank(1)]),
    ("the only rank not where the others wait is the timed-out one", 0, [
        rank(0, wait="barrier"), rank(1), rank(2)]),
]


@pytest.mark.parametrize(("name", "failed", "states"), NOTHING_TO_ADD, ids=[row[0] for row in NOTHING_TO_ADD])
def test_no_account_when_no_other_rank_is_to_blame(name, failed, states):  # type: ignore[no-untyped-def]
    assert never_arrived(failure(failed, 100.0, TIMED_OUT), states) is None


GLOO_TIMEOUT = ("RuntimeError: [/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 15000ms "
                "for recv operation to complete")


def test_a_timeout_a_sampler_noted_is_accounted_for_like_a_workers_failure():
    """``per-node`` mode: no worker failure record, the ``mp.spawn`` child's sampler noted the
    error; the lowest rank that timed out is the waiter, a peer-connection error is no timeout."""
    noted = [replace(LAST_LOOK[0], error="RuntimeError: Connection closed by peer"),
             LAST_LOOK[1], replace(LAST_LOOK[2], error=GLOO_TIMEOUT), LAST_LOOK[3]]
    failed = timed_out_state(noted)
    assert failed is not None and failed.rank == 2
    account = account_of_timeout(failed, LAST_LOOK, now=50.0)
    assert account is not None and account.reason.startswith(
        "torch's process-group timeout fired in rank 2's all_reduce at train.py:42; the rank that "
        "never arrived: rank 1 (node rank 0, host 10.0.0.0, local rank 1) is stuck at train.py:12")
    assert (account.returncode, account.overrides, account.exit_code) == (1, True, 1)
    assert timed_out_state([replace(s, error="ValueError: bad label") for s in LAST_LOOK]) is None
    assert timed_out_state(LAST_LOOK) is None


def test_ranks_waiting_in_collectives_for_a_rank_that_left_name_the_rank_that_left():
    gone = replace(state(3, 26, wait=None, line=12), exited=True, left=True)
    verdict = judge([state(0, 25), state(1, 25), state(2, 25), gone], SETTINGS)
    assert verdict is not None and verdict.kind == "hang" and [s.rank for s in verdict.culprits] == [3]
    headline = verdict.headline(SETTINGS)
    assert ("rank 3 (node rank 1, host 10.0.0.1, local rank 1) exited with code 0 at train.py:12 while its "
            "process group was still up (it left the job); ranks 0-2 wait in all_reduce at train.py:42") in headline
    # a rank that ended without leaving a group (destroyed it first) is not blamed
    ended = replace(gone, left=False)
    verdict = judge([state(0, 25), state(1, 25), state(2, 25), ended], SETTINGS)
    assert verdict is not None and verdict.culprits == []


def test_a_rank_waiting_on_a_queue_nobody_feeds_says_its_producer_may_have_died():
    import queue as queue_module

    stdlib = os.path.dirname(queue_module.__file__)
    frames = [["/job/train.py", 30, "main"], [f"{stdlib}/queue.py", 171, "get"], [f"{stdlib}/threading.py", 320, "wait"]]
    stuck = replace(state(1, 25, wait=None), where=report_frames(frames))
    verdict = judge([state(0, 25), stuck], SETTINGS)
    assert verdict is not None and "is stuck at train.py:30 in main, outside any collective, waiting on a queue " \
        "that no live thread of its code feeds (a producer thread that died?" in verdict.headline(SETTINGS)
    fed = replace(stuck, threads=[["producer", report_frames([["/job/train.py", 12, "produce"]])]])
    verdict = judge([state(0, 25), fed], SETTINGS)
    assert verdict is not None and "no live thread" not in verdict.headline(SETTINGS)


def test_calls_that_cannot_match_need_every_rank_inside_a_differing_call():
    from paijob.runtime.watch.hang.verdict import cannot_match

    assert cannot_match([state(0, 21), state(1, 21, wait="broadcast")])
    assert not cannot_match([state(0, 21), state(1, 21)])  # the same call
    assert not cannot_match([state(0, 21)])  # one rank
    assert not cannot_match([state(0, 21), state(1, 21, wait=None)])  # one outside any call
    assert not cannot_match([state(0, 21), replace(state(1, 21, wait="broadcast"), stopped=True)])  # odd
    assert not cannot_match([state(0, 21, wait="send"), state(1, 21, wait="recv")])
    assert not cannot_match([state(0, 21, wait="isend"), state(1, 21, wait="all_reduce")])


def test_where_a_rank_that_left_ended_is_said_in_words():
    from paijob.runtime.watch.ranks import left_phrase

    gone = replace(state(3, 26, wait=None), exited=True, left=True)
    name = "rank 3 (node rank 1, host 10.0.0.1, local rank 1)"
    assert left_phrase(replace(gone, where=[["/job/train.py", 12, "<module>"]])) == (
        f"{name} exited with code 0 at train.py:12")
    assert left_phrase(replace(gone, where=[["/job/train.py", 0, "<module>"]])) == (
        f"{name} exited with code 0 at the end of train.py")
    assert left_phrase(replace(gone, where=[["/job/train.py", 0, "run"]])) == (
        f"{name} exited with code 0 at the end of run")  # an mp.spawn function that returned
    assert left_phrase(replace(gone, where=[])) == f"{name} exited with code 0"
    assert left_phrase(replace(gone, exited=False, where=[["/job/train.py", 0, "<module>"]])) == (
        f"{name} ended its code at the end of train.py but its process has not exited")


def test_a_rank_that_left_is_blamed_only_for_a_hang():
    gone = replace(state(3, 26, wait=None, line=12), exited=True, left=True)
    assert judge([state(0, 5), state(1, 5), state(2, 5), gone], SETTINGS) is None  # no hang yet
    straggling = judge([state(0, 25), state(1, 25), state(2, 0.5, wait=None, busy=True), gone], SETTINGS)
    assert straggling is not None and straggling.kind == "straggler" and [s.rank for s in straggling.culprits] == [2]
    outside = judge([state(0, 25), state(1, 25), state(2, 25, wait=None), gone], SETTINGS)
    assert outside is not None and [s.rank for s in outside.culprits] == [2]  # one outside any call: not the leaver's


def test_a_queue_hint_needs_queue_get_and_no_thread_running_the_users_code():
    import queue as queue_module

    stdlib = os.path.dirname(queue_module.__file__)
    put = replace(state(1, 25, wait=None), where=report_frames([["/job/train.py", 30, "main"],
                                                                [f"{stdlib}/queue.py", 140, "put"]]))
    verdict = judge([state(0, 25), put], SETTINGS)
    assert verdict is not None and "no live thread" not in verdict.headline(SETTINGS)
    get = replace(put, where=report_frames([["/job/train.py", 30, "main"], [f"{stdlib}/queue.py", 171, "get"]]),
                  threads=[["pin_memory", report_frames([[f"{stdlib}/threading.py", 320, "wait"]])]])
    verdict = judge([state(0, 25), get], SETTINGS)
    assert verdict is not None and "no live thread of its code feeds" in verdict.headline(SETTINGS)


def test_ranks_never_seen_when_a_start_up_times_out_are_named_with_their_nodes():

    waiting = [replace(state(0, 9, wait="init_process_group", started=False), error="DistStoreError: wait timeout"),
               state(1, 9, wait="init_process_group", line=7, started=False)]
    account = account_of_timeout(waiting[0], waiting, 100.0, world_size=4, nnodes=2)
    assert account is not None and account.overrides and account.node_rank == 1 and account.time < 100.0
    assert account.reason.startswith(
        "start-up: node rank 1 (ranks 2-3) never joined: torch's timeout fired in rank 0's init_process_group at "
        "train.py:42 while it waited for them")
    assert "pass init_process_group a longer timeout=" in account.reason
    one = account_of_timeout(waiting[0], waiting, 100.0, world_size=3, nnodes=3)
    assert one is not None and "start-up: node rank 2 (rank 2) never joined" in one.reason
    two = account_of_timeout(waiting[0], waiting, 100.0, world_size=6, nnodes=3)
    assert two is not None and "start-up: node ranks 1-2 (ranks 2-5) never joined" in two.reason
    assert two.node_rank == 1  # the first node that never joined
    alone = account_of_timeout(waiting[0], waiting[:1], 100.0, world_size=2, nnodes=1)
    assert alone is not None and "start-up: node rank 0 (rank 1) never joined" in alone.reason
    seen = account_of_timeout(waiting[0], waiting, 100.0, world_size=4, nnodes=2, seen={2, 3})
    assert seen is None  # every rank was seen once (they failed later): not a start-up that never joined
    assert account_of_timeout(waiting[0], waiting, 100.0) is None  # no world size: nothing to miss


def test_ranks_node_0_cannot_read_count_as_the_jobs_but_are_not_judged_and_are_said():
    """Issue 43 row 4: ``per-node`` rank 0, whose process hosts the store, stopped; node 1's ranks
    cannot be read (as last read: ``unseen``). The verdict is rank 0's, and says who was not seen."""
    unseen = [replace(rank(n, idle=3, wait=None, line=9), unseen=True, stale_for=12.4) for n in (2, 3)]
    states = [rank(0, stopped=True, wait=None, line=7), rank(1), *unseen]
    verdict = judge(states, SETTINGS, expected_ranks=4)
    assert verdict is not None and verdict.kind == "hang"
    assert [s.rank for s in verdict.culprits] == [0] and [s.rank for s in verdict.others] == [1]
    assert verdict.unseen == unseen
    assert verdict.headline(SETTINGS).endswith(
        "rank 1 waits in all_reduce at train.py:42 for 25s; ranks 2-3 (node rank 1) not seen for 12s: the "
        "store they report through is in a stopped process; exit 124")
    assert judge([rank(0), rank(1)], SETTINGS, expected_ranks=4) is None  # unread ranks missing: no verdict
    assert judge([rank(0), rank(1), *unseen], SETTINGS, expected_ranks=4).unseen == unseen  # type: ignore[union-attr]
    assert judge([rank(0), rank(1, wait=None)], SETTINGS).unseen == []  # type: ignore[union-attr]


def test_the_unseen_phrase_names_ranks_and_nodes_and_the_shortest_absence():
    assert unseen_phrase([replace(rank(3), unseen=True, stale_for=7.6)]) == (
        "rank 3 (node rank 1) not seen for 8s: the store they report through is in a stopped process")
    states = [replace(rank(n), unseen=True, stale_for=9.0 + n) for n in (2, 3, 4, 5)]
    assert unseen_phrase(states).startswith("ranks 2-5 (node ranks 1, 2) not seen for 11s")


def in_own_code(n: int, idle: float, inside: str = "all_gather_object", started: bool = False) -> RankState:
    """A rank whose own code runs under a collective's frames (its sampler says ``inside``: no wait, no c10d)."""
    return replace(rank(n, idle, wait=None, started=started), inside=inside,
                   where=[["/job/train.py", 21, "__reduce__"], ["/job/train.py", 40, "<module>"]])


def test_a_rank_in_its_own_code_under_a_collective_is_judged_on_the_hang_timeout_and_named_so():
    """Issue 53: pickling in an object collective (or a custom backward) is the rank's own work: a long
    healthy wait there (an async checkpoint writer) is judged on --hang-timeout, never the calibrated one,
    and a real hang there is named as the rank's own code, even before the first training step."""
    calibrating = replace(SETTINGS, timeout=600, first_timeout=1800, calibrate=True)
    saving = [in_own_code(0, 180, started=True)] + [rank(n, 180, longest_wait=2.0) for n in (1, 2, 3)]
    assert judge(saving, calibrating) is None  # 180 s of saving: not a hang (calibrated would say 120 s)
    hung = [in_own_code(0, 25)] + [rank(n, 25, started=False) for n in (1, 2, 3)]  # at step 1
    verdict = judge(hung, SETTINGS)
    assert verdict is not None and verdict.kind == "hang" and verdict.limit.source == "--hang-timeout"
    assert ("rank 0 (node rank 0, host 10.0.0.0, local rank 0) is in its own code, __reduce__ at train.py:21, "
            "inside all_gather_object") in verdict.headline(SETTINGS)
    assert "mismatched" not in verdict.headline(SETTINGS)


def p2p(n: int, wait: str, peer: int | None, *, idle: float = 25, started: bool = True) -> RankState:
    """A rank in a blocking send or recv at train.py:24 whose other rank (its sampler read ``dst``/``src``)
    is ``peer``."""
    return replace(rank(n, idle, wait=wait, line=24, started=started), peer=peer)


def test_a_pipeline_rank_that_skipped_a_send_is_named_by_the_ranks_waiting_for_it():
    """Issue 53: rank 1 skipped one send; rank 2 waits in recv from it, rank 3 in recv from rank 2, and ranks
    0-1 wait in the next all_reduce: two against two, yet rank 1 is the one, named with what it never did."""
    states = [rank(0, line=30), rank(1, line=30), p2p(2, "recv", 1), p2p(3, "recv", 2)]
    verdict = judge(states, SETTINGS)
    assert verdict is not None and verdict.kind == "hang" and [s.rank for s in verdict.culprits] == [1]
    headline = verdict.headline(SETTINGS)
    assert ("rank 1 (node rank 0, host 10.0.0.0, local rank 1) waits in all_reduce at train.py:30 (never sent "
            "what rank 2 waits for in recv at train.py:24: a missing send)") in headline, headline
    assert "ranks 2-3 wait in recv at train.py:24 for 25s, rank 0 waits in all_reduce at train.py:30 for 25s" in headline
    assert "mismatched" not in headline
    early = judge([replace(s, first_progress=False) for s in states], SETTINGS)  # at step 1: no allowance
    assert early is not None and early.limit.source == "--hang-timeout" and [s.rank for s in early.culprits] == [1]


@pytest.mark.parametrize(("name", "states", "culprits", "why"), [
    ("a send whose rank is in another call: a missing recv", [p2p(0, "send", 1), rank(1, line=30)], [1],
     "never received what rank 0 sends it in send at train.py:24: a missing recv"),
    ("a recv from a rank in a recv from any source", [p2p(0, "recv", 1), p2p(1, "recv", None)], [1],
     "never sent what rank 0 waits for in recv at train.py:24: a missing send"),
    ("two recvs from each other: a deadlock", [p2p(0, "recv", 1), p2p(1, "recv", 0)], [0, 1], "a deadlock"),
    ("two sends to each other: a deadlock", [p2p(0, "send", 1), p2p(1, "send", 0)], [0, 1], "a deadlock"),
    ("a cycle of three and a rank waiting on it: the cycle", [
        p2p(3, "recv", 0), p2p(0, "recv", 1), p2p(1, "recv", 2), p2p(2, "recv", 0)], [0, 1, 2], "a deadlock"),
    ("a made pair: its message is in flight, no one to name", [p2p(0, "send", 1), p2p(1, "recv", 0)], None, ""),
    ("a recv from a rank not judged (another node not seen)", [p2p(0, "recv", 5), rank(1)], None, ""),
    ("a recv from any source", [p2p(0, "recv", None), rank(1)], None, ""),
    ("no send or recv", [rank(0), rank(1, wait="broadcast")], None, ""),
    ("a rank in a collective whose state names a peer (a report that says so): not a send or recv", [
        replace(rank(0), peer=1), rank(1, wait="broadcast")], None, ""),
])
def test_the_unanswered_point_to_point_table(name, states, culprits, why):  # type: ignore[no-untyped-def]
    from paijob.runtime.watch.hang.verdict import unanswered_p2p
    found = unanswered_p2p(states)
    if culprits is None:
        assert found is None, name
        return
    assert found is not None and [s.rank for s in found[0]] == culprits and why in found[1], (name, found)


def test_an_unanswered_send_or_recv_cannot_match_but_a_made_pair_can():
    from paijob.runtime.watch.hang.verdict import cannot_match
    assert cannot_match([p2p(0, "recv", 1), rank(1)])
    assert cannot_match([p2p(0, "recv", 1), p2p(1, "recv", 0)])
    assert not cannot_match([p2p(0, "send", 1), p2p(1, "recv", 0)])
    assert not cannot_match([p2p(0, "recv", 1), rank(1, wait=None)])  # a rank outside any call
