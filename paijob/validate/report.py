"""OpenPAI protocol v2: ``paijob validate``'s verdict on a job, and its distributed plan.

validate = the server. The job is read as the rest-server reads it
(``paijob.openpai.jsyaml``), checked against the server's own JSON schema
(``paijob.validate.schema``), parsed once into the job model
(``paijob.openpai.model``) and run through small named rules
(``paijob.validate.rules`` for the server's other checks and paijob's
warnings, ``paijob.validate.runtime_plan`` for what paijob-runtime or mpirun will do
with it). Errors are exactly what OpenPAI refuses, plus what paijob-runtime
provably cannot run (each message says why); the rest are warnings. Every
problem is collected, each with its YAML path and line.

Written once, used by ``paijob render``, ``paijob validate``, ``paijob
submit`` and the local cluster's POST.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from paijob.common import contract
from paijob.errors import PaijobError
from paijob.openpai.jsyaml import SERVER_BODY_LIMIT, LineMap, Loaded, YamlError, load_job
from paijob.openpai.model import Job, parse_job
from paijob.validate.rules import (
    CLIENT_RULES,
    ERROR,
    PAIJOB_RULES,
    SERVER_RULES,
    WARNING,
    Finding,
    runtime_role_names,
    server_rendering,
    type_name,
)
from paijob.validate.runtime_plan import (
    RUNTIME_PROGRAM,
    DistributedPlan,
    RoleLayout,
    distributed_plan,
    runtime_calls,
    runtime_findings,
)
from paijob.validate.schema import IDENTIFIER_PATTERN, NAME_PATTERN, SchemaError, iter_schema_errors

if TYPE_CHECKING:
    from pathlib import Path  # imported where a user's file is read: a render validates text


__all__ = [
    "ERROR",
    "RUNTIME_PROGRAM",
    "WARNING",
    "DistributedPlan",
    "JobValidationError",
    "Problem",
    "RoleLayout",
    "ValidationReport",
    "check_job",
    "runtime_calls",
    "validate_file",
    "validate_job",
    "validate_loaded",
    "validate_text",
]

YamlPath = tuple[Hashable, ...]


class Problem(NamedTuple):  # not a dataclass: ~0.5 ms less start-up for every render, which validates
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


class ValidationReport:
    """Everything ``validate_job`` found, plus the job model and the plan when there are.

    ``model`` is the job parsed once (``paijob.openpai.model``); whoever goes
    on with the job (the local cluster's POST) takes it from here. A plain
    class, not a dataclass, as ``Problem``.
    """

    def __init__(self, source: str, job: Any = None, problems: list[Problem] | None = None,
                 plan: DistributedPlan | None = None, model: Job | None = None,
                 lines: LineMap | None = None) -> None:
        self.source = source
        self.job = job
        self.problems: list[Problem] = [] if problems is None else problems
        self.plan = plan
        self.model = model
        self.lines = lines  # where each entry of the text is (``validate_text``): edits in place use it

    def __repr__(self) -> str:
        return (f"ValidationReport(source={self.source!r}, job={self.job!r}, problems={self.problems!r}, "
                f"plan={self.plan!r}, model={self.model!r})")

    @property
    def install_route(self) -> str | None:
        """How the tasks get paijob-runtime (``install_route.route``), read when asked: a render needs it not."""
        from paijob.validate.install_route import route

        return route((role.name, role.commands) for role in self.model.roles) if self.model is not None else None

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
        roles = len(self.model.roles) if self.model is not None else 0
        text = f"ok: {self.source} — {roles} role{'s' if roles != 1 else ''}"
        if self.plan is not None:
            text += ", " + self.plan.describe()
        else:
            instances = self.model.total_tasks if self.model is not None else 0
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
    return validate_loaded(loaded, source, size, **options)


def validate_loaded(loaded: Loaded, source: str, size: int = 0, **options: Any) -> ValidationReport:
    """``validate_text`` of a job already read (``jsyaml.load_job``) from ``size`` bytes of text."""
    report = validate_job(loaded.value, source=source, lines=loaded.lines, **options)
    report.lines = loaded.lines
    _check_size(report, size)
    return report


def _check_size(report: ValidationReport, size: int) -> None:
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


def validate_file(path: str | Path, **options: Any) -> ValidationReport:
    from pathlib import Path  # only here: a render validates text, not a file

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
    openpai_before_1_6: bool | None = None,
    client: bool = True,
) -> ValidationReport:
    """Check a loaded job (``jsyaml.load_job``'s value) as the OpenPAI server would.

    ``master_role`` / ``port_label`` override what the commands' own
    ``paijob-runtime`` flags say (as ``paijob validate --master-role`` does).
    ``openpai_before_1_6``: the cluster runs role names that OpenPAI v1.6+ cannot (None: the
    ``PAIJOB_OPENPAI_BEFORE_1_6`` setting; the commands pass ``--openpai-before-1.6`` or the cluster's answer).
    ``client``: also what paijob's own routes need (``rules.CLIENT_RULES``); the local cluster's server passes
    False, to accept what rest-server accepts.
    """
    lines = lines or LineMap()
    report = ValidationReport(source, job)
    if openpai_before_1_6 is None:
        openpai_before_1_6 = bool(before_v1_6_setting())
    found = list(_findings(job, report, master_role, port_label, openpai_before_1_6, client))
    problems = [Problem(sev, path, msg, lines.line_of(path)) for sev, path, msg in found]
    problems.extend(Problem(WARNING, note.path, note.message(), note.line) for note in lines.notes)
    report.problems = sorted(problems, key=_problem_order)
    return report


class SettingError(PaijobError):
    """A ``PAIJOB_*`` setting with a value paijob does not take."""


def before_v1_6_setting() -> bool | None:
    """``PAIJOB_OPENPAI_BEFORE_1_6``: ``1`` the cluster is older than OpenPAI v1.6, ``0`` it is not, unset None.
    Any other value is refused, as every other ``PAIJOB_*`` setting refuses one (``yes`` was read as unset)."""
    raw = os.environ.get(contract.OPENPAI_BEFORE_1_6, "").strip()
    if not raw:
        return None
    if raw not in ("0", "1"):
        raise SettingError(f"{contract.OPENPAI_BEFORE_1_6}={raw[:40]!r} must be 1 (the cluster runs OpenPAI older "
                           "than v1.6) or 0 (v1.6 or newer); unset it to let paijob ask the cluster")
    return raw == "1"


def _findings(
    raw: Any, report: ValidationReport, master_role: str | None, port_label: str | None, before_v1_6: bool,
    client: bool = True,
) -> Iterator[Finding]:
    if not isinstance(raw, dict):
        got = "an empty file" if raw is None else type_name(raw)
        yield ERROR, (), f"a job is a YAML mapping (protocolVersion, name, ...), got {got}"
        return
    schema = list(schema_findings(raw))
    yield from schema
    job = report.model = parse_job(raw)
    for rule in (*SERVER_RULES, *PAIJOB_RULES, *(CLIENT_RULES if client else ())):
        yield from rule(job)
    if not schema:  # the server renders the commands only once the job passed its schema
        yield from server_rendering(job)
    yield from runtime_role_names(job, before_v1_6)
    yield from runtime_findings(job, master_role, port_label)
    report.plan = distributed_plan(job, master_role, port_label)


def check_job(job: Any, *, source: str = "job", lines: LineMap | None = None) -> ValidationReport:
    """``validate_job`` that raises ``JobValidationError`` when there are errors."""
    report = validate_job(job, source=source, lines=lines)
    if not report.ok:
        raise JobValidationError(report)
    return report


# --------------------------------------------------------------------------- schema messages


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _expected(want: Any) -> str:
    names = want if isinstance(want, list) else [want]
    words: dict[str, str] = {"object": "a mapping", "array": "a list", "null": "null"}
    return " or ".join(words.get(str(n), str(n)) for n in names)


def _required_hint(path: YamlPath, key: str) -> str:
    if len(path) == 2 and path[0] == "taskRoles":
        return {
            "dockerImage": ": the name of a 'type: dockerimage' prerequisite",
            "resourcePerInstance": ": {cpu, memoryMB, gpu, ports}",
            "commands": ": a list of shell commands",
        }.get(key, "")
    if not path:
        return {
            "protocolVersion": " (protocolVersion: 2)",
            "type": " (type: job)",
            "taskRoles": ": a mapping of role name to role",
        }.get(key, "")
    return ""


def _named_what(path: YamlPath) -> str:
    if path == ("taskRoles",):
        return "task role name"
    if path[-1:] == ("ports",):
        return "port label"
    if path[-1:] == ("taskRoles",):
        return "task role name"
    return "key"


def _required(error: SchemaError, path: YamlPath) -> Iterator[Finding]:
    present = error.instance if isinstance(error.instance, dict) else {}
    for key in error.schema["required"]:
        if key not in present:
            yield ERROR, path, f"missing required key '{key}'{_required_hint(path, key)}"


def _additional(error: SchemaError, path: YamlPath) -> Iterator[Finding]:
    allowed = sorted(error.schema.get("properties", {}))
    patterns = error.schema.get("patternProperties", {})
    for key in error.instance:
        if key in allowed or any(_js_search(p, key) for p in patterns):
            continue
        if patterns:
            yield ERROR, (*path, key), (
                f"{_named_what(path)} '{key}' is not allowed: it must match {IDENTIFIER_PATTERN} "
                "(letters, digits and _, not starting with a digit)"
            )
            continue
        import difflib  # only for an unknown key: not on every render

        close = difflib.get_close_matches(str(key), allowed, n=1)
        hint = f"did you mean '{close[0]}'?" if close else "allowed: " + ", ".join(allowed)
        yield ERROR, (*path, key), f"unknown key '{key}' ({hint})"


def _js_search(pattern: str, key: Any) -> bool:
    from paijob.openpai.names import js_match

    return isinstance(key, str) and js_match(pattern, key)


def _simple(error: SchemaError, path: YamlPath) -> Iterator[Finding]:
    kind, schema, value = error.validator, error.schema, error.instance
    if kind == "type":
        got = type_name(value).removeprefix("a ")
        shown = "" if value is None or isinstance(value, (dict, list)) else " " + _show(value)
        message = f"expected {_expected(schema['type'])}, got {got}{shown}"
    elif kind == "minimum":
        message = f"must be at least {schema['minimum']}, got {_show(value)}"
    elif kind == "minItems":
        message = f"needs at least {schema['minItems']} item(s)"
    elif kind == "minProperties":
        message = "needs at least one task role" if path == ("taskRoles",) else "needs at least one entry"
    elif kind == "pattern" and schema.get("pattern") == NAME_PATTERN:
        message = f"{_show(value)} is not a valid name: use only letters, digits, _ and -"
    elif kind == "maxLength":
        message = f"is {len(value)} characters long; at most {schema['maxLength']}"
    elif kind == "enum":
        message = f"{_show(value)} is not allowed here; use one of: " + ", ".join(
            _show(o) for o in schema["enum"]
        )
    elif kind == "oneOf":
        message = "a prerequisite needs type: dockerimage, script, output or data"
    elif kind == "false":
        message = f"key '{path[-1]}' is not allowed here"
    else:  # pragma: no cover - keywords the schema does not use today
        message = f"violates the protocol schema ({kind})"
    yield ERROR, path, message


def schema_findings(job: dict[str, Any]) -> Iterator[Finding]:
    """The server's ajv schema errors, worded for people."""
    for error in iter_schema_errors(job):
        path: YamlPath = tuple(error.absolute_path)
        if error.validator == "required":
            yield from _required(error, path)
        elif error.validator == "additionalProperties":
            yield from _additional(error, path)
        else:
            yield from _simple(error, path)


def require_sendable(text: str, source: str, job: dict[str, Any] | None = None) -> None:
    """Raise ``JobValidationError`` when a job edited after its validation cannot be sent as ``text``.

    ``job``: the edited job as the server reads ``text`` (``paijob.openpai.jsdump`` wrote it so), checked
    as ``paijob validate`` would, without reading the text again; None when nothing but the name
    changed (the name is checked where it is written): then only the size is checked.
    """
    report = ValidationReport(source, None) if job is None else validate_job(job, source=source)
    _check_size(report, len(text.encode("utf-8", "surrogatepass")))
    if not report.ok:
        raise JobValidationError(report)
