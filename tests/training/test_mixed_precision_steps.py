"""The optimizer and loss scaler a recipe builds for a GPU, driven on this CPU (issue 32).

On a CPU the recipes run fp16 as bf16 and never build a GradScaler, so a run here cannot see
what fp16 does on a GPU. These tests resolve the policy for ``cuda`` and build its exact
optimizer (fused SGD) and scaler (``GradScaler``) on the CPU, where torch 2.13 has both, then
feed it an overflowing step as fp16's dynamic scale routinely makes in its first steps.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn

from paijob.runtime.precision import resolve_policy
from paijob.runtime.recipes.stepper import make_optimizer, make_sgd

# Each overflow test runs on the CPU's fused kernel, and on CUDA's too where there is a GPU.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                 reason="needs a CUDA GPU"))]


def _model(device: str = "cpu") -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 6 * 6, 3)).to(device)


def _batch(device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    images, labels = torch.randn(8, 3, 8, 8, generator=generator), torch.randint(0, 3, (8,), generator=generator)
    return images.to(device), labels.to(device)


def _step(model: nn.Module, optimizer: torch.optim.Optimizer, scaler: Any, overflow: bool = False) -> float:
    images, labels = _batch(next(model.parameters()).device.type)
    loss = nn.functional.cross_entropy(model(images), labels)
    scaled = scaler.scale(loss * float("inf") if overflow else loss)
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def _state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list[Any]]:
    """Weights and every optimizer state tensor (momentum buffers), copied."""
    weights = {name: p.detach().clone() for name, p in model.named_parameters()}
    states = [copy.deepcopy(optimizer.state[p]) for p in model.parameters()]
    return weights, states


def _same(a: tuple[dict[str, torch.Tensor], list[Any]], b: tuple[dict[str, torch.Tensor], list[Any]]) -> bool:
    weights_a, states_a = a
    weights_b, states_b = b
    if any(not torch.equal(weights_a[k], weights_b[k]) for k in weights_a):
        return False
    for one, other in zip(states_a, states_b, strict=True):
        if one.keys() != other.keys():
            return False
        for key in one:
            x, y = one[key], other[key]
            if isinstance(x, torch.Tensor) and not torch.equal(x, y):
                return False
    return True


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision", ["fp16", "O1", "O2"])
def test_the_gpu_fp16_step_skips_an_overflow_cleanly_and_trains_on(precision: str, device: str) -> None:
    """The recipe's own factory, for a GPU policy: an inf gradient changes nothing, training goes on."""
    policy = resolve_policy(precision, "cuda")
    model = _model(device)
    optimizer, scaler = make_optimizer(policy, model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    assert isinstance(scaler, torch.amp.GradScaler) and optimizer.defaults.get("fused") is True  # the GPU path

    before = _state(model, optimizer)
    _step(model, optimizer, scaler, overflow=True)
    assert _same(before, _state(model, optimizer)), "the skipped step changed weights or momentum"
    assert scaler.get_scale() == 2.0**15  # halved, as GradScaler does on an overflow

    losses = [_step(model, optimizer, scaler) for _ in range(6)]
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert all(loss == loss and abs(loss) < 1e3 for loss in losses) and losses[-1] < losses[0], losses
    for p in model.parameters():
        assert torch.isfinite(optimizer.state[p]["momentum_buffer"]).all()


@pytest.mark.parametrize("device", DEVICES)
def test_the_fused_gpu_step_equals_plain_sgd_through_overflows(device: str) -> None:
    """Zeroed momentum buffers change nothing but the skipped step: the same trajectory as unfused SGD."""
    policy = resolve_policy("fp16", "cuda")
    fused_model, plain_model = _model(device), _model(device)
    fused, fused_scaler = make_optimizer(policy, fused_model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    plain = torch.optim.SGD(plain_model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, foreach=False)
    plain_scaler = torch.amp.GradScaler(device)
    for step in range(6):
        overflow = step in (0, 3)
        _step(fused_model, fused, fused_scaler, overflow)
        _step(plain_model, plain, plain_scaler, overflow)
    for a, b in zip(fused_model.parameters(), plain_model.parameters(), strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_the_ceiling_benchmarks_fused_sgd_survives_an_overflowing_first_step(device: str) -> None:
    """``make_sgd(fused=True)`` under GradScaler, as benchmarks/gpu_ceiling.py steps fp16."""
    model = _model(device)
    optimizer = make_sgd(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4, fused=True)
    scaler = torch.amp.GradScaler(device)
    _step(model, optimizer, scaler, overflow=True)
    losses = [_step(model, optimizer, scaler) for _ in range(4)]
    for p in model.parameters():
        assert torch.isfinite(optimizer.state[p]["momentum_buffer"]).all()
        assert optimizer.state[p]["momentum_buffer"].abs().max() < 1e3
    assert losses[-1] < losses[0], losses


@pytest.mark.parametrize("precision", ["bf16", "fp32", "O3"])
def test_without_a_gradscaler_the_gpu_step_stays_fused(precision: str) -> None:
    policy = resolve_policy(precision, "cuda")
    model = _model()
    optimizer, scaler = make_optimizer(policy, model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    assert optimizer.defaults.get("fused") is True and not isinstance(scaler, torch.amp.GradScaler)


def test_a_cpu_policy_builds_the_plain_optimizer() -> None:
    policy = resolve_policy("fp16", "cpu")  # runs as bf16 on a CPU: no scaler
    model = _model()
    optimizer, scaler = make_optimizer(policy, model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    assert not optimizer.defaults.get("fused") and not scaler.is_enabled()


def test_apex_fused_sgd_survives_a_gradscaler_skipping_its_first_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """``apex.optimizers.FusedSGD`` (the compat layer) is torch's fused SGD on a GPU; a script may
    step it with a native GradScaler. Forced fused here, on the CPU's fused kernel."""
    from paijob.runtime.apex_compat import optimizers

    monkeypatch.setattr(optimizers, "_fused_ok", lambda params: True)
    model = _model()
    optimizer = optimizers.FusedSGD(model.parameters(), lr=0.1, momentum=0.9)
    assert optimizer.defaults.get("fused") is True
    scaler = torch.amp.GradScaler("cpu")
    _step(model, optimizer, scaler, overflow=True)
    losses = [_step(model, optimizer, scaler) for _ in range(4)]
    assert all(torch.isfinite(p).all() for p in model.parameters()) and losses[-1] < losses[0], losses
    damped = optimizers.FusedSGD(_model().parameters(), lr=0.1, momentum=0.9, dampening=0.1)
    assert not damped.defaults.get("fused")  # zero buffers would change a damped first step


def test_the_gpu_fp16_step_reads_nothing_back_from_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fused SGD takes GradScaler's overflow flag on the device; plain SGD would cost a host read a step.

    On a GPU each of these calls waits for the queued kernels; on a CPU they are the same calls,
    so counting them pins what ``torch.cuda.set_sync_debug_mode("error")`` checks there.
    """
    policy = resolve_policy("fp16", "cuda")
    model = _model()
    optimizer, scaler = make_optimizer(policy, model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    images, labels = _batch()
    calls: list[str] = []
    for name in ("item", "tolist", "cpu", "__bool__", "__float__", "__int__", "nonzero"):
        original = getattr(torch.Tensor, name)

        def counting(tensor: torch.Tensor, *args: Any, _name: str = name, _original: Any = original) -> Any:
            calls.append(_name)
            return _original(tensor, *args)

        monkeypatch.setattr(torch.Tensor, name, counting)
    for overflow in (True, False, False):
        loss = nn.functional.cross_entropy(model(images), labels)
        scaler.scale(loss * float("inf") if overflow else loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    assert calls == []


@pytest.mark.filterwarnings("ignore:CUDA is not available")  # autocast("cuda") is off on a CPU
def test_the_recipe_trains_on_the_gpus_fp16_optimizer_and_scaler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The whole recipe loop on the fp16 policy a GPU gets (fused SGD, GradScaler), here on the CPU.

    Only the policy's device is the GPU's (so the forward runs fp32 here); the optimizer, the
    scaler, the stepper, the divergence guard's loss-scale reading, the checkpoint of the
    scaler and the resume are the recipe's own: none of it ran in the CPU suite before.
    """
    from training_helpers import TINY

    from paijob.runtime.recipes import startup
    from paijob.runtime.recipes.command import main

    real = startup.resolve_policy
    built: list[Any] = []

    def as_on_a_gpu(spec: Any, device: Any, **kwargs: Any) -> Any:
        return real(spec, "cuda", **kwargs)

    real_make = startup.make_optimizer

    def recording(*args: Any, **kwargs: Any) -> Any:
        built.append(real_make(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(startup, "resolve_policy", as_on_a_gpu)
    monkeypatch.setattr(startup, "make_optimizer", recording)
    out = tmp_path / "run"
    assert main(["cifar10", "--epochs", "2", "--precision", "fp16", "--output-dir", str(out), *TINY]) == 0
    optimizer, scaler = built[0]
    assert optimizer.defaults["fused"] and isinstance(scaler, torch.amp.GradScaler)
    summary = json.loads((out / "summary.json").read_text())
    losses = [epoch["train_loss"] for epoch in summary["history"]]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0], losses
    assert summary["nonfinite"]["loss_scale"] == 2.0**16 and summary["nonfinite"]["steps"] == 0
    assert "autocast fp16, loss scale dynamic" in summary["precision_detail"]
    # a third epoch resumes from the checkpoint, GradScaler's state included
    assert main(["cifar10", "--epochs", "3", "--precision", "fp16", "--output-dir", str(out), *TINY]) == 0
    resumed = json.loads((out / "summary.json").read_text())
    assert resumed["resumed_from"] and resumed["epochs"] == 3 and built[-1][1].get_scale() == 2.0**16
    capsys.readouterr()
