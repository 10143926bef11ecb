"""The GPU check that fits a lease: recipe vs ceiling, side by side, within a time budget.

    python benchmarks/gpu_check.py --budget 480 --out benchmarks/results     # on one GPU
    benchmarks/gpu_check.sh                                                  # the same, with a timeout

A GPU is lent here for 15 minutes, start-up included, so this measures what issue 32 asks in
one call under ``--budget`` seconds, where ``run.py --only gpu`` (5 samples of everything)
runs far longer. Pairs, each two sides run one after the other:

* ``bf16``, ``fp16``, ``O2`` (eager) and ``bf16-compiled``: ``--recipe imagenet`` on synthetic
  data kept on the device against ``gpu_ceiling.py`` (same arch, batch, classes, precision);
  target recipe / ceiling >= 0.90;
* ``imagefolder-O2``: the recipe on a generated JPEG ImageFolder tree against the seed-004
  tutorial loop (``tutorial_imagenet_apex.py``); target recipe / tutorial >= 1.30.

Every side trains at least ``--steps`` steps after its warm-up (the recipes' steady rate leaves
out each epoch's first two steps, the ceiling its ``--warmup``), and its losses must be finite
and falling (ceiling: the mean of its last ten steps below its first ten; recipe and tutorial:
the last logged loss below the first). First a plan is printed: each pair with its estimated
seconds. Before a pair runs, its estimate (a side measured earlier of the same kind, else
``--guess-*``) is checked against the budget left; what would not fit is skipped with the
reason recorded, and a side is killed when the budget runs out. The JSON
(``OUT/DATE-TAG.json``, e.g. ``2026-11-27-h100x1.json``) names the machine and holds every
side's command, seconds, rate and losses. Exit 0 when every side that ran trained finite and
falling, 1 otherwise (the ratios are measurements, never a failure), 2 without CUDA (unless
``--allow-cpu``: the harness's own tests, which measure nothing worth quoting).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from harness import BIN, PYTHON, base_env, machine_info, simulated_pai_env, write_json  # noqa: E402

from paijob.runtime.recipes.loglines import parse_line  # noqa: E402

PAIRS = ("bf16", "fp16", "O2", "imagefolder-O2", "bf16-compiled")
TARGETS = {"imagefolder-O2": 1.30}
TARGET = 0.90
_TUTORIAL_LOSS = re.compile(r"^epoch \d+ step \d+/\d+ loss (\S+)$", re.MULTILINE)


@dataclass
class Budget:
    """Seconds left of ``total`` since ``start`` (a clock the tests can drive)."""

    total: float
    clock: Callable[[], float] = time.monotonic
    start: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.start = self.clock()

    def spent(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return self.total - self.spent()


@dataclass
class Side:
    """One command of a pair: what kind of time it takes, how to run it, how to read its result."""

    name: str
    kind: str  # eager | compiled | imagefolder: sides of one kind take about the same time
    argv: list[str]
    read: Callable[[str, Path], dict[str, Any]]  # (stdout, scratch folder) -> result
    env: dict[str, str] | None = None


def falling(first: float, last: float) -> bool:
    return math.isfinite(first) and math.isfinite(last) and last < first


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if not numerator or not denominator:
        return None
    return numerator / denominator


# --- the sides ------------------------------------------------------------------------------


def _read_ceiling(stdout: str, tmp: Path) -> dict[str, Any]:
    found = json.loads((tmp / "ceiling.json").read_text())
    return {"images_per_second": found["images_per_second"], "steps": found["steps"],
            "losses": [found["loss_first"], found["loss_last"]], "finite": bool(found["losses_finite"]),
            "falling": falling(found["loss_first"], found["loss_last"]), "device": found["device"]}


def _read_recipe(stdout: str, tmp: Path) -> dict[str, Any]:
    summary = json.loads((tmp / "recipe-summary.json").read_text())
    points = [parse_line(line) for line in stdout.splitlines()]
    losses = [p.loss for p in points if p is not None and p.kind == "step" and p.loss is not None]
    steps = sum(max(0, p.steps - 2) for p in points if p is not None and p.kind == "step" and p.step == p.steps
                and p.steps is not None)
    finite = bool(losses) and all(math.isfinite(v) for v in losses) and summary["status"] == "completed"
    return {"images_per_second": summary["steady_images_per_sec"], "steps": steps, "losses": losses,
            "finite": finite, "falling": len(losses) > 1 and falling(losses[0], losses[-1]),
            "status": summary["status"], "data_placement": summary.get("data_placement"),
            "nonfinite_steps": (summary.get("nonfinite") or {}).get("steps")}


def _read_tutorial(stdout: str, tmp: Path) -> dict[str, Any]:
    found = json.loads((tmp / "tutorial.json").read_text())
    losses = [float(v) for v in _TUTORIAL_LOSS.findall(stdout)]
    return {"images_per_second": found["steady_images_per_second"], "losses": losses,
            "finite": bool(losses) and all(math.isfinite(v) for v in losses),
            "falling": len(losses) > 1 and falling(losses[0], losses[-1]), "apex": found.get("apex")}


def ceiling_side(cfg: argparse.Namespace, precision: str, compiled: bool, tmp: Path) -> Side:
    argv = [PYTHON, str(HERE / "gpu_ceiling.py"), "--arch", cfg.arch, "--batch-size", str(cfg.batch_size),
            "--image-size", str(cfg.image_size), "--num-classes", str(cfg.num_classes), "--precision", precision,
            "--steps", str(cfg.steps), "--warmup", str(cfg.warmup), "--report-json", str(tmp / "ceiling.json")]
    return Side("ceiling", "compiled" if compiled else "eager", argv + (["--compile"] if compiled else []),
                _read_ceiling)


def recipe_side(cfg: argparse.Namespace, precision: str, tmp: Path, *, compiled: bool = False,
                tree: Path | None = None, epochs: int = 1, steps_per_epoch: int | None = None) -> Side:
    per_epoch = steps_per_epoch or cfg.steps + 2  # the steady rate leaves out each epoch's first two steps
    data = ["--data", str(tree), "--workers", str(cfg.workers)] if tree else [
        "--data", "synthetic", "--synthetic-size", str(cfg.batch_size * per_epoch), "--data-placement", "device",
        "--num-classes", str(cfg.num_classes), "--image-size", str(cfg.image_size)]
    argv = [str(BIN / "paijob-runtime"), "train", "--nproc-per-node", "1", "--backend", cfg.backend,
            "--recipe", "imagenet", "--arch", cfg.arch, "--precision", precision, "--batch-size",
            str(cfg.batch_size), "--epochs", str(epochs), "--steps-per-epoch", str(per_epoch), "--eval-steps", "1",
            "--no-bn-recalibration", "--no-resume", "--output-dir", str(tmp / "recipe-out"),
            "--summary-json", str(tmp / "recipe-summary.json"), *data]
    if cfg.recipe_lr is not None:
        argv += ["--lr", str(cfg.recipe_lr)]
    kind = "imagefolder" if tree else ("compiled" if compiled else "eager")
    return Side("recipe", kind, argv + (["--compile"] if compiled else []), _read_recipe,
                env=base_env(simulated_pai_env(gpu=1 if cfg.backend == "nccl" else 0)))


def tutorial_side(cfg: argparse.Namespace, tree: Path, epochs: int, steps_per_epoch: int, tmp: Path) -> Side:
    argv = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "1", str(HERE / "tutorial_imagenet_apex.py"),
            str(tree), "-a", cfg.arch, "-b", str(cfg.batch_size), "-j", str(cfg.workers), "--opt-level", "O2",
            "--epochs", str(epochs), "--steps", str(steps_per_epoch), "--print-freq", "5",
            "--report-json", str(tmp / "tutorial.json")]
    return Side("tutorial", "imagefolder", argv, _read_tutorial)


# --- running within the budget ----------------------------------------------------------------


def run_side(side: Side, budget: Budget, tmp: Path) -> dict[str, Any]:
    """Run one side, killed when the budget runs out; its result, with its command and seconds."""
    started = time.perf_counter()
    record: dict[str, Any] = {"command": side.argv, "kind": side.kind}
    try:
        proc = subprocess.run(side.argv, env=side.env or base_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=max(1.0, budget.left()))
    except subprocess.TimeoutExpired:
        record.update(seconds=time.perf_counter() - started, error="killed: the budget ran out",
                      finite=False, falling=False)
        return record
    record["seconds"] = time.perf_counter() - started
    if proc.returncode != 0:
        record.update(error=f"exit {proc.returncode}", output_tail=proc.stdout[-3000:], finite=False, falling=False)
        return record
    try:
        record.update(side.read(proc.stdout, tmp))
    except (OSError, ValueError, KeyError) as error:
        record.update(error=f"unreadable result: {error}", output_tail=proc.stdout[-3000:], finite=False,
                      falling=False)
    return record


def estimate(kind: str, measured: dict[str, list[float]], guesses: dict[str, float]) -> float:
    """Seconds a side of ``kind`` should take: the longest measured so far, else the guess."""
    seen = measured.get(kind)
    return max(seen) if seen else guesses[kind]


def pair_kinds(name: str) -> list[str]:
    if name == "imagefolder-O2":
        return ["imagefolder", "imagefolder"]
    return ["compiled", "compiled"] if name.endswith("-compiled") else ["eager", "eager"]


def plan(names: list[str], measured: dict[str, list[float]], guesses: dict[str, float],
         extra: dict[str, float], left: float) -> list[dict[str, Any]]:
    """Each pair's estimated seconds, and whether it fits what is left after the pairs before it."""
    rows = []
    for name in names:
        seconds = sum(estimate(kind, measured, guesses) for kind in pair_kinds(name)) + extra.get(name, 0.0)
        fits = seconds <= left
        rows.append({"pair": name, "estimated_seconds": round(seconds, 1), "fits": fits})
        if fits:
            left -= seconds
    return rows


def _pair_result(name: str, sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    base = sides.get("tutorial") or sides.get("ceiling") or {}
    recipe = sides.get("recipe") or {}
    value = ratio(recipe.get("images_per_second"), base.get("images_per_second"))
    target = TARGETS.get(name, TARGET)
    ok = all(side.get("finite") and side.get("falling") for side in sides.values())
    return {"sides": sides, "ratio": value, "target": target,
            "meets_target": value is not None and value >= target, "losses_finite_and_falling": ok}


def _imagefolder(cfg: argparse.Namespace, tmp: Path) -> tuple[Path | None, str | None, float]:
    """The JPEG tree both image-folder sides read, or why there is none; seconds it took."""
    import importlib.util

    from jpeg_tree import pil_missing, write_tree

    reason = pil_missing() or (None if importlib.util.find_spec("torchvision") else
                               "torchvision is not installed (ImageFolder and the tutorial need it)")
    if reason is None and cfg.backend != "nccl":
        reason = "the seed-004 tutorial needs a CUDA GPU (nccl + apex)"
    if reason:
        return None, reason, 0.0
    started = time.perf_counter()
    tree = write_tree(tmp / "jpeg-tree", classes=10, train_per_class=cfg.images_per_class, val_per_class=2,
                      workers=cfg.workers)
    return tree, None, time.perf_counter() - started


def check(cfg: argparse.Namespace, budget: Budget, tmp: Path) -> dict[str, Any]:
    """Run the chosen pairs within ``budget``; the results document."""
    names = cfg.pairs
    guesses = {"eager": cfg.guess_eager, "compiled": cfg.guess_compiled, "imagefolder": cfg.guess_imagefolder}
    extra = {"imagefolder-O2": cfg.guess_tree}
    measured: dict[str, list[float]] = {}
    planned = plan(names, measured, guesses, extra, budget.left())
    print(f"plan ({budget.total:.0f} s budget, {cfg.steps} steps a side after warm-up, batch {cfg.batch_size}, "
          f"{cfg.arch}):", flush=True)
    for row in planned:
        print(f"  {row['pair']:<16} ~{row['estimated_seconds']:>6.0f} s  {'' if row['fits'] else 'skip: over budget'}",
              flush=True)
    pairs: dict[str, Any] = {}
    for name in names:
        left = budget.left()
        need = sum(estimate(kind, measured, guesses) for kind in pair_kinds(name)) + extra.get(name, 0.0)
        if need > left:
            pairs[name] = {"skipped": f"estimated {need:.0f} s, {left:.0f} s of the budget left"}
            print(f"{name}: skipped ({pairs[name]['skipped']})", flush=True)
            continue
        if name == "imagefolder-O2":
            tree, reason, tree_seconds = _imagefolder(cfg, tmp)
            if tree is None:
                pairs[name] = {"skipped": reason}
                print(f"{name}: skipped ({reason})", flush=True)
                continue
            per_epoch = max(3, (10 * cfg.images_per_class) // cfg.batch_size)
            epochs = math.ceil(cfg.steps / (per_epoch - 2))
            sides = [tutorial_side(cfg, tree, epochs, per_epoch, tmp),
                     recipe_side(cfg, "O2", tmp, tree=tree, epochs=epochs, steps_per_epoch=per_epoch)]
        else:
            precision = name.removesuffix("-compiled")
            compiled = name.endswith("-compiled")
            tree_seconds = 0.0
            sides = [ceiling_side(cfg, precision, compiled, tmp), recipe_side(cfg, precision, tmp, compiled=compiled)]
        results: dict[str, dict[str, Any]] = {}
        for side in sides:
            results[side.name] = run_side(side, budget, tmp)
            measured.setdefault(side.kind, []).append(results[side.name]["seconds"])
            print(f"{name} {side.name}: {_describe(results[side.name])}", flush=True)
        pairs[name] = _pair_result(name, results)
        if tree_seconds:
            pairs[name]["tree_seconds"] = tree_seconds
            if "images_per_second" in results["tutorial"]:  # steady steps: each epoch's first two left out
                results["tutorial"]["steps"] = epochs * (per_epoch - 2)
        value = pairs[name]["ratio"]
        print(f"{name}: ratio {value:.3f} (target {pairs[name]['target']:.2f})" if value is not None
              else f"{name}: no ratio", flush=True)
    return {"plan": planned, "pairs": pairs, "spent_seconds": budget.spent()}


def _describe(result: dict[str, Any]) -> str:
    if "error" in result:
        return f"{result['error']} after {result['seconds']:.0f} s"
    rate = result.get("images_per_second")
    return (f"{rate:.1f} img/s, losses finite {result['finite']}, falling {result['falling']}, "
            f"{result['seconds']:.0f} s" if rate is not None else f"no rate, {result['seconds']:.0f} s")


def machine_tag(machine: dict[str, Any]) -> str:
    """'h100x1' for one NVIDIA H100 80GB HBM3; 'cpu2' without a GPU."""
    gpus = machine.get("gpus") or []
    if gpus:
        words = [w for w in str(gpus[0]).lower().split() if w != "nvidia"]
        model = next((w for w in words if any(c.isdigit() for c in w)), words[0] if words else "gpu")
        return f"{model}x{len(gpus)}"
    return f"cpu{machine.get('cpu_cores')}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for everything (default 480)")
    parser.add_argument("--pairs", default=",".join(PAIRS), help=f"comma list out of {','.join(PAIRS)}")
    parser.add_argument("--steps", type=int, default=200, help="training steps a side after warm-up (default 200)")
    parser.add_argument("--warmup", type=int, default=10, help="ceiling steps before its clock starts")
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-classes", type=int, default=100, help="synthetic pairs (both sides)")
    parser.add_argument("--images-per-class", type=int, default=700, help="JPEG tree: 10 classes of this many")
    parser.add_argument("--recipe-lr", type=float, default=None,
                        help="the recipe's --lr (default its own: 0.1 x batch/256, 5-epoch warm-up)")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--guess-eager", type=float, default=45.0, help="seconds an eager side is assumed to take "
                        "until one is measured")
    parser.add_argument("--guess-compiled", type=float, default=150.0)
    parser.add_argument("--guess-imagefolder", type=float, default=60.0)
    parser.add_argument("--guess-tree", type=float, default=30.0, help="seconds to write the JPEG tree")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--allow-cpu", action="store_true", help="run without CUDA (the harness's tests)")
    args = parser.parse_args(argv)
    args.pairs = [p.strip() for p in args.pairs.split(",") if p.strip()]
    unknown = sorted(set(args.pairs) - set(PAIRS))
    if unknown:
        parser.error(f"unknown pair(s) {unknown}; choose from {','.join(PAIRS)}")
    budget = Budget(args.budget)
    import torch

    if not torch.cuda.is_available() and not args.allow_cpu:
        print("gpu_check: no CUDA GPU here; run it on a lent GPU (docs/performance.md)", file=sys.stderr)
        return 2
    args.backend = "nccl" if torch.cuda.is_available() else "gloo"
    machine = machine_info()
    print("machine:", json.dumps(machine, sort_keys=True), flush=True)
    document: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine, "budget_seconds": args.budget,
        "config": {k: v for k, v in vars(args).items() if k not in ("out",)},
    }
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as name:
        document.update(check(args, budget, Path(name)))
    path = args.out / f"{datetime.date.today().isoformat()}-{machine_tag(machine)}.json"
    write_json(path, document)
    print(f"wrote {path} ({document['spent_seconds']:.0f} s of {args.budget:.0f})", flush=True)
    ran = [p for p in document["pairs"].values() if "sides" in p]
    return 0 if all(p["losses_finite_and_falling"] for p in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
