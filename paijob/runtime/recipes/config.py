"""What a run is asked to do: the recipe (what differs between recipes) and its settings.

``command`` builds both from the command line; every phase of ``trainer.train`` reads them and
none changes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.nn as nn

from paijob.runtime.recipes.distributed import DistInfo
from paijob.runtime.recipes.divergence import DEFAULT_LIMIT


@dataclass
class TrainConfig:
    recipe: str
    data: str = "synthetic"
    epochs: int = 2
    batch_size: int = 64
    lr: float = 0.02
    momentum: float = 0.9
    weight_decay: float = 5e-4
    precision: str = "fp32"
    output_dir: str = "./paijob-output"
    arch: str = "convnet"
    summary_json: str | None = None
    workers: int | None = None
    seed: int = 0
    deterministic: bool = False
    compile: bool = False
    steps_per_epoch: int | None = None
    eval_steps: int | None = None
    synthetic_size: int | None = None
    image_size: int = 32
    log_interval: int | None = None  # steps between progress lines; None: progress.log_interval
    keep_checkpoints: int = 3
    loss_scale: str | None = None
    keep_batchnorm_fp32: str | None = None
    no_resume: bool = False
    compile_mode: str | None = None  # torch.compile mode: default, reduce-overhead (CUDA graphs), ...
    compile_backend: str = "inductor"
    data_placement: str = "auto"  # in-memory data: auto | device (resident) | host (prefetched)
    prefetch_depth: int = 2
    prefetch_factor: int = 4  # DataLoader batches per worker in flight (image folders)
    ddp_bucket_mb: float = 25.0
    ddp_static_graph: bool = False
    bn_recalibration: bool = True
    decode: str = "cpu"  # image folders: JPEG decoding in the loader workers (cpu) or on the GPU
    max_nonfinite_steps: int = DEFAULT_LIMIT  # consecutive non-finite losses that stop the run (divergence)


@dataclass
class Recipe:
    """What differs between recipes: data, model, augmentation and learning-rate schedule."""

    name: str
    num_classes: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    load_data: Callable[[TrainConfig, DistInfo], tuple[Any, Any]]
    build_model: Callable[[TrainConfig, int], nn.Module]
    lr_at: Callable[[TrainConfig, float, int, int, int], float]  # (cfg, base_lr, epoch, step, steps)
    crop_pad: int = 4
    scale_lr: bool = False  # lr × global batch / 256
