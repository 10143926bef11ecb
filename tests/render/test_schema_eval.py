"""One JSON-schema evaluator serves the server's job schema (ajv's JavaScript view of values)
and the templates' values schemas (Python's view): only the dialect differs."""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path
from typing import Any

import pytest
from render_helpers import run_cli

from paijob.openpai.schemaeval import AJV, PYTHON, Dialect, is_valid, iter_errors

ROOT = Path(__file__).resolve().parents[2]

# (schema, value, ajv's verdict, Python jsonschema's verdict)
DIALECT_CASES = [
    ({"type": "integer"}, float("inf"), True, False),  # a JavaScript number with an integral value
    ({"type": "number"}, float("nan"), True, False),
    ({"type": "integer"}, 3.0, True, True),
    ({"type": "object"}, datetime.date(2001, 12, 14), True, False),  # js-yaml makes a Date
    ({"required": ["a"]}, datetime.date(2001, 12, 14), False, True),  # a Date is an object without "a"
    ({"maxLength": 1}, "😀", False, True),  # two UTF-16 code units, one code point
    ({"maxLength": 2}, "é😀", False, True),  # é is one unit in both views
    ({"maxLength": 3}, "é😀", True, True),
    ({"maxLength": 1}, "\ud800", True, True),  # a lone surrogate (YAML can escape one) is one unit
    ({"pattern": "^a$"}, "a\n", False, True),  # JavaScript's $ does not match before a final newline
    ({"type": "boolean"}, 1, False, False),
    ({"enum": [1]}, True, False, False),  # JSON: true is not 1
]


@pytest.mark.parametrize(("schema", "value", "ajv", "python"), DIALECT_CASES)
def test_the_dialect_decides_only_how_values_look(schema: dict[str, Any], value: Any, ajv: bool, python: bool) -> None:
    assert is_valid(value, schema, AJV) is ajv
    assert is_valid(value, schema, PYTHON) is python


def test_python_verdicts_agree_with_jsonschema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    for schema, value, _, python in DIALECT_CASES:
        # A Date is not JSON data; NaN and infinities are numbers to jsonschema but not to paijob
        # (a value of .nan or .inf means nothing in a job, so values schemas refuse it).
        if not isinstance(value, datetime.date) and (not isinstance(value, float) or math.isfinite(value)):
            assert jsonschema.Draft7Validator(schema).is_valid(value) is python, (schema, value)


def test_a_type_check_is_pluggable() -> None:
    strict = Dialect(is_type=lambda v, name: name == "string" and type(v) is str,
                     properties=lambda v: None, length=len, search=lambda p, t: True)
    assert [e.validator for e in iter_errors(1, {"type": "string"}, strict)] == ["type"]
    assert is_valid("x", {"type": "string", "minLength": 1}, strict)


def test_an_unknown_keyword_is_refused_not_skipped() -> None:
    with pytest.raises(ValueError, match="keyword 'if' is not supported"):
        list(iter_errors({}, {"if": {}}, PYTHON))


def test_boolean_schemas() -> None:
    assert is_valid({"a": 1}, {"properties": {"a": True}}, PYTHON)
    [error] = iter_errors({"a": 1}, {"properties": {"a": False}}, AJV)
    assert (error.validator, list(error.absolute_path)) == ("false", ["a"])


def test_a_user_values_schema_may_use_the_job_schemas_keywords(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "t.yaml.j2").write_text((ROOT / "tests/render/golden/ddp-1x1.yaml").read_text())
    (tmp_path / "t.values.schema.json").write_text(json.dumps({
        "type": "object", "required": ["lr"],
        "properties": {"lr": {"type": "number"}, "tag": {"type": "string", "maxLength": 3}},
    }))
    code, _, err = run_cli(capsys, "render", str(tmp_path / "t.yaml.j2"), "--set", "tag=long")
    assert code == 2
    assert "the values must have the key(s) lr" in err
    assert "value 'tag' must be at most 3 characters long, given the string 'long'" in err
