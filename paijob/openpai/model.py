"""THE model of an OpenPAI job: parsed once into typed, frozen data, with OpenPAI's defaults applied.

validate's rules, the local cluster (planner, runner, REST views) and the task
environment (``taskenv``) all read a job through this model; every OpenPAI
default is written here and nowhere else. Each value is kept twice where the
two differ: the effective one as a field, the job as written in ``raw`` (the
loaded mapping, e.g. ``TaskRole.raw``), since some of OpenPAI's outputs echo
what was written (``PAI_RESOURCE_<role>``) rather than what takes effect.

Sources (copies under ``../shared/reference/openpai/upstream``):

* rest-server ``models/v2/job/k8s.js`` ``generateTaskRole``: ``taskNumber =
  instances || 1``; every role gets ports ``ssh`` and ``http`` (1 each)
  unless it declares them; ``/dev/shm`` is ``shmMB || 512`` MB; gang
  allocation is on unless ``extras.gangAllocation === false``, and only then
  is ``taskRetryCount || 0`` used (otherwise tasks are never retried on their
  own); ``minFailedTaskCount = minFailedInstances || 1`` and
  ``minSucceededTaskCount = minSucceededInstances || taskNumber`` (so ``null``
  and ``0`` mean the default, ``-1`` is kept: never by count);
* ``k8s.js`` ``put``: the virtual cluster is ``defaults.virtualCluster`` when
  not null, else ``default``;
* frameworkcontroller: an attempt ends once ``minFailedTaskCount`` tasks of a
  role failed, or ``minSucceededTaskCount`` succeeded (``-1``: never by count);
* openpai-runtime ``framework_parser.py``: role names in variable names are
  lowercased and stripped to ``a-z0-9`` (``names.runtime_role_name``).

``parse_job`` is lenient: a field of the wrong type is left at its default,
so that rules can run on what is well-formed while the schema rules report
the rest. Build the model once per job text (``parse_job(load_job(text).value)``)
and hand it on; nothing downstream reads the text again.
"""

# No `from __future__ import annotations` here: typing.NamedTuple turns each string annotation
# into a ForwardRef, compiling it, at import; real annotations spare every render ~60 us per field.
from collections.abc import Mapping
from typing import Any, NamedTuple, TypeGuard

from paijob.openpai.markers import js_string
from paijob.openpai.names import runtime_role_name

SERVER_PORTS = ("ssh", "http")  # k8s.js adds these to every role (count 1) when the job lacks them
DEFAULT_SHM_MB = 512  # k8s.js: /dev/shm is shmMB || 512
DEFAULT_VIRTUAL_CLUSTER = "default"  # k8s.js put: defaults.virtualCluster, else this


def is_int(value: Any) -> TypeGuard[int]:
    """A JSON integer as the job model keeps it (jsyaml turns 1.0 into 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _int(value: Any, default: int) -> int:
    return value if is_int(value) else default


def _js_truthy_int(value: Any) -> int | None:
    """``x || default`` in the server's JavaScript: None, 0 (and non-numbers) give None."""
    return value if is_int(value) and value != 0 else None


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


# The records are NamedTuples (immutable, compared by value), not frozen
# dataclasses: every `paijob render` validates its job, and a frozen dataclass
# costs about 0.5 ms of start-up each (its methods are compiled from source
# when this module is imported), a NamedTuple a tenth of that; one without
# methods in the functional form, cheaper again (ruff.toml's UP014).
Prerequisite = NamedTuple("Prerequisite", [
    ("name", str),
    ("type", str),
    ("position", int),  # its index in the job's prerequisites list
    ("uri", Any),
    ("raw", Mapping[str, Any]),
])


class Resources(NamedTuple):
    cpu: int
    memory_mb: int
    gpu: int
    ports: Mapping[str, int]  # as declared (counts that are not integers are left out)

    @property
    def all_ports(self) -> dict[str, int]:
        """Declared ports plus the ``ssh`` and ``http`` ports the server adds."""
        ports = dict(self.ports)
        for label in SERVER_PORTS:
            ports.setdefault(label, 1)
        return ports


class Completion(NamedTuple):
    min_failed: int  # effective (frameworkcontroller's minFailedTaskCount): minFailedInstances || 1
    min_succeeded: int  # effective (minSucceededTaskCount): minSucceededInstances || instances
    raw_min_failed: Any = None

    def failed_enough(self, failed: int) -> bool:
        """frameworkcontroller: the attempt fails once this many tasks of the role failed (-1: never)."""
        return self.min_failed > 0 and failed >= self.min_failed

    def succeeded_enough(self, succeeded: int) -> bool:
        """frameworkcontroller: the attempt succeeds once this many tasks of the role succeeded (-1: never)."""
        return self.min_succeeded > 0 and succeeded >= self.min_succeeded


class TaskRole(NamedTuple):
    name: str
    instances: int
    docker_image: str | None
    resources: Resources
    commands: tuple[str, ...]
    completion: Completion
    task_retry_count: int  # effective: used only when gang allocation is off
    shm_mb: int  # effective /dev/shm size (the 4th field of PAI_RESOURCE_<role> is the raw one: taskenv)
    data: str | None
    output: str | None
    script: str | None
    prerequisites: tuple[str, ...]
    raw: Mapping[str, Any]

    @property
    def runtime_name(self) -> str:
        return runtime_role_name(self.name)

    @property
    def port_labels(self) -> tuple[str, ...]:
        """Every port label written under resourcePerInstance.ports (valid or not)."""
        res = self.raw.get("resourcePerInstance")
        ports = res.get("ports") if isinstance(res, dict) else None
        return tuple(str(k) for k in ports) if isinstance(ports, dict) else ()


Deployment = NamedTuple("Deployment", [
    ("name", str),
    ("position", int),  # its index in the job's deployments list
    ("roles", Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]),  # role -> (pre, post)
])


class Job(NamedTuple):
    name: str
    roles: tuple[TaskRole, ...]  # in YAML order (PAI_TASK_ROLE_LIST)
    prerequisites: tuple[Prerequisite, ...]
    parameters: Mapping[str, Any]
    secrets: Mapping[str, Any] | None
    job_retry_count: int
    deployments: tuple[Deployment, ...]
    default_deployment: str | None
    virtual_cluster: str
    gang_allocation: bool
    runtime_plugins: tuple[Mapping[str, Any], ...]
    hived: Mapping[str, Any] | None
    raw: Mapping[str, Any]

    def role(self, name: str) -> TaskRole | None:
        return next((r for r in self.roles if r.name == name), None)

    @property
    def role_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.roles)

    def prerequisite(self, name: str, kind: str) -> Prerequisite | None:
        return next((p for p in self.prerequisites if p.name == name and p.type == kind), None)

    def plugin(self, name: str) -> Mapping[str, Any] | None:
        return next((p for p in self.runtime_plugins if p.get("plugin") == name), None)

    def image_uri(self, role: TaskRole) -> str:
        """The image a role runs: the ``uri`` of the dockerimage prerequisite it names (else the name itself)."""
        image = self.prerequisite(role.docker_image or "", "dockerimage")
        return str(image.uri) if image is not None and image.uri is not None else role.docker_image or ""

    @property
    def total_tasks(self) -> int:
        return sum(role.instances for role in self.roles)

    @property
    def total_gpu(self) -> int:
        return sum(role.instances * role.resources.gpu for role in self.roles)


def parse_role(name: str, raw: Mapping[str, Any], gang_allocation: bool) -> TaskRole:
    res = _mapping(raw.get("resourcePerInstance"))
    ports = {str(k): v for k, v in _mapping(res.get("ports")).items() if is_int(v)}
    instances = _js_truthy_int(raw.get("instances")) or 1
    completion = _mapping(raw.get("completion"))
    options = _mapping(raw.get("extraContainerOptions"))
    return TaskRole(
        name=name,
        instances=instances,
        docker_image=raw.get("dockerImage") if isinstance(raw.get("dockerImage"), str) else None,
        resources=Resources(
            cpu=_int(res.get("cpu"), 0),
            memory_mb=_int(res.get("memoryMB"), 0),
            gpu=_int(res.get("gpu"), 0),
            ports=ports,
        ),
        commands=_strings(raw.get("commands")),
        completion=Completion(
            min_failed=_js_truthy_int(completion.get("minFailedInstances")) or 1,
            min_succeeded=_js_truthy_int(completion.get("minSucceededInstances")) or instances,
            raw_min_failed=completion.get("minFailedInstances"),
        ),
        task_retry_count=(_js_truthy_int(raw.get("taskRetryCount")) or 0) if not gang_allocation else 0,
        shm_mb=_js_truthy_int(options.get("shmMB")) or DEFAULT_SHM_MB,
        data=raw.get("data") if isinstance(raw.get("data"), str) else None,
        output=raw.get("output") if isinstance(raw.get("output"), str) else None,
        script=raw.get("script") if isinstance(raw.get("script"), str) else None,
        prerequisites=_strings(raw.get("prerequisites")),
        raw=raw,
    )


def _prerequisites(raw: Any) -> tuple[Prerequisite, ...]:
    items = raw if isinstance(raw, list) else []
    return tuple(
        Prerequisite(item["name"], item["type"], index, item.get("uri"), item)
        for index, item in enumerate(items)
        if isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("type"), str)
    )


def _deployments(raw: Any) -> tuple[Deployment, ...]:
    out = []
    for index, item in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            continue
        roles = {
            str(role): (_strings(_mapping(spec).get("preCommands")), _strings(_mapping(spec).get("postCommands")))
            for role, spec in _mapping(item.get("taskRoles")).items()
        }
        out.append(Deployment(item["name"], index, roles))
    return tuple(out)


def parse_job(raw: Mapping[str, Any]) -> Job:
    """The job model of a loaded job mapping (see the module docstring for the defaults)."""
    extras = _mapping(raw.get("extras"))
    defaults = _mapping(raw.get("defaults"))
    gang = extras.get("gangAllocation") is not False
    roles = tuple(
        parse_role(str(name), spec, gang)
        for name, spec in _mapping(raw.get("taskRoles")).items()
        if isinstance(spec, dict)
    )
    plugins = extras.get("com.microsoft.pai.runtimeplugin")
    vc = defaults.get("virtualCluster")
    return Job(
        name=str(raw["name"]) if isinstance(raw.get("name"), str) else "",
        roles=roles,
        prerequisites=_prerequisites(raw.get("prerequisites")),
        parameters=_mapping(raw.get("parameters")),
        secrets=raw.get("secrets") if isinstance(raw.get("secrets"), dict) else None,
        job_retry_count=_js_truthy_int(raw.get("jobRetryCount")) or 0,
        deployments=_deployments(raw.get("deployments")),
        default_deployment=defaults.get("deployment") if isinstance(defaults.get("deployment"), str) else None,
        virtual_cluster=DEFAULT_VIRTUAL_CLUSTER if vc is None else js_string(vc),
        gang_allocation=gang,
        runtime_plugins=tuple(p for p in plugins if isinstance(p, dict)) if isinstance(plugins, list) else (),
        hived=extras.get("hivedScheduler") if isinstance(extras.get("hivedScheduler"), dict) else None,
        raw=raw,
    )
