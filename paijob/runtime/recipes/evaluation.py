"""What an epoch's end measures: its sums reduced across ranks, BatchNorm recalibrated, the test set.

Evaluation uses the training precision, normalisation and (recalibrated when still young)
BatchNorm statistics, and batches of the training shape, so a compiled model compiles once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn

from paijob.runtime.precision import PrecisionPolicy
from paijob.runtime.recipes import batchnorm
from paijob.runtime.recipes.config import Recipe
from paijob.runtime.recipes.data import EvalPlan, TrainPlan, apply_crop_flip
from paijob.runtime.recipes.distributed import DistInfo
from paijob.runtime.recipes.feed import Feed


def reduce_metrics(loss_sum: torch.Tensor, correct: torch.Tensor, seen: int | torch.Tensor,
                   info: DistInfo) -> dict[str, float]:
    """The one host read of an epoch's (or an evaluation's) device-side sums."""
    count = seen.double() if isinstance(seen, torch.Tensor) else torch.tensor(
        float(seen), device=loss_sum.device, dtype=torch.float64)
    packed = torch.stack([loss_sum.double(), correct.double(), count])
    if info.distributed:
        dist.all_reduce(packed)
    total = max(packed[2].item(), 1.0)
    return {"loss": packed[0].item() / total, "top1": packed[1].item() / total,
            "samples": int(packed[2].item())}


@torch.no_grad()
def evaluate(model: nn.Module, feed: Feed, plan: EvalPlan, prepare: Callable[[torch.Tensor], torch.Tensor],
             policy: PrecisionPolicy, criterion: nn.Module, info: DistInfo) -> dict[str, float]:
    """Loss and top-1 over the whole test set, sharded by its own (strided) split, all-reduced.

    Batches have the training batch's shape (the tail padded, padding weighted 0), the input
    is prepared by the training step's own ``prepare`` and run under the same precision.
    """
    model.eval()
    device = info.device
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device)
    seen = torch.zeros((), device=device)
    for images, labels, valid in feed.eval(plan):
        with policy.autocast():
            output = model(prepare(images)).float()
        per_sample = nn.functional.cross_entropy(output, labels, reduction="none")
        loss_sum += (per_sample * valid).sum()
        correct += ((output.argmax(1) == labels).float() * valid).sum()
        seen += valid.sum()
    _ = criterion  # the recipes' criterion is plain cross-entropy, taken per sample here
    return reduce_metrics(loss_sum, correct, seen, info)


def recalibrate_batchnorm(model: nn.Module, feed: Feed, plan: TrainPlan, recipe: Recipe,
                          prepare: Callable[[torch.Tensor], torch.Tensor], policy: PrecisionPolicy,
                          in_memory: bool, info: DistInfo, max_batches: int = 50) -> int:
    """Exact BatchNorm statistics from this epoch's first training batches (see ``batchnorm``)."""
    def inputs() -> Any:
        for batch in feed.train(TrainPlan(plan.indices[:max_batches], plan.crop_y[:max_batches],
                                           plan.crop_x[:max_batches], plan.flip[:max_batches])):
            images = batch[0]
            if in_memory:
                images = apply_crop_flip(images, batch[2], batch[3], batch[4], recipe.crop_pad)
            yield prepare(images)

    def forward(x: torch.Tensor) -> Any:
        with policy.autocast():
            return model(x)

    return batchnorm.recalibrate(model, inputs(), forward, distributed=info.distributed)
