"""The GPU side of the benchmark harness, checked where it can be: on this machine's CPU.

The measurements themselves need a GPU; these tests pin that the pieces run, that a machine
without CUDA records the GPU block as skipped (and the table says so), and that the JPEG
tree generator and the seed-004 re-creation are guarded when PIL / CUDA are absent.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

import table  # noqa: E402


@pytest.mark.slow
def test_ceiling_step_runs_and_reports_images_per_second(tmp_path: Path) -> None:
    report = tmp_path / "ceiling.json"
    proc = subprocess.run([sys.executable, str(BENCH / "gpu_ceiling.py"), "--arch", "tinynet", "--batch-size", "4",
                           "--image-size", "16", "--num-classes", "3", "--steps", "2", "--warmup", "1",
                           "--precision", "bf16", "--report-json", str(report)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(report.read_text())
    assert found["images_per_second"] > 0 and found["steps"] == 2 and found["precision"] == "bf16"
    assert found["device"] == (torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only record")
def test_without_cuda_the_gpu_block_is_skipped_and_the_table_says_so(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "run.py"), "--quick", "--no-chart", "--only", "gpu",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (result_file,) = tmp_path.glob("benchmarks-*.json")
    results = json.loads(result_file.read_text())
    assert "no CUDA GPU" in results["benchmarks"]["gpu"]["skipped"]
    assert "not measured: no CUDA GPU" in table.table(results)


def test_gpu_table_rows_quote_the_medians_they_divide() -> None:
    entry = {"recipe_eager": {"median": 90.0}, "ceiling_eager": {"median": 100.0},
             "recipe_compiled": {"median": 60.0}, "ceiling_compiled": {"median": 120.0},
             "of_ceiling_eager": 0.9, "of_ceiling_compiled": 0.5, "compile_startup_seconds": {"median": 42.0}}
    gpu = {"gpu": "Some GPU", "arch": "resnet50", "batch_size_per_gpu": 256, "synthetic": {"bf16": entry},
           "jpeg": {"skipped": "PIL (Pillow) is not installed"},
           "scaling": {"points": [{"gpus": 1, "images_per_second": 100.0, "efficiency": 1.0},
                                  {"gpus": 2, "images_per_second": 190.0, "efficiency": 0.95}]}}
    rows = "\n".join(table.gpu_rows(gpu))
    assert "eager, bf16, Some GPU, resnet50, batch 256 | 0.90 (90 / 100)" in rows
    assert "compiled, bf16" in rows and "0.50 (60 / 120)" in rows and "42 s" in rows
    assert "not measured: PIL" in rows and "100 → 190 (efficiency 95%)" in rows


def test_jpeg_tree_generator_writes_an_imagefolder_layout(tmp_path: Path) -> None:
    from jpeg_tree import pil_missing, write_tree

    if pil_missing():
        proc = subprocess.run([sys.executable, str(BENCH / "jpeg_tree.py"), str(tmp_path / "t")],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "Pillow" in proc.stderr
        return
    root = write_tree(tmp_path / "t", classes=2, train_per_class=3, val_per_class=1, size=(64, 48))
    assert sorted(p.name for p in (root / "train").iterdir()) == ["class0000", "class0001"]
    assert len(list((root / "train").rglob("*.jpg"))) == 6 and len(list((root / "val").rglob("*.jpg"))) == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without CUDA")
def test_seed004_tutorial_recreation_needs_cuda(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "tutorial_imagenet_apex.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "needs a CUDA GPU" in proc.stderr


@pytest.mark.skipif(importlib.util.find_spec("numpy") is None, reason="fast_collate uses numpy, as the tutorial")
def test_fast_collate_stacks_hwc_images_into_uint8_nchw() -> None:
    from tutorial_imagenet_apex import fast_collate

    class FakePil:  # what fast_collate needs of a PIL image: .size and the array protocol
        def __init__(self, value: int) -> None:
            import numpy as np

            self.array = np.full((2, 3, 3), value, dtype=np.uint8)
            self.size = (3, 2)

        def __array__(self, dtype: object = None, copy: object = None) -> object:
            return self.array

    images, targets = fast_collate([(FakePil(5), 1), (FakePil(7), 0)])
    assert images.shape == (2, 3, 2, 3) and images.dtype == torch.uint8
    assert images[0].unique().tolist() == [5] and images[1].unique().tolist() == [7]
    assert targets.tolist() == [1, 0]


# --- gpu_check.py: the budgeted check a lent GPU runs (issue 32) ---------------------------------

import gpu_check  # noqa: E402

TINY_CHECK = ["--allow-cpu", "--arch", "tinynet", "--batch-size", "8", "--image-size", "16", "--num-classes", "3",
              "--steps", "6", "--warmup", "2", "--recipe-lr", "30", "--workers", "1"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU run of the harness")
@pytest.mark.slow  # ~20 s of real jobs: the slow stage keeps the README's command under 10 min
def test_gpu_check_measures_pairs_side_by_side_and_skips_what_would_not_fit(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "gpu_check.py"), *TINY_CHECK, "--budget", "400",
                           "--pairs", "bf16,fp16,bf16-compiled", "--guess-eager", "20", "--guess-compiled", "1e6",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan_at = proc.stdout.index("plan (400 s budget, 6 steps a side")
    assert plan_at < proc.stdout.index("bf16 ceiling:")  # the plan comes first
    assert "bf16-compiled" in proc.stdout and "skip: over budget" in proc.stdout
    (result_file,) = tmp_path.glob("*-cpu*.json")
    found = json.loads(result_file.read_text())
    assert found["machine"]["cpu_cores"] >= 1 and found["budget_seconds"] == 400
    assert 0 < found["spent_seconds"] < 400
    assert [row["pair"] for row in found["plan"]] == ["bf16", "fp16", "bf16-compiled"]
    assert "of the budget left" in found["pairs"]["bf16-compiled"]["skipped"]
    for name in ("bf16", "fp16"):
        pair = found["pairs"][name]
        ceiling, recipe = pair["sides"]["ceiling"], pair["sides"]["recipe"]
        assert ceiling["steps"] == 6 and recipe["steps"] == 6  # after warm-up, on each side
        assert pair["ratio"] == pytest.approx(recipe["images_per_second"] / ceiling["images_per_second"])
        assert pair["target"] == 0.9 and pair["meets_target"] == (pair["ratio"] >= 0.9)
        assert pair["losses_finite_and_falling"] and recipe["data_placement"] == "device"
        assert ceiling["seconds"] > 0 and recipe["seconds"] > 0 and recipe["command"][1] == "train"


def test_the_plan_counts_each_pair_against_what_the_pairs_before_it_leave() -> None:
    guesses = {"eager": 40.0, "compiled": 150.0, "imagefolder": 60.0}
    rows = gpu_check.plan(["bf16", "fp16", "bf16-compiled", "O2"], {"eager": [30.0, 50.0]}, guesses, {}, 250.0)
    assert [(r["pair"], r["estimated_seconds"], r["fits"]) for r in rows] == [
        ("bf16", 100.0, True), ("fp16", 100.0, True), ("bf16-compiled", 300.0, False), ("O2", 100.0, False)]
    folder = gpu_check.plan(["imagefolder-O2"], {}, guesses, {"imagefolder-O2": 30.0}, 200.0)
    assert folder == [{"pair": "imagefolder-O2", "estimated_seconds": 150.0, "fits": True}]


def test_a_side_is_killed_when_the_budget_runs_out(tmp_path: Path) -> None:
    side = gpu_check.Side("ceiling", "eager", [sys.executable, "-c", "import time; time.sleep(60)"],
                          lambda out, tmp: {})
    result = gpu_check.run_side(side, gpu_check.Budget(1.0), tmp_path)
    assert result["error"] == "killed: the budget ran out" and not result["finite"] and result["seconds"] < 30


def test_recipe_losses_must_be_finite_and_falling(tmp_path: Path) -> None:
    def read(losses: list[str], status: str = "completed") -> dict[str, object]:
        (tmp_path / "recipe-summary.json").write_text(json.dumps(
            {"status": status, "steady_images_per_sec": 10.0, "data_placement": "device", "nonfinite": {"steps": 0}}))
        lines = [f"[w0] paijob: epoch 1/1 step {i + 1}/{len(losses)} loss {v} lr 0.1 5.0 img/s"
                 for i, v in enumerate(losses)]
        return gpu_check._read_recipe("\n".join(lines), tmp_path)

    good = read(["4.6", "4.4", "4.1"])
    assert good["finite"] and good["falling"] and good["steps"] == 1 and good["images_per_second"] == 10.0
    assert not read(["4.6", "4.7"])["falling"]
    assert not read(["4.6", "nan", "4.1"])["finite"]
    assert not read(["4.6", "4.1"], status="diverged")["finite"]


def test_result_files_are_named_for_the_gpu() -> None:
    assert gpu_check.machine_tag({"gpus": ["NVIDIA H100 80GB HBM3"]}) == "h100x1"
    assert gpu_check.machine_tag({"gpus": ["NVIDIA H200", "NVIDIA H200"]}) == "h200x2"
    assert gpu_check.machine_tag({"gpus": [], "cpu_cores": 2}) == "cpu2"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without CUDA")
def test_gpu_check_without_cuda_says_where_to_run_it(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "gpu_check.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no CUDA GPU" in proc.stderr and not list(tmp_path.iterdir())
