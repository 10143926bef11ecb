"""The training engine both recipes share.

One process per rank: under ``paijob-runtime`` (RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, PAIJOB_BACKEND in the environment) the process
group is initialised from the environment; without RANK it is a plain single
process. Rank 0 alone prepares data (others wait at a barrier), logs, writes
TensorBoard scalars and checkpoints. Metrics are all-reduced.

The training step never waits for the device: batches come prepared ahead
(see ``prefetch``), augmentation is index arithmetic on the device, losses
and accuracy accumulate in device tensors read once per log interval and
epoch, and fp16 loss scaling uses the fused optimizer's on-device overflow
check where torch has one. Evaluation uses the training precision,
normalisation and (recalibrated when still young) BatchNorm statistics, and
batches of the training shape, so a compiled model compiles once.

``train`` runs in named phases, as torch's elastic agent runs its loop: ``_set_up`` (process
group, data, model and optimizer, resume, DDP/compile, feed), then per epoch ``_train_epoch``
(the feed and ``_step``), ``_end_epoch`` (reduce, recalibrate, evaluate), ``_report_epoch`` and
a checkpoint, then ``_summarise`` and ``_publish_summary``; a run whose losses or weights went
non-finite ends early (``divergence``: exit 136, no checkpoint). What set-up made is a ``_Run``;
what the loop changes is a ``_RunState``. The console lines rank 0 prints (step, epoch and
summary lines, a stable format the portal's chart reads) are defined in ``progress``; the full
summary is ``OUTPUT_DIR/summary.json``.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn

from paijob.runtime.precision import PrecisionPolicy, resolve_policy, zero_momentum_buffers
from paijob.runtime.recipes import batchnorm
from paijob.runtime.recipes import checkpoint as ckpt
from paijob.runtime.recipes.data import (
    EvalPlan,
    Normalizer,
    TrainPlan,
    apply_crop_flip,
    padded_eval_plan,
    train_batches,
    train_plan,
)
from paijob.runtime.recipes.divergence import (
    DEFAULT_LIMIT,
    Divergence,
    DivergenceGuard,
    advice,
    divergence_line,
)
from paijob.runtime.recipes.feed import Feed, seed_for
from paijob.runtime.recipes.progress import (
    SUMMARY_FILE,
    Progress,
    epoch_line,
    log_interval,
    summary_line,
)
from paijob.task import contract
from paijob.task.exitcodes import DIVERGED

log = logging.getLogger("paijob.recipes")
EXIT_PREEMPTED = 143  # 128 + SIGTERM: OpenPAI/k8s treat it as a retryable kill


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


@dataclass
class DistInfo:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(env: dict[str, str] | None = None) -> DistInfo:
    environ = dict(os.environ if env is None else env)
    rank = int(environ.get("RANK", "0") or 0)
    world = int(environ.get("WORLD_SIZE", "1") or 1) if "RANK" in environ else 1
    local_rank = int(environ.get("LOCAL_RANK", str(rank)) or 0)
    local_world = int(environ.get("LOCAL_WORLD_SIZE", str(world)) or 1)
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    info = DistInfo(rank, local_rank, world, local_world, device)
    if info.distributed and not dist.is_initialized():
        backend = environ.get(contract.BACKEND) or ("nccl" if device.type == "cuda" else "gloo")
        kwargs: dict[str, Any] = {"backend": backend, "init_method": "env://",
                                  "rank": rank, "world_size": world}
        if backend == "nccl":
            kwargs["device_id"] = device
        dist.init_process_group(**kwargs)
    return info


# ---------------------------------------------------------------------------------------


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if "python" in state:
        value = state["python"]
        random.setstate((value[0], tuple(value[1]), value[2]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _param_digest(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.named_parameters()):  # buffers (BN stats) are per rank
        digest.update(name.encode())
        data = tensor.detach().cpu().contiguous()
        digest.update(ctypes.string_at(data.data_ptr(), data.numel() * data.element_size()))
    return digest.hexdigest()


class _Stepper:
    """backward + optimizer step under the precision policy (native scaler or real apex)."""

    def __init__(self, policy: PrecisionPolicy, model: nn.Module, optimizer: torch.optim.Optimizer,
                 scaler: Any) -> None:
        self.policy = policy
        self.apex: Any = None
        if policy.use_real_apex:
            from apex import amp

            kwargs: dict[str, Any] = {"opt_level": policy.spec.base}
            if policy.loss_scale not in (None,):
                kwargs["loss_scale"] = policy.loss_scale
            model, optimizer = amp.initialize(model, optimizer, **kwargs)
            self.apex = amp
            self.scaler: Any = None
        else:
            self.scaler = scaler
        self.model = model
        self.optimizer = optimizer

    def backward_step(self, loss: torch.Tensor) -> None:
        if self.apex is not None:
            with self.apex.scale_loss(loss, self.optimizer) as scaled:
                scaled.backward()
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)

    def loss_scale(self) -> float | None:
        """The dynamic loss scale now (a host read on a GPU), or None: no dynamic scale, or apex's own."""
        scaler = self.scaler
        if scaler is None or not scaler.is_enabled() or getattr(scaler, "dynamic", True) is False:
            return None
        return float(scaler.get_scale())

    def state_dict(self) -> dict[str, Any]:
        if self.apex is not None:
            return {"apex": self.apex.state_dict()}
        return {"native": self.scaler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.apex is not None and "apex" in state:
            self.apex.load_state_dict(state["apex"])
        elif self.apex is None and state.get("native"):
            self.scaler.load_state_dict(state["native"])


class _Preempted(Exception):
    pass


class _Diverged(Exception):
    pass


def _all_max(flag: bool, info: DistInfo) -> bool:
    return _all_max_flags((flag,), info)[0]


def _all_max_flags(flags: tuple[bool, ...], info: DistInfo) -> tuple[bool, ...]:
    """Each flag, true when it is true on any rank (one all-reduce for all of them)."""
    if not info.distributed:
        return flags
    tensor = torch.tensor([1.0 if flag else 0.0 for flag in flags], device=info.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tuple(bool(value > 0) for value in tensor.tolist())


def _fault_hook() -> tuple[int, int, str] | None:
    """``PAIJOB_FAULT_AT=EPOCH:STEP[:term|kill]``: fault injection for resume tests."""
    text = os.environ.get(contract.FAULT_AT)
    if not text:
        return None
    parts = text.split(":")
    return int(parts[0]), int(parts[1]), (parts[2] if len(parts) > 2 else "kill")


def make_sgd(params: Any, *, lr: float, momentum: float, weight_decay: float, fused: bool
             ) -> torch.optim.Optimizer:
    """SGD; fused on a GPU where torch has it: one kernel, and GradScaler then checks fp16
    overflow on the device (``_step_supports_amp_scaling``) instead of reading it back per step.

    A fused SGD starts with zeroed momentum buffers (:func:`zero_momentum_buffers`): without
    them, a first step GradScaler skips leaves the buffers uninitialised and fp16 trains NaN.
    """
    import inspect

    kwargs: dict[str, Any] = {}
    if fused and "fused" in inspect.signature(torch.optim.SGD).parameters:
        kwargs["fused"] = True
    optimizer = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay, **kwargs)
    if kwargs:
        zero_momentum_buffers(optimizer)
    return optimizer


def make_optimizer(policy: PrecisionPolicy, params: Any, *, lr: float, momentum: float, weight_decay: float
                   ) -> tuple[torch.optim.Optimizer, Any]:
    """The optimizer and loss scaler a recipe steps with under ``policy``.

    What to build follows the policy's device type: on a GPU the fused SGD (zeroed momentum,
    see ``make_sgd``) with GradScaler's on-device overflow check for fp16 and apex O1/O2,
    unfused under NVIDIA apex (whose amp wraps the optimizer itself, and whose scaler is its
    own: the returned one is None). The objects are built where ``params`` are, so a test can
    drive a GPU policy's exact optimizer and scaler on a CPU.
    """
    params = list(params)
    fused = policy.device_type == "cuda" and not policy.use_real_apex
    optimizer = make_sgd(params, lr=lr, momentum=momentum, weight_decay=weight_decay, fused=fused)
    where = params[0].device.type if params else policy.device_type
    scaler = None if policy.use_real_apex else policy.make_scaler(where)
    return optimizer, scaler


def ddp_options(cfg: TrainConfig) -> dict[str, Any]:
    """DDP's knobs: bucket size, gradients as views into the buckets (no copy), static graph."""
    return {
        "bucket_cap_mb": cfg.ddp_bucket_mb,
        "gradient_as_bucket_view": True,
        "static_graph": cfg.ddp_static_graph,
    }


class _CompiledGraphs:
    """How many graphs torch.compile made since the last call (0 = nothing recompiled)."""

    def __init__(self, enabled: bool) -> None:
        self.counters: Any = None
        if enabled:
            from torch._dynamo.utils import counters

            self.counters = counters
        self.seen = self._total()

    def _total(self) -> int:
        return int(self.counters["stats"]["unique_graphs"]) if self.counters is not None else 0

    def new(self) -> int:
        total = self._total()
        fresh, self.seen = total - self.seen, total
        return fresh


# Steady-state throughput leaves out each epoch's first steps: loader start-up and DDP's bucket
# rebuild land there, and on a short benchmark epoch they would outweigh the loop itself.
STEADY_AFTER_STEPS = 2


# --- state ------------------------------------------------------------------------------


@dataclass
class _Model:
    """The model in its roles, and what steps it (the optimizer and scaler apex may have wrapped)."""

    raw: nn.Module  # checkpoints, BatchNorm recalibration, the parameter digest
    policy: PrecisionPolicy
    optimizer: torch.optim.Optimizer
    stepper: _Stepper
    base_lr: float
    criterion: nn.Module = field(default_factory=nn.CrossEntropyLoss)
    for_training: nn.Module | None = None  # raw, under DDP and/or torch.compile (see _wrap)
    for_eval: nn.Module | None = None  # raw, or the compiled module when there is no DDP

    @property
    def training(self) -> nn.Module:
        return self.raw if self.for_training is None else self.for_training

    @property
    def evaluating(self) -> nn.Module:
        return self.raw if self.for_eval is None else self.for_eval


@dataclass
class _Throughput:
    """Images and seconds of the timed training loops, whole and steady (see ``STEADY_AFTER_STEPS``)."""

    images: int = 0
    seconds: float = 0.0
    steady_images: int = 0
    steady_seconds: float = 0.0

    def add(self, meter: _EpochMeter, end: float, world_size: int) -> float:
        """Count an epoch that ended at ``end``; its length in seconds."""
        seconds = end - meter.start
        self.seconds += seconds
        self.images += meter.seen * world_size
        if meter.steady_start is not None and meter.seen > meter.seen_before_steady:
            self.steady_seconds += end - meter.steady_start
            self.steady_images += (meter.seen - meter.seen_before_steady) * world_size
        return seconds

    def rates(self) -> tuple[float, float | None]:
        whole = self.images / self.seconds if self.seconds > 0 else 0.0
        steady = self.steady_images / self.steady_seconds if self.steady_seconds > 0 else None
        return whole, steady


@dataclass
class _RunState:
    """What the loop changes: where training starts, what it measured, what it leaves behind."""

    start_epoch: int = 0
    start_step: int = 0
    resumed_from: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    train_metrics: dict[str, float] = field(default_factory=dict)
    eval_metrics: dict[str, float] = field(default_factory=dict)
    last_checkpoint: Path | None = None
    exit_code: int = 0
    status: str = "completed"  # | preempted | diverged
    throughput: _Throughput = field(default_factory=_Throughput)


class _EpochMeter:
    """An epoch's loss and accuracy, summed on the device (read once at its end), and its clock."""

    def __init__(self, device: torch.device) -> None:
        self.loss_sum = torch.zeros((), device=device)
        self.correct = torch.zeros((), device=device, dtype=torch.int64)
        self.seen = 0
        self.start = time.perf_counter()
        self.steady_start: float | None = None
        self.seen_before_steady = 0

    def add(self, loss: torch.Tensor, output: torch.Tensor, labels: torch.Tensor) -> None:
        size = labels.shape[0]
        self.seen += size
        self.loss_sum += loss.detach().float() * size
        self.correct += (output.detach().argmax(1) == labels).sum()

    def start_steady(self, device: torch.device) -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        self.steady_start, self.seen_before_steady = time.perf_counter(), self.seen

    def finish(self, device: torch.device) -> float:
        """The epoch's end, once the device has done its work."""
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()


class _Inputs:
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


class _StopRequest:
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


class _Checkpoints:
    """A checkpoint of the run at (epoch, step): every rank's RNG, rank 0 writes, all wait."""

    def __init__(self, folder: Path, recipe: Recipe, cfg: TrainConfig, info: DistInfo, model: _Model) -> None:
        self.folder = folder
        self.recipe, self.cfg, self.info, self.model = recipe, cfg, info, model

    def save(self, epoch: int, step: int, history: list[dict[str, Any]]) -> Path | None:
        info = self.info
        rngs = [_rng_state()]
        if info.distributed:
            gathered: list[Any] = [None] * info.world_size
            dist.all_gather_object(gathered, rngs[0])
            rngs = gathered
        path = None
        if info.is_main:
            model = self.model
            state = {
                "format": "paijob-recipe-checkpoint/1",
                "recipe": self.recipe.name, "arch": self.cfg.arch,
                "epoch": epoch, "step": step,
                "model": model.raw.state_dict(), "optimizer": model.optimizer.state_dict(),
                "scaler": model.stepper.state_dict(), "rng": rngs,
                "history": history, "world_size": info.world_size,
                "precision": model.policy.spec.text,
            }
            path = ckpt.save_checkpoint(self.folder, epoch, step, state, keep=self.cfg.keep_checkpoints)
        if info.distributed:
            dist.barrier()
        return path


@dataclass
class _Run:
    """What set-up made, fixed for the whole run: every phase reads it, none replaces it."""

    recipe: Recipe
    cfg: TrainConfig
    info: DistInfo
    model: _Model
    feed: Feed
    sampler: Any  # DistributedSampler over range(len(train_set))
    eval_plan: EvalPlan
    prepare: _Inputs
    in_memory: bool
    out_dir: Path
    checkpoints: _Checkpoints
    progress: Progress
    writer: Any  # TensorBoard's SummaryWriter on rank 0, when installed
    guard: DivergenceGuard  # non-finite losses and weights: see ``divergence``
    stop: _StopRequest = field(default_factory=_StopRequest)
    fault: tuple[int, int, str] | None = field(default_factory=lambda: _fault_hook())
    graphs: _CompiledGraphs | None = None


# --- set-up ----------------------------------------------------------------------------


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


def _build_model(recipe: Recipe, cfg: TrainConfig, info: DistInfo) -> _Model:
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
    stepper = _Stepper(policy, model, optimizer, scaler)
    return _Model(raw=stepper.model, policy=policy, optimizer=stepper.optimizer, stepper=stepper,
                  base_lr=base_lr)


def _resume(cfg: TrainConfig, info: DistInfo, model: _Model, folder: Path) -> _RunState:
    """Where training starts: the newest good checkpoint in ``folder`` (unless --no-resume), else 0."""
    state = _RunState()
    if info.is_main:
        for leftover in ckpt.remove_stale_temporaries(folder):
            log.warning("paijob: removed %s, left by a checkpoint write that never finished", leftover)
    found = None if cfg.no_resume else _resume_state(folder, info)
    if found is None:
        return state
    path, saved = found
    model.raw.load_state_dict(saved["model"])
    model.optimizer.load_state_dict(saved["optimizer"])
    model.stepper.load_state_dict(saved.get("scaler", {}))
    state.start_epoch, state.start_step = int(saved["epoch"]), int(saved["step"])
    state.history = list(saved.get("history", []))
    rngs = saved.get("rng", [])
    if rngs:
        _set_rng_state(rngs[info.rank] if len(rngs) == info.world_size else rngs[0])
    state.resumed_from = str(path)
    if info.is_main:
        log.info("paijob: resumed from %s (epoch %d, step %d)", path, state.start_epoch, state.start_step)
    return state


def _wrap(cfg: TrainConfig, info: DistInfo, model: _Model) -> None:
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


def _set_up(recipe: Recipe, cfg: TrainConfig) -> tuple[_Run, _RunState]:
    """Everything before the first step, in the order ranks must agree on (collectives, RNG)."""
    info = _set_up_process(cfg)
    out_dir = Path(cfg.output_dir)
    if info.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
    train_set, test_set = _load_data(recipe, cfg, info)
    in_memory = hasattr(train_set, "get_batch")
    model = _build_model(recipe, cfg, info)
    state = _resume(cfg, info, model, out_dir / "checkpoints")
    _wrap(cfg, info, model)

    from torch.utils.data.distributed import DistributedSampler

    indices: Any = range(len(train_set))  # DistributedSampler only needs len()
    sampler: DistributedSampler[int] = DistributedSampler(
        indices, num_replicas=info.world_size, rank=info.rank, shuffle=True, seed=cfg.seed,
        drop_last=True)
    prepare = _Inputs(Normalizer(recipe.mean, recipe.std, info.device), model.policy,
                      channels_last=info.device.type == "cuda")
    run = _Run(
        recipe=recipe, cfg=cfg, info=info, model=model,
        feed=Feed(cfg, train_set, test_set, info.device, in_memory, _loader_workers(cfg, info, in_memory)),
        sampler=sampler,
        eval_plan=padded_eval_plan(len(test_set), info.rank, info.world_size, cfg.batch_size, cfg.eval_steps),
        prepare=prepare, in_memory=in_memory, out_dir=out_dir,
        checkpoints=_Checkpoints(out_dir / "checkpoints", recipe, cfg, info, model),
        progress=Progress(info.is_main), writer=_tensorboard(out_dir) if info.is_main else None,
        guard=DivergenceGuard(cfg.max_nonfinite_steps, info.device),
    )
    return run, state


# --- one epoch: feed, step, evaluate, checkpoint, report ----------------------------------


def _train_epoch(run: _Run, state: _RunState, epoch: int) -> tuple[_EpochMeter, TrainPlan]:
    """The epoch's training steps (from the resumed step in the first epoch); raises _Preempted."""
    cfg, info = run.cfg, run.info
    run.sampler.set_epoch(epoch)
    batches = train_batches(run.sampler, cfg.batch_size, cfg.steps_per_epoch)
    steps = len(batches)
    first = state.start_step if epoch == state.start_epoch else 0
    plan = train_plan(batches, run.recipe.crop_pad, lambda step: seed_for(cfg.seed, epoch, step, info.rank))
    interval = log_interval(cfg.log_interval, steps)
    run.model.training.train()
    meter = _EpochMeter(info.device)
    for step, batch in enumerate(run.feed.train(plan.rows(first)), start=first):
        lr = _step(run, meter, batch, epoch, step, steps)
        done = step + 1
        if done - first == STEADY_AFTER_STEPS:
            meter.start_steady(info.device)
        _inject_fault(run.fault, epoch, step)
        at_interval = done % interval == 0 or done == steps
        if info.is_main and at_interval:
            rate = meter.seen * info.world_size / max(time.perf_counter() - meter.start, 1e-9)
            run.progress.log_step(epoch + 1, cfg.epochs, done, steps, meter.loss_sum, meter.seen, lr, rate)
        if at_interval:  # the log interval's host read: the guard reads its buffered losses here too
            run.guard.check()
            run.guard.check_scale(run.model.stepper.loss_scale(), epoch + 1, done)
        if not info.distributed or at_interval:
            stop, diverged = _all_max_flags((run.stop.requested, run.guard.tripped is not None), info)
            if diverged:
                _diverge(run, state, Divergence(epoch + 1, done, "another rank's training went non-finite"))
            if stop:
                _preempt(run, state, epoch, done)
    return meter, plan


def _step(run: _Run, meter: _EpochMeter, batch: Any, epoch: int, step: int, steps: int) -> float:
    """One optimizer step on one batch, nothing read back from the device; its learning rate."""
    model = run.model
    lr = run.recipe.lr_at(run.cfg, model.base_lr, epoch, step, steps)
    for group in model.optimizer.param_groups:
        group["lr"] = lr
    images, labels = batch[0], batch[1]
    if run.in_memory:
        images = apply_crop_flip(images, batch[2], batch[3], batch[4], run.recipe.crop_pad)
    x = run.prepare(images)
    with model.policy.autocast():
        output = model.training(x)
        loss = model.criterion(output.float(), labels)
    model.stepper.backward_step(loss)
    meter.add(loss, output, labels)
    run.guard.record(loss, epoch + 1, step + 1)
    return lr


def _inject_fault(fault: tuple[int, int, str] | None, epoch: int, step: int) -> None:
    """``PAIJOB_FAULT_AT``: SIGTERM to this process, or die as a SIGKILL would (exit 137)."""
    if fault is None or (epoch, step) != fault[:2]:
        return
    if fault[2] == "term":
        os.kill(os.getpid(), signal.SIGTERM)
    else:
        sys.stdout.flush()
        os._exit(137)


def _diverge(run: _Run, state: _RunState, found: Divergence) -> None:
    """Training went non-finite: one line on rank 0, no checkpoint, out of the loop (exit DIVERGED)."""
    guard, policy = run.guard, run.model.policy
    guard.trip(found)
    if run.info.is_main:
        tripped = guard.tripped or found
        hint = advice(policy.compute, policy.cast_model, policy.scaler_enabled)
        detail = policy.describe().split(", ", 1)[-1]  # describe() starts with the policy's own text
        log.error("%s", divergence_line(tripped, policy.spec.text, detail, hint, DIVERGED))
    state.exit_code, state.status = DIVERGED, "diverged"
    raise _Diverged()


def _preempt(run: _Run, state: _RunState, epoch: int, step: int) -> None:
    """SIGTERM mid-epoch: a checkpoint at this step, then out of the loop (exit 143, retryable)."""
    saved = run.checkpoints.save(epoch, step, state.history)
    state.last_checkpoint = saved
    if run.info.is_main:
        log.warning("paijob: SIGTERM: checkpoint %s written; exiting for a retry", saved)
    state.exit_code, state.status = EXIT_PREEMPTED, "preempted"
    raise _Preempted()


def _end_epoch(run: _Run, state: _RunState, epoch: int, meter: _EpochMeter, plan: TrainPlan) -> dict[str, Any]:
    """Time and reduce the epoch, recalibrate BatchNorm if young, evaluate: the epoch's record."""
    info, cfg, model = run.info, run.cfg, run.model
    seconds = state.throughput.add(meter, meter.finish(info.device), info.world_size)
    state.train_metrics = _reduce_metrics(meter.loss_sum, meter.correct, meter.seen, info)
    steps = int(plan.indices.shape[0])
    run.guard.check()
    run.guard.check_model(model.raw, epoch + 1, steps)
    if _all_max(run.guard.tripped is not None, info):
        _diverge(run, state, Divergence(epoch + 1, steps, "another rank's model went non-finite"))
    recalibrated = 0
    if cfg.bn_recalibration and batchnorm.needs_recalibration(model.raw):
        recalibrated = _recalibrate_batchnorm(model.raw, run.feed, plan, run.recipe, run.prepare, model.policy,
                                              run.in_memory, info)
    state.eval_metrics = evaluate(model.evaluating, run.feed, run.eval_plan, run.prepare, model.policy,
                                  model.criterion, info)
    record = {
        "epoch": epoch + 1,
        "train_loss": state.train_metrics["loss"], "train_top1": state.train_metrics["top1"],
        "eval_loss": state.eval_metrics["loss"], "eval_top1": state.eval_metrics["top1"],
        "images_per_sec": (meter.seen * info.world_size) / max(seconds, 1e-9),
        "lr": model.optimizer.param_groups[0]["lr"],
        "bn_recalibration_batches": recalibrated,
    }
    if run.graphs is not None:
        record["graphs_compiled"] = run.graphs.new()
    state.history.append(record)
    return record


def _report_epoch(run: _Run, record: dict[str, Any]) -> None:
    """Rank 0: the epoch line and TensorBoard's scalars."""
    if not run.info.is_main:
        return
    log.info("%s", epoch_line(record["epoch"], run.cfg.epochs, record))
    if run.writer is not None:
        for key in ("train_loss", "train_top1", "eval_loss", "eval_top1", "images_per_sec", "lr"):
            run.writer.add_scalar(key.replace("_", "/", 1), record[key], record["epoch"])
        run.writer.flush()


def _run_epoch(run: _Run, state: _RunState, epoch: int) -> None:
    meter, plan = _train_epoch(run, state, epoch)
    _report_epoch(run, _end_epoch(run, state, epoch, meter, plan))
    state.last_checkpoint = run.checkpoints.save(epoch + 1, 0, state.history)
    if _all_max(run.stop.requested, run.info):
        state.exit_code, state.status = EXIT_PREEMPTED, "preempted"
        raise _Preempted()


# --- the run ---------------------------------------------------------------------------


def train(recipe: Recipe, cfg: TrainConfig) -> dict[str, Any]:
    """Train ``recipe`` as ``cfg`` says; the run's summary (rank 0 also writes and announces it).

    Phases, as torch's elastic agent runs its loop: set-up (process group, data, model,
    resume, wrappers, feed), then per epoch the steps, evaluation, report and checkpoint,
    then the summary and the process group's end.
    """
    start_wall = time.perf_counter()
    run, state = _set_up(recipe, cfg)
    run.graphs = _CompiledGraphs(cfg.compile) if cfg.compile else None
    run.stop.install()
    try:
        for epoch in range(state.start_epoch, cfg.epochs):
            _run_epoch(run, state, epoch)
    except (_Preempted, _Diverged):
        pass
    finally:
        run.stop.restore()
        if run.writer is not None:
            run.writer.close()
    summary = _summarise(run, state, time.perf_counter() - start_wall)
    if run.info.is_main:
        _publish_summary(run, summary)
    if run.info.distributed:
        _leave_process_group()
    return summary


# Process groups this process has left, kept until the process ends: see _leave_process_group.
_LEFT_GROUPS: list[object] = []


def _leave_process_group() -> None:
    """End the process group without letting Python free it while the GIL is held.

    The last owner of a gloo group joins the group's worker threads in its destructor, and
    a worker may still be freeing a finished collective whose Python tensors need the GIL:
    both then wait forever. After ``destroy_process_group`` that last owner is DDP's reducer,
    freed under the GIL when ``train``'s frame goes. Measured with torch 2.4.1: the 2-rank
    recipe hung there in 1 run of 36 (gdb: the main thread in ``~ProcessGroupGloo`` joining,
    a worker in ``~AsyncBarrierWork`` waiting for the GIL); pytorch/pytorch#56297 is the
    class of bug. Keeping a reference here means the group goes with the process, which
    :func:`paijob.runtime.worker.finish` ends without finalisation.
    """
    world = dist.group.WORLD
    dist.barrier()
    dist.destroy_process_group()
    _LEFT_GROUPS.append(world)


def _summarise(run: _Run, state: _RunState, wall_seconds: float) -> dict[str, Any]:
    """The run's summary; every rank's parameter digest is gathered (are the replicas in sync?)."""
    cfg, info, model = run.cfg, run.info, run.model
    digest = _param_digest(model.raw)
    digests = [digest]
    if info.distributed:
        gathered_digests: list[Any] = [None] * info.world_size
        dist.all_gather_object(gathered_digests, digest)
        digests = gathered_digests
    images_per_sec, steady_images_per_sec = state.throughput.rates()
    return {
        "recipe": run.recipe.name,
        "arch": cfg.arch,
        "status": state.status,
        "epochs": len(state.history),
        "epochs_requested": cfg.epochs,
        "world_size": info.world_size,
        "device": info.device.type,
        "precision": model.policy.spec.text,
        "precision_detail": model.policy.describe(),
        "batch_size": cfg.batch_size,
        "global_batch_size": cfg.batch_size * info.world_size,
        "final": {**{f"train_{k}": v for k, v in state.train_metrics.items()},
                  **{f"eval_{k}": v for k, v in state.eval_metrics.items()}},
        "images_per_sec": images_per_sec,
        "steady_images_per_sec": steady_images_per_sec,
        "train_time_s": state.throughput.seconds,
        "wall_time_s": wall_seconds,
        "resumed_from": state.resumed_from,
        "checkpoint": str(state.last_checkpoint) if state.last_checkpoint else None,
        "data_placement": run.feed.placement,
        "compile": {"enabled": cfg.compile, "mode": cfg.compile_mode, "backend": cfg.compile_backend}
        if cfg.compile else None,
        "param_digest": digest,
        "replicas_in_sync": len(set(digests)) == 1,
        "history": state.history,
        "exit_code": state.exit_code,
        "nonfinite": run.guard.summary(model.stepper.loss_scale()),
        "config": asdict(cfg),
    }


def _publish_summary(run: _Run, summary: dict[str, Any]) -> None:
    """Rank 0: the summary JSON in the output folder (and --summary-json); one short line on stdout."""
    text = json.dumps(summary, sort_keys=True, default=str)
    written = run.out_dir / SUMMARY_FILE
    targets = [written]
    if run.cfg.summary_json:
        targets.append(Path(run.cfg.summary_json))
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text + "\n")
    print(summary_line(summary, str(written)), flush=True)


def _reduce_metrics(loss_sum: torch.Tensor, correct: torch.Tensor, seen: int | torch.Tensor,
                    info: DistInfo) -> dict[str, float]:
    """The one host read of an epoch's (or an evaluation's) device-side sums."""
    count = seen.double() if isinstance(seen, torch.Tensor) else torch.tensor(
        float(seen), device=loss_sum.device, dtype=torch.float64)
    packed = torch.stack([loss_sum.double(), correct.double(), count])
    if info.distributed:
        dist.all_reduce(packed)
    total = max(packed[2].item(), 1.0)
    return {"loss": packed[0].item() / total, "top1": packed[1].item() / total,
            "samples": int(packed[2].item())}


@torch.no_grad()
def evaluate(model: nn.Module, feed: Feed, plan: EvalPlan, prepare: Callable[[torch.Tensor], torch.Tensor],
             policy: PrecisionPolicy, criterion: nn.Module, info: DistInfo) -> dict[str, float]:
    """Loss and top-1 over the whole test set, sharded by its own (strided) split, all-reduced.

    Batches have the training batch's shape (the tail padded, padding weighted 0), the input
    is prepared by the training step's own ``prepare`` and run under the same precision.
    """
    model.eval()
    device = info.device
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device)
    seen = torch.zeros((), device=device)
    for images, labels, valid in feed.eval(plan):
        with policy.autocast():
            output = model(prepare(images)).float()
        per_sample = nn.functional.cross_entropy(output, labels, reduction="none")
        loss_sum += (per_sample * valid).sum()
        correct += ((output.argmax(1) == labels).float() * valid).sum()
        seen += valid.sum()
    _ = criterion  # the recipes' criterion is plain cross-entropy, taken per sample here
    return _reduce_metrics(loss_sum, correct, seen, info)


def _recalibrate_batchnorm(model: nn.Module, feed: Feed, plan: TrainPlan, recipe: Recipe,
                           prepare: Callable[[torch.Tensor], torch.Tensor], policy: PrecisionPolicy,
                           in_memory: bool, info: DistInfo, max_batches: int = 50) -> int:
    """Exact BatchNorm statistics from this epoch's first training batches (see ``batchnorm``)."""
    def inputs() -> Any:
        for batch in feed.train(TrainPlan(plan.indices[:max_batches], plan.crop_y[:max_batches],
                                           plan.crop_x[:max_batches], plan.flip[:max_batches])):
            images = batch[0]
            if in_memory:
                images = apply_crop_flip(images, batch[2], batch[3], batch[4], recipe.crop_pad)
            yield prepare(images)

    def forward(x: torch.Tensor) -> Any:
        with policy.autocast():
            return model(x)

    return batchnorm.recalibrate(model, inputs(), forward, distributed=info.distributed)


def _resume_state(folder: Path, info: DistInfo) -> tuple[Path, dict[str, Any]] | None:
    """Rank 0 picks the newest good checkpoint; every rank loads it (or receives it)."""
    choice: list[Any] = [None]
    state = None
    if info.is_main:
        found = ckpt.load_newest(folder)
        if found is not None:
            choice = [str(found[0].path)]
            state = found[1]
    if not info.distributed:
        return (Path(choice[0]), state) if state is not None else None
    dist.broadcast_object_list(choice, src=0)
    if choice[0] is None:
        return None
    if not info.is_main:
        try:
            state = ckpt.load_checkpoint(choice[0])
        except (OSError, ckpt.CorruptCheckpoint):
            state = None
    have = _all_min_flag(state is not None, info)
    if not have:  # some rank cannot read the output folder: ship the state from rank 0
        box = [state if info.is_main else None]
        dist.broadcast_object_list(box, src=0)
        state = box[0]
    return Path(choice[0]), state  # type: ignore[return-value]


def _all_min_flag(flag: bool, info: DistInfo) -> bool:
    tensor = torch.tensor([1.0 if flag else 0.0], device=info.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return bool(tensor.item() > 0)


def _tensorboard(out_dir: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception:  # tensorboard not installed: skip quietly
        return None
    try:
        return SummaryWriter(log_dir=str(out_dir / "tensorboard"))
    except Exception:
        return None


def step_decay_with_warmup(base_lr: float, epoch: int, step: int, steps: int,
                           warmup_epochs: int = 5) -> float:
    """The tutorials' ImageNet schedule: ×0.1 every 30 epochs (and at 80), linear warmup for 5."""
    factor = epoch // 30
    if epoch >= 80:
        factor += 1
    lr = base_lr * (0.1**factor)
    if epoch < warmup_epochs:
        lr = lr * float(1 + step + epoch * steps) / (warmup_epochs * max(steps, 1))
    return lr


def constant_lr(base_lr: float, epoch: int, step: int, steps: int) -> float:
    return base_lr

