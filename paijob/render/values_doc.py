"""Every value a template reads, with its type, default and comment (``paijob templates show NAME --values``).

A custom template that imports ``_job.yaml.j2`` reads some twenty values;
listing them at once (with the built-in ddp template's default as a hint
where the template has none) beats discovering them one failed render at a time.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*:")


@dataclass(frozen=True)
class ValueDoc:
    name: str
    type: str
    default: Any
    required: bool
    comment: str


def comments(text: str) -> dict[str, str]:
    """Top-level key -> the comment lines right above it in a values file."""
    found: dict[str, str] = {}
    pending: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") and not line.startswith((" ", "\t")):
            pending.append(stripped.lstrip("#").strip())
            continue
        match = _KEY.match(line)
        if match:
            found[match.group(1)] = " ".join(pending)
        if stripped == "" or match or not line.startswith((" ", "\t")):
            pending = []
    return found


_SCHEMA_TYPES = {"integer": "int", "number": "float", "boolean": "bool", "string": "string", "array": "list",
                 "object": "map", "null": "null"}
_PYTHON_TYPES = {type(None): "null", bool: "bool", int: "int", float: "float", str: "string", list: "list",
                 dict: "map"}


def _type_of(value: Any) -> str:
    return _PYTHON_TYPES.get(type(value), type(value).__name__)


def type_name(value: Any, schema: dict[str, Any] | None = None) -> str:
    """The value's type as the values schema declares it (``int or null``), else as its default shows it."""
    schema = schema or {}
    declared = schema.get("type")
    if isinstance(declared, str):
        declared = [declared]
    if declared:
        return " or ".join(_SCHEMA_TYPES.get(str(name), str(name)) for name in declared)
    if isinstance(schema.get("enum"), list):  # the types of the values it lists
        return " or ".join(dict.fromkeys(_type_of(item) for item in schema["enum"]))
    return "any" if value is None else _type_of(value)  # a null default says nothing of what else it takes


def _properties(ref: Any) -> dict[str, Any]:
    """The values schema's top-level properties (empty without a schema)."""
    from paijob.render.values_schema import load_schema

    path = ref.schema_path()
    if path is None:
        return {}
    properties = load_schema(str(path)).get("properties")
    return properties if isinstance(properties, dict) else {}


def _defaults(ref: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """A template's default values and the comments above them (both empty without a values file)."""
    values_text = ref.values_text()
    if values_text is None:
        return {}, {}
    return yaml.safe_load(values_text[0]) or {}, comments(values_text[0])


def _read_without_default(name: str, hints: dict[str, Any], hint_notes: dict[str, str],
                          schema: dict[str, Any] | None) -> ValueDoc:
    """A value the template reads but gives no default: typed and explained by ddp's, where ddp has one."""
    comment = hint_notes.get(name, "")
    if name in hints:
        comment = f"{comment} (ddp's default: {json.dumps(hints[name])})".strip()
    typed = name in hints or schema
    return ValueDoc(name, type_name(hints.get(name), schema) if typed else "?", None, True, comment)


def describe(template: str) -> list[ValueDoc]:
    """The values ``template`` reads: its defaults first (file order), then names it reads without a default."""
    from paijob.render import templating

    ref = templating.find_template(template)
    defaults, notes = _defaults(ref)
    hint_ref = templating.find_template("ddp")
    hints, hint_notes = _defaults(hint_ref)
    env_globals = set(templating._environment(ref.folder).globals)
    read = sorted(n for n in templating.used_names(ref) if n not in env_globals and not n.startswith("_"))
    declared, hint_declared = _properties(ref), _properties(hint_ref)
    docs = [ValueDoc(name, type_name(value, declared.get(name)), value, False, notes.get(name, ""))
            for name, value in defaults.items()]
    docs.extend(_read_without_default(name, hints, hint_notes, declared.get(name) or hint_declared.get(name))
                for name in read if name not in defaults)
    return docs
