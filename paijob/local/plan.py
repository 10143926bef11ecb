"""Pure facts about a job for the local cluster: roles, completion rules, task environment.

Nothing here does I/O; the runner feeds it a job dict and the ports it picked,
and gets back what OpenPAI would put in each task's environment and command line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from paijob.openpai.names import runtime_role_name

HOST_IP = "127.0.0.1"
SERVER_PORTS = ("ssh", "http")  # OpenPAI adds these to every role
_PARAM = re.compile(r"<%\s*\$(parameters|secrets)\.([A-Za-z0-9_.\-]+)\s*%>")


@dataclass(frozen=True)
class RolePlan:
    name: str
    instances: int
    commands: tuple[str, ...]
    gpu: int
    cpu: int
    memory_mb: int
    shm_mb: int
    ports: dict[str, int]  # label -> count, server ports included
    min_failed: int | None  # None: never fails the job
    min_succeeded: int | None  # None: only when all tasks complete
    task_retry_count: int
    docker_image: str

    @property
    def runtime_name(self) -> str:
        return runtime_role_name(self.name)


@dataclass(frozen=True)
class JobPlan:
    name: str
    roles: tuple[RolePlan, ...]
    job_retry_count: int
    gang_allocation: bool
    parameters: dict[str, Any] = field(default_factory=dict)
    secrets: dict[str, Any] = field(default_factory=dict)

    def role(self, name: str) -> RolePlan:
        for role in self.roles:
            if role.name == name:
                return role
        raise KeyError(name)

    @property
    def total_tasks(self) -> int:
        return sum(role.instances for role in self.roles)

    @property
    def total_gpu(self) -> int:
        return sum(role.instances * role.gpu for role in self.roles)


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def plan_job(job: Mapping[str, Any]) -> JobPlan:
    """Read the facts the runner needs from a (validated) protocol-v2 job dict."""
    images = {
        str(p.get("name")): str(p.get("uri", ""))
        for p in job.get("prerequisites") or []
        if isinstance(p, Mapping) and p.get("type") == "dockerimage"
    }
    roles = []
    for name, spec in (job.get("taskRoles") or {}).items():
        instances = _int(spec.get("instances", 1), 1)
        resources = spec.get("resourcePerInstance") or {}
        ports = {str(label): _int(count, 1) for label, count in (resources.get("ports") or {}).items()}
        for label in SERVER_PORTS:
            ports.setdefault(label, 1)
        completion = spec.get("completion") or {}
        min_failed = completion.get("minFailedInstances", 1)
        min_succeeded = completion.get("minSucceededInstances", instances)
        min_failed = None if min_failed is None or _int(min_failed, 1) == -1 else _int(min_failed, 1)
        min_succeeded = (
            None if min_succeeded is None or _int(min_succeeded, instances) == -1 else _int(min_succeeded, instances)
        )
        image_ref = str(spec.get("dockerImage", ""))
        roles.append(
            RolePlan(
                name=str(name),
                instances=instances,
                commands=tuple(str(c) for c in spec.get("commands") or ()),
                gpu=_int(resources.get("gpu", 0), 0),
                cpu=_int(resources.get("cpu", 1), 1),
                memory_mb=_int(resources.get("memoryMB", 0), 0),
                shm_mb=_int((spec.get("extraContainerOptions") or {}).get("shmMB", 512), 512),
                ports=ports,
                min_failed=min_failed,
                min_succeeded=min_succeeded,
                task_retry_count=_int(spec.get("taskRetryCount", 0), 0),
                docker_image=images.get(image_ref, image_ref),
            )
        )
    extras = job.get("extras") or {}
    return JobPlan(
        name=str(job.get("name")),
        roles=tuple(roles),
        job_retry_count=_int(job.get("jobRetryCount", 0), 0),
        gang_allocation=bool(extras.get("gangAllocation", True)) if isinstance(extras, Mapping) else True,
        parameters=dict(job.get("parameters") or {}),
        secrets=dict(job.get("secrets") or {}),
    )


def substitute(text: str, parameters: Mapping[str, Any], secrets: Mapping[str, Any]) -> str:
    """Replace ``<% $parameters.x %>`` / ``<% $secrets.x %>`` as OpenPAI does; unknown keys stay."""

    def value(match: re.Match[str]) -> str:
        source = parameters if match.group(1) == "parameters" else secrets
        found: Any = source
        for part in match.group(2).split("."):
            if isinstance(found, Mapping) and part in found:
                found = found[part]
            else:
                return match.group(0)
        return str(found)

    return _PARAM.sub(value, text)


def task_script(plan: JobPlan, role: RolePlan) -> str:
    return "\n".join(substitute(c, plan.parameters, plan.secrets) for c in role.commands)


Ports = dict[str, dict[int, dict[str, list[int]]]]  # role -> index -> label -> ports


def task_env(plan: JobPlan, username: str, role_name: str, index: int, ports: Ports,
             host_ip: str = HOST_IP) -> dict[str, str]:
    """The PAI_* variables OpenPAI (server + runtime) gives task ``role_name``/``index``."""
    env: dict[str, str] = {
        "PAI_JOB_NAME": f"{username}~{plan.name}",
        "PAI_USER_NAME": username,
        "PAI_TASK_ROLE_COUNT": str(len(plan.roles)),
        "PAI_TASK_ROLE_LIST": ",".join(role.name for role in plan.roles),
        "PAI_CURRENT_TASK_ROLE_NAME": role_name,
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": str(index),
        "PAI_TASK_INDEX": str(index),
    }
    instances = []
    for role in plan.roles:
        env[f"PAI_TASK_ROLE_TASK_COUNT_{role.name}"] = str(role.instances)
        env[f"PAI_RESOURCE_{role.name}"] = f"{role.gpu},{role.cpu},{role.memory_mb},{role.shm_mb}"
        env[f"PAI_MIN_FAILED_TASK_COUNT_{role.name}"] = str(-1 if role.min_failed is None else role.min_failed)
        env[f"PAI_MIN_SUCCEEDED_TASK_COUNT_{role.name}"] = str(
            -1 if role.min_succeeded is None else role.min_succeeded
        )
        short = role.runtime_name
        for i in range(role.instances):
            instances.append(f"{short}:{i}")
            env[f"PAI_HOST_IP_{short}_{i}"] = host_ip
            for label, numbers in ports.get(role.name, {}).get(i, {}).items():
                joined = ",".join(str(n) for n in numbers)
                env[f"PAI_PORT_LIST_{short}_{i}_{label}"] = joined
                env[f"PAI_{short}_{i}_{label}_PORT"] = joined
    env["PAI_TASK_ROLE_INSTANCES"] = ",".join(instances)
    env["PAI_CURRENT_CONTAINER_IP"] = host_ip
    mine = ports.get(role_name, {}).get(index, {})
    if "ssh" in mine:
        env["PAI_CONTAINER_SSH_PORT"] = str(mine["ssh"][0])
    if "http" in mine:
        env["PAI_CONTAINER_HOST_PORT"] = str(mine["http"][0])
    return env
