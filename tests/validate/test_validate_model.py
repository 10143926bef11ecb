"""The job model applies OpenPAI's defaults exactly as the rest-server does
(models/v2/job/k8s.js generateTaskRole, runtime-env.js generateFrameworkEnv)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from paijob.openpai.jsyaml import load_job
from paijob.openpai.model import parse_job
from paijob.openpai.taskenv import resource_value
from paijob.validate.report import validate_text

JOB = """\
protocolVersion: 2
name: model
type: job
prerequisites:
  - {type: dockerimage, name: image, uri: repo/image:tag}
taskRoles:
  worker:
    instances: 3
    dockerImage: image
    resourcePerInstance: {cpu: 4, memoryMB: 8192, gpu: 2, ports: {SynPort: 2}}
    commands: [python train.py]
"""


def role_of(extra: str = "", top: str = ""):  # type: ignore[no-untyped-def]
    text = JOB.replace("    commands:", extra + "    commands:") + top
    job = parse_job(load_job(text, "j").value)
    return job, job.roles[0]


def test_defaults_without_completion_shm_or_extras() -> None:
    job, role = role_of()
    assert (role.completion.min_failed, role.completion.min_succeeded) == (1, 3)
    assert role.shm_mb == 512 and resource_value(role) == "2,4,8192,0"  # 4th field 0, not 512
    assert role.resources.all_ports == {"SynPort": 2, "ssh": 1, "http": 1}
    assert job.gang_allocation and role.task_retry_count == 0 and job.virtual_cluster == "default"


@pytest.mark.parametrize(
    ("completion", "failed", "succeeded"),
    [("{minFailedInstances: null}", 1, 3), ("{minFailedInstances: 0}", 1, 3),
     ("{minFailedInstances: -1, minSucceededInstances: -1}", -1, -1),
     ("{minSucceededInstances: null}", 1, 3), ("{minSucceededInstances: 2}", 1, 2)],
)
def test_completion_counts_use_javascript_or(completion: str, failed: int, succeeded: int) -> None:
    _, role = role_of(f"    completion: {completion}\n")
    assert (role.completion.min_failed, role.completion.min_succeeded) == (failed, succeeded)


def test_shm_and_its_environment_field() -> None:
    _, role = role_of("    extraContainerOptions: {shmMB: 0}\n")
    assert role.shm_mb == 512 and resource_value(role) == "2,4,8192,0"
    _, role = role_of("    extraContainerOptions: {shmMB: 1024}\n")
    assert role.shm_mb == 1024 and resource_value(role) == "2,4,8192,1024"


def test_shm_null_is_refused_by_the_schema_and_would_mount_512_with_an_empty_field() -> None:
    """rest-server: protocol.js types shmMB as integer, so ajv refuses null (400, as `paijob validate`
    does: tests/conformance case shm-null). Past the schema, k8s.js would mount ``null || 512`` and
    runtime-env.js write ``[.., null].join(',')``: an empty 4th field (tests/conformance/test_task_env.py
    runs runtime-env.js itself on it)."""
    text = JOB.replace("    commands:", "    extraContainerOptions: {shmMB: null}\n    commands:")
    assert not validate_text(text, "j").ok
    _, role = role_of("    extraContainerOptions: {shmMB: null}\n")
    assert role.shm_mb == 512 and resource_value(role) == "2,4,8192,"


def test_task_retries_count_only_with_gang_allocation_off() -> None:
    _, role = role_of("    taskRetryCount: 3\n")
    assert role.task_retry_count == 0
    job, role = role_of("    taskRetryCount: 3\n", "extras: {gangAllocation: false}\ndefaults: {virtualCluster: 7}\n")
    assert not job.gang_allocation and role.task_retry_count == 3 and job.virtual_cluster == "7"


def test_protocol_functions_fit_on_a_screen() -> None:
    root = Path(__file__).resolve().parents[2] / "paijob"
    files = [*root.glob("protocol*.py"), root / "openpai" / "model.py", root / "openpai" / "jsyaml.py"]
    for file in files:
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.FunctionDef):
                assert node.end_lineno is not None
                assert node.end_lineno - node.lineno < 50, f"{file.name}:{node.name}"
