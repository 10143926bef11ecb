"""One training script for the recovery tests (loopback, network-namespace hosts, the local cluster), with the
fault each test needs: it trains an all_reduce of the step number, resuming from its own checkpoint as
docs/your-code.md's five lines do, so rank 0's ``done.json`` tells whether every rank resumed where the
checkpoint left it (``last``: the last step summed over the ranks; ``start``: the step this start began at)."""

from __future__ import annotations

import re

_SCRIPT = '''\
import json, os, signal, sys, time
import torch
import torch.distributed as dist

folder = sys.argv[1]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
ckpt = os.path.join(folder, "ckpt.json")
start = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
value = torch.zeros(1)
for step in range(start, STEPS):
FAULT
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
'''


def trains(steps: int, fault: str = "") -> str:
    """The script, ``steps`` steps long, ``fault`` (lines indented as the loop's body) run before each step."""
    return _SCRIPT.replace("STEPS", str(steps)).replace("FAULT\n", fault)


def line_of(script: str, text: str) -> int:
    """The (1-based) line of ``script`` holding ``text``, as a traceback names it."""
    return next(n for n, line in enumerate(script.splitlines(), 1) if text in line)


RAISES = 'raise ValueError("bad batch on purpose")'

# argv: folder, the step at which rank 1 raises (-1: never), "once" (only in the first start) or "always".
TRAINS = trains(12, f'''\
    if step == int(sys.argv[2]) and rank == 1 and (sys.argv[3] == "always" or restart == 0):
        {RAISES}
''')
TRAINS_RAISES_AT = line_of(TRAINS, RAISES)

# 60 steps of about 0.1 s, no fault of its own: long enough to lose a node mid-way.
TRAINS_LONGER = trains(60)

# node 0's line per restart: which of how many, after what
RESTART_LINE = re.compile(r"^paijob-runtime: restart (\d+) of (\d+) after (.*)$", re.MULTILINE)
