"""The hang verdict as pure functions (paijob.runtime.watch.verdict): rank states in, verdict out.

One table, one row per shape of stall; each row says who must be named and how. The real jobs
that produce these states run in test_hangs.py.
"""

from __future__ import annotations

import pytest

from paijob.runtime.config import HangSettings
from paijob.runtime.watch.verdict import RankState, call_order, judge, report_frames

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
    ("before the first training step, every rank in one collective: the first allowance holds", [
        rank(0, started=False), rank(1, started=False)], SETTINGS, None, [], []),
    ("a busy rank while the others wait: a straggler, not a hang", [
        rank(0), rank(1, idle=0, wait=None, busy=True)], SETTINGS, "straggler",
     ["not a hang while it works", "ended at 3 x --hang-timeout (60s)"], []),
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
