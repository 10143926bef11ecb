"""The recipe's process group: who this rank is, the flags all ranks agree on, and leaving it.

Under ``paijob-runtime`` (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
PAIJOB_BACKEND in the environment) the process group is initialised from the environment;
without RANK the recipe is a plain single process and every collective here is a no-op.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from paijob.common import contract


@dataclass
class DistInfo:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(env: dict[str, str] | None = None) -> DistInfo:
    environ = dict(os.environ if env is None else env)
    rank = int(environ.get("RANK", "0") or 0)
    world = int(environ.get("WORLD_SIZE", "1") or 1) if "RANK" in environ else 1
    local_rank = int(environ.get("LOCAL_RANK", str(rank)) or 0)
    local_world = int(environ.get("LOCAL_WORLD_SIZE", str(world)) or 1)
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    info = DistInfo(rank, local_rank, world, local_world, device)
    if info.distributed and not dist.is_initialized():
        backend = environ.get(contract.BACKEND) or ("nccl" if device.type == "cuda" else "gloo")
        kwargs: dict[str, Any] = {"backend": backend, "init_method": "env://",
                                  "rank": rank, "world_size": world}
        if backend == "nccl":
            kwargs["device_id"] = device
        dist.init_process_group(**kwargs)
    return info


def all_max(flag: bool, info: DistInfo) -> bool:
    return all_max_flags((flag,), info)[0]


def all_max_flags(flags: tuple[bool, ...], info: DistInfo) -> tuple[bool, ...]:
    """Each flag, true when it is true on any rank (one all-reduce for all of them)."""
    if not info.distributed:
        return flags
    tensor = torch.tensor([1.0 if flag else 0.0 for flag in flags], device=info.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tuple(bool(value > 0) for value in tensor.tolist())


def all_min_flag(flag: bool, info: DistInfo) -> bool:
    tensor = torch.tensor([1.0 if flag else 0.0], device=info.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return bool(tensor.item() > 0)


# Process groups this process has left, kept until the process ends: see leave_process_group.
_LEFT_GROUPS: list[object] = []


def leave_process_group() -> None:
    """End the process group without letting Python free it while the GIL is held.

    The last owner of a gloo group joins the group's worker threads in its destructor, and
    a worker may still be freeing a finished collective whose Python tensors need the GIL:
    both then wait forever. After ``destroy_process_group`` that last owner is DDP's reducer,
    freed under the GIL when ``train``'s frame goes. Measured with torch 2.4.1: the 2-rank
    recipe hung there in 1 run of 36 (gdb: the main thread in ``~ProcessGroupGloo`` joining,
    a worker in ``~AsyncBarrierWork`` waiting for the GIL); pytorch/pytorch#56297 is the
    class of bug. Keeping a reference here means the group goes with the process, which
    :func:`paijob.runtime.worker.finish` ends without finalisation.
    """
    world = dist.group.WORLD
    dist.barrier()
    dist.destroy_process_group()
    _LEFT_GROUPS.append(world)
