"""How a recipe steps: the optimizer, the loss scaler and backward + step under a precision policy.

On a GPU the SGD is fused, so that GradScaler checks fp16 overflow on the device rather than
reading it back each step; under NVIDIA's real apex, amp wraps model and optimizer and keeps
its own scaler. :class:`Stepper` hides which of the two steps.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from paijob.runtime.precision import PrecisionPolicy, zero_momentum_buffers


def make_sgd(params: Any, *, lr: float, momentum: float, weight_decay: float, fused: bool
             ) -> torch.optim.Optimizer:
    """SGD; fused on a GPU where torch has it: one kernel, and GradScaler then checks fp16
    overflow on the device (``_step_supports_amp_scaling``) instead of reading it back per step.

    A fused SGD starts with zeroed momentum buffers (:func:`zero_momentum_buffers`): without
    them, a first step GradScaler skips leaves the buffers uninitialised and fp16 trains NaN.
    """
    import inspect

    kwargs: dict[str, Any] = {}
    if fused and "fused" in inspect.signature(torch.optim.SGD).parameters:
        kwargs["fused"] = True
    optimizer = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay, **kwargs)
    if kwargs:
        zero_momentum_buffers(optimizer)
    return optimizer


def make_optimizer(policy: PrecisionPolicy, params: Any, *, lr: float, momentum: float, weight_decay: float
                   ) -> tuple[torch.optim.Optimizer, Any]:
    """The optimizer and loss scaler a recipe steps with under ``policy``.

    What to build follows the policy's device type: on a GPU the fused SGD (zeroed momentum,
    see ``make_sgd``) with GradScaler's on-device overflow check for fp16 and apex O1/O2,
    unfused under NVIDIA apex (whose amp wraps the optimizer itself, and whose scaler is its
    own: the returned one is None). The objects are built where ``params`` are, so a test can
    drive a GPU policy's exact optimizer and scaler on a CPU.
    """
    params = list(params)
    fused = policy.device_type == "cuda" and not policy.use_real_apex
    optimizer = make_sgd(params, lr=lr, momentum=momentum, weight_decay=weight_decay, fused=fused)
    where = params[0].device.type if params else policy.device_type
    scaler = None if policy.use_real_apex else policy.make_scaler(where)
    return optimizer, scaler

class Stepper:
    """backward + optimizer step under the precision policy (native scaler or real apex)."""

    def __init__(self, policy: PrecisionPolicy, model: nn.Module, optimizer: torch.optim.Optimizer,
                 scaler: Any) -> None:
        self.policy = policy
        self.apex: Any = None
        if policy.use_real_apex:
            from apex import amp

            kwargs: dict[str, Any] = {"opt_level": policy.spec.base}
            if policy.loss_scale not in (None,):
                kwargs["loss_scale"] = policy.loss_scale
            model, optimizer = amp.initialize(model, optimizer, **kwargs)
            self.apex = amp
            self.scaler: Any = None
        else:
            self.scaler = scaler
        self.model = model
        self.optimizer = optimizer

    def backward_step(self, loss: torch.Tensor) -> None:
        if self.apex is not None:
            with self.apex.scale_loss(loss, self.optimizer) as scaled:
                scaled.backward()
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)

    def loss_scale(self) -> float | None:
        """The dynamic loss scale now (a host read on a GPU), or None: no dynamic scale, or apex's own."""
        scaler = self.scaler
        if scaler is None or not scaler.is_enabled() or getattr(scaler, "dynamic", True) is False:
            return None
        return float(scaler.get_scale())

    def state_dict(self) -> dict[str, Any]:
        if self.apex is not None:
            return {"apex": self.apex.state_dict()}
        return {"native": self.scaler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.apex is not None and "apex" in state:
            self.apex.load_state_dict(state["apex"])
        elif self.apex is None and state.get("native"):
            self.scaler.load_state_dict(state["native"])
