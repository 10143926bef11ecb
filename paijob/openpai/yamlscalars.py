"""A plain YAML scalar's value as OpenPAI's server reads it (js-yaml 3) and as YAML 1.1 reads it (PyYAML, Helm).

``resolve_js_yaml`` is js-yaml 3's default safe schema (the rules are listed in
:mod:`paijob.openpai.jsyaml`, which reads whole documents with it); ``resolve_yaml11``
is PyYAML's, for values files; ``yaml11_difference`` says when the two disagree.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

import yaml

MAX_INT_DIGITS = 4000  # longer integer literals are read as JavaScript reads them: ±Infinity

TAG = "tag:yaml.org,2002:"

Timestamp = (datetime.date, datetime.datetime)  # what a YAML timestamp becomes


def js_date(text: str) -> datetime.date | datetime.datetime:
    """A YAML timestamp as js-yaml 3 builds its Date: ``Date.UTC`` with JavaScript's rollover
    (``2001-02-30`` is March 2nd); a date alone is a ``date``, a time makes an aware ``datetime``."""
    match = re.match(_TIMESTAMP_PARTS, text)
    assert match is not None
    year, month, day = int(match["y"]), int(match["m"]), int(match["d"])
    base = datetime.datetime(year + (month - 1) // 12, (month - 1) % 12 + 1, 1, tzinfo=datetime.timezone.utc)
    if match["H"] is None:
        return (base + datetime.timedelta(days=day - 1)).date()
    fraction = (match["f"] or "")[:3].ljust(3, "0")
    offset = 0
    if match["tz"] and match["tz"] != "Z":
        sign = -1 if match["tz"][0] == "-" else 1
        hours, _, minutes = match["tz"][1:].partition(":")
        offset = sign * (int(hours) * 60 + int(minutes or 0))
    return base + datetime.timedelta(
        days=day - 1,
        hours=int(match["H"]),
        minutes=int(match["M"]) - offset,
        seconds=int(match["S"]),
        milliseconds=int(fraction),
    )



def _js_number_value(value: float) -> int | float:
    """A double as paijob keeps it: integral values below 1e21 become ``int`` (as JS prints them)."""
    if math.isfinite(value) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    return value


# --------------------------------------------------------------------------- js-yaml 3 scalars

_NULLS = {"~", "null", "Null", "NULL", ""}
_TRUE = {"true", "True", "TRUE"}
_FALSE = {"false", "False", "FALSE"}
# The patterns below stay text until a scalar that may match is read (re.match compiles and caches
# them then): most of a job's scalars are words, and every render loads a job. A float starts with
# one of _FLOAT_START; a date or timestamp with four digits and a dash.
_FLOAT_START = "+-.0123456789"
_FLOAT = (
    r"^(?:[-+]?(?:0|[1-9][0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?"
    r"|\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*"
    r"|[-+]?\.(?:inf|Inf|INF)"
    r"|\.(?:nan|NaN|NAN))$"
)
_DATE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
_TIMESTAMP = (
    r"^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}"
    r"(?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?$"
)
_TIMESTAMP_PARTS = (
    r"^(?P<y>[0-9]{4})-(?P<m>[0-9]{1,2})-(?P<d>[0-9]{1,2})"
    r"(?:(?:[Tt]|[ \t]+)(?P<H>[0-9]{1,2}):(?P<M>[0-9]{2}):(?P<S>[0-9]{2})(?:\.(?P<f>[0-9]*))?"
    r"(?:[ \t]*(?P<tz>Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?)?$"
)
_BASE60 = r"^(:[0-5]?[0-9])+$"


def is_js_int(text: str) -> bool:
    """js-yaml 3 ``resolveYamlInteger``, transcribed."""
    body = text[1:] if text[:1] in ("-", "+") else text
    if not body:
        return False
    if body[0] == "0":
        if len(body) == 1:
            return True
        kind, digits = body[1], body[2:]
        allowed = {"b": "01", "x": "0123456789abcdefABCDEF"}.get(kind)
        if allowed is None:
            digits, allowed = body[1:], "01234567"
        stripped = digits.replace("_", "")
        return bool(stripped) and all(c in allowed for c in stripped) and not digits.endswith("_")
    if body[0] == "_":
        return False
    head, colon, tail = body.partition(":")
    stripped = head.replace("_", "")
    if not stripped or not stripped.isascii() or not stripped.isdigit() or head.endswith("_"):
        return False
    return not colon or bool(re.match(_BASE60, ":" + tail))


def _js_int(text: str) -> int | float:
    """js-yaml 3 ``constructYamlInteger``; numbers too long for a double are ±Infinity as in JS."""
    value = text.replace("_", "")
    sign = -1 if value[:1] == "-" else 1
    if value[:1] in ("-", "+"):
        value = value[1:]
    if len(value) > MAX_INT_DIGITS:
        return sign * math.inf
    if value == "0":
        return 0
    if value[0] == "0":
        if value[1] == "b":
            number = int(value[2:], 2)
        elif value[1] == "x":
            number = int(value[2:], 16)
        else:
            number = int(value, 8)
    elif ":" in value:
        number = 0
        for part in value.split(":"):
            number = number * 60 + int(part)
    else:
        number = int(value)
    if number < 2**53:
        return sign * number
    try:
        return _js_number_value(float(sign * number))  # a JavaScript double, as the server has it
    except OverflowError:
        return sign * math.inf


def _js_float(text: str) -> int | float:
    value = text.replace("_", "").lower()
    sign = -1.0 if value[:1] == "-" else 1.0
    if value[:1] in ("-", "+"):
        value = value[1:]
    if value == ".inf":
        return sign * math.inf
    if value == ".nan":
        return math.nan
    if ":" in value:
        number = 0.0
        for part in value.split(":"):
            number = number * 60 + float(part)
        return _js_number_value(sign * number)
    return _js_number_value(sign * float(value))


def resolve_js_yaml(text: str) -> Any:
    """A plain scalar as js-yaml 3's default safe schema reads it (null, bool, int, float, date)."""
    if text in _NULLS:
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if is_js_int(text):
        return _js_int(text)
    if text[0] in _FLOAT_START and re.match(_FLOAT, text) and not text.endswith("_"):
        return _js_float(text)
    if text[:4].isdigit() and text[4:5] == "-" and (re.match(_DATE, text) or re.match(_TIMESTAMP, text)):
        return js_date(text)
    return text


_YAML11_RESOLVER = yaml.resolver.Resolver()
_YAML11_CONSTRUCTOR = yaml.constructor.SafeConstructor()


def yaml11_tag(text: str) -> str:
    """The tag PyYAML (YAML 1.1) gives ``text`` written plain: ``TAG + "str"`` when it reads back as that text."""
    return _YAML11_RESOLVER.resolve(yaml.ScalarNode, text, (True, False))


def resolve_yaml11(text: str) -> Any:
    """A plain scalar as PyYAML (YAML 1.1) reads it; dates become :class:`Timestamp`."""
    tag = yaml11_tag(text)
    if tag == TAG + "str":
        return text
    if tag in (TAG + "null", TAG + "bool") or _is_decimal(tag, text):
        return _plain_yaml11(tag, text)
    if tag == TAG + "timestamp":
        try:
            return _YAML11_CONSTRUCTOR.construct_object(yaml.ScalarNode(tag, text))
        except ValueError:
            return text
    if tag == TAG + "int" and len(text) > MAX_INT_DIGITS:
        return -math.inf if text.startswith("-") else math.inf
    try:
        return _YAML11_CONSTRUCTOR.construct_object(yaml.ScalarNode(tag, text))
    except (yaml.YAMLError, ValueError):
        return text


def _is_decimal(tag: str, text: str) -> bool:
    return tag == TAG + "int" and text.isdecimal() and (text == "0" or text[0] != "0") and len(text) <= MAX_INT_DIGITS


def _plain_yaml11(tag: str, text: str) -> Any:
    """The usual non-strings without PyYAML's constructor machinery (~12 k instructions a value): what
    its construct_yaml_null / _bool / _int give for a null, a boolean or a decimal integer."""
    if tag == TAG + "null":
        return None
    if tag == TAG + "bool":
        return _YAML11_CONSTRUCTOR.bool_values[text.lower()]
    return int(text)


def yaml11_difference(text: str) -> tuple[Any, Any] | None:
    """``(jsyaml, yaml11)`` readings of a plain scalar when they differ, else None."""
    new, old = resolve_js_yaml(text), resolve_yaml11(text)
    if type(new) is type(old) and (new == old or (new != new and old != old)):
        return None
    if isinstance(new, (int, float)) and isinstance(old, (int, float)) and not isinstance(
        new, bool
    ) and not isinstance(old, bool) and new == old:
        return None  # 1.0 vs 1: the same JavaScript number
    return new, old
