"""paijob's one /proc/<pid>/stat reader, checked against real processes and their odd names."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from paijob.common import procfs

# comm is the executable's name in parentheses: this one holds ") " and a byte that is not UTF-8.
ODD_NAME = b"\xff) S 1 2 3 ("


@pytest.fixture
def odd_sleep(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A ``sleep`` in a session of its own whose name would trip a naive stat parser."""
    link = os.path.join(os.fsencode(tmp_path), ODD_NAME)
    os.symlink(b"/bin/sleep", link)
    child = subprocess.Popen([link, "60"], start_new_session=True)  # returns once exec succeeded
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def _exit_unreaped(child: subprocess.Popen[bytes]) -> None:
    """Kill ``child`` and wait until it has exited, leaving it a zombie (not reaped)."""
    child.kill()
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)


def test_reads_this_process_as_the_kernel_describes_it() -> None:
    me = procfs.read_stat(os.getpid())
    assert me is not None and me.start_time > 0 and not me.stopped
    assert replace(me, start_time=0) == procfs.ProcStat(os.getpid(), "R", os.getppid(), os.getpgrp(),
                                                        os.getsid(0))
    assert me in procfs.processes() and os.getpid() in procfs.pids()


def test_a_name_with_parentheses_and_non_utf8_bytes_does_not_shift_the_fields(
    odd_sleep: subprocess.Popen[bytes],
) -> None:
    stat = procfs.read_stat(odd_sleep.pid)
    assert stat is not None
    assert (stat.ppid, stat.pgrp, stat.session) == (os.getpid(), odd_sleep.pid, odd_sleep.pid)
    assert not stat.zombie


def test_an_exited_unreaped_process_is_a_zombie_and_a_reaped_one_is_gone(
    odd_sleep: subprocess.Popen[bytes],
) -> None:
    _exit_unreaped(odd_sleep)
    stat = procfs.read_stat(odd_sleep.pid)
    assert stat is not None and stat.zombie
    odd_sleep.wait()
    assert procfs.read_stat(odd_sleep.pid) is None


def test_a_malformed_stat_reads_as_no_process() -> None:
    assert procfs.parse_stat(1, b"1 (init) S") is None
    assert procfs.parse_stat(1, b"1 (init) S x 1 1") is None
    assert procfs.parse_stat(7, b"7 (a) b) Z 1 2 3 4") == procfs.ProcStat(7, "Z", 1, 2, 3)


def test_the_local_tracker_sees_a_task_child_with_an_odd_name(odd_sleep: subprocess.Popen[bytes]) -> None:
    from paijob.local import tracking

    assert odd_sleep.pid in tracking.descendants([os.getpid()])


def test_the_agent_waits_for_a_group_whose_process_has_an_odd_name(odd_sleep: subprocess.Popen[bytes]) -> None:
    from paijob.runtime.groups import group_alive

    assert group_alive(odd_sleep.pid)
    _exit_unreaped(odd_sleep)
    assert not group_alive(odd_sleep.pid)  # a zombie awaiting its reaper is not alive


def test_the_port_watch_finds_the_session_of_a_process_with_an_odd_name(
    odd_sleep: subprocess.Popen[bytes],
) -> None:
    from paijob.runtime.watch.node.portwatch import session_pids

    assert session_pids(odd_sleep.pid) == {odd_sleep.pid}
