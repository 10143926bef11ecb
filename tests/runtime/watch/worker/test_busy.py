"""Busy, to the watch: a main thread that computes, or wants a CPU to compute on."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from paijob.runtime.watch.worker import process, sampler
from paijob.runtime.watch.worker.sampler import Sampler


def test_a_main_thread_that_wants_a_cpu_it_is_not_given_is_busy(tmp_path, monkeypatch):
    """A crowded machine (more runnable threads than cores, a CPU quota) gives a computing rank a few percent of
    a CPU: by CPU time alone it read as idle, and the slow-rank doctor said a rank spinning in heavy() worked "in
    its own code" instead of computing (a busy 2-core machine, per-node mode)."""
    readings = {"cpu": 5.0, "delay": 2.0}
    monkeypatch.setattr(sampler, "thread_cpu", lambda tid: (readings["cpu"], 0))
    monkeypatch.setattr(sampler, "thread_run_delay", lambda tid: (readings["delay"], 0))
    watch = Sampler(str(tmp_path), 0)

    def second_later(cpu: float, delay: float | None) -> dict:
        readings["cpu"] += cpu
        readings["delay"] = None if delay is None else (readings["delay"] or 0.0) + delay
        watch._wall = time.monotonic() - 1.0  # noqa: SLF001 - one second since the last sample
        return watch.sample()

    assert not watch.sample()["busy"]  # a first sample: nothing to compare with
    starved = second_later(0.02, 0.9)
    assert starved["busy"] and starved["cpu_share"] == pytest.approx(0.02, abs=0.005)  # the line still says its CPU
    assert not second_later(0.04, 0.2)["busy"]  # runnable 24 %: a wait woken often (DDP's reducer in backward)
    assert second_later(0.04, 0.5)["busy"]  # runnable 54 %: it computes, a CPU is seldom free
    assert second_later(0.06, 0.0)["busy"]  # its own CPU time: 6 %
    assert not second_later(0.04, None)["busy"]  # no schedstat: CPU time alone, 4 %
    readings["delay"] = 3.0
    assert not second_later(0.04, 0.0)["busy"]  # back after a missing reading: no share from it


def test_a_threads_run_delay_is_read_from_schedstat():
    if not Path(f"/proc/self/task/{os.getpid()}/schedstat").exists():
        pytest.skip("this kernel has no schedstat: busy is read from CPU time alone")
    delay, read = process.thread_run_delay(os.getpid())
    assert delay is not None and delay >= 0 and read > 0
    assert process.thread_run_delay(2**22 + 1) == (None, 0)  # no such thread
