"""Job templates: lookup, values layering, ``--set`` parsing and rendering.

A template is a Jinja file ``NAME.yaml.j2`` that renders an OpenPAI job YAML,
with its documented defaults in ``NAME.values.yaml`` beside it. Built-ins
ship as the package ``paijob.templates`` (the top-level ``templates/``
folder); a path to a ``.yaml.j2`` file names a user template, which may
``{% extends "_base.yaml.j2" %}`` like the built-ins do. Extra folders of
templates can be listed in ``PAIJOB_TEMPLATE_PATH`` (``:``-separated).

Values layer like Helm: template defaults < each ``-f`` file in order < each
``--set`` / ``--set-string`` in command-line order. Mappings merge key by key;
anything else replaces.

Jinja settings that matter for job YAML:

* ``StrictUndefined``: a value used but not given is an error naming the
  value, the template line and the ``--set`` that fixes it;
* comments are ``{## ... ##}``, so bash's ``${#var}`` (string length) is
  not taken for a Jinja comment; OpenPAI's ``<% $parameters.x %>`` is not
  Jinja syntax and passes through untouched.

The public API (also used by ``paijob submit`` / ``paijob run``) is
``render_template(template, ...)`` and ``render_from_args(args)``; the
argparse half, ``add_render_options(parser)``, lives in
``paijob.commands.render`` so that building the CLI parser never imports
Jinja. ``paijob.commands.render`` re-exports all three.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import TracebackType
from typing import Any

import jinja2
import yaml

from paijob.errors import PaijobError
from paijob.openpai.yaml12 import load_values
from paijob.protocol import (
    WARNING,
    JobValidationError,
    Problem,
    ValidationReport,
    validate_job,
)
from paijob.protocol_yaml import YamlSyntaxError, load_with_lines

TEMPLATE_SUFFIX = ".yaml.j2"
VALUES_SUFFIX = ".values.yaml"
TEMPLATE_PATH_ENV = "PAIJOB_TEMPLATE_PATH"

Values = dict[str, Any]


class TemplateError(PaijobError):
    """A template that cannot be found, read or rendered."""


class ValuesError(PaijobError):
    """A values file or ``--set`` expression that is malformed."""


# --------------------------------------------------------------------------- lookup


@dataclass(frozen=True)
class TemplateRef:
    """Where a template lives: its name, its source text and its defaults."""

    name: str
    filename: str  # for messages: "ddp.yaml.j2" or the user's path
    folder: Path | None  # user templates: their folder (searched first for includes)
    builtin: bool

    def source(self) -> str:
        if self.builtin:
            return _builtin_text(self.name + TEMPLATE_SUFFIX)
        return Path(self.filename).read_text(encoding="utf-8")

    def values_text(self) -> tuple[str, str] | None:
        """(text, filename) of the defaults file, or None when there is none."""
        if self.builtin:
            name = self.name + VALUES_SUFFIX
            try:
                return _builtin_text(name), name
            except FileNotFoundError:
                return None
        values = Path(self.filename).with_name(self.name + VALUES_SUFFIX)
        if values.is_file():
            return values.read_text(encoding="utf-8"), str(values)
        return None

    def description(self) -> str:
        """The first comment line of the defaults file (``# ddp: one worker role ...``)."""
        found = self.values_text()
        if found:
            for line in found[0].splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
                if line.strip():
                    break
        return ""


def _builtin_dir() -> Path:
    """The folder of the ``paijob.templates`` package.

    A plain path rather than ``importlib.resources.files``: paijob installs as
    files (never from a zip), and the resources machinery costs about 5 ms of
    every ``paijob render``.
    """
    import paijob.templates

    return Path(paijob.templates.__file__).parent


def _builtin_text(name: str) -> str:
    return (_builtin_dir() / name).read_text(encoding="utf-8")


def builtin_names() -> list[str]:
    """Names of the built-in templates (files ``_*.yaml.j2`` are partials, not listed)."""
    names = []
    for entry in _builtin_dir().iterdir():
        if entry.name.endswith(TEMPLATE_SUFFIX) and not entry.name.startswith("_"):
            names.append(entry.name[: -len(TEMPLATE_SUFFIX)])
    return sorted(names)


def _search_path() -> list[Path]:
    text = os.environ.get(TEMPLATE_PATH_ENV, "")
    return [Path(part) for part in text.split(os.pathsep) if part]


def find_template(spec: str) -> TemplateRef:
    """A built-in name, a name in ``PAIJOB_TEMPLATE_PATH``, or a path to a ``.yaml.j2``."""
    looks_like_path = os.sep in spec or spec.endswith(".j2") or spec.endswith(TEMPLATE_SUFFIX)
    if looks_like_path:
        path = Path(spec)
        if not path.is_file():
            raise TemplateError(
                f"template file {spec} does not exist; built-in templates: "
                + ", ".join(builtin_names())
            )
        return _user_template(path)
    for folder in _search_path():
        candidate = folder / (spec + TEMPLATE_SUFFIX)
        if candidate.is_file():
            return _user_template(candidate)
    if spec in builtin_names():
        return TemplateRef(spec, spec + TEMPLATE_SUFFIX, None, True)
    raise TemplateError(
        f"unknown template '{spec}'; built-in templates: {', '.join(builtin_names())} "
        f"(see 'paijob templates'), or give a path to a {TEMPLATE_SUFFIX} file"
    )


def _user_template(path: Path) -> TemplateRef:
    name = path.name
    for suffix in (TEMPLATE_SUFFIX, ".j2"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return TemplateRef(name, str(path), path.resolve().parent, False)


# --------------------------------------------------------------------------- values


def merge_values(base: Mapping[str, Any], override: Mapping[str, Any]) -> Values:
    """Helm-style merge: mappings merge key by key, anything else replaces."""
    merged: Values = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_values(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_values_text(text: str, source: str) -> Values:
    """Parse a values file; YAML errors name ``file:line:column``."""
    try:
        loaded = load_values(text, source)
    except YamlSyntaxError as error:
        raise ValuesError(str(error)) from None
    data, lines = loaded.value, loaded.lines
    if lines.duplicates:
        path, line = lines.duplicates[0]
        raise ValuesError(
            f"{source}:{line}: duplicate key '{'.'.join(map(str, path))}'; "
            "YAML keeps only the last one, so remove one of them"
        )
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValuesError(
            f"{source}: a values file is a YAML mapping (key: value), "
            f"got a {type(data).__name__}"
        )
    return data


def load_values_file(path: str | Path) -> Values:
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValuesError(f"values file {path} does not exist") from None
    except OSError as error:
        raise ValuesError(f"cannot read values file {path}: {error.strerror or error}") from None
    return load_values_text(text, str(path))


_SET_FORM = "expected KEY=VALUE with a dotted KEY, e.g. --set instances=4 or --set resources.gpu=8"
_NULLS = {"null", "Null", "NULL", "~"}
_BOOLS = {"true", "false"}


def parse_set(expr: str, *, as_string: bool = False, flag: str = "--set") -> tuple[list[str], Any]:
    """``a.b=1`` → (["a", "b"], 1). Values are typed as YAML would (ints,
    floats, true/false, null, [lists], {maps}) unless ``as_string``; a dot in
    a key is written ``\\.``."""
    if "=" not in expr:
        raise ValuesError(f"{flag} {expr!r}: no '='; {_SET_FORM}")
    key_text, raw = expr.split("=", 1)
    parts = [part.replace("\0", ".") for part in key_text.replace("\\.", "\0").split(".")]
    if not key_text or any(not part.strip() for part in parts):
        raise ValuesError(f"{flag} {expr!r}: empty key; {_SET_FORM}")
    parts = [part.strip() for part in parts]
    if as_string:
        return parts, raw
    return parts, _typed(raw)


def _typed(raw: str) -> Any:
    if raw == "":
        return ""
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    if value is None:
        return None if raw.strip() in _NULLS else raw
    if isinstance(value, bool):
        return value if raw.strip().lower() in _BOOLS else raw
    if isinstance(value, (list, dict)):
        return value if raw.lstrip()[:1] in ("[", "{") else raw
    if isinstance(value, (int, float, str)):
        return value
    return raw  # dates and other YAML-only types stay text


def apply_set(values: Values, keys: Sequence[str], value: Any) -> Values:
    """Set ``keys`` (a dotted path) to ``value``, creating mappings on the way."""
    result = dict(values)
    node = result
    for key in keys[:-1]:
        child = node.get(key)
        child = dict(child) if isinstance(child, Mapping) else {}
        node[key] = child
        node = child
    node[keys[-1]] = value
    return result


SetArg = tuple[str, str]  # ("set" | "set-string", "key=value")


def build_values(
    template: TemplateRef,
    value_files: Sequence[str | Path] = (),
    sets: Sequence[SetArg] = (),
    unknown: list[str] | None = None,
) -> Values:
    """Template defaults < each values file < each set, in order.

    When ``unknown`` is a list, a message is appended to it for each
    top-level key given that neither the defaults have nor the template
    uses (a typo such as ``instance=4`` would otherwise do nothing).
    """
    values: Values = {}
    defaults = template.values_text()
    if defaults is not None:
        values = load_values_text(*defaults)
    known = set(values)
    given: list[tuple[str, str]] = []
    for path in value_files:
        layer = load_values_file(path)
        given.extend((str(key), str(path)) for key in layer)
        values = merge_values(values, layer)
    for kind, expr in sets:
        flag = "--set-string" if kind == "set-string" else "--set"
        keys, value = parse_set(expr, as_string=kind == "set-string", flag=flag)
        given.append((keys[0], f"{flag} {expr}"))
        values = apply_set(values, keys, value)
    if unknown is not None and any(key not in known for key, _ in given):
        known |= used_names(template)  # parses the templates again: only when needed
        for key, where in given:
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                unknown.append(
                    f"value '{key}' ({where}) is not a value of template {template.name}, "
                    f"which ignores it{hint} (see 'paijob templates show {template.name}')"
                )
    return values


# --------------------------------------------------------------------------- Jinja


class _ValuesDict(dict[str, Any]):
    """A values mapping that knows its dotted path, for undefined-value messages."""

    paijob_path: str = ""


def _wrap(value: Any, path: str = "") -> Any:
    if isinstance(value, dict):
        wrapped = _ValuesDict({k: _wrap(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()})
        wrapped.paijob_path = path
        return wrapped
    if isinstance(value, list):
        return [_wrap(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


class UndefinedValue(jinja2.exceptions.UndefinedError):
    """Raised by the template when it uses a value nobody gave."""

    def __init__(self, value_path: str | None, hint: str) -> None:
        super().__init__(hint)
        self.value_path = value_path


class _Undefined(jinja2.StrictUndefined):
    """StrictUndefined whose error carries the dotted path of the missing value."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Every failing operation raises self._undefined_exception(message).
        self._undefined_exception = functools.partial(  # type: ignore[assignment]
            UndefinedValue, self._value_path()
        )

    def _value_path(self) -> str | None:
        obj, name = self._undefined_obj, self._undefined_name
        if self._undefined_hint or not isinstance(name, (str, int)):
            return None
        if obj is jinja2.runtime.missing:
            return str(name)
        if isinstance(obj, _ValuesDict):
            return f"{obj.paijob_path}.{name}" if obj.paijob_path else str(name)
        return None


class TemplateFailure(Exception):
    """``{{ fail("message") }}`` inside a template."""


def _fail(message: str) -> None:
    raise TemplateFailure(message)


class _Environment(jinja2.Environment):
    def getattr(self, obj: Any, attribute: str) -> Any:
        # values.items must be the value "items", not dict.items
        if isinstance(obj, dict) and attribute in obj:
            return obj[attribute]
        return super().getattr(obj, attribute)


def yaml_scalar(value: Any) -> str:
    """A value as one YAML flow scalar / collection (quoted only when needed)."""
    if isinstance(value, jinja2.Undefined):
        str(value)  # raises with the value's name
    if isinstance(value, str):
        if "\n" in value or "\r" in value:
            # one line whatever the indentation around it: a JSON string is YAML
            return json.dumps(value, ensure_ascii=False)
        text = yaml.safe_dump(value, default_flow_style=True, width=10**9, allow_unicode=True)
        text = text.strip()
        if text.endswith("\n..."):
            text = text[: -len("\n...")]
        if text.endswith("..."):
            text = text[:-3].rstrip()
        return text
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(_plain(value), ensure_ascii=False)


def yaml_block(value: Any, indent: int = 0) -> str:
    """A mapping or list as block YAML, every line but the first indented by ``indent``."""
    text = yaml.safe_dump(
        _plain(value), default_flow_style=False, sort_keys=False, allow_unicode=True, width=100
    ).rstrip("\n")
    return text.replace("\n", "\n" + " " * indent)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def shell_quote(value: Any) -> str:
    """Quote one shell word; OpenPAI ``<% ... %>`` and ``$VAR`` references stay unquoted."""
    text = str(value)
    if re.fullmatch(r"<%[^%]*%>|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", text):
        return text
    return shlex.quote(text)


def shell_join(values: Any) -> str:
    if values is None:
        return ""
    if isinstance(values, str):
        return values
    return " ".join(shell_quote(v) for v in values)


def cli_flags(options: Any) -> str:
    """``{data: synthetic, epochs: 2}`` → ``--data synthetic --epochs 2``; true → bare flag."""
    if not options:
        return ""
    words: list[str] = []
    for key, value in options.items():
        flag = "--" + str(key).replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            words.append(flag)
        elif isinstance(value, list):
            words.append(flag)
            words.extend(shell_quote(v) for v in value)
        else:
            words.extend((flag, shell_quote(value)))
    return " ".join(words)


SHM_FLOOR_MB = 512  # OpenPAI's own default


def processes_per_node(gpu: Any, explicit: Any = None) -> int:
    """Training processes per instance: ``explicit`` when given, else one per GPU, else 1."""
    if explicit is not None:
        return int(explicit)
    return int(gpu) if gpu and int(gpu) > 0 else 1


def shm_mb(ppn: Any, loader_workers: Any, per_worker_mb: Any, explicit: Any = None) -> int:
    """``/dev/shm`` for an instance: ``explicit`` when given, else processes ×
    DataLoader workers × MB per worker, at least ``SHM_FLOOR_MB``."""
    if explicit is not None:
        return int(explicit)
    return max(SHM_FLOOR_MB, int(ppn) * int(loader_workers) * int(per_worker_mb))


class _BuiltinLoader(jinja2.BaseLoader):
    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str, Callable[[], bool]]:
        try:
            text = _builtin_text(template)
        except (FileNotFoundError, OSError):
            raise jinja2.TemplateNotFound(template) from None
        return text, template, lambda: True


class _QuietBytecodeCache(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept between runs (keyed by name and source checksum,
    so never stale); a cache that cannot be read or written is just skipped."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, EOFError, ValueError):
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    if os.environ.get("PAIJOB_NO_TEMPLATE_CACHE"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "paijob", "templates")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    return _QuietBytecodeCache(folder)


@lru_cache(maxsize=16)
def _environment(folder: Path | None) -> jinja2.Environment:
    loaders: list[jinja2.BaseLoader] = []
    if folder is not None:
        loaders.append(jinja2.FileSystemLoader(str(folder)))
    loaders.append(_BuiltinLoader())
    env = _Environment(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=_Undefined,
        comment_start_string="{##",
        comment_end_string="##}",
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        bytecode_cache=_bytecode_cache(),
    )
    env.filters.update(
        yaml=yaml_scalar,
        yaml_block=yaml_block,
        sh=shell_quote,
        shjoin=shell_join,
        cli_flags=cli_flags,
    )
    env.globals.update(fail=_fail, shm_mb=shm_mb, processes_per_node=processes_per_node)
    return env


def used_names(template: TemplateRef) -> set[str]:
    """Top-level names the template (and what it imports or includes) reads."""
    from jinja2 import meta

    env = _environment(template.folder)
    first = template.name + TEMPLATE_SUFFIX if template.builtin else Path(template.filename).name
    names: set[str] = set()
    seen: set[str] = set()
    todo = [first]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            source = env.loader.get_source(env, name)[0] if env.loader else ""
            tree = env.parse(source)
        except (jinja2.TemplateError, OSError):
            continue
        names |= meta.find_undeclared_variables(tree)
        todo.extend(t for t in meta.find_referenced_templates(tree) if t)
    return names


# --------------------------------------------------------------------------- rendering


@dataclass
class RenderResult:
    """A rendered job: the YAML text, the parsed job and its validation report."""

    template: TemplateRef
    values: Values
    text: str
    job: dict[str, Any]
    report: ValidationReport = field(repr=False)


def _template_line(tb: TracebackType | None) -> tuple[str, int] | None:
    """(template file, line) of the innermost template frame of a traceback."""
    found = None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.endswith(".j2"):
            found = (filename, tb.tb_lineno)
        tb = tb.tb_next
    return found


def _where(error: BaseException, template: TemplateRef) -> str:
    """``ddp.yaml.j2, line 12`` for messages (user templates keep their path)."""
    found = _template_line(error.__traceback__)
    if found is None:
        return template.filename
    filename, line = found
    return f"{Path(filename).name if template.builtin else filename}, line {line}"


def render_text(template: TemplateRef, values: Mapping[str, Any]) -> str:
    """Render ``template`` with ``values``; user-fixable failures become ``TemplateError``."""
    env = _environment(template.folder)
    name = template.name + TEMPLATE_SUFFIX if template.builtin else Path(template.filename).name
    try:
        jinja_template = env.get_template(name)
    except jinja2.TemplateSyntaxError as error:
        where = error.filename or error.name or template.filename
        raise TemplateError(
            f"{where}:{error.lineno}: template syntax error: {error.message}"
        ) from None
    except jinja2.TemplateNotFound as error:
        raise TemplateError(f"template {error.name} not found (needed by {template.filename})") from None
    except OSError as error:
        raise TemplateError(f"cannot read template {template.filename}: {error}") from None
    context = {str(k): _wrap(v, str(k)) for k, v in values.items()}
    try:
        return jinja_template.render(context)
    except UndefinedValue as error:
        if error.value_path:
            raise TemplateError(
                f"value '{error.value_path}' is not set (template {_where(error, template)}); "
                f"set it with --set {error.value_path}=VALUE or in a -f values file"
            ) from None
        raise TemplateError(f"template {_where(error, template)}: {error.message}") from None
    except TemplateFailure as error:
        raise TemplateError(f"template {template.name} ({_where(error, template)}): {error}") from None
    except jinja2.TemplateError as error:
        raise TemplateError(f"template {template.name} ({_where(error, template)}): {error}") from None


def render_template(
    template: str | TemplateRef,
    value_files: Sequence[str | Path] = (),
    sets: Sequence[str] = (),
    set_strings: Sequence[str] = (),
    *,
    ordered_sets: Sequence[SetArg] | None = None,
    check: bool = True,
) -> RenderResult:
    """Render a template to a checked OpenPAI job.

    ``template`` is a built-in name or a path to a ``.yaml.j2`` file;
    ``value_files`` layer over the defaults in order, then ``sets``
    (``key=value``, typed) and ``set_strings`` (``key=value``, always text),
    or ``ordered_sets`` — ``[("set" | "set-string", "key=value"), ...]`` in
    command-line order — instead of both. Raises ``PaijobError`` subclasses:
    ``TemplateError`` / ``ValuesError`` for bad input, ``JobValidationError``
    when ``check`` and the rendered job breaks the protocol. Warnings are in
    ``result.report.warnings``.
    """
    ref = template if isinstance(template, TemplateRef) else find_template(template)
    if ordered_sets is None:
        ordered_sets = [("set", s) for s in sets] + [("set-string", s) for s in set_strings]
    unknown: list[str] = []
    values = build_values(ref, value_files, ordered_sets, unknown)
    text = render_text(ref, values)
    source = f"{ref.name} (rendered)"
    try:
        job, lines = load_with_lines(text, source)
    except YamlSyntaxError as error:
        raise TemplateError(
            f"template {ref.filename} rendered text that is not YAML: {error} "
            "(quote values with the '| yaml' filter)"
        ) from None
    report = validate_job(job, source=source, lines=lines)
    report.problems[:0] = [Problem(WARNING, (), message) for message in unknown]
    if check and not report.ok:
        raise JobValidationError(report)
    return RenderResult(ref, values, text, job if isinstance(job, dict) else {}, report)


def load_job_file(path: str | Path, *, check: bool = True) -> RenderResult:
    """A job YAML that needs no rendering, read and checked like a rendered one."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        raise PaijobError(f"cannot read job file {path}: {error.strerror or error}") from None
    try:
        job, lines = load_with_lines(text, str(path))
    except YamlSyntaxError as error:
        raise PaijobError(str(error)) from None
    report = validate_job(job, source=str(path), lines=lines)
    if check and not report.ok:
        raise JobValidationError(report)
    ref = TemplateRef(file.name, str(path), file.resolve().parent, False)
    return RenderResult(ref, {}, text, job if isinstance(job, dict) else {}, report)


def is_job_file(spec: str) -> bool:
    """True when ``spec`` names an existing plain job YAML (not a template)."""
    return spec.endswith((".yaml", ".yml")) and Path(spec).is_file()


def render_from_args(
    args: argparse.Namespace, template: str | None = None, *, check: bool = True
) -> RenderResult:
    """Render what ``paijob.commands.render.add_render_options`` parsed.

    The template is ``template`` when given, else ``args.template``, else
    ``args.job``. A plain ``.yaml``/``.yml`` job file there is read and
    checked instead of rendered (``-f`` / ``--set`` are then an error).
    Raises ``PaijobError`` subclasses (see ``render_template``).
    """
    spec = template or getattr(args, "template", None) or getattr(args, "job", None)
    if not spec:
        raise PaijobError("no template given; see 'paijob templates' for the built-ins")
    value_files = list(getattr(args, "values", None) or [])
    sets = list(getattr(args, "sets", None) or [])
    if spec.endswith(VALUES_SUFFIX) and Path(spec).is_file():
        raise PaijobError(
            f"{spec} is a values file, not a template: give the template first and the "
            f"values with -f, e.g. 'ddp -f {spec}'"
        )
    if is_job_file(spec):
        if value_files or sets:
            raise PaijobError(
                f"{spec} is a job YAML, not a template: -f/--set do not apply to it; "
                "edit the file, or give a template (a built-in name or a .yaml.j2 file)"
            )
        return load_job_file(spec, check=check)
    return render_template(spec, value_files, ordered_sets=sets, check=check)
