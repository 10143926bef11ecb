"""What a worker's stack says (paijob.runtime.watch.worker.stack): the wait it is in, and whether the script's
own code runs under that call's frames (pickling in an object collective, a custom backward), which is the
rank's own work, not a wait on the others (issue 53)."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from paijob.runtime.watch.worker.stack import classify_wait, main_stack, own_code_inside, p2p_peer

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


# torch's send and recv as far as the sampler reads them: their own frames in distributed_c10d.py, the other
# rank given globally (dst/src) or within a group (group_dst/group_src); ``look`` stands for the sampler
FAKE_C10D = """
def recv(tensor, src=None, group=None, tag=0, group_src=None):
    return look()

def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    return look()

def all_reduce(tensor, group=None):
    return look()

def wrapper(call, **kwargs):
    return call(None, **kwargs)
"""


def fake_c10d() -> dict[str, Any]:
    names: dict[str, Any] = {"look": lambda: p2p_peer(sys._getframe(1))}  # noqa: SLF001
    exec(compile(FAKE_C10D, C10D, "exec"), names)  # noqa: S102 - test code, compiled under torch's file name
    return names


@pytest.mark.parametrize(("call", "kwargs", "peer"), [
    ("recv", {"src": 2}, 2),
    ("send", {"dst": 3}, 3),
    ("recv", {"group_src": 1}, 1),  # the default group: its ranks are global
    ("send", {"group_dst": 1, "group": (4, 5)}, 5),  # rank 1 of a group of global ranks 4 and 5
    ("recv", {}, None),  # from any source
    ("recv", {"src": True}, None),
    ("send", {"group_dst": "1"}, None),
    ("all_reduce", {}, None),
])
def test_the_other_rank_of_a_blocking_send_or_recv_is_read_from_its_frame(monkeypatch, call, kwargs, peer):
    """Issue 53: gloo's flight recorder keeps no send or recv, so the sampler reads the other rank of the
    call the script made from that call's own frame; a group rank goes through torch's own mapping."""
    fake = type(sys)("fake_c10d")
    fake.get_global_rank = lambda group, rank: group[rank]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch.distributed.distributed_c10d", fake)
    names = fake_c10d()
    assert names["wrapper"](names[call], **kwargs) == peer  # the outermost send/recv: the script's call
    assert p2p_peer(None) is None


def test_a_group_rank_torch_cannot_map_says_nothing(monkeypatch):
    fake = type(sys)("fake_c10d")
    fake.get_global_rank = lambda group, rank: 1 / 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch.distributed.distributed_c10d", fake)
    names = fake_c10d()
    assert names["send"](None, group_dst=1, group=(4, 5)) is None
