"""Where a worker is and whether it moves: the sampler inside every worker (the hang watch's eyes).

Why here: paijob already runs its own wrapper around every worker
(:mod:`paijob.runtime.worker`), so progress can be seen without a line of the
user's code. A daemon thread wakes once per interval (1 s) and looks at the
main thread from the outside:

* its Python stack (``sys._current_frames()``): which line it is on, whether
  that is inside a ``torch.distributed`` collective, a DataLoader wait (and for
  which loader worker), or the user's own code;
* its CPU time (``/proc/self/task/<tid>/stat``) and I/O
  (``/proc/self/task/<tid>/io``): a rank that computes or writes a checkpoint is
  busy even when its stack stands still;
* how many collectives it has issued: torch's own per-group sequence number
  (``ProcessGroup._get_sequence_number_for_group()``, in torch 2.4 to 2.13 for
  gloo and NCCL), which counts every collective, DDP's gradient all-reduces
  included, however briefly it lasted. A sample that catches a rank inside a
  collective is luck (a fast job's all-reduce takes microseconds); the counter
  is not, so a rank's first progress is seen on the first sample after it.

It writes what it saw, atomically, to one small JSON file per worker
(``rank<N>.json`` in the folder the launcher names) that the node's agent reads
(:mod:`paijob.runtime.watch.hang.doctor`). A rank is *active* in a sample when its
stack moved, its main thread used CPU or it did storage I/O; the file carries
when it was last active, so the agent needs no history.

A worker whose sampler cannot run (a C call that holds the GIL) stops updating
its file. For it the sampler keeps faulthandler's own watchdog armed
(``faulthandler.dump_traceback_later``, re-armed at every sample): a C thread
that needs no GIL and sends no signal writes every thread's stack to
``rank<N>.stack`` once the sampler has missed :data:`DUMP_AFTER` seconds. No
signal is ever sent to a worker (a signal wakes a C call that holds the GIL,
and the user's code sees EINTR): the watch never changes the program it watches.
While the main thread stands still, the report also carries every other Python
thread's stack (the other side of a deadlock).

Once the node's agent asks (gloo aborted a rank for a collective's size), the
sampler also writes this rank's last collectives as torch's flight recorder kept
them (:func:`answer_calls_request`; the agent's side: :mod:`paijob.runtime.watch.node.recorder`).

Cost: one sample is a stack walk of the main thread and three small /proc
reads, about 0.1 ms once a second (see ``benchmarks/bench_hangwatch.py``).
No torch import: the sampler only reads ``sys.modules`` for what is loaded.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import pickle
import sys
import threading
import time
from types import FrameType
from typing import Any

from paijob.common import contract, untrusted
from paijob.runtime.watch import seal
from paijob.runtime.watch.evidence import Evidence

DEFAULT_INTERVAL = 1.0
DUMP_AFTER = 3.0  # seconds without a sample before faulthandler's watchdog writes rank<N>.stack
MAX_ERROR = 500  # characters of an error's last line kept in a report
BUSY_CPU_SHARE = 0.05  # main-thread CPU over a sample interval that counts as busy (a wait uses ~0)
MOVING_DATA = 1 << 20  # bytes of the process's I/O in one sample interval: data on the move
FIRST_PROGRESS_SAMPLES = 3  # samples that saw collectives complete: past the first training step
MAX_FRAMES = 60  # deepest stack kept (innermost frames); recursion would make it endless

# Library code a stack passes through; the first frame outside it is "the user's line".
_LIBRARY_PARTS = (
    f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}", "<frozen ",
    f"{os.sep}paijob{os.sep}runtime{os.sep}",
)
_STDLIB = os.path.dirname(os.__file__)
_C10D = f"torch{os.sep}distributed{os.sep}distributed_c10d.py"
_DATALOADER = f"torch{os.sep}utils{os.sep}data{os.sep}dataloader.py"
_AUTOGRAD = (f"torch{os.sep}autograd{os.sep}", f"torch{os.sep}_tensor.py")
_DDP = f"torch{os.sep}nn{os.sep}parallel{os.sep}distributed.py"
_DIST_UTILS = f"torch{os.sep}distributed{os.sep}utils.py"
_RENDEZVOUS = (f"torch{os.sep}distributed{os.sep}rendezvous.py",
               f"torch{os.sep}distributed{os.sep}elastic{os.sep}")
_C10D_MODULE = "torch.distributed.distributed_c10d"

# Every process group the sampler has read, kept until the process ends. Were the sampler's
# thread to drop a group's last reference (the main thread destroyed the group while it read),
# the group's destructor would run here, joining gloo's threads with the GIL held: the deadlock
# paijob.runtime.recipes.distributed.leave_process_group describes. Kept, the group also outlives
# a user's DDP model freed after destroy_process_group (torch 2.4's reducer is another last
# owner). Workers end without finalisation (paijob.runtime.worker.finish): these go with them.
_READ_GROUPS: dict[int, object] = {}

Frame = tuple[str, int, str]  # file, line, function


def is_library(filename: str) -> bool:
    """Whether a frame's file is installed code (torch, the standard library, paijob's runtime)."""
    return filename.startswith(_STDLIB) or any(part in filename for part in _LIBRARY_PARTS)


def main_stack(frame: FrameType | None, *, skip_files: tuple[str, ...] = ()) -> list[Frame]:
    """The stack from ``frame`` outwards, returned outermost first, from the target's first frame
    on: the wrapper's own frames (``skip_files``, the last of them and all before it) and runpy's
    go."""
    frames: list[Frame] = []
    while frame is not None and len(frames) < MAX_FRAMES:
        code = frame.f_code
        frames.append((code.co_filename, frame.f_lineno or 0, code.co_name))
        frame = frame.f_back
    frames.reverse()
    ours = [i for i, f in enumerate(frames) if f[0] in skip_files]
    if ours:
        frames = frames[ours[-1] + 1:]
    while frames and (frames[0][0] in skip_files or "runpy" in frames[0][0]):
        frames.pop(0)
    return frames


def classify_wait(frames: list[Frame]) -> tuple[str | None, bool]:
    """What a stack waits in (``all_reduce``, ``backward``, ``DataLoader``...), and whether
    that is a collective (a wait on the other ranks). ``(None, False)``: user code or other."""
    for filename, _line, function in frames:  # outermost first: the API the user called
        if filename.endswith(_C10D):
            return function, True
    for filename, _line, function in frames:
        if filename.endswith(_DIST_UTILS) and "broadcast" in function:
            return "broadcast (DDP's parameter sync)", True
        if filename.endswith(_DDP):
            return "DistributedDataParallel " + function.strip("_"), True
        if any(part in filename for part in _AUTOGRAD) and function == "backward":
            return "backward", True
        if filename.endswith(_DATALOADER):
            return "DataLoader", False
        if any(part in filename for part in _RENDEZVOUS):
            return "rendezvous", True
    return None, False


_THREADING = f"{os.sep}threading.py"
_JOIN_FUNCTIONS = frozenset({"join", "_wait_for_tstate_lock"})


def joining(frame: FrameType | None) -> bool:
    """Whether ``frame`` (a thread's innermost) is ``Thread.join`` waiting for another thread."""
    return (frame is not None and frame.f_code.co_filename.endswith(_THREADING)
            and frame.f_code.co_name in _JOIN_FUNCTIONS)


def in_c10d(frames: list[Frame]) -> bool:
    """Whether the stack is inside a ``torch.distributed`` API call (all_reduce, barrier, recv...),
    not one of the waits told apart by other means (``backward``, DDP, the rendezvous)."""
    return any(filename.endswith(_C10D) for filename, _line, _function in frames)


def collectives_issued() -> int | None:
    """How many collectives this process has issued on all its process groups, from torch's own
    sequence numbers; None while ``torch.distributed`` is not loaded or has no group.

    Read from the sampler thread: the getter only reads a counter. A backend without sequence
    numbers (MPI, a third-party one) counts nothing; another torch release that lacks the
    calls: None, and the sampled stack alone tells completed collectives.
    """
    c10d = sys.modules.get(_C10D_MODULE)
    world = getattr(c10d, "_world", None)
    try:
        groups = list(world.pg_map) if world is not None else []
    except Exception:  # noqa: BLE001 - changed while read (a group being made), or another torch
        return None
    total: int | None = None
    for group in groups:
        _READ_GROUPS.setdefault(id(group), group)
        try:
            total = (total or 0) + int(group._get_sequence_number_for_group())  # noqa: SLF001
        except Exception:  # noqa: BLE001 - a backend without sequence numbers
            continue
    return total


def loader_worker(frame: FrameType | None) -> tuple[int, int | None] | None:
    """(worker id, pid) of the DataLoader worker the main thread waits for, when it waits for one.

    torch's multiprocessing iterator keeps ``_task_info[_rcvd_idx] = (worker_id,)`` while the
    batch it needs next has not arrived; its frames hold the iterator as ``self``.
    """
    while frame is not None:
        if frame.f_code.co_filename.endswith(_DATALOADER) and frame.f_code.co_name == "_next_data":
            it = frame.f_locals.get("self")
            try:
                info = it._task_info.get(it._rcvd_idx)  # type: ignore[union-attr]
                if info is not None and len(info) == 1:
                    worker_id = int(info[0])
                    process = it._workers[worker_id]  # type: ignore[union-attr]
                    return worker_id, getattr(process, "pid", None)
            except Exception:  # noqa: BLE001 - another torch release: say less, never fail
                return None
            return None
        frame = frame.f_back
    return None


def _thread_cpu(tid: int) -> tuple[float | None, int]:
    """(CPU seconds (user + system) of thread ``tid`` of this process, bytes read); None
    without /proc."""
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as handle:
            text = handle.read()
        fields = text.rpartition(b")")[2].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS, len(text)
    except (OSError, IndexError, ValueError):
        return None, 0


def _io_bytes(tid: int) -> tuple[int, int]:
    """(bytes thread ``tid`` of this process read and wrote through system calls (rchar + wchar of
    ``/proc/self/task/<tid>/io``), bytes of that file itself); (0, 0) without it.

    The main thread's, not the process's: other threads' traffic is no progress of the rank's (the
    rendezvous store that rank 0 hosts in ``per-node`` mode answers the other ranks all the time)."""
    try:
        with open(f"/proc/self/task/{tid}/io", "rb") as handle:
            text = handle.read()
    except OSError:
        return 0, 0
    total = 0
    for line in text.splitlines():
        if line.startswith((b"rchar:", b"wchar:")):
            total += int(line.split()[1])
    return total, len(text)


def _process_io() -> int:
    """Bytes every thread of this process read and wrote through system calls (``/proc/self/io``
    rchar + wchar); 0 without it. gloo moves a collective's data in threads of its own."""
    try:
        with open("/proc/self/io", "rb") as handle:
            text = handle.read()
    except OSError:
        return 0
    return sum(int(line.split()[1]) for line in text.splitlines()
               if line.startswith((b"rchar:", b"wchar:")))


try:
    _CLOCK_TICKS = float(os.sysconf("SC_CLK_TCK"))
except (AttributeError, ValueError, OSError):
    _CLOCK_TICKS = 100.0


class Sampler:
    """The daemon thread that samples the main thread and writes ``rank<N>.json``."""

    def __init__(self, folder: str, rank: int, *, interval: float = DEFAULT_INTERVAL,
                 skip_files: tuple[str, ...] = (), local_rank: int | None = None) -> None:
        self.path = os.path.join(folder, f"rank{rank}.json")
        self.stack_path = os.path.join(folder, f"rank{rank}.stack")
        self.rank = rank
        self.local_rank = _int_env("LOCAL_RANK") if local_rank is None else local_rank
        self.interval = interval
        self.skip_files = skip_files
        self.main = threading.main_thread()
        self.tid = os.getpid()  # the main thread's id in /proc is the process id
        self._signature: tuple[tuple[Any, int], ...] | None = None
        self._cpu: float | None = None
        self._io = 0
        self._own_io = 0  # bytes of /proc read and the report written since the last sample
        self._wall = time.monotonic()
        self.moved_at = time.time()
        self.active_at = self.moved_at
        self._process_io = 0
        self.data_moved_at = self.moved_at  # the last sample whose process moved MOVING_DATA or more
        self._issued: int | None = None  # torch's count of collectives at the last sample
        self._in_collective: tuple[str, Any, int | None] | None = None
        self._wait_started = 0.0
        self._in_collective_c10d = False
        self._seen_done = 0  # collectives the sampled stack was seen to leave
        self.collectives_done = 0
        self.rising_samples = 0  # samples that saw more collectives done than the one before
        self.longest_wait = 0.0  # the longest wait inside one torch.distributed call (calibration)
        self.seq = 0
        self._watched: int | None = None  # the ident of the thread sampled last (watched_thread)
        self.start_time = own_start_time()
        self.dump_after = max(DUMP_AFTER, 3 * interval)
        self.error = ""  # the exception that ended the rank's function (``mp.spawn`` children): see note_error
        self.left: dict[str, Any] | None = None  # the rank ended while in a process group: see note_left
        self._prepared: list[dict[str, Any]] | None = None  # its calls read ahead of a request (prepare_answer)
        self._last: dict[str, Any] | None = None  # the last report written
        self._stack_fd: int | None = None
        self._seal: seal.Seal | None = None  # this process's key, in its memory only, and its socket to the watch
        self.evidence = Evidence(folder, rank, is_library=is_library, write=write_new)  # the slow-rank doctor's
        self._thread = threading.Thread(target=self._run, name="paijob-progress", daemon=True)

    def start(self) -> None:
        self._open_stack_file()
        # the key first: the watch files it under this process (the kernel says which) before any
        # report is read, and believes a report of this rank only with this key's MAC
        self._seal = seal.Seal.open(os.path.dirname(self.path), self.rank)
        # the first report now, from the starting thread: a rank whose code then holds the GIL in C
        # (a store client retrying its connection for its whole timeout) is known to the watch (vouched
        # for while alive) before it fails, so its error is believed after it ended
        with contextlib.suppress(Exception):  # the watch must never break the worker
            self.write(self.sample())
        self._thread.start()
        folder, interval = os.path.dirname(self.path), self.interval
        os.register_at_fork(after_in_child=lambda: watch_forked_child(folder, interval))

    def _open_stack_file(self) -> None:
        """``rank<N>.stack``, created here and never through a link, for faulthandler's watchdog."""
        try:
            self._stack_fd = os.open(self.stack_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                                     | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            self._stack_fd = None

    def arm_watchdog(self) -> None:
        """(Re-)arm faulthandler's watchdog: unless the next sample re-arms it within
        ``dump_after``, a C thread writes every thread's stack to ``rank<N>.stack`` (no GIL, no
        signal). A dump left by an earlier silence is cleared first: the file holds only the
        current one."""
        if self._stack_fd is None:
            return
        try:
            if os.fstat(self._stack_fd).st_size:
                os.ftruncate(self._stack_fd, 0)
                os.lseek(self._stack_fd, 0, os.SEEK_SET)
            faulthandler.dump_traceback_later(self.dump_after, repeat=False, file=self._stack_fd)
        except (OSError, ValueError, RuntimeError):
            self._stack_fd = None

    def _run(self) -> None:
        folder = os.path.dirname(self.path)
        while self.main.is_alive():
            try:
                self.arm_watchdog()
                report = self.sample()
                self.write(report)
                if self.evidence.due(report["time"]):
                    self.evidence.write(report["time"], report)
                answer_calls_request(folder, self.rank, sealed=self._seal)  # a stat, unless the agent asked
            except Exception:  # noqa: BLE001 - the watch must never break training
                pass
            time.sleep(self.interval)
        faulthandler.cancel_dump_traceback_later()

    def sample(self) -> dict[str, Any]:
        """One look at the main thread: where it is, whether it moved or worked since the last look."""
        now, wall = time.time(), time.monotonic()
        issued = collectives_issued()  # before the stack: a collective counts once it is left
        watched, frame, tid = self._watched_now()
        frames = main_stack(frame, skip_files=self.skip_files)
        signature = tuple((id(f.f_code), line) for f, line in _walk(frame))
        moved = signature != self._signature or issued != self._issued
        self._signature, self._issued = signature, issued
        cpu, stat_bytes = _thread_cpu(tid)
        io_bytes, io_file_bytes = _io_bytes(tid)
        elapsed = max(1e-3, wall - self._wall)
        cpu_share = 0.0 if cpu is None or self._cpu is None else (cpu - self._cpu) / elapsed
        busy = cpu_share >= BUSY_CPU_SHARE
        # the sampler's own reads and its last report's write are not the rank's I/O
        own = stat_bytes + io_file_bytes + self._own_io
        did_io = self._io > 0 and io_bytes - self._io > own
        self._cpu, self._io, self._wall = cpu, io_bytes, wall
        if moved:
            self.moved_at = now
        if moved or busy or did_io:
            self.active_at = now
        self._note_process_io(now)
        wait, collective = classify_wait(frames)
        c10d = in_c10d(frames)
        self.follow_collectives(wait if collective else None, c10d, frame, issued, now)
        waiting_for = loader_worker(frame) if wait == "DataLoader" else None
        self.evidence.count(frames, busy=busy)
        self.seq += 1
        still = now - self.moved_at >= 2 * self.interval
        return {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "pid": os.getpid(),
            "start_time": self.start_time,
            "main_thread": watched.ident,
            "seq": self.seq,
            "time": now,
            "active_at": self.active_at,
            "moved_at": self.moved_at,
            "data_moved_at": self.data_moved_at,
            "busy": busy,
            "cpu_share": round(cpu_share, 3),
            "wait": wait,
            "collective": collective,
            "c10d": c10d,
            "loader_worker": list(waiting_for) if waiting_for else None,
            "collectives_done": self.collectives_done,
            "first_progress": self.first_progress,
            "longest_wait": round(self.longest_wait, 1),
            "frames": frames,
            "threads": other_threads(watched.ident, self._thread.ident) if still else [],
            "error": self.error,
        }

    def _watched_now(self) -> tuple[threading.Thread, FrameType | None, int]:
        """The thread to sample (:meth:`watched_thread`), its innermost frame and its kernel id (for
        its CPU time and I/O); a change of thread restarts the CPU comparison."""
        watched, frame = self.watched_thread()
        if watched.ident != self._watched:  # another thread: its CPU is not comparable with the last
            self._watched, self._cpu = watched.ident, None
        return watched, frame, self.tid if watched is self.main else (watched.native_id or self.tid)

    def watched_thread(self) -> tuple[threading.Thread, FrameType | None]:
        """The thread the rank's verdict is about, and its innermost frame: the main thread, unless
        it waits in ``join()`` for a thread that trains (training in a side thread); then the
        joined-for thread inside a ``torch.distributed`` call, else the first with code of the
        user's. A healthy main thread in ``join()`` at the end of a run changes nothing."""
        current = sys._current_frames()  # noqa: SLF001 - the sampler's whole point
        frame = current.get(self.main.ident or -1)
        if not joining(frame):
            return self.main, frame
        candidates = [(thread, current.get(thread.ident or -1)) for thread in threading.enumerate()
                      if thread is not self.main and thread is not self._thread and not thread.daemon]
        stacks = [(thread, found, main_stack(found)) for thread, found in candidates if found is not None]
        for thread, found, stack in stacks:
            if in_c10d(stack):
                return thread, found
        for thread, found, stack in stacks:
            if any(not is_library(f[0]) for f in stack):
                return thread, found
        return self.main, frame

    def _note_process_io(self, now: float) -> None:
        """Whether any thread moved data since the last look (a long collective's transfer: gloo's
        threads do it while the main thread waits); a rank doing so is not hung, however long."""
        total = _process_io()
        if total - self._process_io >= MOVING_DATA:
            self.data_moved_at = now
        self._process_io = total

    def follow_collectives(self, wait: str | None, c10d: bool, frame: FrameType | None,
                            issued: int | None, now: float) -> None:
        """Completed collectives (a rank's first progress) and the longest wait inside one
        ``torch.distributed`` call (the calibrated timeout's yardstick).

        Completed: torch's count of issued collectives, less the one the stack is in now; a
        sampled stack leaving a collective counts too (a process group without sequence
        numbers). One wait lasts while the stack stays in the same call and the count stands
        still; its length runs from the first sample that saw it to the first that did not,
        which errs long, the safe side for a timeout derived from it.
        """
        key = (wait, id(_outermost_library_frame(frame)), issued) if wait is not None else None
        if key != self._in_collective:
            if self._in_collective is not None:
                self._seen_done += 1
                if self._in_collective_c10d:
                    self.longest_wait = max(self.longest_wait, now - self._wait_started)
            self._in_collective, self._wait_started = key, now
        self._in_collective_c10d = c10d
        from_torch = 0 if issued is None else issued - (1 if wait is not None else 0)
        done = max(self._seen_done, from_torch)
        if done > self.collectives_done:
            self.rising_samples += 1
        self.collectives_done = done

    @property
    def first_progress(self) -> bool:
        """Past the first training step: collectives seen completing in
        :data:`FIRST_PROGRESS_SAMPLES` samples. What a script does once before it trains (build
        DDP, which broadcasts; a barrier; a process group) completes collectives in one or two
        samples, then may load data for minutes: still before the first step. A training loop
        completes some in every sample."""
        return self.rising_samples >= FIRST_PROGRESS_SAMPLES

    def write(self, report: dict[str, Any]) -> None:
        if self.error and not report.get("error"):  # a sample taken before the error was noted
            report = {**report, "error": self.error}
        if self.left is not None and "left" not in report:  # a sample taken before the exit was noted
            report = {**report, "left": self.left}
        text = json.dumps(report, separators=(",", ":"))
        if self._seal is not None:  # signed, and sent where no other process can overwrite it
            text = self._seal.sign(text)
            self._seal.send(text)
        write_new(self.path, text)
        self._last = report
        self._own_io = len(text.encode("utf-8")) + 64  # + the io file read between (its length varies)

    def note_error(self, error: str) -> None:
        """The rank's function raised ``error`` (its last line): say so at once, on the last report
        (where the rank was while it ran). Why: torch's own process-group timeout ends a ``mp.spawn``
        child in milliseconds, and its node's watch needs to know it timed out *waiting* to name
        the rank that never arrived, on every node (:func:`paijob.runtime.watch.hang.verdict.timed_out_state`).
        Called from the failing thread; nothing else changes."""
        self.error = error[:MAX_ERROR]
        self._write_now({"error": self.error})

    def prepare_answer(self) -> None:
        """Read this rank's recent calls now, for :meth:`answer_request`: the recorder's first dump with
        stacks takes about a second (more under load), which a rank holding back a knock-on error
        spends before the agent asks, not after (the agent waits :data:`~paijob.runtime.watch.node.recorder.ANSWER_WAIT`)."""
        with contextlib.suppress(Exception):  # the watch must never break the worker
            self._prepared = recent_calls()

    def answer_request(self) -> None:
        """Answer the agent's request for this rank's calls now, if it asked (from the worker's main
        thread while it holds back a knock-on error: within 50 ms, not at the next sample, so a
        mismatch's account does not hang on the sampler's rhythm under load)."""
        with contextlib.suppress(Exception):  # the watch must never break the worker
            answer_calls_request(os.path.dirname(self.path), self.rank, self._prepared, sealed=self._seal)

    def note_left(self, where: list[Any]) -> None:
        """The rank's code ended with exit code 0 while its process group was still up
        (``where``: ``[file, line, function]`` of its ``sys.exit``, line 0 for the script's end).
        Harmless by itself (many scripts end without ``destroy_process_group``), it is the root
        cause when the ranks still in a collective with it then fail or wait
        (:mod:`paijob.runtime.watch.leaving`): said at once, on the last report."""
        self.left = {"where": where, "time": time.time()}
        self._write_now({"left": self.left})

    def _write_now(self, news: dict[str, Any]) -> None:
        """The last report with ``news``, written now from the calling thread; before the first sample
        (a rank that fails or leaves in its first second), a report that says who it is and ``news``."""
        last = self._last or {"rank": self.rank, "local_rank": self.local_rank, "pid": os.getpid(),
                              "start_time": self.start_time, "main_thread": self.main.ident, "seq": 0}
        try:
            self.write({**last, **news, "time": time.time()})
        except OSError:
            pass


def leaving_frame(error: BaseException | None, target: str, function: str = "<module>") -> list[Any]:
    """Where a rank's code ended: the frame that raised ``SystemExit`` (``sys.exit`` is C: the
    traceback's last frame is its caller), else the end of ``function`` in ``target`` (line 0)."""
    tb = error.__traceback__ if error is not None else None
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return [target, 0, function]
    return [tb.tb_frame.f_code.co_filename, tb.tb_lineno, tb.tb_frame.f_code.co_name]


def in_process_group() -> bool:
    """Whether this process is still a rank of an initialised process group of more than one
    rank (torch already loaded: a script that never imported torch is in none)."""
    c10d = sys.modules.get(_C10D_MODULE)
    try:
        return bool(c10d is not None and c10d.is_initialized() and c10d.get_world_size() > 1)
    except Exception:  # noqa: BLE001 - a torch whose group is half torn down: not a rank any more
        return False


# -- the last collectives, when the agent asks (paijob.runtime.watch.node.recorder) -------------------

REQUEST_FILE = "calls.request"  # in the hang watch's folder: the agent wants every live rank's calls
KEPT_PER_GROUP = 4  # last entries per process group a rank reports
_C10D_C = "torch._C._distributed_c10d"


def answer_path(folder: str, rank: int) -> str:
    return os.path.join(folder, f"rank{rank}.calls.json")


def answer_calls_request(folder: str, rank: int, prepared: list[dict[str, Any]] | None = None, *,
                         sealed: seal.Seal | None = None) -> bool:
    """Write this rank's recent calls (``prepared``: as read ahead, else read now) once the agent asked (at
    each sample); whether an answer was written. An answer is written once, signed with this process's key
    (``sealed``, as its reports are); a rank without a recorder answers ``null``, so the agent need not wait
    for it."""
    path = answer_path(folder, rank)
    if not os.path.exists(os.path.join(folder, REQUEST_FILE)) or os.path.exists(path):
        return False
    nonce = request_nonce(folder)
    if nonce is None:
        return False
    text = json.dumps({"nonce": nonce, "calls": prepared if prepared is not None else recent_calls()})
    write_new(path, text if sealed is None else sealed.sign(text))
    return True


def request_nonce(folder: str) -> str | None:
    """The agent's request's nonce (:func:`paijob.runtime.watch.node.recorder.request`), which an answer repeats."""
    data = untrusted.read_regular(os.path.join(folder, REQUEST_FILE), 64)
    text = data.decode("ascii", "replace").strip() if data else ""
    return text if len(text) == 32 and all(c in "0123456789abcdef" for c in text) else None


def recent_calls(limit: int = KEPT_PER_GROUP) -> list[dict[str, Any]] | None:
    """This process's last ``limit`` collectives of each process group as torch's flight
    recorder kept them, oldest first; None: torch is not loaded here, this torch has no
    recorder for its backend, or it is off. Each: ``{"group", "seq", "op", "sizes", "dtypes",
    "line"}`` (``line``: the innermost frame of the user's code that issued the call,
    ``train.py:42``, or None)."""
    dump = getattr(sys.modules.get(_C10D_C), "_dump_fr_trace", None)
    if dump is None:
        return None
    try:
        entries = pickle.loads(dump()).get("entries") or []  # noqa: S301 - torch's own bytes, this process's
    except Exception:  # noqa: BLE001 - another torch: say nothing rather than fail a worker
        return None
    calls = [_recorded_call(e) for e in entries if isinstance(e, dict) and not e.get("is_p2p")]
    kept: list[dict[str, Any]] = []
    for group in dict.fromkeys(c["group"] for c in calls):
        kept.extend(sorted((c for c in calls if c["group"] == group), key=lambda c: c["seq"])[-limit:])
    return kept or None


def _recorded_call(entry: dict[str, Any]) -> dict[str, Any]:
    """One entry of torch's recorder as the agent reads it. torch's frames are innermost first
    ({"name", "filename", "line"}); the line is the innermost one outside installed code."""
    frames = [f for f in entry.get("frames") or [] if isinstance(f, dict)]
    user = next((f for f in frames if f.get("filename") and not is_library(str(f["filename"]))
                 and not str(f["filename"]).startswith("<")), None)
    return {
        "group": str(entry.get("pg_id", "")),
        "seq": int(entry.get("collective_seq_id") or 0),
        "op": str(entry.get("profiling_name", "")).split(":")[-1],
        "sizes": [list(s) for s in entry.get("input_sizes") or []],
        "dtypes": [str(d) for d in entry.get("input_dtypes") or []],
        "line": f"{os.path.basename(str(user['filename']))}:{user.get('line')}" if user else None,
    }


def watch_forked_child(folder: str, interval: float) -> None:
    """In a process forked from a watched worker (a DataLoader worker): a thread that writes its
    main thread's stack to ``fork<pid>.json`` once per ``interval``, so a rank that waits for it
    can show where it is without a signal. Threads do not survive a fork; this one is new."""
    pid = os.getpid()
    main = threading.main_thread()
    path = os.path.join(folder, f"fork{pid}.json")
    start = own_start_time()

    def run() -> None:
        while True:
            time.sleep(interval)  # first look one interval on: the fork itself is over by then
            try:
                frame = sys._current_frames().get(main.ident or -1)  # noqa: SLF001
                report = {"pid": pid, "ppid": os.getppid(), "start_time": start, "time": time.time(),
                          "frames": main_stack(frame)}
                write_new(path, json.dumps(report, separators=(",", ":")))
            except Exception:  # noqa: BLE001 - the watch must never break a data worker
                return

    threading.Thread(target=run, name="paijob-progress", daemon=True).start()


def write_new(path: str, text: str) -> None:
    """Replace ``path`` by ``text`` atomically, never through a link (the temporary file is created
    exclusively; a link planted under its name is removed first)."""
    temp = f"{path}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temp, path)


def other_threads(main: int | None, sampler: int | None) -> list[dict[str, Any]]:
    """Every Python thread but the main one and the sampler: name and stack, outermost first
    (a rank whose main thread stands still: the thread that holds what it waits for)."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    found = []
    for ident, frame in sorted(sys._current_frames().items()):  # noqa: SLF001
        if ident in (main, sampler):
            continue
        found.append({"name": names.get(ident, f"thread {ident}"), "ident": ident,
                      "frames": main_stack(frame)})
    return found


def own_start_time() -> int:
    """This process's start time in clock ticks since boot (``/proc/self/stat`` field 22); with
    the pid it names the process: a pid reused later has another. 0 without /proc."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            return int(handle.read().rpartition(b")")[2].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def _walk(frame: FrameType | None) -> list[tuple[FrameType, int]]:
    found: list[tuple[FrameType, int]] = []
    while frame is not None and len(found) < MAX_FRAMES:
        found.append((frame, frame.f_lineno or 0))
        frame = frame.f_back
    return found


def _outermost_library_frame(frame: FrameType | None) -> FrameType | None:
    """The library call the user's code made (e.g. ``all_reduce``): the outermost library frame
    below the innermost user frame."""
    found = None
    while frame is not None:
        if is_library(frame.f_code.co_filename):
            found = frame
        elif found is not None:
            return found
        frame = frame.f_back
    return found


def _int_env(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def start_from_env(skip_files: tuple[str, ...] = (),
                   environ: dict[str, str] | None = None) -> Sampler | None:
    """Start the sampler when the launcher asked for it (named a folder); None otherwise."""
    env = os.environ if environ is None else environ
    folder = env.get(contract.HANG_DIR, "")
    rank = env.get("RANK", "")
    if not folder or not rank.isdigit() or not os.path.isdir(folder):
        return None
    try:
        interval = float(env.get(contract.HANG_INTERVAL, DEFAULT_INTERVAL))
    except ValueError:
        interval = DEFAULT_INTERVAL
    local_rank = env.get("LOCAL_RANK", "")
    sampler = Sampler(folder, int(rank), interval=max(0.05, interval), skip_files=skip_files,
                      local_rank=int(local_rank) if local_rank.isdigit() else None)
    sampler.start()
    return sampler
