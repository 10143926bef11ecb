"""Training throughput: `--recipe cifar10` against the tutorial's hand-written DDP loop, and scaling.

Same model, batch size, precision (fp32), data and process count on both sides,
run alternately; synthetic data and the real CIFAR-10 file format (generated
locally: no network). Models: the tutorial's ConvNet, and torchvision's
ResNet-18 when torchvision is installed (recorded as skipped otherwise).
Targets: recipe >= 1.25x the tutorial on GPU, >= 1.0x on CPU.
Scaling: recipe images/s at 1..N processes, efficiency = T(N) / (N * T(1)).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from harness import BIN, PYTHON, base_env, check, progress, simulated_pai_env, summarize, timed

TUTORIAL = Path(__file__).with_name("tutorial_cifar10_ddp.py")


RESNET = "resnet18"
SIDES = ("recipe", "tutorial", "tutorial_threads_capped")


class Rates(NamedTuple):
    """images/s over the whole training loop, and after each epoch's first two steps."""
    whole: float
    steady: float

    @classmethod
    def read(cls, whole: float, steady: float | None, source: Path) -> Rates:
        if steady is None:
            raise SystemExit(f"{source}: no steady-state rate; each epoch needs more than 2 steps per process")
        return cls(float(whole), float(steady))


def _recipe_images_per_second(nproc: int, data: str, epochs: int, size: int, tmp: Path,
                              arch: str = "convnet") -> Rates:
    summary = tmp / "recipe-summary.json"
    summary.unlink(missing_ok=True)
    # Evaluation is outside the recipe's timed training loop; one batch keeps runs short.
    argv = [str(BIN / "paijob-runtime"), "train", "--nproc-per-node", str(nproc),
            "--backend", "gloo", "--recipe", "cifar10", "--data", data,
            "--epochs", str(epochs), "--batch-size", "100", "--precision", "fp32",
            "--synthetic-size", str(size), "--output-dir", str(tmp / "recipe-out"),
            "--no-resume", "--eval-steps", "1", "--summary-json", str(summary), "--arch", arch]
    check(timed(argv, env=base_env(simulated_pai_env())))
    found = json.loads(summary.read_text())
    return Rates.read(found["images_per_sec"], found["steady_images_per_sec"], summary)


def _tutorial_images_per_second(nproc: int, data: str, epochs: int, size: int, tmp: Path,
                                arch: str = "convnet", threads: int | None = None) -> Rates:
    report = tmp / "tutorial-report.json"
    report.unlink(missing_ok=True)
    argv = [PYTHON, str(TUTORIAL), "-n", "1", "-g", str(nproc), "--epochs", str(epochs),
            "--dist-backend", "gloo", "--batch-size", "100", "--data", data,
            "--synthetic-size", str(size), "--report-json", str(report), "--arch", arch]
    extra = simulated_pai_env()
    if threads is not None:
        extra["OMP_NUM_THREADS"] = str(threads)
    check(timed(argv, env=base_env(extra)))
    found = json.loads(report.read_text())
    return Rates.read(found["images_per_second"], found["steady_images_per_second"], report)


def _compare(samples: int, nproc: int, epochs: int, size: int, arch: str, tmp: Path,
             real: Path) -> dict[str, object]:
    """Recipe and tutorial alternately, per data kind: raw images/s, medians, ratios.

    The headline ratio is steady-state: each epoch's first steps (loader start-up, DDP's bucket
    rebuild) would otherwise outweigh a benchmark-sized epoch, which a real epoch does not.
    ``whole_loop`` keeps the wall-clock view. A third side runs the tutorial unchanged but with
    OMP_NUM_THREADS = cores / processes, the thread budget paijob-runtime gives each worker, so
    a reader can tell the thread setting from the training loop itself.
    """
    capped = max(1, (os.cpu_count() or 1) // nproc)
    out: dict[str, object] = {}
    for data_name, data in (("synthetic", "synthetic"), ("cifar10-format", str(real))):
        raw: dict[str, list[Rates]] = {side: [] for side in SIDES}
        for i in range(samples):
            progress(f"throughput ({arch}, {data_name}): round {i + 1}/{samples}")
            raw["recipe"].append(_recipe_images_per_second(nproc, data, epochs, size, tmp, arch))
            raw["tutorial"].append(_tutorial_images_per_second(nproc, data, epochs, size, tmp, arch))
            raw["tutorial_threads_capped"].append(
                _tutorial_images_per_second(nproc, data, epochs, size, tmp, arch, threads=capped))
        steady = {side: summarize([r.steady for r in rates]) for side, rates in raw.items()}
        whole = {side: summarize([r.whole for r in rates]) for side, rates in raw.items()}
        out[data_name] = {
            "raw_steady_images_per_second": {side: [r.steady for r in v] for side, v in raw.items()},
            "raw_images_per_second": {side: [r.whole for r in v] for side, v in raw.items()},
            "recipe": steady["recipe"], "tutorial": steady["tutorial"],
            "ratio": steady["recipe"]["median"] / steady["tutorial"]["median"],
            "tutorial_threads_capped": {**steady["tutorial_threads_capped"], "omp_num_threads": capped},
            "ratio_to_threads_capped": steady["recipe"]["median"] / steady["tutorial_threads_capped"]["median"],
            "whole_loop": {**whole, "ratio": whole["recipe"]["median"] / whole["tutorial"]["median"]},
        }
    return out


def comparisons(throughput: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(model, data kind, entry) for every recipe/tutorial comparison in a results block.

    The ConvNet's entries sit at the top level (files from before ResNet-18 was added read the
    same); ResNet-18's sit under ``resnet18`` unless it was skipped.
    """
    found = []
    for model, block in (("ConvNet", throughput), ("ResNet-18", throughput.get(RESNET, {}))):
        for data in ("synthetic", "cifar10-format"):
            if data in block:
                found.append((model, data, block[data]))
    return found


def _torchvision_version() -> str | None:
    """Asked of the benchmarked interpreter, not this one (which may lack torch)."""
    proc = subprocess.run([PYTHON, "-c", "import torchvision; print(torchvision.__version__)"],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def run(samples: int, nproc: int = 2, epochs: int = 2, size: int = 4000,
        resnet_size: int = 2000) -> dict[str, object]:
    """The ConvNet at ``size`` images; ResNet-18 (about 50x the compute per image) at ``resnet_size``."""
    # Imported here: it needs torch, and table.py and chart.py import this module.
    from cifar_format import write_cifar10_batches
    out: dict[str, object] = {"nproc_per_node": nproc, "epochs": epochs, "images": size,
                              "precision": "fp32", "batch_size_per_process": 100}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        real = write_cifar10_batches(tmp / "cifar10", images=size)
        out.update(_compare(samples, nproc, epochs, size, "convnet", tmp, real))
        version = _torchvision_version()
        if version is None:
            out[RESNET] = {"skipped": "torchvision is not installed (pip install -e '.[vision]')"}
        else:
            real = write_cifar10_batches(tmp / "cifar10-small", images=resnet_size)
            out[RESNET] = {"torchvision": version, "images": resnet_size, "epochs": 1,
                           **_compare(samples, nproc, 1, resnet_size, RESNET, tmp, real)}
    return out


def run_scaling(samples: int, max_procs: int, epochs: int = 2, size: int = 4000) -> dict[str, object]:
    raw: dict[int, list[float]] = {}
    with tempfile.TemporaryDirectory() as name:
        for i in range(samples):
            for nproc in range(1, max_procs + 1):
                progress(f"scaling: {nproc} process(es), round {i + 1}/{samples}")
                raw.setdefault(nproc, []).append(
                    _recipe_images_per_second(nproc, "synthetic", epochs, size, Path(name)).steady)
    base = summarize(raw[1])["median"]
    return {
        "measure": "steady-state images/s (each epoch after its first two steps)",
        "raw_steady_images_per_second": {str(n): v for n, v in raw.items()},
        "points": [
            {"processes": n, "images_per_second": summarize(v)["median"],
             "efficiency": summarize(v)["median"] / (n * base)}
            for n, v in sorted(raw.items())
        ],
    }
