"""The runtime tests' fixtures; their helpers are in runtime_helpers.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from runtime_helpers import MASTER_TIMEOUT, Task


@pytest.fixture
def start_task(tmp_path: Path) -> Callable[..., Task]:
    started: list[Task] = []

    def start(args: list[str], env: dict[str, str], name: str = "task") -> Task:
        if args[:1] == ["train"] and "--master-timeout" not in args:
            args = ["train", "--master-timeout", str(MASTER_TIMEOUT), *args[1:]]
        task = Task(args, env, tmp_path / f"{name}.log", tmp_path)
        started.append(task)
        return task

    yield start  # type: ignore[misc]
    for task in started:
        if task.proc.poll() is None:
            task.kill()
            task.proc.wait()
