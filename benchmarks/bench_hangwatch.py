"""What the hang watch costs a training step: one sample's time, and training with and without it.

Three measures, printed with the machine they ran on:

* **sample**: the time one look of the worker's sampler takes (stack walk of a main thread
  30 frames deep, /proc reads, torch's collective count of an initialised gloo process group,
  the report written), median of 2000. The sampler holds the GIL for about that long once per
  interval, so ``sample / interval`` bounds what it takes from a Python-bound step.
* **ddp**: steady-state step time of a small DDP model (2 workers, gloo on CPU) under
  ``paijob-runtime train`` with the watch on (the default) and off (``--hang-timeout 0``),
  runs alternated, the median of each side. On a busy 2-core machine run-to-run noise is
  larger than the effect; the ratio is reported with the spread of each side.
* **recipe**: steady-state images/s of ``--recipe cifar10`` (ConvNet, synthetic data, 2 workers,
  gloo) with the watch on and off, runs alternated, medians.
* **evidence**: one write of the slow-rank doctor's evidence (paijob.runtime.watch.evidence: the
  flight recorder read without stack traces, full at the watch's buffer size, and the file
  written), which every worker's sampler does once per 5 s; CPU time, median of 50: after one
  collective between writes, and after 700 (140 a second, a DDP job's rate: the file then keeps
  its most, :data:`~paijob.runtime.watch.evidence.MAX_KEPT_CALLS`).
* **many**: the same as **ddp** for a job of many small collectives (41 all_reduces of 1000 floats a
  step, and a little compute): what the recorder and the evidence cost where they cost most.
* **recorder**: what torch's flight recorder, which the watch keeps on for gloo workers
  (``TORCH_FR_BUFFER_SIZE``, paijob.runtime.watch.node.recorder), adds to one collective: a one-rank
  gloo group all-reduces one float 20000 times with it on and off, in fresh processes
  alternated, the median of each side; the difference is the recorder's cost per collective
  (the ddp and recipe runs include it, on the "on" side).

    python benchmarks/bench_hangwatch.py [--runs 3] [--steps 2000] [--sample-only] [--many-only]

``--sample-only``: the sample and the recorder (a minute), no training runs; ``--many-only``: those and
the many-collectives job (issue 53's per-collective budget), not the ddp and recipe runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from paijob.runtime.watch.evidence import WRITE_EVERY  # noqa: E402 - after the path

STEPS_SCRIPT = """
import os, sys, time
import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("gloo")
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batch = torch.randn(64, 256)
steps = int(sys.argv[2])
times = []
for step in range(steps + 20):
    start = time.perf_counter()
    opt.zero_grad()
    model(batch).square().mean().backward()
    opt.step()
    times.append(time.perf_counter() - start)
if dist.get_rank() == 0:
    with open(sys.argv[1], "w") as fh:
        fh.write(repr(sum(times[20:]) / steps))
"""

# 41 small all_reduces a step and a little compute: hundreds of collectives a second, where the flight
# recorder (one entry per collective) and the evidence (thousands of calls kept) cost the most
MANY_SCRIPT = """
import os, sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
torch.manual_seed(0)
grads = [torch.randn(1000) for _ in range(41)]
weight, batch = torch.randn(256, 256), torch.randn(64, 256)
steps = int(sys.argv[2])
times = []
for step in range(steps + 20):
    start = time.perf_counter()
    for _ in range(4):
        batch = torch.tanh(batch @ weight)
    for grad in grads:
        dist.all_reduce(grad)
    times.append(time.perf_counter() - start)
if dist.get_rank() == 0:
    with open(sys.argv[1], "w") as fh:
        fh.write(repr(sum(times[20:]) / steps))
"""


def measure_sample(samples: int = 2000) -> tuple[float, float]:
    """Median (CPU seconds, wall seconds) of one look: faulthandler's watchdog re-armed,
    Sampler.sample() and its write, looking at a thread
    30 frames deep. The CPU time is what the sampler holds the GIL for; the wall time also
    counts waiting for a core on a busy machine."""
    import torch.distributed as dist

    from paijob.runtime.watch.worker.process import collectives_issued
    from paijob.runtime.watch.worker.sampler import Sampler

    # a process group as a worker has one: the sampler reads its collective count every look
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    assert collectives_issued() == 0
    ready, done = threading.Event(), threading.Event()

    def deep(n: int) -> None:
        if n:
            deep(n - 1)
        else:
            ready.set()
            done.wait()

    thread = threading.Thread(target=deep, args=(30,), daemon=True)
    thread.start()
    ready.wait()
    with tempfile.TemporaryDirectory() as folder:
        sampler = Sampler(folder, 0)
        sampler.main = thread  # look at the deep thread as the sampler looks at a worker's main thread
        sampler._open_stack_file()  # noqa: SLF001 - as start() does, without the thread
        cpu, wall = [], []
        for _ in range(samples):
            start, start_cpu = time.perf_counter(), time.thread_time()
            sampler.arm_watchdog()  # faulthandler's watchdog re-armed, as every look does
            sampler.write(sampler.sample())
            cpu.append(time.thread_time() - start_cpu)
            wall.append(time.perf_counter() - start)
    done.set()
    dist.destroy_process_group()
    return statistics.median(cpu), statistics.median(wall)


RECORDER_SCRIPT = """
import os, sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
t = torch.ones(1)
for _ in range(2000):
    dist.all_reduce(t)
start = time.perf_counter()
for _ in range(20000):
    dist.all_reduce(t)
print((time.perf_counter() - start) / 20000, flush=True)
os._exit(0)  # no finalisation under gloo's threads (paijob.runtime.worker.finish says why)
"""


def measure_recorder(runs: int = 5) -> tuple[list[float], list[float]]:
    """Seconds per tiny all_reduce with the flight recorder on (as the watch sets it) and off."""
    from paijob.common import contract

    on: list[float] = []
    off: list[float] = []
    for _ in range(runs):
        for side, entries in ((off, "0"), (on, str(contract.FLIGHT_RECORDER_ENTRIES))):
            env = {**os.environ, contract.FLIGHT_RECORDER: entries, "OMP_NUM_THREADS": "1"}
            done = subprocess.run([sys.executable, "-c", RECORDER_SCRIPT], env=env, check=True,
                                  capture_output=True, text=True, timeout=300)
            side.append(float(done.stdout.strip().splitlines()[-1]))
    return on, off


EVIDENCE_SCRIPT = """
import os, statistics, sys, tempfile, time
import torch
import torch.distributed as dist
from paijob.runtime.watch.evidence import Evidence
from paijob.runtime.watch.folder import write_new
from paijob.runtime.watch.frames import is_library

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
t = torch.ones(1)
for _ in range(1000):
    dist.all_reduce(t)  # the recorder's ring buffer full
between = int(sys.argv[1])  # collectives between two writes
with tempfile.TemporaryDirectory() as folder:
    evidence = Evidence(folder, 0, is_library=is_library, write=write_new)
    cpu = []
    for i in range(50):
        for _ in range(between):
            dist.all_reduce(t)
        start = time.thread_time()
        evidence.write(float(i), {"pid": os.getpid(), "start_time": 0, "first_progress": True})
        cpu.append(time.thread_time() - start)
print(statistics.median(cpu), len(evidence.calls), flush=True)
os._exit(0)
"""


def measure_evidence(between: int = 1) -> tuple[float, int]:
    """CPU seconds of one write of the slow-rank doctor's evidence (the flight recorder read without
    stack traces, its entries kept, the file written), with the recorder full as the watch sets it and
    ``between`` collectives since the last write; and how many collectives it kept. A worker's sampler
    does it once per 5 s."""
    from paijob.common import contract

    env = {**os.environ, contract.FLIGHT_RECORDER: str(contract.FLIGHT_RECORDER_ENTRIES),
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", EVIDENCE_SCRIPT, str(between)], env=env, check=True,
                          capture_output=True, text=True, timeout=300)
    seconds, kept = done.stdout.strip().splitlines()[-1].split()
    return float(seconds), int(kept)


def run_ddp(steps: int, watch: bool, source: str = STEPS_SCRIPT) -> float:
    """Mean seconds per step (rank 0, after 20 warm-up steps) of ``source`` under paijob-runtime train."""
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "steps.py"
        script.write_text(source)
        out = Path(folder) / "step_time"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PAI_", "PAIJOB_"))}
        env.update({"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1",
                    "PYTHONPATH": str(ROOT)})
        args = [sys.executable, "-m", "paijob.runtime.cli", "train", "--nproc-per-node", "2"]
        if not watch:
            args += ["--hang-timeout", "0"]
        subprocess.run([*args, str(script), str(out), str(steps)], env=env, cwd=folder,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
        return float(out.read_text())


def run_recipe(watch: bool) -> float:
    """Steady-state images/s of ``--recipe cifar10`` (synthetic, 2 workers) under paijob-runtime."""
    with tempfile.TemporaryDirectory() as folder:
        summary = Path(folder) / "summary.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PAI_", "PAIJOB_"))}
        env.update({"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)})
        args = [sys.executable, "-m", "paijob.runtime.cli", "train", "--nproc-per-node", "2",
                "--backend", "gloo"]
        if not watch:
            args += ["--hang-timeout", "0"]
        args += ["--recipe", "cifar10", "--data", "synthetic", "--epochs", "2", "--batch-size", "100",
                 "--precision", "fp32", "--synthetic-size", "6000", "--output-dir",
                 str(Path(folder) / "out"), "--no-resume", "--eval-steps", "1", "--summary-json",
                 str(summary)]
        subprocess.run(args, env=env, cwd=folder, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=900)
        return float(json.loads(summary.read_text())["steady_images_per_sec"])


def alternated(runs: int, run: Callable[[bool], float]) -> tuple[list[float], list[float]]:
    """``run(watch)`` ``runs`` times on each side, off then on, alternated: (on, off)."""
    on: list[float] = []
    off: list[float] = []
    for _ in range(runs):
        off.append(run(False))
        on.append(run(True))
        print(f"  off {off[-1] * 1e3:.2f} ms, on {on[-1] * 1e3:.2f} ms", flush=True)
    return on, off


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--sample-only", action="store_true",
                        help="measure one sample only (no training runs: seconds, not minutes)")
    parser.add_argument("--many-only", action="store_true",
                        help="the sample, the recorder and the many-collectives job only (not ddp, recipe)")
    args = parser.parse_args()
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, " \
              f"Python {platform.python_version()}"
    sample, sample_wall = measure_sample()
    interval = 1.0
    print(f"machine: {machine}; load average {os.getloadavg()[0]:.1f}")
    print(f"one sample: {sample * 1e6:.0f} us of CPU ({sample_wall * 1e6:.0f} us wall); at one "
          f"sample per {interval:g}s: {sample / interval:.4%} of a Python-bound step")
    evidence, kept = measure_evidence()
    print(f"slow-rank doctor's evidence: {evidence * 1e3:.2f} ms of CPU a write ({kept} collectives kept), "
          f"once per {WRITE_EVERY:g}s: {evidence / WRITE_EVERY:.4%} of a Python-bound step")
    evidence_full, kept_full = measure_evidence(between=700)
    print(f"  at 140 collectives a second: {evidence_full * 1e3:.2f} ms of CPU a write ({kept_full} kept), "
          f"{evidence_full / WRITE_EVERY:.4%} of a Python-bound step")
    fr_on, fr_off = measure_recorder()
    fr_cost = statistics.median(fr_on) - statistics.median(fr_off)
    print(f"flight recorder: {fr_cost * 1e6:+.1f} us per collective (tiny all_reduce, one rank: "
          f"median {statistics.median(fr_on) * 1e6:.1f} us on / {statistics.median(fr_off) * 1e6:.1f} "
          f"us off; on {min(fr_on) * 1e6:.1f}-{max(fr_on) * 1e6:.1f}, off "
          f"{min(fr_off) * 1e6:.1f}-{max(fr_off) * 1e6:.1f})")
    recorder = {"recorder_on_seconds": fr_on, "recorder_off_seconds": fr_off,
                "recorder_cost_seconds": fr_cost, "evidence_write_cpu_seconds": evidence,
                "evidence_write_full_cpu_seconds": evidence_full, "evidence_full_kept": kept_full,
                "evidence_every_seconds": WRITE_EVERY}
    if args.many_only or not args.sample_only:
        many_on, many_off = alternated(args.runs, lambda watch: run_ddp(args.steps, watch, MANY_SCRIPT))
        many_ratio = statistics.median(many_on) / statistics.median(many_off)
        rate = 41 / statistics.median(many_on)
        print(f"many collectives (41 a step, {rate:.0f} a second on each rank), watch on / off: {many_ratio:.4f} "
              f"(median {statistics.median(many_on) * 1e3:.2f} / {statistics.median(many_off) * 1e3:.2f} ms; on "
              f"{min(many_on) * 1e3:.2f}-{max(many_on) * 1e3:.2f}, off {min(many_off) * 1e3:.2f}-"
              f"{max(many_off) * 1e3:.2f})")
        recorder.update(many_step_on=many_on, many_step_off=many_off, many_ratio=many_ratio,
                        many_collectives_per_second=rate)
    if args.sample_only or args.many_only:
        if args.json:
            Path(args.json).write_text(json.dumps({
                "machine": machine, "load_average": os.getloadavg(), "sample_cpu_seconds": sample,
                "sample_wall_seconds": sample_wall, "interval": interval, **recorder}, indent=2))
        return
    on: list[float] = []
    off: list[float] = []
    for _ in range(args.runs):
        off.append(run_ddp(args.steps, watch=False))
        on.append(run_ddp(args.steps, watch=True))
        print(f"  step time off {off[-1] * 1e3:.2f} ms, on {on[-1] * 1e3:.2f} ms", flush=True)
    ratio = statistics.median(on) / statistics.median(off)
    print(f"ddp step time, watch on / off: {ratio:.4f} (median {statistics.median(on) * 1e3:.2f} "
          f"/ {statistics.median(off) * 1e3:.2f} ms; on {min(on) * 1e3:.2f}-{max(on) * 1e3:.2f}, "
          f"off {min(off) * 1e3:.2f}-{max(off) * 1e3:.2f})")
    rec_on: list[float] = []
    rec_off: list[float] = []
    for _ in range(args.runs):
        rec_off.append(run_recipe(watch=False))
        rec_on.append(run_recipe(watch=True))
        print(f"  recipe images/s off {rec_off[-1]:.0f}, on {rec_on[-1]:.0f}", flush=True)
    rec_ratio = statistics.median(rec_on) / statistics.median(rec_off)
    print(f"recipe images/s, watch on / off: {rec_ratio:.4f} (median {statistics.median(rec_on):.0f} "
          f"/ {statistics.median(rec_off):.0f}; on {min(rec_on):.0f}-{max(rec_on):.0f}, "
          f"off {min(rec_off):.0f}-{max(rec_off):.0f})")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "machine": machine, "load_average": os.getloadavg(), "sample_cpu_seconds": sample,
            "sample_wall_seconds": sample_wall,
            "interval": interval, "ddp_step_on": on, "ddp_step_off": off, "ddp_ratio": ratio,
            "recipe_on": rec_on, "recipe_off": rec_off, "recipe_ratio": rec_ratio, **recorder},
            indent=2))


if __name__ == "__main__":
    main()
