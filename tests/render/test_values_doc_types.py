"""`paijob templates show NAME --values` types each value as its values schema declares it.

A null default says nothing of what else a value takes: `shmMB` is an int or
null, not "any (null)".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paijob.render.values_doc import describe, type_name

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
BUILT_INS = sorted(p.name.removesuffix(".yaml.j2") for p in TEMPLATES.glob("[a-z]*.yaml.j2"))


def test_nullable_values_of_ddp_name_their_type() -> None:
    types = {doc.name: doc.type for doc in describe("ddp")}
    assert types["shmMB"] == "int or null"
    assert types["precision"] == "string or null"
    assert types["processesPerNode"] == "int or null"
    assert types["localRankArg"] == "null or string"  # an enum: the types of what it lists
    assert types["instances"] == "int"


@pytest.mark.parametrize("template", BUILT_INS)
def test_every_built_in_value_has_its_schema_type(template: str) -> None:
    properties = json.loads((TEMPLATES / f"{template}.values.schema.json").read_text())["properties"]
    for doc in describe(template):
        assert "any" not in doc.type, (template, doc.name, doc.type)
        if doc.name in properties and "null" in properties[doc.name].get("type", []):
            assert doc.type.endswith("or null"), (template, doc.name, doc.type)


def test_without_a_schema_a_null_default_is_any() -> None:
    assert type_name(None) == "any"
    assert type_name(3) == "int"
