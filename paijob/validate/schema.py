"""JSON schema (draft 7) of an OpenPAI protocol-v2 job: the one the rest-server enforces.

Transcribed from rest-server ``src/config/v2/protocol.js`` (ajv 6,
``ajv-merge-patch``; the ``$merge`` of ``base.json`` into each prerequisite
kind is written out here), quirks included, because ``paijob validate``
must accept what the server accepts:

* ``taskRoles`` and ``ports`` have no ``type``: a non-mapping passes the
  schema (the server then fails on it; ``paijob.validate.verdict`` reports that);
* ``extraContainerOptions`` has a *property* named ``additionalProperties``
  (a misplaced ``additionalProperties: false``), so unknown keys are allowed
  there, except a key literally named ``additionalProperties``;
* no minimums on ``cpu``, ``memoryMB``, ``gpu``, ``shmMB``, port counts,
  ``taskRetryCount`` or the completion counts; ``defaults`` and ``extras``
  take any keys; ``uri`` may be empty; ``secrets`` must be a mapping;
* a dockerimage prerequisite takes no keys but ``base.json``'s, ``type``,
  ``auth`` and ``uri`` (so no ``plugin``/``require``); ``prerequisites`` and
  ``deployments`` need at least one item when present, each deployment a
  ``name`` and a non-empty ``taskRoles``.

``iter_schema_errors`` evaluates it with ajv's JavaScript view of values: a
number with an integral value (and ±Infinity) is an ``integer``, and a date
(``2001-12-14``, a JavaScript Date) is an ``object`` with no properties.
Rules that relate fields (prerequisite names, deployments, hived) live in
``paijob.validate.verdict``, as they live in the server's middleware.
"""

from __future__ import annotations

import datetime
import math
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from paijob.openpai.names import IDENTIFIER_PATTERN, NAME_PATTERN

__all__ = ["IDENTIFIER_PATTERN", "JOB_SCHEMA", "NAME_PATTERN", "TOP_LEVEL_KEYS", "iter_schema_errors"]

TOP_LEVEL_KEYS = (
    "protocolVersion",
    "name",
    "type",
    "version",
    "contributor",
    "description",
    "prerequisites",
    "parameters",
    "secrets",
    "jobRetryCount",
    "taskRoles",
    "deployments",
    "defaults",
    "extras",
)

_STRING_LIST: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
_PROTOCOL_VERSION: dict[str, Any] = {"enum": ["2", 2]}
_NAME: dict[str, Any] = {"type": "string", "pattern": NAME_PATTERN, "maxLength": 255}

# base.json: what every prerequisite (and the job) may carry
_BASE_PROPERTIES: dict[str, Any] = {
    "protocolVersion": _PROTOCOL_VERSION,
    "name": _NAME,
    "version": {"type": ["string", "number"]},
    "contributor": {"type": "string"},
    "description": {"type": "string"},
}


def _prerequisite(kinds: list[str], extra: dict[str, Any], closed: bool) -> dict[str, Any]:
    """One ``$merge`` of base.json with a prerequisite kind's own properties."""
    required = ["name", "type", "uri"] if closed else ["name", "type"]
    return {
        "type": "object",
        "properties": {**_BASE_PROPERTIES, "type": {"type": "string", "enum": kinds}, **extra},
        "required": required,
        "additionalProperties": not closed,
    }


_PREREQUISITE: dict[str, Any] = {
    "type": "object",
    "oneOf": [
        _prerequisite(
            ["script", "output"],
            {"plugin": {"type": "string"}, "require": _STRING_LIST, "uri": {"type": "string"}},
            closed=False,
        ),
        _prerequisite(
            ["data"],
            {"plugin": {"type": "string"}, "require": _STRING_LIST, "uri": _STRING_LIST},
            closed=False,
        ),
        _prerequisite(
            ["dockerimage"],
            {
                "auth": {
                    "type": "object",
                    "properties": {
                        "username": {"type": "string"},
                        "password": {"type": "string"},
                        "registryuri": {"type": "string"},
                    },
                },
                "uri": {"type": "string"},
            },
            closed=True,
        ),
    ],
}

_TASK_ROLE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "protocolVersion": _PROTOCOL_VERSION,
        "instances": {"type": "integer", "minimum": 1},
        "completion": {
            "type": "object",
            "properties": {
                "minFailedInstances": {"type": ["integer", "null"]},
                "minSucceededInstances": {"type": ["integer", "null"]},
            },
            "additionalProperties": False,
        },
        "taskRetryCount": {"type": "integer"},
        "prerequisites": _STRING_LIST,
        "dockerImage": {"type": "string"},
        "data": {"type": "string"},
        "output": {"type": "string"},
        "script": {"type": "string"},
        "extraContainerOptions": {
            "type": "object",
            # sic: upstream nests additionalProperties inside properties
            "properties": {"shmMB": {"type": "integer"}, "additionalProperties": False},
        },
        "resourcePerInstance": {
            "type": "object",
            "properties": {
                "cpu": {"type": "integer"},
                "memoryMB": {"type": "integer"},
                "gpu": {"type": "integer"},
                "ports": {
                    "patternProperties": {IDENTIFIER_PATTERN: {"type": "integer"}},
                    "minProperties": 1,
                    "additionalProperties": False,
                },
            },
            "required": ["cpu", "memoryMB", "gpu"],
            "additionalProperties": False,
        },
        "commands": {**_STRING_LIST, "minItems": 1},
    },
    "required": ["dockerImage", "resourcePerInstance", "commands"],
    "additionalProperties": False,
}

_DEPLOYMENT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "protocolVersion": _PROTOCOL_VERSION,
        "name": _NAME,
        "taskRoles": {
            "patternProperties": {
                IDENTIFIER_PATTERN: {
                    "type": "object",
                    "properties": {
                        "preCommands": {**_STRING_LIST, "minItems": 1},
                        "postCommands": {**_STRING_LIST, "minItems": 1},
                    },
                    "additionalProperties": False,
                }
            },
            "minProperties": 1,
            "additionalProperties": False,
        },
    },
    "required": ["name", "taskRoles"],
}

JOB_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "OpenPAI protocol v2 job (rest-server config/v2/protocol.js)",
    "type": "object",
    "properties": {
        "protocolVersion": _PROTOCOL_VERSION,
        "name": _NAME,
        "type": {"type": "string", "enum": ["job"]},
        "version": {"type": ["string", "number"]},
        "contributor": {"type": "string"},
        "description": {"type": "string"},
        "prerequisites": {"type": "array", "items": _PREREQUISITE, "minItems": 1},
        "parameters": {"type": "object", "additionalProperties": True},
        "secrets": {"type": "object", "additionalProperties": True},
        "jobRetryCount": {"type": "integer", "minimum": 0},
        "taskRoles": {
            "patternProperties": {IDENTIFIER_PATTERN: _TASK_ROLE},
            "minProperties": 1,
            "additionalProperties": False,
        },
        "deployments": {"type": "array", "items": _DEPLOYMENT, "minItems": 1},
        "defaults": {"type": "object", "properties": {"deployment": {"type": "string"}}},
        "extras": {"type": "object"},
    },
    "required": ["protocolVersion", "name", "type", "taskRoles"],
    "additionalProperties": False,
}


# --------------------------------------------------------------------------- evaluation


@dataclass
class SchemaError:
    """The parts of ``jsonschema.ValidationError`` that paijob's messages use."""

    validator: str  # the failing keyword: "required", "type", ...
    schema: dict[str, Any]  # the (sub)schema holding that keyword
    instance: Any
    absolute_path: deque[Any] = field(default_factory=deque)
    validator_value: Any = None


def js_object(instance: Any) -> dict[Any, Any] | None:
    """The properties ajv sees on an ``object``: a mapping's, none on a Date; None if not one."""
    if isinstance(instance, dict):
        return instance
    if isinstance(instance, (datetime.date, bytes)):
        return {}
    return None


def is_js_type(instance: Any, name: str) -> bool:
    """ajv 6's type test: JavaScript numbers, so 1.0 and Infinity are integers."""
    if name == "object":
        return js_object(instance) is not None
    if name == "array":
        return isinstance(instance, list)
    if name == "string":
        return isinstance(instance, str)
    if name == "boolean":
        return isinstance(instance, bool)
    if name == "null":
        return instance is None
    if isinstance(instance, bool) or not isinstance(instance, (int, float)):
        return False
    if name == "integer":
        return isinstance(instance, int) or math.isinf(instance) or instance.is_integer()
    if name == "number":
        return True
    raise ValueError(f"unknown JSON schema type {name!r}")


def _equal(a: Any, b: Any) -> bool:
    # JSON equality: true is not 1, 2.0 is 2
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


@lru_cache(maxsize=64)
def _regex(pattern: str) -> re.Pattern[str]:
    # JavaScript's $ does not match before a final newline; Python's does
    return re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern)


def _valid(instance: Any, schema: Any) -> bool:
    return next(iter_schema_errors(instance, schema), None) is None


def _discriminated(instance: Any, options: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ``oneOf`` option whose ``type`` enum names the instance's ``type`` (prerequisites)."""
    kind = instance.get("type") if isinstance(instance, dict) else None
    for option in options:
        if kind in option.get("properties", {}).get("type", {}).get("enum", ()):
            return option
    return None


def iter_schema_errors(
    instance: Any, schema: Any = JOB_SCHEMA, path: tuple[Any, ...] = ()
) -> Iterator[SchemaError]:
    """Yield every violation of ``schema`` by ``instance`` (draft-7 semantics, ajv's JavaScript
    types, for the keywords used in ``JOB_SCHEMA``; an unknown keyword is a bug)."""
    if schema is True:
        return
    if schema is False:
        yield SchemaError("false", {}, instance, deque(path), False)
        return
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(is_js_type(instance, n) for n in names):
            yield SchemaError("type", schema, instance, deque(path), schema["type"])
            return  # the other keywords of this schema only apply to the right type
    for keyword, expected in schema.items():
        check = _KEYWORDS.get(keyword)
        if check is None:
            if keyword not in _ANNOTATIONS:
                raise ValueError(f"JSON schema keyword {keyword!r} is not implemented")
            continue
        yield from check(instance, expected, schema, path)


def _error(keyword: str, schema: dict[str, Any], instance: Any, path: tuple[Any, ...]) -> SchemaError:
    return SchemaError(keyword, schema, instance, deque(path), schema.get(keyword))


def _check_enum(instance: Any, expected: Any, schema: Any, path: tuple[Any, ...]) -> Iterator[SchemaError]:
    if not any(_equal(instance, option) for option in expected):
        yield _error("enum", schema, instance, path)


def _check_minimum(instance: Any, expected: Any, schema: Any, path: tuple[Any, ...]) -> Iterator[SchemaError]:
    if is_js_type(instance, "number") and instance < expected:
        yield _error("minimum", schema, instance, path)


def _check_string(keyword: str) -> Any:
    def check(instance: Any, expected: Any, schema: Any, path: tuple[Any, ...]) -> Iterator[SchemaError]:
        if not isinstance(instance, str):
            return
        # JavaScript counts UTF-16 code units
        length = len(instance.encode("utf-16-le", "surrogatepass")) // 2
        if (
            (keyword == "maxLength" and length > expected)
            or (keyword == "minLength" and length < expected)
            or (keyword == "pattern" and not _regex(expected).search(instance))
        ):
            yield _error(keyword, schema, instance, path)

    return check


def _check_items(instance: Any, expected: Any, schema: Any, path: tuple[Any, ...]) -> Iterator[SchemaError]:
    if isinstance(instance, list):
        for index, item in enumerate(instance):
            yield from iter_schema_errors(item, expected, (*path, index))


def _check_min_items(instance: Any, expected: Any, schema: Any, path: tuple[Any, ...]) -> Iterator[SchemaError]:
    if isinstance(instance, list) and len(instance) < expected:
        yield _error("minItems", schema, instance, path)


def _check_required(instance: Any, expected: Any, schema: Any, path: tuple[Any, ...]) -> Iterator[SchemaError]:
    props = js_object(instance)
    if props is not None and any(key not in props for key in expected):
        yield _error("required", schema, instance, path)


def _check_min_properties(
    instance: Any, expected: Any, schema: Any, path: tuple[Any, ...]
) -> Iterator[SchemaError]:
    props = js_object(instance)
    if props is not None and len(props) < expected:
        yield _error("minProperties", schema, instance, path)


def _check_properties(instance: Any, expected: Any, schema: Any, path: tuple[Any, ...]) -> Iterator[SchemaError]:
    props = js_object(instance) or {}
    for key, subschema in expected.items():
        if key in props:
            yield from iter_schema_errors(props[key], subschema, (*path, key))


def _check_pattern_properties(
    instance: Any, expected: Any, schema: Any, path: tuple[Any, ...]
) -> Iterator[SchemaError]:
    props = js_object(instance) or {}
    for pattern, subschema in expected.items():
        for key, value in props.items():
            if isinstance(key, str) and _regex(pattern).search(key):
                yield from iter_schema_errors(value, subschema, (*path, key))


def _is_additional(key: Any, schema: dict[str, Any]) -> bool:
    if key in schema.get("properties", {}):
        return False
    return not any(
        isinstance(key, str) and _regex(p).search(key) for p in schema.get("patternProperties", {})
    )


def _check_additional(instance: Any, expected: Any, schema: Any, path: tuple[Any, ...]) -> Iterator[SchemaError]:
    props = js_object(instance) or {}
    extra = [key for key in props if _is_additional(key, schema)]
    if expected is False and extra:
        yield _error("additionalProperties", schema, instance, path)
    elif isinstance(expected, dict):
        for key in extra:
            yield from iter_schema_errors(props[key], expected, (*path, key))


def _check_one_of(instance: Any, expected: Any, schema: Any, path: tuple[Any, ...]) -> Iterator[SchemaError]:
    if sum(_valid(instance, option) for option in expected) == 1:
        return
    option = _discriminated(instance, expected)
    if option is None:
        yield _error("oneOf", schema, instance, path)
    else:  # the errors of the kind the instance says it is, not of every kind
        yield from iter_schema_errors(instance, option, path)


_ANNOTATIONS = {"$schema", "title", "description", "type"}
_KEYWORDS: dict[str, Any] = {
    "enum": _check_enum,
    "minimum": _check_minimum,
    "minLength": _check_string("minLength"),
    "maxLength": _check_string("maxLength"),
    "pattern": _check_string("pattern"),
    "items": _check_items,
    "minItems": _check_min_items,
    "required": _check_required,
    "minProperties": _check_min_properties,
    "properties": _check_properties,
    "patternProperties": _check_pattern_properties,
    "additionalProperties": _check_additional,
    "oneOf": _check_one_of,
}
