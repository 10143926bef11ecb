"""GPU-only behaviour: fp16 with GradScaler, apex O2/O3 on CUDA, SyncBatchNorm, nccl. Skipped without CUDA."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from training_helpers import ROOT, TINY, assert_all_ranks_succeeded, run_ranks, summary_of

from paijob.runtime import apex_compat
from paijob.runtime.precision import resolve_policy

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.usefixtures("clean_torch_state"),
]


def test_fp16_policy_uses_grad_scaler_and_learns_on_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from paijob.runtime.recipes.command import main

    policy = resolve_policy("fp16", "cuda")
    assert isinstance(policy.make_scaler(), torch.amp.GradScaler)
    assert main(["cifar10", "--epochs", "3", "--precision", "fp16", "--output-dir", str(tmp_path), *TINY]) == 0
    summary = summary_of(capsys.readouterr().out)
    losses = [h["train_loss"] for h in summary["history"]]
    assert losses[-1] < losses[0] and summary["device"] == "cuda"


@pytest.mark.parametrize("precision", ["fp16", "O1", "O2", "O3", "bf16"])
def test_every_precision_trains_finite_through_the_recipe_on_gpu(precision: str, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 32: fp16 and O2 recipes trained NaN on an H100 and reported success."""
    import math

    from paijob.runtime.recipes.command import main

    code = main(["imagenet", "--arch", "tinyresnet", "--image-size", "64", "--num-classes", "10", "--epochs", "3",
                 "--steps-per-epoch", "12", "--lr", "0.05", "--precision", precision,
                 "--output-dir", str(tmp_path), *TINY])
    summary = summary_of(capsys.readouterr().out)
    assert code == 0 and summary["status"] == "completed", summary.get("nonfinite")
    losses = [h["train_loss"] for h in summary["history"]]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0], losses
    assert summary["nonfinite"]["diverged"] is None


@pytest.mark.parametrize("level", ["O1", "O2", "O3"])
def test_apex_levels_train_on_gpu_with_loss_scaling(level: str) -> None:
    apex_compat.install()
    try:
        from apex import amp

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                    torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 10)).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        model, optimizer = amp.initialize(model, optimizer, opt_level=level,
                                          loss_scale=128.0 if level == "O3" else None, verbosity=0)
        if level == "O3":
            assert model[0].weight.dtype == torch.float16
        x = torch.randn(64, 3, 16, 16, device="cuda")
        y = torch.randint(0, 10, (64,), device="cuda")
        first = last = None
        for _ in range(20):
            loss = torch.nn.functional.cross_entropy(model(x).float(), y)
            optimizer.zero_grad()
            with amp.scale_loss(loss, optimizer) as scaled:
                scaled.backward()
            optimizer.step()
            first = first if first is not None else loss.item()
            last = loss.item()
        assert last < first
        if level != "O3":
            assert amp.state_dict()["loss_scaler0"]["loss_scale"] >= 1.0
    finally:
        apex_compat.uninstall()


def test_convert_syncbn_model_uses_torch_syncbatchnorm_on_gpu() -> None:
    apex_compat.install()
    try:
        from apex.parallel import convert_syncbn_model

        model = convert_syncbn_model(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)))
        assert isinstance(model[1], torch.nn.SyncBatchNorm)
    finally:
        apex_compat.uninstall()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="nccl DDP test needs 2 GPUs")
def test_nccl_ddp_two_gpus_keeps_replicas_equal(tmp_path: Path) -> None:
    results = run_ranks(["-m", "paijob.runtime.recipes", "cifar10", "--arch", "tinynet", "--epochs", "1",
                         "--steps-per-epoch", "3", "--precision", "fp16", "--output-dir", str(tmp_path), *TINY],
                        2, ROOT, PAIJOB_BACKEND="nccl")
    assert_all_ranks_succeeded(results)
    assert summary_of(results[0].stdout)["replicas_in_sync"] is True
