"""What a worker's stack says (paijob.runtime.watch.worker.stack): the wait it is in, and whether the script's
own code runs under that call's frames (pickling in an object collective, a custom backward), which is the
rank's own work, not a wait on the others (issue 53)."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from paijob.runtime.watch.worker.stack import classify_wait, main_stack, own_code_inside

TORCH = os.path.join(os.sep, "venv", "lib", "site-packages", "torch")
C10D = os.path.join(TORCH, "distributed", "distributed_c10d.py")
TENSOR = os.path.join(TORCH, "_tensor.py")
FUNCTION = os.path.join(TORCH, "autograd", "function.py")
THREADING = os.path.join(os.path.dirname(os.__file__), "threading.py")
TRAIN = os.path.join(os.sep, "job", "train.py")


@pytest.mark.parametrize(("frames", "wait", "inside"), [
    ([[TRAIN, 40, "<module>"], [C10D, 2900, "all_gather_object"], [C10D, 2700, "_object_to_tensor"],
      [TRAIN, 21, "__reduce__"], [THREADING, 600, "wait"]], "all_gather_object", "all_gather_object"),
    ([[TRAIN, 40, "<module>"], [TENSOR, 581, "backward"], [FUNCTION, 307, "apply"], [TRAIN, 12, "backward"]],
     "backward", "backward"),
    ([[TRAIN, 40, "<module>"], [C10D, 3252, "all_reduce"], [THREADING, 600, "wait"]], "all_reduce", None),
    ([[TRAIN, 40, "<module>"], [TRAIN, 30, "my_all_reduce"], [C10D, 3252, "all_reduce"]], "all_reduce", None),
    ([[TRAIN, 40, "<module>"], [TRAIN, 21, "__reduce__"]], None, None),  # its own code, no call around it
    ([[TRAIN, 40, "<module>"], [os.path.join(TORCH, "utils", "data", "dataloader.py"), 700, "__next__"],
      [TRAIN, 9, "__getitem__"]], "DataLoader", None),  # a Dataset's own code: data loading, not a collective
])
def test_the_scripts_own_code_under_a_call_is_told_from_a_wait(frames: list[Any], wait: str | None,
                                                              inside: str | None):
    assert classify_wait(frames)[0] == wait
    assert own_code_inside(frames) == inside


def test_pickling_inside_a_real_all_gather_object_is_the_ranks_own_code(tmp_path):
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    seen: list[list[Any]] = []

    class Checkpoint:
        def __reduce__(self):  # what an async checkpoint's __getstate__ would wait in
            seen.append(main_stack(sys._getframe()))  # noqa: SLF001 - the stack the sampler would read
            return (dict, ())

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        dist.all_gather_object([None], Checkpoint())
    finally:
        dist.destroy_process_group()
    assert seen and own_code_inside(seen[0]) == "all_gather_object", seen
