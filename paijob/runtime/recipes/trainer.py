"""The training engine both recipes share: ``train`` runs a recipe's phases in order.

One process per rank (``distributed``): rank 0 alone prepares data (others wait at a
barrier), logs, writes TensorBoard scalars and checkpoints; metrics are all-reduced.

``train`` runs in named phases, as torch's elastic agent runs its loop: ``startup.set_up``
(process group, data, model and optimizer (``stepper``), resume (``resume``), DDP/compile,
feed), then per epoch ``epoch.run_epoch`` (the feed and the steps, then reduce, recalibrate
and evaluate (``evaluation``), the report and a checkpoint), then ``summary``. A run whose
losses or weights went non-finite ends early (``divergence``: exit 136, no checkpoint); one
sent SIGTERM saves and ends with exit 143. What set-up made is a ``startup.Run``; what the
loop changes is a ``state.RunState``. The console lines rank 0 prints (step, epoch and summary
lines, a stable format the portal's chart reads) are defined in ``progress``; the full summary
is ``OUTPUT_DIR/summary.json``.
"""

from __future__ import annotations

import time
from typing import Any

from paijob.runtime.recipes.config import Recipe, TrainConfig
from paijob.runtime.recipes.distributed import leave_process_group
from paijob.runtime.recipes.epoch import Diverged, Preempted, run_epoch
from paijob.runtime.recipes.meters import CompiledGraphs
from paijob.runtime.recipes.startup import set_up
from paijob.runtime.recipes.summary import publish_summary, summarise


def train(recipe: Recipe, cfg: TrainConfig) -> dict[str, Any]:
    """Train ``recipe`` as ``cfg`` says; the run's summary (rank 0 also writes and announces it).

    Phases, as torch's elastic agent runs its loop: set-up (process group, data, model,
    resume, wrappers, feed), then per epoch the steps, evaluation, report and checkpoint,
    then the summary and the process group's end.
    """
    start_wall = time.perf_counter()
    run, state = set_up(recipe, cfg)
    run.graphs = CompiledGraphs(cfg.compile) if cfg.compile else None
    run.stop.install()
    try:
        for epoch in range(state.start_epoch, cfg.epochs):
            run_epoch(run, state, epoch)
    except (Preempted, Diverged):
        pass
    finally:
        run.stop.restore()
        if run.writer is not None:
            run.writer.close()
    summary = summarise(run, state, time.perf_counter() - start_wall)
    if run.info.is_main:
        publish_summary(run, summary)
    if run.info.distributed:
        leave_process_group()
    return summary

