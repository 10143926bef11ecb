"""An old-style DDP script that takes --local_rank: run it with `paijob-runtime train --local-rank-arg`."""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, required=True)
args = parser.parse_args()
dist.init_process_group("gloo", init_method="env://")
rank = torch.tensor([float(dist.get_rank())])
dist.all_reduce(rank)
print(f"local rank {args.local_rank}: ranks sum to {int(rank.item())}", flush=True)
dist.destroy_process_group()
