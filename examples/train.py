"""Starter DDP training script, written by `paijob init`; make it yours.

Run it with `paijob run --local` (two tasks on this machine), on OpenPAI with
`paijob submit -c CLUSTER`, or alone with `paijob-runtime train train.py`.
paijob-runtime sets the env:// variables (MASTER_ADDR, MASTER_PORT, RANK,
WORLD_SIZE, LOCAL_RANK) and PAIJOB_BACKEND (nccl with GPUs, gloo without).

Everything worth keeping goes to $PAIJOB_OUTPUT_DIR, the job's output folder:
shared by its tasks and kept across retries, so a retried attempt resumes from
the newest checkpoint. `paijob cp JOB:result.json .` copies it back.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

log = logging.getLogger("train")


def newest_checkpoint(folder: Path) -> Path | None:
    found = [(int(m.group(1)), p) for p in folder.glob("epoch-*.pt") if (m := re.fullmatch(r"epoch-(\d+)\.pt", p.name))]
    return max(found)[1] if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50, help="steps per epoch")
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--output-dir", default=os.environ.get("PAIJOB_OUTPUT_DIR") or "output",
                        help="checkpoints and result.json (default: $PAIJOB_OUTPUT_DIR, else ./output)")
    parser.add_argument("--fail-at-epoch", type=int, default=None,
                        help="exit 1 after saving this epoch's checkpoint, unless resumed (to try a retry)")
    args = parser.parse_args()

    dist.init_process_group(os.environ.get("PAIJOB_BACKEND", "gloo"))  # env://
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING, format="%(message)s")

    output = Path(args.output_dir)
    checkpoints = output / "checkpoints"
    if rank == 0:
        checkpoints.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    start = 0
    newest = newest_checkpoint(checkpoints)
    if newest is not None:
        state = torch.load(newest, map_location="cpu")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
        log.info("resumed from %s (epoch %d done)", newest, state["epoch"])
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)

    target = torch.randn(16, 1, generator=torch.Generator().manual_seed(1)).to(device)
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own shard of a synthetic task
    log.info("world size %d, backend %s, epochs %d..%d, output %s", world, dist.get_backend(), start,
             args.epochs - 1, output)
    loss = torch.zeros((), device=device)
    for epoch in range(start, args.epochs):
        for _ in range(args.steps):
            x = torch.randn(args.batch_size, 16, generator=data).to(device)
            loss = nn.functional.mse_loss(ddp(x), x @ target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean /= world
        if rank == 0:
            path = checkpoints / f"epoch-{epoch}.pt"
            torch.save({"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict()},
                       path.with_suffix(".tmp"))
            os.replace(path.with_suffix(".tmp"), path)  # a reader never sees half a checkpoint
            log.info("epoch %d loss %.4f, saved %s", epoch, mean.item(), path)
        dist.barrier()
        if epoch == args.fail_at_epoch and newest is None:
            log.error("failing on purpose after epoch %d (--fail-at-epoch): a retry resumes from here", epoch)
            raise SystemExit(1)

    if rank == 0:
        result = {"epochs": args.epochs, "world_size": world, "final_loss": loss.item()}
        (output / "result.json").write_text(json.dumps(result) + "\n")
        log.info("done: %s", result)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
