"""Training throughput: `--recipe cifar10` against the tutorial's hand-written DDP loop, and scaling.

Same model, batch size, precision (fp32), data and process count on both sides,
run alternately; synthetic data and the real CIFAR-10 file format (generated
locally: no network). Targets: recipe >= 1.25x the tutorial on GPU, >= 1.0x on CPU.
Scaling: recipe images/s at 1..N processes, efficiency = T(N) / (N * T(1)).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from cifar_format import write_cifar10_batches
from harness import BIN, PYTHON, base_env, check, progress, simulated_pai_env, summarize, timed

TUTORIAL = Path(__file__).with_name("tutorial_cifar10_ddp.py")


def _recipe_images_per_second(nproc: int, data: str, epochs: int, size: int, tmp: Path) -> float:
    summary = tmp / "recipe-summary.json"
    summary.unlink(missing_ok=True)
    # Evaluation is outside the recipe's timed training loop; one batch keeps runs short.
    argv = [str(BIN / "paijob-runtime"), "train", "--nproc-per-node", str(nproc),
            "--backend", "gloo", "--recipe", "cifar10", "--data", data,
            "--epochs", str(epochs), "--batch-size", "100", "--precision", "fp32",
            "--synthetic-size", str(size), "--output-dir", str(tmp / "recipe-out"),
            "--no-resume", "--eval-steps", "1", "--summary-json", str(summary)]
    check(timed(argv, env=base_env(simulated_pai_env())))
    return float(json.loads(summary.read_text())["images_per_sec"])


def _tutorial_images_per_second(nproc: int, data: str, epochs: int, size: int, tmp: Path) -> float:
    report = tmp / "tutorial-report.json"
    report.unlink(missing_ok=True)
    argv = [PYTHON, str(TUTORIAL), "-n", "1", "-g", str(nproc), "--epochs", str(epochs),
            "--dist-backend", "gloo", "--batch-size", "100", "--data", data,
            "--synthetic-size", str(size), "--report-json", str(report)]
    check(timed(argv, env=base_env(simulated_pai_env())))
    return float(json.loads(report.read_text())["images_per_second"])


def run(samples: int, nproc: int = 2, epochs: int = 2, size: int = 4000) -> dict[str, object]:
    out: dict[str, object] = {"nproc_per_node": nproc, "epochs": epochs, "images": size,
                              "precision": "fp32", "batch_size_per_process": 100}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        real = tmp / "cifar10"
        write_cifar10_batches(real, images=size)
        for data_name, data in (("synthetic", "synthetic"), ("cifar10-format", str(real))):
            raw: dict[str, list[float]] = {"recipe": [], "tutorial": []}
            for i in range(samples):
                progress(f"throughput ({data_name}): round {i + 1}/{samples}")
                raw["recipe"].append(_recipe_images_per_second(nproc, data, epochs, size, tmp))
                raw["tutorial"].append(_tutorial_images_per_second(nproc, data, epochs, size, tmp))
            recipe, tutorial = summarize(raw["recipe"]), summarize(raw["tutorial"])
            out[data_name] = {"raw_images_per_second": raw, "recipe": recipe, "tutorial": tutorial,
                              "ratio": recipe["median"] / tutorial["median"]}
    return out


def run_scaling(samples: int, max_procs: int, epochs: int = 2, size: int = 4000) -> dict[str, object]:
    raw: dict[int, list[float]] = {}
    with tempfile.TemporaryDirectory() as name:
        for i in range(samples):
            for nproc in range(1, max_procs + 1):
                progress(f"scaling: {nproc} process(es), round {i + 1}/{samples}")
                raw.setdefault(nproc, []).append(
                    _recipe_images_per_second(nproc, "synthetic", epochs, size, Path(name)))
    base = summarize(raw[1])["median"]
    return {
        "raw_images_per_second": {str(n): v for n, v in raw.items()},
        "points": [
            {"processes": n, "images_per_second": summarize(v)["median"],
             "efficiency": summarize(v)["median"] / (n * base)}
            for n, v in sorted(raw.items())
        ],
    }
