"""JSON schema (draft 7) of an OpenPAI protocol-v2 job, as the REST server enforces it.

``iter_schema_errors`` evaluates it. It implements just the draft-7 keywords
this schema uses, because importing ``jsonschema`` costs more than the rest of
``paijob render`` together (~0.13 s); the test suite checks that it reports
exactly what ``jsonschema.Draft7Validator`` reports, on every fixture.

Stricter than the public openpai-protocol schema where the server is: no
unknown keys at the top level, in a task role, in ``resourcePerInstance``,
``completion``, ``extraContainerOptions`` or ``defaults``; ``cpu``,
``memoryMB`` and ``gpu`` required. Rules that relate two fields
(``dockerImage`` naming a prerequisite, duplicate names, ...) live in
``paijob.protocol``, not here.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

NAME_PATTERN = "^[a-zA-Z0-9_-]+$"
IDENTIFIER_PATTERN = "^[a-zA-Z_][a-zA-Z0-9_]*$"

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

_COUNT_OR_MINUS_ONE: dict[str, Any] = {
    "anyOf": [
        {"type": "integer", "minimum": 1},
        {"type": "integer", "enum": [-1]},
        {"type": "null"},
    ],
    "description": "-1 or at least 1",
}

_STRING_LIST: dict[str, Any] = {"type": "array", "items": {"type": "string"}}

_PREREQUISITE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "protocolVersion": {"enum": [2, "2"]},
        "name": {"type": "string", "pattern": NAME_PATTERN, "maxLength": 255},
        "type": {"enum": ["dockerimage", "script", "output", "data"]},
        "version": {"type": ["string", "number"]},
        "contributor": {"type": "string"},
        "description": {"type": "string"},
        "plugin": {"type": "string"},
        "require": _STRING_LIST,
    },
    "required": ["name", "type"],
    "allOf": [
        {
            "if": {"properties": {"type": {"const": "dockerimage"}}, "required": ["type"]},
            "then": {
                "properties": {
                    "uri": {"type": "string", "minLength": 1},
                    "auth": {
                        "type": "object",
                        "properties": {
                            "username": {"type": "string"},
                            "password": {"type": "string"},
                            "registryuri": {"type": "string"},
                        },
                        "additionalProperties": False,
                    },
                },
                "required": ["uri"],
            },
        },
        {
            "if": {"properties": {"type": {"const": "data"}}, "required": ["type"]},
            "then": {
                "properties": {
                    "uri": {"type": "array", "items": {"type": "string"}, "minItems": 1}
                }
            },
        },
        {
            "if": {"properties": {"type": {"enum": ["script", "output"]}}, "required": ["type"]},
            "then": {"properties": {"uri": {"type": "string"}}},
        },
    ],
}

_TASK_ROLE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "instances": {"type": "integer", "minimum": 1},
        "completion": {
            "type": "object",
            "properties": {
                "minFailedInstances": _COUNT_OR_MINUS_ONE,
                "minSucceededInstances": _COUNT_OR_MINUS_ONE,
            },
            "additionalProperties": False,
        },
        "taskRetryCount": {"type": "integer", "minimum": 0},
        "prerequisites": _STRING_LIST,
        "dockerImage": {"type": "string"},
        "data": {"type": "string"},
        "output": {"type": "string"},
        "script": {"type": "string"},
        "extraContainerOptions": {
            "type": "object",
            "properties": {
                "shmMB": {"type": "integer", "minimum": 1},
                "infiniband": {"type": "boolean"},
            },
            "additionalProperties": False,
        },
        "resourcePerInstance": {
            "type": "object",
            "properties": {
                "cpu": {"type": "integer", "minimum": 1},
                "memoryMB": {"type": "integer", "minimum": 1},
                "gpu": {"type": "integer", "minimum": 0},
                "ports": {
                    "type": "object",
                    "propertyNames": {"pattern": IDENTIFIER_PATTERN},
                    "additionalProperties": {"type": "integer", "minimum": 1},
                },
            },
            "required": ["cpu", "memoryMB", "gpu"],
            "additionalProperties": False,
        },
        "commands": {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
        },
    },
    "required": ["dockerImage", "resourcePerInstance", "commands"],
    "additionalProperties": False,
}

_DEPLOYMENT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "taskRoles": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {
                    "preCommands": {**_STRING_LIST, "minItems": 1},
                    "postCommands": {**_STRING_LIST, "minItems": 1},
                },
                "additionalProperties": False,
            },
        },
    },
    "required": ["name"],
}

JOB_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "OpenPAI protocol v2 job",
    "type": "object",
    "properties": {
        "protocolVersion": {"enum": [2, "2"]},
        "name": {"type": "string", "pattern": NAME_PATTERN, "minLength": 1, "maxLength": 255},
        "type": {"enum": ["job"]},
        "version": {"type": ["string", "number"]},
        "contributor": {"type": "string"},
        "description": {"type": "string"},
        "prerequisites": {"type": "array", "items": _PREREQUISITE},
        "parameters": {"type": "object"},
        "secrets": {"type": ["object", "string"]},
        "jobRetryCount": {"type": "integer", "minimum": 0},
        "taskRoles": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": IDENTIFIER_PATTERN},
            "additionalProperties": _TASK_ROLE,
        },
        "deployments": {"type": "array", "items": _DEPLOYMENT},
        "defaults": {
            "type": "object",
            "properties": {
                "virtualCluster": {"type": "string"},
                "deployment": {"type": "string"},
            },
            "additionalProperties": False,
        },
        "extras": {
            "type": "object",
            "properties": {
                "gangAllocation": {"type": "boolean"},
                "submitFrom": {"type": "string"},
                "com.microsoft.pai.runtimeplugin": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "plugin": {"type": "string"},
                            "parameters": {"type": "object"},
                        },
                        "required": ["plugin"],
                    },
                },
                "hivedScheduler": {"type": "object"},
            },
        },
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


def _is_type(instance: Any, name: str) -> bool:
    if name == "object":
        return isinstance(instance, dict)
    if name == "array":
        return isinstance(instance, list)
    if name == "string":
        return isinstance(instance, str)
    if name == "boolean":
        return isinstance(instance, bool)
    if name == "null":
        return instance is None
    if isinstance(instance, bool):
        return False
    if name == "integer":
        return isinstance(instance, int) or (isinstance(instance, float) and instance.is_integer())
    if name == "number":
        return isinstance(instance, (int, float))
    raise ValueError(f"unknown JSON schema type {name!r}")


def _equal(a: Any, b: Any) -> bool:
    # JSON equality: true is not 1, 2.0 is 2
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


def _valid(instance: Any, schema: dict[str, Any]) -> bool:
    return next(iter_schema_errors(instance, schema), None) is None


def iter_schema_errors(
    instance: Any, schema: dict[str, Any] = JOB_SCHEMA, path: tuple[Any, ...] = ()
) -> Iterator[SchemaError]:
    """Yield every violation of ``schema`` by ``instance`` (draft-7 semantics for
    the keywords used in ``JOB_SCHEMA``; an unknown keyword is a bug)."""

    def error(keyword: str, at: tuple[Any, ...] = path, value: Any = instance) -> SchemaError:
        return SchemaError(keyword, schema, value, deque(at), schema.get(keyword))

    for keyword, expected in schema.items():
        if keyword in ("$schema", "title", "description"):
            continue
        if keyword == "type":
            names = expected if isinstance(expected, list) else [expected]
            if not any(_is_type(instance, n) for n in names):
                yield error("type")
                # The other keywords of this schema only apply to the right type.
                return
        elif keyword == "enum":
            if not any(_equal(instance, option) for option in expected):
                yield error("enum")
        elif keyword == "const":
            if not _equal(instance, expected):
                yield error("const")
        elif keyword in ("minimum", "maximum"):
            if _is_type(instance, "number"):
                if (keyword == "minimum" and instance < expected) or (
                    keyword == "maximum" and instance > expected
                ):
                    yield error(keyword)
        elif keyword in ("minLength", "maxLength", "pattern"):
            if isinstance(instance, str):
                if keyword == "minLength" and len(instance) < expected:
                    yield error(keyword)
                elif keyword == "maxLength" and len(instance) > expected:
                    yield error(keyword)
                elif keyword == "pattern" and not re.search(expected, instance):
                    yield error(keyword)
        elif keyword in ("items", "minItems"):
            if isinstance(instance, list):
                if keyword == "minItems" and len(instance) < expected:
                    yield error(keyword)
                elif keyword == "items":
                    for index, item in enumerate(instance):
                        yield from iter_schema_errors(item, expected, (*path, index))
        elif keyword == "required":
            if isinstance(instance, dict) and any(key not in instance for key in expected):
                yield error("required")
        elif keyword == "minProperties":
            if isinstance(instance, dict) and len(instance) < expected:
                yield error(keyword)
        elif keyword == "properties":
            if isinstance(instance, dict):
                for key, subschema in expected.items():
                    if key in instance:
                        yield from iter_schema_errors(instance[key], subschema, (*path, key))
        elif keyword == "additionalProperties":
            if isinstance(instance, dict):
                extra = [k for k in instance if k not in schema.get("properties", {})]
                if expected is False:
                    if extra:
                        yield error(keyword)
                elif isinstance(expected, dict):
                    for key in extra:
                        yield from iter_schema_errors(instance[key], expected, (*path, key))
        elif keyword == "propertyNames":
            if isinstance(instance, dict):
                for key in instance:  # as jsonschema: the name's own error, at the mapping
                    yield from iter_schema_errors(key, expected, path)
        elif keyword == "anyOf":
            if not any(_valid(instance, option) for option in expected):
                yield error(keyword)
        elif keyword == "allOf":
            for subschema in expected:
                yield from iter_schema_errors(instance, subschema, path)
        elif keyword == "if":
            if _valid(instance, expected) and "then" in schema:
                yield from iter_schema_errors(instance, schema["then"], path)
        elif keyword == "then":
            continue
        else:
            raise ValueError(f"JSON schema keyword {keyword!r} is not implemented")
