"""A stopped rank is read from outside its process (py-spy), at the line it really stopped at, and
the read changes nothing in the process: no signal, no ptrace-stop (issue 33). Without py-spy the
watch keeps the last sample's line and says how to get the real one."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from paijob.runtime.watch.channel import StoreChannel
from paijob.runtime.watch.hang.stacks import local_stacks
from paijob.runtime.watch.hang.verdict import stuck_phrase
from paijob.runtime.watch.node import outside
from paijob.runtime.watch.node.eyes import Eyes, outside_stacks
from paijob.runtime.watch.ranks import summarise

needs_py_spy = pytest.mark.skipif(outside.find_py_spy() is None,
                                  reason="py-spy is not installed (pip install -e '.[train]')")

STOPS_ITSELF = textwrap.dedent(
    """
    import os, signal, sys, threading, time

    def spin():
        while True:
            time.sleep(0.05)  # the other thread

    threading.Thread(target=spin, name="spinner", daemon=True).start()
    time.sleep(0.3)  # where a sampler last saw it
    os.kill(os.getpid(), signal.SIGSTOP)  # where it stopped
    while not os.path.exists(sys.argv[1]):  # continued: runs until told to stop again
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGSTOP)  # where it stopped the second time
    time.sleep(60)
    """
)
SLEEP_LINE, STOP_LINE, SECOND_STOP_LINE = 9, 10, 13


def state_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rpartition(b")")[2].split()[0].decode()
    except OSError:
        return "gone"


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def stopped(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A Python child stopped by its own SIGSTOP at STOP_LINE (a thread 'spinner' beside it)."""
    script = tmp_path / "stops.py"
    script.write_text(STOPS_ITSELF)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "stop-again")])
    try:
        wait_for(lambda: state_of(proc.pid) == "T")
        yield proc
    finally:
        proc.kill()
        proc.wait()


def report(proc: subprocess.Popen[bytes], script: Path) -> dict[str, Any]:
    """The sampler's last report of the child: the sleep before it stopped."""
    with open(f"/proc/{proc.pid}/stat", "rb") as handle:
        start = int(handle.read().rpartition(b")")[2].split()[19])
    return {"rank": 3, "pid": proc.pid, "start_time": start, "time": time.time() - 5,
            "active_at": time.time() - 5, "main_thread": 0,
            "frames": [[str(script), SLEEP_LINE, "<module>"]]}


@needs_py_spy
def test_a_stopped_process_is_read_from_outside_at_the_line_it_stopped_at(stopped, tmp_path: Path):
    read = outside.read(stopped.pid)
    main, others = read.split(stopped.pid, None)
    assert read.why == "" and main is not None, read
    assert main.frames[-1] == [str(tmp_path / "stops.py"), STOP_LINE, "<module>"]
    assert [t.name for t in others] == ["spinner"] and others[0].frames[-1][1:] == [6, "spin"]
    assert state_of(stopped.pid) == "T"  # still stopped: the read did not continue it


@needs_py_spy
def test_the_watch_names_a_stopped_rank_where_it_stopped_and_prints_that_stack(stopped, tmp_path):
    script = tmp_path / "stops.py"
    folder = tmp_path / "watch"
    folder.mkdir()
    (folder / "rank3.json").write_text(json.dumps(report(stopped, script)))
    look = Eyes(str(folder), node_rank=0, host="h", interval=1.0, launched=None, say=print).look()
    [state] = look.states
    assert state.stopped and state.outside and state.location == f"stops.py:{STOP_LINE}"
    assert stuck_phrase(state, "").endswith(
        f"is stopped (T state in /proc: SIGSTOP or a debugger) at stops.py:{STOP_LINE} in <module>")
    assert state.threads[0][0] == "spinner"
    text = local_stacks(look, "hang watch", node_rank=0, host="h", folder=str(folder))
    assert "every thread as py-spy read it from outside the stopped process" in text
    assert f'stops.py", line {STOP_LINE}, in <module>\n    os.kill(os.getpid(), signal.SIGSTOP)' in text
    assert "Stack of thread 'spinner'" in text


@needs_py_spy
def test_a_stopped_process_is_read_once_per_stopped_episode(stopped, tmp_path, monkeypatch):
    reads: list[int] = []

    def counted(pid: int, timeout: float = outside.READ_TIMEOUT) -> outside.Read:
        reads.append(pid)
        return real(pid, timeout)

    real = outside.read
    monkeypatch.setattr(outside, "read", counted)
    cache = outside.StoppedReads()
    first = cache.stacks(stopped.pid)
    assert cache.stacks(stopped.pid) is first and len(reads) == 1  # every second while stopped: one read
    os.kill(stopped.pid, signal.SIGCONT)
    wait_for(lambda: state_of(stopped.pid) in ("R", "S"))
    assert cache.stacks(stopped.pid) is None  # running: nothing to read
    (tmp_path / "stop-again").touch()  # on to its second SIGSTOP
    wait_for(lambda: state_of(stopped.pid) == "T")
    second = cache.stacks(stopped.pid)
    assert second is not None and len(reads) == 2
    main, _others = second.split(stopped.pid, None)
    assert main is not None and main.frames[-1][1] == SECOND_STOP_LINE


def test_without_py_spy_a_stopped_rank_keeps_its_last_line_and_says_how_to_get_the_real_one(
        stopped, tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: None)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))  # no py-spy beside it
    assert outside.find_py_spy() is None
    script = tmp_path / "stops.py"
    last = report(stopped, script)
    seen, unread = outside_stacks(last, outside.StoppedReads().stacks(stopped.pid))
    state = summarise(last, node_rank=0, host="h", now=time.time(), interval=1.0, stopped=True, seen=seen,
                      unread=unread)
    assert not state.outside and state.location == f"stops.py:{SLEEP_LINE}"
    assert stuck_phrase(state, "").endswith(
        f"is stopped (T state in /proc: SIGSTOP or a debugger), last seen at stops.py:{SLEEP_LINE} in "
        f"<module> ({outside.MISSING})")
    assert "pip install py-spy" in outside.MISSING


COUNTS_AND_RECORDS_SIGNALS = textwrap.dedent(
    """
    import os, signal, sys, time
    counter, signals = sys.argv[1], sys.argv[2]

    def record(number, frame):
        with open(signals, "a") as handle:
            handle.write(f"{number}\\n")

    for number in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
        try:
            signal.signal(number, record)
        except (OSError, ValueError):
            pass  # the C library's own real-time signals
    count = 0
    while True:
        count += 1
        if count % 1000 == 0:
            with open(counter + ".new", "w") as handle:
                handle.write(str(count))
            os.replace(counter + ".new", counter)
    """
)


@needs_py_spy
def test_the_outside_read_neither_stops_nor_signals_the_process(tmp_path: Path):
    script, counter, signals = tmp_path / "counts.py", tmp_path / "count", tmp_path / "signals"
    script.write_text(COUNTS_AND_RECORDS_SIGNALS)
    proc = subprocess.Popen([sys.executable, str(script), str(counter), str(signals)])
    try:
        wait_for(counter.exists)
        for _ in range(5):
            read = outside.read(proc.pid)
            assert read.why == "" and read.split(proc.pid, None)[0] is not None, read
        after = int(counter.read_text())
        wait_for(lambda: int(counter.read_text()) > after)  # it kept counting
        assert state_of(proc.pid) not in ("T", "t")  # never stopped (R, S, or D while it writes)
        assert not signals.exists(), signals.read_text()  # no signal arrived
    finally:
        proc.kill()
        proc.wait()


TRACED_BY_ITS_PARENT = textwrap.dedent(
    """
    import ctypes, os, signal, sys
    if ctypes.CDLL(None).ptrace(0, 0, None, None) != 0:  # PTRACE_TRACEME: its parent is its debugger
        sys.exit(3)  # ptrace is not allowed here (seccomp, Yama's ptrace_scope 3)
    os.kill(os.getpid(), signal.SIGSTOP)  # held by the debugger here
    """
)


@needs_py_spy
def test_a_process_held_by_a_debugger_is_read_without_attaching_to_it(tmp_path: Path):
    """A process can have one tracer: a read that ptrace-attached would fail on one a debugger holds."""
    script = tmp_path / "traced.py"
    script.write_text(TRACED_BY_ITS_PARENT)
    pid = os.spawnv(os.P_NOWAIT, sys.executable, [sys.executable, str(script)])  # this test: its debugger
    try:
        _pid, status = os.waitpid(pid, os.WUNTRACED)  # its signal-delivery stop
        if os.WIFEXITED(status):
            pid = 0
            pytest.skip("ptrace is not allowed here: no process can be held by a debugger")
        assert os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGSTOP
        assert state_of(pid) == "t"  # tracing stop
        read = outside.read(pid)
        main, _others = read.split(pid, None)
        assert main is not None and main.frames[-1][1:] == [5, "<module>"], read
        assert state_of(pid) == "t"
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def test_the_flag_that_a_rank_was_read_from_outside_crosses_the_store():
    """The other nodes' states reach node 0 as JSON through the rendezvous store."""
    store: dict[str, bytes] = {}

    class Store:
        def set(self, key: str, value: str) -> None:
            store[key] = value.encode()

        def get(self, key: str) -> bytes:
            return store[key]

        def check(self, keys: list[str]) -> bool:
            return all(key in store for key in keys)

    channel = StoreChannel(lambda fn: fn(Store()))
    last = {"rank": 2, "pid": 1, "time": time.time(), "frames": [["/job/t.py", 10, "<module>"]]}
    read = outside.Read((outside.Thread(7, 1, "MainThread", [["/job/t.py", 12, "<module>"]]),))
    states = [summarise(last, node_rank=1, host="h", now=time.time(), interval=1.0, stopped=True,
                        seen=outside_stacks(last, read)[0]),
              summarise({**last, "rank": 3}, node_rank=1, host="h", now=time.time(), interval=1.0,
                        stopped=True, unread=outside_stacks(last, outside.Read(why=outside.MISSING))[1])]
    channel.publish(1, states)
    gathered = channel.gather(2, 0)
    assert gathered == states
    assert gathered[0].outside and gathered[0].location == "t.py:12"
    assert not gathered[1].outside and gathered[1].unread == outside.MISSING


PY_SPY_JSON = json.dumps([
    {"pid": 11935, "thread_id": 140522085934784, "thread_name": "spinner", "os_thread_id": 11978,
     "frames": [{"name": "spin", "filename": "/job/t.py", "line": 4},
                {"name": "Thread.run", "filename": "/usr/lib/python3.11/threading.py", "line": 982}]},
    {"pid": 11935, "thread_id": 140522100906880, "thread_name": None, "os_thread_id": 11935,
     "frames": [{"name": "step", "filename": "/job/t.py", "line": 7},
                {"name": "<module>", "filename": "/job/t.py", "line": 20},
                {"name": "run_path", "filename": "<frozen runpy>", "line": 291},
                {"name": "run_as_main", "filename": "/venv/site-packages/paijob/runtime/worker.py", "line": 180},
                {"name": "<module>", "filename": "<string>", "line": 4}]},  # the launcher's own frames
])


def test_py_spys_json_becomes_each_threads_frames_outermost_first_and_the_main_thread_is_the_pids():
    main, others = outside.Read(outside.parse(PY_SPY_JSON)).split(11935, None)
    assert main is not None and main.frames == [["/job/t.py", 20, "<module>"], ["/job/t.py", 7, "step"]]  # no <string>:4
    assert main.name == "thread 0x7fcdd9e85b80"  # no name read: its ident
    assert [(t.name, t.frames[-1]) for t in others] == [("spinner", ["/job/t.py", 4, "spin"])]


@pytest.mark.parametrize(("program", "why"), [
    ("echo \"Permission Denied: Try running again with elevated permissions by going 'sudo env'\" >&2; exit 1",
     "py-spy could not read it: permission denied (it needs the worker's user, or CAP_SYS_PTRACE)"),
    ("echo 'Error: Failed to find python version from target process' >&2; exit 1",
     "py-spy could not read it: Failed to find python version from target process"),
    ("echo 'error: unexpected argument --json found'; exit 2", "py-spy could not read it: error: unexpected argument --json found"),
    ("echo 'Thread 1 (idle)'", "py-spy's output was not the JSON it writes (py-spy 0.4 or newer reads it)"),
    ("exec sleep 30", "py-spy did not answer within 0.5s"),
])
def test_a_py_spy_that_fails_or_hangs_gives_why_in_bounded_time(tmp_path: Path, monkeypatch,
                                                                 program: str, why: str):
    fake = tmp_path / "bin" / "py-spy"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\n{program}\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    began = time.monotonic()
    assert outside.read(os.getpid(), timeout=0.5) == outside.Read(why=why)
    assert time.monotonic() - began < 10
