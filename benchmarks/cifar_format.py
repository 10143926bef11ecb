"""Writes CIFAR-10's python-pickle batch files filled with random pixels.

The benchmarks read "real-format" data through the same code paths as the
real data set, without a network download.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np


def write_cifar10_batches(root: Path, images: int, batches: int = 5, seed: int = 0) -> Path:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    per_batch = max(1, images // batches)
    names = [f"data_batch_{i}" for i in range(1, batches + 1)] + ["test_batch"]
    for name in names:
        entry = {
            "batch_label": name,
            "labels": rng.integers(0, 10, per_batch).tolist(),
            "data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
            "filenames": [f"{name}_{i}.png" for i in range(per_batch)],
        }
        with open(folder / name, "wb") as handle:
            pickle.dump(entry, handle)
    meta = {"label_names": ["airplane", "automobile", "bird", "cat", "deer",
                            "dog", "frog", "horse", "ship", "truck"]}
    with open(folder / "batches.meta", "wb") as handle:
        pickle.dump(meta, handle)
    return root
