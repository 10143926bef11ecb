"""Values schemas: type-check a template's values before rendering.

Helm's convention: a JSON Schema beside the template (here
``NAME.values.schema.json`` beside ``NAME.yaml.j2``, since the built-ins
share one folder). The values after all layering (defaults < ``-f`` <
``--set``) are checked against it, so ``--set setup=notalist`` is an error
naming the value, the type it must have and the one it was given, instead of
eight commands ``n``, ``o``, ``t``, ...

Evaluated by :mod:`paijob.openpai.schemaeval`, the evaluator that also checks
the server's job schema, here with Python's types (values are Python data:
``.inf`` is not an integer) rather than JavaScript's, and not by
``jsonschema``, whose import would cost more than the rest of ``paijob render``
(the tests check agreement with ``jsonschema``); ``description`` texts are
used in the messages.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from paijob.common import beneath
from paijob.errors import PaijobError
from paijob.openpai import schemaeval
from paijob.openpai.schemaeval import SchemaError

MAX_REPORTED = 5

_TYPE_WORDS = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


class ValuesSchemaError(PaijobError):
    """Values that break the template's values schema, or a schema that cannot be read."""


def iter_errors(value: Any, schema: dict[str, Any], path: tuple[Any, ...] = ()) -> Iterator[SchemaError]:
    """Every violation of ``schema`` by ``value`` (Python's types); an unknown keyword is a ``ValueError``."""
    return schemaeval.iter_errors(value, schema, schemaeval.PYTHON, path)


@lru_cache(maxsize=16)
def load_schema(path: str) -> dict[str, Any]:
    """The schema in ``path`` (cached: built-in schemas never change during a run). Read through its folder's
    descriptor (``paijob.common.beneath``): a user template's schema swapped for a link out of its folder after
    ``TemplateRef.schema_file`` checked it is refused, never read (issue 55)."""
    folder = os.path.realpath(os.path.dirname(path) or ".")
    try:
        found = beneath.read_beneath(folder, [os.path.basename(path)])
        if found is None:
            raise FileNotFoundError(path)
        schema = json.loads(found[0].decode("utf-8"))
    except beneath.Outside as error:
        raise ValuesSchemaError(f"values schema {path} is a link to {error.target}, outside its folder") from None
    except (beneath.NotRegular, beneath.TooManyLinks):
        raise ValuesSchemaError(f"values schema {path} is not a regular file") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ValuesSchemaError(f"cannot read values schema {path}: {error}") from None
    if not isinstance(schema, dict):
        raise ValuesSchemaError(f"values schema {path} is not a JSON object")
    return schema


def check_values(values: dict[str, Any], schema_path: str, template: str) -> None:
    """Raise ``ValuesSchemaError`` listing (up to ``MAX_REPORTED``) values that break the schema."""
    schema = load_schema(schema_path)
    try:
        errors = list(iter_errors(values, schema))
    except (ValueError, TypeError, RecursionError) as error:  # a keyword not supported
        raise ValuesSchemaError(f"values schema {schema_path}: {error}") from None
    if not errors:
        return
    messages = [describe(error, values) for error in errors[:MAX_REPORTED]]
    more = f" (and {len(errors) - MAX_REPORTED} more)" if len(errors) > MAX_REPORTED else ""
    raise ValuesSchemaError(
        "; ".join(messages)
        + more
        + f"; fix it with --set or in a -f values file (see 'paijob templates show {template}')"
    )


def _dotted(path: Any) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else ("." if text else "") + str(part)
    return text


def _given(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        text = repr(value)
        return f"the number {text if len(text) <= 40 else text[:37] + '...'}"
    if isinstance(value, str):
        text = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {text!r}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__}"


def _expected(schema: dict[str, Any], keyword: str) -> str:
    if keyword == "type":
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        return " or ".join(_TYPE_WORDS.get(str(name), str(name)) for name in names)
    if keyword == "enum":
        return "one of " + ", ".join(str(option) for option in schema["enum"])
    if keyword == "minimum":
        return f"at least {schema['minimum']}"
    if keyword == "maximum":
        return f"at most {schema['maximum']}"
    if keyword in ("minLength", "minItems"):
        return "not empty"
    if keyword == "maxLength":
        return f"at most {schema['maxLength']} characters long"
    return str(schema.get("description") or f"valid ({keyword} {schema.get(keyword)!r})")


def describe(error: SchemaError, values: Any) -> str:
    """One clause: ``value 'setup' must be a list, given the string 'notalist'``."""
    path = _dotted(error.absolute_path)
    name = f"value '{path}'" if path else "the values"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = sorted(error.schema.get("properties", {}))
        extra = [str(k) for k in error.instance if k not in known]
        return f"{name} has unknown key(s) {', '.join(extra)} (known: {', '.join(known)})"
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [str(key) for key in error.schema["required"] if key not in error.instance]
        return f"{name} must have the key(s) {', '.join(missing)}"
    if isinstance(error.instance, str) and isinstance(_at(values, error.absolute_path), dict):
        # propertyNames: the failing thing is a key of the mapping at this path
        return f"{name} has a key {error.instance!r} that is not {_expected(error.schema, error.validator)}"
    return f"{name} must be {_expected(error.schema, error.validator)}, given {_given(error.instance)}"


def _at(values: Any, path: Any) -> Any:
    node = values
    for part in path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return node
