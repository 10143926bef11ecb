"""A faithful re-creation of the tutorials' hand-written CIFAR-10 DDP loop (the baseline).

It keeps the tutorial's habits on purpose: mp.spawn from one process per node,
MASTER_ADDR/MASTER_PORT copied from PAI_HOST_IP_worker_0 and
PAI_worker_0_SynPort_PORT, rank from PAI_TASK_INDEX, SGD(lr=1e-4), batch 100,
DataLoader(num_workers=2) over a DistributedSampler, per-step host transfers,
fp32. Only three things are added, none of which changes the training loop:
a synthetic-data switch (for machines with no network), a JSON report of the
images/s that rank 0 measured over the training loop (whole, and after each
epoch's first two steps, as the recipe reports it), and ``--arch`` to swap
the ConvNet for a torchvision ResNet the way the ImageNet tutorial picks its
model (``models.__dict__[args.arch]``).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset
from torch.utils.data.distributed import DistributedSampler

MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(3, 1, 1)
STD = torch.tensor([0.2023, 0.1994, 0.2010]).view(3, 1, 1)


class Net(nn.Module):
    """The tutorial's small ConvNet."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.view(-1, 16 * 5 * 5)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class PickledCifar10(Dataset):
    """CIFAR-10's python batches with the tutorial's train transforms
    (RandomCrop(32, padding=4), RandomHorizontalFlip, ToTensor, Normalize),
    written with torch ops because torchvision has no CPU build here."""

    def __init__(self, root: Path) -> None:
        images, labels = [], []
        for batch in sorted((root / "cifar-10-batches-py").glob("data_batch_*")):
            with open(batch, "rb") as handle:
                entry = pickle.load(handle, encoding="latin1")
            images.append(torch.as_tensor(entry["data"]).view(-1, 3, 32, 32))
            labels.extend(entry["labels"])
        self.images = torch.cat(images)
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = self.images[index].float().div(255)
        padded = F.pad(image, (4, 4, 4, 4))
        top, left = torch.randint(0, 9, (2,)).tolist()
        image = padded[:, top:top + 32, left:left + 32]
        if torch.rand(()) < 0.5:
            image = image.flip(-1)
        return (image - MEAN) / STD, self.labels[index]


def train(gpu: int, args: argparse.Namespace) -> None:
    rank = int(os.environ["PAI_TASK_INDEX"]) * args.gpus + gpu
    dist.init_process_group(backend=args.dist_backend, init_method="env://",
                            world_size=args.world_size, rank=rank)
    torch.manual_seed(0)
    if args.arch == "convnet":
        model = Net()
    else:
        import torchvision.models as models

        model = models.__dict__[args.arch](num_classes=10)
    use_cuda = torch.cuda.is_available() and args.dist_backend == "nccl"
    device = torch.device("cuda", gpu) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(gpu)
    model.to(device)
    batch_size = args.batch_size
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), 1e-4)
    model = nn.parallel.DistributedDataParallel(model, device_ids=[gpu] if use_cuda else None)
    if args.data == "synthetic":
        generator = torch.Generator().manual_seed(0)
        trainset: Dataset = TensorDataset(
            torch.randn(args.synthetic_size, 3, 32, 32, generator=generator),
            torch.randint(0, 10, (args.synthetic_size,), generator=generator),
        )
    else:
        trainset = PickledCifar10(Path(args.data))
    trainsampler = DistributedSampler(trainset, num_replicas=args.world_size, rank=rank, shuffle=True)
    trainloader = DataLoader(trainset, batch_size=batch_size, shuffle=False, num_workers=2,
                             sampler=trainsampler)
    start = time.perf_counter()
    total_step = len(trainloader)
    images_seen = 0
    steady_seconds, steady_images = 0.0, 0  # report only: each epoch after its first 2 steps
    for epoch in range(args.epochs):
        steady_start, seen_before_steady = None, 0
        for i, (images, labels) in enumerate(trainloader):
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            outputs = model(images)
            loss = criterion(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            images_seen += images.shape[0]
            if i + 1 == 2:
                if use_cuda:
                    torch.cuda.synchronize()
                steady_start, seen_before_steady = time.perf_counter(), images_seen
            if (i + 1) % 100 == 0 and gpu == 0:
                print(f"Epoch [{epoch + 1}/{args.epochs}], Step [{i + 1}/{total_step}], "
                      f"Loss: {loss.item():.4f}")
        if steady_start is not None:
            if use_cuda:
                torch.cuda.synchronize()
            steady_seconds += time.perf_counter() - steady_start
            steady_images += images_seen - seen_before_steady
    if use_cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(f"Training complete in: {seconds:.2f}s")
        if args.report_json:
            steady = steady_images * args.world_size / steady_seconds if steady_seconds else None
            report = {"images_per_second": images_seen * args.world_size / seconds,
                      "steady_images_per_second": steady,
                      "wall_seconds": seconds, "world_size": args.world_size}
            Path(args.report_json).write_text(json.dumps(report))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", "--nodes", default=1, type=int)
    parser.add_argument("-g", "--gpus", default=1, type=int, help="processes per node")
    parser.add_argument("--epochs", default=2, type=int)
    parser.add_argument("--dist-backend", default="nccl")
    parser.add_argument("--batch-size", default=100, type=int)
    parser.add_argument("--data", default="synthetic", help="'synthetic' or a CIFAR-10 folder")
    parser.add_argument("--synthetic-size", default=10000, type=int)
    parser.add_argument("--report-json", default="")
    parser.add_argument("--arch", default="convnet", help="'convnet' or a torchvision model name")
    args = parser.parse_args()
    args.world_size = args.gpus * args.nodes
    os.environ["MASTER_ADDR"] = os.environ["PAI_HOST_IP_worker_0"]
    os.environ["MASTER_PORT"] = os.environ["PAI_worker_0_SynPort_PORT"]
    mp.spawn(train, nprocs=args.gpus, args=(args,))


if __name__ == "__main__":
    main()
