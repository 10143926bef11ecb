"""THE job model (paijob.openpai.model): what each field of a job means once OpenPAI's defaults apply.

Rows are job fragments as the rest-server's ``k8s.js`` reads them (``x || default`` in JavaScript: null, 0
and a non-number give the default, -1 is kept) and as a lenient reader must take a field of the wrong type
(left at its default, so that validate's schema rules report it). validate, the local cluster and the task
environment all read jobs through this model.
"""

from __future__ import annotations

from typing import Any

import pytest

from paijob.openpai.model import Completion, is_int, parse_job


def job(**top: Any) -> Any:
    roles = top.pop("roles", {"worker": {}})
    roles = {name: {"commands": ["run"], **spec} if isinstance(spec, dict) else spec for name, spec in roles.items()}
    return parse_job({"name": "j", "taskRoles": roles, **top})


def role(**spec: Any) -> Any:
    return job(roles={"worker": spec}).roles[0]


@pytest.mark.parametrize(("value", "integer"), [(1, True), (0, True), (-1, True), (True, False), (1.5, False),
                                                ("1", False), (None, False)])
def test_a_json_integer_is_an_int_and_not_a_bool(value, integer):
    assert is_int(value) is integer


@pytest.mark.parametrize(("written", "instances"), [(None, 1), (0, 1), ("3", 1), (True, 1), (3, 3), (1, 1), (-1, -1)])
def test_instances_are_instances_or_1_as_javascript_reads_it(written, instances):
    assert role(instances=written).instances == instances


@pytest.mark.parametrize(("resources", "cpu", "memory", "gpu", "ports"), [
    ({"cpu": 4, "memoryMB": 8192, "gpu": 2, "ports": {"SynPort": 2}}, 4, 8192, 2, {"SynPort": 2}),
    ({"cpu": "4", "memoryMB": None, "gpu": True, "ports": {"a": "x", "b": 1}}, 0, 0, 0, {"b": 1}),
    ({"cpu": 1, "memoryMB": 1, "gpu": 0, "ports": ["SynPort"]}, 1, 1, 0, {}),
])
def test_resources_keep_integers_only(resources, cpu, memory, gpu, ports):
    parsed = role(resourcePerInstance=resources).resources
    assert (parsed.cpu, parsed.memory_mb, parsed.gpu, dict(parsed.ports)) == (cpu, memory, gpu, ports)


@pytest.mark.parametrize(("ports", "all_ports"), [
    ({}, {"ssh": 1, "http": 1}),
    ({"SynPort": 2}, {"SynPort": 2, "ssh": 1, "http": 1}),
    ({"ssh": 3}, {"ssh": 3, "http": 1}),  # the server adds only what the role lacks
])
def test_every_role_gets_ssh_and_http_ports(ports, all_ports):
    assert role(resourcePerInstance={"ports": ports}).resources.all_ports == all_ports


@pytest.mark.parametrize(("resources", "labels"), [
    ({"ports": {"SynPort": 1, "bad label": "x"}}, ("SynPort", "bad label")),  # as written, valid or not
    ({"ports": ["SynPort"]}, ()),
    ("big", ()),
])
def test_port_labels_are_the_labels_written(resources, labels):
    assert role(resourcePerInstance=resources).port_labels == labels


@pytest.mark.parametrize(("completion", "min_failed", "min_succeeded"), [
    ({}, 1, 2), ({"minFailedInstances": 0, "minSucceededInstances": 0}, 1, 2),
    ({"minFailedInstances": 2, "minSucceededInstances": 1}, 2, 1),
    ({"minFailedInstances": -1, "minSucceededInstances": -1}, -1, -1),
    ("none", 1, 2),
])
def test_completion_counts(completion, min_failed, min_succeeded):
    parsed = role(instances=2, completion=completion).completion
    assert (parsed.min_failed, parsed.min_succeeded) == (min_failed, min_succeeded)


@pytest.mark.parametrize(("threshold", "count", "enough"), [
    (2, 0, False), (2, 1, False), (2, 2, True), (2, 3, True), (1, 1, True), (-1, 0, False), (-1, 5, False),
])
def test_an_attempt_ends_once_enough_tasks_failed_or_succeeded(threshold, count, enough):
    completion = Completion(min_failed=threshold, min_succeeded=threshold)
    assert completion.failed_enough(count) is enough
    assert completion.succeeded_enough(count) is enough


@pytest.mark.parametrize(("shm", "effective"), [(None, 512), (0, 512), (1024, 1024), ("1", 512)])
def test_shm_is_shm_mb_or_512(shm, effective):
    assert role(extraContainerOptions={"shmMB": shm}).shm_mb == effective
    assert role().shm_mb == 512


@pytest.mark.parametrize(("gang", "written", "retries"), [
    (None, 3, 0), (True, 3, 0), (False, 3, 3), (False, None, 0), (False, 0, 0), ("false", 3, 0),
])
def test_task_retries_apply_only_without_gang_allocation(gang, written, retries):
    extras = {} if gang is None else {"gangAllocation": gang}
    parsed = job(extras=extras, roles={"worker": {"taskRetryCount": written}})
    assert parsed.gang_allocation is (gang is not False)
    assert parsed.roles[0].task_retry_count == retries


def test_a_roles_fields_of_the_wrong_type_are_left_out():
    parsed = role(dockerImage=5, commands=["a", 1, "b"], data=1, output=None, script=[], prerequisites="x")
    assert (parsed.docker_image, parsed.commands, parsed.data, parsed.output, parsed.script, parsed.prerequisites) \
        == (None, ("a", "b"), None, None, None, ())
    parsed = role(dockerImage="img", data="d", output="o", script="s", prerequisites=["p", 2])
    assert (parsed.docker_image, parsed.data, parsed.output, parsed.script, parsed.prerequisites) == (
        "img", "d", "o", "s", ("p",))
    assert role(commands="run").commands == ()


def test_roles_keep_the_jobs_order_and_names():
    parsed = job(roles={"Ps_1": {"instances": 2, "resourcePerInstance": {"gpu": 1}},
                        "worker": {"instances": 3, "resourcePerInstance": {"gpu": 4}}, "broken": "x"})
    assert parsed.role_names == ("Ps_1", "worker")  # a role that is not a mapping is left out
    assert parsed.roles[0].runtime_name == "ps1"
    assert parsed.role("worker") is parsed.roles[1] and parsed.role("Worker") is None
    assert (parsed.total_tasks, parsed.total_gpu) == (5, 14)


PREREQUISITES = [
    {"type": "dockerimage", "name": "image", "uri": "repo/image:tag"},
    "not a mapping",
    {"type": "dockerimage", "name": "bare"},
    {"type": "script", "name": "image", "uri": "s.sh"},
    {"type": "data", "name": 3},
]


def test_prerequisites_are_found_by_name_and_type_with_their_position():
    parsed = job(prerequisites=PREREQUISITES)
    assert [(p.name, p.type, p.position, p.uri) for p in parsed.prerequisites] == [
        ("image", "dockerimage", 0, "repo/image:tag"), ("bare", "dockerimage", 2, None), ("image", "script", 3, "s.sh")]
    assert parsed.prerequisite("image", "script").uri == "s.sh"
    assert parsed.prerequisite("image", "data") is None
    assert job(prerequisites="x").prerequisites == ()


@pytest.mark.parametrize(("docker_image", "uri"), [("image", "repo/image:tag"), ("bare", "bare"), ("other", "other"),
                                                   (None, "")])
def test_a_roles_image_is_its_prerequisites_uri_or_the_name_itself(docker_image, uri):
    parsed = job(prerequisites=PREREQUISITES, roles={"worker": {"dockerImage": docker_image}})
    assert parsed.image_uri(parsed.roles[0]) == uri


def test_deployments_keep_their_position_and_each_roles_commands():
    parsed = job(deployments=[{"name": "d1", "taskRoles": {"worker": {"preCommands": ["a", 1], "postCommands": ["b"]}}},
                              {"name": 2}, {"name": "d2", "taskRoles": {"worker": {}}}, "x"],
                 defaults={"deployment": "d2"})
    assert [(d.name, d.position, dict(d.roles)) for d in parsed.deployments] == [
        ("d1", 0, {"worker": (("a",), ("b",))}), ("d2", 2, {"worker": ((), ())})]
    assert parsed.default_deployment == "d2"
    assert job(deployments={"name": "d"}).deployments == () and job().default_deployment is None


@pytest.mark.parametrize(("top", "fields"), [
    ({}, ("j", None, 0, "default", (), None, {})),
    ({"name": 5, "secrets": {"k": "v"}, "jobRetryCount": 2, "defaults": {"virtualCluster": 7},
      "extras": {"com.microsoft.pai.runtimeplugin": [{"plugin": "ssh"}, "x"], "hivedScheduler": {"a": 1}},
      "parameters": {"lr": 1}},
     ("", {"k": "v"}, 2, "7", ({"plugin": "ssh"},), {"a": 1}, {"lr": 1})),
    ({"secrets": "s", "jobRetryCount": 0, "defaults": {"virtualCluster": None},
      "extras": {"com.microsoft.pai.runtimeplugin": {"plugin": "ssh"}, "hivedScheduler": []}, "parameters": []},
     ("j", None, 0, "default", (), None, {})),
    ({"jobRetryCount": -1, "defaults": {"virtualCluster": "vc1"}}, ("j", None, -1, "vc1", (), None, {})),
])
def test_job_level_fields(top, fields):
    parsed = job(**top)
    assert (parsed.name, parsed.secrets, parsed.job_retry_count, parsed.virtual_cluster, parsed.runtime_plugins,
            parsed.hived, dict(parsed.parameters)) == fields


def test_plugins_are_found_by_name():
    parsed = job(extras={"com.microsoft.pai.runtimeplugin": [{"plugin": "ssh", "parameters": {}},
                                                             {"plugin": "tensorboard"}]})
    assert parsed.plugin("tensorboard") == {"plugin": "tensorboard"} and parsed.plugin("teamwise_storage") is None
