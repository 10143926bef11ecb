"""Precision policy grammar, the apex opt-level mapping, the CPU fallback and the loss scaler."""

from __future__ import annotations

import pytest
import torch

from paijob.runtime.precision import (
    LossScaler,
    PrecisionError,
    parse_precision,
    precision_from_env,
    resolve_policy,
)


@pytest.mark.parametrize("text,base,apex", [
    ("fp32", "fp32", False), ("FP16", "fp16", False), ("bf16", "bf16", False),
    ("O0", "O0", False), ("o2", "O2", False), ("apex:O1", "O1", True), ("apex:o3", "O3", True),
    ("", "fp32", False), (None, "fp32", False),
])
def test_policy_grammar_accepts_documented_forms(text: str | None, base: str, apex: bool) -> None:
    spec = parse_precision(text)
    assert (spec.base, spec.prefer_real_apex) == (base, apex)


@pytest.mark.parametrize("text", ["fp8", "O4", "apex:fp16", "apex:"])
def test_policy_grammar_rejects_unknown_with_the_grammar(text: str) -> None:
    with pytest.raises(PrecisionError, match="expected one of"):
        parse_precision(text)


def test_zero_instead_of_letter_o_gets_a_hint() -> None:
    with pytest.raises(PrecisionError, match="letter O, not zero"):
        parse_precision("02")


def test_cli_value_beats_env_and_env_beats_default() -> None:
    assert precision_from_env(None, {"PAIJOB_PRECISION": "bf16"}).base == "bf16"
    assert precision_from_env("O1", {"PAIJOB_PRECISION": "bf16"}).base == "O1"
    assert precision_from_env(None, {}).base == "fp32"


@pytest.mark.parametrize("level,compute,cast,scale,keep_bn", [
    ("O0", "fp32", False, 1.0, False),
    ("O1", "fp16", False, "dynamic", False),
    ("O2", "fp16", False, "dynamic", True),
    ("O3", "fp16", True, 1.0, False),
    ("fp16", "fp16", False, "dynamic", True),
    ("bf16", "bf16", False, 1.0, True),
])
def test_opt_levels_map_onto_native_policies_on_gpu(level: str, compute: str, cast: bool,
                                                    scale: object, keep_bn: bool) -> None:
    policy = resolve_policy(level, "cuda")
    assert (policy.compute, policy.cast_model, policy.loss_scale, policy.keep_batchnorm_fp32) == (
        compute, cast, scale, keep_bn)


def test_fp16_on_cpu_falls_back_to_bf16_with_one_notice(caplog: pytest.LogCaptureFixture) -> None:
    from paijob.runtime import precision

    precision._notices_given.clear()
    with caplog.at_level("WARNING"):
        first = resolve_policy("fp16", "cpu")
        resolve_policy("fp16", "cpu")
    assert first.compute == "bf16" and not first.scaler_enabled
    assert sum("runs as bf16" in r.message for r in caplog.records) == 1


def test_apex_prefix_without_apex_uses_native_mapping_with_notice(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"):
        policy = resolve_policy("apex:O2", "cuda")
    assert not policy.use_real_apex and policy.compute == "fp16"
    assert any("apex.amp is not importable" in r.message for r in caplog.records)


def test_loss_scale_and_keep_batchnorm_overrides() -> None:
    policy = resolve_policy("O1", "cuda", loss_scale="128", keep_batchnorm_fp32="True")
    assert policy.loss_scale == 128.0 and policy.keep_batchnorm_fp32
    with pytest.raises(PrecisionError):
        resolve_policy("O1", "cuda", loss_scale="-3")


def test_o3_casts_the_model_but_keeps_batchnorm_fp32_when_asked() -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    policy = resolve_policy("O3", "cpu", keep_batchnorm_fp32=True)
    policy.prepare_model(model)
    assert model[0].weight.dtype == torch.bfloat16
    assert model[1].weight.dtype == torch.float32 and model[1].running_mean.dtype == torch.float32
    out = model(policy.cast_input(torch.randn(2, 3, 8, 8)))
    assert out.shape == (2, 4, 6, 6)


def test_dynamic_loss_scaler_skips_overflow_steps_and_halves_the_scale() -> None:
    param = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([param], lr=1.0)
    scaler = LossScaler("dynamic", init_scale=8.0, growth_interval=2)
    param.grad = torch.tensor([float("inf"), 1.0, 1.0])
    scaler.step(optimizer)
    scaler.update()
    assert torch.equal(param.detach(), torch.ones(3)) and scaler.get_scale() == 4.0
    optimizer.zero_grad()
    for _ in range(2):
        scaler.scale(param.sum()).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    assert torch.allclose(param.detach(), torch.full((3,), -1.0))  # true gradient 1, twice
    assert scaler.get_scale() == 8.0  # grew after growth_interval clean steps


def test_static_loss_scaler_never_changes_scale() -> None:
    scaler = LossScaler(128.0)
    param = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([param], lr=1.0)
    param.grad = torch.tensor([float("nan")])
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 128.0 and scaler.last_step_skipped
