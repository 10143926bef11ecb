"""What a run holds between its phases: the model in its roles, and what the loop changes.

Set-up makes the :class:`Model` once; :class:`RunState` is where training starts (a resumed
checkpoint's epoch and step) and what each epoch leaves for the summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from paijob.runtime.precision import PrecisionPolicy
from paijob.runtime.recipes.meters import StepTimes, Throughput
from paijob.runtime.recipes.stepper import Stepper


@dataclass
class Model:
    """The model in its roles, and what steps it (the optimizer and scaler apex may have wrapped)."""

    raw: nn.Module  # checkpoints, BatchNorm recalibration, the parameter digest
    policy: PrecisionPolicy
    optimizer: torch.optim.Optimizer
    stepper: Stepper
    base_lr: float
    criterion: nn.Module = field(default_factory=nn.CrossEntropyLoss)
    for_training: nn.Module | None = None  # raw, under DDP and/or torch.compile (see startup.wrap)
    for_eval: nn.Module | None = None  # raw, or the compiled module when there is no DDP

    @property
    def training(self) -> nn.Module:
        return self.raw if self.for_training is None else self.for_training

    @property
    def evaluating(self) -> nn.Module:
        return self.raw if self.for_eval is None else self.for_eval


@dataclass
class RunState:
    """What the loop changes: where training starts, what it measured, what it leaves behind."""

    start_epoch: int = 0
    start_step: int = 0
    resumed_from: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    train_metrics: dict[str, float] = field(default_factory=dict)
    eval_metrics: dict[str, float] = field(default_factory=dict)
    last_checkpoint: Path | None = None
    exit_code: int = 0
    status: str = "completed"  # | preempted | diverged
    throughput: Throughput = field(default_factory=Throughput)
    step_times: StepTimes = field(default_factory=StepTimes)
