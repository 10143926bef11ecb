"""A small DDP script for launch-overhead timing.

Rank 0 writes the wall-clock time at which its first training step completed
to $PROBE_FIRST_STEP_FILE, so the harness can measure start-to-first-step
without parsing logs. It reads only torchrun's variables, so any launcher works.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    dist.init_process_group(backend=os.environ.get("PAIJOB_BACKEND", "gloo"))
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = torch.randn(32, 64)
    for step in range(int(os.environ.get("PROBE_STEPS", "20"))):
        optimizer.zero_grad()
        model(batch).square().mean().backward()
        optimizer.step()
        if step == 0 and dist.get_rank() == 0 and os.environ.get("PROBE_FIRST_STEP_FILE"):
            with open(os.environ["PROBE_FIRST_STEP_FILE"], "w") as handle:
                handle.write(repr(time.time()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Under torchrun this file runs on plain python, whose finalisation sometimes turns a
    # finished DDP run into exit 134; end it as paijob-runtime's workers end (both launchers alike).
    from paijob.runtime.worker import finish

    finish(0)
