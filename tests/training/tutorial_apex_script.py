"""A training script in the tutorials' style (apex.amp + apex.parallel), kept tiny for tests.

``--mode apex`` uses ``from apex import amp`` / apex DDP exactly as the tutorials
do; ``--mode native`` trains the same model with paijob's native policy for the
same opt level. Prints one ``LOSS <float>`` line per step and a ``DIGEST`` line.
"""

import argparse
import ctypes
import hashlib
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.bn1 = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.view(-1, 16 * 5 * 5)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def digest(model):
    h = hashlib.sha256()
    for name, t in sorted(model.named_parameters()):
        t = t.detach().cpu().contiguous()
        h.update(name.encode())
        h.update(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()))
    return h.hexdigest()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="apex")
    parser.add_argument("--opt-level", default="O1")
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world_size > 1:
        dist.init_process_group(backend="gloo", init_method="env://", world_size=world_size, rank=rank)
    torch.manual_seed(0)
    model = Net()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), 0.05, momentum=0.9)
    if args.mode == "apex":
        from apex import amp
        from apex.parallel import DistributedDataParallel as DDP
        from apex.parallel import convert_syncbn_model

        model = convert_syncbn_model(model)
        model, optimizer = amp.initialize(model, optimizer, opt_level=args.opt_level)
        if world_size > 1:
            model = DDP(model, delay_allreduce=True)
    else:
        from paijob.runtime.precision import resolve_policy

        policy = resolve_policy(args.opt_level, "cpu")
        policy.prepare_model(model)
        scaler = policy.make_scaler()
        if world_size > 1:
            model = nn.parallel.DistributedDataParallel(model)
    gen = torch.Generator().manual_seed(1)
    images = torch.randn(world_size * 32, 3, 32, 32, generator=gen)
    labels = torch.randint(0, 10, (world_size * 32,), generator=gen)
    images = images[rank::world_size]
    labels = labels[rank::world_size]
    for _i in range(args.steps):
        if args.mode == "apex":
            outputs = model(images)
            loss = criterion(outputs, labels)
            optimizer.zero_grad()
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.step()
        else:
            with policy.autocast():
                outputs = model(policy.cast_input(images))
                loss = criterion(outputs.float(), labels)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        print("LOSS", loss.item(), flush=True)
    print("DIGEST", digest(model.module if hasattr(model, "module") else model), flush=True)
    if world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
