"""The PAI_* / FC_* variables of an OpenPAI task (paijob.openpai.taskenv), variable by variable.

What each producer writes, for one two-role job: rest-server's ``runtime-env.js`` and ``k8s.js`` (the
server's variables, role names as written), frameworkcontroller (``FC_*``, the converted role name) and
openpai-runtime's ``framework_parser.py`` (host IPs and ports, the converted role name). The local
cluster gives its tasks exactly these, and paijob-runtime reads them back (tests/runtime/test_env.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from paijob.openpai import taskenv
from paijob.openpai.model import parse_job

RAW: dict[str, Any] = {"name": "env", "jobRetryCount": 1, "defaults": {"virtualCluster": "vc1"}, "taskRoles": {
    "Main_Worker": {"instances": 2, "dockerImage": "image", "commands": ["python train.py"],
                    "resourcePerInstance": {"cpu": 4, "memoryMB": 8192, "gpu": 2, "ports": {"SynPort": 2}},
                    "extraContainerOptions": {"shmMB": 1024}, "completion": {"minFailedInstances": 2}},
    "ps": {"dockerImage": "image", "commands": ["serve"], "resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 0}},
}}
PORTS = {"Main_Worker": {0: {"ssh": [20000], "http": [20001], "SynPort": [20002, 20003]},
                         1: {"ssh": [20010], "http": [20011], "SynPort": [20012, 20013]}},
         "ps": {0: {"ssh": [20020], "http": [20021]}}}
ROLES = [("Main_Worker", 2), ("ps", 1)]


def test_the_servers_variables_for_every_task_of_the_job():
    assert taskenv.server_env("alice~env", parse_job(RAW)) == {
        "PAI_FRAMEWORK_NAME": "alice~env",
        "PAI_JOB_NAME": "alice~env",
        "PAI_USER_NAME": "alice",
        "PAI_DEFAULT_FS_URI": "",
        "PAI_TASK_ROLE_COUNT": "2",
        "PAI_TASK_ROLE_LIST": "Main_Worker,ps",
        "PAI_VIRTUAL_CLUSTER": "vc1",
        "PAI_TASK_ROLE_TASK_COUNT_Main_Worker": "2",
        "PAI_RESOURCE_Main_Worker": "2,4,8192,1024",
        "PAI_MIN_FAILED_TASK_COUNT_Main_Worker": "2",
        "PAI_MIN_SUCCEEDED_TASK_COUNT_Main_Worker": "2",
        "PAI_TASK_ROLE_TASK_COUNT_ps": "1",
        "PAI_RESOURCE_ps": "0,1,512,0",
        "PAI_MIN_FAILED_TASK_COUNT_ps": "1",
        "PAI_MIN_SUCCEEDED_TASK_COUNT_ps": "1",
        "PAI_USERNAME": "alice",
        "PAI_TASKS_NUM": "3",
        "PAI_JOB_TASK_COUNT": "3",
        "PAI_TASK_ROLES_NUM": "2",
        "PAI_JOB_TASK_ROLE_COUNT": "2",
        "PAI_JOB_TASK_ROLE_LIST": "Main_Worker,ps",
    }


def test_a_job_without_a_virtual_cluster_runs_in_default():
    env = taskenv.server_env("bob~j", parse_job({**RAW, "defaults": {}}))
    assert (env["PAI_VIRTUAL_CLUSTER"], env["PAI_USER_NAME"], env["PAI_USERNAME"]) == ("default", "bob", "bob")


@pytest.mark.parametrize(("role", "value"), [
    ({"resourcePerInstance": {"cpu": 4, "memoryMB": 8192, "gpu": 1}}, "1,4,8192,0"),
    ({"resourcePerInstance": {"cpu": 4, "memoryMB": 8192, "gpu": 1}, "extraContainerOptions": {"shmMB": None}},
     "1,4,8192,"),  # null is written empty (JavaScript's join)
    ({"resourcePerInstance": {"cpu": 4, "memoryMB": 8192, "gpu": 1}, "extraContainerOptions": {"infiniband": True}},
     "1,4,8192,0"),
    ({"resourcePerInstance": {"cpu": 0.5, "memoryMB": 512}}, ",0.5,512,0"),  # as written: no gpu, no default
    ({"resourcePerInstance": "big"}, ",,,0"),
    ({}, ",,,0"),
])
def test_pai_resource_echoes_the_role_as_written(role, value):
    job = parse_job({"taskRoles": {"r": {"commands": ["x"], **role}}})
    assert taskenv.resource_value(job.roles[0]) == value


def test_the_current_task_is_named_as_the_job_writes_its_role():
    assert taskenv.current_task_env("Main_Worker", 1) == {
        "PAI_CURRENT_TASK_ROLE_NAME": "Main_Worker",
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": "1",
        "PAI_TASK_INDEX": "1",
    }


def test_frameworkcontroller_names_the_task_by_the_converted_role():
    assert taskenv.fc_env("fw", "Main_Worker", 1, framework_attempt=0, task_attempt=2, configmap_uid="cu",
                          pod_uid="pu") == {
        "FC_FRAMEWORK_NAMESPACE": "default",
        "FC_FRAMEWORK_NAME": "fw",
        "FC_TASKROLE_NAME": "mainworker",
        "FC_TASK_INDEX": "1",
        "FC_CONFIGMAP_NAME": "fw-attempt",
        "FC_POD_NAME": "fw-mainworker-1",
        "FC_FRAMEWORK_ATTEMPT_ID": "0",
        "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID": "0_cu",
        "FC_CONFIGMAP_UID": "cu",
        "FC_TASK_ATTEMPT_ID": "2",
        "FC_TASK_ATTEMPT_INSTANCE_UID": "2_pu",
        "FC_POD_UID": "pu",
    }


def test_the_runtimes_variables_for_the_second_task_of_a_role():
    env = taskenv.runtime_env(ROLES, "Main_Worker", 1, PORTS,
                              {("Main_Worker", 0): "10.0.0.1", ("Main_Worker", 1): "10.0.0.2"})
    assert env == {
        "PAI_PORT_LIST_mainworker_0_ssh": "20000",
        "PAI_mainworker_0_ssh_PORT": "20000",
        "PAI_PORT_LIST_mainworker_0_http": "20001",
        "PAI_mainworker_0_http_PORT": "20001",
        "PAI_PORT_LIST_mainworker_0_SynPort": "20002,20003",
        "PAI_mainworker_0_SynPort_PORT": "20002,20003",
        "PAI_HOST_IP_mainworker_0": "10.0.0.1",
        "PAI_PORT_LIST_mainworker_1_ssh": "20010",
        "PAI_mainworker_1_ssh_PORT": "20010",
        "PAI_PORT_LIST_mainworker_1_http": "20011",
        "PAI_mainworker_1_http_PORT": "20011",
        "PAI_PORT_LIST_mainworker_1_SynPort": "20012,20013",
        "PAI_mainworker_1_SynPort_PORT": "20012,20013",
        "PAI_HOST_IP_mainworker_1": "10.0.0.2",
        "PAI_CURRENT_CONTAINER_IP": "10.0.0.2",
        "PAI_CURRENT_CONTAINER_PORT": "20011",
        "PAI_CONTAINER_HOST_IP": "10.0.0.2",
        "PAI_CONTAINER_HOST_PORT": "20011",
        "PAI_CONTAINER_SSH_PORT": "20010",
        "PAI_CONTAINER_HOST_ssh_PORT_LIST": "20010",
        "PAI_CONTAINER_HOST_http_PORT_LIST": "20011",
        "PAI_CONTAINER_HOST_SynPort_PORT_LIST": "20012,20013",
        "PAI_CONTAINER_HOST_PORT_LIST": "ssh:20010;http:20011;SynPort:20012,20013;",
        "PAI_TASK_ROLE_mainworker_HOST_LIST": "10.0.0.1:20001,10.0.0.2:20011",
        "PAI_PORT_LIST_ps_0_ssh": "20020",
        "PAI_ps_0_ssh_PORT": "20020",
        "PAI_PORT_LIST_ps_0_http": "20021",
        "PAI_ps_0_http_PORT": "20021",
        "PAI_TASK_ROLE_ps_HOST_LIST": "",  # ps:0 not placed yet: no IP, not in its role's host list
        "PAI_TASK_ROLE_INSTANCES": "mainworker:0,mainworker:1,ps:0",
    }


CURRENT = ("PAI_CURRENT_CONTAINER_IP", "PAI_CURRENT_CONTAINER_PORT", "PAI_CONTAINER_HOST_IP", "PAI_CONTAINER_HOST_PORT",
           "PAI_CONTAINER_SSH_PORT", "PAI_CONTAINER_HOST_PORT_LIST")


@pytest.mark.parametrize(("role", "index", "values"), [
    ("Main_Worker", 0, ("10.0.0.1", "20001", "10.0.0.1", "20001", "20000", "ssh:20000;http:20001;SynPort:20002,20003;")),
    ("Main_Worker", 1, ("10.0.0.2", "20011", "10.0.0.2", "20011", "20010", "ssh:20010;http:20011;SynPort:20012,20013;")),
    ("ps", 0, ("10.0.0.3", "20021", "10.0.0.3", "20021", "20020", "ssh:20020;http:20021;")),
])
def test_the_current_containers_variables_are_the_current_tasks_own(role, index, values):
    ips = {("Main_Worker", 0): "10.0.0.1", ("Main_Worker", 1): "10.0.0.2", ("ps", 0): "10.0.0.3"}
    env = taskenv.runtime_env(ROLES, role, index, PORTS, ips)
    assert tuple(env[name] for name in CURRENT) == values
    labels = {"ssh", "http", "SynPort"} if role == "Main_Worker" else {"ssh", "http"}
    assert {name for name in env if name.startswith("PAI_CONTAINER_HOST_") and name.endswith("_PORT_LIST")
            and name != "PAI_CONTAINER_HOST_PORT_LIST"} == {f"PAI_CONTAINER_HOST_{label}_PORT_LIST" for label in labels}
    assert env["PAI_TASK_ROLE_ps_HOST_LIST"] == "10.0.0.3:20021"


@pytest.mark.parametrize(("current", "roles", "role"), [
    ("Worker_A", ["Worker_A", "ps"], "Worker_A"),  # OpenPAI: the name as written
    ("workera", ["Worker_A", "ps"], "Worker_A"),  # older local clusters: the converted name
    ("workerA", ["Worker_A", "workerA"], "workerA"),  # the name as written wins
    ("workera", ["Worker_A", "worker_a"], None),  # two roles convert alike: cannot tell
    ("chief", ["Worker_A", "ps"], None),
])
def test_the_current_role_variable_names_one_role_of_the_job(current, roles, role):
    assert taskenv.job_role_name(current, roles) == role


def test_variable_names_keep_or_convert_the_role_as_openpai_does():
    assert taskenv.task_count_name("Main_Worker") == "PAI_TASK_ROLE_TASK_COUNT_Main_Worker"
    assert taskenv.resource_name("Main_Worker") == "PAI_RESOURCE_Main_Worker"
    assert taskenv.host_ip_name("Main_Worker", 3) == "PAI_HOST_IP_mainworker_3"
    assert taskenv.port_list_names("Main_Worker", 0, "SynPort") == (
        "PAI_PORT_LIST_mainworker_0_SynPort", "PAI_mainworker_0_SynPort_PORT")


def test_a_role_with_several_http_and_ssh_ports_is_reached_on_the_first_of_each():
    ports = {"web": {0: {"ssh": [30000, 30001], "http": [30002, 30003]}}}
    env = taskenv.runtime_env([("web", 1)], "web", 0, ports, {("web", 0): "10.0.0.9"})
    assert (env["PAI_CURRENT_CONTAINER_PORT"], env["PAI_CONTAINER_HOST_PORT"], env["PAI_CONTAINER_SSH_PORT"]) == (
        "30002", "30002", "30000")
    assert env["PAI_TASK_ROLE_web_HOST_LIST"] == "10.0.0.9:30002"
    assert env["PAI_CONTAINER_HOST_PORT_LIST"] == "ssh:30000,30001;http:30002,30003;"
