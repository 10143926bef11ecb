"""The divergence guard: a recipe never reports success on a run whose numbers went non-finite.

fp16 that trained NaN and exited 0 with "completed" (issue 32) is what this prevents. The run
stops, with exit code :data:`paijob.common.exitcodes.DIVERGED` and one line naming the step, the
precision and what to try, when

* the training loss was non-finite (inf or NaN) for ``limit`` consecutive steps
  (``--max-nonfinite-steps``, default :data:`DEFAULT_LIMIT`); an isolated non-finite loss is
  what a loss scaler skips, a run of them is a model that no longer trains;
* fp16's dynamic loss scale collapsed below :data:`MIN_LOSS_SCALE`: even unscaled fp16
  gradients overflow (DeepSpeed stops at the same floor);
* a parameter or floating buffer (BatchNorm statistics) of the model is non-finite at an
  epoch's end, however few steps the run had. This is checked before the epoch's checkpoint,
  so no non-finite checkpoint is written for a retry to resume from.

The guard adds no host sync per step: each step's loss is copied into a small device buffer
(one kernel), and :meth:`DivergenceGuard.check` reads the buffered losses in one transfer at the
log interval, where the step line reads the loss anyway. A run of non-finite steps is found at
the next interval, at most ``--log-interval`` steps late.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from paijob.common.recipe_options import MAX_NONFINITE_STEPS

if TYPE_CHECKING:  # torch is imported where it is used
    import torch

DEFAULT_LIMIT = MAX_NONFINITE_STEPS  # consecutive non-finite losses that stop a run (the option's default)
MIN_LOSS_SCALE = 1.0  # a dynamic fp16 loss scale below this has collapsed
CAPACITY = 256  # losses buffered on the device between reads (a longer interval reads early)
RECORDED = 100  # non-finite steps listed in the summary (all are counted)


@dataclass(frozen=True)
class Divergence:
    """Where and why a run diverged; epoch and step count from 1, as in the step lines."""

    epoch: int
    step: int
    reason: str


class DivergenceGuard:
    """Non-finite training losses, counted without reading the device every step."""

    def __init__(self, limit: int, device: torch.device) -> None:
        import torch

        self.limit = max(1, limit)
        self.buffer = torch.empty(CAPACITY, device=device)
        self.pending: list[tuple[int, int]] = []  # (epoch, step) of each buffered loss
        self.consecutive = 0
        self.longest = 0
        self.count = 0
        self.steps: list[list[int]] = []  # the first RECORDED non-finite (epoch, step)
        self.tripped: Divergence | None = None

    def record(self, loss: torch.Tensor, epoch: int, step: int) -> None:
        """Keep a step's loss (a device-to-device copy); ``epoch`` and ``step`` count from 1."""
        if len(self.pending) == CAPACITY:
            self.check()
        self.buffer[len(self.pending)].copy_(loss.detach().reshape(()))
        self.pending.append((epoch, step))

    def check(self) -> Divergence | None:
        """Read the buffered losses (one transfer); the divergence found so far, if any."""
        if self.pending:
            values = self.buffer[: len(self.pending)].tolist()
            for (epoch, step), value in zip(self.pending, values, strict=True):
                if math.isfinite(value):
                    self.consecutive = 0
                    continue
                self.consecutive += 1
                self.count += 1
                self.longest = max(self.longest, self.consecutive)
                if len(self.steps) < RECORDED:
                    self.steps.append([epoch, step])
                if self.consecutive >= self.limit and self.tripped is None:
                    self.tripped = Divergence(epoch, step, f"the loss was non-finite for {self.consecutive} "
                                                           "consecutive steps")
            self.pending.clear()
        return self.tripped

    def check_scale(self, scale: float | None, epoch: int, step: int) -> Divergence | None:
        """A dynamic loss scale (None: none) that fell below MIN_LOSS_SCALE trips the guard."""
        if scale is not None and scale < MIN_LOSS_SCALE and self.tripped is None:
            self.tripped = Divergence(epoch, step, f"the fp16 loss scale collapsed to {scale:g} (gradients "
                                                   "overflow even unscaled)")
        return self.tripped

    def check_model(self, model: torch.nn.Module, epoch: int, step: int) -> Divergence | None:
        """Non-finite weights or BatchNorm statistics trip the guard (one host read)."""
        import torch

        tensors = [t for t in itertools.chain(model.parameters(), model.buffers()) if t.is_floating_point()]
        if tensors and not bool(torch.stack([torch.isfinite(t).all() for t in tensors]).all()):
            if self.tripped is None:
                self.tripped = Divergence(epoch, step, "the model's weights are no longer finite")
        return self.tripped

    def trip(self, divergence: Divergence) -> None:
        """Another rank diverged: stop here too (the first reason found is kept)."""
        if self.tripped is None:
            self.tripped = divergence

    def summary(self, loss_scale: float | None) -> dict[str, Any]:
        """What the summary JSON records: counts, the first non-finite steps, the verdict."""
        tripped = self.tripped
        return {
            "steps": self.count,
            "first_steps": self.steps,
            "longest_run": self.longest,
            "limit": self.limit,
            "loss_scale": loss_scale,
            "diverged": None if tripped is None else {"epoch": tripped.epoch, "step": tripped.step,
                                                      "reason": tripped.reason},
        }


def advice(compute: str, cast_model: bool, scaled: bool) -> str:
    """What to try after a divergence under this precision policy."""
    if cast_model:
        return "try --precision O2 (fp32 master weights) or bf16, or a lower --lr"
    if compute == "fp16":
        return ("try --precision bf16 (fp32's exponent range, no loss scale), a lower --lr or a longer warm-up"
                if scaled else "try a dynamic --loss-scale, --precision bf16 or a lower --lr")
    if compute == "bf16":
        return "try a lower --lr or a longer warm-up, or --precision fp32"
    return "try a lower --lr or a longer warm-up"


def divergence_line(divergence: Divergence, precision: str, detail: str, what_to_try: str, code: int) -> str:
    """The one line a diverged run prints (rank 0, stderr)."""
    how = f" ({detail})" if detail and detail != precision else ""
    return (f"paijob: diverged at epoch {divergence.epoch} step {divergence.step}: {divergence.reason} "
            f"under --precision {precision}{how}; {what_to_try}; exit {code}")

