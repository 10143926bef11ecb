"""Everything before a recipe's first step, in the order ranks must agree on (collectives, RNG).

Process group, device and determinism flags, then the data (rank 0 first: it downloads),
the model under its precision policy with its optimizer, the resumed checkpoint, DDP and
torch.compile, and the feed. What set-up makes is a :class:`Run`, fixed for the whole run.
"""

from __future__ import annotations

import os
import random
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn

from paijob.common import contract
from paijob.runtime.precision import PrecisionPolicy, resolve_policy
from paijob.runtime.recipes.config import Recipe, TrainConfig
from paijob.runtime.recipes.data import EvalPlan, Normalizer, padded_eval_plan
from paijob.runtime.recipes.distributed import DistInfo, init_distributed
from paijob.runtime.recipes.divergence import DivergenceGuard
from paijob.runtime.recipes.feed import Feed
from paijob.runtime.recipes.loglines import Progress
from paijob.runtime.recipes.meters import CompiledGraphs
from paijob.runtime.recipes.resume import Checkpoints, resume
from paijob.runtime.recipes.state import Model, RunState
from paijob.runtime.recipes.stepper import Stepper, make_optimizer


class Inputs:
    """uint8 batch on the device → the model's input, identical in training and evaluation."""

    def __init__(self, normalize: Normalizer, policy: PrecisionPolicy, channels_last: bool) -> None:
        self.normalize = normalize
        self.policy = policy
        self.channels_last = channels_last

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        x = self.normalize(images)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return self.policy.cast_input(x)


class StopRequest:
    """SIGTERM, remembered: the loop checks it at steps every rank agrees on, saves, exits 143."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _on_term(self, signum: int, frame: Any) -> None:
        self.requested = True

    def install(self) -> None:
        self._previous = signal.signal(signal.SIGTERM, self._on_term)

    def restore(self) -> None:
        signal.signal(signal.SIGTERM, self._previous)


def _fault_hook() -> tuple[int, int, str] | None:
    """``PAIJOB_FAULT_AT=EPOCH:STEP[:term|kill|save][:RANK]``: fault injection for resume tests: SIGTERM, or
    death as by SIGKILL, at that step, or death halfway through writing the checkpoint that resumes there
    (``save``); on rank ``RANK`` only, where given; in the first start only (``TORCHELASTIC_RESTART_COUNT``
    0: a restart by paijob-runtime's ``--max-restarts`` runs clean)."""
    text = os.environ.get(contract.FAULT_AT)
    if not text or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return None
    parts = text.split(":")
    if len(parts) > 3 and parts[3] != os.environ.get("RANK", "0"):
        return None
    return int(parts[0]), int(parts[1]), (parts[2] if len(parts) > 2 else "kill")


@dataclass
class Run:
    """What set-up made, fixed for the whole run: every phase reads it, none replaces it."""

    recipe: Recipe
    cfg: TrainConfig
    info: DistInfo
    model: Model
    feed: Feed
    sampler: Any  # DistributedSampler over range(len(train_set))
    eval_plan: EvalPlan
    prepare: Inputs
    in_memory: bool
    out_dir: Path
    checkpoints: Checkpoints
    progress: Progress
    writer: Any  # TensorBoard's SummaryWriter on rank 0, when installed
    guard: DivergenceGuard  # non-finite losses and weights: see ``divergence``
    stop: StopRequest = field(default_factory=StopRequest)
    fault: tuple[int, int, str] | None = field(default_factory=lambda: _fault_hook())
    graphs: CompiledGraphs | None = None


def _set_up_process(cfg: TrainConfig) -> DistInfo:
    """Process group, device, threads, cuDNN and determinism flags, seeds."""
    if cfg.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    info = init_distributed()
    on_gpu = info.device.type == "cuda"
    if info.device.type == "cpu" and info.local_world_size > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // info.local_world_size))
    if cfg.deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    elif on_gpu:
        torch.backends.cudnn.benchmark = True
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    return info


def _load_data(recipe: Recipe, cfg: TrainConfig, info: DistInfo) -> tuple[Any, Any]:
    """Rank 0 first (it downloads), the others after the barrier."""
    if info.is_main:
        train_set, test_set = recipe.load_data(cfg, info)
    if info.distributed:
        dist.barrier()
    if not info.is_main:
        train_set, test_set = recipe.load_data(cfg, info)
    return train_set, test_set


def _loader_workers(cfg: TrainConfig, info: DistInfo, in_memory: bool) -> int:
    if cfg.workers is not None:
        return cfg.workers
    return 0 if in_memory else max(1, min(8, (os.cpu_count() or 2) // info.local_world_size - 1))


def _build_model(recipe: Recipe, cfg: TrainConfig, info: DistInfo) -> Model:
    """Model, precision policy, optimizer and the step under that policy (apex may wrap both)."""
    device = info.device
    on_gpu = device.type == "cuda"
    model = recipe.build_model(cfg, recipe.num_classes).to(device)
    if on_gpu:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    policy = resolve_policy(cfg.precision, device, loss_scale=cfg.loss_scale,
                            keep_batchnorm_fp32=cfg.keep_batchnorm_fp32)
    policy.prepare_model(model)
    base_lr = cfg.lr * (cfg.batch_size * info.world_size / 256.0 if recipe.scale_lr else 1.0)
    optimizer, scaler = make_optimizer(policy, model.parameters(), lr=base_lr, momentum=cfg.momentum,
                                       weight_decay=cfg.weight_decay)
    stepper = Stepper(policy, model, optimizer, scaler)
    return Model(raw=stepper.model, policy=policy, optimizer=stepper.optimizer, stepper=stepper,
                 base_lr=base_lr)


def ddp_options(cfg: TrainConfig) -> dict[str, Any]:
    """DDP's knobs: bucket size, gradients as views into the buckets (no copy), static graph."""
    return {
        "bucket_cap_mb": cfg.ddp_bucket_mb,
        "gradient_as_bucket_view": True,
        "static_graph": cfg.ddp_static_graph,
    }


def _wrap(cfg: TrainConfig, info: DistInfo, model: Model) -> None:
    """DDP for training across ranks, torch.compile when asked."""
    device = info.device
    trained: nn.Module = model.raw
    if info.distributed:
        trained = nn.parallel.DistributedDataParallel(
            model.raw, device_ids=[device.index] if device.type == "cuda" else None, **ddp_options(cfg))
    evaluated: nn.Module = model.raw
    if cfg.compile:
        compile_kwargs: dict[str, Any] = {"backend": cfg.compile_backend}
        if cfg.compile_mode:
            compile_kwargs["mode"] = cfg.compile_mode
        trained = torch.compile(trained, **compile_kwargs)  # type: ignore[assignment]
        # Without DDP both are the same module: one compiled object, whose cache holds the
        # training and the evaluation graph side by side (each compiled once, in epoch 1).
        evaluated = (trained if not info.distributed
                     else torch.compile(model.raw, **compile_kwargs))  # type: ignore[assignment]
    model.for_training, model.for_eval = trained, evaluated


def set_up(recipe: Recipe, cfg: TrainConfig) -> tuple[Run, RunState]:
    """Everything before the first step, in the order ranks must agree on (collectives, RNG)."""
    info = _set_up_process(cfg)
    out_dir = Path(cfg.output_dir)
    if info.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
    train_set, test_set = _load_data(recipe, cfg, info)
    in_memory = hasattr(train_set, "get_batch")
    model = _build_model(recipe, cfg, info)
    state = resume(cfg, info, model, out_dir / "checkpoints")
    _wrap(cfg, info, model)

    from torch.utils.data.distributed import DistributedSampler

    indices: Any = range(len(train_set))  # DistributedSampler only needs len()
    sampler: DistributedSampler[int] = DistributedSampler(
        indices, num_replicas=info.world_size, rank=info.rank, shuffle=True, seed=cfg.seed,
        drop_last=True)
    prepare = Inputs(Normalizer(recipe.mean, recipe.std, info.device), model.policy,
                     channels_last=info.device.type == "cuda")
    run = Run(
        recipe=recipe, cfg=cfg, info=info, model=model,
        feed=Feed(cfg, train_set, test_set, info.device, in_memory, _loader_workers(cfg, info, in_memory)),
        sampler=sampler,
        eval_plan=padded_eval_plan(len(test_set), info.rank, info.world_size, cfg.batch_size, cfg.eval_steps),
        prepare=prepare, in_memory=in_memory, out_dir=out_dir,
        checkpoints=Checkpoints(out_dir / "checkpoints", recipe, cfg, info, model, fault=_fault_hook()),
        progress=Progress(info.is_main), writer=_tensorboard(out_dir) if info.is_main else None,
        guard=DivergenceGuard(cfg.max_nonfinite_steps, info.device),
    )
    return run, state


def _tensorboard(out_dir: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception:  # tensorboard not installed: skip quietly
        return None
    try:
        return SummaryWriter(log_dir=str(out_dir / "tensorboard"))
    except Exception:
        return None
