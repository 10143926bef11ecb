"""How OpenPAI turns a role's ``commands`` into the command line a task runs.

Two components render ``<% ... %>`` tags, one after the other:

1. **rest-server** (``src/middlewares/v2/protocol.js``, ``protocolRender`` and
   ``render``; mustache.js with ``<%``/``%>`` delimiters). For each role it
   takes ``defaults.deployment``'s ``preCommands`` + ``commands`` +
   ``postCommands`` (only when that deployment names the role), trims each
   command, joins them with newlines, and renders the result with the context
   ``$parameters`` (the job's ``parameters``), ``$script`` / ``$output`` /
   ``$data`` (the whole prerequisite the role's ``script`` / ``output`` /
   ``data`` field names). Only plain name tags are rendered: ``[i]`` becomes
   ``.i``, the value is appended with JavaScript's string conversion (``true``,
   ``0.00001``, arrays as ``a,b``, objects as ``[object Object]``), a lookup that
   gives ``null``/``undefined`` is written back as ``<% name %>``; every other
   tag kind (sections with their contents, ``&``/``{{{``, comments, partials)
   is dropped, with mustache's standalone-line whitespace stripping. The result
   is trimmed. Secrets are deliberately not rendered here.
2. **openpai-runtime** (``src/common/utils.py`` ``render_string_with_secrets``,
   pystache), inside the container, only when the job has ``secrets``: every
   remaining name tag is rendered with the context ``$secrets`` (lists turned
   into ``{"0": ..., "1": ...}``), ``[i]`` → ``.i``; values go through Python's
   ``str()`` and are HTML-escaped (``html.escape(quote=True)``); tags it cannot
   resolve, including leftover ``$parameters`` tags, become empty.

Pure functions; the only error is a template mustache.js itself rejects.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from paijob.errors import PaijobError

# Patterns kept as text and compiled on first use (re caches them): a render whose job needs none
# of them compiles none, and each compile costs about 0.1 ms of start-up.
_INDEX = r"\[(\d+)\]"
_TAG_TYPES = "#^/>{&=!"
_UNDEFINED = object()


class TemplateError(PaijobError):
    """A command mustache.js refuses to parse (the rest-server then fails the submission)."""


# --------------------------------------------------------------------------- JavaScript values


def js_number(value: float | int) -> str:
    """``String(n)`` in JavaScript (ECMAScript Number::toString): ``1e-7``, ``0.00001``, ``1e+21``, ``1``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and abs(value) < 2**53:
        return str(value)
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    if number == 0:
        return "0"
    return _js_decimal(number)


def _js_decimal(number: float) -> str:
    """A finite, non-zero float as ``String(n)`` writes it: plain up to 21 digits, else with an exponent."""
    from decimal import Decimal  # only for a number with digits to place: not on every import

    sign, digit_tuple, exponent = Decimal(repr(abs(number))).as_tuple()
    digits = "".join(str(d) for d in digit_tuple).rstrip("0") or "0"
    assert isinstance(exponent, int)
    point = exponent + len("".join(str(d) for d in digit_tuple))  # value = 0.digits * 10**point
    k = len(digits)
    prefix = "-" if number < 0 else ""
    if k <= point <= 21:
        return prefix + digits + "0" * (point - k)
    if 0 < point <= 21:
        return prefix + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return prefix + "0." + "0" * (-point) + digits
    e = point - 1
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{prefix}{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"


def js_string(value: Any) -> str:
    """JavaScript's ``'' + value`` for a value js-yaml can produce."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return js_number(value)
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, Sequence):
        return ",".join("" if item is None else js_string(item) for item in value)
    if isinstance(value, datetime.datetime):
        when = value if value.tzinfo is None else value.astimezone(datetime.timezone.utc)
        return when.strftime("%a %b %d %Y %H:%M:%S GMT+0000 (Coordinated Universal Time)")
    if isinstance(value, datetime.date):
        return value.strftime("%a %b %d %Y 00:00:00 GMT+0000 (Coordinated Universal Time)")
    return "[object Object]"


def _js_property(value: Any, name: str) -> Any:
    """``value[name]`` in JavaScript, ``_UNDEFINED`` when absent."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if js_string(key) == name:
                return item
        return _UNDEFINED
    if isinstance(value, (str, list, tuple)):
        if name == "length":
            return len(value)
        if name.isdigit() and (name == "0" or not name.startswith("0")) and int(name) < len(value):
            return value[int(name)]
    return _UNDEFINED


def _mustache_lookup(context: Mapping[str, Any], name: str) -> Any:
    """mustache.js ``Context.lookup`` on a one-level context (functions are not possible here)."""
    if name == ".":
        return context
    if name.find(".") > 0:
        current: Any = context
        for part in name.split("."):
            if current is None or current is _UNDEFINED:
                return _UNDEFINED
            current = _js_property(current, part)
        return current
    return _js_property(context, name)


# --------------------------------------------------------------------------- mustache.js tokens


# not a dataclass, nor the class form: cheaper to create at import (render checks every job; ruff.toml's UP014)
_Token = NamedTuple("_Token", [
    ("kind", str),  # "text", "name", or a mustache tag type character
    ("value", str),
])


def _mustache_tokens(template: str) -> list[_Token]:
    """mustache.js ``parseTemplate`` with ``<%``/``%>``: top-level tokens, sections removed, whitespace stripped."""
    return _Scanner(template).scan()


class _Scanner:
    """One pass of mustache.js ``parseTemplate`` over a command (its state, split by what it reads)."""

    def __init__(self, template: str) -> None:
        self.template = template
        self.opening, self.closing = "<%", "%>"
        self.tokens: list[_Token | None] = []  # None: whitespace stripped from a standalone tag's line
        self.spaces: list[int] = []  # indexes of this line's whitespace tokens
        self.has_tag = self.non_space = False  # this line holds a tag / a character other than whitespace
        self.sections: list[str] = []  # open sections, innermost last
        self.pos = 0

    def scan(self) -> list[_Token]:
        template = self.template
        while self.pos < len(template):
            start = template.find(self.opening, self.pos)
            self._text(template[self.pos:] if start < 0 else template[self.pos:start])
            if start < 0:
                break
            self._tag(start + len(self.opening))
        if self.sections:
            raise TemplateError(f'Unclosed section "{self.sections[-1]}" in the command {template!r}')
        return _drop_section_contents([t for t in self.tokens if t is not None])

    def _text(self, text: str) -> None:
        for char in text:
            if char.isspace():
                self.spaces.append(len(self.tokens))
            else:
                self.non_space = True
            self.tokens.append(_Token("text", char))
            if char == "\n":
                self._end_line()

    def _end_line(self) -> None:
        """A line that held only tags and whitespace loses its whitespace (mustache's standalone tags)."""
        if self.has_tag and not self.non_space:
            for index in self.spaces:
                self.tokens[index] = None
        self.spaces.clear()
        self.has_tag = self.non_space = False

    def _tag(self, pos: int) -> None:
        """The tag whose opening delimiter ends just before ``pos``."""
        template = self.template
        pos = _skip_space(template, pos)
        kind = "name"
        if pos < len(template) and template[pos] in _TAG_TYPES:
            kind = template[pos]
            pos = _skip_space(template, pos + 1)
        if kind == "=":
            self._set_delimiters(pos)
            return
        terminator = "}" + self.closing if kind == "{" else self.closing
        end = template.find(terminator, pos)
        if end < 0:
            raise TemplateError(f"Unclosed tag at {len(template)} in the command {template!r} "
                                f"(a literal '{self.opening}' must not appear in OpenPAI commands)")
        value = template[pos:end].rstrip()
        self.pos = end + len(terminator)
        self.has_tag = True
        self._follow_sections(kind, value)
        self.tokens.append(_Token(kind, value))

    def _set_delimiters(self, pos: int) -> None:
        """``<%=[ ]=%>``: the tags from here on are written with new delimiters."""
        template = self.template
        end = template.find("=", pos)
        value = template[pos:end].strip() if end >= 0 else ""
        pos = end + 1 if end >= 0 else len(template)
        end_tag = template.find(self.closing, pos)
        if end_tag < 0:
            raise TemplateError(f"Unclosed tag at {len(template)} in the command {template!r}")
        self.pos = end_tag + len(self.closing)
        parts = value.split()
        if len(parts) != 2:
            raise TemplateError(f"Invalid tags: {value!r} in the command {template!r}")
        self.opening, self.closing = parts
        self.has_tag = True

    def _follow_sections(self, kind: str, value: str) -> None:
        template = self.template
        if kind in "#^":
            self.sections.append(value)
        elif kind == "/":
            if not self.sections:
                raise TemplateError(f'Unopened section "{value}" in the command {template!r}')
            if self.sections.pop() != value:
                raise TemplateError(f'Unclosed section before "{value}" in the command {template!r}')
        elif kind in ("name", "{", "&"):
            self.non_space = True


def _drop_section_contents(tokens: list[_Token]) -> list[_Token]:
    """Top-level tokens only: what sits between ``<% #x %>`` and ``<% /x %>`` is never rendered."""
    out: list[_Token] = []
    depth = 0
    for token in tokens:
        if token.kind in ("#", "^"):
            depth += 1
            continue
        if token.kind == "/":
            depth -= 1
            continue
        if depth == 0:
            out.append(token)
    return out


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


# --------------------------------------------------------------------------- the two renderings


def render_server(template: str, context: Mapping[str, Any]) -> str:
    """rest-server ``render``: name tags from ``context``, unresolved ones written back, the rest dropped."""
    if "<%" not in template:
        # no tag (a change of delimiters is a tag too): mustache.js gives the text back, and the
        # scan, one token per character, would be most of what validating a usual job costs
        return template.strip()
    out = []
    for token in _mustache_tokens(template):
        if token.kind == "text":
            out.append(token.value)
        elif token.kind == "name":
            name = re.sub(_INDEX, r".\1", token.value)
            value = _mustache_lookup(context, name)
            out.append(f"<% {name} %>" if value is None or value is _UNDEFINED else js_string(value))
    return "".join(out).strip()


def _runtime_secret_dict(value: Any) -> Any:
    """openpai-runtime ``_convert_to_dict``: lists become ``{"0": ...}`` (their items are left as they are)."""
    if isinstance(value, list):
        return {str(i): item for i, item in enumerate(value)}
    if isinstance(value, Mapping):
        return {key: _runtime_secret_dict(item) for key, item in value.items()}
    return value


_PYSTACHE_TAG = r"<%\s*(?P<kind>[!>&/#^]?)\s*(?P<key>[\s\S]+?)\s*%>"  # compiled on first use, as _INDEX


def render_runtime(command: str, secrets: Any) -> str:
    """openpai-runtime ``render_string_with_secrets``: ``$secrets`` tags, HTML-escaped; others blanked.

    Nothing happens when the job has no secrets. Only what the rest-server left
    is seen here: text and ``<% name %>`` tags.
    """
    if not secrets:
        return command
    context = {"$secrets": _runtime_secret_dict(secrets)}

    def value(match: re.Match[str]) -> str:
        if match.group("kind"):
            return ""
        key = re.sub(_INDEX, r".\1", match.group("key"))
        found: Any = context
        for part in key.split("."):
            if isinstance(found, Mapping) and part in found:
                found = found[part]
            else:
                return ""
        import html  # only where a tag is filled in: not on every import

        return html.escape(found if isinstance(found, str) else str(found), quote=True)

    return re.sub(_PYSTACHE_TAG, value, command)


# --------------------------------------------------------------------------- a role's command


def _prerequisite(job: Mapping[str, Any], kind: str, name: Any) -> Any:
    for item in job.get("prerequisites") or ():
        if isinstance(item, Mapping) and item.get("type") == kind and item.get("name") == name:
            return item
    return None


def role_commands(job: Mapping[str, Any], role: str) -> list[str]:
    """The role's ``commands`` with the default deployment's ``preCommands`` / ``postCommands`` around them."""
    spec = (job.get("taskRoles") or {})[role]
    commands = list(spec.get("commands") or ())
    defaults = job.get("defaults") or {}
    wanted = defaults.get("deployment") if isinstance(defaults, Mapping) else None
    if wanted is None:
        return commands
    for deployment in job.get("deployments") or ():
        if isinstance(deployment, Mapping) and deployment.get("name") == wanted:
            roles = deployment.get("taskRoles") or {}
            if role in roles:
                mine = roles[role] or {}
                commands = list(mine.get("preCommands") or ()) + commands + list(mine.get("postCommands") or ())
            break
    return commands


def role_entrypoint(job: Mapping[str, Any], role: str) -> str:
    """What the rest-server stores as the role's ``entrypoint`` (the runtime's ``USER_CMD``)."""
    spec = (job.get("taskRoles") or {})[role]
    joined = "\n".join(str(command).strip() for command in role_commands(job, role))
    context: dict[str, Any] = {}
    for key, value in (("$parameters", job.get("parameters")),
                       ("$script", _prerequisite(job, "script", spec.get("script"))),
                       ("$output", _prerequisite(job, "output", spec.get("output"))),
                       ("$data", _prerequisite(job, "data", spec.get("data")))):
        if value is not None:
            context[key] = value
    return render_server(joined, context)


def task_command(job: Mapping[str, Any], role: str) -> str:
    """The command a task of ``role`` finally runs: server rendering, then the runtime's secrets pass."""
    return render_runtime(role_entrypoint(job, role), job.get("secrets"))
