"""One epoch of a recipe: the feed and the steps, then reduce, recalibrate, evaluate, report, checkpoint.

The training step never waits for the device: batches come prepared ahead (see ``prefetch``),
augmentation is index arithmetic on the device, and losses and accuracy accumulate in device
tensors (``meters``) read once per log interval and epoch. The loop leaves early by raising
:class:`Preempted` (SIGTERM: a checkpoint at this step, exit 143) or :class:`Diverged`
(non-finite losses or weights: no checkpoint, exit DIVERGED), which ``engine.train`` catches.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from typing import Any

from paijob.common.exitcodes import DIVERGED
from paijob.runtime.recipes import batchnorm
from paijob.runtime.recipes.data import TrainPlan, apply_crop_flip, train_batches, train_plan
from paijob.runtime.recipes.distributed import all_max, all_max_flags
from paijob.runtime.recipes.divergence import Divergence, advice, divergence_line
from paijob.runtime.recipes.evaluation import evaluate, recalibrate_batchnorm, reduce_metrics
from paijob.runtime.recipes.feed import seed_for
from paijob.runtime.recipes.loglines import epoch_line, log_interval
from paijob.runtime.recipes.meters import STEADY_AFTER_STEPS, EpochMeter
from paijob.runtime.recipes.startup import Run
from paijob.runtime.recipes.state import RunState

log = logging.getLogger("paijob.recipes")
EXIT_PREEMPTED = 143  # 128 + SIGTERM: OpenPAI/k8s treat it as a retryable kill


class Preempted(Exception):
    """SIGTERM: the run saved where it was and leaves the loop (exit 143, retryable)."""


class Diverged(Exception):
    """Non-finite losses or weights: the run leaves the loop without a checkpoint (exit DIVERGED)."""


def _train_epoch(run: Run, state: RunState, epoch: int) -> tuple[EpochMeter, TrainPlan]:
    """The epoch's training steps (from the resumed step in the first epoch); raises Preempted."""
    cfg, info = run.cfg, run.info
    run.sampler.set_epoch(epoch)
    batches = train_batches(run.sampler, cfg.batch_size, cfg.steps_per_epoch)
    steps = len(batches)
    first = state.start_step if epoch == state.start_epoch else 0
    plan = train_plan(batches, run.recipe.crop_pad, lambda step: seed_for(cfg.seed, epoch, step, info.rank))
    interval = log_interval(cfg.log_interval, steps)
    run.model.training.train()
    meter = EpochMeter(info.device)
    state.step_times.begin(time.perf_counter())
    for step, batch in enumerate(run.feed.train(plan.rows(first)), start=first):
        lr = _step(run, meter, batch, epoch, step, steps)
        state.step_times.mark(time.perf_counter())
        done = step + 1
        if done - first == STEADY_AFTER_STEPS:
            meter.start_steady(info.device)
        _inject_fault(run.fault, epoch, step)
        at_interval = done % interval == 0 or done == steps
        if info.is_main and at_interval:
            rate = meter.seen * info.world_size / max(time.perf_counter() - meter.start, 1e-9)
            run.progress.log_step(epoch + 1, cfg.epochs, done, steps, meter.loss_sum, meter.seen, lr, rate)
        if at_interval:  # the log interval's host read: the guard reads its buffered losses here too
            run.guard.check()
            run.guard.check_scale(run.model.stepper.loss_scale(), epoch + 1, done)
        if not info.distributed or at_interval:
            stop, diverged = all_max_flags((run.stop.requested, run.guard.tripped is not None), info)
            if diverged:
                _diverge(run, state, Divergence(epoch + 1, done, "another rank's training went non-finite"))
            if stop:
                _preempt(run, state, epoch, done)
    return meter, plan


def _step(run: Run, meter: EpochMeter, batch: Any, epoch: int, step: int, steps: int) -> float:
    """One optimizer step on one batch, nothing read back from the device; its learning rate."""
    model = run.model
    lr = run.recipe.lr_at(run.cfg, model.base_lr, epoch, step, steps)
    for group in model.optimizer.param_groups:
        group["lr"] = lr
    images, labels = batch[0], batch[1]
    if run.in_memory:
        images = apply_crop_flip(images, batch[2], batch[3], batch[4], run.recipe.crop_pad)
    x = run.prepare(images)
    with model.policy.autocast():
        output = model.training(x)
        loss = model.criterion(output.float(), labels)
    model.stepper.backward_step(loss)
    meter.add(loss, output, labels)
    run.guard.record(loss, epoch + 1, step + 1)
    return lr


def _inject_fault(fault: tuple[int, int, str] | None, epoch: int, step: int) -> None:
    """``PAIJOB_FAULT_AT``: SIGTERM to this process, or die as a SIGKILL would (exit 137)."""
    if fault is None or (epoch, step) != fault[:2]:
        return
    if fault[2] == "term":
        os.kill(os.getpid(), signal.SIGTERM)
    else:
        sys.stdout.flush()
        os._exit(137)


def _diverge(run: Run, state: RunState, found: Divergence) -> None:
    """Training went non-finite: one line on rank 0, no checkpoint, out of the loop (exit DIVERGED)."""
    guard, policy = run.guard, run.model.policy
    guard.trip(found)
    if run.info.is_main:
        tripped = guard.tripped or found
        hint = advice(policy.compute, policy.cast_model, policy.scaler_enabled)
        detail = policy.describe().split(", ", 1)[-1]  # describe() starts with the policy's own text
        log.error("%s", divergence_line(tripped, policy.spec.text, detail, hint, DIVERGED))
    state.exit_code, state.status = DIVERGED, "diverged"
    raise Diverged()


def _preempt(run: Run, state: RunState, epoch: int, step: int) -> None:
    """SIGTERM mid-epoch: a checkpoint at this step, then out of the loop (exit 143, retryable)."""
    saved = run.checkpoints.save(epoch, step, state.history)
    state.last_checkpoint = saved
    if run.info.is_main:
        log.warning("paijob: SIGTERM: checkpoint %s written; exiting for a retry", saved)
    state.exit_code, state.status = EXIT_PREEMPTED, "preempted"
    raise Preempted()


def _end_epoch(run: Run, state: RunState, epoch: int, meter: EpochMeter, plan: TrainPlan) -> dict[str, Any]:
    """Time and reduce the epoch, recalibrate BatchNorm if young, evaluate: the epoch's record."""
    info, cfg, model = run.info, run.cfg, run.model
    seconds = state.throughput.add(meter, meter.finish(info.device), info.world_size)
    state.train_metrics = reduce_metrics(meter.loss_sum, meter.correct, meter.seen, info)
    steps = int(plan.indices.shape[0])
    run.guard.check()
    run.guard.check_model(model.raw, epoch + 1, steps)
    if all_max(run.guard.tripped is not None, info):
        _diverge(run, state, Divergence(epoch + 1, steps, "another rank's model went non-finite"))
    recalibrated = 0
    if cfg.bn_recalibration and batchnorm.needs_recalibration(model.raw):
        recalibrated = recalibrate_batchnorm(model.raw, run.feed, plan, run.recipe, run.prepare, model.policy,
                                             run.in_memory, info)
    state.eval_metrics = evaluate(model.evaluating, run.feed, run.eval_plan, run.prepare, model.policy,
                                  model.criterion, info)
    record = {
        "epoch": epoch + 1,
        "train_loss": state.train_metrics["loss"], "train_top1": state.train_metrics["top1"],
        "eval_loss": state.eval_metrics["loss"], "eval_top1": state.eval_metrics["top1"],
        "images_per_sec": (meter.seen * info.world_size) / max(seconds, 1e-9),
        "lr": model.optimizer.param_groups[0]["lr"],
        "bn_recalibration_batches": recalibrated,
    }
    if run.graphs is not None:
        record["graphs_compiled"] = run.graphs.new()
    state.history.append(record)
    return record


def _report_epoch(run: Run, record: dict[str, Any]) -> None:
    """Rank 0: the epoch line and TensorBoard's scalars."""
    if not run.info.is_main:
        return
    log.info("%s", epoch_line(record["epoch"], run.cfg.epochs, record))
    if run.writer is not None:
        for key in ("train_loss", "train_top1", "eval_loss", "eval_top1", "images_per_sec", "lr"):
            run.writer.add_scalar(key.replace("_", "/", 1), record[key], record["epoch"])
        run.writer.flush()


def run_epoch(run: Run, state: RunState, epoch: int) -> None:
    """One epoch, reported and checkpointed; raises Preempted when any rank got SIGTERM."""
    meter, plan = _train_epoch(run, state, epoch)
    _report_epoch(run, _end_epoch(run, state, epoch, meter, plan))
    state.last_checkpoint = run.checkpoints.save(epoch + 1, 0, state.history)
    if all_max(run.stop.requested, run.info):
        state.exit_code, state.status = EXIT_PREEMPTED, "preempted"
        raise Preempted()
