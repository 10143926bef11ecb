"""How far each node's clock is ahead of node 0's, estimated through the rendezvous store.

Why: the slow-rank doctor compares when ranks on different hosts enqueued the same collective
(:mod:`paijob.runtime.watch.slow.verdict`); a host whose clock runs 50 ms ahead would look 50 ms late
at every step. NTP keeps a cluster's clocks close, but not always within a step.

How, over the store the nodes already share (no new port, no new thread): node k writes a round
number under its ask key, noting its clock just before (``asked``), then polls the answer key
every :data:`POLL` seconds for at most :data:`WAIT`; node 0 answers each new round at its next
tick with its own clock (``answer``); node k notes its clock when it sees the answer (``seen``).
Node 0's ``answer`` was taken between ``asked`` and ``seen`` on node k's clock, so node k is
ahead by at least ``asked - answer`` and at most ``seen - answer``. Node k polls fast and node 0
answers at its tick (up to a second later), so the upper bound is the tight one: the estimate is
the smallest ``seen - answer`` of the rounds kept (never below the largest ``asked - answer``),
and 0 while the rounds' bounds allow 0 (see :meth:`Ahead.estimate`). Its error is a poll interval
plus one store call, a few milliseconds on a quiet machine; a round with no answer within
:data:`WAIT` counts for nothing.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

ASK_KEY = "paijob/clock/{node}/ask"
ANSWER_KEY = "paijob/clock/{node}/{round}"
# seconds between two looks for node 0's answer: every look is a store call from a thread of its own
# (bounded), through the channel the failure records and the hang verdict also take, so a round stays at
# a few dozen calls (5 ms meant up to 300 a round, in the same seconds a failing job's nodes exchange
# their records); the estimate's tight side is a poll plus a store call, so it is applied only where the
# rounds prove the clocks differ by more (Ahead.estimate)
POLL = 0.05
WAIT = 1.5  # seconds node k waits for an answer (node 0 answers at its next 1 s tick)
KEPT = 8  # rounds an estimate is made from (older ones may predate a clock step)


@dataclass
class Ahead:
    """Node k's rounds: each ``(asked - answer, seen - answer)``, the bounds of how far ahead it is."""

    bounds: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=KEPT))

    def add(self, asked: float, answer: float, seen: float) -> None:
        self.bounds.append((asked - answer, seen - answer))

    def estimate(self) -> float | None:
        """How far ahead (seconds; negative: behind); None before any round was answered. 0 while
        the rounds allow 0: an offset is applied only where the exchange proves the clocks differ.
        Why: the tight side's error (a poll and a store call) grows to tens of milliseconds on a
        busy machine, and moving a node's times by an error makes its ranks look late at every
        step (a false slow node); where the clocks agree within the rounds' spread, they are left."""
        if not self.bounds:
            return None
        low = max(lo for lo, _hi in self.bounds)
        high = min(hi for _lo, hi in self.bounds)
        if high < low:  # rounds that disagree: a clock stepped; the newest round alone
            low, high = self.bounds[-1]
        return 0.0 if low <= 0.0 <= high else high


Get = Callable[[str], str | None]
Set = Callable[[str, str], None]


def ask(node_rank: int, round_: int, get: Get, put: Set, *, clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep, wait: float = WAIT) -> tuple[float, float, float] | None:
    """Node k: one round; ``(asked, answer, seen)``, or None when node 0 did not answer in time."""
    key = ANSWER_KEY.format(node=node_rank, round=round_)
    asked = clock()
    put(ASK_KEY.format(node=node_rank), str(round_))
    deadline = asked + wait
    while True:
        text = get(key)
        seen = clock()
        if text is not None:
            try:
                return asked, float(text), seen
            except ValueError:
                return None
        if seen >= deadline:
            return None
        sleep(POLL)


def answer(nnodes: int, answered: dict[int, int], get: Get, put: Set, *,
           clock: Callable[[], float] = time.time) -> None:
    """Node 0, every tick: answer each node's new round with this node's clock (``answered``: the
    last round answered per node, updated)."""
    for node in range(1, nnodes):
        text = get(ASK_KEY.format(node=node))
        if text is None or not text.isdigit() or int(text) <= answered.get(node, 0):
            continue
        answered[node] = int(text)
        put(ANSWER_KEY.format(node=node, round=text), repr(clock()))
