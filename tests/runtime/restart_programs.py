"""Training scripts that crash, resume and keep training, for the recovery tests on loopback
(test_restarts.py) and on network-namespace hosts (test_multihost.py), and node 0's restart line."""

from __future__ import annotations

import re
import textwrap

# Trains STEPS steps of an all_reduce, resuming from its own checkpoint (the five lines of docs/your-code.md):
# each step's value is the step number summed over the ranks, so the final value tells whether every rank
# resumed where the checkpoint left it. argv: folder, the step at which rank CRASH_RANK raises (-1: never),
# "once" (only in the first start) or "always".
TRAINS = textwrap.dedent(
    """
    import json, os, sys, time
    import torch
    import torch.distributed as dist

    folder, crash_at, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    ckpt = os.path.join(folder, "ckpt.json")
    start = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
    total = torch.zeros(1)
    for step in range(start, 12):
        if step == crash_at and rank == 1 and (how == "always" or restart == 0):
            raise ValueError("bad batch on purpose")
        value = torch.tensor([float(step)])
        dist.all_reduce(value)
        if rank == 0 and step % 3 == 2:  # a checkpoint every 3 steps, written atomically
            with open(ckpt + ".tmp", "w") as fh:
                json.dump({"step": step + 1}, fh)
            os.replace(ckpt + ".tmp", ckpt)
        dist.barrier()
        time.sleep(0.05)
    if rank == 0:
        with open(os.path.join(folder, "done.json"), "w") as fh:
            json.dump({"last": float(value), "world": world, "restart": restart, "start": start}, fh)
    """
)


# TRAINS, for 60 steps of about 0.1 s: long enough to lose a node mid-way.
TRAINS_LONGER = TRAINS.replace("range(start, 12)", "range(start, 60)").replace(
    "folder, crash_at, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]", "folder, crash_at, how = sys.argv[1], -1, 'no'")

# node 0's line per restart: which of how many, after what
RESTART_LINE = re.compile(r"^paijob-runtime: restart (\d+) of (\d+) after (.*)$", re.MULTILINE)
