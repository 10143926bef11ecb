"""GPU training throughput: the ceiling, the recipe and the seed-004 tutorial loop, side by side.

Three sides, measured alternately in every round so drift hits them alike:

* **ceiling** (``gpu_ceiling.py``): the best-practice step on a device-resident batch,
  channels_last, cudnn.benchmark, SGD; eager and ``torch.compile``;
* **recipe**: ``paijob-runtime train --recipe imagenet`` (nccl), on synthetic data (eager and
  ``--compile``) and on a generated JPEG ImageFolder tree;
* **tutorial** (``tutorial_imagenet_apex.py``): the seed-004 loop (ImageFolder + fast_collate
  + data_prefetcher + apex.amp O2 + apex DDP through paijob's compat layer) on the same tree.

Every precision in ``PRECISIONS``; ratios are recipe / ceiling (synthetic) and recipe /
tutorial (JPEG). With several GPUs, the recipe's scaling 1 → N. Targets (issue 13):
≥ 0.9 × ceiling eager and compiled, ≥ 1.3 × the tutorial on JPEGs. On a machine without
CUDA everything is recorded as skipped. All of it takes far longer than a lent GPU's 15
minutes: ``gpu_check.py --budget 480`` measures one sample of each pair within a budget.
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from harness import BIN, PYTHON, base_env, check, progress, simulated_pai_env, summarize, timed

HERE = Path(__file__).resolve().parent
PRECISIONS = ("bf16", "fp16", "O2")
BATCH = 256


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _arch() -> str:
    return "resnet50" if importlib.util.find_spec("torchvision") is not None else "tinyresnet"


def _ceiling(precision: str, compiled: bool, steps: int, tmp: Path) -> dict[str, Any]:
    report = tmp / "ceiling.json"
    report.unlink(missing_ok=True)
    argv = [PYTHON, str(HERE / "gpu_ceiling.py"), "--arch", _arch(), "--batch-size", str(BATCH),
            "--precision", precision, "--steps", str(steps), "--report-json", str(report)]
    if compiled:
        argv.append("--compile")
    check(timed(argv, env=base_env()))
    return dict(json.loads(report.read_text()))


def _recipe(precision: str, data: str, steps: int, tmp: Path, *, nproc: int = 1, compiled: bool = False,
            workers: int | None = None, extra: list[str] | None = None) -> dict[str, Any]:
    summary = tmp / "recipe-summary.json"
    summary.unlink(missing_ok=True)
    argv = [str(BIN / "paijob-runtime"), "train", "--nproc-per-node", str(nproc), "--backend", "nccl",
            "--recipe", "imagenet", "--data", data, "--arch", _arch(), "--precision", precision,
            "--batch-size", str(BATCH), "--epochs", "1", "--steps-per-epoch", str(steps),
            "--synthetic-size", str(BATCH * nproc * min(steps, 8)), "--eval-steps", "1", "--no-resume",
            "--output-dir", str(tmp / "recipe-out"), "--summary-json", str(summary), *(extra or [])]
    if compiled:
        argv.append("--compile")
    if workers is not None:
        argv += ["--workers", str(workers)]
    run = check(timed(argv, env=base_env(simulated_pai_env(gpu=nproc))))
    found = json.loads(summary.read_text())
    return {"steady": found["steady_images_per_sec"], "whole": found["images_per_sec"],
            "wall_seconds": run.seconds, "placement": found.get("data_placement"),
            "graphs_compiled": [h.get("graphs_compiled") for h in found.get("history", [])]}


def _tutorial(tree: Path, steps: int, workers: int, tmp: Path, nproc: int = 1) -> dict[str, Any]:
    report = tmp / "tutorial.json"
    report.unlink(missing_ok=True)
    argv = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(nproc),
            str(HERE / "tutorial_imagenet_apex.py"), str(tree), "-a", _arch(), "-b", str(BATCH),
            "-j", str(workers), "--opt-level", "O2", "--steps", str(steps), "--report-json", str(report)]
    check(timed(argv, env=base_env()))
    found = json.loads(report.read_text())
    return {"steady": found["steady_images_per_second"], "whole": found["images_per_second"],
            "apex": found.get("apex")}


def _medians(raw: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    return {side: summarize([float(r["steady"] if "steady" in r else r["images_per_second"]) for r in runs])
            for side, runs in raw.items() if runs}


def _synthetic(samples: int, steps: int, tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for precision in PRECISIONS:
        raw: dict[str, list[dict[str, Any]]] = {
            "ceiling_eager": [], "ceiling_compiled": [], "recipe_eager": [], "recipe_compiled": []}
        for i in range(samples):
            progress(f"gpu synthetic {precision}: round {i + 1}/{samples}")
            raw["ceiling_eager"].append(_ceiling(precision, False, steps, tmp))
            raw["recipe_eager"].append(_recipe(precision, "synthetic", steps, tmp))
            raw["ceiling_compiled"].append(_ceiling(precision, True, steps, tmp))
            raw["recipe_compiled"].append(_recipe(precision, "synthetic", steps, tmp, compiled=True))
            if precision == "bf16":  # CUDA graphs on top of inductor, where the step fits one
                raw.setdefault("recipe_compiled_cudagraphs", []).append(
                    _recipe(precision, "synthetic", steps, tmp, compiled=True,
                            extra=["--compile-mode", "reduce-overhead"]))
        med = _medians(raw)
        out[precision] = {
            "raw": raw, **med,
            "of_ceiling_eager": med["recipe_eager"]["median"] / med["ceiling_eager"]["median"],
            "of_ceiling_compiled": med["recipe_compiled"]["median"] / med["ceiling_compiled"]["median"],
            "compile_startup_seconds": summarize([c["wall_seconds"] - e["wall_seconds"] for c, e in
                                                  zip(raw["recipe_compiled"], raw["recipe_eager"], strict=True)]),
        }
    return out


def _jpeg(samples: int, steps: int, tmp: Path, quick: bool) -> dict[str, Any]:
    from jpeg_tree import pil_missing, write_tree

    reason = pil_missing() or (None if importlib.util.find_spec("torchvision") else
                               "torchvision is not installed (ImageFolder and the tutorial need it)")
    if reason:
        return {"skipped": reason}
    per_class = 60 if quick else 1100
    tree = write_tree(tmp / "jpeg-tree", classes=10, train_per_class=per_class, val_per_class=10)
    workers = max(1, (os.cpu_count() or 2) - 1)
    raw: dict[str, list[dict[str, Any]]] = {"recipe_O2": [], "tutorial_O2": [], "recipe_bf16_compiled": []}
    for i in range(samples):
        progress(f"gpu jpeg tree: round {i + 1}/{samples}")
        raw["recipe_O2"].append(_recipe("O2", str(tree), steps, tmp, workers=workers))
        raw["tutorial_O2"].append(_tutorial(tree, steps, workers, tmp))
        raw["recipe_bf16_compiled"].append(_recipe("bf16", str(tree), steps, tmp, workers=workers, compiled=True))
    med = _medians(raw)
    return {"images": per_class * 10, "workers": workers, "raw": raw, **med,
            "ratio_O2": med["recipe_O2"]["median"] / med["tutorial_O2"]["median"]}


def _scaling(samples: int, steps: int, gpus: int, tmp: Path) -> dict[str, Any]:
    counts = sorted({1, gpus, *[n for n in (2, 4) if n < gpus]})
    raw: dict[int, list[float]] = {n: [] for n in counts}
    for i in range(samples):
        for n in counts:
            progress(f"gpu scaling: {n} GPU(s), round {i + 1}/{samples}")
            raw[n].append(float(_recipe("bf16", "synthetic", steps, tmp, nproc=n)["steady"]))
    base = summarize(raw[1])["median"]
    return {"raw_steady_images_per_second": {str(n): v for n, v in raw.items()},
            "points": [{"gpus": n, "images_per_second": summarize(v)["median"],
                        "efficiency": summarize(v)["median"] / (n * base)} for n, v in raw.items()]}


def run(samples: int, quick: bool = False) -> dict[str, object]:
    gpus = _cuda_devices()
    if gpus == 0:
        return {"skipped": "no CUDA GPU on this machine: the GPU sides are to be measured on one"}
    import torch

    steps = 12 if quick else 60
    out: dict[str, object] = {"gpu": torch.cuda.get_device_name(0), "gpus": gpus, "arch": _arch(),
                              "batch_size_per_gpu": BATCH, "steps_per_run": steps, "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        out["synthetic"] = _synthetic(samples, steps, tmp)
        out["jpeg"] = _jpeg(samples, steps, tmp, quick)
        out["scaling"] = _scaling(samples, steps, gpus, tmp) if gpus > 1 else {"skipped": "one GPU"}
    return out
