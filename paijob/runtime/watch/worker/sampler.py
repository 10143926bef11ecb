"""Where a worker is and whether it moves: the sampler inside every worker (the hang watch's eyes).

Why here: paijob already runs its own wrapper around every worker
(:mod:`paijob.runtime.worker`), so progress can be seen without a line of the
user's code. A daemon thread wakes once per interval (1 s) and looks at the
main thread from the outside:

* its Python stack (``sys._current_frames()``): which line it is on, whether
  that is inside a ``torch.distributed`` collective, a DataLoader wait (and for
  which loader worker), or the user's own code; in a blocking ``send`` or ``recv``, the
  other rank (read from the call's own frame: gloo's flight recorder keeps no
  point-to-point calls);
* its CPU time (``/proc/self/task/<tid>/stat``), its run delay (``schedstat``: runnable, waiting for a
  CPU) and I/O (``/proc/self/task/<tid>/io``): a rank that computes, or wants a CPU to compute on (a
  crowded machine gives it a few percent), or writes a checkpoint is busy even when its stack stands
  still;
* how many collectives it has issued: torch's own per-group sequence number
  (``ProcessGroup._get_sequence_number_for_group()``, in torch 2.4 to 2.13 for
  gloo and NCCL), which counts every collective, DDP's gradient all-reduces
  included, however briefly it lasted. A sample that catches a rank inside a
  collective is luck (a fast job's all-reduce takes microseconds); the counter
  is not, so a rank's first progress is seen on the first sample after it.

It writes what it saw, atomically, to one small JSON file per worker
(``rank<N>.json`` in the folder the launcher names) that the node's agent reads
(:mod:`paijob.runtime.watch.hang.doctor`). A rank is *active* in a sample when its
stack moved, its main thread used or wanted CPU or it did storage I/O; the file carries
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
import sys
import threading
import time
from types import FrameType
from typing import Any

from paijob.common import contract
from paijob.runtime.failure import is_consequence
from paijob.runtime.watch import seal
from paijob.runtime.watch.evidence import Evidence
from paijob.runtime.watch.folder import (
    MAX_ERROR,
    MAX_TYPE,
    MAX_WHERE,
    WorkerError,
    error_path,
    fork_path,
    report_path,
    stack_path,
    write_new,
)
from paijob.runtime.watch.frames import is_library
from paijob.runtime.watch.worker.calls import answer_calls_request, recent_calls
from paijob.runtime.watch.worker.process import (
    collectives_issued,
    own_start_time,
    process_io,
    thread_cpu,
    thread_io,
    thread_run_delay,
)
from paijob.runtime.watch.worker.stack import (
    classify_wait,
    error_line,
    error_where,
    in_c10d,
    joining,
    loader_worker,
    main_stack,
    other_threads,
    outermost_library_frame,
    own_code_inside,
    p2p_peer,
    walk,
)

DEFAULT_INTERVAL = 1.0
DUMP_AFTER = 3.0  # seconds without a sample before faulthandler's watchdog writes rank<N>.stack
BUSY_CPU_SHARE = 0.05  # main-thread CPU over a sample interval that counts as busy (a wait uses ~0)
# ... or its time on and waiting for a CPU (runnable): a computing thread starved on a crowded machine is runnable
# most of the time; a waiting one woken often (DDP's reducer in backward) only a little more than it runs (at 5 %,
# the ranks waiting in a DDP job's backward on a crowded 2-core machine read as computing 92 % of their time)
BUSY_RUNNABLE_SHARE = 0.5
MOVING_DATA = 1 << 20  # bytes of the process's I/O in one sample interval: data on the move
FIRST_PROGRESS_SAMPLES = 3  # samples that saw collectives complete: past the first training step


class Sampler:
    """The daemon thread that samples the main thread and writes ``rank<N>.json``."""

    def __init__(self, folder: str, rank: int, *, interval: float = DEFAULT_INTERVAL,
                 skip_files: tuple[str, ...] = (), local_rank: int | None = None) -> None:
        self.path = report_path(folder, rank)
        self.stack_path = stack_path(folder, rank)
        self.rank = rank
        self.local_rank = _int_env("LOCAL_RANK") if local_rank is None else local_rank
        self.interval = interval
        self.skip_files = skip_files
        self.main = threading.main_thread()
        self.tid = os.getpid()  # the main thread's id in /proc is the process id
        self._signature: tuple[tuple[Any, int], ...] | None = None
        self._cpu: float | None = None
        self._delay: float | None = None  # the main thread's run delay at the last sample (thread_run_delay)
        self._io = 0
        self._own_io = 0  # bytes of /proc read and the report written since the last sample
        self._wall = time.monotonic()
        self.moved_at = time.time()
        self.active_at = self.moved_at
        self._io_total = 0
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
        self.error = ""  # the exception that ended the rank's function (``mp.spawn`` children): see note_failure
        self.left: dict[str, Any] | None = None  # the rank ended while in a process group: see note_left
        self._prepared: list[dict[str, Any]] | None = None  # its calls read ahead of a request (prepare_answer)
        self._last: dict[str, Any] | None = None  # the last report written
        self._stack_fd: int | None = None
        self._seal: seal.Seal | None = None  # this process's key, in its memory only, and its socket to the watch
        self.evidence = Evidence(folder, rank, is_library=is_library, write=self._write_sealed)  # the slow-rank doctor's
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
            time.sleep(until_the_next_slot(time.time(), self.interval))
        faulthandler.cancel_dump_traceback_later()

    def _cpu_since(self, tid: int, wall: float) -> tuple[bool, float, int]:
        """(Whether the main thread was busy since the last sample, its CPU share, bytes of ``/proc`` read):
        busy when it used :data:`BUSY_CPU_SHARE` of a CPU, or was runnable :data:`BUSY_RUNNABLE_SHARE` of the
        time (on a CPU or waiting for one). ``wall``: now, on the monotonic clock."""
        cpu, stat_bytes = thread_cpu(tid)
        delay, schedstat_bytes = thread_run_delay(tid)
        elapsed = max(1e-3, wall - self._wall)
        cpu_share = 0.0 if cpu is None or self._cpu is None else (cpu - self._cpu) / elapsed
        delay_share = 0.0 if delay is None or self._delay is None else (delay - self._delay) / elapsed
        self._cpu, self._delay = cpu, delay
        busy = cpu_share >= BUSY_CPU_SHARE or cpu_share + delay_share >= BUSY_RUNNABLE_SHARE
        return busy, cpu_share, stat_bytes + schedstat_bytes

    def sample(self) -> dict[str, Any]:
        """One look at the main thread: where it is, whether it moved or worked since the last look."""
        now, wall = time.time(), time.monotonic()
        issued = collectives_issued()  # before the stack: a collective counts once it is left
        watched, frame, tid = self._watched_now()
        frames = main_stack(frame, skip_files=self.skip_files)
        signature = tuple((id(f.f_code), line) for f, line in walk(frame))
        moved = signature != self._signature or issued != self._issued
        self._signature, self._issued = signature, issued
        busy, cpu_share, proc_bytes = self._cpu_since(tid, wall)
        io_bytes, io_file_bytes = thread_io(tid)
        # the sampler's own reads and its last report's write are not the rank's I/O
        own = proc_bytes + io_file_bytes + self._own_io
        did_io = self._io > 0 and io_bytes - self._io > own
        self._io, self._wall = io_bytes, wall
        if moved:
            self.moved_at = now
        if moved or busy or did_io:
            self.active_at = now
        self._note_process_io(now)
        wait, collective = classify_wait(frames)
        c10d = in_c10d(frames)
        inside = own_code_inside(frames)
        if inside is not None:  # its own code under the call's frames: its own work, not a wait on the others
            wait, collective, c10d = None, False, False
        self.follow_collectives(wait if collective else None, c10d, frame, issued, now)
        waiting_for = loader_worker(frame) if wait == "DataLoader" else None
        peer = p2p_peer(frame)  # None unless it waits in a blocking send or recv
        self.evidence.count(frames, busy=busy, started=self.first_progress)
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
            "inside": inside,
            "peer": peer,
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
        total = process_io()
        if total - self._io_total >= MOVING_DATA:
            self.data_moved_at = now
        self._io_total = total

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
        key = (wait, id(outermost_library_frame(frame)), issued) if wait is not None else None
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

    def _write_sealed(self, path: str, text: str) -> None:
        """A file of this rank's beside its reports (its slow-rank evidence), signed with its key as they are."""
        write_new(path, self._seal.sign(text) if self._seal is not None else text)

    def note_failure(self, error: BaseException) -> None:
        """The rank's code raised ``error``: its record (:class:`~paijob.runtime.watch.folder.WorkerError`:
        Python's last line, the script's line, whether it is a peer's knock-on), signed with this process's
        key, beside the reports, for the launcher to read instead of the traceback's text; and the error on
        the last report (where the rank was while it ran). Why at once: torch's own process-group timeout
        ends a ``mp.spawn`` child in milliseconds, and its node's watch needs to know it timed out *waiting*
        to name the rank that never arrived, on every node. Called from the failing thread; never raises."""
        line = error_line(error)
        record = WorkerError(rank=self.rank, pid=os.getpid(), start_time=self.start_time,
                             error=line[:MAX_ERROR + MAX_TYPE], where=error_where(error)[:MAX_WHERE],
                             consequence=is_consequence(error), time=time.time())
        text = record.to_json()
        with contextlib.suppress(Exception):  # the watch must never break the worker
            write_new(error_path(os.path.dirname(self.path), self.rank),
                      self._seal.sign(text) if self._seal is not None else text)
        self.error = line[:MAX_ERROR]
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


# -- the last collectives, when the agent asks (paijob.runtime.watch.node.recorder) -------------------


def watch_forked_child(folder: str, interval: float) -> None:
    """In a process forked from a watched worker (a DataLoader worker): a thread that writes its
    main thread's stack to ``fork<pid>.json`` once per ``interval``, so a rank that waits for it
    can show where it is without a signal. Threads do not survive a fork; this one is new."""
    pid = os.getpid()
    main = threading.main_thread()
    path = fork_path(folder, pid)
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


def until_the_next_slot(now: float, interval: float) -> float:
    """Seconds to the next multiple of ``interval`` on the wall clock. Every rank on every node samples on the
    same slots (their clocks agree to well under a sample), so the ranks read their flight recorders within
    milliseconds of each other (:meth:`~paijob.runtime.watch.evidence.Evidence.due`): at hundreds of
    collectives a second, what each rank's recorder still holds then overlaps the others' (issue 53)."""
    return interval - (now % interval) if interval > 0 else 0.0


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
