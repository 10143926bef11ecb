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
