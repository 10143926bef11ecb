"""``python -m paijob.runtime.recipes {cifar10,imagenet} [ARGS]``: the built-in trainers."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from paijob.errors import PaijobError
from paijob.runtime.precision import GRAMMAR, precision_from_env
from paijob.runtime.recipes.divergence import DEFAULT_LIMIT
from paijob.runtime.worker import finish
from paijob.task.contract import OUTPUT_DIR, PRECISION


def _cifar10_recipe() -> Any:
    from paijob.runtime.recipes import data
    from paijob.runtime.recipes.config import Recipe
    from paijob.runtime.recipes.models import build_model
    from paijob.runtime.recipes.schedules import constant_lr

    def load(cfg: Any, info: Any) -> tuple[Any, Any]:
        if cfg.data == "synthetic":
            size = cfg.synthetic_size or 2048
            return (data.SyntheticImages(size, 10, 32, cfg.seed, "train"),
                    data.SyntheticImages(max(size // 4, 1), 10, 32, cfg.seed, "test"))
        if info.is_main:
            data.download_cifar10(cfg.data)
        return data.load_cifar10(cfg.data)

    return Recipe(
        name="cifar10", num_classes=10, mean=data.CIFAR10_MEAN, std=data.CIFAR10_STD,
        load_data=load,
        build_model=lambda cfg, n: build_model(cfg.arch, n, 32),
        lr_at=lambda cfg, base, epoch, step, steps: constant_lr(base, epoch, step, steps),
        crop_pad=4, scale_lr=False,
    )


def _imagenet_recipe(num_classes: int) -> Any:
    from paijob.runtime.recipes import data
    from paijob.runtime.recipes.config import Recipe
    from paijob.runtime.recipes.models import build_model
    from paijob.runtime.recipes.schedules import step_decay_with_warmup

    def load(cfg: Any, info: Any) -> tuple[Any, Any]:
        if cfg.data == "synthetic":
            size = cfg.synthetic_size or 1024
            return (data.SyntheticImages(size, num_classes, cfg.image_size, cfg.seed, "train"),
                    data.SyntheticImages(max(size // 8, 1), num_classes, cfg.image_size, cfg.seed, "test"))
        if cfg.decode == "gpu":
            reason = data.gpu_decode_unavailable(info.device)
            if reason:
                raise data.DataError(f"{reason}; drop --decode gpu to decode JPEGs in the loader workers")
            return data.imagefolder_bytes_datasets(cfg.data)
        return data.imagefolder_datasets(cfg.data, cfg.image_size)

    return Recipe(
        name="imagenet", num_classes=num_classes, mean=data.IMAGENET_MEAN, std=data.IMAGENET_STD,
        load_data=load,
        build_model=lambda cfg, n: build_model(cfg.arch, n, cfg.image_size),
        lr_at=lambda cfg, base, epoch, step, steps: step_decay_with_warmup(base, epoch, step, steps),
        crop_pad=0, scale_lr=True,
    )


def _add_common(parser: argparse.ArgumentParser, *, arch: str, lr: float, epochs: int,
                batch_size: int, weight_decay: float, image_size: int) -> None:
    parser.add_argument("--data", default="synthetic",
                        help="'synthetic' (no download, deterministic from --seed) or a data folder")
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--batch-size", type=int, default=batch_size, help="per process")
    parser.add_argument("--lr", type=float, default=lr)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight-decay", type=float, default=weight_decay)
    parser.add_argument("--precision", default=None,
                        help=f"{GRAMMAR} (default: ${PRECISION}, else fp32)")
    parser.add_argument("--loss-scale", default=None, help="'dynamic' or a number (fp16 / apex levels)")
    parser.add_argument("--keep-batchnorm-fp32", default=None, help="True/False (apex O2/O3)")
    parser.add_argument("--output-dir", default=os.environ.get(OUTPUT_DIR) or "./paijob-output",
                        help=f"checkpoints, logs and summary (default: ${OUTPUT_DIR}, the job's output "
                             "folder kept across retries, else ./paijob-output)")
    parser.add_argument("--arch", default=arch)
    parser.add_argument("--image-size", type=int, default=image_size, help=argparse.SUPPRESS
                        if image_size == 32 else "training crop size")
    parser.add_argument("--summary-json", default=None, metavar="PATH")
    parser.add_argument("--workers", type=int, default=None,
                        help="DataLoader workers per process (default: 0 for in-memory data, "
                             "CPUs per process - 1 for image folders)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the model (compiled once: training and evaluation share one shape)")
    parser.add_argument("--compile-mode", default=None,
                        choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
                        help="torch.compile mode; reduce-overhead adds CUDA graphs (GPU)")
    parser.add_argument("--compile-backend", default="inductor", help=argparse.SUPPRESS)
    parser.add_argument("--data-placement", default="auto", choices=("auto", "device", "host"),
                        help="in-memory data (synthetic, CIFAR-10): keep it whole on the GPU ('device'; "
                             "refused when it does not fit, or for an image folder), or prefetch pinned "
                             "batches on a side stream ('host'); auto: device when it takes at most a "
                             "quarter of the free GPU memory")
    parser.add_argument("--prefetch-depth", type=int, default=2, help="batches prepared ahead of the step")
    parser.add_argument("--prefetch-factor", type=int, default=4,
                        help="DataLoader batches in flight per worker (image folders)")
    parser.add_argument("--ddp-bucket-mb", type=float, default=25.0,
                        help="DDP gradient bucket size in MB (gradients are views into the buckets)")
    parser.add_argument("--ddp-static-graph", action="store_true",
                        help="tell DDP the graph is the same every step (true of the built-in models)")
    parser.add_argument("--no-bn-recalibration", action="store_true",
                        help="evaluate with BatchNorm running statistics even while they are young")
    parser.add_argument("--steps-per-epoch", type=int, default=None, help="cap the steps of an epoch")
    parser.add_argument("--eval-steps", type=int, default=None, help="cap the evaluation batches")
    parser.add_argument("--synthetic-size", type=int, default=None, metavar="N",
                        help="training samples of --data synthetic")
    parser.add_argument("--log-interval", type=int, default=None, metavar="STEPS",
                        help="steps between progress lines (default: about 10 lines an epoch, at most "
                             "one every 50 steps; each epoch's last step always has one)")
    parser.add_argument("--keep-checkpoints", type=int, default=3)
    parser.add_argument("--max-nonfinite-steps", type=_positive, default=DEFAULT_LIMIT, metavar="N",
                        help="stop with exit 136 when the training loss is inf/NaN for N consecutive steps "
                             f"(default {DEFAULT_LIMIT}; non-finite weights at an epoch's end stop it at once)")
    parser.add_argument("--no-resume", action="store_true", help="ignore checkpoints in --output-dir")
    # torch.distributed.launch-style launchers append --local_rank=N; LOCAL_RANK is used instead
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m paijob.runtime.recipes",
        description="Built-in distributed trainers (one process per rank; run under paijob-runtime "
                    "or as a single process).",
    )
    sub = parser.add_subparsers(dest="recipe", metavar="RECIPE", required=True)
    cifar = sub.add_parser("cifar10", help="the tutorials' CIFAR-10 ConvNet (--arch resnet18 with torchvision)")
    _add_common(cifar, arch="convnet", lr=0.02, epochs=10, batch_size=128, weight_decay=5e-4, image_size=32)
    imagenet = sub.add_parser("imagenet", help="ResNet-50 on an ImageFolder tree (needs torchvision); "
                                               "lr scaled by global batch/256, 5-epoch warmup, step decay")
    _add_common(imagenet, arch="resnet50", lr=0.1, epochs=90, batch_size=64, weight_decay=1e-4,
                image_size=224)
    imagenet.add_argument("--num-classes", type=int, default=1000)
    imagenet.add_argument("--decode", default="cpu", choices=("cpu", "gpu"),
                          help="image folders: decode JPEGs in the loader workers (cpu) or on the GPU with "
                               "torchvision's nvJPEG decode_jpeg (gpu; torchvision >= 0.19), for when the "
                               "CPUs cannot keep up")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        spec = precision_from_env(args.precision)
        from paijob.runtime.recipes.config import TrainConfig
        from paijob.runtime.recipes.engine import train

        cfg = TrainConfig(
            recipe=args.recipe, data=args.data, epochs=args.epochs, batch_size=args.batch_size,
            lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay,
            precision=spec.text, output_dir=args.output_dir, arch=args.arch,
            summary_json=args.summary_json, workers=args.workers, seed=args.seed,
            deterministic=args.deterministic, compile=args.compile,
            steps_per_epoch=args.steps_per_epoch, eval_steps=args.eval_steps,
            synthetic_size=args.synthetic_size, image_size=args.image_size,
            log_interval=None if args.log_interval is None else max(1, args.log_interval), keep_checkpoints=args.keep_checkpoints,
            loss_scale=args.loss_scale, keep_batchnorm_fp32=args.keep_batchnorm_fp32,
            no_resume=args.no_resume, compile_mode=args.compile_mode,
            compile_backend=args.compile_backend, data_placement=args.data_placement,
            prefetch_depth=max(1, args.prefetch_depth), prefetch_factor=max(1, args.prefetch_factor),
            ddp_bucket_mb=args.ddp_bucket_mb, ddp_static_graph=args.ddp_static_graph,
            bn_recalibration=not args.no_bn_recalibration, decode=getattr(args, "decode", "cpu"),
            max_nonfinite_steps=args.max_nonfinite_steps,
        )
        if args.recipe == "cifar10":
            recipe = _cifar10_recipe()
        else:
            recipe = _imagenet_recipe(args.num_classes)
        from paijob.runtime.recipes.models import BUILTIN_ARCHS

        if args.arch not in BUILTIN_ARCHS:
            from paijob.runtime.recipes.data import require_torchvision

            require_torchvision(f"--arch {args.arch}")
        summary = train(recipe, cfg)
    except PaijobError as error:
        print(f"paijob recipes: error: {error}", file=sys.stderr)
        return error.exit_code
    return int(summary.get("exit_code") or 0)  # 0, 143 (preempted: retry) or 136 (diverged)


def main_and_exit(argv: Sequence[str] | None = None) -> NoReturn:
    """Run ``main`` and end the process without interpreter finalisation.

    Once DDP has wrapped a model, torch never frees the process group (still alive after the
    module is deleted, collected and ``destroy_process_group`` has run), so gloo's worker threads
    are still running when Python finalises, and a finished run can exit -6 ("terminate called
    without an active exception"). :func:`paijob.runtime.worker.finish` is the one way out that
    every worker, recipe or user script, takes; see there.
    """
    finish(main(argv))
