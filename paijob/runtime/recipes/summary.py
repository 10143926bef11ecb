"""The run's summary: what it trained, how fast, whether the replicas agree, how it ended.

Rank 0 writes it as ``OUTPUT_DIR/summary.json`` (and ``--summary-json``) and prints one line
(``progress.summary_line``, a format the portal reads); ``engine.train`` returns it.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.nn as nn

from paijob.common import contract, records
from paijob.runtime.recipes.loglines import SUMMARY_FILE, summary_line
from paijob.runtime.recipes.startup import Run
from paijob.runtime.recipes.state import RunState


def summarise(run: Run, state: RunState, wall_seconds: float) -> dict[str, Any]:
    """The run's summary; every rank's parameter digest is gathered (are the replicas in sync?)."""
    cfg, info, model = run.cfg, run.info, run.model
    digest = _param_digest(model.raw)
    mine = (digest, state.step_times.percentiles())
    gathered: list[Any] = [mine]
    if info.distributed:
        gathered = [None] * info.world_size
        dist.all_gather_object(gathered, mine)
    digests = [digest for digest, _times in gathered]
    images_per_sec, steady_images_per_sec = state.throughput.rates()
    return {
        "recipe": run.recipe.name,
        "arch": cfg.arch,
        "status": state.status,
        "epochs": len(state.history),
        "epochs_requested": cfg.epochs,
        "world_size": info.world_size,
        "device": info.device.type,
        "precision": model.policy.spec.text,
        "precision_detail": model.policy.describe(),
        "batch_size": cfg.batch_size,
        "global_batch_size": cfg.batch_size * info.world_size,
        "final": {**{f"train_{k}": v for k, v in state.train_metrics.items()},
                  **{f"eval_{k}": v for k, v in state.eval_metrics.items()}},
        "images_per_sec": images_per_sec,
        "steady_images_per_sec": steady_images_per_sec,
        "train_time_s": state.throughput.seconds,
        # every rank's host step times (s); under DDP they match, each step waiting for the slowest
        # rank: which rank that is, the slow-rank doctor says (docs/runtime/faults.md)
        "step_time_s": [{"rank": rank, **times} for rank, (_digest, times) in enumerate(gathered)],
        # the slow-rank doctor's last verdict while the run trained (None: it named no straggler)
        "slow_rank": slow_rank(),
        # paijob-runtime's restarts of the workers inside the attempt (--max-restarts): which, after what
        "restarts": restarts(),
        "wall_time_s": wall_seconds,
        "resumed_from": state.resumed_from,
        "checkpoint": str(state.last_checkpoint) if state.last_checkpoint else None,
        "data_placement": run.feed.placement,
        "compile": {"enabled": cfg.compile, "mode": cfg.compile_mode, "backend": cfg.compile_backend}
        if cfg.compile else None,
        "param_digest": digest,
        "replicas_in_sync": len(set(digests)) == 1,
        "history": state.history,
        "exit_code": state.exit_code,
        "nonfinite": run.guard.summary(model.stepper.loss_scale()),
        "config": asdict(cfg),
    }


def slow_rank(environ: Mapping[str, str] = os.environ) -> dict[str, Any] | None:
    """Rank 0 (on node 0, where the doctor judges): the slow-rank doctor's latest verdict, the rank(s) it
    named and every rank's figures, as ``paijob status`` shows them; None: no verdict, or no hang watch."""
    folder = environ.get(contract.HANG_DIR)
    if not folder:
        return None
    record = records.read_slow(os.path.join(folder, contract.SLOW_VERDICT_NAME), running=False)
    return record.as_json() if record is not None else None


def restarts(environ: Mapping[str, str] = os.environ) -> list[dict[str, Any]]:
    """Rank 0 (on node 0, which keeps them): paijob-runtime's restarts of this attempt's workers, each with its
    cause and the seconds it cost, as ``paijob status`` lists them; [] when none (or no hang watch)."""
    folder = environ.get(contract.HANG_DIR)
    if not folder:
        return []
    return [record.as_json() for record in records.read_restarts(os.path.join(folder, contract.RESTARTS_NAME))]


def publish_summary(run: Run, summary: dict[str, Any]) -> None:
    """Rank 0: the summary JSON in the output folder (and --summary-json); one short line on stdout."""
    text = json.dumps(summary, sort_keys=True, default=str)
    written = run.out_dir / SUMMARY_FILE
    targets = [written]
    if run.cfg.summary_json:
        targets.append(Path(run.cfg.summary_json))
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text + "\n")
    print(summary_line(summary, str(written)), flush=True)


def _param_digest(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.named_parameters()):  # buffers (BN stats) are per rank
        digest.update(name.encode())
        data = tensor.detach().cpu().contiguous()
        digest.update(ctypes.string_at(data.data_ptr(), data.numel() * data.element_size()))
    return digest.hexdigest()
