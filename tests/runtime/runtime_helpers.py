"""Helpers for the runtime's multi-process tests: OpenPAI-like task environments on one host.

A module of its own, not conftest.py: ``from conftest import`` takes whichever conftest pytest
imported first, which is another folder's when several test folders run together.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from paijob.common import procfs, records
from paijob.common.ports import draw

RUNTIME = [sys.executable, "-m", "paijob.runtime.cli"]
ROOT = Path(__file__).resolve().parents[2]
# A node waits this long for the others (the master's port, the rendezvous); paijob-runtime's
# default, 600 s, would outlast any test whose other node already died. start_task passes it.
MASTER_TIMEOUT = 30
# Once one node of a test has ended, the others get this long to end too (paijob-runtime's own
# peer watch ends them within seconds); then they are killed and the test fails saying so.
PEER_GRACE = 20


def free_port() -> int:
    """A free port outside the kernel's ephemeral range, which gloo's many connections draw from."""
    return draw()[0]


def base_env() -> dict[str, str]:
    """This process's environment minus anything distributed, CPU only."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PAI_", "PAIJOB_", "TORCHELASTIC_"))
        and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["OMP_NUM_THREADS"] = "1"
    return env


def task_env(port: int, index: int, instances: int = 2, gpus: int = 0) -> dict[str, str]:
    """What OpenPAI gives task ``index`` of a one-role job named ``worker``."""
    env = base_env()
    env.update(
        {
            "PAI_JOB_NAME": "tester~runtime",
            "PAI_USER_NAME": "tester",
            "PAI_TASK_ROLE_LIST": "worker",
            "PAI_TASK_ROLE_TASK_COUNT_worker": str(instances),
            "PAI_RESOURCE_worker": f"{gpus},2,4096,512",
            "PAI_CURRENT_TASK_ROLE_NAME": "worker",
            "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": str(index),
            "PAI_TASK_INDEX": str(index),
            "PAI_PORT_LIST_worker_0_SynPort": str(port),
            "PAI_worker_0_SynPort_PORT": str(port),
            "PAI_TASK_ROLE_INSTANCES": ",".join(f"worker:{i}" for i in range(instances)),
        }
    )
    for i in range(instances):
        env[f"PAI_HOST_IP_worker_{i}"] = "127.0.0.1"
    return env


class Task:
    """One ``paijob-runtime`` process with its output in a file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, cwd: Path) -> None:
        self.log = log
        self._fh = open(log, "wb")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [*RUNTIME, *args], env=env, cwd=cwd, stdout=self._fh, stderr=subprocess.STDOUT
        )
        self.ended_at: float | None = None

    def kill(self) -> None:
        """SIGKILL the task and every process below it (a stopped rank continued, so it dies): a test that
        gives up on a task leaves no rank of it behind, which would hold a port or a core forever."""
        children: dict[int, list[int]] = {}
        for stat in procfs.processes():
            children.setdefault(stat.ppid, []).append(stat.pid)
        tree, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, []))
        for pid in tree:
            for signum in (signal.SIGKILL, signal.SIGCONT):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signum)

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is not None and self.ended_at is None:
            self.ended_at = time.time()
        return code

    def wait(self, timeout: float) -> int:
        deadline = time.time() + timeout
        while self.poll() is None:
            if time.time() > deadline:
                self.kill()
                self.proc.wait()
                self._fh.close()
                raise AssertionError(f"timed out; output:\n{self.output}")
            time.sleep(0.05)
        self._fh.close()
        return int(self.proc.returncode)

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")


def wait_all(tasks: list[Task], timeout: float, peer_grace: float = PEER_GRACE) -> list[int]:
    """Every task's exit code. Once one task ended, the others get ``peer_grace`` seconds to end
    (never a dead peer's --master-timeout); after that, or ``timeout``, the survivors are killed
    and the test fails with every task's output."""
    deadline = time.time() + timeout
    while any(t.poll() is None for t in tasks):
        ended = [t.ended_at for t in tasks if t.ended_at is not None]
        if time.time() > deadline or (ended and time.time() > min(ended) + peer_grace):
            break
        time.sleep(0.05)
    survivors = [t for t in tasks if t.poll() is None]
    if survivors:
        for task in survivors:
            task.kill()
        codes = [t.wait(30) for t in tasks]
        raise AssertionError(
            f"exit codes {codes}: {len(survivors)} task(s) still ran {peer_grace:.0f}s after another "
            f"ended (or {timeout:.0f}s after the start), killed\n"
            + "\n".join(f"----- {t.log.name}:\n{t.output}" for t in tasks))
    return [t.wait(1) for t in tasks]


def root_cause(log_text: str) -> str | None:
    """What a cluster reads of a task's log: paijob-runtime's last failure record, in its words (None: none).
    (These tasks run without a cluster's record key, so their records are unsigned.)"""
    record = records.last_failure(log_text)
    return record.describe() if record else None


def has_gloo_flight_recorder() -> bool:
    """Whether this torch records gloo's collectives (2.13 does, 2.4 does not): the mismatch account and the
    slow-rank doctor read it."""
    import torch

    return hasattr(torch._C._distributed_c10d, "_dump_fr_trace")  # noqa: SLF001


def skip_without_gloo_flight_recorder(then: str) -> None:
    """Skip the calling test on a torch without gloo's flight recorder; ``then`` says what paijob does there."""
    import pytest
    import torch

    if not has_gloo_flight_recorder():
        pytest.skip(f"torch {torch.__version__} has no flight recorder for gloo ({then})")
