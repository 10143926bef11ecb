"""DDP script that crashes one rank on purpose, for failure-latency timing.

Rank $CRASH_RANK writes the wall-clock time to $CRASH_FILE and raises after
$CRASH_AFTER steps; the others keep training (blocked in all-reduce) until the
launcher notices and stops them.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    dist.init_process_group(backend=os.environ.get("PAIJOB_BACKEND", "gloo"))
    model = nn.parallel.DistributedDataParallel(nn.Linear(32, 32))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    crash_rank, crash_after = int(os.environ["CRASH_RANK"]), int(os.environ["CRASH_AFTER"])
    for step in range(1_000_000):
        if dist.get_rank() == crash_rank and step == crash_after:
            with open(os.environ["CRASH_FILE"], "w") as handle:
                handle.write(repr(time.time()))
            raise RuntimeError("planned crash for the failure-latency benchmark")
        optimizer.zero_grad()
        model(torch.randn(16, 32)).sum().backward()
        optimizer.step()


if __name__ == "__main__":
    main()
