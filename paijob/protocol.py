"""OpenPAI protocol v2: validation and the distributed plan of a job.

Written once, used by ``paijob render``, ``paijob validate`` and
``paijob submit``. Shape rules (required keys, unknown keys, names, types,
minimums) come from the JSON schema in ``paijob.protocol_schema``; rules that
relate several fields are code below. Every problem is collected (nothing
stops at the first one), each with its YAML path and, when the job came from
text, its line.

The distributed plan answers what ``paijob-runtime train`` will do with the
job: which role is the master, which port label it reads, and the world size
(instances x processes per node, summed over the roles that launch workers).
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paijob.errors import PaijobError
from paijob.openpai.names import DEFAULT_PORT_LABEL, runtime_role_name
from paijob.openpai.yaml12 import SERVER_BODY_LIMIT, LineMap, YamlError, load_job
from paijob.protocol_schema import IDENTIFIER_PATTERN, NAME_PATTERN, iter_schema_errors

YamlPath = tuple[Hashable, ...]

ERROR = "error"
WARNING = "warning"

RUNTIME_PROGRAM = "paijob-runtime"

# Ports that distributed PyTorch code tends to hard-code. On OpenPAI every task
# uses the host network, so two jobs on one node collide on them.
WELL_KNOWN_PORTS = ("29500", "29400", "23456", "12355")
_FIXED_PORT_PATTERNS = (
    re.compile(r"MASTER_PORT\s*=\s*[\"']?(\d{2,5})\b"),
    re.compile(r"--(?:master[_-]port|rdzv[_-]port)[= ]+[\"']?(\d{2,5})\b"),
    re.compile(r"--(?:init[_-]method|dist[_-]url)[= ]+[\"']?tcp://[^\s:\"']+:(\d{2,5})\b"),
    re.compile(r"--rdzv[_-]endpoint[= ]+[\"']?[^\s:\"']+:(\d{2,5})\b"),
    re.compile(r"(?<![\w.:/$-])(" + "|".join(WELL_KNOWN_PORTS) + r")(?![\w.])"),
)
_PAI_REFERENCE = re.compile(r"<%\s*\$(parameters|secrets)\.([A-Za-z0-9_]+)[^%]*%>")
_MPI_LAUNCHERS = ("mpirun", "horovodrun", "mpiexec")


@dataclass(frozen=True)
class Problem:
    """One thing wrong (``error``) or suspicious (``warning``) in a job."""

    severity: str
    path: YamlPath
    message: str
    line: int | None = None

    @property
    def dotted_path(self) -> str:
        return format_path(self.path)

    def format(self, source: str) -> str:
        where = f"{source}:{self.line}" if self.line else source
        what = f"{self.dotted_path}: " if self.path else ""
        return f"{where}: {self.severity}: {what}{self.message}"


@dataclass(frozen=True)
class RolePlan:
    """How many processes one role starts, as paijob-runtime will see it."""

    role: str
    instances: int
    processes_per_node: int | None  # None: not knowable from the file
    gpu: int
    mode: str


@dataclass(frozen=True)
class DistributedPlan:
    """Facts about the distributed run that the job file fixes."""

    launcher: str  # "paijob-runtime" or "mpirun"
    master_role: str | None
    port_label: str | None
    roles: tuple[RolePlan, ...]
    world_size: int | None

    @property
    def nodes(self) -> int:
        return sum(role.instances for role in self.roles)

    def describe(self) -> str:
        """``world size 32 (4 nodes × 8 processes)``, or the per-role sum."""
        if self.world_size is None:
            size = "world size unknown (processes per node not fixed in the file)"
        elif len(self.roles) == 1:
            only = self.roles[0]
            nodes = "node" if only.instances == 1 else "nodes"
            procs = "process" if only.processes_per_node == 1 else "processes"
            size = (
                f"world size {self.world_size} "
                f"({only.instances} {nodes} × {only.processes_per_node} {procs})"
            )
        elif self.launcher == "mpirun":
            size = f"world size {self.world_size} (mpirun -np across {self.nodes} nodes)"
        else:
            parts = " + ".join(
                f"{r.role} {r.instances} × {r.processes_per_node}" for r in self.roles
            )
            size = f"world size {self.world_size} ({parts})"
        if self.port_label:
            size += f", port label {self.port_label}"
        return size


@dataclass
class ValidationReport:
    """Everything ``validate_job`` found, plus the plan when there is one."""

    source: str
    job: Any = None
    problems: list[Problem] = field(default_factory=list)
    plan: DistributedPlan | None = None

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == ERROR]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == WARNING]

    @property
    def ok(self) -> bool:
        return not self.errors

    def formatted_problems(self) -> list[str]:
        return [p.format(self.source) for p in self.problems]

    def summary(self) -> str:
        """One line: ``ok: job.yaml — 2 roles, world size 32 (...)`` or the error count."""
        if not self.ok:
            n_err, n_warn = len(self.errors), len(self.warnings)
            text = f"invalid: {self.source} — {n_err} error{'s' if n_err != 1 else ''}"
            if n_warn:
                text += f", {n_warn} warning{'s' if n_warn != 1 else ''}"
            return text
        roles = self.job.get("taskRoles", {}) if isinstance(self.job, dict) else {}
        text = f"ok: {self.source} — {len(roles)} role{'s' if len(roles) != 1 else ''}"
        if self.plan is not None:
            text += ", " + self.plan.describe()
        else:
            instances = sum(
                r.get("instances", 1) for r in roles.values() if isinstance(r, dict)
            )
            text += f", {instances} instance{'s' if instances != 1 else ''}"
        if self.warnings:
            n = len(self.warnings)
            text += f" ({n} warning{'s' if n != 1 else ''})"
        return text


class JobValidationError(PaijobError):
    """A job that the OpenPAI server would reject; the message lists every error."""

    def __init__(self, report: ValidationReport) -> None:
        self.report = report
        lines = [p.format(report.source) for p in report.errors]
        super().__init__(
            f"{report.source} is not a valid OpenPAI job:\n  " + "\n  ".join(lines)
        )


def format_path(path: Iterable[Hashable]) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text


# --------------------------------------------------------------------------- loading


def validate_text(text: str | bytes, source: str, **options: Any) -> ValidationReport:
    """Parse ``text`` as the OpenPAI server does and validate it; a YAML error is one error."""
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    try:
        loaded = load_job(text, source)
    except YamlError as error:
        return ValidationReport(source, None, [Problem(ERROR, error.path, f"invalid YAML: {error.detail}", error.line)])
    report = validate_job(loaded.value, source=source, lines=loaded.lines, **options)
    if size > SERVER_BODY_LIMIT:
        report.problems.append(
            Problem(
                ERROR,
                (),
                f"the job is {size} bytes; the OpenPAI server refuses request bodies over "
                f"{SERVER_BODY_LIMIT} bytes (HTTP 413)",
            )
        )
    report.problems.sort(key=_problem_order)
    return report


def validate_file(path: str | Path, **options: Any) -> ValidationReport:
    file = Path(path)
    try:
        data = file.read_bytes()
    except OSError as error:
        raise PaijobError(f"cannot read job file {file}: {error.strerror or error}") from None
    return validate_text(data, str(path), **options)


# --------------------------------------------------------------------------- validation


def _problem_order(problem: Problem) -> tuple[int, int, str]:
    return (problem.line or 0, 0 if problem.severity == ERROR else 1, problem.message)


def validate_job(
    job: Any,
    *,
    source: str = "job",
    lines: LineMap | None = None,
    master_role: str | None = None,
    port_label: str | None = None,
) -> ValidationReport:
    """Check a job (plain data, as loaded from YAML) against the protocol.

    ``master_role`` / ``port_label`` override what the commands' own
    ``paijob-runtime`` flags say (as ``paijob validate --master-role`` does).
    """
    lines = lines or LineMap()
    report = ValidationReport(source, job)
    problems: list[tuple[str, YamlPath, str]] = []

    if not isinstance(job, dict):
        got = "an empty file" if job is None else f"a {_type_name(job)}"
        problems.append((ERROR, (), f"a job is a YAML mapping (protocolVersion, name, ...), got {got}"))
    else:
        problems.extend(_schema_problems(job))
        problems.extend(_cross_field_problems(job))
        plan, plan_problems = _distributed_plan(job, master_role, port_label)
        report.plan = plan
        problems.extend(plan_problems)

    found = [Problem(sev, path, msg, lines.line_of(path)) for sev, path, msg in problems]
    found.extend(Problem(WARNING, note.path, note.message(), note.line) for note in lines.notes)
    report.problems = sorted(found, key=_problem_order)
    return report


def check_job(job: Any, *, source: str = "job", lines: LineMap | None = None) -> ValidationReport:
    """``validate_job`` that raises ``JobValidationError`` when there are errors."""
    report = validate_job(job, source=source, lines=lines)
    if not report.ok:
        raise JobValidationError(report)
    return report


# --------------------------------------------------------------------------- schema


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    return type(value).__name__


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _what_is_named(path: YamlPath) -> str:
    if path == ("taskRoles",):
        return "task role name"
    if path[-1:] == ("ports",):
        return "port label"
    return "key"


def _schema_problems(job: dict[str, Any]) -> list[tuple[str, YamlPath, str]]:
    out: list[tuple[str, YamlPath, str]] = []
    for error in iter_schema_errors(job):
        path: YamlPath = tuple(error.absolute_path)
        kind = error.validator
        schema = error.schema
        instance = error.instance
        if kind == "required":
            missing = [k for k in schema["required"] if k not in instance]
            for key in missing:
                out.append((ERROR, path, f"missing required key '{key}'{_required_hint(path, key)}"))
        elif kind == "additionalProperties" and schema.get("additionalProperties") is False:
            allowed = sorted(schema.get("properties", {}))
            for key in instance:
                if key in allowed:
                    continue
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"did you mean '{close[0]}'?" if close else "allowed: " + ", ".join(allowed)
                out.append((ERROR, (*path, key), f"unknown key '{key}' ({hint})"))
        elif kind == "pattern" and schema.get("pattern") == IDENTIFIER_PATTERN:
            # a propertyNames error: error.instance is the offending name itself
            what = _what_is_named(path)
            out.append(
                (
                    ERROR,
                    (*path, instance),
                    f"{what} '{instance}' is not allowed: it must match {IDENTIFIER_PATTERN} "
                    "(letters, digits and _, not starting with a digit)",
                )
            )
        elif kind == "type":
            want = schema["type"]
            want_text = " or ".join(want) if isinstance(want, list) else want
            want_text = {"object": "a mapping", "array": "a list"}.get(want_text, want_text)
            out.append(
                (ERROR, path, f"expected {want_text}, got {_type_name(instance)} {_show(instance)}")
            )
        elif kind == "minimum":
            out.append((ERROR, path, f"must be at least {schema['minimum']}, got {_show(instance)}"))
        elif kind == "minItems":
            out.append((ERROR, path, f"needs at least {schema['minItems']} item(s)"))
        elif kind == "minProperties":
            what = "one task role" if path == ("taskRoles",) else "one key"
            out.append((ERROR, path, f"needs at least {what}"))
        elif kind == "pattern" and schema.get("pattern") == NAME_PATTERN:
            out.append(
                (
                    ERROR,
                    path,
                    f"{_show(instance)} is not a valid name: use only letters, digits, _ and -",
                )
            )
        elif kind == "maxLength":
            out.append(
                (ERROR, path, f"is {len(instance)} characters long; at most {schema['maxLength']}")
            )
        elif kind == "minLength":
            out.append((ERROR, path, "must not be empty"))
        elif kind in ("enum", "const"):
            options = schema.get("enum", [schema.get("const")])
            out.append(
                (
                    ERROR,
                    path,
                    f"{_show(instance)} is not allowed here; use one of: "
                    + ", ".join(_show(o) for o in options),
                )
            )
        elif kind == "anyOf" and "description" in schema:
            out.append((ERROR, path, f"must be {schema['description']}, got {_show(instance)}"))
        else:  # pragma: no cover - keywords the schema does not use today
            out.append((ERROR, path, f"violates the protocol schema ({kind})"))
    return out


def _required_hint(path: YamlPath, key: str) -> str:
    if len(path) == 2 and path[0] == "taskRoles":
        hints = {
            "dockerImage": ": the name of a 'type: dockerimage' prerequisite",
            "resourcePerInstance": ": {cpu, memoryMB, gpu, ports}",
            "commands": ": a list of shell commands",
        }
        return hints.get(key, "")
    if not path:
        hints = {
            "protocolVersion": " (protocolVersion: 2)",
            "type": " (type: job)",
            "taskRoles": ": a mapping of role name to role",
        }
        return hints.get(key, "")
    return ""


# --------------------------------------------------------------------------- cross-field rules


def _roles(job: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    roles = job.get("taskRoles")
    if not isinstance(roles, dict):
        return {}
    return {str(k): v for k, v in roles.items() if isinstance(v, dict)}


def _cross_field_problems(job: dict[str, Any]) -> list[tuple[str, YamlPath, str]]:
    out: list[tuple[str, YamlPath, str]] = []
    prereqs = job.get("prerequisites")
    by_name: dict[str, str] = {}
    if isinstance(prereqs, list):
        for index, item in enumerate(prereqs):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                continue
            name = item["name"]
            if name in by_name:
                out.append(
                    (
                        ERROR,
                        ("prerequisites", index, "name"),
                        f"duplicate prerequisite name '{name}'; each prerequisite needs its own name",
                    )
                )
            else:
                by_name[name] = str(item.get("type"))

    roles = _roles(job)
    images = sorted(n for n, t in by_name.items() if t == "dockerimage")
    extras = job.get("extras") if isinstance(job.get("extras"), dict) else {}
    gang_off = isinstance(extras, dict) and extras.get("gangAllocation") is False

    rewritten: dict[str, str] = {}
    for role, spec in roles.items():
        base: YamlPath = ("taskRoles", role)
        image = spec.get("dockerImage")
        if isinstance(image, str):
            if image not in by_name:
                known = f"the dockerimage prerequisites are: {', '.join(images)}" if images else (
                    "add one under prerequisites: "
                    "{name: image, type: dockerimage, uri: repo/image:tag}"
                )
                out.append(
                    (ERROR, (*base, "dockerImage"), f"'{image}' names no prerequisite; {known}")
                )
            elif by_name[image] != "dockerimage":
                out.append(
                    (
                        ERROR,
                        (*base, "dockerImage"),
                        f"'{image}' is a '{by_name[image]}' prerequisite, not a dockerimage",
                    )
                )
        for kind in ("data", "output", "script"):
            ref = spec.get(kind)
            if isinstance(ref, str) and by_name.get(ref) != kind:
                out.append(
                    (ERROR, (*base, kind), f"'{ref}' names no prerequisite of type '{kind}'")
                )
        for index, ref in enumerate(spec.get("prerequisites") or []):
            if isinstance(ref, str) and ref not in by_name:
                out.append(
                    (ERROR, (*base, "prerequisites", index), f"'{ref}' names no prerequisite")
                )

        retries = spec.get("taskRetryCount")
        if isinstance(retries, int) and retries > 0 and not gang_off:
            out.append(
                (
                    WARNING,
                    (*base, "taskRetryCount"),
                    f"taskRetryCount {retries} has no effect unless extras.gangAllocation "
                    "is false; with gang allocation a failed task fails the job "
                    "(use jobRetryCount, or set extras: {gangAllocation: false})",
                )
            )

        runtime_name = runtime_role_name(role)
        if not runtime_name:
            out.append(
                (ERROR, base, f"role name '{role}' has no letters or digits: the runtime cannot name its variables")
            )
        elif runtime_name != role:
            out.append(
                (
                    WARNING,
                    base,
                    f"the runtime rewrites role '{role}' as '{runtime_name}' in variable names "
                    f"(PAI_HOST_IP_{runtime_name}_0, PAI_PORT_LIST_{runtime_name}_0_<label>); "
                    f"rename the role to '{runtime_name}' to avoid surprises",
                )
            )
        if runtime_name and runtime_name in rewritten:
            out.append(
                (
                    ERROR,
                    base,
                    f"roles '{rewritten[runtime_name]}' and '{role}' both become "
                    f"'{runtime_name}' in runtime variable names; rename one",
                )
            )
        rewritten.setdefault(runtime_name, role)

        instances = spec.get("instances", 1)
        completion = spec.get("completion")
        if isinstance(completion, dict) and isinstance(instances, int):
            need = completion.get("minSucceededInstances")
            if isinstance(need, int) and need > instances:
                out.append(
                    (
                        WARNING,
                        (*base, "completion", "minSucceededInstances"),
                        f"{need} succeeded instances needed but the role has only {instances}",
                    )
                )

        resources = spec.get("resourcePerInstance")
        options = spec.get("extraContainerOptions")
        memory = resources.get("memoryMB") if isinstance(resources, dict) else None
        shm = options.get("shmMB") if isinstance(options, dict) else None
        if isinstance(memory, int) and isinstance(shm, int) and shm >= memory:
            out.append(
                (
                    WARNING,
                    (*base, "extraContainerOptions", "shmMB"),
                    f"shmMB {shm} is not below memoryMB {memory}: /dev/shm counts against the "
                    "container's memory, so a full /dev/shm gets the task killed",
                )
            )

        commands = spec.get("commands")
        if isinstance(commands, list):
            for index, command in enumerate(commands):
                if isinstance(command, str):
                    for port in _fixed_ports(command):
                        out.append(
                            (
                                WARNING,
                                (*base, "commands", index),
                                f"fixed port {port}: every task uses the host network, so it "
                                "can collide with other jobs on the node; declare a port "
                                "label (resourcePerInstance.ports: {SynPort: 1}) and read "
                                f"$PAI_PORT_LIST_{runtime_name or role}_0_SynPort "
                                "(paijob-runtime --port-label does this)",
                            )
                        )

    out.extend(_reference_problems(job))
    out.extend(_deployment_problems(job, roles))
    return out


def _fixed_ports(command: str) -> list[str]:
    found: list[str] = []
    for pattern in _FIXED_PORT_PATTERNS:
        for match in pattern.finditer(command):
            if match.group(1) not in found:
                found.append(match.group(1))
    return found


def _reference_problems(job: dict[str, Any]) -> list[tuple[str, YamlPath, str]]:
    out: list[tuple[str, YamlPath, str]] = []
    defined: dict[str, Any] = {
        "parameters": job.get("parameters") if isinstance(job.get("parameters"), dict) else {},
        "secrets": job.get("secrets") if isinstance(job.get("secrets"), dict) else None,
    }
    for role, spec in _roles(job).items():
        commands = spec.get("commands")
        if not isinstance(commands, list):
            continue
        for index, command in enumerate(commands):
            if not isinstance(command, str):
                continue
            for match in _PAI_REFERENCE.finditer(command):
                section, key = match.group(1), match.group(2)
                names = defined[section]
                if names is not None and key not in names:
                    out.append(
                        (
                            WARNING,
                            ("taskRoles", role, "commands", index),
                            f"'<% ${section}.{key} %>' but {section} has no '{key}'; "
                            f"OpenPAI substitutes an empty string (add {section}: {{{key}: ...}})",
                        )
                    )
    return out


def _deployment_problems(
    job: dict[str, Any], roles: Mapping[str, Any]
) -> list[tuple[str, YamlPath, str]]:
    out: list[tuple[str, YamlPath, str]] = []
    deployments = job.get("deployments")
    names: list[str] = []
    if isinstance(deployments, list):
        for index, deployment in enumerate(deployments):
            if not isinstance(deployment, dict):
                continue
            name = deployment.get("name")
            if isinstance(name, str):
                if name in names:
                    out.append(
                        (ERROR, ("deployments", index, "name"), f"duplicate deployment name '{name}'")
                    )
                names.append(name)
            for role in deployment.get("taskRoles") or {}:
                if role not in roles:
                    out.append(
                        (
                            ERROR,
                            ("deployments", index, "taskRoles", role),
                            f"'{role}' is not a task role of this job",
                        )
                    )
    defaults = job.get("defaults")
    if isinstance(defaults, dict) and isinstance(defaults.get("deployment"), str):
        if defaults["deployment"] not in names:
            listed = ", ".join(names) if names else "none are defined"
            out.append(
                (
                    ERROR,
                    ("defaults", "deployment"),
                    f"'{defaults['deployment']}' names no deployment ({listed})",
                )
            )
    return out


# --------------------------------------------------------------------------- distributed plan


@dataclass
class RuntimeCall:
    """The flags of one ``paijob-runtime train`` call found in a command."""

    role: str
    command_index: int
    mode: str = "per-gpu"
    port_label: str | None = None
    master_role: str | None = None
    nproc: str | None = None
    roles: str | None = None


def _split(command: str) -> list[str]:
    try:
        return shlex.split(command, comments=False, posix=True)
    except ValueError:
        return command.split()


_SEPARATORS = {"&&", "||", ";", "|", "&"}


# paijob-runtime train options that take a value (see paijob/runtime/cli.py);
# the training command starts at the first other non-option token.
_RUNTIME_VALUE_OPTIONS = {
    "--port-label": "port_label",
    "--master-role": "master_role",
    "--roles": "roles",
    "--nproc-per-node": "nproc",
    "--mode": "mode",
    "--backend": None,
    "--precision": None,
    "--master-timeout": None,
    "--grace-period": None,
    "--heartbeat-timeout": None,
    "--log-dir": None,
}


def _parse_runtime_options(call: RuntimeCall, tokens: list[str], i: int) -> None:
    while i < len(tokens):
        token = tokens[i]
        if token in _SEPARATORS or token in ("--", "-m", "--recipe") or not token.startswith("-"):
            return
        name, eq, inline = token.partition("=")
        if name in _RUNTIME_VALUE_OPTIONS:
            value = inline if eq else (tokens[i + 1] if i + 1 < len(tokens) else None)
            attr = _RUNTIME_VALUE_OPTIONS[name]
            if attr and value is not None:
                setattr(call, attr, value)
            i += 1 if eq else 2
        elif name == "--apex-compat" and not eq and tokens[i + 1 : i + 2] in (["auto"], ["on"], ["off"]):
            i += 2
        else:
            i += 1


def runtime_calls(role: str, commands: list[Any]) -> list[RuntimeCall]:
    """Every ``paijob-runtime train`` in a role's commands, with the flags the plan needs."""
    calls: list[RuntimeCall] = []
    for index, command in enumerate(commands):
        if not isinstance(command, str) or RUNTIME_PROGRAM not in command:
            continue
        tokens = _split(command)
        for i, token in enumerate(tokens):
            if token.rsplit("/", 1)[-1] == RUNTIME_PROGRAM and tokens[i + 1 : i + 2] == ["train"]:
                call = RuntimeCall(role, index)
                _parse_runtime_options(call, tokens, i + 2)
                calls.append(call)
    return calls


def _mpi_launch(commands: list[Any]) -> tuple[bool, int | None, str | None]:
    """(found, ``-np`` value, ``-H`` hosts) of an mpirun / horovodrun in the commands."""
    for command in commands:
        if not isinstance(command, str):
            continue
        tokens = _split(command)
        for i, token in enumerate(tokens):
            if token.rsplit("/", 1)[-1] in _MPI_LAUNCHERS:
                np: int | None = None
                hosts: str | None = None
                for j in range(i + 1, len(tokens) - 1):
                    if tokens[j] in ("-np", "-n", "--np", "-c") and np is None:
                        np = int(tokens[j + 1]) if tokens[j + 1].isdigit() else None
                    elif tokens[j] in ("-H", "--host", "-host", "--hosts") and hosts is None:
                        hosts = tokens[j + 1]
                return True, np, hosts
    return False, None, None


def _host_problems(
    hosts: str, np: int | None, roles: Mapping[str, Any]
) -> list[str]:
    """Check ``role-index[:slots]`` host names (the ssh plugin's) against the roles."""
    problems: list[str] = []
    slots_total = 0
    for entry in hosts.split(","):
        name, _, slots = entry.partition(":")
        role, dash, index = name.rpartition("-")
        if not _is_literal(entry) or not dash or not index.isdigit():
            return []  # not the role-index form: nothing to check
        if role not in roles:
            problems.append(f"host '{name}' names no task role (roles: {', '.join(roles)})")
            continue
        instances = roles[role].get("instances", 1)
        if isinstance(instances, int) and int(index) >= instances:
            problems.append(f"host '{name}' does not exist: role '{role}' has {instances} instance(s)")
        slots_total += int(slots) if slots.isdigit() else 1
    if np is not None and not problems and slots_total and np != slots_total:
        problems.append(f"-np {np} but the hosts list offers {slots_total} slots")
    return problems


def _is_literal(value: str) -> bool:
    return not any(marker in value for marker in ("$", "<%", "`"))


def _distributed_plan(
    job: dict[str, Any], master_override: str | None, label_override: str | None
) -> tuple[DistributedPlan | None, list[tuple[str, YamlPath, str]]]:
    roles = _roles(job)
    if not roles:
        return None, []
    out: list[tuple[str, YamlPath, str]] = []

    # horovod / MPI: one launcher on the master starts every process over ssh.
    for role, spec in roles.items():
        commands = spec.get("commands")
        if not isinstance(commands, list):
            continue
        found, np, hosts = _mpi_launch(commands)
        if not found:
            continue
        for message in _host_problems(hosts, np, roles) if hosts else []:
            out.append((WARNING, ("taskRoles", role, "commands"), message))
        extras = job.get("extras") if isinstance(job.get("extras"), dict) else {}
        plugins = extras.get("com.microsoft.pai.runtimeplugin") if isinstance(extras, dict) else None
        ssh = [p for p in plugins or [] if isinstance(p, dict) and p.get("plugin") == "ssh"]
        if not ssh:
            out.append(
                (
                    WARNING,
                    ("taskRoles", role, "commands"),
                    "an MPI launcher needs ssh between tasks: add the ssh runtime plugin "
                    "(extras.com.microsoft.pai.runtimeplugin: [{plugin: ssh, parameters: "
                    "{jobssh: true, sshbarrier: true}}])",
                )
            )
        elif not (ssh[0].get("parameters") or {}).get("sshbarrier"):
            out.append(
                (
                    WARNING,
                    ("extras", "com.microsoft.pai.runtimeplugin"),
                    "without sshbarrier: true the launcher may start before the other "
                    "tasks accept ssh",
                )
            )
        mpi_roles = tuple(
            RolePlan(
                name,
                int(r.get("instances", 1)) if isinstance(r.get("instances", 1), int) else 1,
                None,
                _gpu(r),
                "mpi",
            )
            for name, r in roles.items()
        )
        total_gpu = sum(r.instances * r.gpu for r in mpi_roles)
        if np is not None and total_gpu and np > total_gpu:
            out.append(
                (
                    WARNING,
                    ("taskRoles", role, "commands"),
                    f"mpirun starts {np} processes but the job has {total_gpu} GPUs",
                )
            )
        return DistributedPlan("mpirun", role, None, mpi_roles, np), out

    calls = [
        call
        for role, spec in roles.items()
        if isinstance(spec.get("commands"), list)
        for call in runtime_calls(role, spec["commands"])
    ]
    if not calls:
        return None, out

    roles_flag = next((c.roles for c in calls if c.roles), None)
    if roles_flag and _is_literal(roles_flag):
        participating = [r.strip() for r in roles_flag.split(",") if r.strip()]
        for name in participating:
            if name not in roles:
                out.append(
                    (
                        ERROR,
                        ("taskRoles",),
                        f"--roles names '{name}', which is not a task role "
                        f"(roles: {', '.join(roles)})",
                    )
                )
        participating = [r for r in roles if r in participating]
    else:
        participating = list(roles)
    master = master_override or next((c.master_role for c in calls if c.master_role), None)
    master = master or (participating[0] if participating else next(iter(roles)))
    label = label_override or next((c.port_label for c in calls if c.port_label), None)
    label = label or DEFAULT_PORT_LABEL

    for call in calls:
        for attr, value in (
            ("port_label", label),
            ("master_role", master),
            ("roles", roles_flag),
            ("nproc", _first(calls, "nproc")),
        ):
            mine = getattr(call, attr)
            if mine and value and _is_literal(mine) and mine != value:
                flag = "--" + {"nproc": "nproc-per-node"}.get(attr, attr.replace("_", "-"))
                out.append(
                    (
                        ERROR,
                        ("taskRoles", call.role, "commands", call.command_index),
                        f"{flag} {mine} here but {value} elsewhere; every task must agree",
                    )
                )

    calling = {call.role for call in calls}
    for role in participating:
        if role not in calling:
            why = "--roles lists it" if roles_flag else "every role does unless --roles says otherwise"
            out.append(
                (
                    ERROR,
                    ("taskRoles", role, "commands"),
                    f"role '{role}' takes part in training ({why}) but its commands do not run "
                    f"paijob-runtime train, so the others would wait for it forever; run it "
                    f"here, or pass --roles {','.join(sorted(calling))} to paijob-runtime",
                )
            )
    for role in calling:
        if role not in participating:
            out.append(
                (
                    ERROR,
                    ("taskRoles", role, "commands"),
                    f"role '{role}' runs paijob-runtime train but --roles {roles_flag} leaves "
                    "it out; the runtime refuses to start there",
                )
            )

    if master not in roles:
        out.append(
            (
                ERROR,
                ("taskRoles",),
                f"master role '{master}' (--master-role) is not a task role; "
                f"roles: {', '.join(roles)}",
            )
        )
    elif master not in participating:
        out.append(
            (
                ERROR,
                ("taskRoles", master),
                f"master role '{master}' does not take part in training (--roles {roles_flag})",
            )
        )
    elif _is_literal(label) and _task_count(roles, participating) > 1:
        # (a one-task world needs no rendezvous port: the runtime uses a local one)
        ports = (roles[master].get("resourcePerInstance") or {}).get("ports")
        if not isinstance(ports, dict) or label not in ports:
            declared = ", ".join(ports) if isinstance(ports, dict) and ports else "none"
            out.append(
                (
                    ERROR,
                    ("taskRoles", master, "resourcePerInstance"),
                    f"paijob-runtime reads port label '{label}' from the master role "
                    f"'{master}', but it declares no such port (declared: {declared}); "
                    f"add ports: {{{label}: 1}}",
                )
            )

    plan_roles: list[RolePlan] = []
    world: int | None = 0
    for role, spec in roles.items():
        mine = [c for c in calls if c.role == role]
        if not mine or role not in participating:
            continue
        call = mine[0]
        instances = spec.get("instances", 1)
        instances = instances if isinstance(instances, int) and not isinstance(instances, bool) else 1
        gpu = _gpu(spec)
        ppn: int | None
        nproc = call.nproc if call.nproc not in (None, "auto") else None
        if call.mode == "dataparallel":
            ppn = 1
        elif nproc is not None:
            ppn = int(nproc) if nproc.isdigit() else None
            if ppn is not None and gpu and ppn != gpu:
                out.append(
                    (
                        WARNING,
                        ("taskRoles", role, "commands", call.command_index),
                        f"--nproc-per-node {ppn} but resourcePerInstance.gpu is {gpu}: "
                        "one process per GPU is the usual layout",
                    )
                )
        else:
            ppn = gpu or 1
        plan_roles.append(RolePlan(role, instances, ppn, gpu, call.mode))
        world = None if world is None or ppn is None else world + instances * ppn

    return DistributedPlan(RUNTIME_PROGRAM, master, label, tuple(plan_roles), world), out


def _task_count(roles: Mapping[str, Any], names: Iterable[str]) -> int:
    total = 0
    for name in names:
        instances = roles[name].get("instances", 1) if name in roles else 1
        total += instances if isinstance(instances, int) and not isinstance(instances, bool) else 1
    return total


def _first(calls: list[RuntimeCall], attr: str) -> str | None:
    return next((getattr(c, attr) for c in calls if getattr(c, attr)), None)


def _gpu(spec: Mapping[str, Any]) -> int:
    resources = spec.get("resourcePerInstance")
    gpu = resources.get("gpu", 0) if isinstance(resources, dict) else 0
    return gpu if isinstance(gpu, int) and not isinstance(gpu, bool) else 0
