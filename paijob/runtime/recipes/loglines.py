"""The recipes' console lines: what rank 0 prints while training, and reading those lines back.

People read these lines in ``paijob logs``; the local cluster's portal draws its progress
chart from them. Their format is therefore stable; each is one line, and the marker
``paijob: `` may be preceded by a launcher's prefix (``parse_line`` searches, it does not
anchor). Numbers are Python's ``format`` output (``nan`` and ``inf`` included)::

    paijob: epoch E/N step S/T loss LOSS lr LR RATE img/s
    paijob: epoch E/N train loss LOSS top1 PCT% | eval loss LOSS top1 PCT% | RATE img/s
    paijob: summary STATUS E/N epochs | eval loss LOSS top1 PCT% | RATE img/s | SECONDS s | PATH

* **step** (stdout; on a terminal, one line rewritten in place on stderr): every log interval
  and at each epoch's last step. ``S`` counts the epoch's steps from 1 (``T`` of them);
  ``LOSS`` is rank 0's mean training loss over the epoch so far (``.4f``), ``LR`` the learning
  rate of that step (``.4g``), ``RATE`` the images per second of all ranks together since the
  epoch began (``.1f``).
* **epoch** (stdout, through logging): after each epoch's evaluation; losses and top-1 are
  all-reduced over the ranks, ``PCT`` is a percentage (``.2f``), ``RATE`` the epoch's images
  per second of all ranks (``.1f``).
* **summary** (stdout, the run's last line): ``STATUS`` is ``completed``, ``preempted`` or ``diverged``,
  ``E`` the epochs done (a resumed run counts those before it too) of ``N`` asked for; the
  ``eval`` part is absent when no epoch ran in this process; ``SECONDS`` is the wall time
  (``.1f``); ``PATH`` the full summary (JSON) in the output folder, ``summary.json``.

All three go to stdout, so that under paijob-runtime (whose agent tails a worker's stdout and
stderr separately) they reach the task log in the order they were printed, the summary last;
warnings and errors (a divergence, a preemption) go to stderr.

The log interval: ``--log-interval N`` prints a step line every N steps; without it the
interval is :func:`log_interval` of the epoch's length, so a short epoch still shows a few
lines and a long one no more than one every ``MAX_INTERVAL`` steps. Each line costs one read
of a device value, so the interval also bounds how often a step waits for the device.

Torch-free: the portal (client side) may import it to parse lines.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

MARK = "paijob: "
LINES_PER_EPOCH = 10  # without --log-interval: about this many step lines in a short epoch...
MAX_INTERVAL = 50  # ...and in a long one, one line every this many steps
SUMMARY_FILE = "summary.json"


def log_interval(requested: int | None, steps: int) -> int:
    """Steps between step lines: ``requested`` as given, else the auto interval for ``steps``.

    Auto: ``ceil(steps / LINES_PER_EPOCH)``, at most ``MAX_INTERVAL``, at least 1; with the line
    at each epoch's last step, an epoch shows at least one line and, up to ``LINES_PER_EPOCH *
    MAX_INTERVAL`` steps, at most ``LINES_PER_EPOCH``.
    """
    if requested is not None:
        return max(1, requested)
    return max(1, min(MAX_INTERVAL, math.ceil(steps / LINES_PER_EPOCH)))


def step_line(epoch: int, epochs: int, step: int, steps: int, loss: float, lr: float, rate: float) -> str:
    """The step line; ``epoch`` and ``step`` count from 1."""
    return f"{MARK}epoch {epoch}/{epochs} step {step}/{steps} loss {loss:.4f} lr {lr:.4g} {rate:.1f} img/s"


def epoch_line(epoch: int, epochs: int, record: dict[str, Any]) -> str:
    """The epoch line, from the epoch's history record (losses, top-1 as fractions, images_per_sec)."""
    return (f"{MARK}epoch {epoch}/{epochs} train loss {record['train_loss']:.4f} "
            f"top1 {100 * record['train_top1']:.2f}% | eval loss {record['eval_loss']:.4f} "
            f"top1 {100 * record['eval_top1']:.2f}% | {record['images_per_sec']:.1f} img/s")


def summary_line(summary: dict[str, Any], path: str) -> str:
    """The run's last line: the summary's headline and where the whole of it is."""
    final = summary.get("final") or {}
    parts = [f"{MARK}summary {summary['status']} {summary['epochs']}/{summary['epochs_requested']} epochs"]
    if "eval_loss" in final:
        parts.append(f"eval loss {final['eval_loss']:.4f} top1 {100 * final['eval_top1']:.2f}%")
    parts += [f"{summary['images_per_sec']:.1f} img/s", f"{summary['wall_time_s']:.1f} s", path]
    return " | ".join(parts)


_NUMBER = r"(-?(?:[0-9.]+(?:e[-+]?\d+)?|nan|inf))"
_STEP_RE = re.compile(rf"paijob: epoch (\d+)/(\d+) step (\d+)/(\d+) loss {_NUMBER} lr {_NUMBER} {_NUMBER} img/s$")
_EPOCH_RE = re.compile(rf"paijob: epoch (\d+)/(\d+) train loss {_NUMBER} top1 {_NUMBER}% \| "
                       rf"eval loss {_NUMBER} top1 {_NUMBER}% \| {_NUMBER} img/s$")
_SUMMARY_RE = re.compile(rf"paijob: summary (\w+) (\d+)/(\d+) epochs"
                         rf"(?: \| eval loss {_NUMBER} top1 {_NUMBER}%)? \| {_NUMBER} img/s \| {_NUMBER} s \| (.+)$")


@dataclass(frozen=True)
class ProgressPoint:
    """One parsed line. ``kind``: ``step``, ``epoch`` or ``summary``; top-1 as a fraction."""

    kind: str
    epoch: int
    epochs: int
    images_per_sec: float
    step: int | None = None  # step lines: the step within the epoch (from 1) ...
    steps: int | None = None  # ... of this many
    loss: float | None = None  # step: the epoch's running training loss; epoch: its training loss
    lr: float | None = None
    train_top1: float | None = None
    eval_loss: float | None = None
    eval_top1: float | None = None
    status: str | None = None  # summary lines: completed | preempted | diverged ...
    seconds: float | None = None  # ... wall time ...
    path: str | None = None  # ... and where the summary JSON is


def _fraction(percent: str | None) -> float | None:
    return None if percent is None else float(percent) / 100


def parse_line(line: str) -> ProgressPoint | None:
    """The progress point a console line carries, or None for any other line."""
    line = line.rstrip("\r\n")
    if MARK not in line:
        return None
    if found := _STEP_RE.search(line):
        e, n, s, t, loss, lr, rate = found.groups()
        return ProgressPoint("step", int(e), int(n), float(rate), step=int(s), steps=int(t), loss=float(loss),
                             lr=float(lr))
    if found := _EPOCH_RE.search(line):
        e, n, loss, top1, eval_loss, eval_top1, rate = found.groups()
        return ProgressPoint("epoch", int(e), int(n), float(rate), loss=float(loss), train_top1=_fraction(top1),
                             eval_loss=float(eval_loss), eval_top1=_fraction(eval_top1))
    if found := _SUMMARY_RE.search(line):
        status, e, n, eval_loss, eval_top1, rate, seconds, path = found.groups()
        return ProgressPoint("summary", int(e), int(n), float(rate), status=status,
                             eval_loss=None if eval_loss is None else float(eval_loss),
                             eval_top1=_fraction(eval_top1), seconds=float(seconds), path=path)
    return None


class Progress:
    """Rank 0's step lines: rewritten in place on a terminal, plain lines otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = enabled and sys.stderr.isatty()

    def log_step(self, epoch: int, epochs: int, step: int, steps: int, loss_sum: torch.Tensor, seen: int,
                 lr: float, rate: float) -> None:
        """A log interval's line: the one place a training step reads a device value back (the loss)."""
        loss = float(loss_sum.item()) / max(seen, 1)
        self.update(step_line(epoch, epochs, step, steps, loss, lr, rate), final=step == steps)

    def update(self, text: str, final: bool = False) -> None:
        if not self.enabled:
            return
        if self.tty:
            sys.stderr.write("\r" + text.ljust(100) + ("\n" if final else ""))
            sys.stderr.flush()
        else:
            print(text, flush=True)
