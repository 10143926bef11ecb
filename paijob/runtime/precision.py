"""Precision policies: fp32 / fp16 / bf16 and apex opt levels O0-O3 on native ``torch.amp``.

Grammar (``--precision`` / ``PAIJOB_PRECISION``)::

    fp32 | fp16 | bf16 | O0 | O1 | O2 | O3 | apex:O0 .. apex:O3

Plain ``O1`` always means "apex's O1, implemented on native torch"; ``apex:O1``
means "use NVIDIA apex when ``apex.amp`` really imports, else the native
mapping (with a one-line notice)".

How apex opt levels map onto native torch (see also the table in docs/runtime/precision.md):

====  ====================================  ==========================================
level apex                                  native equivalent used here
====  ====================================  ==========================================
O0    fp32 everything, loss scale 1         ``fp32``: no autocast, no scaler
O1    patch torch functions: fp16 on a      ``fp16``: ``torch.autocast(fp16)`` (the same
      whitelist (GEMM, conv), fp32 on a     idea, upstreamed) + dynamic ``GradScaler``
      blacklist (softmax, losses);
      dynamic loss scale
O2    fp16 model copy, fp32 master weights  fp32 weights (they *are* the master weights)
      kept by the optimizer, BN in fp32,    + ``autocast(fp16)`` + dynamic ``GradScaler``;
      inputs cast to fp16; dynamic scale    BN parameters stay fp32 (keep_batchnorm_fp32)
O3    pure fp16 model and optimizer, loss   ``model.half()`` (BN kept fp32 only when
      scale 1 (no master weights)           ``keep_batchnorm_fp32=True``), inputs cast to
                                            half, no autocast, static scale 1 by default
====  ====================================  ==========================================

O2 differs from apex only in memory (fp32 weights stay resident) and in being
*more* stable (autocast keeps softmax/losses in fp32). On CPU, where fp16
kernels are slow or missing, every fp16 request becomes bf16 (with a one-line
notice); bf16 has fp32's exponent range so no loss scaler is used.

Importing this module does not import torch; :func:`parse_precision` is pure
so command lines can validate ``--precision`` cheaply.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from paijob.common import contract
from paijob.errors import PaijobError

if TYPE_CHECKING:  # pragma: no cover
    import torch

log = logging.getLogger(__name__)

ENV_VAR = contract.PRECISION
POLICIES = ("fp32", "fp16", "bf16")
OPT_LEVELS = ("O0", "O1", "O2", "O3")
GRAMMAR = "fp32|fp16|bf16|O0|O1|O2|O3|apex:O0..apex:O3"

# What each opt level is built from: (compute dtype, whole-model cast, default loss scale).
_OPT_LEVEL_TABLE: dict[str, tuple[str, bool, float | str]] = {
    "O0": ("fp32", False, 1.0),
    "O1": ("fp16", False, "dynamic"),
    "O2": ("fp16", False, "dynamic"),
    "O3": ("fp16", True, 1.0),
}


class PrecisionError(PaijobError, ValueError):
    """A precision policy string or option the user wrote is not valid."""


@dataclass(frozen=True)
class PrecisionSpec:
    """A parsed policy string, before any device is known (pure data)."""

    text: str
    base: str  # fp32 | fp16 | bf16 | O0..O3
    prefer_real_apex: bool = False

    @property
    def opt_level(self) -> str | None:
        return self.base if self.base in OPT_LEVELS else None


def parse_precision(text: str | None, *, source: str = "--precision") -> PrecisionSpec:
    """Parse ``fp32|fp16|bf16|O0..O3|apex:O0..apex:O3`` (case-insensitive; ``o`` or ``O``).

    ``None`` or empty means ``fp32``. A zero instead of the letter O (``00``,
    ``02``) is a classic apex mistake and gets a hint.
    """
    raw = (text or "").strip()
    if not raw:
        return PrecisionSpec(text="fp32", base="fp32")
    value = raw
    prefer_apex = False
    if value.lower().startswith("apex:"):
        prefer_apex = True
        value = value[5:].strip()
    low = value.lower()
    aliases = {"fp32": "fp32", "float32": "fp32", "32": "fp32",
               "fp16": "fp16", "float16": "fp16", "half": "fp16", "16": "fp16",
               "bf16": "bf16", "bfloat16": "bf16"}
    if not prefer_apex and low in aliases:
        return PrecisionSpec(text=raw, base=aliases[low])
    if len(low) == 2 and low[0] == "o" and low[1] in "0123":
        return PrecisionSpec(text=raw, base="O" + low[1], prefer_real_apex=prefer_apex)
    hint = ""
    if len(low) == 2 and low[0] == "0" and low[1] in "0123":
        hint = f" (the first character is the letter O, not zero: O{low[1]})"
    raise PrecisionError(
        f"{source}: unknown precision policy {raw!r}{hint}; expected one of {GRAMMAR}"
    )


def precision_from_env(cli_value: str | None = None, env: dict[str, str] | None = None) -> PrecisionSpec:
    """The command-line value if given, else ``$PAIJOB_PRECISION``, else fp32."""
    if cli_value:
        return parse_precision(cli_value)
    environ = os.environ if env is None else env
    return parse_precision(environ.get(ENV_VAR), source=f"${ENV_VAR}")


def parse_loss_scale(value: str | float | int | None) -> float | str | None:
    """``"dynamic"``, a positive number (also as a string), or None (the level's default)."""
    if value is None:
        return None
    if isinstance(value, str):
        if value.strip().lower() == "dynamic":
            return "dynamic"
        try:
            number = float(value)
        except ValueError:
            raise PrecisionError(
                f"loss_scale {value!r} is neither 'dynamic' nor a number"
            ) from None
    else:
        number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise PrecisionError(f"loss_scale must be 'dynamic' or a positive number, got {value!r}")
    return number


def parse_bool_option(value: Any, name: str) -> bool | None:
    """apex accepts booleans or their strings ("True"/"False") for override options."""
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    if text == "none":
        return None
    raise PrecisionError(f"{name} must be True, False or None, got {value!r}")


_notices_given: set[str] = set()


def notice(message: str) -> None:
    """Log a one-line notice once per process."""
    if message not in _notices_given:
        _notices_given.add(message)
        log.warning("paijob: %s", message)


def real_apex_amp_importable() -> bool:
    """True when NVIDIA apex's ``apex.amp`` really imports (not our shim, not PyPI's 'apex')."""
    import sys

    from paijob.runtime.apex_compat.detect import real_apex_amp_present

    module = sys.modules.get("apex.amp")
    if module is not None:
        return not getattr(module, "__paijob_shim__", False)
    if not real_apex_amp_present():
        return False
    try:
        import apex.amp  # noqa: F401
    except Exception:  # a broken build raises anything; fall back to native
        return False
    return not getattr(sys.modules.get("apex.amp"), "__paijob_shim__", False)


@dataclass
class PrecisionPolicy:
    """A policy resolved for one device: what to cast, autocast and scale."""

    spec: PrecisionSpec
    device_type: str  # "cuda" | "cpu" | ...
    compute: str  # fp32 | fp16 | bf16 (after the CPU fallback)
    cast_model: bool  # O3: the whole model runs in the low-precision dtype
    keep_batchnorm_fp32: bool
    loss_scale: float | str  # "dynamic" or a fixed number; 1.0 means "no scaling"
    use_real_apex: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.base

    @property
    def dtype(self) -> torch.dtype:
        import torch

        return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[self.compute]

    @property
    def autocast_enabled(self) -> bool:
        return self.compute != "fp32" and not self.cast_model

    @property
    def scaler_enabled(self) -> bool:
        """A loss scaler is only needed for fp16 (bf16 has fp32's exponent range)."""
        return self.compute == "fp16" and self.loss_scale != 1.0

    def describe(self) -> str:
        parts = [self.spec.text if self.spec.text != self.spec.base else self.spec.base]
        if self.use_real_apex:
            parts.append("NVIDIA apex.amp")
        elif self.compute == "fp32":
            parts.append("fp32")
        elif self.cast_model:
            parts.append(f"pure {self.compute} model")
        else:
            parts.append(f"autocast {self.compute}")
        if self.scaler_enabled:
            parts.append(f"loss scale {self.loss_scale}")
        return ", ".join(parts)

    # -- the pieces a training loop uses -------------------------------------------------

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The context the forward pass (and loss) runs in."""
        if not self.autocast_enabled or self.use_real_apex:
            return contextlib.nullcontext()
        import torch

        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Cast the model for O3 (pure half); other levels keep fp32 (master) weights."""
        if self.cast_model:
            cast_module_(model, self.dtype, keep_batchnorm_fp32=self.keep_batchnorm_fp32)
        return model

    def cast_input(self, tensor: torch.Tensor) -> torch.Tensor:
        """Inputs of a pure-half (O3) model are cast like apex does; others stay fp32."""
        if self.cast_model and tensor.is_floating_point():
            return tensor.to(self.dtype)
        return tensor

    def make_scaler(self, device_type: str | None = None) -> Any:
        """An object with GradScaler's interface (scale, step, update, unscale_, state_dict).

        fp16 with a dynamic scale gets ``torch.amp.GradScaler``; a fixed scale or a
        half-precision model (O3, whose fp16 gradients GradScaler refuses) gets
        :class:`LossScaler`; everything else a disabled scaler (pass-through).
        ``device_type`` is where the gradients are (default: the policy's device); a
        test builds a GPU policy's scaler on a CPU with it.
        """
        import torch

        if not self.scaler_enabled:
            return LossScaler(enabled=False)
        if self.loss_scale == "dynamic" and not self.cast_model:
            return torch.amp.GradScaler(device_type or self.device_type)
        return LossScaler(loss_scale=self.loss_scale)


def _defaults(
    spec: PrecisionSpec, scale: str | float | None, keep_bn: bool | None
) -> tuple[str, bool, str | float, bool]:
    """Compute dtype, model cast, loss scale and fp32 batch norms: what was asked, else the level's defaults."""
    if spec.opt_level is not None:
        compute, cast_model, default_scale = _OPT_LEVEL_TABLE[spec.opt_level]
        if keep_bn is None:
            keep_bn = spec.opt_level in ("O2",)  # apex: O2 keeps BN fp32, O3 does not
        return compute, cast_model, default_scale if scale is None else scale, keep_bn
    compute = spec.base
    if scale is None:
        scale = "dynamic" if compute == "fp16" else 1.0
    return compute, False, scale, True if keep_bn is None else keep_bn


def _real_apex_usable(spec: PrecisionSpec) -> bool:
    """A spec that prefers NVIDIA apex gets it when importable; otherwise a notice and the native mapping."""
    if real_apex_amp_importable():
        return True
    notice(f"{spec.text}: NVIDIA apex.amp is not importable; using the native torch.amp mapping of {spec.base}")
    return False


def resolve_policy(
    spec: PrecisionSpec | str | None,
    device: torch.device | str = "cpu",
    *,
    loss_scale: str | float | None = None,
    keep_batchnorm_fp32: bool | str | None = None,
) -> PrecisionPolicy:
    """Turn a spec into a concrete policy for ``device`` (CPU: fp16 → bf16 with a notice)."""
    if not isinstance(spec, PrecisionSpec):
        spec = parse_precision(spec)
    device_type = device if isinstance(device, str) else device.type
    device_type = device_type.split(":")[0]
    scale = parse_loss_scale(loss_scale)
    keep_bn = parse_bool_option(keep_batchnorm_fp32, "keep_batchnorm_fp32")
    notes: list[str] = []
    compute, cast_model, scale, keep_bn = _defaults(spec, scale, keep_bn)
    use_real_apex = spec.prefer_real_apex and _real_apex_usable(spec)
    if compute == "fp16" and device_type == "cpu" and not use_real_apex:
        notice(f"{spec.text}: fp16 on CPU runs as bf16 (no loss scaling needed)")
        compute = "bf16"
    if compute != "fp16":
        scale = 1.0
    return PrecisionPolicy(
        spec=spec,
        device_type=device_type,
        compute=compute,
        cast_model=cast_model and compute != "fp32",
        keep_batchnorm_fp32=bool(keep_bn),
        loss_scale=scale,
        use_real_apex=use_real_apex,
        notes=notes,
    )


def is_batchnorm(module: Any) -> bool:
    import torch

    return isinstance(module, torch.nn.modules.batchnorm._BatchNorm)


def cast_module_(model: torch.nn.Module, dtype: torch.dtype, *, keep_batchnorm_fp32: bool) -> None:
    """Cast floating parameters and buffers to ``dtype``; batch norms stay fp32 if asked."""
    import torch

    for module in model.modules():
        if keep_batchnorm_fp32 and is_batchnorm(module):
            continue
        for param in list(module._parameters.values()):
            if param is not None and param.is_floating_point():
                param.data = param.data.to(dtype)
                if param.grad is not None:
                    param.grad = param.grad.to(dtype)
        for name, buf in list(module._buffers.items()):
            if buf is not None and buf.is_floating_point():
                module._buffers[name] = buf.to(dtype)
    _ = torch  # keep the import local and explicit


class LossScaler:
    """GradScaler's interface for cases GradScaler does not cover.

    Works with gradients of any floating dtype (fp16 model weights for O3),
    with a fixed scale (apex ``loss_scale=128.0``) or a dynamic one (apex's
    defaults: start 2**16, halve on overflow, double after 2000 clean steps).
    A step whose gradients overflowed is skipped, as in apex. Disabled, it
    passes everything through.
    """

    def __init__(
        self,
        loss_scale: float | str = "dynamic",
        *,
        enabled: bool = True,
        init_scale: float = 2.0**16,
        growth_interval: int = 2000,
        min_scale: float | None = None,
        max_scale: float = 2.0**24,
    ) -> None:
        self.enabled = enabled
        self.dynamic = loss_scale == "dynamic"
        self._scale = float(init_scale if self.dynamic else (loss_scale if enabled else 1.0))
        self.growth_interval = growth_interval
        self.min_scale = min_scale
        self.max_scale = max_scale
        self.unskipped = 0
        self._found_inf: Any = None  # device tensor, accumulated since the last update
        self._unscaled: set[int] = set()
        self.last_step_skipped = False

    # GradScaler compatibility
    def is_enabled(self) -> bool:
        return self.enabled

    def get_scale(self) -> float:
        return self._scale if self.enabled else 1.0

    def scale(self, loss: Any) -> Any:
        if not self.enabled:
            return loss
        return loss * self._scale

    def unscale_grads_(self, params: Iterable[Any]) -> None:
        """Divide gradients by the scale and record whether any is inf/NaN (no host sync)."""
        if not self.enabled:
            return
        import torch

        by_device: dict[Any, list[Any]] = {}
        for p in params:
            if p.grad is not None:
                by_device.setdefault(p.grad.device, []).append(p.grad)
        for device, grads in by_device.items():
            if self._found_inf is None:
                self._found_inf = torch.zeros(1, device=device)
            found = self._found_inf if self._found_inf.device == device else torch.zeros(1, device=device)
            inv = torch.full((1,), 1.0 / self._scale, dtype=torch.float32, device=device)
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
            if found is not self._found_inf:
                self._found_inf += found.to(self._found_inf.device)

    def unscale_(self, optimizer: Any) -> None:
        if not self.enabled or id(optimizer) in self._unscaled:
            return
        self._unscaled.add(id(optimizer))
        self.unscale_grads_(p for g in optimizer.param_groups for p in g["params"])

    def found_overflow(self) -> bool:
        return bool(self._found_inf is not None and float(self._found_inf.item()) > 0)

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.enabled:
            return optimizer.step(*args, **kwargs)
        self.unscale_(optimizer)
        if self.found_overflow():
            self.last_step_skipped = True
            return None
        self.last_step_skipped = False
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale: float | None = None) -> None:
        if not self.enabled:
            return
        overflow = self.found_overflow()
        if new_scale is not None:
            self._scale = float(new_scale)
        elif self.dynamic:
            if overflow:
                self._scale = self._scale / 2.0
                if self.min_scale is not None:
                    self._scale = max(self._scale, self.min_scale)
                self.unskipped = 0
            else:
                self.unskipped += 1
                if self.unskipped == self.growth_interval:
                    self._scale = min(self.max_scale, self._scale * 2.0)
                    self.unskipped = 0
        if self._found_inf is not None:
            self._found_inf.zero_()
        self._unscaled.clear()

    def state_dict(self) -> dict[str, Any]:
        return {"loss_scale": self._scale, "unskipped": self.unskipped, "dynamic": self.dynamic}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._scale = float(state.get("loss_scale", self._scale))
        self.unskipped = int(state.get("unskipped", 0))


def zero_momentum_buffers(optimizer: Any) -> None:
    """Give a fused SGD its momentum buffers now, zeroed, so a skipped first step cannot corrupt them.

    torch's fused SGD (checked on 2.11 and 2.13) allocates the buffers on the first step with
    ``empty_like`` and lets the kernel write them. ``GradScaler.step`` hands a fused optimizer
    the overflow flag (``_step_supports_amp_scaling``) instead of skipping the call, and on an
    overflowing step the kernel writes nothing: the buffers stay uninitialised memory, read as
    momentum on the next step, and the weights turn NaN a few steps later. fp16's dynamic scale
    (2**16 at the start) routinely overflows the first step, so every fp16 / apex O1-O2 run on a
    GPU hit it (issue 32). With buffers present the kernel takes its ordinary path, which leaves
    weights and buffers untouched on an overflow; and with dampening 0 the first real step is
    torch's own (``buf = momentum * 0 + grad = grad``), so nothing else changes.
    """
    import torch

    for group in optimizer.param_groups:
        if not group.get("momentum") or group.get("dampening"):
            continue  # no buffer to corrupt, or a first step that zero buffers would change
        for param in group["params"]:
            state = optimizer.state[param]
            if state.get("momentum_buffer") is None:
                state["momentum_buffer"] = torch.zeros_like(param, memory_format=torch.preserve_format)


def iter_params(optimizer: Any) -> Iterator[Any]:
    for group in optimizer.param_groups:
        yield from group["params"]
