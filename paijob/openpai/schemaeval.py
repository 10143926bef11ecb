"""JSON Schema (draft 7) evaluation: one evaluator for the job schema and the values schemas.

paijob checks two kinds of schema, which differ only in how they see values:

* the rest-server's job schema (``paijob.validate.schema``), which OpenPAI
  evaluates with ajv 6 on JavaScript values: :data:`AJV`. A number with an
  integral value (and ±Infinity) is an ``integer``; a date (``2001-12-14``
  becomes a JavaScript Date) or bytes are an ``object`` with no properties;
  strings are measured in UTF-16 code units; a pattern's ``$`` does not match
  before a final newline (:func:`paijob.openpai.names.js_match`).
* a template's values schema (``paijob.render.values_schema``), evaluated on
  the Python values as the ``jsonschema`` package would, except that NaN and
  the infinities are not numbers (``.inf`` means nothing in a job): :data:`PYTHON`.
  Only a mapping is an ``object``, lengths count code points, patterns are
  Python's ``re.search``.

A :class:`Dialect` is that view (type test, an object's properties, string
length, pattern search); :func:`iter_errors` is the evaluator, the same for
both. It is written here rather than imported from ``jsonschema``, whose
# No `from __future__ import annotations` here: typing.NamedTuple turns each string annotation
# into a ForwardRef, compiling it, at import; real annotations spare every render ~60 us per field.
import would cost more than the rest of ``paijob render``, and because no
library takes ajv's types. Keywords: ``type enum minimum maximum minLength
maxLength pattern items minItems required minProperties properties
patternProperties additionalProperties propertyNames oneOf`` and boolean
schemas; annotations are skipped; any other keyword is a ``ValueError``
(never silently passed).
"""

import datetime
import math
import re
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from paijob.openpai.names import js_match

Path = tuple[Any, ...]


# How a schema sees values: what differs between ajv's JavaScript and Python's jsonschema.
# A NamedTuple, not a dataclass (~0.5 ms less start-up for every render, which validates), in the
# functional form (less again: ruff.toml's UP014), as SchemaError.
Dialect = NamedTuple("Dialect", [
    ("is_type", Callable[[Any, str], bool]),  # does the value have this JSON type ("integer", "object", ...)?
    ("properties", Callable[[Any], Mapping[Any, Any] | None]),  # an object's properties; None if not an object
    ("length", Callable[[str], int]),  # a string's length for minLength / maxLength
    ("search", Callable[[str, str], bool]),  # does the pattern match somewhere in the text?
])


# One violation; the parts of ``jsonschema.ValidationError`` that paijob's messages use.
SchemaError = NamedTuple("SchemaError", [
    ("validator", str),  # the failing keyword: "required", "type", ...
    ("schema", dict[str, Any]),  # the (sub)schema holding that keyword
    ("instance", Any),
    ("absolute_path", deque[Any]),
    ("validator_value", Any),
])


# --------------------------------------------------------------------------- the two dialects


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


def is_python_type(value: Any, name: str) -> bool:
    """The draft-7 type test on Python data: bool is not a number, and neither are NaN and ±inf."""
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if isinstance(value, bool):
        return False
    if name == "integer":
        return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer())
    if name == "number":
        return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
    raise ValueError(f"unknown JSON schema type {name!r}")


def _utf16_length(text: str) -> int:
    """JavaScript's ``length``: UTF-16 code units (a character outside the BMP counts 2).

    Counted rather than encoded: the UTF-16 codec's first use costs every render a module import.
    """
    if text.isascii():
        return len(text)
    return len(text) + sum(1 for char in text if ord(char) > 0xFFFF)


def _python_mapping(value: Any) -> Mapping[Any, Any] | None:
    return value if isinstance(value, dict) else None


def _python_search(pattern: str, text: str) -> bool:
    return re.search(pattern, text) is not None


AJV = Dialect(is_type=is_js_type, properties=js_object, length=_utf16_length, search=js_match)
PYTHON = Dialect(is_type=is_python_type, properties=_python_mapping, length=len, search=_python_search)


# --------------------------------------------------------------------------- the evaluator

_ANNOTATIONS = {"$schema", "$id", "title", "description", "default", "examples", "$comment", "type"}


def iter_errors(instance: Any, schema: Any, dialect: Dialect, path: Path = ()) -> Iterator[SchemaError]:
    """Every violation of ``schema`` by ``instance`` as ``dialect`` sees values, in schema order.

    A value of the wrong ``type`` gets that one error: the other keywords of the
    (sub)schema only apply to the right type.
    """
    if schema is True:
        return
    if schema is False:
        yield SchemaError("false", {}, instance, deque(path), False)
        return
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(dialect.is_type(instance, str(name)) for name in names):
            yield _error("type", schema, instance, path)
            return
    for keyword, expected in schema.items():
        check = _KEYWORDS.get(keyword)
        if check is None:
            if keyword not in _ANNOTATIONS:
                raise ValueError(f"JSON schema keyword {keyword!r} is not supported here")
            continue
        yield from check(instance, expected, schema, path, dialect)


def is_valid(instance: Any, schema: Any, dialect: Dialect) -> bool:
    return next(iter_errors(instance, schema, dialect), None) is None


def _error(keyword: str, schema: dict[str, Any], instance: Any, path: Path) -> SchemaError:
    return SchemaError(keyword, schema, instance, deque(path), schema.get(keyword))


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1, 2.0 is 2."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


# Each keyword's check: (instance, the keyword's argument, the schema holding it, path, dialect) -> errors.
Check = Callable[[Any, Any, dict[str, Any], Path, Dialect], Iterator[SchemaError]]


def _enum(instance: Any, expected: Any, schema: dict[str, Any], path: Path, dialect: Dialect) -> Iterator[SchemaError]:
    if not any(_equal(instance, option) for option in expected):
        yield _error("enum", schema, instance, path)


def _minimum(instance: Any, expected: Any, schema: dict[str, Any], path: Path, dialect: Dialect) -> Iterator[SchemaError]:
    if dialect.is_type(instance, "number") and instance < expected:
        yield _error("minimum", schema, instance, path)


def _maximum(instance: Any, expected: Any, schema: dict[str, Any], path: Path, dialect: Dialect) -> Iterator[SchemaError]:
    if dialect.is_type(instance, "number") and instance > expected:
        yield _error("maximum", schema, instance, path)


def _min_length(
    instance: Any, expected: Any, schema: dict[str, Any], path: Path, dialect: Dialect
) -> Iterator[SchemaError]:
    if isinstance(instance, str) and dialect.length(instance) < expected:
        yield _error("minLength", schema, instance, path)


def _max_length(
    instance: Any, expected: Any, schema: dict[str, Any], path: Path, dialect: Dialect
) -> Iterator[SchemaError]:
    if isinstance(instance, str) and dialect.length(instance) > expected:
        yield _error("maxLength", schema, instance, path)


def _pattern(instance: Any, expected: Any, schema: dict[str, Any], path: Path, dialect: Dialect) -> Iterator[SchemaError]:
    if isinstance(instance, str) and not dialect.search(expected, instance):
        yield _error("pattern", schema, instance, path)


def _items(instance: Any, expected: Any, schema: dict[str, Any], path: Path, dialect: Dialect) -> Iterator[SchemaError]:
    if isinstance(instance, list):
        for index, item in enumerate(instance):
            yield from iter_errors(item, expected, dialect, (*path, index))


def _min_items(instance: Any, expected: Any, schema: dict[str, Any], path: Path, dialect: Dialect) -> Iterator[SchemaError]:
    if isinstance(instance, list) and len(instance) < expected:
        yield _error("minItems", schema, instance, path)


def _required(instance: Any, expected: Any, schema: dict[str, Any], path: Path, dialect: Dialect) -> Iterator[SchemaError]:
    props = dialect.properties(instance)
    if props is not None and any(key not in props for key in expected):
        yield _error("required", schema, instance, path)


def _min_properties(
    instance: Any, expected: Any, schema: dict[str, Any], path: Path, dialect: Dialect
) -> Iterator[SchemaError]:
    props = dialect.properties(instance)
    if props is not None and len(props) < expected:
        yield _error("minProperties", schema, instance, path)


def _properties(instance: Any, expected: Any, schema: dict[str, Any], path: Path, dialect: Dialect) -> Iterator[SchemaError]:
    props = dialect.properties(instance) or {}
    for key, subschema in expected.items():
        if key in props:
            yield from iter_errors(props[key], subschema, dialect, (*path, key))


def _pattern_properties(
    instance: Any, expected: Any, schema: dict[str, Any], path: Path, dialect: Dialect
) -> Iterator[SchemaError]:
    props = dialect.properties(instance) or {}
    for pattern, subschema in expected.items():
        for key, value in props.items():
            if isinstance(key, str) and dialect.search(pattern, key):
                yield from iter_errors(value, subschema, dialect, (*path, key))


def _is_additional(key: Any, schema: dict[str, Any], dialect: Dialect) -> bool:
    if key in schema.get("properties", {}):
        return False
    return not any(isinstance(key, str) and dialect.search(p, key) for p in schema.get("patternProperties", {}))


def _additional_properties(
    instance: Any, expected: Any, schema: dict[str, Any], path: Path, dialect: Dialect
) -> Iterator[SchemaError]:
    props = dialect.properties(instance) or {}
    extra = [key for key in props if _is_additional(key, schema, dialect)]
    if expected is False and extra:
        yield _error("additionalProperties", schema, instance, path)
    elif isinstance(expected, dict):
        for key in extra:
            yield from iter_errors(props[key], expected, dialect, (*path, key))


def _property_names(
    instance: Any, expected: Any, schema: dict[str, Any], path: Path, dialect: Dialect
) -> Iterator[SchemaError]:
    for key in dialect.properties(instance) or {}:  # as jsonschema: the key's own error, at the mapping's path
        yield from iter_errors(key, expected, dialect, path)


def _discriminated(instance: Any, options: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ``oneOf`` option whose ``type`` enum names the instance's ``type`` (prerequisites)."""
    kind = instance.get("type") if isinstance(instance, dict) else None
    for option in options:
        if kind in option.get("properties", {}).get("type", {}).get("enum", ()):
            return option
    return None


def _one_of(instance: Any, expected: Any, schema: dict[str, Any], path: Path, dialect: Dialect) -> Iterator[SchemaError]:
    if sum(is_valid(instance, option, dialect) for option in expected) == 1:
        return
    option = _discriminated(instance, expected)
    if option is None:
        yield _error("oneOf", schema, instance, path)
    else:  # the errors of the kind the instance says it is, not of every kind
        yield from iter_errors(instance, option, dialect, path)


_KEYWORDS: dict[str, Check] = {
    "enum": _enum,
    "minimum": _minimum,
    "maximum": _maximum,
    "minLength": _min_length,
    "maxLength": _max_length,
    "pattern": _pattern,
    "items": _items,
    "minItems": _min_items,
    "required": _required,
    "minProperties": _min_properties,
    "properties": _properties,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "propertyNames": _property_names,
    "oneOf": _one_of,
}
