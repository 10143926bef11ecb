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


def type_name(value: Any) -> str:
    if value is None:
        return "any (null)"
    return {bool: "bool", int: "int", float: "float", str: "string", list: "list", dict: "map"}.get(
        type(value), type(value).__name__)


def describe(template: str) -> list[ValueDoc]:
    """The values ``template`` reads: its defaults first (file order), then names it reads without a default."""
    from paijob.render import templating

    ref = templating.find_template(template)
    values_text = ref.values_text()
    defaults: dict[str, Any] = {}
    notes: dict[str, str] = {}
    if values_text is not None:
        defaults = yaml.safe_load(values_text[0]) or {}
        notes = comments(values_text[0])
    hint_ref = templating.find_template("ddp")
    hint_text = hint_ref.values_text()
    hints = (yaml.safe_load(hint_text[0]) or {}) if hint_text else {}
    hint_notes = comments(hint_text[0]) if hint_text else {}
    env_globals = set(templating._environment(ref.folder).globals)
    read = sorted(n for n in templating.used_names(ref) if n not in env_globals and not n.startswith("_"))
    docs = [ValueDoc(name, type_name(value), value, False, notes.get(name, "")) for name, value in defaults.items()]
    for name in read:
        if name in defaults:
            continue
        hint = hints.get(name)
        comment = hint_notes.get(name, "")
        if name in hints:
            comment = f"{comment} (ddp's default: {json.dumps(hint)})".strip()
        docs.append(ValueDoc(name, type_name(hint) if name in hints else "?", None, True, comment))
    return docs
