"""The recipes' console lines: an interval that shows progress on short epochs, a stable format."""

from __future__ import annotations

import logging
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from training_helpers import base_env

from paijob.runtime.recipes.command import main
from paijob.runtime.recipes.loglines import (
    LINES_PER_EPOCH,
    MAX_INTERVAL,
    epoch_line,
    log_interval,
    parse_line,
    step_line,
    summary_line,
)


def _lines_in_epoch(interval: int, steps: int) -> int:
    return sum(1 for done in range(1, steps + 1) if done % interval == 0 or done == steps)


@pytest.mark.parametrize("steps", [1, 2, 3, 7, 10, 32, 99, 100, 500, 501, 5000])
def test_auto_interval_shows_a_few_lines_in_any_epoch_and_at_most_every_fifty_steps(steps: int) -> None:
    interval = log_interval(None, steps)
    lines = _lines_in_epoch(interval, steps)
    assert 1 <= interval <= MAX_INTERVAL
    assert min(steps, LINES_PER_EPOCH // 2) <= lines <= max(LINES_PER_EPOCH, math.ceil(steps / MAX_INTERVAL)) + 1


def test_a_given_interval_is_kept() -> None:
    assert [log_interval(n, 32) for n in (1, 7, 50, 1000)] == [1, 7, 50, 1000]
    assert log_interval(0, 32) == 1


def test_the_documented_formats_round_trip() -> None:
    step = step_line(1, 2, 4, 32, 2.302585, 0.02, 850.1234)
    assert step == "paijob: epoch 1/2 step 4/32 loss 2.3026 lr 0.02 850.1 img/s"
    record = {"train_loss": 2.2905, "train_top1": 0.1125, "eval_loss": 2.2866, "eval_top1": 0.078125,
              "images_per_sec": 1234.56}
    epoch = epoch_line(2, 2, record)
    assert epoch == "paijob: epoch 2/2 train loss 2.2905 top1 11.25% | eval loss 2.2866 top1 7.81% | 1234.6 img/s"
    summary = {"status": "preempted", "epochs": 1, "epochs_requested": 2, "images_per_sec": 99.94,
               "wall_time_s": 12.345, "final": {"eval_loss": 2.5, "eval_top1": 0.5}}
    line = summary_line(summary, "/out dir/summary.json")
    assert line == ("paijob: summary preempted 1/2 epochs | eval loss 2.5000 top1 50.00% | 99.9 img/s | 12.3 s | "
                    "/out dir/summary.json")

    parsed = parse_line("[default0]:" + step + "\n")  # a launcher's prefix is allowed
    assert parsed is not None and (parsed.kind, parsed.epoch, parsed.step, parsed.steps) == ("step", 1, 4, 32)
    assert (parsed.loss, parsed.lr, parsed.images_per_sec) == (2.3026, 0.02, 850.1)
    parsed = parse_line(epoch)
    assert parsed is not None and parsed.kind == "epoch" and parsed.eval_top1 == pytest.approx(0.0781)
    assert (parsed.loss, parsed.train_top1, parsed.eval_loss) == (2.2905, 0.1125, 2.2866)
    parsed = parse_line(line)
    assert parsed is not None and (parsed.kind, parsed.status, parsed.path) == ("summary", "preempted",
                                                                                "/out dir/summary.json")
    no_eval = summary_line({**summary, "final": {}}, "s.json")
    parsed = parse_line(no_eval)
    assert parsed is not None and parsed.eval_loss is None and parsed.seconds == 12.3


def test_odd_numbers_parse_and_other_lines_do_not() -> None:
    parsed = parse_line(step_line(3, 90, 1, 5000, float("nan"), 1e-5, 0.0))
    assert parsed is not None and math.isnan(parsed.loss or 0.0) and parsed.lr == 1e-5
    for other in ("paijob: resumed from x (epoch 1, step 0)", "epoch 1/2 step 3/4 loss 1 lr 1 2 img/s",
                  "paijob: epoch 1/2 step 3/4 loss high lr 1 2 img/s", ""):
        assert parse_line(other) is None


@pytest.mark.usefixtures("clean_torch_state")
def test_a_laptop_sized_epoch_prints_several_parseable_progress_lines(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    """The laptop example's epoch is 32 steps a rank: the old 50-step interval showed one line an epoch."""
    caplog.set_level(logging.INFO, logger="paijob.recipes")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a subprocess of these tests: the 2 cores are shared
    try:
        code = main(["cifar10", "--arch", "tinynet", "--epochs", "2", "--synthetic-size", "1024",
                     "--batch-size", "32", "--eval-steps", "1", "--output-dir", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    out = capsys.readouterr().out
    points = [parse_line(line) for line in out.splitlines() + caplog.messages]
    steps = [p for p in points if p is not None and p.kind == "step"]
    for epoch in (1, 2):
        mine = [p for p in steps if p.epoch == epoch]
        assert 3 <= len(mine) <= LINES_PER_EPOCH and mine[-1].step == mine[-1].steps == 32
        assert all(p.images_per_sec > 0 and p.loss is not None and p.loss > 0 for p in mine)
    assert [p.epoch for p in points if p is not None and p.kind == "epoch"] == [1, 2]
    last = out.strip().splitlines()[-1]
    summary = parse_line(last)
    assert summary is not None and summary.kind == "summary" and summary.path == str(tmp_path / "summary.json")
    # short whatever the output folder's path: the line carries it whole (a TMPDIR 20 characters longer made
    # 201 of 200, issue 54), so what is bounded is the rest of the line
    assert (tmp_path / "summary.json").is_file() and len(last) - len(summary.path) < 120


def test_under_paijob_runtime_the_lines_reach_one_log_in_order_and_the_summary_last(tmp_path: Path) -> None:
    """A task's log is the runtime's stdout and stderr in one pipe; torch's agent tails each worker's stdout and
    stderr in a thread of its own, so an epoch line on stderr came after the summary printed just after it."""
    env = {k: v for k, v in base_env().items() if not k.startswith(("PAI_", "PAIJOB_", "TORCHELASTIC_"))}
    env["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run(
        [sys.executable, "-m", "paijob.runtime.cli", "train", "--nproc-per-node", "1", "--recipe", "cifar10",
         "--data", "synthetic", "--arch", "tinynet", "--synthetic-size", "64", "--batch-size", "8",
         "--steps-per-epoch", "2", "--eval-steps", "1", "--epochs", "2", "--log-interval", "1",
         "--output-dir", str(tmp_path)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
        check=False)
    assert done.returncode == 0, done.stdout[-3000:]
    points = [point for point in map(parse_line, done.stdout.splitlines()) if point is not None]
    assert [(p.kind, p.epoch, p.step) for p in points] == [
        ("step", 1, 1), ("step", 1, 2), ("epoch", 1, None),
        ("step", 2, 1), ("step", 2, 2), ("epoch", 2, None),
        ("summary", 2, None)], done.stdout[-3000:]
    assert (tmp_path / "summary.json").is_file()
