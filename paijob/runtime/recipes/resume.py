"""The run saved at a step and picked up there again: what a checkpoint of a recipe holds.

Every rank's RNG is gathered and rank 0 writes (``checkpoint`` does the atomic write and
the rotation); on start, rank 0 picks the newest good checkpoint and every rank loads it,
or receives it from rank 0 when it cannot read the output folder. The saving half and the
loading half of the format are kept side by side here.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from paijob.runtime.recipes import checkpoint as ckpt
from paijob.runtime.recipes.config import Recipe, TrainConfig
from paijob.runtime.recipes.distributed import DistInfo, all_min_flag
from paijob.runtime.recipes.state import Model, RunState

log = logging.getLogger("paijob.recipes")
DIE_AFTER_BYTES = 4096  # PAIJOB_FAULT_AT's "save": bytes of the checkpoint written before the process dies


class Checkpoints:
    """A checkpoint of the run at (epoch, step): every rank's RNG, rank 0 writes, all wait."""

    def __init__(self, folder: Path, recipe: Recipe, cfg: TrainConfig, info: DistInfo, model: Model,
                 fault: tuple[int, int, str] | None = None) -> None:
        self.folder = folder
        self.recipe, self.cfg, self.info, self.model = recipe, cfg, info, model
        self.fault = fault  # PAIJOB_FAULT_AT's "save": this process dies halfway through that checkpoint

    def save(self, epoch: int, step: int, history: list[dict[str, Any]]) -> Path | None:
        info = self.info
        rngs = [_rng_state()]
        if info.distributed:
            gathered: list[Any] = [None] * info.world_size
            dist.all_gather_object(gathered, rngs[0])
            rngs = gathered
        path = None
        if info.is_main:
            model = self.model
            state = {
                "format": "paijob-recipe-checkpoint/1",
                "recipe": self.recipe.name, "arch": self.cfg.arch,
                "epoch": epoch, "step": step,
                "model": model.raw.state_dict(), "optimizer": model.optimizer.state_dict(),
                "scaler": model.stepper.state_dict(), "rng": rngs,
                "history": history, "world_size": info.world_size,
                "precision": model.policy.spec.text,
            }
            dies = self.fault is not None and self.fault == (epoch, step, "save")
            path = ckpt.save_checkpoint(self.folder, epoch, step, state, keep=self.cfg.keep_checkpoints,
                                        die_after=DIE_AFTER_BYTES if dies else None)
        if info.distributed:
            dist.barrier()
        return path


def resume(cfg: TrainConfig, info: DistInfo, model: Model, folder: Path) -> RunState:
    """Where training starts: the newest good checkpoint in ``folder`` (unless --no-resume), else 0."""
    state = RunState()
    if info.is_main:
        for leftover in ckpt.remove_stale_temporaries(folder):
            log.warning("paijob: removed %s, left by a checkpoint write that never finished", leftover)
    found = None if cfg.no_resume else _resume_state(folder, info)
    if found is None:
        return state
    path, saved = found
    model.raw.load_state_dict(saved["model"])
    model.optimizer.load_state_dict(saved["optimizer"])
    model.stepper.load_state_dict(saved.get("scaler", {}))
    state.start_epoch, state.start_step = int(saved["epoch"]), int(saved["step"])
    state.history = list(saved.get("history", []))
    rngs = saved.get("rng", [])
    if rngs:
        _set_rng_state(rngs[info.rank] if len(rngs) == info.world_size else rngs[0])
    state.resumed_from = str(path)
    if info.is_main:
        log.info("paijob: resumed from %s (epoch %d, step %d)", path, state.start_epoch, state.start_step)
    return state


def _resume_state(folder: Path, info: DistInfo) -> tuple[Path, dict[str, Any]] | None:
    """Rank 0 picks the newest good checkpoint; every rank loads it (or receives it)."""
    choice: list[Any] = [None]
    state = None
    if info.is_main:
        found = ckpt.load_newest(folder)
        if found is not None:
            choice = [str(found[0].path)]
            state = found[1]
    if not info.distributed:
        return (Path(choice[0]), state) if state is not None else None
    dist.broadcast_object_list(choice, src=0)
    if choice[0] is None:
        return None
    if not info.is_main:
        try:
            state = ckpt.load_checkpoint(choice[0])
        except (OSError, ckpt.CorruptCheckpoint):
            state = None
    have = all_min_flag(state is not None, info)
    if not have:  # some rank cannot read the output folder: ship the state from rank 0
        box = [state if info.is_main else None]
        dist.broadcast_object_list(box, src=0)
        state = box[0]
    return Path(choice[0]), state  # type: ignore[return-value]


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if "python" in state:
        value = state["python"]
        random.setstate((value[0], tuple(value[1]), value[2]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
