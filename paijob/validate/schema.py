"""JSON schema (draft 7) of an OpenPAI protocol-v2 job: the one the rest-server enforces.

Transcribed from rest-server ``src/config/v2/protocol.js`` (ajv 6,
``ajv-merge-patch``; the ``$merge`` of ``base.json`` into each prerequisite
kind is written out here), quirks included, because ``paijob validate``
must accept what the server accepts:

* ``taskRoles`` and ``ports`` have no ``type``: a non-mapping passes the
  schema (the server then fails on it; ``paijob.validate.report`` reports that);
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

``iter_schema_errors`` evaluates it with :mod:`paijob.openpai.schemaeval`'s
evaluator in ajv's JavaScript view of values (:data:`~paijob.openpai.schemaeval.AJV`):
a number with an integral value (and ±Infinity) is an ``integer``, and a date
(``2001-12-14``, a JavaScript Date) is an ``object`` with no properties.
Rules that relate fields (prerequisite names, deployments, hived) live in
``paijob.validate.report``, as they live in the server's middleware.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from paijob.openpai.names import IDENTIFIER_PATTERN, NAME_PATTERN
from paijob.openpai.schemaeval import AJV, SchemaError, iter_errors

__all__ = ["IDENTIFIER_PATTERN", "JOB_SCHEMA", "NAME_PATTERN", "TOP_LEVEL_KEYS", "SchemaError", "iter_schema_errors"]

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


def iter_schema_errors(instance: Any, schema: Any = JOB_SCHEMA, path: tuple[Any, ...] = ()) -> Iterator[SchemaError]:
    """Every violation of ``schema`` (the job schema unless told) by ``instance``, as ajv sees values."""
    return iter_errors(instance, schema, AJV, path)
