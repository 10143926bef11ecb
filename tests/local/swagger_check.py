"""Checks an answer against the OpenPAI REST swagger (2.2.7) response schema of its path and status."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

SWAGGER_CANDIDATES = [
    Path(__file__).resolve().parent / "rest-server-swagger.yaml",
    Path(__file__).resolve().parents[3] / "shared" / "reference" / "openpai" / "rest-server-swagger.yaml",
]


def load_swagger() -> dict[str, Any]:
    for path in SWAGGER_CANDIDATES:
        if path.is_file():
            data: dict[str, Any] = yaml.safe_load(path.read_text())
            return data
    pytest.skip("the OpenPAI swagger is not available")
    raise AssertionError


def _to_json_schema(node: Any) -> Any:
    """OpenAPI 3.0 -> JSON schema: ``nullable: true`` becomes a null type; examples dropped."""
    if isinstance(node, list):
        return [_to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _to_json_schema(value) for key, value in node.items() if key not in ("example", "examples")}
    if out.pop("nullable", False):
        if "type" in out:
            out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def check(swagger: dict[str, Any], path: str, method: str, status: int, body: Any) -> None:
    """Validate ``body`` against the swagger's schema for that response, $refs resolved.

    An error status the path does not list (401 on most paths) is checked against
    the shared response of its code (``components/responses/UnauthorizedUserError``).
    One inconsistency of the swagger itself is allowed: error codes its responses
    name (``description: NoJobError or NoTagError``; NoTaskError, NoTaskLogError)
    but its ``Response.code`` enum leaves out; rest-server sends them all.
    """
    responses = swagger["paths"][path][method]["responses"]
    code = body.get("code") if isinstance(body, dict) else None
    if str(status) not in responses and code in swagger["components"]["responses"]:
        # a status the path does not list (401 on most): the shared response of that error code
        responses = {str(status): {"$ref": f"#/components/responses/{code}"}}
    response = responses[str(status)]
    named = {response.get("description", "")}
    while "$ref" in response:  # "#/components/responses/X"
        name = response["$ref"].split("/")[-1]
        named.add(name)
        response = swagger["components"]["responses"][name]
        named.add(response.get("description", ""))
    enum = swagger["components"]["schemas"]["Response"]["properties"]["code"]["enum"]
    if isinstance(body, dict) and body.get("code") not in (None, *enum):
        assert any(body["code"] in text.replace(",", " ").split() for text in named), (
            f"error code {body['code']!r} is neither in the swagger's Response enum nor named by the response")
        body = {key: value for key, value in body.items() if key != "code"}
    schema = response["content"]["application/json"]["schema"]
    root = _to_json_schema(copy.deepcopy(swagger))
    root.pop("paths")
    resolver_root = {"components": root["components"], **_to_json_schema(schema)}
    jsonschema.validate(body, resolver_root)
