"""The protocol checks after the JSON schema, as small named rules.

Each rule takes the parsed :class:`~paijob.openpai.model.Job` and yields
``(severity, path, message)`` findings (the shape of TorchX's
``specs/file_linter.py`` validators). Errors are what the OpenPAI server
refuses: its middleware's cross checks (rest-server
``middlewares/v2/protocol.js``), the hived scheduler's checks that do not
depend on the cluster (``middlewares/v2/hived.js``), and job shapes the
server's later steps cannot handle (``models/v2/job/k8s.js``, where a
TypeError turns the POST into an HTTP 500 and no job). Everything else the
server accepts, so paijob's own concerns are warnings.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from paijob.common import contract
from paijob.common.storage_route import route_problem
from paijob.openpai.markers import TemplateError, render_server, role_entrypoint
from paijob.openpai.model import Job, TaskRole, is_int
from paijob.openpai.names import (
    PAI_TAG_PATTERN,
    init_role_failure,
    js_match,
    role_name_breaks_init,
    role_name_fix,
)
from paijob.openpai.storages import ignored_plugin_storages, pod_problems

ERROR = "error"
WARNING = "warning"

YamlPath = tuple[Hashable, ...]
Finding = tuple[str, YamlPath, str]
Rule = Callable[[Job], Iterator[Finding]]

WELL_KNOWN_PORTS = ("29500", "29400", "23456", "12355")
# Each pattern after the words one of which every match of it contains. A command holding none of
# them is not searched, so the pattern is compiled (by re, on first use, then cached) only for a job
# that may fix a port: each compile costs about 0.1 ms of a render, and most jobs name no port.
_FIXED_PORT_PATTERNS = (
    (("MASTER_PORT",), r"MASTER_PORT\s*=\s*[\"']?(\d{2,5})\b"),
    (("master_port", "master-port", "rdzv_port", "rdzv-port"),
     r"--(?:master[_-]port|rdzv[_-]port)[= ]+[\"']?(\d{2,5})\b"),
    (("tcp://",), r"--(?:init[_-]method|dist[_-]url)[= ]+[\"']?tcp://[^\s:\"']+:(\d{2,5})\b"),
    (("rdzv_endpoint", "rdzv-endpoint"), r"--rdzv[_-]endpoint[= ]+[\"']?[^\s:\"']+:(\d{2,5})\b"),
    (WELL_KNOWN_PORTS, r"(?<![\w.:/$-])(" + "|".join(WELL_KNOWN_PORTS) + r")(?![\w.])"),
)
PAI_TAG_OPENING = "<%"  # in every OpenPAI tag: a command without it needs no tag pattern


def _role_path(role: TaskRole, *rest: Hashable) -> YamlPath:
    return ("taskRoles", role.name, *rest)


# --------------------------------------------------------------------------- server: middleware


def duplicate_prerequisites(job: Job) -> Iterator[Finding]:
    """``Duplicate ${type} prerequisites ${name}``: names are unique per type, not overall."""
    seen: set[tuple[str, str]] = set()
    for item in job.prerequisites:
        if (item.type, item.name) in seen:
            yield ERROR, ("prerequisites", item.position, "name"), (
                f"duplicate {item.type} prerequisite name '{item.name}'; "
                f"each {item.type} prerequisite needs its own name"
            )
        seen.add((item.type, item.name))


def duplicate_deployments(job: Job) -> Iterator[Finding]:
    """``Duplicate deployments ${name}``."""
    seen: set[str] = set()
    for deployment in job.deployments:
        if deployment.name in seen:
            yield ERROR, ("deployments", deployment.position, "name"), (
                f"duplicate deployment name '{deployment.name}'"
            )
        seen.add(deployment.name)


def role_prerequisite_lists(job: Job) -> Iterator[Finding]:
    """``Prerequisite ${p} does not exist.``: a role's ``prerequisites`` name any kind."""
    names = {p.name for p in job.prerequisites}
    for role in job.roles:
        for index, ref in enumerate(role.prerequisites):
            if ref not in names:
                yield ERROR, _role_path(role, "prerequisites", index), f"'{ref}' names no prerequisite"


def role_prerequisite_fields(job: Job) -> Iterator[Finding]:
    """``dockerImage``/``data``/``output``/``script`` name a prerequisite of that type."""
    for role in job.roles:
        for key, kind in (("dockerImage", "dockerimage"), ("data", "data"), ("output", "output"), ("script", "script")):
            if key not in role.raw:
                continue
            ref = role.raw[key]
            if isinstance(ref, str) and job.prerequisite(ref, kind) is not None:
                continue
            yield ERROR, _role_path(role, key), _missing_prerequisite(job, ref, kind)


def _missing_prerequisite(job: Job, ref: Any, kind: str) -> str:
    same_kind = sorted(p.name for p in job.prerequisites if p.type == kind)
    other = next((p for p in job.prerequisites if p.name == ref), None)
    if other is not None:
        return f"'{ref}' is a '{other.type}' prerequisite, not a {kind}"
    if kind != "dockerimage":
        return f"'{ref}' names no prerequisite of type '{kind}'"
    if same_kind:
        return f"'{ref}' names no prerequisite; the dockerimage prerequisites are: {', '.join(same_kind)}"
    return (
        f"'{ref}' names no prerequisite; add one under prerequisites: "
        "{name: image, type: dockerimage, uri: repo/image:tag}"
    )


def default_deployment(job: Job) -> Iterator[Finding]:
    """``Default deployment ${name} does not exist.``"""
    defaults = job.raw.get("defaults")
    if not isinstance(defaults, dict) or "deployment" not in defaults:
        return
    wanted = defaults["deployment"]
    if not isinstance(wanted, str):
        return  # the schema's error
    names = [d.name for d in job.deployments]
    if wanted not in names:
        listed = ", ".join(names) if names else "none are defined"
        yield ERROR, ("defaults", "deployment"), f"'{wanted}' names no deployment ({listed})"


# --------------------------------------------------------------------------- server: render


def server_rendering(job: Job) -> Iterator[Finding]:
    """``protocolRender``: mustache.js parses every role's commands and every docker auth
    value; what it cannot parse (or a non-string auth value) fails the POST (HTTP 500).

    Only for a job that passed the schema: the server stops at the schema, so ``report`` runs
    this rule only then (it has the schema's errors already; not in ``SERVER_RULES``)."""
    for role in job.roles:
        try:
            role_entrypoint(job.raw, role.name)
        except TemplateError as error:
            yield ERROR, _role_path(role, "commands"), f"{error}; the server fails the submission (HTTP 500)"
    for item in job.prerequisites:
        auth = item.raw.get("auth") if item.type == "dockerimage" else None
        for key, value in auth.items() if isinstance(auth, dict) else ():
            path = ("prerequisites", item.position, "auth", key)
            if value and not isinstance(value, str):
                yield ERROR, path, (
                    f"expected a string, got {type_name(value)}: the server renders every auth "
                    "value as a template and fails on others (HTTP 500)"
                )
            elif isinstance(value, str):
                try:
                    render_server(value, {"$secrets": job.secrets or {}})
                except TemplateError as error:
                    yield ERROR, path, f"{error}; the server fails the submission (HTTP 500)"


# --------------------------------------------------------------------------- server: later steps


def task_roles_shape(job: Job) -> Iterator[Finding]:
    """The schema gives ``taskRoles`` no type; anything but a mapping breaks the server."""
    roles = job.raw.get("taskRoles", {})
    if not isinstance(roles, (dict, datetime.date)):
        yield ERROR, ("taskRoles",), (
            f"expected a mapping of role name to role, got {type_name(roles)}; the server's "
            "schema lets this through but then fails on it (HTTP 500, no job)"
        )
    elif not isinstance(roles, dict):
        yield ERROR, ("taskRoles",), "expected a mapping of role name to role, got a date"


def ports_shape(job: Job) -> Iterator[Finding]:
    """k8s.js: ``'ssh' in ports`` throws on a number, string or boolean."""
    for role in job.roles:
        res = role.raw.get("resourcePerInstance")
        ports = res.get("ports") if isinstance(res, dict) else None
        if isinstance(ports, (bool, int, float, str)):
            yield ERROR, _role_path(role, "resourcePerInstance", "ports"), (
                f"expected a mapping of port label to count, got {type_name(ports)}; the server "
                "fails on it when it adds the ssh and http ports (HTTP 500, no job)"
            )
        elif isinstance(ports, list):
            yield WARNING, _role_path(role, "resourcePerInstance", "ports"), (
                "a list declares no port labels (the server accepts it and adds only ssh and http)"
            )


def ignored_storage_plugin(job: Job) -> Iterator[Finding]:
    """A ``teamwise_storage`` plugin beside the job's own ``extras.storages``: rest-server mounts only the list,
    so the plugin's storages are silently not mounted and what the job writes there stays on the container's
    disk, lost with it (a job rendered by paijob before it wrote ``extras.storages``, then edited)."""
    for name in ignored_plugin_storages(job.raw):
        yield ERROR, ("extras", "com.microsoft.pai.runtimeplugin"), (
            f"teamwise_storage names storage '{name}', which is not mounted: rest-server converts the plugin only "
            f"for a job without extras.storages, and this job has its own; add {{name: {name}, mountPath: "
            f"/mnt/{name}}} to extras.storages (and drop the plugin)")


def storage_mounts(job: Job) -> Iterator[Finding]:
    """A storage list that rest-server accepts but Kubernetes refuses after the wait (a storage twice, two on
    one path: ``openpai.storages.pod_problems``), or whose mountPath breaks the container (``/etc``, ``..``)."""
    for path, message in pod_problems(job.raw):
        yield ERROR, path, message


def route_storage_mounted(job: Job) -> Iterator[Finding]:
    """paijob's storage route (``storage: NAME``) needs the storage at ``/mnt/NAME``: a job whose own list
    moves, drops or replaces it would lose its output folder (``common.storage_route.route_problem``).
    A client rule: rest-server (and the local cluster, answering as it) runs such a job."""
    found = route_problem(job.raw)
    if found is not None:
        yield ERROR, found[0], found[1]


def runtime_plugins_shape(job: Job) -> Iterator[Finding]:
    """k8s.js iterates ``extras['com.microsoft.pai.runtimeplugin']`` and reads ``.plugin``."""
    extras = job.raw.get("extras")
    if not isinstance(extras, dict) or "com.microsoft.pai.runtimeplugin" not in extras:
        return
    if "storages" in extras and extras["storages"]:
        return  # the server skips the loop then
    path: YamlPath = ("extras", "com.microsoft.pai.runtimeplugin")
    plugins = extras["com.microsoft.pai.runtimeplugin"]
    if not isinstance(plugins, (list, str)):
        yield ERROR, path, f"expected a list of plugins, got {type_name(plugins)} (the server fails on it: HTTP 500)"
        return
    for index, plugin in enumerate(plugins if isinstance(plugins, list) else []):
        if plugin is None:
            yield ERROR, (*path, index), "a plugin entry is null (the server fails on it: HTTP 500)"
        elif not isinstance(plugin, dict) or not isinstance(plugin.get("plugin"), str):
            yield WARNING, (*path, index), (
                "expected {plugin: NAME, parameters: {...}}; OpenPAI's runtime ignores or fails on others"
            )


def runtime_role_names(job: Job, before_v1_6: bool = False) -> Iterator[Finding]:
    """k8s.js ``convertName`` and openpai-runtime name task roles lowercase a-z0-9.

    On OpenPAI v1.6+ the runtime's init container looks the role up by that converted name, so a
    role it changes fails before its commands run: an error (the server accepts the job). On an older
    cluster (``before_v1_6``) such a role runs, and only an empty or shared converted name is worth a
    warning: the framework's task roles and the PAI_HOST_IP_/PAI_PORT_LIST_ variables are ambiguous.
    """
    taken: dict[str, str] = {}
    for role in job.roles:
        name = role.runtime_name
        if not before_v1_6 and role_name_breaks_init(role.name):
            yield ERROR, _role_path(role), f"{init_role_failure(role.name)}; {role_name_fix(role.name, contract.OPENPAI_BEFORE_1_6)}"
        elif not name:
            yield WARNING, _role_path(role), (
                f"role name '{role.name}' has no letters or digits: OpenPAI names the "
                "framework's task role and the runtime variables (PAI_HOST_IP__0) with an empty name"
            )
        elif name in taken:
            yield WARNING, _role_path(role), (
                f"roles '{taken[name]}' and '{role.name}' both become '{name}' in OpenPAI's "
                "framework and runtime variable names, so their PAI_HOST_IP_/PAI_PORT_LIST_ "
                "variables collide; rename one"
            )
        elif name != role.name:
            yield WARNING, _role_path(role), (
                f"the runtime rewrites role '{role.name}' as '{name}' in variable names "
                f"(PAI_HOST_IP_{name}_0, PAI_PORT_LIST_{name}_0_<label>); "
                f"rename the role to '{name}' to avoid surprises"
            )
        taken.setdefault(name, role.name)


# --------------------------------------------------------------------------- server: hived


def hived_scheduler(job: Job) -> Iterator[Finding]:
    """hived.js schema and the checks that need no cluster state."""
    hived = job.raw.get("extras", {}).get("hivedScheduler") if isinstance(job.raw.get("extras"), dict) else None
    if hived is None:
        return
    path: YamlPath = ("extras", "hivedScheduler")
    if not isinstance(hived, dict):
        yield ERROR, path, f"expected a mapping, got {type_name(hived)}"
        return
    if "jobPriorityClass" in hived and hived["jobPriorityClass"] not in ("prod", "test", "oppo"):
        yield ERROR, (*path, "jobPriorityClass"), "must be one of prod, test, oppo"
    roles = hived.get("taskRoles")
    if roles is None:
        return
    if isinstance(roles, dict) and not roles:
        yield ERROR, (*path, "taskRoles"), "needs at least one task role"
    for name, spec in roles.items() if isinstance(roles, dict) else ():
        yield from _hived_role(job, (*path, "taskRoles", name), str(name), spec)


def _hived_role(job: Job, path: YamlPath, name: str, spec: Any) -> Iterator[Finding]:
    if not js_match("^[A-Za-z0-9._~]+$", name):
        yield ERROR, path, f"'{name}' is not a valid hived task role name"
        return
    if not isinstance(spec, dict):
        yield ERROR, path, f"expected a mapping, got {type_name(spec)}"
        return
    for key in ("skuType", "pinnedCellId", "affinityGroupName"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            yield ERROR, (*path, key), f"expected a string or null, got {type_name(spec[key])}"
    if job.role(name) is None:
        yield ERROR, path, f"Taskrole {name} does not exist (roles: {', '.join(job.role_names)})"
    elif spec.get("skuType") is not None and spec.get("pinnedCellId") is not None:
        yield ERROR, path, "skuType and pinnedCellId: only one is allowed"


# --------------------------------------------------------------------------- paijob: warnings


def resource_amounts(job: Job) -> Iterator[Finding]:
    """The server takes any integer; zero or negative amounts rarely do what was meant."""
    for role in job.roles:
        res = role.raw.get("resourcePerInstance")
        res = res if isinstance(res, dict) else {}
        for key, low in (("cpu", 1), ("memoryMB", 1), ("gpu", 0)):
            value = res.get(key)
            if is_int(value) and value < low:
                yield WARNING, _role_path(role, "resourcePerInstance", key), (
                    f"{value} {key}: OpenPAI accepts it, but the scheduler or Kubernetes will "
                    f"not give a task {'a negative' if value < 0 else 'no'} {key}; use at least {low}"
                )
        for label, count in role.resources.ports.items():
            if count < 1:
                yield WARNING, _role_path(role, "resourcePerInstance", "ports", label), (
                    f"port count {count}: the task gets no port for '{label}', and "
                    f"$PAI_PORT_LIST_{role.runtime_name}_0_{label} is empty"
                )


def shm_size(job: Job) -> Iterator[Finding]:
    for role in job.roles:
        memory = role.resources.memory_mb
        if memory > 0 and role.shm_mb >= memory:
            yield WARNING, _role_path(role, "extraContainerOptions", "shmMB"), (
                f"shmMB {role.shm_mb} is not below memoryMB {memory}: /dev/shm counts against the "
                "container's memory, so a full /dev/shm gets the task killed; raise memoryMB or lower shmMB "
                "(a built-in template computes shmMB from its values: set shmMB, or fewer loaderWorkers or "
                "shmPerLoaderWorkerMB)"
            )


def completion_counts(job: Job) -> Iterator[Finding]:
    for role in job.roles:
        need = role.completion.min_succeeded
        if need > role.instances:
            yield WARNING, _role_path(role, "completion", "minSucceededInstances"), (
                f"{need} succeeded instances needed but the role has only {role.instances}"
            )
        failed = role.completion.raw_min_failed
        if is_int(failed) and failed < -1:
            yield WARNING, _role_path(role, "completion", "minFailedInstances"), (
                f"{failed}: OpenPAI passes it on unchanged; only -1 (never), null/0 (1) and "
                "positive counts have a documented meaning"
            )


def task_retries(job: Job) -> Iterator[Finding]:
    for role in job.roles:
        retries = role.raw.get("taskRetryCount")
        if not is_int(retries) or retries == 0:
            continue
        path = _role_path(role, "taskRetryCount")
        if job.gang_allocation and retries > 0:
            yield WARNING, path, (
                f"taskRetryCount {retries} has no effect unless extras.gangAllocation "
                "is false; with gang allocation a failed task fails the job "
                "(use jobRetryCount, or set extras: {gangAllocation: false})"
            )
        elif retries < 0:
            yield WARNING, path, (
                f"taskRetryCount {retries}: OpenPAI accepts it; with gang allocation off "
                "frameworkcontroller treats -1 as 'retry without limit'"
            )


def fixed_ports(job: Job) -> Iterator[Finding]:
    for role in job.roles:
        for index, command in enumerate(role.commands):
            for port in _fixed_ports(command):
                yield WARNING, _role_path(role, "commands", index), (
                    f"fixed port {port}: every task uses the host network, so it "
                    "can collide with other jobs on the node; declare a port "
                    "label (resourcePerInstance.ports: {SynPort: 1}) and read "
                    f"$PAI_PORT_LIST_{role.runtime_name or role.name}_0_SynPort "
                    "(paijob-runtime --port-label does this)"
                )


def _fixed_ports(command: str) -> list[str]:
    found: list[str] = []
    for words, pattern in _FIXED_PORT_PATTERNS:
        if not any(word in command for word in words):
            continue
        for match in re.finditer(pattern, command):
            if match.group(1) not in found:
                found.append(match.group(1))
    return found


def undefined_references(job: Job) -> Iterator[Finding]:
    """``<% $parameters.x %>`` with no ``x``: OpenPAI leaves the tag in the command."""
    sections: dict[str, Any] = {"parameters": job.parameters, "secrets": job.secrets}
    for role in job.roles:
        for index, command in enumerate(role.commands):
            if PAI_TAG_OPENING not in command:
                continue
            for match in re.finditer(PAI_TAG_PATTERN, command):
                section, key = match.group(1), match.group(2).split(".")[0].split("[")[0]
                names = sections.get(section)
                if names is not None and key not in names:
                    yield WARNING, _role_path(role, "commands", index), (
                        f"'<% ${section}.{key} %>' but {section} has no '{key}'; "
                        f"OpenPAI leaves the tag in the command (add {section}: {{{key}: ...}})"
                    )


# Domains reserved for examples and never resolvable (RFC 2606): an image there is a placeholder.
PLACEHOLDER_DOMAINS = ("example.com", "example.org", "invalid")
SET_IMAGE_HINT = ("set the image the cluster can pull: --set image=REGISTRY/IMAGE:TAG for a template (the default, "
                  "PyTorch's official image, works with the templates' install step), or the prerequisite's uri")


def placeholder_image(uri: Any) -> str | None:
    """The registry host of a docker reference when it is a reserved example domain; else None."""
    if not isinstance(uri, str) or "/" not in uri:
        return None
    host = uri.split("/", 1)[0].split(":", 1)[0].lower().rstrip(".")
    if any(host == domain or host.endswith("." + domain) for domain in PLACEHOLDER_DOMAINS):
        return host
    return None


def placeholder_images(job: Job) -> Iterator[Finding]:
    """An image on ``*.example.com`` / ``*.example.org`` / ``*.invalid`` cannot be pulled (submit refuses it)."""
    for item in job.prerequisites:
        host = placeholder_image(item.uri) if item.type == "dockerimage" else None
        if host:
            yield WARNING, ("prerequisites", item.position, "uri"), (
                f"image '{item.uri}' is a placeholder ({host} is reserved for examples) that no cluster can "
                f"pull; paijob submit refuses it for a real cluster: {SET_IMAGE_HINT}")


def cleartext_registry_password(job: Job) -> Iterator[Finding]:
    """A dockerimage ``auth.password`` written in clear: every user of the cluster can read a job's config
    (``GET /jobs/:name/config``), while OpenPAI hides ``secrets`` from them."""
    for item in job.prerequisites:
        auth = item.raw.get("auth") if item.type == "dockerimage" else None
        password = auth.get("password") if isinstance(auth, dict) else None
        if isinstance(password, str) and password and not re.search(_SECRET_TAG, password):
            yield WARNING, ("prerequisites", item.position, "auth", "password"), (
                "a registry password in clear is readable by every user of the cluster in the job's config; "
                "put it under secrets: {registryPassword: ...} and write password: '<% $secrets.registryPassword %>'"
                " (templates: --set 'imageCredentials.password=<% $secrets.registryPassword %>')")


def unquoted_secrets(job: Job) -> Iterator[Finding]:
    """OpenPAI's runtime writes a secret's value into the command (HTML-escaped: ``& < > " '`` only), so
    outside single quotes a space splits it and ``$( )``, ``;``, ``|`` in it run as shell."""
    for role in job.roles:
        for index, command in enumerate(role.commands):
            for tag in secret_tags_outside_single_quotes(command):
                yield WARNING, _role_path(role, "commands", index), (
                    f"{tag} is not in single quotes: a secret holding a space, $(...), ; or | breaks the "
                    f"command or runs as shell; write '{tag}' (the script then receives the value "
                    "HTML-escaped: & < > \" ' as &amp; &lt; &gt; &quot; &#x27;)")


_SECRET_TAG = r"<%\s*\$secrets\.[^%]*?%>"  # compiled on first use, as _FIXED_PORT_PATTERNS


def secret_tags_outside_single_quotes(command: str) -> list[str]:
    """The ``<% $secrets.x %>`` tags of a bash command that bash does not read inside single quotes."""
    found: list[str] = []
    if PAI_TAG_OPENING not in command:
        return found
    secret_tag = re.compile(_SECRET_TAG)
    quote = ""  # "'" or '"' while inside such quotes
    i = 0
    while i < len(command):
        char = command[i]
        match = secret_tag.match(command, i) if quote != "'" else None
        if match:
            found.append(match.group(0))
            i = match.end()
            continue
        if char == "\\" and quote != "'":
            i += 2
            continue
        if char in "'\"" and quote in ("", char):
            quote = "" if quote else char
        i += 1
    return found


def deployment_roles(job: Job) -> Iterator[Finding]:
    """The server ignores deployment entries for roles the job does not have."""
    for deployment in job.deployments:
        for role in deployment.roles:
            if job.role(role) is None:
                yield WARNING, ("deployments", deployment.position, "taskRoles", role), (
                    f"'{role}' is not a task role of this job; OpenPAI ignores these commands"
                )


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return "a " + type(value).__name__.lower()


SERVER_RULES: tuple[Rule, ...] = (
    duplicate_prerequisites,
    duplicate_deployments,
    role_prerequisite_lists,
    role_prerequisite_fields,
    default_deployment,
    task_roles_shape,
    ports_shape,
    runtime_plugins_shape,
    hived_scheduler,
)

PAIJOB_RULES: tuple[Rule, ...] = (
    ignored_storage_plugin,
    storage_mounts,
    resource_amounts,
    shm_size,
    completion_counts,
    task_retries,
    fixed_ports,
    undefined_references,
    deployment_roles,
    placeholder_images,
    cleartext_registry_password,
    unquoted_secrets,
)

# What paijob's own routes need, which a server answering as rest-server does not refuse: `paijob validate`,
# `render` and `submit` check them; the local cluster's server does not (``validate_job(client=False)``),
# so a job sent to it another way runs as it would on OpenPAI.
CLIENT_RULES: tuple[Rule, ...] = (
    route_storage_mounted,
)
