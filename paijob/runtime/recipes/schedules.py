"""The learning-rate schedules a recipe's ``lr_at`` picks from (the step's rate, pure)."""

from __future__ import annotations


def step_decay_with_warmup(base_lr: float, epoch: int, step: int, steps: int,
                           warmup_epochs: int = 5) -> float:
    """The tutorials' ImageNet schedule: ×0.1 every 30 epochs (and at 80), linear warmup for 5."""
    factor = epoch // 30
    if epoch >= 80:
        factor += 1
    lr = base_lr * (0.1**factor)
    if epoch < warmup_epochs:
        lr = lr * float(1 + step + epoch * steps) / (warmup_epochs * max(steps, 1))
    return lr


def constant_lr(base_lr: float, epoch: int, step: int, steps: int) -> float:
    return base_lr

