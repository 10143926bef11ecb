"""The built-in recipes' command line (``python -m paijob.runtime.recipes NAME [ARGS]``), torch-free.

``paijob-runtime train --recipe NAME ARGS`` hands ARGS to this parser in every
worker. The grammar lives here, below the runtime, so that ``paijob render`` and
``paijob validate`` check a job's recipe arguments (``recipeArgs``) with the very
parser the task will use, before the queue, without importing torch (the recipes'
``command`` imports it): ``recipe_arguments_error`` says what the recipe would refuse,
with "did you mean" for a mistyped option.
"""

from __future__ import annotations

import argparse
import functools
import os
from typing import Any, NoReturn

from paijob.common.contract import OUTPUT_DIR, PRECISION

MAX_NONFINITE_STEPS = 10  # the default of --max-nonfinite-steps: consecutive non-finite losses that stop a run


def add_common(parser: argparse.ArgumentParser, *, arch: str, lr: float, epochs: int,
                batch_size: int, weight_decay: float, image_size: int, precision_grammar: str,
                diverged_exit: str = "the diverged exit code") -> None:
    parser.add_argument("--data", default="synthetic",
                        help="'synthetic' (no download, deterministic from --seed) or a data folder")
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--batch-size", type=int, default=batch_size, help="per process")
    parser.add_argument("--lr", type=float, default=lr)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight-decay", type=float, default=weight_decay)
    parser.add_argument("--precision", default=None,
                        help=f"{precision_grammar} (default: ${PRECISION}, else fp32)")
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
    parser.add_argument("--max-nonfinite-steps", type=_positive, default=MAX_NONFINITE_STEPS, metavar="N",
                        help=f"stop with exit {diverged_exit} when the training loss is inf/NaN for N consecutive steps "
                             f"(default {MAX_NONFINITE_STEPS}; non-finite weights at an epoch's end stop it at once)")
    parser.add_argument("--no-resume", action="store_true", help="ignore checkpoints in --output-dir")
    # torch.distributed.launch-style launchers append --local_rank=N; LOCAL_RANK is used instead
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


# Each recipe: its help line and its defaults (add_common), plus the options only it has (_add_own).
RECIPES: dict[str, tuple[str, dict[str, Any]]] = {
    "cifar10": ("the tutorials' CIFAR-10 ConvNet (--arch resnet18 with torchvision)",
                {"arch": "convnet", "lr": 0.02, "epochs": 10, "batch_size": 128, "weight_decay": 5e-4,
                 "image_size": 32}),
    "imagenet": ("ResNet-50 on an ImageFolder tree (needs torchvision); lr scaled by global batch/256, "
                 "5-epoch warmup, step decay",
                 {"arch": "resnet50", "lr": 0.1, "epochs": 90, "batch_size": 64, "weight_decay": 1e-4,
                  "image_size": 224}),
}


def _add_recipe(parser: argparse.ArgumentParser, name: str, precision_grammar: str,
                diverged_exit: str = "the diverged exit code") -> None:
    """Every option of recipe ``name``."""
    add_common(parser, **RECIPES[name][1], precision_grammar=precision_grammar, diverged_exit=diverged_exit)
    if name == "imagenet":
        parser.add_argument("--num-classes", type=int, default=1000)
        parser.add_argument("--decode", default="cpu", choices=("cpu", "gpu"),
                            help="image folders: decode JPEGs in the loader workers (cpu) or on the GPU with "
                                 "torchvision's nvJPEG decode_jpeg (gpu; torchvision >= 0.19), for when the "
                                 "CPUs cannot keep up")


def build_parser(precision_grammar: str = "a precision policy",
                 diverged_exit: str = "the diverged exit code") -> argparse.ArgumentParser:
    """The recipes' parser; the help words that name the runtime's facts (its precision grammar, the exit code
    of a diverged run) are passed in by the runtime, so that checking a job's arguments imports neither."""
    parser = argparse.ArgumentParser(
        prog="python -m paijob.runtime.recipes",
        description="Built-in distributed trainers (one process per rank; run under paijob-runtime "
                    "or as a single process).",
        allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="recipe", metavar="RECIPE", required=True)
    for name, (summary, _) in RECIPES.items():
        _add_recipe(sub.add_parser(name, help=summary, allow_abbrev=False), name, precision_grammar, diverged_exit)
    return parser


class _Refused(Exception):
    pass


class _CheckingParser(argparse.ArgumentParser):
    """The recipe's grammar for checking, never for printing: an error raises instead of exiting, and the
    formatter argparse builds on every ``add_argument`` (to check the metavar; it asks the terminal's
    size each time, most of the cost of building a parser) is built once."""

    def error(self, message: str) -> NoReturn:
        raise _Refused(message)

    @functools.cached_property
    def _formatter(self) -> argparse.HelpFormatter:
        return argparse.HelpFormatter(self.prog, width=100)

    def _get_formatter(self) -> argparse.HelpFormatter:
        return self._formatter


@functools.lru_cache(maxsize=2)
def _checking_parser(name: str) -> argparse.ArgumentParser:
    """Recipe ``name``'s own parser (the sub-parser ``build_parser`` gives it), for checking; only the one a
    job names is built (``paijob render`` of a recipe job pays for one)."""
    parser = _CheckingParser(prog=f"python -m paijob.runtime.recipes {name}", add_help=False,
                             allow_abbrev=False)
    _add_recipe(parser, name, "a precision policy")
    return parser


def _did_you_mean(parser: argparse.ArgumentParser, unknown: list[str]) -> str:
    import difflib  # only for a mistake: not on every render

    options = [o for o in parser._option_string_actions if o.startswith("--")]  # noqa: SLF001
    hints = []
    for word in unknown:
        if word.startswith("-"):
            close = difflib.get_close_matches(word.split("=", 1)[0], options, n=1)
            if close:
                hints.append(f"{word.split('=', 1)[0]}: did you mean {close[0]}?")
    return f" ({'; '.join(hints)})" if hints else ""


def recipe_arguments_error(recipe: str, args: list[str], *, filled_in_later: bool = False) -> str | None:
    """What recipe ``recipe`` would say about ``args`` (None: it takes them).

    ``filled_in_later``: some words are filled in at run time (``$VAR``, ``<% %>``), so a
    value that does not parse yet is not an error; an unknown option still is.
    """
    if recipe not in RECIPES:
        if filled_in_later:
            return None
        import difflib  # only for a mistake: not on every render

        close = difflib.get_close_matches(recipe, list(RECIPES), n=1)
        hint = f"did you mean {close[0]}?" if close else "built-in recipes: " + ", ".join(RECIPES)
        return f"no built-in recipe {recipe!r} ({hint})"
    parser = _checking_parser(recipe)
    try:
        _, unknown = parser.parse_known_args(args)
    except _Refused as refused:
        return None if filled_in_later else f"recipe {recipe}: {refused}"
    if unknown:
        return f"recipe {recipe}: unrecognized arguments: {' '.join(unknown)}{_did_you_mean(parser, unknown)}"
    return None
