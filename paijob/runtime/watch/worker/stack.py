"""What a worker's stack says: where its main thread is, what it waits in, which thread trains.

Read by the sampler (:mod:`paijob.runtime.watch.worker.sampler`) from its own thread, once a sample, with
``sys._current_frames()``; nothing here changes the program. No torch import: torch's files are recognised
by their paths.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from types import FrameType
from typing import Any

from paijob.runtime.watch.frames import is_library

MAX_FRAMES = 60  # deepest stack kept (innermost frames); recursion would make it endless
_C10D = f"torch{os.sep}distributed{os.sep}distributed_c10d.py"
_DATALOADER = f"torch{os.sep}utils{os.sep}data{os.sep}dataloader.py"
_AUTOGRAD = (f"torch{os.sep}autograd{os.sep}", f"torch{os.sep}_tensor.py")
_DDP = f"torch{os.sep}nn{os.sep}parallel{os.sep}distributed.py"
_DIST_UTILS = f"torch{os.sep}distributed{os.sep}utils.py"
_RENDEZVOUS = (f"torch{os.sep}distributed{os.sep}rendezvous.py",
               f"torch{os.sep}distributed{os.sep}elastic{os.sep}")


Frame = tuple[str, int, str]  # file, line, function


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
    wait, collective, _at = _wait_at(frames)
    return wait, collective


def _wait_at(frames: list[Frame]) -> tuple[str | None, bool, int]:
    """:func:`classify_wait`, and the index in ``frames`` of the frame that says so (-1: none)."""
    for index, (filename, _line, function) in enumerate(frames):  # outermost first: the API the user called
        if filename.endswith(_C10D):
            return function, True, index
    for index, (filename, _line, function) in enumerate(frames):
        if filename.endswith(_DIST_UTILS) and "broadcast" in function:
            return "broadcast (DDP's parameter sync)", True, index
        if filename.endswith(_DDP):
            return "DistributedDataParallel " + function.strip("_"), True, index
        if any(part in filename for part in _AUTOGRAD) and function == "backward":
            return "backward", True, index
        if filename.endswith(_DATALOADER):
            return "DataLoader", False, index
        if any(part in filename for part in _RENDEZVOUS):
            return "rendezvous", True, index
    return None, False, -1


def own_code_inside(frames: list[Frame]) -> str | None:
    """The wait a stack is in (:func:`classify_wait`: a collective, ``backward``, DDP's sync) when the script's
    own code runs further in, under that call's frames: pickling in an object collective (``__getstate__``,
    ``__reduce__`` inside ``all_gather_object``), a custom autograd function's ``backward``, a hook. The rank
    then does its own work, not waiting for the others (a long wait there is a healthy checkpoint writer, or
    the rank's own hang); None: it waits, or is in no such call."""
    wait, collective, at = _wait_at(frames)
    if not collective or at < 0:
        return None
    return wait if any(not is_library(str(frame[0])) for frame in frames[at + 1:]) else None


# A blocking point-to-point call, and its arguments naming the other rank: global, then within ``group``.
_P2P_PEER = {"send": ("dst", "group_dst"), "recv": ("src", "group_src")}


def p2p_peer(frame: FrameType | None) -> int | None:
    """The global rank a blocking ``send`` or ``recv`` waits for (its ``dst`` or ``src``), read from that
    call's own frame: the other half of the pair. Why from the stack: gloo's flight recorder keeps no
    point-to-point entries (torch 2.4 to 2.13), and a pipeline whose rank skips one ``send`` leaves the ranks
    it feeds waiting in ``recv`` while it waits in a collective. None: not in one, or a ``recv`` from any
    source."""
    call, depth = frame, 0
    while call is not None and not (call.f_code.co_filename.endswith(_C10D) and call.f_code.co_name in _P2P_PEER):
        call, depth = call.f_back, depth + 1  # torch's send and recv call isend and irecv: no send/recv nests
        if depth >= MAX_FRAMES:  # as deep as a stack is read: deep recursion costs a look no more
            return None
    if call is None:
        return None
    global_name, group_name = _P2P_PEER[call.f_code.co_name]
    try:
        values = call.f_locals
        peer = values.get(global_name)
        if isinstance(peer, int) and not isinstance(peer, bool):
            return peer
        in_group = values.get(group_name)
        if not isinstance(in_group, int) or isinstance(in_group, bool):
            return None
        c10d = sys.modules.get("torch.distributed.distributed_c10d")
        group = values.get("group")
        if group is None:
            return in_group  # the default group: its ranks are the global ranks
        found = c10d.get_global_rank(group, in_group)  # type: ignore[union-attr]
        return found if isinstance(found, int) else None
    except Exception:  # noqa: BLE001 - another torch release: say less, never fail
        return None


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


def walk(frame: FrameType | None) -> list[tuple[FrameType, int]]:
    found: list[tuple[FrameType, int]] = []
    while frame is not None and len(found) < MAX_FRAMES:
        found.append((frame, frame.f_lineno or 0))
        frame = frame.f_back
    return found


def outermost_library_frame(frame: FrameType | None) -> FrameType | None:
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


def error_line(error: BaseException) -> str:
    """``RuntimeError: ... Timed out waiting 15000ms ...``: what Python prints after the traceback,
    its lines joined into one."""
    text = "".join(traceback.format_exception_only(type(error), error))
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def error_where(error: BaseException) -> str:
    """``train.py:42 in step``: the script's innermost line in ``error``'s traceback (the innermost line
    when no line is the script's); "" without a traceback."""
    frames = traceback.extract_tb(error.__traceback__)
    user = [f for f in frames if not is_library(f.filename)]
    found = (user or frames)[-1:] if frames else []
    return "".join(f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}" for f in found)
