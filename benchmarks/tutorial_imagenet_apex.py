"""A faithful re-creation of the seed-004 tutorial's ImageNet loop (the real-data baseline).

Its habits, kept on purpose: one process per GPU started by a torch.distributed.launch-style
launcher (LOCAL_RANK), ``init_process_group('nccl', 'env://')``, lr × global batch / 256 with
5-epoch warmup, ``ImageFolder`` with RandomResizedCrop + RandomHorizontalFlip and *no*
ToTensor/Normalize in the workers ("too slow"), a ``fast_collate`` that stacks PIL images
into one uint8 NCHW tensor, a ``data_prefetcher`` that copies the next batch on a side CUDA
stream and normalises it there, ``apex.amp.initialize(opt_level=O2)``,
``apex.parallel.DistributedDataParallel(delay_allreduce=True)``, ``amp.scale_loss``, and a
print every ``--print-freq`` steps that all-reduces the loss and reads it back.

apex comes from paijob's compatibility layer (``paijob.runtime.apex_compat.install``) unless
NVIDIA apex imports. Added, without touching the loop: ``--steps`` caps an epoch, and rank 0
writes images/s (whole loop, and after each epoch's first two steps) to ``--report-json``.
Needs CUDA, torchvision and PIL.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def fast_collate(batch: list[tuple[Any, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """PIL images → one uint8 (N, 3, H, W) tensor, without ToTensor's float conversion."""
    import numpy as np

    targets = torch.tensor([target for _, target in batch], dtype=torch.int64)
    width, height = batch[0][0].size
    out = torch.zeros((len(batch), 3, height, width), dtype=torch.uint8)
    for i, (image, _) in enumerate(batch):
        array = np.asarray(image, dtype=np.uint8)
        if array.ndim < 3:
            array = np.expand_dims(array, axis=-1)
        out[i] += torch.from_numpy(np.rollaxis(array, 2).copy())
    return out, targets


class DataPrefetcher:
    """The next batch copied and normalised on a side stream while the current one trains."""

    def __init__(self, loader: Any) -> None:
        self.loader = iter(loader)
        self.stream = torch.cuda.Stream()
        self.mean = torch.tensor([0.485 * 255, 0.456 * 255, 0.406 * 255]).cuda().view(1, 3, 1, 1)
        self.std = torch.tensor([0.229 * 255, 0.224 * 255, 0.225 * 255]).cuda().view(1, 3, 1, 1)
        self.next_input: Any = None
        self.next_target: Any = None
        self.preload()

    def preload(self) -> None:
        try:
            self.next_input, self.next_target = next(self.loader)
        except StopIteration:
            self.next_input = self.next_target = None
            return
        with torch.cuda.stream(self.stream):
            self.next_input = self.next_input.cuda(non_blocking=True)
            self.next_target = self.next_target.cuda(non_blocking=True)
            self.next_input = self.next_input.float().sub_(self.mean).div_(self.std)

    def next(self) -> tuple[Any, Any]:
        torch.cuda.current_stream().wait_stream(self.stream)
        images, target = self.next_input, self.next_target
        if images is not None:
            images.record_stream(torch.cuda.current_stream())
            target.record_stream(torch.cuda.current_stream())
        self.preload()
        return images, target


def adjust_learning_rate(optimizer: Any, base_lr: float, epoch: int, step: int, len_epoch: int) -> None:
    factor = epoch // 30 + (1 if epoch >= 80 else 0)
    lr = base_lr * (0.1**factor)
    if epoch < 5:
        lr = lr * float(1 + step + epoch * len_epoch) / (5.0 * len_epoch)
    for group in optimizer.param_groups:
        group["lr"] = lr


def reduce_tensor(tensor: torch.Tensor, world_size: int) -> torch.Tensor:
    rt = tensor.clone()
    dist.all_reduce(rt, op=dist.ReduceOp.SUM)
    return rt / world_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data")
    parser.add_argument("-a", "--arch", default="resnet50")
    parser.add_argument("-b", "--batch-size", type=int, default=256)
    parser.add_argument("-j", "--workers", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=None, help="cap the steps of an epoch (benchmarks)")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument("--opt-level", default="O2")
    parser.add_argument("--keep-batchnorm-fp32", default=None)
    parser.add_argument("--crop-size", type=int, default=224)
    parser.add_argument("--print-freq", type=int, default=10)
    parser.add_argument("--report-json", type=Path, default=None)
    parser.add_argument("--local_rank", "--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", "0")))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("tutorial_imagenet_apex: needs a CUDA GPU (the tutorial is nccl + apex)", file=sys.stderr)
        return 2
    from paijob.runtime.apex_compat import install

    install()  # no-op when NVIDIA apex imports
    import torchvision.datasets as datasets
    import torchvision.models as models
    import torchvision.transforms as transforms
    from apex import amp
    from apex.parallel import DistributedDataParallel as DDP

    torch.backends.cudnn.benchmark = True
    args.gpu = args.local_rank
    torch.cuda.set_device(args.gpu)
    dist.init_process_group(backend="nccl", init_method="env://")
    world_size = dist.get_world_size()

    model = models.__dict__[args.arch]().cuda()
    lr = args.lr * float(args.batch_size * world_size) / 256.0
    optimizer = torch.optim.SGD(model.parameters(), lr, momentum=args.momentum, weight_decay=args.weight_decay)
    model, optimizer = amp.initialize(model, optimizer, opt_level=args.opt_level,
                                      keep_batchnorm_fp32=args.keep_batchnorm_fp32)
    model = DDP(model, delay_allreduce=True)
    criterion = nn.CrossEntropyLoss().cuda()

    train_dataset = datasets.ImageFolder(os.path.join(args.data, "train"), transforms.Compose([
        transforms.RandomResizedCrop(args.crop_size), transforms.RandomHorizontalFlip()]))
    sampler = torch.utils.data.distributed.DistributedSampler(train_dataset)
    loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size, shuffle=False,
                                         num_workers=args.workers, pin_memory=True, sampler=sampler,
                                         collate_fn=fast_collate)
    rank0 = dist.get_rank() == 0
    images_seen = steady_images = 0
    loop_seconds = steady_seconds = 0.0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        len_epoch = len(loader) if args.steps is None else min(args.steps, len(loader))
        prefetcher = DataPrefetcher(loader)
        images, target = prefetcher.next()
        torch.cuda.synchronize()
        start = time.perf_counter()
        steady_start = None
        step = 0
        while images is not None and step < len_epoch:
            adjust_learning_rate(optimizer, lr, epoch, step, len_epoch)
            output = model(images)
            loss = criterion(output, target)
            optimizer.zero_grad()
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.step()
            step += 1
            images_seen += images.shape[0] * world_size
            if step == 2:
                torch.cuda.synchronize()
                steady_start = time.perf_counter()
                steady_from = images_seen
            if step % args.print_freq == 0:
                reduced = reduce_tensor(loss.data, world_size)
                if rank0:
                    print(f"epoch {epoch} step {step}/{len_epoch} loss {reduced.item():.4f}", flush=True)
            images, target = prefetcher.next()
        torch.cuda.synchronize()
        end = time.perf_counter()
        loop_seconds += end - start
        if steady_start is not None:
            steady_seconds += end - steady_start
            steady_images += images_seen - steady_from
    if rank0 and args.report_json:
        args.report_json.write_text(json.dumps({
            "images_per_second": images_seen / max(loop_seconds, 1e-9),
            "steady_images_per_second": steady_images / steady_seconds if steady_seconds else None,
            "world_size": world_size, "opt_level": args.opt_level, "arch": args.arch,
            "apex": "paijob compat" if getattr(sys.modules.get("apex"), "__paijob_shim__", False) else "NVIDIA",
        }) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Under torchrun this runs on plain python, whose finalisation can turn a finished DDP run
    # into exit 134; end it as paijob-runtime's workers end (the benchmark measures the loop).
    from paijob.runtime.worker import finish

    finish(code)
