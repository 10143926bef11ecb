"""Pure facts about a job for the local cluster: roles, completion and retry rules, commands, task environment.

Nothing here does I/O; the runner feeds it a job dict and the ports it picked,
and gets back what OpenPAI would put in each task's environment and command
line. The OpenPAI facts themselves live in ``paijob.openpai`` (``taskenv``,
``tags``, ``exitspec``); this module only applies them to one job, adding what
a local run needs instead of a container (one host IP, a working directory).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from paijob.openpai import taskenv
from paijob.openpai.markers import task_command
from paijob.openpai.names import runtime_role_name

HOST_IP = "127.0.0.1"
Ports = dict[str, dict[int, dict[str, list[int]]]]  # role -> index -> label -> ports


@dataclass(frozen=True)
class RolePlan:
    name: str
    instances: int
    commands: tuple[str, ...]
    gpu: int
    cpu: int
    memory_mb: int
    shm_mb: int | None  # None: the job does not set extraContainerOptions.shmMB
    ports: dict[str, int]  # label -> count, server ports included, in OpenPAI's order
    min_failed: int  # frameworkcontroller's minFailedTaskCount; -1: failures never end the attempt
    min_succeeded: int  # frameworkcontroller's minSucceededTaskCount; -1: only all tasks ending does
    task_retry_count: int  # taskRetryCount as frameworkcontroller gets it (0 with gang allocation)
    docker_image: str
    resources: taskenv.RoleResources

    @property
    def runtime_name(self) -> str:
        return runtime_role_name(self.name)

    def failed_enough(self, failed: int) -> bool:
        """frameworkcontroller: the attempt fails once this many tasks of the role failed."""
        return self.min_failed > 0 and failed >= self.min_failed

    def succeeded_enough(self, succeeded: int) -> bool:
        """frameworkcontroller: the attempt succeeds once this many tasks of the role succeeded."""
        return self.min_succeeded > 0 and succeeded >= self.min_succeeded


@dataclass(frozen=True)
class JobPlan:
    name: str
    roles: tuple[RolePlan, ...]
    job_retry_count: int
    gang_allocation: bool
    virtual_cluster: str = taskenv.DEFAULT_VIRTUAL_CLUSTER
    job: Mapping[str, Any] | None = None  # the submitted job, for command rendering

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


def gang_allocation(job: Mapping[str, Any]) -> bool:
    """k8s.js: gang allocation is off only for ``extras.gangAllocation === false`` (the boolean)."""
    extras = job.get("extras")
    return not (isinstance(extras, Mapping) and extras.get("gangAllocation") is False)


def plan_job(job: Mapping[str, Any]) -> JobPlan:
    """Read the facts the runner needs from a (validated) protocol-v2 job dict."""
    images = {
        str(p.get("name")): str(p.get("uri", ""))
        for p in job.get("prerequisites") or []
        if isinstance(p, Mapping) and p.get("type") == "dockerimage"
    }
    gang = gang_allocation(job)
    roles = []
    for name, spec in (job.get("taskRoles") or {}).items():
        resources = spec.get("resourcePerInstance") or {}
        completion = spec.get("completion") or {}
        options = spec.get("extraContainerOptions") or {}
        facts = taskenv.RoleResources(
            name=str(name), instances=spec.get("instances"), gpu=resources.get("gpu"), cpu=resources.get("cpu"),
            memory_mb=resources.get("memoryMB"), shm_mb=options.get("shmMB"),
            min_failed=completion.get("minFailedInstances"), min_succeeded=completion.get("minSucceededInstances"),
        )
        image_ref = str(spec.get("dockerImage", ""))
        roles.append(
            RolePlan(
                name=str(name),
                instances=facts.task_count,
                commands=tuple(str(c) for c in spec.get("commands") or ()),
                gpu=_int(resources.get("gpu", 0), 0),
                cpu=_int(resources.get("cpu", 1), 1),
                memory_mb=_int(resources.get("memoryMB", 0), 0),
                shm_mb=None if options.get("shmMB") is None else _int(options.get("shmMB"), 0),
                ports=taskenv.port_labels(resources.get("ports")),
                min_failed=taskenv.min_failed_task_count(facts.min_failed),
                min_succeeded=taskenv.min_succeeded_task_count(facts.min_succeeded, facts.task_count),
                task_retry_count=0 if gang else _int(spec.get("taskRetryCount") or 0, 0),
                docker_image=images.get(image_ref, image_ref),
                resources=facts,
            )
        )
    defaults = job.get("defaults") or {}
    virtual_cluster = defaults.get("virtualCluster") if isinstance(defaults, Mapping) else None
    return JobPlan(
        name=str(job.get("name")),
        roles=tuple(roles),
        job_retry_count=_int(job.get("jobRetryCount") or 0, 0),
        gang_allocation=gang,
        virtual_cluster=taskenv.DEFAULT_VIRTUAL_CLUSTER if virtual_cluster is None else str(virtual_cluster),
        job=job,
    )


def task_script(plan: JobPlan, role: RolePlan) -> str:
    """The command line OpenPAI would run for ``role`` (deployments, ``<% %>`` tags, secrets)."""
    if plan.job is None:
        return "\n".join(role.commands)
    return task_command(plan.job, role.name)


def framework_object_name(job_id: str) -> str:
    """rest-server ``encodeName``: the frameworkcontroller object name of job ``user~name`` (base32)."""
    alphabet = "0123456789abcdefghjkmnpqrtuvwxyz"  # the npm ``base32`` package's alphabet
    standard = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
    encoded = base64.b32encode(job_id.encode()).decode().rstrip("=")
    return encoded.translate(str.maketrans(standard, alphabet))


def task_env(plan: JobPlan, username: str, role_name: str, index: int, ports: Ports,
             host_ip: str = HOST_IP, *, placed: Collection[tuple[str, int]] | None = None,
             job_attempt: int = 0, task_attempt: int = 0, pod_uid: str = "",
             work_dir: str = taskenv.RUNTIME_WORK_DIR) -> dict[str, str]:
    """Every variable OpenPAI (server, frameworkcontroller, runtime) gives task ``role_name``/``index``.

    ``placed`` is the tasks that have a host IP (None: all of them, as with
    gang allocation). Every local task runs on ``host_ip``.
    """
    job_id = f"{username}~{plan.name}"
    framework = framework_object_name(job_id)
    env = taskenv.server_env(job_id, [role.resources for role in plan.roles], plan.virtual_cluster)
    env.update(taskenv.current_task_env(role_name, index))
    configmap_uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"paijob-local:{job_id}:{job_attempt}"))
    env.update(taskenv.fc_env(framework, role_name, index, framework_attempt=job_attempt,
                              task_attempt=task_attempt, configmap_uid=configmap_uid,
                              pod_uid=pod_uid or str(uuid.uuid5(uuid.NAMESPACE_URL, f"{configmap_uid}:{role_name}:{index}"))))
    all_tasks = [(role.name, i) for role in plan.roles for i in range(role.instances)]
    ips = {task: host_ip for task in all_tasks if placed is None or task in placed}
    env.update(taskenv.runtime_env([(role.name, role.instances) for role in plan.roles], role_name, index,
                                   ports, ips))
    env["PAI_WORK_DIR"] = work_dir
    return env
