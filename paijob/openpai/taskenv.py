"""Every ``PAI_*`` / ``FC_*`` variable an OpenPAI task sees, with its exact format.

Three producers, one function each:

* ``server_env`` — rest-server ``src/models/v2/job/runtime-env.js``
  (``generateFrameworkEnv``) plus the three per-task variables
  ``models/v2/job/k8s.js`` adds (``current_task_env``). Role names are written
  as in the job, ``PAI_CURRENT_TASK_ROLE_NAME`` included: k8s.js
  ``generateTaskRole`` sets it to ``taskRole``, the role's own name
  (``Worker_A``), while frameworkcontroller's task role, and so ``FC_*`` and
  the runtime's names, are ``convertName``'s (``workera``).
  Values are JavaScript template strings over the job model
  (``paijob.openpai.model``, which holds OpenPAI's defaults):
  ``PAI_RESOURCE_<role>`` alone echoes the job as written (``resource_value``).
* ``fc_env`` — frameworkcontroller's predefined container variables
  (``pkg/apis/frameworkcontroller/v1/constants.go``).
* ``runtime_env`` — openpai-runtime ``src/init.d/framework_parser.py``
  (``generate_runtime_env``), exported by ``runtime.d/runtime_env.sh``: the
  converted role name everywhere, ``PAI_HOST_IP_*`` and the host lists only
  for tasks already placed (with gang allocation off, tasks not yet scheduled
  have no IP), port lists for every task.

Pure functions over the job model and plain values; the local cluster and
paijob-runtime's tests both build a task's environment from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from paijob.openpai.markers import js_string
from paijob.openpai.names import runtime_role_name

if TYPE_CHECKING:
    from paijob.openpai.model import Job, TaskRole

FC_NAMESPACE = "default"
# Where openpai-runtime keeps its files in the container (plugins' PAI_WORK_DIR).
RUNTIME_WORK_DIR = "/usr/local/pai"

# role -> task index -> port label -> port numbers
Ports = Mapping[str, Mapping[int, Mapping[str, Sequence[int]]]]

# The fixed names paijob-runtime reads (spelled here only; the contract test checks it).
PAI_JOB_NAME = "PAI_JOB_NAME"
PAI_TASK_ROLE_LIST = "PAI_TASK_ROLE_LIST"
PAI_CURRENT_TASK_ROLE_NAME = "PAI_CURRENT_TASK_ROLE_NAME"
PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX = "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"
PAI_TASK_INDEX = "PAI_TASK_INDEX"  # the older name of the task index, set beside it
PAI_CURRENT_CONTAINER_IP = "PAI_CURRENT_CONTAINER_IP"
PAI_CONTAINER_HOST_IP = "PAI_CONTAINER_HOST_IP"


# --------------------------------------------------------------------------- variable names


def task_count_name(role: str) -> str:
    """``PAI_TASK_ROLE_TASK_COUNT_<role>``, the role as written in the job."""
    return f"PAI_TASK_ROLE_TASK_COUNT_{role}"


def resource_name(role: str) -> str:
    """``PAI_RESOURCE_<role>`` (``gpu,cpu,memoryMB,shmMB``), the role as written in the job."""
    return f"PAI_RESOURCE_{role}"


def host_ip_name(role: str, index: int | str) -> str:
    """``PAI_HOST_IP_<role>_<i>``, the role converted (runtime)."""
    return f"PAI_HOST_IP_{runtime_role_name(role)}_{index}"


def port_list_names(role: str, index: int | str, label: str) -> tuple[str, str]:
    """The runtime's two names for a task's ports: ``PAI_PORT_LIST_<role>_<i>_<label>``, ``PAI_<role>_<i>_<label>_PORT``."""
    name = runtime_role_name(role)
    return f"PAI_PORT_LIST_{name}_{index}_{label}", f"PAI_{name}_{index}_{label}_PORT"


# --------------------------------------------------------------------------- values


def resource_value(role: TaskRole) -> str:
    """runtime-env.js: ``[gpu, cpu, memoryMB, 'shmMB' in extraContainerOptions ? shmMB : 0].join(',')``.

    The values as the job writes them, not the model's effective ones: a field
    that is absent or null is empty (JavaScript's ``join``), so ``shmMB: null``
    gives ``1,4,8192,`` and no ``shmMB`` at all gives ``1,4,8192,0``, not the
    512 MB that k8s.js mounts either way. (The server's schema refuses
    ``shmMB: null`` before this runs; the local cluster validates alike.)
    """
    res = role.raw.get("resourcePerInstance")
    options = role.raw.get("extraContainerOptions")
    res = res if isinstance(res, Mapping) else {}
    shm = options.get("shmMB") if isinstance(options, Mapping) and "shmMB" in options else 0
    fields = (res.get("gpu"), res.get("cpu"), res.get("memoryMB"), shm)
    return ",".join("" if value is None else js_string(value) for value in fields)


def server_env(framework_name: str, job: Job) -> dict[str, str]:
    """runtime-env.js ``generateFrameworkEnv``: the same for every task of the job."""
    user = framework_name.split("~")[0]
    names = ",".join(job.role_names)
    env = {
        "PAI_FRAMEWORK_NAME": framework_name,
        PAI_JOB_NAME: framework_name,
        "PAI_USER_NAME": user,
        "PAI_DEFAULT_FS_URI": "",
        "PAI_TASK_ROLE_COUNT": str(len(job.roles)),
        PAI_TASK_ROLE_LIST: names,
        "PAI_VIRTUAL_CLUSTER": job.virtual_cluster,
    }
    for role in job.roles:
        env[task_count_name(role.name)] = str(role.instances)
        env[resource_name(role.name)] = resource_value(role)
        env[f"PAI_MIN_FAILED_TASK_COUNT_{role.name}"] = str(role.completion.min_failed)
        env[f"PAI_MIN_SUCCEEDED_TASK_COUNT_{role.name}"] = str(role.completion.min_succeeded)
    total = str(job.total_tasks)
    env.update({
        "PAI_USERNAME": user,
        "PAI_TASKS_NUM": total,
        "PAI_JOB_TASK_COUNT": total,
        "PAI_TASK_ROLES_NUM": str(len(job.roles)),
        "PAI_JOB_TASK_ROLE_COUNT": str(len(job.roles)),
        "PAI_JOB_TASK_ROLE_LIST": names,
    })
    return env


def current_task_env(role: str, index: int) -> dict[str, str]:
    """k8s.js: the task's own role (as the job writes it: ``value: taskRole``) and index."""
    return {
        PAI_CURRENT_TASK_ROLE_NAME: role,
        PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX: str(index),
        PAI_TASK_INDEX: str(index),
    }


def fc_env(framework: str, role: str, index: int, *, framework_attempt: int, task_attempt: int,
           configmap_uid: str, pod_uid: str, namespace: str = FC_NAMESPACE) -> dict[str, str]:
    """frameworkcontroller's predefined variables; ``framework`` is the framework (object) name."""
    fc_role = runtime_role_name(role)
    configmap = f"{framework}-attempt"
    return {
        "FC_FRAMEWORK_NAMESPACE": namespace,
        "FC_FRAMEWORK_NAME": framework,
        "FC_TASKROLE_NAME": fc_role,
        "FC_TASK_INDEX": str(index),
        "FC_CONFIGMAP_NAME": configmap,
        "FC_POD_NAME": f"{framework}-{fc_role}-{index}",
        "FC_FRAMEWORK_ATTEMPT_ID": str(framework_attempt),
        "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID": f"{framework_attempt}_{configmap_uid}",
        "FC_CONFIGMAP_UID": configmap_uid,
        "FC_TASK_ATTEMPT_ID": str(task_attempt),
        "FC_TASK_ATTEMPT_INSTANCE_UID": f"{task_attempt}_{pod_uid}",
        "FC_POD_UID": pod_uid,
    }


def runtime_env(roles: Sequence[tuple[str, int]], current_role: str, current_index: int, ports: Ports,
                host_ips: Mapping[tuple[str, int], str]) -> dict[str, str]:
    """framework_parser.py ``generate_runtime_env`` for task ``current_role``/``current_index``.

    ``roles`` is (name as in the job, task count) in job order; ``ports`` is keyed
    by the job's role names; ``host_ips`` holds the tasks already placed.
    """
    env: dict[str, str] = {}
    instances = []
    current_fc = runtime_role_name(current_role)
    for role, count in roles:
        name = runtime_role_name(role)
        host_list = []
        for index in range(count):
            task_ports = {label: [str(p) for p in numbers]
                          for label, numbers in ports.get(role, {}).get(index, {}).items()}
            instances.append(f"{name}:{index}")
            for label, numbers in task_ports.items():
                for variable in port_list_names(role, index, label):
                    env[variable] = ",".join(numbers)
            ip = host_ips.get((role, index))
            if ip:
                env[host_ip_name(role, index)] = ip
                host_list.append(f"{ip}:{task_ports['http'][0]}")
            if name == current_fc and index == current_index:
                env[PAI_CURRENT_CONTAINER_IP] = str(ip)
                env["PAI_CURRENT_CONTAINER_PORT"] = task_ports["http"][0]
                env[PAI_CONTAINER_HOST_IP] = str(ip)
                env["PAI_CONTAINER_HOST_PORT"] = task_ports["http"][0]
                env["PAI_CONTAINER_SSH_PORT"] = task_ports["ssh"][0]
                for label, numbers in task_ports.items():
                    env[f"PAI_CONTAINER_HOST_{label}_PORT_LIST"] = ",".join(numbers)
                env["PAI_CONTAINER_HOST_PORT_LIST"] = "".join(
                    f"{label}:{','.join(numbers)};" for label, numbers in task_ports.items())
        env[f"PAI_TASK_ROLE_{name}_HOST_LIST"] = ",".join(host_list)
    env["PAI_TASK_ROLE_INSTANCES"] = ",".join(instances)
    return env


def job_role_name(current: str, role_list: Sequence[str]) -> str | None:
    """The job's name for the role ``PAI_CURRENT_TASK_ROLE_NAME`` names.

    OpenPAI sets that variable to the job's name (``Worker_A``), as in
    ``PAI_TASK_ROLE_LIST``; the converted one (``workera``, what older paijob
    local clusters set) is accepted too. None when no single role matches.
    """
    if current in role_list:
        return current
    matches = [role for role in role_list if runtime_role_name(role) == current]
    return matches[0] if len(matches) == 1 else None
