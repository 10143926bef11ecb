"""Helpers for the training tests: tiny runs, free ports, rank processes with gloo."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--synthetic-size", "256", "--batch-size", "32", "--log-interval", "1000"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                        "MASTER_PORT", "PAIJOB_PRECISION", "PAIJOB_FAULT_AT", "PYTHONPATH")}
    env["PYTHONPATH"] = str(ROOT)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    env.update(extra)
    return env


def run_ranks(argv: list[str], world_size: int, cwd: Path, timeout: float = 120,
              **extra: str) -> list[subprocess.CompletedProcess[str]]:
    """Start ``python ARGV`` once per rank with the env paijob-runtime would set (gloo)."""
    port = str(free_port())
    procs = []
    for rank in range(world_size):
        env = base_env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                       LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=port, PAIJOB_BACKEND="gloo")
        env.update(extra)
        procs.append(subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


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
    from paijob.runtime.recipes.progress import parse_line

    lines = [line for line in stdout.splitlines() if line.strip()]
    point = parse_line(lines[-1]) if lines else None
    assert point is not None and point.kind == "summary", f"no summary as last line:\n{stdout[-2000:]}"
    assert point.path is not None
    summary: dict[str, Any] = json.loads(Path(point.path).read_text())
    assert (point.status, point.epoch, point.epochs) == (summary["status"], summary["epochs"],
                                                         summary["epochs_requested"])
    return summary
