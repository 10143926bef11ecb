"""``apex.amp`` on native torch: ``initialize``, ``scale_loss``, ``master_params``, state dicts.

Semantics kept from apex:

* ``amp.initialize(model, optimizer, opt_level=...)`` returns ``(model,
  optimizer)`` in the shape they were passed (single objects or lists). The
  model's forward then runs under ``torch.autocast`` (O1, O2) or in pure half
  precision with inputs cast (O3); see :mod:`paijob.runtime.precision` for the
  opt-level mapping. Floating outputs of an autocast forward are returned as
  fp32 so the user's loss, computed outside the model, is fp32 as apex's
  patched loss functions made it.
* ``with amp.scale_loss(loss, optimizer) as scaled_loss: scaled_loss.backward()``
  multiplies by the loss scale; on exit the gradients are unscaled and checked
  for inf/NaN, the dynamic scale is updated, and on overflow the *next*
  ``optimizer.step()`` is skipped ("Gradient overflow. Skipping step"), exactly
  the apex order. So gradient clipping between ``scale_loss`` and ``step``
  sees true gradients, and gradient accumulation over several ``scale_loss``
  blocks works (earlier, already unscaled gradients are stashed, as apex does).
  ``delay_unscale=True`` leaves gradients scaled until a later block unscales.
* ``$PAIJOB_PRECISION`` (set by ``paijob-runtime train --precision``), when
  present, overrides the script's ``opt_level``: the job decides, the script
  stays unedited.
* ``amp.state_dict()`` is ``{"loss_scaler0": {"loss_scale": ..., "unskipped": ...}}``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from paijob.runtime.precision import (
    ENV_VAR,
    LossScaler,
    PrecisionPolicy,
    iter_params,
    notice,
    parse_precision,
    resolve_policy,
)

__paijob_shim__ = True
log = logging.getLogger(__name__)


class _AmpState:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.policy: PrecisionPolicy | None = None
        self.enabled = True
        self.loss_scalers: list[LossScaler] = []
        # per optimizer id: grads hold unscaled values since the last step (for accumulation)
        self.unscaled: set[int] = set()
        self.skip_next: set[int] = set()
        self.verbosity = 1


_amp_state = _AmpState()


def _maybe_print(message: str) -> None:
    if _amp_state.verbosity > 0 and os.environ.get("RANK", "0") in ("", "0"):
        print(message, flush=True)


def _first_device(models: list[torch.nn.Module]) -> torch.device:
    for model in models:
        for param in model.parameters():
            return param.device
    return torch.device("cpu")


def _cast_tree(value: Any, dtype: torch.dtype, only_from: tuple[torch.dtype, ...] | None = None) -> Any:
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and (only_from is None or value.dtype in only_from):
            return value.to(dtype)
        return value
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return type(value)(*(_cast_tree(v, dtype, only_from) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_tree(v, dtype, only_from) for v in value)
    if isinstance(value, dict):
        return {k: _cast_tree(v, dtype, only_from) for k, v in value.items()}
    return value


def _patch_forward(model: torch.nn.Module, policy: PrecisionPolicy, output_dtype: Any) -> None:
    original: Callable[..., Any] = model.forward
    half_types = (torch.float16, torch.bfloat16)

    def forward(*args: Any, **kwargs: Any) -> Any:
        if policy.cast_model:
            args = _cast_tree(args, policy.dtype)
            kwargs = _cast_tree(kwargs, policy.dtype)
            out = original(*args, **kwargs)
        else:
            with policy.autocast():
                out = original(*args, **kwargs)
            if policy.autocast_enabled and output_dtype is None:
                out = _cast_tree(out, torch.float32, half_types)
        if output_dtype is not None:
            out = _cast_tree(out, output_dtype)
        return out

    setattr(forward, "__wrapped__", original)  # noqa: B010
    setattr(forward, "__paijob_amp__", True)  # noqa: B010
    model.forward = forward


def _patch_step(optimizer: torch.optim.Optimizer) -> None:
    if getattr(optimizer.step, "__paijob_amp__", False):
        return
    original = optimizer.step

    def step(*args: Any, **kwargs: Any) -> Any:
        key = id(optimizer)
        _amp_state.unscaled.discard(key)
        if key in _amp_state.skip_next:
            _amp_state.skip_next.discard(key)
            return None
        return original(*args, **kwargs)

    setattr(step, "__wrapped__", original)  # noqa: B010
    setattr(step, "__paijob_amp__", True)  # noqa: B010
    optimizer.step = step  # type: ignore[method-assign]


def initialize(
    models: Any,
    optimizers: Any = None,
    enabled: bool = True,
    opt_level: str = "O1",
    cast_model_type: Any = None,
    patch_torch_functions: Any = None,
    keep_batchnorm_fp32: Any = None,
    master_weights: Any = None,
    loss_scale: Any = None,
    cast_model_outputs: Any = None,
    num_losses: int = 1,
    verbosity: int = 1,
    min_loss_scale: float | None = None,
    max_loss_scale: float = 2.0**24,
) -> Any:
    """apex's ``amp.initialize`` on native torch (see the module docstring)."""
    _amp_state.reset()
    _amp_state.verbosity = verbosity
    model_list = list(models) if isinstance(models, (list, tuple)) else [models]
    if optimizers is None:
        optimizer_list: list[Any] = []
    elif isinstance(optimizers, (list, tuple)):
        optimizer_list = list(optimizers)
    else:
        optimizer_list = [optimizers]

    def result() -> Any:
        if optimizers is None:
            return models
        return models, optimizers

    if not enabled:
        _amp_state.enabled = False
        return result()
    for name, value in (("cast_model_type", cast_model_type),
                        ("patch_torch_functions", patch_torch_functions),
                        ("master_weights", master_weights)):
        if value is not None:
            notice(f"amp.initialize({name}={value!r}) is implied by opt_level on native torch; ignored")
    level = str(opt_level)
    spec = parse_precision(level, source="amp.initialize(opt_level=...)")
    override = os.environ.get(ENV_VAR, "").strip()
    if override:
        # paijob-runtime train --precision X exports PAIJOB_PRECISION: the job's choice wins
        # over the opt level written in the script, so one script runs O1, O2, bf16... unedited.
        wanted = parse_precision(override, source=f"${ENV_VAR}")
        if wanted.base != spec.base:
            notice(f"amp.initialize(opt_level={level!r}) overridden by {ENV_VAR}={override}")
        spec = wanted
        level = spec.base
    policy = resolve_policy(
        spec,
        _first_device(model_list),
        loss_scale=loss_scale,
        keep_batchnorm_fp32=keep_batchnorm_fp32,
    )
    _amp_state.policy = policy
    _maybe_print(f"paijob apex compat: opt_level {level} -> {policy.describe()}")
    for model in model_list:
        policy.prepare_model(model)
        _patch_forward(model, policy, cast_model_outputs)
    for optimizer in optimizer_list:
        _patch_step(optimizer)
    _amp_state.loss_scalers = [
        LossScaler(
            policy.loss_scale,
            enabled=policy.scaler_enabled,
            min_scale=min_loss_scale,
            max_scale=max_loss_scale,
        )
        for _ in range(max(1, int(num_losses)))
    ]
    return result()


@contextlib.contextmanager
def scale_loss(
    loss: torch.Tensor,
    optimizers: Any,
    loss_id: int = 0,
    model: Any = None,
    delay_unscale: bool = False,
    delay_overflow_check: bool = False,
) -> Iterator[torch.Tensor]:
    """Yield ``loss * scale``; on exit unscale, check overflow, update the scale (apex order)."""
    if not _amp_state.enabled or not _amp_state.loss_scalers:
        yield loss
        return
    scaler = _amp_state.loss_scalers[loss_id]
    optimizer_list = list(optimizers) if isinstance(optimizers, (list, tuple)) else [optimizers]
    if not scaler.enabled:
        yield loss.float()
        return
    # Gradient accumulation: grads already unscaled by an earlier block are put aside
    # so only this backward's (scaled) contribution is unscaled, then added back.
    stashed = _stash_unscaled_grads(optimizer_list)
    yield loss.float() * scaler.get_scale()
    if delay_unscale:
        _add_back(stashed)  # untouched; a later block unscales
        return
    params = [p for optimizer in optimizer_list for p in iter_params(optimizer)]
    scaler.unscale_grads_(params)
    _add_back(stashed)
    overflow = scaler.found_overflow()  # apex syncs here too
    old_scale = scaler.get_scale()
    scaler.update()
    for optimizer in optimizer_list:
        _amp_state.unscaled.add(id(optimizer))
        if overflow:
            _amp_state.skip_next.add(id(optimizer))
    if overflow:
        _maybe_print(
            f"Gradient overflow.  Skipping step, loss scaler {loss_id} reducing loss scale "
            f"to {scaler.get_scale()}" if scaler.dynamic else
            f"Gradient overflow with static loss scale {old_scale}. Skipping step"
        )


def _stash_unscaled_grads(optimizer_list: list[Any]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Take aside the gradients an earlier block already unscaled (their params' grads become None)."""
    stashed: list[tuple[torch.Tensor, torch.Tensor]] = []
    for optimizer in optimizer_list:
        if id(optimizer) not in _amp_state.unscaled:
            continue
        for param in iter_params(optimizer):
            if param.grad is not None:
                stashed.append((param, param.grad))
                param.grad = None
    return stashed


def _add_back(stashed: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Return stashed gradients, summed with what the backward of this block left."""
    for param, grad in stashed:
        param.grad = grad if param.grad is None else param.grad.add_(grad)


def master_params(optimizer: torch.optim.Optimizer) -> Iterator[torch.nn.Parameter]:
    """The parameters the optimizer updates (on native torch they are the fp32 masters)."""
    yield from iter_params(optimizer)


def state_dict(destination: dict[str, Any] | None = None) -> dict[str, Any]:
    out = {} if destination is None else destination
    for index, scaler in enumerate(_amp_state.loss_scalers):
        out[f"loss_scaler{index}"] = {"loss_scale": scaler.get_scale(), "unskipped": scaler.unskipped}
    return out


def load_state_dict(state: dict[str, Any]) -> None:
    if len(state) != len(_amp_state.loss_scalers):
        print(
            f"Warning: state_dict contains {len(state)} entries, while "
            f"{len(_amp_state.loss_scalers)} loss_scalers are used"
        )
    for index, scaler in enumerate(_amp_state.loss_scalers):
        entry = state.get(f"loss_scaler{index}")
        if entry is not None and scaler.enabled:
            scaler.load_state_dict(entry)


@contextlib.contextmanager
def disable_casts() -> Iterator[None]:
    policy = _amp_state.policy
    if policy is None or not policy.autocast_enabled:
        yield
        return
    with torch.autocast(device_type=policy.device_type, enabled=False):
        yield


def _no_op_registration(*args: Any, **kwargs: Any) -> None:
    notice("amp.register_*_function is not needed with torch.autocast; ignored")


register_half_function = register_float_function = register_promote_function = _no_op_registration


def _identity_decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn


half_function = float_function = promote_function = _identity_decorator
