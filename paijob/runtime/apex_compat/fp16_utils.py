"""The parts of ``apex.fp16_utils`` legacy training scripts use, on native torch."""

from __future__ import annotations

from typing import Any

import torch

from paijob.runtime.precision import is_batchnorm

__paijob_shim__ = True


def to_python_float(t: Any) -> float:
    if hasattr(t, "item"):
        return float(t.item())
    return float(t[0]) if isinstance(t, (list, tuple)) else float(t)


class tofp16(torch.nn.Module):  # noqa: N801 - apex's name
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return input.half()


def BN_convert_float(module: torch.nn.Module) -> torch.nn.Module:  # noqa: N802 - apex's name
    if is_batchnorm(module):
        module.float()
    for child in module.children():
        BN_convert_float(child)
    return module


def network_to_half(network: torch.nn.Module) -> torch.nn.Module:
    return torch.nn.Sequential(tofp16(), BN_convert_float(network.half()))


class FP16_Optimizer:  # noqa: N801 - apex's name
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise ImportError(
            "apex.fp16_utils.FP16_Optimizer was deprecated by apex itself and is not provided "
            "by paijob's compatibility layer; use amp.initialize(model, optimizer, opt_level='O2')"
        )
