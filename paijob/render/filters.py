"""What templates may call: Jinja filters (YAML and shell quoting) and resource arithmetic.

Every function here is registered in the sandboxed Jinja environment
(:data:`FILTERS`, :data:`GLOBALS`); a value a template cannot use is a
:class:`TemplateFailure`, which rendering reports with the template's file and line.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

import jinja2
import yaml

from paijob.openpai.model import DEFAULT_SHM_MB
from paijob.openpai.names import PAI_TAG_PATTERN
from paijob.openpai.yamlscalars import TAG, yaml11_tag


class TemplateFailure(Exception):
    """``{{ fail("message") }}`` inside a template, or a value a filter cannot use."""


def fail(message: str) -> None:
    """``{{ fail("message") }}``: stop rendering with ``message``."""
    raise TemplateFailure(message)


def yaml_scalar(value: Any) -> str:
    """A value as one YAML flow scalar / collection (quoted only when needed)."""
    if isinstance(value, jinja2.Undefined):
        str(value)  # raises with the value's name
    if isinstance(value, str):
        if "\n" in value or "\r" in value:
            # one line whatever the indentation around it: a JSON string is YAML
            return json.dumps(value, ensure_ascii=False)
        return value if _is_plain(value) else _dumped(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(_plain(value), ensure_ascii=False, default=str)


def _dumped(text: str) -> str:
    """``text`` as PyYAML writes a lone string: plain when it can, else quoted."""
    return _without_document_end(
        yaml.safe_dump(text, default_flow_style=True, width=10**9, allow_unicode=True).strip()
    )


# Characters PyYAML's emitter (analyze_scalar) does not let a plain scalar start with, and a
# space; "-", "?", ":" (indicators when a space follows) and "." ("..." ends a document) go to PyYAML.
_NOT_PLAIN_FIRST = frozenset("#,[]{}&*!|>'\"%@`-?:. ")


def _is_plain(text: str) -> bool:
    """True when PyYAML writes ``text`` as it is (``_dumped(text) == text``, which the tests check),
    decided without its emitter: that costs ~0.6 M instructions a value, and a render writes about ten,
    most of them plain. Conservative: printable ASCII, no indicator first, no ``": "`` or ``" #"``, no
    space or colon last, and it reads back as a string (not ``yes``, ``1.0``, ``~`` or a date)."""
    return (
        text != ""
        and text[0] not in _NOT_PLAIN_FIRST
        and text.isascii()
        and text.isprintable()
        and not text.endswith((" ", ":"))
        and ": " not in text
        and " #" not in text
        and yaml11_tag(text) == TAG + "str"
    )


def _without_document_end(text: str) -> str:
    """PyYAML ends a lone plain scalar with ``...`` (document end) on a line of its own; in a job
    that would be data. Dots that end the value itself (``Training...``) are the value's."""
    return text[: -len("\n...")] if text.endswith("\n...") else text


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
_SHELL_NAME = r"[A-Za-z_][A-Za-z0-9_]*"  # compiled on first use (re caches it): few templates export names


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
    return _quoted_around(text, kept)


def _quoted_around(text: str, kept: list[re.Match[str]]) -> str:
    """``text`` as one shell word: the ``kept`` references as they are (a secret single-quoted), the rest quoted."""
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
    if not re.fullmatch(_SHELL_NAME, text):
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


FILTERS = {
    "yaml": yaml_scalar,
    "yaml_block": yaml_block,
    "sh": shell_quote,
    "shjoin": shell_join,
    "shname": shell_name,
    "cli_flags": cli_flags,
}
GLOBALS = {"fail": fail, "shm_mb": shm_mb, "processes_per_node": processes_per_node}
