"""A DDP-like loop for the restart benchmark: STEPS all_reduce steps; in the first start only, one rank raises.

    python restart_ddp.py FOLDER

Written into FOLDER: ``crashed`` (time.time() as the crashing rank raised; its presence is "the crash
happened"), ``first-step`` (time.time() when rank 0 completed its first step of the start after the crash).
The crashing rank is ``CRASH_RANK`` (default 3; -1: none, the benchmark kills a host instead and writes
``crashed`` itself), at step ``CRASH_STEP`` (default 10), where rank 0 of the first start also writes ``reached``
(the benchmark's cue to kill the host); ``STEPS`` (default 40) steps of 0.05 s. Nothing else: start-up (python,
torch, the process group) is the same code for every way of restarting it.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    folder = sys.argv[1]
    crashed = os.path.join(folder, "crashed")
    again = os.path.exists(crashed)  # a start after the crash
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    crash_rank, crash_step = int(os.environ.get("CRASH_RANK", "3")), int(os.environ.get("CRASH_STEP", "10"))
    value = torch.ones(1)
    for step in range(int(os.environ.get("STEPS", "40"))):
        dist.all_reduce(value)
        if step == 0 and again and rank == 0:
            first = os.path.join(folder, "first-step")
            if not os.path.exists(first):
                with open(first + ".tmp", "w") as fh:
                    fh.write(repr(time.time()))
                os.replace(first + ".tmp", first)
        if step == crash_step and rank == 0 and not again:
            with open(os.path.join(folder, "reached"), "w") as fh:
                fh.write(repr(time.time()))
        if step == crash_step and rank == crash_rank and not again:
            with open(crashed + ".tmp", "w") as fh:
                fh.write(repr(time.time()))
            os.replace(crashed + ".tmp", crashed)
            raise ValueError("a flaky worker, on purpose")
        time.sleep(0.05)
    dist.barrier()


if __name__ == "__main__":
    main()
