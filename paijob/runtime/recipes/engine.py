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

from paijob.runtime.precision import PrecisionPolicy, resolve_policy
from paijob.runtime.recipes import batchnorm
from paijob.runtime.recipes import checkpoint as ckpt
from paijob.runtime.recipes.data import (
    EvalPlan,
    FolderLoader,
    GpuJpegDecoder,
    Normalizer,
    TrainPlan,
    apply_crop_flip,
    dataset_tensors,
    keep_list_collate,
    padded_eval_plan,
    train_batches,
    train_plan,
)
from paijob.runtime.recipes.prefetch import Prefetcher, choose_placement, resident

log = logging.getLogger("paijob.recipes")
SUMMARY_PREFIX = "PAIJOB_SUMMARY "
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
    log_interval: int = 50
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
        backend = environ.get("PAIJOB_BACKEND") or ("nccl" if device.type == "cuda" else "gloo")
        kwargs: dict[str, Any] = {"backend": backend, "init_method": "env://",
                                  "rank": rank, "world_size": world}
        if backend == "nccl":
            kwargs["device_id"] = device
        dist.init_process_group(**kwargs)
    return info


# ---------------------------------------------------------------------------------------


class Progress:
    """A progress line on a TTY (rank 0), plain log lines otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = enabled and sys.stderr.isatty()

    def log_step(self, where: str, loss_sum: torch.Tensor, seen: int, lr: float, rate: float,
                 final: bool = False) -> None:
        """A log interval's line: the one place a step reads a device value back (the loss)."""
        self.update(f"{where} loss {float(loss_sum.item()) / max(seen, 1):.4f} lr {lr:.4g} {rate:.1f} img/s",
                    final=final)

    def update(self, text: str, final: bool = False) -> None:
        if not self.enabled:
            return
        if self.tty:
            sys.stderr.write("\r" + text.ljust(100) + ("\n" if final else ""))
            sys.stderr.flush()
        else:
            print(text, flush=True)


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


def _seed_for(*parts: int) -> int:
    value = 0
    for part in parts:
        value = (value * 1_000_003 + int(part)) % (2**62)
    return value


class _Stepper:
    """backward + optimizer step under the precision policy (native scaler or real apex)."""

    def __init__(self, policy: PrecisionPolicy, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
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
            self.scaler = policy.make_scaler()
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


def _all_max(flag: bool, info: DistInfo) -> bool:
    if not info.distributed:
        return flag
    tensor = torch.tensor([1.0 if flag else 0.0], device=info.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item() > 0)


def _fault_hook() -> tuple[int, int, str] | None:
    """``PAIJOB_FAULT_AT=EPOCH:STEP[:term|kill]``: fault injection for resume tests."""
    text = os.environ.get("PAIJOB_FAULT_AT")
    if not text:
        return None
    parts = text.split(":")
    return int(parts[0]), int(parts[1]), (parts[2] if len(parts) > 2 else "kill")


def make_sgd(params: Any, *, lr: float, momentum: float, weight_decay: float, fused: bool
             ) -> torch.optim.Optimizer:
    """SGD; fused on a GPU where torch has it: one kernel, and GradScaler then checks fp16
    overflow on the device (``_step_supports_amp_scaling``) instead of reading it back per step."""
    import inspect

    kwargs: dict[str, Any] = {}
    if fused and "fused" in inspect.signature(torch.optim.SGD).parameters:
        kwargs["fused"] = True
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay, **kwargs)


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


class _Feed:
    """Where this run's batches come from: device-resident, prefetched, or a DataLoader.

    ``train(plan)`` yields ``(images, labels, crop_y, crop_x, flip)`` on the device for in-memory
    data (augmented by the step) and ``(images, labels)`` for image folders (augmented by the
    workers); ``eval(plan)`` yields ``(images, labels, valid)``.
    """

    def __init__(self, cfg: TrainConfig, train_set: Any, test_set: Any, device: torch.device,
                 in_memory: bool, workers: int) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.depth = cfg.prefetch_depth
        self.train_set, self.test_set = train_set, test_set
        self.placement = "loader"
        self.resident: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.loaders: dict[str, FolderLoader] = {}
        self.decoders: dict[str, GpuJpegDecoder] = {}
        if in_memory:
            whole = {name: dataset_tensors(source) for name, source in (("train", train_set), ("eval", test_set))}
            nbytes = sum(t.numel() * t.element_size() for pair in whole.values() if pair for t in pair)
            can_reside = all(pair is not None for pair in whole.values())
            self.placement = choose_placement(cfg.data_placement, nbytes, device) if can_reside else "host"
            if self.placement == "device":
                self.resident = {name: (pair[0].to(device), pair[1].to(device))
                                 for name, pair in whole.items() if pair is not None}
        elif cfg.decode == "gpu":
            self.placement = "loader, GPU decode"
            self.loaders = {"train": FolderLoader(train_set, workers, self.cuda, cfg.prefetch_factor,
                                                  keep_list_collate),
                            "eval": FolderLoader(test_set, workers, self.cuda, cfg.prefetch_factor,
                                                 keep_list_collate)}
            self.decoders = {"train": GpuJpegDecoder(cfg.image_size, train=True),
                             "eval": GpuJpegDecoder(cfg.image_size, train=False)}
        else:
            self.loaders = {"train": FolderLoader(train_set, workers, self.cuda, cfg.prefetch_factor),
                            "eval": FolderLoader(test_set, workers, self.cuda, cfg.prefetch_factor)}

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """A per-epoch plan to the device: one copy, before the steps (pinned, so asynchronous)."""
        if not self.cuda:
            return tensor
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def _gather(self, source: Any, index: torch.Tensor, slot: list[torch.Tensor] | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        whole = dataset_tensors(source)
        if slot is None:
            return source.get_batch(index) if whole is None else (
                whole[0].index_select(0, index), whole[1].index_select(0, index))
        if whole is None:
            images, labels = source.get_batch(index)
            slot[0].copy_(images)
            slot[1].copy_(labels)
        else:
            torch.index_select(whole[0], 0, index, out=slot[0])
            torch.index_select(whole[1], 0, index, out=slot[1])
        return slot[0], slot[1]

    def _slot_specs(self, source: Any, batch: int, extras: list[torch.Tensor]
                    ) -> list[tuple[Any, torch.dtype]] | None:
        if not self.cuda:
            return None
        images, labels = source.get_batch(torch.zeros(1, dtype=torch.int64))
        return ([((batch, *images.shape[1:]), images.dtype), ((batch,), labels.dtype)]
                + [((batch,), extra.dtype) for extra in extras])

    def _in_memory(self, name: str, index_rows: torch.Tensor, extras: list[torch.Tensor]) -> Any:
        steps = int(index_rows.shape[0])
        if steps == 0:
            return iter(())
        if name in self.resident:
            return resident(self.resident[name], self._to_device(index_rows),
                            [self._to_device(extra) for extra in extras])
        source = self.train_set if name == "train" else self.test_set

        def produce(step: int, slot: list[torch.Tensor] | None) -> list[torch.Tensor]:
            images, labels = self._gather(source, index_rows[step], slot)
            rows = [extra[step] for extra in extras]
            if slot is None:
                return [images, labels, *rows]
            for target, row in zip(slot[2:], rows, strict=True):
                target.copy_(row)
            return slot

        specs = self._slot_specs(source, int(index_rows.shape[1]), extras)
        return iter(Prefetcher(produce, steps, self.device, self.depth, specs))

    def _from_loader(self, name: str, index_rows: torch.Tensor, extras: list[torch.Tensor]) -> Any:
        batches = list(index_rows)
        loader = self.loaders[name].batches(batches)

        def produce(step: int, slot: list[torch.Tensor] | None) -> list[torch.Tensor]:
            images, labels = next(loader)
            return [images, labels, *(extra[step] for extra in extras)]

        decoder = self.decoders.get(name)

        def decode(step: int, moved: tuple[Any, ...]) -> tuple[torch.Tensor, ...]:
            assert decoder is not None
            seed = _seed_for(*(int(i) for i in index_rows[step][:4]), step)  # a pure function of the batch
            return (decoder(moved[0], self.device, seed), *moved[1:])

        return iter(Prefetcher(produce, len(batches), self.device, self.depth,
                               on_device=decode if decoder is not None else None))

    def train(self, plan: TrainPlan) -> Any:
        if self.loaders:
            return self._from_loader("train", plan.indices, [])
        return self._in_memory("train", plan.indices, [plan.crop_y, plan.crop_x, plan.flip])

    def eval(self, plan: EvalPlan) -> Any:
        if self.loaders:
            return self._from_loader("eval", plan.indices, [plan.valid])
        return self._in_memory("eval", plan.indices, [plan.valid])


# Steady-state throughput leaves out each epoch's first steps: loader start-up and DDP's bucket
# rebuild land there, and on a short benchmark epoch they would outweigh the loop itself.
STEADY_AFTER_STEPS = 2


def train(recipe: Recipe, cfg: TrainConfig) -> dict[str, Any]:
    start_wall = time.perf_counter()
    if cfg.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    info = init_distributed()
    device = info.device
    on_gpu = device.type == "cuda"
    if device.type == "cpu" and info.local_world_size > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // info.local_world_size))
    if cfg.deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    elif on_gpu:
        torch.backends.cudnn.benchmark = True
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    out_dir = Path(cfg.output_dir)
    ckpt_dir = out_dir / "checkpoints"
    if info.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)

    # Data: rank 0 first (downloads), the others after the barrier.
    if info.is_main:
        train_set, test_set = recipe.load_data(cfg, info)
    if info.distributed:
        dist.barrier()
    if not info.is_main:
        train_set, test_set = recipe.load_data(cfg, info)
    in_memory = hasattr(train_set, "get_batch")
    workers = cfg.workers
    if workers is None:
        workers = 0 if in_memory else max(1, min(8, (os.cpu_count() or 2) // info.local_world_size - 1))

    # Model, precision, optimizer.
    model = recipe.build_model(cfg, recipe.num_classes).to(device)
    if on_gpu:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    policy = resolve_policy(cfg.precision, device, loss_scale=cfg.loss_scale,
                            keep_batchnorm_fp32=cfg.keep_batchnorm_fp32)
    policy.prepare_model(model)
    base_lr = cfg.lr * (cfg.batch_size * info.world_size / 256.0 if recipe.scale_lr else 1.0)
    optimizer = make_sgd(model.parameters(), lr=base_lr, momentum=cfg.momentum,
                         weight_decay=cfg.weight_decay, fused=on_gpu and not policy.use_real_apex)
    stepper = _Stepper(policy, model, optimizer)
    model, optimizer = stepper.model, stepper.optimizer
    raw_model = model
    criterion = nn.CrossEntropyLoss()

    # Resume.
    start_epoch, start_step, resumed_from = 0, 0, None
    history: list[dict[str, Any]] = []
    if info.is_main:
        for leftover in ckpt.remove_stale_temporaries(ckpt_dir):
            log.warning("paijob: removed %s, left by a checkpoint write that never finished", leftover)
    if not cfg.no_resume:
        found = _resume_state(ckpt_dir, info)
        if found is not None:
            path, state = found
            raw_model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            stepper.load_state_dict(state.get("scaler", {}))
            start_epoch, start_step = int(state["epoch"]), int(state["step"])
            history = list(state.get("history", []))
            rngs = state.get("rng", [])
            if rngs:
                _set_rng_state(rngs[info.rank] if len(rngs) == info.world_size else rngs[0])
            resumed_from = str(path)
            if info.is_main:
                log.info("paijob: resumed from %s (epoch %d, step %d)", path, start_epoch, start_step)

    train_model: nn.Module = model
    if info.distributed:
        train_model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if on_gpu else None, **ddp_options(cfg))
    eval_model: nn.Module = raw_model
    if cfg.compile:
        compile_kwargs: dict[str, Any] = {"backend": cfg.compile_backend}
        if cfg.compile_mode:
            compile_kwargs["mode"] = cfg.compile_mode
        train_model = torch.compile(train_model, **compile_kwargs)  # type: ignore[assignment]
        # Without DDP both are the same module: one compiled object, whose cache holds the
        # training and the evaluation graph side by side (each compiled once, in epoch 1).
        eval_model = (train_model if not info.distributed
                      else torch.compile(raw_model, **compile_kwargs))  # type: ignore[assignment]

    from torch.utils.data.distributed import DistributedSampler

    indices: Any = range(len(train_set))  # DistributedSampler only needs len()
    sampler: DistributedSampler[int] = DistributedSampler(
        indices, num_replicas=info.world_size, rank=info.rank, shuffle=True, seed=cfg.seed,
        drop_last=True)
    normalize = Normalizer(recipe.mean, recipe.std, device)
    writer = _tensorboard(out_dir) if info.is_main else None
    progress = Progress(info.is_main)
    feed = _Feed(cfg, train_set, test_set, device, in_memory, workers)
    eval_plan = padded_eval_plan(len(test_set), info.rank, info.world_size, cfg.batch_size, cfg.eval_steps)

    def prepare(images: torch.Tensor) -> torch.Tensor:
        """uint8 batch on the device → the model's input, identical in training and evaluation."""
        x = normalize(images)
        if on_gpu:
            x = x.contiguous(memory_format=torch.channels_last)
        return policy.cast_input(x)

    stop = {"flag": False}

    def on_term(signum: int, frame: Any) -> None:
        stop["flag"] = True

    previous_handler = signal.signal(signal.SIGTERM, on_term)
    fault = _fault_hook()

    def save(epoch: int, step: int) -> Path | None:
        rngs = [_rng_state()]
        if info.distributed:
            gathered: list[Any] = [None] * info.world_size
            dist.all_gather_object(gathered, rngs[0])
            rngs = gathered
        path = None
        if info.is_main:
            state = {
                "format": "paijob-recipe-checkpoint/1",
                "recipe": recipe.name, "arch": cfg.arch,
                "epoch": epoch, "step": step,
                "model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
                "scaler": stepper.state_dict(), "rng": rngs,
                "history": history, "world_size": info.world_size,
                "precision": policy.spec.text,
            }
            path = ckpt.save_checkpoint(ckpt_dir, epoch, step, state, keep=cfg.keep_checkpoints)
        if info.distributed:
            dist.barrier()
        return path

    train_images = 0
    train_time = 0.0
    steady_images = 0
    steady_time = 0.0
    last_ckpt: Path | None = None
    epoch = start_epoch
    exit_code = 0
    eval_metrics: dict[str, float] = {}
    train_metrics: dict[str, float] = {}
    graphs = _CompiledGraphs(cfg.compile)
    try:
        for epoch in range(start_epoch, cfg.epochs):
            sampler.set_epoch(epoch)
            batches = train_batches(sampler, cfg.batch_size, cfg.steps_per_epoch)
            steps = len(batches)
            first = start_step if epoch == start_epoch else 0
            plan = train_plan(batches, recipe.crop_pad,
                              lambda step, epoch=epoch: _seed_for(cfg.seed, epoch, step, info.rank))
            train_model.train()
            loss_sum = torch.zeros((), device=device)
            correct = torch.zeros((), device=device, dtype=torch.int64)
            seen = 0
            epoch_start = time.perf_counter()
            steady_start: float | None = None
            seen_before_steady = 0
            for step, batch in enumerate(feed.train(plan.rows(first)), start=first):
                lr = recipe.lr_at(cfg, base_lr, epoch, step, steps)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                images, labels = batch[0], batch[1]
                if in_memory:
                    images = apply_crop_flip(images, batch[2], batch[3], batch[4], recipe.crop_pad)
                x = prepare(images)
                with policy.autocast():
                    output = train_model(x)
                    loss = criterion(output.float(), labels)
                stepper.backward_step(loss)
                size = labels.shape[0]
                seen += size
                loss_sum += loss.detach().float() * size
                correct += (output.detach().argmax(1) == labels).sum()
                done = step + 1
                if done - first == STEADY_AFTER_STEPS:
                    if on_gpu:
                        torch.cuda.synchronize(device)
                    steady_start, seen_before_steady = time.perf_counter(), seen
                if fault is not None and (epoch, step) == fault[:2]:
                    if fault[2] == "term":
                        os.kill(os.getpid(), signal.SIGTERM)
                    else:
                        sys.stdout.flush()
                        os._exit(137)
                check_now = not info.distributed or done % cfg.log_interval == 0 or done == steps
                if check_now and _all_max(stop["flag"], info):
                    saved = save(epoch, done)
                    last_ckpt = saved
                    if info.is_main:
                        log.warning("paijob: SIGTERM: checkpoint %s written; exiting for a retry", saved)
                    exit_code = EXIT_PREEMPTED
                    raise _Preempted()
                if info.is_main and (done % cfg.log_interval == 0 or done == steps):
                    elapsed = time.perf_counter() - epoch_start
                    progress.log_step(f"epoch {epoch + 1}/{cfg.epochs} step {done}/{steps}", loss_sum, seen,
                                      lr, seen * info.world_size / max(elapsed, 1e-9), final=done == steps)
            if on_gpu:
                torch.cuda.synchronize(device)
            epoch_end = time.perf_counter()
            epoch_time = epoch_end - epoch_start
            train_time += epoch_time
            train_images += seen * info.world_size
            if steady_start is not None and seen > seen_before_steady:
                steady_time += epoch_end - steady_start
                steady_images += (seen - seen_before_steady) * info.world_size
            train_metrics = _reduce_metrics(loss_sum, correct, seen, info)
            recalibrated = 0
            if cfg.bn_recalibration and batchnorm.needs_recalibration(raw_model):
                recalibrated = _recalibrate_batchnorm(raw_model, feed, plan, recipe, prepare, policy,
                                                      in_memory, info)
            eval_metrics = evaluate(eval_model, feed, eval_plan, prepare, policy, criterion, info)
            record = {
                "epoch": epoch + 1,
                "train_loss": train_metrics["loss"], "train_top1": train_metrics["top1"],
                "eval_loss": eval_metrics["loss"], "eval_top1": eval_metrics["top1"],
                "images_per_sec": (seen * info.world_size) / max(epoch_time, 1e-9),
                "lr": optimizer.param_groups[0]["lr"],
                "bn_recalibration_batches": recalibrated,
            }
            if cfg.compile:
                record["graphs_compiled"] = graphs.new()
            history.append(record)
            if info.is_main:
                log.info("paijob: epoch %d/%d train loss %.4f top1 %.2f%% | eval loss %.4f top1 %.2f%% | %.1f img/s",
                         epoch + 1, cfg.epochs, record["train_loss"], 100 * record["train_top1"],
                         record["eval_loss"], 100 * record["eval_top1"], record["images_per_sec"])
                if writer is not None:
                    for key in ("train_loss", "train_top1", "eval_loss", "eval_top1", "images_per_sec", "lr"):
                        writer.add_scalar(key.replace("_", "/", 1), record[key], epoch + 1)
                    writer.flush()
            last_ckpt = save(epoch + 1, 0)
            if _all_max(stop["flag"], info):
                exit_code = EXIT_PREEMPTED
                raise _Preempted()
    except _Preempted:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        if writer is not None:
            writer.close()

    digest = _param_digest(raw_model)
    digests = [digest]
    if info.distributed:
        gathered_digests: list[Any] = [None] * info.world_size
        dist.all_gather_object(gathered_digests, digest)
        digests = gathered_digests
    summary = {
        "recipe": recipe.name,
        "arch": cfg.arch,
        "status": "preempted" if exit_code else "completed",
        "epochs": len(history),
        "epochs_requested": cfg.epochs,
        "world_size": info.world_size,
        "device": device.type,
        "precision": policy.spec.text,
        "precision_detail": policy.describe(),
        "batch_size": cfg.batch_size,
        "global_batch_size": cfg.batch_size * info.world_size,
        "final": {**{f"train_{k}": v for k, v in train_metrics.items()},
                  **{f"eval_{k}": v for k, v in eval_metrics.items()}},
        "images_per_sec": train_images / train_time if train_time > 0 else 0.0,
        "steady_images_per_sec": steady_images / steady_time if steady_time > 0 else None,
        "train_time_s": train_time,
        "wall_time_s": time.perf_counter() - start_wall,
        "resumed_from": resumed_from,
        "checkpoint": str(last_ckpt) if last_ckpt else None,
        "data_placement": feed.placement,
        "compile": {"enabled": cfg.compile, "mode": cfg.compile_mode, "backend": cfg.compile_backend}
        if cfg.compile else None,
        "param_digest": digest,
        "replicas_in_sync": len(set(digests)) == 1,
        "history": history,
        "exit_code": exit_code,
        "config": asdict(cfg),
    }
    if info.is_main:
        text = json.dumps(summary, sort_keys=True, default=str)
        targets = [out_dir / "summary.json"]
        if cfg.summary_json:
            targets.append(Path(cfg.summary_json))
        for target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text + "\n")
        print(SUMMARY_PREFIX + text, flush=True)
    if info.distributed:
        dist.barrier()
        dist.destroy_process_group()
    return summary


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
def evaluate(model: nn.Module, feed: _Feed, plan: EvalPlan, prepare: Callable[[torch.Tensor], torch.Tensor],
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


def _recalibrate_batchnorm(model: nn.Module, feed: _Feed, plan: TrainPlan, recipe: Recipe,
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

