"""How the runtime is put together: no import circle, one launch config, options the client can read."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from runtime_helpers import ROOT

from paijob.runtime.config import LaunchConfig, LaunchError, WorkerCommand
from paijob.runtime.env import DistEnv

RUNTIME_DIR = ROOT / "paijob" / "runtime"


def _imports(path: Path, package: str) -> set[str]:
    """Every ``paijob.runtime`` module ``path`` imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            module = node.module if node.level == 0 else f"{package}.{node.module}"
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("paijob.runtime.")}


def _runtime_graph() -> dict[str, set[str]]:
    modules = {
        ".".join(("paijob", "runtime", *p.relative_to(RUNTIME_DIR).with_suffix("").parts)): p
        for p in [*RUNTIME_DIR.glob("*.py"), *(RUNTIME_DIR / "watch").rglob("*.py")]
        if p.stem != "__init__"
    }
    return {name: _imports(path, name.rsplit(".", 1)[0]) & modules.keys() for name, path in modules.items()}


def test_the_agent_does_not_reach_back_into_the_launcher():
    graph = _runtime_graph()
    assert "paijob.runtime.launch" not in graph["paijob.runtime.agent"]
    assert "paijob.runtime.launch" not in graph["paijob.runtime.watch.node.liveness"]


def test_the_watch_folder_imports_nothing_of_the_launcher_above_it():
    # watch/ is "how a node knows it is healthy"; launch, agent, cli and worker start the node
    graph = _runtime_graph()
    launcher = {f"paijob.runtime.{name}" for name in ("launch", "agent", "cli", "worker")}
    watch = {name for name in graph if name.startswith("paijob.runtime.watch.")}
    assert len(watch) >= 7
    for name in watch:
        assert not graph[name] & launcher, name


def test_the_watch_sends_no_signal_to_anything():
    # it reads files and /proc; a signal woke a worker's C call holding the GIL (issue 33)
    for path in (RUNTIME_DIR / "watch").rglob("*.py"):
        calls = {f"{node.func.value.id}.{node.func.attr}" for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                 and isinstance(node.func.value, ast.Name)}
        assert not calls & {"os.kill", "os.killpg", "signal.pthread_kill", "faulthandler.register"}, path.name


def test_launch_starts_one_thing_and_stops_one_thing():
    # a one-process node's watchers are built, started and stopped together (watch/health.py)
    built = {node.func.id for node in ast.walk(ast.parse((RUNTIME_DIR / "launch.py").read_text()))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert not built & {"HangWatch", "SlowDoctor", "StoreLink", "MasterPortWatch", "Channel", "StoreChannel",
                        "OneProcessHealth", "Eyes", "NodeTick"}
    assert "process_health" in built


def test_the_shared_torch_free_package_imports_nothing_of_the_runtime():
    # the runtime's option grammar, procfs, atomic writes, the worker contract: both sides import them
    for path in (ROOT / "paijob" / "common").glob("*.py"):
        assert _imports(path, "paijob.common") == set(), path.name


def test_validate_and_render_load_nothing_of_the_runtime():
    # a fresh interpreter: this one has imported the whole runtime already
    probe = (
        "import sys, io, contextlib\n"
        "from paijob.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['validate', 'examples/cifar10-local.yaml']) == 0\n"
        "    assert main(['render', 'ddp']) == 0\n"
        "print(sorted(m for m in sys.modules if m.startswith('paijob.runtime')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"  # the option grammar they read is paijob.common.options


def _dist(nnodes: int = 2, node_rank: int = 1, nproc: int = 2, job: str | None = "u~j") -> DistEnv:
    return DistEnv(master_addr="10.0.0.1", master_port=29500, node_rank=node_rank, nnodes=nnodes,
                   nproc_per_node=nproc, world_size=nnodes * nproc, rank_offset=node_rank * nproc,
                   backend="gloo", job_name=job)


def test_one_launch_config_carries_what_the_agent_and_the_node_watch_need():
    config = LaunchConfig(dist=_dist(), command=WorkerCommand(script="t.py"), master_timeout=0.4)
    assert config.master == "10.0.0.1:29500"
    assert config.run_id == "u~j"  # the same on every node: the job's name
    assert LaunchConfig(dist=_dist(job=None), command=config.command).run_id == "paijob"
    assert config.rendezvous_timeout == 1  # whole seconds for torch, at least one
    assert config.expected_ranks() == [2, 3]
    assert config.multi_node
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.grace_period = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"master_timeout": 0}, "--master-timeout must be a positive number of seconds"),
        ({"heartbeat_timeout": float("nan")}, "--heartbeat-timeout must be a positive number"),
        ({"grace_period": -1}, "--grace-period must be >= 0"),
        ({"mode": "horovod"}, "--mode must be one of per-gpu, per-node, dataparallel"),
        ({"mode": "dataparallel"}, "--mode dataparallel runs one process on one node"),
    ],
)
def test_a_launch_config_refuses_what_no_launch_can_do(changes, message):
    with pytest.raises(LaunchError, match=message):
        LaunchConfig(dist=_dist(), command=WorkerCommand(script="t.py"), **changes)
