"""Helpers for the training tests: tiny runs, free ports, rank processes with gloo."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from paijob.common.ports import draw

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--synthetic-size", "256", "--batch-size", "32", "--log-interval", "1000"]


def free_port() -> int:
    """A free port outside the kernel's ephemeral range, which gloo's many connections draw from."""
    return draw()[0]


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                        "MASTER_PORT", "PAIJOB_PRECISION", "PAIJOB_FAULT_AT", "PYTHONPATH")}
    env["PYTHONPATH"] = str(ROOT)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    env["PYTHONFAULTHANDLER"] = "1"  # a rank stopped with SIGABRT prints where every thread was
    env.update(extra)
    return env


PEER_GRACE = 20  # seconds the other ranks get to end once one has failed (never torch's store timeout)


def run_ranks(argv: list[str], world_size: int, cwd: Path, timeout: float = 120,
              **extra: str) -> list[subprocess.CompletedProcess[str]]:
    """Start ``python ARGV`` once per rank with the env paijob-runtime would set (gloo).

    Once a rank fails, the others get ``PEER_GRACE`` seconds to end before they are killed
    (their result shows the kill, -9): a test never waits out a dead peer.
    """
    port = str(free_port())
    procs = []
    outputs = []
    for rank in range(world_size):
        env = base_env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                       LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=port, PAIJOB_BACKEND="gloo")
        env.update(extra)
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # noqa: SIM115 - closed below
        outputs.append((out, err))
        procs.append(subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, stdout=out, stderr=err))
    deadline = time.monotonic() + timeout
    failed_at: float | None = None
    while any(proc.poll() is None for proc in procs):
        if failed_at is None and any(proc.poll() not in (None, 0) for proc in procs):
            failed_at = time.monotonic()
        if time.monotonic() > min(deadline, (failed_at or deadline) + PEER_GRACE):
            break
        time.sleep(0.05)
    timed_out = time.monotonic() > deadline
    _stop(procs, dump_stacks=timed_out)
    results = []
    for proc, (out, err) in zip(procs, outputs, strict=True):
        texts = []
        for handle in (out, err):
            handle.seek(0)
            texts.append(handle.read().decode(errors="replace"))
            handle.close()
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, *texts))
    if timed_out:
        report = "\n".join(f"--- rank {rank} exited {result.returncode}:\n{result.stderr[-4000:]}"
                           for rank, result in enumerate(results))
        raise AssertionError(f"ranks still running after {timeout} s: {procs[0].args}\n{report}")
    return results


def _stop(procs: list[subprocess.Popen[bytes]], dump_stacks: bool) -> None:
    """Kill the ranks still running; after a timeout, first let each print its threads' stacks."""
    live = [proc for proc in procs if proc.poll() is None]
    if dump_stacks:
        for proc in live:
            proc.send_signal(signal.SIGABRT)  # faulthandler (PYTHONFAULTHANDLER) writes to stderr
        ends = time.monotonic() + 10
        while time.monotonic() < ends and any(proc.poll() is None for proc in live):
            time.sleep(0.05)
    for proc in live:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def assert_all_ranks_succeeded(results: list[subprocess.CompletedProcess[str]]) -> None:
    """One rank's crash shows up on the others as a lost peer: print every rank's stderr."""
    if any(result.returncode != 0 for result in results):
        report = "\n".join(f"--- rank {rank} exited {result.returncode}:\n{result.stderr[-2500:]}"
                           for rank, result in enumerate(results))
        raise AssertionError(report)


def run_single(argv: list[str], cwd: Path, timeout: float = 120,
               **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=base_env(**extra), text=True,
                          capture_output=True, timeout=timeout)


def summary_of(stdout: str) -> dict[str, Any]:
    """The run's summary: the JSON file its last stdout line names, which the line agrees with."""
    from paijob.runtime.recipes.loglines import parse_line

    lines = [line for line in stdout.splitlines() if line.strip()]
    point = parse_line(lines[-1]) if lines else None
    assert point is not None and point.kind == "summary", f"no summary as last line:\n{stdout[-2000:]}"
    assert point.path is not None
    summary: dict[str, Any] = json.loads(Path(point.path).read_text())
    assert (point.status, point.epoch, point.epochs) == (summary["status"], summary["epochs"],
                                                         summary["epochs_requested"])
    return summary
