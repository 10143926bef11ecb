"""A script that starts its own workers with mp.spawn: run it with `paijob-runtime train --mode per-node`.

paijob-runtime runs it once per node with MASTER_ADDR, MASTER_PORT, NODE_RANK,
NNODES and NPROC_PER_NODE; it spawns NPROC_PER_NODE workers whose global rank
is NODE_RANK * NPROC_PER_NODE + local rank.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(local_rank: int, node_rank: int, nproc: int, world: int) -> None:
    rank = node_rank * nproc + local_rank
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    if rank == 0:
        print(f"{world} workers, sum of ranks {int(total.item())}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    nproc = int(os.environ["NPROC_PER_NODE"])
    mp.spawn(worker, args=(int(os.environ["NODE_RANK"]), nproc, int(os.environ["WORLD_SIZE"])), nprocs=nproc)
