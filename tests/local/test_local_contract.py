"""The contract: a rendered job means the same world to validate, the local cluster and paijob-runtime.

Every golden job (rendered by paijob's own templates) goes render -> local plan
-> each task's OpenPAI environment (``paijob.local.taskspec.task_env``, which is
what the local runner gives a task) -> ``paijob-runtime env --json`` with the
options the job's command passes, and the world size and layout must be what
``paijob validate`` reported for the file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from paijob.local.taskspec import Ports, task_env
from paijob.openpai.jsyaml import load_job
from paijob.openpai.model import Job, parse_job
from paijob.openpai.names import runtime_role_name
from paijob.runtime import cli as runtime_cli
from paijob.validate.report import validate_file
from paijob.validate.runtime_plan import DistributedPlan, RuntimeCall, runtime_calls

GOLDEN = Path(__file__).resolve().parents[1] / "render" / "golden"
GOLDENS = sorted(GOLDEN.glob("*.yaml"))


def _ports(plan: Job) -> Ports:
    """Distinct port numbers per task and label, as the local runner would pick them."""
    numbers = iter(range(20000, 30000))
    return {role.name: {i: {label: [next(numbers) for _ in range(count)] for label, count in role.resources.all_ports.items()}
                        for i in range(role.instances)}
            for role in plan.roles}


def _runtime_argv(call: RuntimeCall) -> list[str]:
    argv = ["env", "--json", "--mode", call.mode, "--nproc-per-node", call.nproc or "auto"]
    for option, value in (("--port-label", call.port_label), ("--master-role", call.master_role),
                          ("--roles", call.roles)):
        if value is not None:
            argv += [option, value]
    return argv


def _task_environments(path: Path) -> tuple[DistributedPlan, list[tuple[str, int, dict[str, str], RuntimeCall]]]:
    report = validate_file(path)
    assert report.ok, report.formatted_problems()
    assert report.plan is not None
    job = load_job(path.read_text(encoding="utf-8"), str(path)).value
    plan = parse_job(job)
    ports = _ports(plan)
    order = [(role.name, i) for role in plan.roles for i in range(role.instances)]
    tasks = []
    for k, (role, index) in enumerate(order):
        calls = runtime_calls(role, job["taskRoles"][role]["commands"])
        if not calls:
            continue
        placed = None if plan.gang_allocation else set(order[: k + 1])  # started one by one without gang
        env = task_env(plan, "alice", role, index, ports, placed=placed)
        gpu = plan.role(role).resources.gpu  # type: ignore[union-attr]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in range(gpu))  # the GPUs OpenPAI gives the task
        tasks.append((role, index, env, calls[0]))
    return report.plan, tasks


def _runtime_env(env: dict[str, str], call: RuntimeCall, monkeypatch: pytest.MonkeyPatch,
                 capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    with monkeypatch.context() as patch:
        for key in list(os.environ):
            if key.startswith(("PAI_", "FC_")) or key == "CUDA_VISIBLE_DEVICES":
                patch.delenv(key)
        for key, value in env.items():
            patch.setenv(key, value)
        assert runtime_cli.main(_runtime_argv(call)) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


@pytest.mark.parametrize("path", GOLDENS, ids=[p.stem for p in GOLDENS])
def test_every_task_of_a_golden_job_sees_the_world_validate_reports(
        path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    expected, tasks = _task_environments(path)
    if expected.launcher != "paijob-runtime":
        assert expected.launcher == "mpirun" and all(call.mode == "horovod" for *_, call in tasks)
        pytest.skip(f"{path.name} launches with mpirun: its slots take their layout from MPI "
                    f"(paijob-runtime train --mode horovod), not from PAI_* variables")
    assert tasks, f"{path.name}: no task runs paijob-runtime"
    layouts = {layout.role: layout for layout in expected.roles}
    seen: list[dict[str, Any]] = [_runtime_env(env, call, monkeypatch, capsys) for _, _, env, call in tasks]
    for (role, index, env, _), got in zip(tasks, seen, strict=True):
        where = f"{path.name} {role}/{index}"
        assert got["world_size"] == expected.world_size, where
        assert got["nproc_per_node"] == layouts[role].processes_per_node, where
        assert got["nnodes"] == expected.nodes, where
        assert got["master_addr"] == "127.0.0.1", where
        master = expected.master_role or tasks[0][0]
        label = expected.port_label or "SynPort"
        assert str(got["master_port"]) == env[f"PAI_PORT_LIST_{runtime_role_name(master)}_0_{label}"].split(",")[0], where
    ranks = sorted(rank for got in seen for rank in got["ranks"])
    assert ranks == list(range(expected.world_size or 0)), path.name
    assert sorted(got["node_rank"] for got in seen) == list(range(expected.nodes)), path.name


def test_a_task_sees_its_role_as_written_and_the_runtime_accepts_either_name(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setenv("PAIJOB_OPENPAI_BEFORE_1_6", "1")  # an OpenPAI older than v1.6 runs role Worker_A
    text = (GOLDEN / "ddp-cpu-2x2.yaml").read_text(encoding="utf-8").replace("\n  worker:\n", "\n  Worker_A:\n")
    renamed = tmp_path / "renamed.yaml"
    renamed.write_text(text, encoding="utf-8")
    expected, tasks = _task_environments(renamed)
    # k8s.js generateTaskRole: {name: 'PAI_CURRENT_TASK_ROLE_NAME', value: taskRole}, the role as the job writes it
    assert tasks[1][2]["PAI_CURRENT_TASK_ROLE_NAME"] == "Worker_A"
    assert tasks[1][2]["FC_TASKROLE_NAME"] == "workera"  # frameworkcontroller's task role: convertName's
    for current in ("Worker_A", "workera"):  # older local clusters set the converted name
        got = _runtime_env({**tasks[1][2], "PAI_CURRENT_TASK_ROLE_NAME": current}, tasks[1][3], monkeypatch, capsys)
        assert (got["role"], got["node_rank"], got["world_size"]) == ("Worker_A", 1, expected.world_size)


def test_the_paijob_runtime_program_reads_a_local_task_environment() -> None:
    """The same check once through the real console script, as a task runs it."""
    expected, tasks = _task_environments(GOLDEN / "ddp-cpu-2x2.yaml")
    role, index, env, call = tasks[-1]
    program = Path(sys.executable).parent / "paijob-runtime"
    if not program.exists():
        pytest.skip("no paijob-runtime console script beside this Python (install the package)")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PAI_", "FC_"))}
    done = subprocess.run([str(program), *_runtime_argv(call)], env={**clean, **env}, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert (got["world_size"], got["node_rank"]) == (expected.world_size, index)
