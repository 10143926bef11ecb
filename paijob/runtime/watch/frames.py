"""What a frame of a stack stands for: installed code or the script's own, and a sample's activity (pure).

Both sides read stacks: the sampler inside a worker (:mod:`paijob.runtime.watch.worker`) counts each sample's
activity for the slow-rank doctor, and the doctors on the node tell the script's own lines from the library
calls it made (the hang verdict's culprit frames, the mismatch account's lines). One definition of "the
user's line" for all of them: :func:`is_library`.

The activities, as the slow-rank doctor counts them (:mod:`paijob.runtime.watch.slow.verdict` says not only
which rank the others wait for but what that rank does meanwhile):

* ``collective``: inside a ``torch.distributed`` call (waiting for the other ranks, on gloo), or idle inside
  ``loss.backward()`` (the main thread uses no CPU there while DDP's reducer waits for the gradients'
  all-reduces: waiting, not computing);
* ``data``: inside torch's data loading (``torch/utils/data``: a DataLoader's ``next()``, a
  Dataset's ``__getitem__`` run in the main thread, a wait for a loader worker);
* ``host``: host-side work that one rank may do alone: saving or loading (``torch.save``),
  logging, or a function of the script named like an evaluation, a checkpoint or a report;
* ``compute``: autograd, ``torch.nn`` modules, an optimizer, or the script's own code while the
  thread uses the CPU;
* ``other``: anything else (the script's own code, idle: a sleep, a blocking read).

No torch import.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from paijob.common.records import ACTIVITY_NAMES

# Library code a stack passes through; the first frame outside it is "the user's line".
_LIBRARY_PARTS = (
    f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}", "<frozen ",
    f"{os.sep}paijob{os.sep}runtime{os.sep}",
)
_STDLIB = os.path.dirname(os.__file__)


def is_library(filename: str) -> bool:
    """Whether a frame's file is installed code (torch, the standard library, paijob's runtime)."""
    return filename.startswith(_STDLIB) or any(part in filename for part in _LIBRARY_PARTS)


ACTIVITIES = ACTIVITY_NAMES  # one list: the slow-rank record (common.records) checks the names it carries

_C10D = f"torch{os.sep}distributed{os.sep}distributed_c10d.py"
_DATA = f"torch{os.sep}utils{os.sep}data{os.sep}"
_TENSOR = f"torch{os.sep}_tensor.py"  # Tensor.backward: the script's loss.backward()
_HOST_FILES = (f"torch{os.sep}serialization.py", f"{os.sep}logging{os.sep}", f"torch{os.sep}utils{os.sep}tensorboard")
_COMPUTE_FILES = (f"torch{os.sep}autograd{os.sep}", f"torch{os.sep}nn{os.sep}", f"torch{os.sep}optim{os.sep}",
                  f"torch{os.sep}_tensor.py", f"torch{os.sep}functional.py")
# a function of the script that does host-side work (evaluate, validate, save_checkpoint, log_metrics...)
_HOST_NAME = re.compile(r"(?:^|_)(?:eval|evaluate|evaluation|validate|validation|val|test|checkpoint|save|"
                        r"log|report|summary|summarise|summarize)(?:_|$)", re.IGNORECASE)

Frame = Sequence[Any]  # (file, line, function)


def activity_of(frames: Sequence[Frame], *, busy: bool, is_library: Callable[[str], bool]) -> str:
    """The activity (one of :data:`ACTIVITIES`) of a main-thread stack, outermost frame first."""
    kinds = _kinds(frames, is_library)
    for kind in ("collective", "data"):
        if kind in kinds:
            return kind
    if "host" in kinds or any(_host_name(str(f[2])) and not is_library(str(f[0])) for f in frames):
        return "host"
    if not busy and any(str(f[0]).endswith(_TENSOR) and f[2] == "backward" for f in frames):
        return "collective"  # idle inside backward: DDP's reducer waits there for the gradients' all-reduces
    return "compute" if "compute" in kinds or (busy and frames) else "other"


def _kinds(frames: Sequence[Frame], is_library: Callable[[str], bool]) -> set[str]:
    """The activities a stack's files stand for; not a collective where the script's own code runs under the
    collective's frames (``__getstate__`` pickling rank 0's checkpoint inside ``all_gather_object``): the rank
    works there, it does not wait for the others, and counted as a collective its phase read "works in the
    DataLoader" (issue 53)."""
    kinds = [_file_kind(str(frame[0])) for frame in frames]
    if "collective" in kinds and any(not is_library(str(frame[0])) for frame in frames[kinds.index("collective"):]):
        return set(kinds) - {"collective"}
    return set(kinds)


@functools.lru_cache(maxsize=4096)
def _file_kind(file: str) -> str:
    """The activity a frame in ``file`` stands for, or ``""`` (once per file: a look costs microseconds)."""
    if file.endswith(_C10D):
        return "collective"
    if _DATA in file:
        return "data"
    if any(part in file for part in _HOST_FILES):
        return "host"
    return "compute" if any(part in file for part in _COMPUTE_FILES) else ""


@functools.lru_cache(maxsize=4096)
def _host_name(function: str) -> bool:
    """Whether a function's name says host-side work (once per name)."""
    return _HOST_NAME.search(function) is not None


def line_of(frames: Sequence[Frame], activity: str, *, is_library: Callable[[str], bool]) -> list[Any] | None:
    """``[call, "train.py:72", function]``: the script's line that stands for ``activity`` and the call it
    made there (``next``, ``all_reduce``; its own function where it made none); None: no line of the
    script on the stack. For data, the script's last line before torch's data loading (the loop's
    ``next()``), not a Dataset's ``__getitem__`` inside it; otherwise the innermost line of the script.
    ``function``: the script's function that line is in (a loop's lines are counted as one place)."""
    user = [i for i, frame in enumerate(frames) if not is_library(str(frame[0]))]
    if not user:
        return None
    index = user[-1]
    if activity == "data":
        first_data = next((i for i, f in enumerate(frames) if _DATA in str(f[0])), len(frames))
        before = [i for i in user if i < first_data]
        index = before[-1] if before else index
    file, line, function = frames[index][:3]
    call = _call_made(frames, index, activity)
    return [call.strip("_") or str(function), f"{os.path.basename(str(file))}:{line}", str(function)]


def _call_made(frames: Sequence[Frame], index: int, activity: str) -> str:
    """The call the frame at ``index`` made (its own function where it made none); for a collective
    the ``torch.distributed`` call, not a decorator around it (c10d_logger's ``wrapper``)."""
    call = str(frames[index + 1][2]) if index + 1 < len(frames) else str(frames[index][2])
    if activity == "collective":
        call = next((str(f[2]) for f in frames[index + 1:] if str(f[0]).endswith(_C10D)), call)
    return call



