"""Pure facts about a job for the local cluster: command lines and each task's environment.

Nothing here does I/O. The runner hands in the job model it was given at
submit (``paijob.openpai.model``: roles, completion and retry rules, OpenPAI's
defaults) and the ports it picked, and gets back what OpenPAI would put in each
task's environment and command line. The OpenPAI facts themselves live in
``paijob.openpai`` (``model``, ``taskenv``, ``markers``); this module only
applies them to one job, adding what a local run needs instead of a container
(one host IP, a working directory).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection

from paijob.openpai import taskenv
from paijob.openpai.markers import task_command
from paijob.openpai.model import Job, TaskRole
from paijob.openpai.names import framework_object_name

HOST_IP = "127.0.0.1"
Ports = dict[str, dict[int, dict[str, list[int]]]]  # role -> index -> label -> ports


def task_script(job: Job, role: TaskRole) -> str:
    """The command line OpenPAI would run for ``role`` (deployments, ``<% %>`` tags, secrets)."""
    return task_command(job.raw, role.name)


def task_env(job: Job, username: str, role_name: str, index: int, ports: Ports,
             host_ip: str = HOST_IP, *, placed: Collection[tuple[str, int]] | None = None,
             job_attempt: int = 0, task_attempt: int = 0, pod_uid: str = "",
             work_dir: str = taskenv.RUNTIME_WORK_DIR) -> dict[str, str]:
    """Every variable OpenPAI (server, frameworkcontroller, runtime) gives task ``role_name``/``index``.

    ``placed`` is the tasks that have a host IP (None: all of them, as with
    gang allocation). Every local task runs on ``host_ip``.
    """
    job_id = f"{username}~{job.name}"
    framework = framework_object_name(job_id)
    env = taskenv.server_env(job_id, job)
    env.update(taskenv.current_task_env(role_name, index))
    configmap_uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"paijob-local:{job_id}:{job_attempt}"))
    env.update(taskenv.fc_env(framework, role_name, index, framework_attempt=job_attempt,
                              task_attempt=task_attempt, configmap_uid=configmap_uid,
                              pod_uid=pod_uid or str(uuid.uuid5(uuid.NAMESPACE_URL, f"{configmap_uid}:{role_name}:{index}"))))
    all_tasks = [(role.name, i) for role in job.roles for i in range(role.instances)]
    ips = {task: host_ip for task in all_tasks if placed is None or task in placed}
    env.update(taskenv.runtime_env([(role.name, role.instances) for role in job.roles], role_name, index,
                                   ports, ips))
    env["PAI_WORK_DIR"] = work_dir
    return env
