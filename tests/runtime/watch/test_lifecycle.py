"""The one life every watcher shares (paijob.runtime.watch.lifecycle): start, tick, bounded call, stop, finish."""

from __future__ import annotations

import threading
import time

import pytest

from paijob.runtime.watch.lifecycle import StoreTimeout, Ticker, Watchers, bounded


class Counting(Ticker):
    def __init__(self, log: list[str], name: str, fail: bool = False) -> None:
        super().__init__(name, 0.01, log.append)
        self.log, self.name, self.fail, self.ticks = log, name, fail, 0

    def tick(self) -> None:
        self.ticks += 1
        if self.fail:
            raise OSError("disk gone")

    def stop(self) -> None:
        self.log.append(f"stop {self.name}")
        super().stop()

    def finish(self) -> None:
        self.log.append(f"finish {self.name}")


def wait_until(condition, seconds: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_the_launcher_starts_one_thing_and_stops_one_thing():
    log: list[str] = []
    first, second = Counting(log, "first"), Counting(log, "second")
    watchers = Watchers(first, None, second)  # a watcher that is off is None
    watchers.start()
    assert wait_until(lambda: first.ticks > 2 and second.ticks > 2)
    watchers.stop()
    watchers.stop()  # once, whoever calls it again (a failure path and a finally)
    assert log == ["stop second", "stop first", "finish second", "finish first"]
    ticks = first.ticks
    time.sleep(0.1)
    assert first.ticks <= ticks + 1  # no tick after the one in progress


def test_a_failing_tick_is_said_once_and_the_watcher_goes_on():
    log: list[str] = []
    failing = Counting(log, "paijob-test", fail=True)
    failing.start()
    assert wait_until(lambda: failing.ticks > 5)
    failing.stop()
    assert log.count("paijob-test: OSError: disk gone") == 1


def test_a_store_call_that_does_not_answer_is_bounded():
    never = threading.Event()
    started = time.monotonic()
    with pytest.raises(StoreTimeout):
        bounded(never.wait, 0.2)
    assert time.monotonic() - started < 5
    assert bounded(lambda: 7, 1.0) == 7
    with pytest.raises(ValueError, match="bad"):
        bounded(lambda: int("bad"), 1.0)
