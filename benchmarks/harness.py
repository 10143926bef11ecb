"""Shared measuring tools for the benchmarks: machine facts, timed commands, summaries.

Every benchmark reports the machine it ran on and every raw sample, so a
reader can check a ratio instead of trusting it.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from paijob.common.ports import draw

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
BIN = Path(sys.executable).parent


def machine_info() -> dict[str, object]:
    """What the numbers were measured on; absolute times mean nothing without it."""
    info: dict[str, object] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "gpus": _gpu_names(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda_available"] = torch.cuda.is_available()
    except ImportError:
        info["torch"] = None
    info["paijob_commit"] = _git_commit()
    return info


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    return None


def _gpu_names() -> list[str]:
    if not shutil.which("nvidia-smi"):
        return []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
        return [line.strip() for line in out.splitlines() if line.strip()]
    return []


def _git_commit() -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    return None


def free_port() -> int:
    """A free port outside the kernel's ephemeral range, which gloo's many connections draw from."""
    return draw()[0]


def simulated_pai_env(instances: int = 1, index: int = 0, port: int | None = None,
                      gpu: int = 0, role: str = "worker", label: str = "SynPort") -> dict[str, str]:
    """The PAI_* variables OpenPAI gives task `index` of a one-role job, all on 127.0.0.1."""
    port = port or free_port()
    env = {
        "PAI_JOB_NAME": "bench~launch",
        "PAI_USER_NAME": "bench",
        "PAI_TASK_ROLE_LIST": role,
        "PAI_TASK_ROLE_COUNT": "1",
        f"PAI_TASK_ROLE_TASK_COUNT_{role}": str(instances),
        f"PAI_RESOURCE_{role}": f"{gpu},2,4096,512",
        "PAI_CURRENT_TASK_ROLE_NAME": role,
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": str(index),
        "PAI_TASK_INDEX": str(index),
        "PAI_TASK_ROLE_INSTANCES": ",".join(f"{role}:{i}" for i in range(instances)),
    }
    for i in range(instances):
        env[f"PAI_HOST_IP_{role}_{i}"] = "127.0.0.1"
        # Only task 0's port matters to the rendezvous; the others get their own.
        task_port = port if i == 0 else free_port()
        env[f"PAI_PORT_LIST_{role}_{i}_{label}"] = str(task_port)
        env[f"PAI_{role}_{i}_{label}_PORT"] = str(task_port)
    return env


def base_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without any PAI_* or torch-distributed leftovers."""
    drop = ("PAI_", "MASTER_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_", "PAIJOB_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    # A user's Python caches bytecode; without that every run recompiles paijob.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


@dataclass
class Run:
    """One timed command: wall seconds, exit code and the tail of its output."""

    argv: list[str]
    seconds: float
    returncode: int
    output_tail: str
    started_at: float = field(default=0.0)


def timed(argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None,
          timeout: float = 600) -> Run:
    started = time.time()
    t0 = time.perf_counter()
    proc = subprocess.run(
        list(argv), env=dict(env) if env is not None else base_env(), cwd=cwd,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
    )
    seconds = time.perf_counter() - t0
    return Run(list(argv), seconds, proc.returncode, proc.stdout[-2000:], started)


def check(run: Run) -> Run:
    if run.returncode != 0:
        raise RuntimeError(
            f"benchmark command failed (exit {run.returncode}): {' '.join(run.argv)}\n"
            f"{run.output_tail}"
        )
    return run


def summarize(samples: Sequence[float]) -> dict[str, float]:
    return {
        "median": statistics.median(samples),
        "min": min(samples),
        "max": max(samples),
        "n": len(samples),
    }


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def write_json(path: Path, payload: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
