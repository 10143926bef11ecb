"""Pure pieces of the local cluster: completion defaults, parameter substitution, task environment."""

from __future__ import annotations

import yaml
from cluster_helpers import job_yaml

from paijob.local.plan import plan_job, runtime_role_name, substitute, task_env


def test_role_names_in_runtime_variables_are_lowercased_and_stripped() -> None:
    assert runtime_role_name("ps_Server-1") == "psserver1"
    assert runtime_role_name("worker") == "worker"


def test_completion_defaults_follow_the_protocol() -> None:
    job = yaml.safe_load(job_yaml("defaults", ["true"], instances=3))
    role = plan_job(job).roles[0]
    assert (role.min_failed, role.min_succeeded) == (1, 3)
    job["taskRoles"]["worker"]["completion"] = {"minFailedInstances": -1, "minSucceededInstances": -1}
    role = plan_job(job).roles[0]
    assert (role.min_failed, role.min_succeeded) == (None, None)
    assert role.ports == {"SynPort": 1, "ssh": 1, "http": 1}
    assert role.docker_image == "python:3.11" and role.shm_mb == 512


def test_parameters_and_secrets_are_substituted_and_unknown_references_stay() -> None:
    text = "run --lr <% $parameters.lr %> --key <%$secrets.key%> <% $parameters.missing %> ${#x}"
    assert substitute(text, {"lr": 0.1}, {"key": "k"}) == "run --lr 0.1 --key k <% $parameters.missing %> ${#x}"
    assert substitute("<% $parameters.a.b %>", {"a": {"b": 2}}, {}) == "2"


def test_every_task_sees_every_tasks_address_and_ports() -> None:
    plan = plan_job(yaml.safe_load(job_yaml("env", ["true"], instances=2, role="Main_Worker")))
    ports = {"Main_Worker": {0: {"SynPort": [1000], "ssh": [1001], "http": [1002]},
                             1: {"SynPort": [2000], "ssh": [2001], "http": [2002]}}}
    env = task_env(plan, "alice", "Main_Worker", 1, ports)
    assert env["PAI_JOB_NAME"] == "alice~env"
    assert env["PAI_TASK_ROLE_TASK_COUNT_Main_Worker"] == "2"
    assert env["PAI_RESOURCE_Main_Worker"] == "0,1,256,512"
    assert env["PAI_HOST_IP_mainworker_0"] == env["PAI_HOST_IP_mainworker_1"] == "127.0.0.1"
    assert env["PAI_PORT_LIST_mainworker_0_SynPort"] == env["PAI_mainworker_0_SynPort_PORT"] == "1000"
    assert env["PAI_TASK_ROLE_INSTANCES"] == "mainworker:0,mainworker:1"
    assert env["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] == env["PAI_TASK_INDEX"] == "1"
    assert env["PAI_CONTAINER_SSH_PORT"] == "2001"
