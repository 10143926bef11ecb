"""A stopped worker's stacks, read from outside its process with py-spy, without stopping or
signalling it.

A stopped rank (T state: SIGSTOP, a debugger) runs nothing, its sampler included, so its last
sample can be up to a second old: the previous step's all_reduce, not the line that stopped it.
``py-spy dump --nonblocking`` reads every Python thread's stack from the process's memory
(``process_vm_readv``): no signal, no ptrace-stop, nothing in the worker changes (issue 33: the
watch never changes the program it watches). The kernel lets it for the worker's own user (the
launcher, its ancestor, is one) or with CAP_SYS_PTRACE.

py-spy comes with ``paijob[train]``; where it is missing or cannot read the process, the watch
keeps the last sample's line and says why (:attr:`Read.why`). One read per stopped episode:
the key holds the main thread's context switches, which do not change while it stays stopped.
Imported by the hang watch only; no torch import.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from paijob.common import procfs

PY_SPY = "py-spy"
READ_TIMEOUT = 5.0  # seconds one read may take (a large process: py-spy parses its binaries first)
MISSING = "py-spy, not installed here, would give the line it stopped at: pip install py-spy, or paijob[train]"


@dataclass(frozen=True)
class Thread:
    """One Python thread of the process as py-spy read it."""

    ident: int  # threading.get_ident() (a sampler report's ``main_thread``)
    native_id: int  # its kernel thread id: the process id for the main thread
    name: str
    frames: list[list[Any]]  # outermost first, [file, line, function], like a sampler's


@dataclass(frozen=True)
class Read:
    """Every Python thread of a stopped process, or why there are none (``why``: one short phrase)."""

    threads: tuple[Thread, ...] = ()
    why: str = ""

    def split(self, pid: int, main_ident: object) -> tuple[Thread | None, list[Thread]]:
        """The main thread (its kernel id is the process id; else the sampler's ident), and the others."""
        main = next((t for t in self.threads if t.native_id == pid), None)
        main = main or next((t for t in self.threads if t.ident == main_ident), None)
        return main, [t for t in self.threads if t is not main and t.frames]


def find_py_spy() -> str | None:
    """The py-spy installed with paijob, beside this Python (a venv's bin/, not always on PATH), else
    the one on PATH; None: neither."""
    beside = os.path.join(os.path.dirname(sys.executable), PY_SPY)
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    return shutil.which(PY_SPY)


# The launcher's own frames below the user's code in a worker: python's ``-c`` bootstrap (``<string>``),
# the worker wrapper and runpy. The sampler drops them from its stacks; a stack read from outside the same.
_LAUNCH_FRAMES = ("<string>", f"paijob{os.sep}runtime{os.sep}worker.py", f"{os.sep}runpy.py", "<frozen runpy>")


def without_launch_frames(frames: list[list[Any]]) -> list[list[Any]]:
    """``frames`` (outermost first) from the first frame above the launcher's own."""
    ours = [i for i, frame in enumerate(frames) if str(frame[0]).endswith(_LAUNCH_FRAMES)]
    return frames[ours[-1] + 1:] if ours and ours[-1] + 1 < len(frames) else frames


def parse(text: str) -> tuple[Thread, ...]:
    """``py-spy dump --json``'s output (each thread's frames innermost first) as :class:`Thread` s."""
    threads = []
    for item in json.loads(text):
        ident = int(item.get("thread_id") or 0)
        frames = without_launch_frames(
            [[f["filename"], int(f["line"]), f["name"]] for f in reversed(item.get("frames") or [])])
        threads.append(Thread(ident, int(item.get("os_thread_id") or 0),
                              str(item.get("thread_name") or f"thread 0x{ident:x}"), frames))
    return tuple(threads)


def read(pid: int, timeout: float = READ_TIMEOUT) -> Read:
    """Process ``pid``'s Python stacks, read now, without pausing it (``--nonblocking``)."""
    program = find_py_spy()
    if program is None:
        return Read(why=MISSING)
    env = dict(os.environ, RUST_BACKTRACE="0", RUST_LIB_BACKTRACE="0")  # its error in one line
    try:
        done = subprocess.run([program, "dump", "--pid", str(pid), "--nonblocking", "--json"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                              env=env, check=False)
    except subprocess.TimeoutExpired:
        return Read(why=f"py-spy did not answer within {timeout:g}s")
    except OSError as error:
        return Read(why=f"py-spy did not start: {error}")
    if done.returncode != 0:
        return Read(why=f"py-spy could not read it: {_first_line(done.stderr or done.stdout)}")
    try:
        threads = parse(done.stdout)
    except (ValueError, KeyError, TypeError, AttributeError):
        return Read(why="py-spy's output was not the JSON it writes (py-spy 0.4 or newer reads it)")
    return Read(threads) if threads else Read(why="py-spy found no Python thread in it")


def _first_line(stderr: str) -> str:
    line = next((s.strip() for s in stderr.splitlines() if s.strip()), "no message")
    if "ermission" in line:
        return "permission denied (it needs the worker's user, or CAP_SYS_PTRACE)"
    return line.removeprefix("Error: ")[:160]


@dataclass
class StoppedReads:
    """:func:`read` once per stopped episode of a process: keyed by its pid, start time (a pid is
    reused) and its main thread's context switches (a process that ran in between switched)."""

    reads: dict[int, tuple[tuple[int, int], Read]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stacks(self, pid: int) -> Read | None:
        """``pid``'s stacks while it is stopped; None when it is not stopped (or gone)."""
        stat = procfs.read_stat(pid)
        if stat is None or not stat.stopped:
            with self.lock:
                self.reads.pop(pid, None)
            return None
        episode = (stat.start_time, _switches(pid))
        with self.lock:
            kept = self.reads.get(pid)
            if kept is not None and kept[0] == episode:
                return kept[1]
        found = read(pid)
        with self.lock:
            self.reads[pid] = (episode, found)
        return found


def _switches(pid: int) -> int:
    """The main thread's voluntary plus involuntary context switches (``/proc/<pid>/status``); -1: unknown."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return -1
    total = 0
    for line in lines:
        key, _colon, value = line.partition(":")
        if key.endswith("ctxt_switches") and value.strip().isdigit():
            total += int(value)
    return total


STOPPED = StoppedReads()  # one per node process: a read is a fact about the process, not about a watch
