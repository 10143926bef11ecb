"""Job templates: lookup, values layering, ``--set`` parsing and rendering.

A template is a Jinja file ``NAME.yaml.j2`` that renders an OpenPAI job YAML,
with its documented defaults in ``NAME.values.yaml`` beside it. Built-ins
ship as the package ``paijob.templates`` (the top-level ``templates/``
folder); a path to a ``.yaml.j2`` file names a user template, which may
``{% import "_job.yaml.j2" as job with context %}`` like the built-ins do
(``examples/my-template.yaml.j2``). Extra folders of
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

The public API is ``render(template, values, sets)`` (a template or a plain
job file, as ``paijob render`` / ``submit`` / ``run`` take it; typed inputs,
no command-line namespace) and ``render_template(template, ...)`` for
templates alone. The command line's half lives in ``paijob.commands`` and
reaches this module through ``paijob.api`` only.
"""

from __future__ import annotations

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
from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedEnvironment

from paijob import __version__
from paijob.errors import PaijobError
from paijob.openpai.jsyaml import YamlError, load_job, load_values
from paijob.openpai.model import DEFAULT_SHM_MB
from paijob.openpai.names import PAI_TAG_PATTERN
from paijob.render.runtime_install import InstallSettingsError, image_auth, install_command
from paijob.task import contract
from paijob.task.jobversion import RENDERED_VERSION_ENV
from paijob.validate.verdict import (
    WARNING,
    JobValidationError,
    Problem,
    ValidationReport,
    validate_text,
)

TEMPLATE_SUFFIX = ".yaml.j2"
VALUES_SUFFIX = ".values.yaml"
SCHEMA_SUFFIX = ".values.schema.json"
TEMPLATE_PATH_ENV = contract.TEMPLATE_PATH

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
        return _read_text(Path(self.filename), "template")

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
            return _read_text(values, "default values file"), str(values)
        return None

    def schema_path(self) -> Path | None:
        """The values schema beside the template (``NAME.values.schema.json``), if any."""
        folder = _builtin_dir() if self.builtin else Path(self.filename).parent
        path = folder / (self.name + SCHEMA_SUFFIX)
        return path if path.is_file() else None

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


def _read_text(path: Path, what: str, error_type: type[PaijobError] | None = None) -> str:
    """A user's file as UTF-8 text; a missing, unreadable or non-UTF-8 file is one clear error."""
    fail = error_type or TemplateError
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise fail(f"{what} {path} does not exist") from None
    except UnicodeDecodeError as error:
        raise fail(f"{what} {path} is not UTF-8 text (byte {error.start}); save it as UTF-8") from None
    except OSError as error:
        raise fail(f"cannot read {what} {path}: {error.strerror or error}") from None


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
    """Helm-style merge: mappings merge key by key, anything else replaces.

    ``-f`` files and ``--set`` of a mapping (``--set 'env={A: b}'``) both merge
    this way, so neither drops the defaults it does not mention."""
    merged: Values = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_values(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_values_text(text: str, source: str) -> Values:
    """Parse a values file (bounded: see ``paijob.openpai.jsyaml.load_values``); YAML
    errors name ``file:line:column``."""
    try:
        loaded = load_values(text, source)
    except PaijobError as error:
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
    text = _read_text(Path(path), "values file", ValuesError)
    return load_values_text(text, str(path))


_SET_FORM = "expected KEY=VALUE with a dotted KEY, e.g. --set instances=4 or --set resources.gpu=8"
_NULLS = {"null", "Null", "NULL", "~"}
_BOOLS = {"true", "false"}
_YAML_STRUCTURE = ("[", "{", "&", "*", "!", "|", ">")  # what only YAML syntax starts with


def parse_set(expr: str, *, as_string: bool = False, flag: str = "--set") -> tuple[list[str], Any]:
    """``a.b=1`` → (["a", "b"], 1). Values are typed as YAML would (ints,
    floats, true/false, null, [lists], {maps}) unless ``as_string``; a dot in
    a key is written ``\\.``."""
    try:
        expr.encode("utf-8")
    except UnicodeEncodeError as error:  # bytes the shell passed that are not UTF-8
        byte = ord(expr[error.start]) - 0xDC00 if "\udc80" <= expr[error.start] <= "\udcff" else None
        what = f"byte 0x{byte:02x}" if byte is not None else f"character {expr[error.start]!r}"
        raise ValuesError(
            f"{flag} {expr[: error.start]!r}...: not UTF-8 text ({what} at position {error.start}); "
            "values must be UTF-8"
        ) from None
    if "=" not in expr:
        raise ValuesError(f"{flag} {expr!r}: no '='; {_SET_FORM}")
    key_text, raw = expr.split("=", 1)
    parts = [part.replace("\0", ".") for part in key_text.replace("\\.", "\0").split(".")]
    if not key_text or any(not part.strip() for part in parts):
        raise ValuesError(f"{flag} {expr!r}: empty key; {_SET_FORM}")
    parts = [part.strip() for part in parts]
    if as_string:
        return parts, raw
    return parts, _typed(raw, f"{flag} {key_text}")


def _typed(raw: str, source: str) -> Any:
    if raw == "":
        return ""
    try:
        value = load_values(raw, source, duplicates="error").value
    except YamlError as error:
        if raw.lstrip()[:1] in _YAML_STRUCTURE:  # meant as YAML: say what is wrong with it
            raise ValuesError(
                f"{error}; quote it, or use --set-string for text"
            ) from None
        return raw  # not YAML: the text itself (e.g. --set 'cmd=a: [b')
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
    """Set ``keys`` (a dotted path) to ``value``, creating mappings on the way.

    A mapping ``value`` merges into a mapping already there (like a ``-f``
    file), so ``--set 'tensorboard={enabled: true}'`` keeps the default port."""
    result = dict(values)
    node = result
    for key in keys[:-1]:
        child = node.get(key)
        child = dict(child) if isinstance(child, Mapping) else {}
        node[key] = child
        node = child
    old = node.get(keys[-1])
    if isinstance(value, Mapping) and isinstance(old, Mapping):
        value = merge_values(old, value)
    node[keys[-1]] = value
    return result


SetArg = tuple[str, str]  # ("set" | "set-string", "key=value")


def build_values(
    template: TemplateRef,
    value_files: Sequence[str | Path] = (),
    sets: Sequence[SetArg] = (),
    unknown: list[str] | None = None,
) -> Values:
    """Template defaults < each values file < each set, in order, then checked
    against the template's values schema (``NAME.values.schema.json``) when it has one.

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
    schema = template.schema_path()
    if schema is not None:
        from paijob.render.values_schema import check_values

        check_values(values, schema, template.name)
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
        if self._undefined_exception is SecurityError:
            return  # the sandbox refused an attribute: keep its SecurityError
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


class _Environment(SandboxedEnvironment):
    """Every template, built-in or the user's, renders in Jinja's sandbox: it
    reads values, calls the filters and globals registered below and the
    methods of plain values (``list.append``, ``dict.items``, ...), and
    nothing else — no attributes starting with ``_``, no Python internals
    (``cycler.__init__.__globals__``), no files, no imports."""

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
        return _without_document_end(text.strip())
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(_plain(value), ensure_ascii=False, default=str)


def _without_document_end(text: str) -> str:
    """PyYAML ends a lone scalar with ``...`` (document end); in a job that would be data."""
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    if text.endswith("..."):
        text = text[:-3].rstrip()
    return text


def yaml_block(value: Any, indent: int = 0) -> str:
    """A mapping or list as block YAML, every line but the first indented by ``indent``."""
    try:
        text = yaml.safe_dump(
            _plain(value), default_flow_style=False, sort_keys=False, allow_unicode=True, width=100
        ).rstrip("\n")
    except yaml.YAMLError as error:
        raise TemplateFailure(f"cannot write {type(value).__name__} value as YAML: {error}") from None
    return _without_document_end(text).replace("\n", "\n" + " " * indent)


def _plain(value: Any) -> Any:
    if isinstance(value, jinja2.Undefined):
        str(value)  # raises with the value's name
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# OpenPAI's own references (openpai.names.PAI_TAG_PATTERN), replaced by the
# server before bash runs the command, are left unquoted when their names hold
# only word characters, dots, dashes and [index]: a reference the server does
# not resolve stays in the command as written, and an unquoted `<%` is a shell
# redirection, so anything looser (`<% $parameters.$(id) %>`) is quoted.
_SHELL_SAFE_TAG = r"<%\s*\$[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_-]+|\[[0-9]+\])+\s*%>"
_SHELL_VAR = r"\$[A-Za-z_][A-Za-z0-9_]*|\$\{[A-Za-z_][A-Za-z0-9_]*\}"
_KEPT_PART = re.compile(f"({_SHELL_SAFE_TAG})|({_SHELL_VAR})")
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _is_secret(tag: str | None) -> bool:
    return bool(tag) and re.match(r"<%\s*\$secrets\.", tag or "") is not None


def shell_quote(value: Any) -> str:
    """One shell word that bash reads back as ``value``, whatever it holds.

    OpenPAI references (``<% $parameters.x %>``) and environment variables
    (``$VAR``, ``${VAR}``) keep working: alone they stay as written, inside a
    longer word the text around them is quoted (``--data=$DATA/x`` →
    ``--data="$DATA"/x``). A secret (``<% $secrets.x %>``) is always single-quoted:
    OpenPAI's runtime writes its value into the command HTML-escaped (``'`` as
    ``&#x27;``), so in single quotes any secret stays one word and nothing in it runs. Everything else — ``;``, ``$(...)``, backquotes,
    spaces — is quoted, so a value never becomes a command. A NUL character,
    which no command line can hold, is refused.
    """
    if isinstance(value, jinja2.Undefined):
        str(value)  # raises with the value's name
    text = value if isinstance(value, str) else yaml_scalar(value) if isinstance(value, bool) else str(value)
    if "\0" in text:
        raise TemplateFailure(f"value {text!r} contains a NUL character, which no shell command can hold")
    kept = [
        match
        for match in _KEPT_PART.finditer(text)
        if match.group(2) or re.fullmatch(PAI_TAG_PATTERN, match.group(1))
    ]
    if len(kept) == 1 and kept[0].span() == (0, len(text)) and not _is_secret(kept[0].group(1)):
        return text  # a reference alone stays as written
    words: list[str] = []
    last = 0
    for match in kept:
        if match.start() > last:
            words.append(shlex.quote(text[last : match.start()]))
        tag, var = match.groups()
        words.append((f"'{tag}'" if _is_secret(tag) else tag) if tag else f'"{var}"')
        last = match.end()
    if last < len(text) or not words:
        words.append(shlex.quote(text[last:]))
    return "".join(words)


def shell_join(values: Any) -> str:
    """A list as shell words, each quoted by ``shell_quote`` (a list item with
    spaces stays one argument). A string is split as the shell would split it
    (without running anything in it), then each word is quoted."""
    if values is None:
        return ""
    if isinstance(values, jinja2.Undefined):
        str(values)  # raises with the value's name
    if isinstance(values, str):
        try:
            values = shlex.split(values)
        except ValueError as error:
            raise TemplateFailure(f"cannot split {values!r} into shell words: {error}") from None
    if not isinstance(values, (list, tuple)):
        raise TemplateFailure(f"expected a list of words, got {yaml_scalar(values)}")
    return " ".join(shell_quote(v) for v in values)


def shell_name(name: Any) -> str:
    """``name`` when it is a shell variable name, else a template failure (no injection
    through ``export NAME=...`` or ``mpirun -x NAME``)."""
    text = str(name)
    if not _SHELL_NAME.fullmatch(text):
        raise TemplateFailure(
            f"environment variable name {text!r} is not a shell variable name "
            "(letters, digits and _, not starting with a digit)"
        )
    return text


def cli_flags(options: Any) -> str:
    """``{data: synthetic, epochs: 2}`` → ``--data synthetic --epochs 2``; true → bare flag."""
    if not options:
        return ""
    if not isinstance(options, Mapping):
        raise TemplateFailure(f"expected a mapping of options, got {yaml_scalar(options)}")
    words: list[str] = []
    for key, value in options.items():
        flag = shell_quote("--" + str(key).replace("_", "-"))
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


def _count(value: Any, what: str) -> int:
    """A whole number ≥ 0 from a value, or a template failure naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TemplateFailure(f"{what} must be a whole number, got {yaml_scalar(value)}")
    try:
        number = int(value)
    except (ValueError, OverflowError):
        raise TemplateFailure(f"{what} must be a whole number, got {yaml_scalar(value)}") from None
    if number < 0 or number != value and not isinstance(value, str):
        raise TemplateFailure(f"{what} must be a whole number >= 0, got {yaml_scalar(value)}")
    return number


def processes_per_node(gpu: Any, explicit: Any = None) -> int:
    """Training processes per instance: ``explicit`` when given, else one per GPU, else 1."""
    if explicit is not None:
        return _count(explicit, "processesPerNode")
    count = _count(gpu, "gpu") if gpu else 0
    return count if count > 0 else 1


def shm_mb(ppn: Any, loader_workers: Any, per_worker_mb: Any, explicit: Any = None) -> int:
    """``/dev/shm`` for an instance: ``explicit`` when given, else processes ×
    DataLoader workers × MB per worker, at least OpenPAI's own default."""
    if explicit is not None:
        return _count(explicit, "shmMB")
    return max(
        DEFAULT_SHM_MB,
        _count(ppn, "processes per node")
        * _count(loader_workers, "loaderWorkers")
        * _count(per_worker_mb, "shmPerLoaderWorkerMB"),
    )


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
    if os.environ.get(contract.NO_TEMPLATE_CACHE):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    # "-sandboxed": bytecode compiled outside the sandbox (older paijob) must never load
    folder = os.path.join(base, "paijob", "templates-sandboxed")
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
        shname=shell_name,
        cli_flags=cli_flags,
    )
    env.globals.update(fail=_fail, shm_mb=shm_mb, processes_per_node=processes_per_node,
                       paijob_version=__version__, rendered_version_env=RENDERED_VERSION_ENV, runtime_install_command=_failing(install_command),
                       image_auth=_failing(image_auth))
    return env


def _failing(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` for templates: its ``InstallSettingsError`` becomes a template failure (file and line)."""
    def call(*args: Any) -> Any:
        try:
            return function(*args)
        except InstallSettingsError as error:
            raise TemplateFailure(str(error)) from None
    return call


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
        except (jinja2.TemplateError, OSError, UnicodeDecodeError):  # render_text reports it
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
    except UnicodeDecodeError as error:
        raise TemplateError(
            f"template {template.filename} (or one it imports) is not UTF-8 text "
            f"(byte {error.start}); save it as UTF-8"
        ) from None
    context = {str(k): _wrap(v, str(k)) for k, v in values.items()}
    try:
        return jinja_template.render(context)
    except SecurityError as error:
        raise TemplateError(
            f"template {template.name} ({_where(error, template)}) uses something templates may "
            f"not: {error} (templates run in Jinja's sandbox: values, filters and the methods "
            "of plain values only; see 'paijob templates --help')"
        ) from None
    except RecursionError:
        raise TemplateError(
            f"template {template.filename} extends, includes or calls itself without end; "
            "a template may extend or include only other templates"
        ) from None
    except UnicodeDecodeError as error:
        raise TemplateError(
            f"a template that {template.filename} imports is not UTF-8 text "
            f"(byte {error.start}); save it as UTF-8"
        ) from None
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
    except (TypeError, ValueError, ArithmeticError, LookupError, MemoryError) as error:
        if template.builtin:
            raise  # values are schema-checked for the built-ins: this is a bug
        raise TemplateError(
            f"template {template.name} ({_where(error, template)}) failed: "
            f"{type(error).__name__}: {error}"
        ) from None


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
    # The rendered TEXT, re-read exactly as `paijob validate` reads a file: what
    # is checked is what is printed (a duplicate key, a value that broke the
    # YAML structure), not the values as the template meant them.
    report = validate_text(text, source)
    if report.job is None:
        try:
            load_job(text, source)
        except YamlError as error:
            raise TemplateError(
                f"template {ref.filename} rendered text that is not YAML: {error} "
                "(quote values with the '| yaml' filter)"
            ) from None
    report.problems[:0] = [Problem(WARNING, (), message) for message in unknown]
    if check and not report.ok:
        raise JobValidationError(report)
    job = report.job
    return RenderResult(ref, values, text, job if isinstance(job, dict) else {}, report)


def load_job_file(path: str | Path, *, check: bool = True) -> RenderResult:
    """A job YAML that needs no rendering, read and checked like a rendered one."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise PaijobError(f"job file {path} is not UTF-8 text (byte {error.start})") from None
    except OSError as error:
        raise PaijobError(f"cannot read job file {path}: {error.strerror or error}") from None
    report = validate_text(text, str(path))  # the checks of `paijob validate`, duplicates included
    job = report.job
    if check and not report.ok:
        raise JobValidationError(report)
    ref = TemplateRef(file.name, str(path), file.resolve().parent, False)
    return RenderResult(ref, {}, text, job if isinstance(job, dict) else {}, report)


def is_job_file(spec: str) -> bool:
    """True when ``spec`` names an existing plain job YAML (not a template)."""
    return spec.endswith((".yaml", ".yml")) and Path(spec).is_file()


def render(
    template: str, values: Sequence[str | Path] = (), sets: Sequence[SetArg] = (), *, check: bool = True
) -> RenderResult:
    """Render ``template`` with ``values`` files and ``sets``, or read it when it is a plain job file.

    ``template`` is a built-in name, a ``.yaml.j2`` path, or a ``.yaml`` /
    ``.yml`` job file, which is read and checked instead of rendered (values
    and sets are then an error). ``sets`` are ``("set" | "set-string",
    "key=value")`` in command-line order. Raises ``PaijobError`` subclasses
    (see ``render_template``).
    """
    if not template:
        raise PaijobError("no template given; see 'paijob templates' for the built-ins")
    if template.endswith(VALUES_SUFFIX) and Path(template).is_file():
        raise PaijobError(
            f"{template} is a values file, not a template: give the template first and the "
            f"values with -f, e.g. 'ddp -f {template}'"
        )
    if is_job_file(template):
        if values or sets:
            raise PaijobError(
                f"{template} is a job YAML, not a template: -f/--set do not apply to it; "
                "edit the file, or give a template (a built-in name or a .yaml.j2 file)"
            )
        return load_job_file(template, check=check)
    return render_template(template, values, ordered_sets=sets, check=check)
