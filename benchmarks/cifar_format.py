"""Writes CIFAR-10's python-pickle batch files filled with random pixels.

The benchmarks read "real-format" data through the same code paths as the
real data set, without a network download. The byte format comes from the
recipe's own writer, so both sides of the comparison read identical files.
"""

from __future__ import annotations

from pathlib import Path

import torch

from paijob.runtime.recipes.data import write_cifar_batch


def write_cifar10_batches(root: Path, images: int, batches: int = 5, seed: int = 0) -> Path:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    per_batch = max(1, images // batches)
    names = [f"data_batch_{i}" for i in range(1, batches + 1)] + ["test_batch"]
    for name in names:
        pixels = torch.randint(0, 256, (per_batch, 3, 32, 32), generator=generator)
        labels = torch.randint(0, 10, (per_batch,), generator=generator).tolist()
        write_cifar_batch(folder / name, pixels, labels, batch_label=name)
    return root
