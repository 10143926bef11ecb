"""What the training loop measures: an epoch's loss and accuracy, images per second, graphs compiled.

Losses and accuracy are summed in device tensors and read once, at the epoch's end, so that
no training step waits for the device.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

# Steady-state throughput leaves out each epoch's first steps: loader start-up and DDP's bucket
# rebuild land there, and on a short benchmark epoch they would outweigh the loop itself.
STEADY_AFTER_STEPS = 2


class EpochMeter:
    """An epoch's loss and accuracy, summed on the device (read once at its end), and its clock."""

    def __init__(self, device: torch.device) -> None:
        self.loss_sum = torch.zeros((), device=device)
        self.correct = torch.zeros((), device=device, dtype=torch.int64)
        self.seen = 0
        self.start = time.perf_counter()
        self.steady_start: float | None = None
        self.seen_before_steady = 0

    def add(self, loss: torch.Tensor, output: torch.Tensor, labels: torch.Tensor) -> None:
        size = labels.shape[0]
        self.seen += size
        self.loss_sum += loss.detach().float() * size
        self.correct += (output.detach().argmax(1) == labels).sum()

    def start_steady(self, device: torch.device) -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        self.steady_start, self.seen_before_steady = time.perf_counter(), self.seen

    def finish(self, device: torch.device) -> float:
        """The epoch's end, once the device has done its work."""
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()


@dataclass
class Throughput:
    """Images and seconds of the timed training loops, whole and steady (see ``STEADY_AFTER_STEPS``)."""

    images: int = 0
    seconds: float = 0.0
    steady_images: int = 0
    steady_seconds: float = 0.0

    def add(self, meter: EpochMeter, end: float, world_size: int) -> float:
        """Count an epoch that ended at ``end``; its length in seconds."""
        seconds = end - meter.start
        self.seconds += seconds
        self.images += meter.seen * world_size
        if meter.steady_start is not None and meter.seen > meter.seen_before_steady:
            self.steady_seconds += end - meter.steady_start
            self.steady_images += (meter.seen - meter.seen_before_steady) * world_size
        return seconds

    def rates(self) -> tuple[float, float | None]:
        whole = self.images / self.seconds if self.seconds > 0 else 0.0
        steady = self.steady_images / self.steady_seconds if self.steady_seconds > 0 else None
        return whole, steady


MAX_STEP_TIMES = 100_000  # steps timed per rank (the first ones); 800 kB at most


@dataclass
class StepTimes:
    """This rank's training steps, each timed on the host from the end of the one before (an
    epoch's first from the epoch's start): the summary's per-rank percentiles. One clock read and
    one append a step."""

    seconds: list[float] = field(default_factory=list)
    last: float | None = None

    def begin(self, now: float) -> None:
        self.last = now

    def mark(self, now: float) -> None:
        if self.last is not None and len(self.seconds) < MAX_STEP_TIMES:
            self.seconds.append(now - self.last)
        self.last = now

    def percentiles(self) -> dict[str, float | int]:
        """``{"steps", "p50", "p90", "p99", "max"}`` in seconds (nearest rank); ``{"steps": 0}``: none."""
        ordered = sorted(self.seconds)
        if not ordered:
            return {"steps": 0}
        found: dict[str, float | int] = {"steps": len(ordered)}
        for name, share in (("p50", 0.50), ("p90", 0.90), ("p99", 0.99)):
            found[name] = round(ordered[max(0, math.ceil(share * len(ordered)) - 1)], 6)
        found["max"] = round(ordered[-1], 6)
        return found


class CompiledGraphs:
    """How many graphs torch.compile made since the last call (0 = nothing recompiled)."""

    def __init__(self, enabled: bool) -> None:
        self.counters: Any = None
        if enabled:
            from torch._dynamo.utils import counters

            self.counters = counters
        self.seen = self._total()

    def _total(self) -> int:
        return int(self.counters["stats"]["unique_graphs"]) if self.counters is not None else 0

    def new(self) -> int:
        total = self._total()
        fresh, self.seen = total - self.seen, total
        return fresh
