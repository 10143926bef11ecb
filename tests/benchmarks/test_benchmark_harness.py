"""A seconds-long smoke of the benchmark harness (benchmarks are not tests; this checks they run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_quick(tmp_path: Path, only: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--no-chart",
         "--only", only, "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "machine:" in proc.stdout
    (result_file,) = tmp_path.glob("benchmarks-*.json")
    return json.loads(result_file.read_text())


@pytest.mark.slow  # runs two whole benchmarks (about 20 s)
def test_client_and_launch_benchmarks_record_machine_and_raw_samples(tmp_path: Path) -> None:
    results = run_quick(tmp_path, "client,launch")
    assert results["machine"]["cpu_cores"] >= 1
    client = results["benchmarks"]["client"]
    assert client["torch_imported"] is False
    assert len(client["raw_seconds"]["paijob render ddp"]) == 1
    assert client["paijob render ddp"]["ratio_to_bare_python"] > 0
    launch = results["benchmarks"]["launch"]
    for launcher in ("paijob-runtime", "torchrun"):
        samples = launch["raw_seconds"][launcher]
        assert 0 < samples["to_first_step"][0] < samples["to_exit"][0]
    assert launch["to_exit"]["ratio"] > 0


def test_unknown_benchmark_name_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--only", "nonsense",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "unknown benchmark" in proc.stderr
