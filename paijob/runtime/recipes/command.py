"""``python -m paijob.runtime.recipes {cifar10,imagenet} [ARGS]``: the built-in trainers."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from paijob.common import exitcodes, recipe_options
from paijob.errors import PaijobError
from paijob.runtime.precision import GRAMMAR, precision_from_env
from paijob.runtime.worker import finish


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


def build_parser() -> argparse.ArgumentParser:
    """The recipes' command line (its grammar lives torch-free in ``paijob.common.recipe_options``)."""
    return recipe_options.build_parser(precision_grammar=GRAMMAR, diverged_exit=str(exitcodes.DIVERGED))


def _console_logging() -> None:
    """Log records under WARNING (the epoch lines) on stdout, with the step and summary lines; the rest on stderr.

    Under paijob-runtime, torch's agent tails a worker's stdout and stderr files in two
    threads, each every 0.1 s, so lines of the two streams reach the task log in no set
    order: the summary, printed just after the last epoch line, often came before it.
    One stream for every progress line keeps their order; warnings and errors stay on
    stderr, whose last lines a failure's root cause shows.
    """
    out = logging.StreamHandler(sys.stdout)
    out.addFilter(lambda record: record.levelno < logging.WARNING)
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(logging.WARNING)
    logging.basicConfig(level=logging.INFO, format="%(message)s", handlers=[out, err])


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _console_logging()
    try:
        spec = precision_from_env(args.precision)
        from paijob.runtime.recipes.config import TrainConfig
        from paijob.runtime.recipes.trainer import train

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
