"""``apex.optimizers`` names mapped onto torch optimizers (fused/foreach kernels where torch has them)."""

from __future__ import annotations

from typing import Any

import torch

from paijob.runtime.precision import zero_momentum_buffers

__paijob_shim__ = True


def _fused_ok(params: list[Any]) -> bool:
    tensors = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
    return bool(tensors) and all(t.is_cuda and t.is_floating_point() for t in tensors)


def FusedAdam(params: Any, lr: float = 1e-3, bias_correction: bool = True,  # noqa: N802
              betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
              adam_w_mode: bool = True, weight_decay: float = 0.0, amsgrad: bool = False,
              set_grad_none: bool = True, **_: Any) -> torch.optim.Optimizer:
    params = list(params)
    cls = torch.optim.AdamW if adam_w_mode else torch.optim.Adam
    return cls(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
               amsgrad=amsgrad, fused=_fused_ok(params) or None)


def FusedSGD(params: Any, lr: float = 0.1, momentum: float = 0.0, dampening: float = 0.0,  # noqa: N802
             weight_decay: float = 0.0, nesterov: bool = False, **_: Any) -> torch.optim.Optimizer:
    """torch's fused SGD, with zeroed momentum buffers: a script may step it with a GradScaler,
    whose skipped first step would otherwise leave them uninitialised (see
    :func:`~paijob.runtime.precision.zero_momentum_buffers`). With dampening, zero buffers would
    change the first step, so that rare case runs unfused."""
    params = list(params)
    fused = _fused_ok(params) and not dampening
    optimizer = torch.optim.SGD(params, lr=lr, momentum=momentum, dampening=dampening,
                                weight_decay=weight_decay, nesterov=nesterov, fused=fused or None)
    if fused:
        zero_momentum_buffers(optimizer)
    return optimizer


def FusedLAMB(*args: Any, **kwargs: Any) -> Any:  # noqa: N802
    raise ImportError(
        "apex.optimizers.FusedLAMB has no torch equivalent and is not provided by paijob's "
        "apex compatibility layer; install NVIDIA apex or switch to torch.optim.AdamW"
    )


__all__ = ["FusedAdam", "FusedSGD", "FusedLAMB"]
