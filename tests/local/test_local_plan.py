"""Pure pieces of the local cluster: completion rules, command rendering, the task environment.

The expected values are OpenPAI's, read from its sources (see ``paijob/openpai``'s
docstrings): rest-server runtime-env.js / k8s.js, openpai-runtime framework_parser.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from cluster_helpers import job_yaml

from paijob.local.taskspec import task_env, task_script
from paijob.openpai.model import parse_job
from paijob.openpai.names import runtime_role_name

WORKER_PORTS = {"worker": {i: {"SynPort": [100 + i], "ssh": [200 + i], "http": [300 + i]} for i in range(3)}}


def _job(**extra: Any) -> dict[str, Any]:
    return yaml.safe_load(job_yaml("plan", ["true"], **extra))


def test_role_names_in_runtime_variables_are_lowercased_and_stripped() -> None:
    assert runtime_role_name("ps_Server-1") == "psserver1"
    assert runtime_role_name("worker") == "worker"


@pytest.mark.parametrize(("completion", "expected"), [
    ({}, (1, 3)),
    ({"minFailedInstances": None, "minSucceededInstances": None}, (1, 3)),  # null: one failure fails the job
    ({"minFailedInstances": 0, "minSucceededInstances": 0}, (1, 3)),  # 0 is falsy in k8s.js: the defaults
    ({"minFailedInstances": -1, "minSucceededInstances": -1}, (-1, -1)),  # never early
    ({"minFailedInstances": 2, "minSucceededInstances": 1}, (2, 1)),
])
def test_completion_is_what_frameworkcontroller_gets(completion: dict[str, Any], expected: tuple[int, int]) -> None:
    job = _job(instances=3, role_extra={"completion": completion})
    role = parse_job(job).roles[0]
    assert (role.completion.min_failed, role.completion.min_succeeded) == expected
    env = task_env(parse_job(job), "alice", "worker", 0, WORKER_PORTS)
    assert (env["PAI_MIN_FAILED_TASK_COUNT_worker"], env["PAI_MIN_SUCCEEDED_TASK_COUNT_worker"]) == tuple(
        str(v) for v in expected)


def test_minus_one_means_failures_and_successes_never_end_the_attempt_early() -> None:
    role = parse_job(_job(instances=3, role_extra={"completion": {"minFailedInstances": -1,
                                                                 "minSucceededInstances": -1}})).roles[0]
    assert not role.completion.failed_enough(3) and not role.completion.succeeded_enough(3)
    default = parse_job(_job(instances=3, role_extra={"completion": {"minFailedInstances": None}})).roles[0].completion
    assert default.failed_enough(1) and not default.succeeded_enough(2) and default.succeeded_enough(3)


def test_server_ports_are_added_and_shm_is_unset_by_default() -> None:
    job = parse_job(_job())
    role = job.roles[0]
    assert role.resources.all_ports == {"SynPort": 1, "ssh": 1, "http": 1}
    assert job.image_uri(role) == "python:3.11" and "extraContainerOptions" not in role.raw


@pytest.mark.parametrize(("extras", "gang"), [
    (None, True), ({"gangAllocation": True}, True), ({"gangAllocation": False}, False),
    ({"gangAllocation": "no"}, True),  # a YAML 1.2 string is not `=== false`
    ({"gangAllocation": 0}, True),
])
def test_gang_allocation_is_off_only_for_boolean_false(extras: Any, gang: bool) -> None:
    job = _job() if extras is None else _job(extras=extras)
    assert parse_job(job).gang_allocation is gang


def test_task_retry_count_only_applies_without_gang_allocation() -> None:
    assert parse_job(_job(role_extra={"taskRetryCount": 2})).roles[0].task_retry_count == 0
    off = _job(role_extra={"taskRetryCount": 2}, extras={"gangAllocation": False})
    assert parse_job(off).roles[0].task_retry_count == 2


PORTS = {"Main_Worker": {0: {"SynPort": [1000, 1003], "ssh": [1001], "http": [1002]},
                         1: {"SynPort": [2000, 2003], "ssh": [2001], "http": [2002]}}}


def _two_task_env(placed: set[tuple[str, int]] | None = None, **extra: Any) -> dict[str, str]:
    job = yaml.safe_load(job_yaml("env", ["true"], instances=2, role="Main_Worker", ports={"SynPort": 2}, **extra))
    return task_env(parse_job(job), "alice", "Main_Worker", 1, PORTS, placed=placed, job_attempt=0,
                    task_attempt=0, pod_uid="pod-1", work_dir="/work/x")


def test_the_server_variables_have_openpai_names_and_formats() -> None:
    env = _two_task_env()
    assert env["PAI_JOB_NAME"] == env["PAI_FRAMEWORK_NAME"] == "alice~env"
    assert env["PAI_USER_NAME"] == env["PAI_USERNAME"] == "alice"
    assert env["PAI_DEFAULT_FS_URI"] == ""
    assert env["PAI_VIRTUAL_CLUSTER"] == "default"
    assert env["PAI_TASK_ROLE_TASK_COUNT_Main_Worker"] == "2"
    assert env["PAI_TASKS_NUM"] == env["PAI_JOB_TASK_COUNT"] == "2"
    assert env["PAI_TASK_ROLE_COUNT"] == env["PAI_TASK_ROLES_NUM"] == env["PAI_JOB_TASK_ROLE_COUNT"] == "1"
    assert env["PAI_TASK_ROLE_LIST"] == env["PAI_JOB_TASK_ROLE_LIST"] == "Main_Worker"
    assert env["PAI_RESOURCE_Main_Worker"] == "0,1,256,0"  # shmMB not set: 0, not the 512 k8s.js mounts
    # k8s.js generateTaskRole: value: taskRole, the role as written (not convertName's mainworker)
    assert env["PAI_CURRENT_TASK_ROLE_NAME"] == "Main_Worker"
    assert env["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] == env["PAI_TASK_INDEX"] == "1"
    assert env["PAI_WORK_DIR"] == "/work/x"


def test_shm_mb_and_virtual_cluster_come_from_the_job() -> None:
    env = _two_task_env(defaults={"virtualCluster": "vc1"})
    assert env["PAI_VIRTUAL_CLUSTER"] == "vc1"
    job = yaml.safe_load(job_yaml("env", ["true"], role_extra={"extraContainerOptions": {"shmMB": 64}}))
    assert task_env(parse_job(job), "u", "worker", 0, WORKER_PORTS)["PAI_RESOURCE_worker"] == "0,1,256,64"


def test_the_runtime_variables_use_the_converted_role_name() -> None:
    env = _two_task_env()
    assert env["PAI_HOST_IP_mainworker_0"] == env["PAI_HOST_IP_mainworker_1"] == "127.0.0.1"
    assert env["PAI_PORT_LIST_mainworker_0_SynPort"] == env["PAI_mainworker_0_SynPort_PORT"] == "1000,1003"
    assert env["PAI_TASK_ROLE_INSTANCES"] == "mainworker:0,mainworker:1"
    assert env["PAI_TASK_ROLE_mainworker_HOST_LIST"] == "127.0.0.1:1002,127.0.0.1:2002"
    assert env["PAI_CURRENT_CONTAINER_IP"] == env["PAI_CONTAINER_HOST_IP"] == "127.0.0.1"
    assert env["PAI_CURRENT_CONTAINER_PORT"] == env["PAI_CONTAINER_HOST_PORT"] == "2002"
    assert env["PAI_CONTAINER_SSH_PORT"] == "2001"
    assert env["PAI_CONTAINER_HOST_SynPort_PORT_LIST"] == "2000,2003"
    assert env["PAI_CONTAINER_HOST_PORT_LIST"] == "SynPort:2000,2003;ssh:2001;http:2002;"


def test_frameworkcontroller_variables_name_the_task() -> None:
    env = _two_task_env()
    assert env["FC_TASKROLE_NAME"] == "mainworker" and env["FC_TASK_INDEX"] == "1"
    # rest-server encodeName (models/v2/utils/name.js) since microsoft/pai 207ca6cde: md5 hex of user~job,
    # here as node's crypto.createHash('md5').update('alice~env').digest('hex') gives it
    assert env["FC_FRAMEWORK_NAME"] == "d0bf113f7fad2bc67fc3dd923593cf2a"
    assert env["FC_FRAMEWORK_NAMESPACE"] == "default"
    assert env["FC_POD_NAME"] == f"{env['FC_FRAMEWORK_NAME']}-mainworker-1"
    assert env["FC_CONFIGMAP_NAME"] == f"{env['FC_FRAMEWORK_NAME']}-attempt"
    assert env["FC_POD_UID"] == "pod-1" and env["FC_TASK_ATTEMPT_INSTANCE_UID"] == "0_pod-1"
    assert env["FC_FRAMEWORK_ATTEMPT_INSTANCE_UID"] == f"0_{env['FC_CONFIGMAP_UID']}"


def test_without_gang_allocation_only_placed_tasks_have_a_host_ip() -> None:
    env = _two_task_env(placed={("Main_Worker", 1)})
    assert "PAI_HOST_IP_mainworker_0" not in env
    assert env["PAI_HOST_IP_mainworker_1"] == "127.0.0.1"
    assert env["PAI_TASK_ROLE_mainworker_HOST_LIST"] == "127.0.0.1:2002"
    assert env["PAI_PORT_LIST_mainworker_0_SynPort"] == "1000,1003"  # ports are known for every task


def test_task_script_applies_deployments_and_renders_tags_like_openpai() -> None:
    job = _job(
        parameters={"flag": True, "lr": 0.00001, "hosts": ["a", "b"]},
        secrets={"token": "a<b"},
        deployments=[{"name": "d", "taskRoles": {"worker": {"preCommands": ["  echo pre  "],
                                                            "postCommands": ["echo post"]}}}],
        defaults={"deployment": "d"},
    )
    job["taskRoles"]["worker"]["commands"] = [
        "run --flag <% $parameters.flag %> --lr <% $parameters.lr %> --hosts <% $parameters.hosts %>",
        "use <% $secrets.token %> <% $parameters.hosts[1] %> <% $parameters.nothing %>",
    ]
    plan = parse_job(job)
    assert task_script(plan, plan.roles[0]) == (
        "echo pre\nrun --flag true --lr 0.00001 --hosts a,b\nuse a&lt;b b \necho post")
