"""A recipe never reports success on a diverged run (issue 32): the guard, its exit code and its line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from training_helpers import TINY

from paijob.common.exitcodes import DIVERGED, RUNTIME_EXIT_CODES, openpai_verdict
from paijob.runtime.recipes.command import main
from paijob.runtime.recipes.divergence import DivergenceGuard

pytestmark = pytest.mark.usefixtures("clean_torch_state")
BLOW_UP = ["--lr", "1e4"]  # SGD at this rate sends the ConvNet's loss to inf, then NaN, within a few steps


def _diverged_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "diverged at" in r.getMessage()]


def test_a_loss_non_finite_for_n_steps_stops_the_run_with_exit_136_and_one_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO"):
        code = main(["cifar10", "--epochs", "3", "--steps-per-epoch", "8", "--log-interval", "2",
                     "--max-nonfinite-steps", "3", "--precision", "bf16", "--output-dir", str(tmp_path),
                     *TINY[:4], *BLOW_UP])
    assert code == DIVERGED == 136
    (line,) = _diverged_lines(caplog)
    assert line.startswith("paijob: diverged at epoch 1 step ")
    assert "non-finite for 3 consecutive steps" in line and "--precision bf16" in line and "try " in line
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["exit_code"] == 136 and summary["epochs"] == 0
    found = summary["nonfinite"]
    assert found["steps"] >= 3 and found["longest_run"] >= 3 and found["limit"] == 3
    assert found["diverged"]["epoch"] == 1 and found["first_steps"][0][0] == 1
    assert not (tmp_path / "checkpoints").exists() or not list((tmp_path / "checkpoints").glob("*.pt"))


def test_non_finite_weights_fail_even_a_run_shorter_than_the_limit(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The issue's O2 run: 8 steps, NaN from step 4, exit 0. Fewer steps than the limit still fail."""
    with caplog.at_level("INFO"):
        code = main(["cifar10", "--epochs", "1", "--steps-per-epoch", "6", "--output-dir", str(tmp_path),
                     *TINY, *BLOW_UP])
    assert code == DIVERGED
    (line,) = _diverged_lines(caplog)
    assert "epoch 1 step 6: the model's weights are no longer finite" in line
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["checkpoint"] is None


def test_a_healthy_run_records_no_non_finite_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["cifar10", "--epochs", "1", "--steps-per-epoch", "4", "--output-dir", str(tmp_path), *TINY])
    assert code == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["nonfinite"] == {"steps": 0, "first_steps": [], "longest_run": 0, "limit": 10,
                                    "loss_scale": None, "diverged": None}


def test_the_guard_trips_on_a_run_of_n_not_on_isolated_non_finite_losses() -> None:
    guard = DivergenceGuard(3, torch.device("cpu"))
    losses = [1.0, math.inf, 2.0, math.nan, math.inf, 0.5, math.inf, math.nan, math.inf, math.nan]
    for step, value in enumerate(losses[:6], start=1):
        guard.record(torch.tensor(value), 1, step)
    assert guard.check() is None  # two in a row at most: what a loss scaler skips
    for step, value in enumerate(losses[6:], start=7):
        guard.record(torch.tensor(value), 1, step)
    tripped = guard.check()
    assert tripped is not None and (tripped.epoch, tripped.step) == (1, 9)
    summary = guard.summary(None)
    assert summary["steps"] == 7 and summary["longest_run"] == 4
    assert summary["first_steps"] == [[1, 2], [1, 4], [1, 5], [1, 7], [1, 8], [1, 9], [1, 10]]


def test_the_guard_reads_the_device_only_when_asked_and_keeps_up_with_long_intervals() -> None:
    guard = DivergenceGuard(2, torch.device("cpu"))
    for step in range(1, 600):  # more than the buffer holds between two reads
        guard.record(torch.tensor(math.nan if step > 590 else 1.0), 1, step)
    tripped = guard.check()
    assert tripped is not None and tripped.step == 592 and guard.summary(None)["steps"] == 9


def test_a_collapsed_loss_scale_trips_the_guard() -> None:
    guard = DivergenceGuard(10, torch.device("cpu"))
    assert guard.check_scale(2.0**16, 1, 5) is None and guard.check_scale(None, 1, 6) is None
    tripped = guard.check_scale(0.25, 2, 7)
    assert tripped is not None and "loss scale collapsed to 0.25" in tripped.reason and tripped.epoch == 2


def test_exit_136_is_documented_and_openpai_never_retries_it() -> None:
    assert any(entry.codes == "136" and "diverged" in entry.meaning for entry in RUNTIME_EXIT_CODES)
    assert openpai_verdict(DIVERGED)[1] == "NEVER_RETRY"


def test_max_nonfinite_steps_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["cifar10", "--max-nonfinite-steps", "0"])
    assert exit_info.value.code == 2 and "at least 1" in capsys.readouterr().err


def test_every_rank_stops_together_and_rank_0_alone_prints_the_line(tmp_path: Path) -> None:
    from training_helpers import ROOT, run_ranks, summary_of

    results = run_ranks(["-m", "paijob.runtime.recipes", "cifar10", "--arch", "tinynet", "--epochs", "2",
                         "--steps-per-epoch", "8", "--log-interval", "2", "--max-nonfinite-steps", "3",
                         "--output-dir", str(tmp_path), *TINY[:4], *BLOW_UP], 2, ROOT)
    assert [r.returncode for r in results] == [DIVERGED, DIVERGED], [r.stderr[-2000:] for r in results]
    assert results[0].stderr.count("paijob: diverged at epoch ") == 1
    assert "diverged at" not in results[1].stderr
    summary = summary_of(results[0].stdout)
    assert summary["status"] == "diverged" and summary["world_size"] == 2
