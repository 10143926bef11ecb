"""Values, layered like Helm: template defaults < each ``-f`` file in order < each ``--set``.

Mappings merge key by key; anything else replaces. ``--set KEY=VALUE`` types its
value as YAML would (``--set-string`` keeps it text); a dot in a key is ``\\.``.
Values files are read with paijob's bounded YAML reader (``openpai.jsyaml``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from paijob.errors import PaijobError
from paijob.openpai.jsyaml import YamlError, load_values
from paijob.render.templates import TemplateRef, read_text

if TYPE_CHECKING:
    from pathlib import Path

Values = dict[str, Any]


class ValuesError(PaijobError):
    """A values file or ``--set`` expression that is malformed."""


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
    from pathlib import Path  # only for -f: see paijob.render.templates

    text = read_text(Path(path), "values file", ValuesError)
    return load_values_text(text, str(path))


def holds_secrets(path: str | Path) -> bool:
    """Does values file ``path`` hold a non-empty ``secrets:`` map (the job's OpenPAI secrets)?

    Such a file never ships in a workdir snapshot (``paijob.api``): OpenPAI masks
    a job's own ``secrets``, not a copy of them among the job's files."""
    try:
        secrets = load_values_file(path).get("secrets")
    except PaijobError:
        return False
    return isinstance(secrets, Mapping) and bool(secrets)


# every example is a value the built-in templates take (tests/local/test_newcomer_items.py renders them)
SET_EXAMPLES = ("instances=4", "gpu=8", "env.NCCL_DEBUG=INFO")
_SET_FORM = (f"expected KEY=VALUE, e.g. --set {SET_EXAMPLES[0]} or --set {SET_EXAMPLES[1]} (a dot reaches into a "
             f"map: --set {SET_EXAMPLES[2]}); `paijob templates show TEMPLATE` lists a template's values")
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
    used_names: Callable[[TemplateRef], set[str]] | None = None,
) -> Values:
    """Template defaults < each values file < each set, in order, then checked
    against the template's values schema (``NAME.values.schema.json``) when it has one.

    When ``unknown`` is a list, a message is appended to it for each
    top-level key given that neither the defaults have nor the template
    uses (``used_names``: a typo such as ``instance=4`` would otherwise do nothing).
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
        given.append((keys[0], f"{flag} {expr!r}" if not expr.isprintable() else f"{flag} {expr}"))
        values = apply_set(values, keys, value)
    schema = template.schema_file()
    if schema is not None:
        from paijob.render.values_schema import check_values

        check_values(values, schema, template.name)
    if unknown is not None and any(key not in known for key, _ in given):
        known |= used_names(template) if used_names else set()  # parses the templates: only when needed
        for key, where in given:
            if key not in known:
                import difflib  # only for an unknown value: not on every render

                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                unknown.append(
                    f"value {key!r} ({where}) is not a value of template {template.name}, "
                    f"which ignores it{hint} (see 'paijob templates show {template.name}')"
                )
    return values
