"""``apex.parallel`` on native torch: DistributedDataParallel, SyncBatchNorm, convert_syncbn_model."""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
import torch.distributed as dist

from paijob.common import contract
from paijob.runtime.precision import notice

__paijob_shim__ = True
log = logging.getLogger(__name__)


def _sum_allreduce_hook(state: Any, bucket: Any) -> Any:
    """DDP comm hook for apex's ``gradient_average=False``: sum instead of mean."""
    group = state if state is not None else dist.group.WORLD
    future = dist.all_reduce(bucket.buffer(), group=group, async_op=True).get_future()
    return future.then(lambda fut: fut.value()[0])


class DistributedDataParallel(torch.nn.parallel.DistributedDataParallel):
    """apex.parallel.DistributedDataParallel's signature on ``torch.nn.parallel.DistributedDataParallel``.

    apex assumed one GPU per process and no ``device_ids``: on GPU the device
    is the module's own (normally ``cuda:LOCAL_RANK`` after
    ``torch.cuda.set_device``), else ``LOCAL_RANK``; on CPU (gloo) none.
    ``delay_allreduce`` only changed *when* apex reduced, not the result, so
    torch's overlapped bucketed all-reduce is kept. ``gradient_average=False``
    installs a summing comm hook. apex's tuning knobs (message_size,
    num_allreduce_streams, allreduce_always_fp32, ...) have no torch equivalent
    and are accepted and ignored.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        message_size: int = 10_000_000,
        delay_allreduce: bool = False,
        shared_param: Any = None,
        allreduce_trigger_params: Any = None,
        retain_allreduce_buffers: bool = False,
        allreduce_always_fp32: bool = False,
        num_allreduce_streams: int = 1,
        allreduce_communicators: Any = None,
        gradient_average: bool = True,
        gradient_predivide_factor: float = 1.0,
        gradient_average_split_factor: Any = None,
        prof: bool = False,
        **torch_kwargs: Any,
    ) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "apex.parallel.DistributedDataParallel needs torch.distributed.init_process_group() "
                "first (paijob-runtime sets RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT; use init_method='env://')"
            )
        device = next((p.device for p in module.parameters()), None)
        device_ids: list[int] | None = None
        if device is not None and device.type == "cuda":
            device_ids = [device.index if device.index is not None else torch.cuda.current_device()]
        elif device is None and torch.cuda.is_available():
            device_ids = [int(os.environ.get("LOCAL_RANK", "0"))]
        torch_kwargs.setdefault("device_ids", device_ids)
        if os.environ.get(contract.DDP_FIND_UNUSED, "") not in ("", "0"):
            torch_kwargs.setdefault("find_unused_parameters", True)
        super().__init__(module, **torch_kwargs)
        self.delay_allreduce = delay_allreduce
        self.gradient_average = gradient_average
        if not gradient_average:
            self.register_comm_hook(None, _sum_allreduce_hook)


class SyncBatchNorm(torch.nn.SyncBatchNorm):
    """apex.parallel.SyncBatchNorm's signature on ``torch.nn.SyncBatchNorm``."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group: Any = None,
        channel_last: bool = False,
        fuse_relu: bool = False,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, process_group)
        if fuse_relu:
            notice("apex SyncBatchNorm(fuse_relu=True) is not fused on native torch; add the ReLU yourself")


def convert_syncbn_model(module: torch.nn.Module, process_group: Any = None, channel_last: bool = False) -> torch.nn.Module:
    """BatchNorm → ``torch.nn.SyncBatchNorm`` on GPU; unchanged on CPU (SyncBatchNorm needs a GPU)."""
    if not torch.cuda.is_available():
        notice("convert_syncbn_model: no GPU, keeping BatchNorm (torch SyncBatchNorm runs on GPU only)")
        return module
    return torch.nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)


__all__ = ["DistributedDataParallel", "SyncBatchNorm", "convert_syncbn_model"]
