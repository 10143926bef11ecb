"""Job YAML read as OpenPAI's rest-server reads it, with bounds and line numbers.

Source: rest-server ``middlewares/v2/protocol.js`` parses the POSTed text with
``yaml.safeLoad`` of js-yaml 3 (``package.json``: ``js-yaml ^3.13.1``; the
function no longer exists in js-yaml 4), after express's ``bodyParser.text``
(``config/express.js``, default limit 100 kB). js-yaml 3's default safe schema
is YAML 1.2's core schema with a few YAML 1.1 leftovers, and a JavaScript
object model. Concretely (``js-yaml/lib/js-yaml/type/*.js``):

* booleans are only ``true``/``True``/``TRUE``/``false``/``False``/``FALSE``:
  ``yes``, ``no``, ``on``, ``off``, ``y``, ``n`` are strings;
* integers: decimal with ``_`` separators, ``0x``/``0b``, legacy octal
  ``017`` (15) and base 60 ``1:30`` (90); ``0o17`` is a *string*;
* floats need no dot: ``1e3`` is 1000; ``.inf``, ``.nan``;
* ``2001-12-14`` (and full timestamps) are Date objects, not strings;
* every number is a JavaScript double, so ``1.0`` *is* the integer 1 (ajv's
  ``type: integer`` accepts it); this loader returns such numbers as ``int``
  so that later checks and ``str()`` agree with JavaScript;
* mapping keys are strings (``1: a`` has the key ``"1"``) and a repeated key
  is an error ("duplicated mapping key"), except keys that came from ``<<``;
  a key ``__proto__`` is lost (the assignment sets the object's prototype).

Bounds (js-yaml shares aliased objects, so it does not blow up itself, but
the server's later JSON serialisation and paijob's own walks would): the text
size, the nesting depth, and the number of values after alias expansion are
capped, a scalar weighing one value per ``CHARS_PER_VALUE`` characters besides
(so aliases of a long string cannot turn a 90 kB job into a 370 MB answer); a recursive alias (``a: &a [*a]``) and non-UTF-8 bytes are refused.
Each refusal is a :class:`YamlError` (a ``PaijobError``: exit 2, one line).

``load_values`` reads Helm-style values files with the same bounds and line
numbers but YAML 1.1 typing (PyYAML's: ``enabled: no`` is false), because
values feed Jinja templates, where the string ``"no"`` would be truthy; the
rendered job is then read with ``load_job`` like any other job. Each plain scalar
is typed by :mod:`paijob.openpai.yamlscalars` (one rule set or the other).
"""

# No `from __future__ import annotations` here: typing.NamedTuple turns each string annotation
# into a ForwardRef, compiling it, at import; real annotations spare every render ~60 us per field.
import base64
from collections.abc import Callable, Hashable, Iterator
from typing import Any, NamedTuple

import yaml

from paijob.errors import PaijobError
from paijob.openpai.markers import js_number, js_string
from paijob.openpai.yamlscalars import (
    TAG,
    Timestamp,
    is_js_int,
    resolve_js_yaml,
    resolve_yaml11,
    yaml11_difference,
)

__all__ = ["js_number", "js_string"]  # JavaScript's String(x), defined once in tags

Path = tuple[Hashable, ...]

MAX_TEXT_BYTES = 4 * 1024 * 1024  # far above any job; the server takes 100 kB
SERVER_BODY_LIMIT = 100 * 1024  # express bodyParser.text() default limit: 413 above it
MAX_DEPTH = 256  # real jobs nest < 10 deep; libyaml/CPython recursion is not unbounded
MAX_VALUES = 200_000  # values after alias expansion (a job has a few hundred)
CHARS_PER_VALUE = 32  # a scalar weighs 1 + len // this: MAX_VALUES caps the expanded text near 6 MB too

_Loader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlError(PaijobError):
    """YAML the server would not read (or paijob refuses to); names file:line:column."""

    def __init__(
        self,
        source: str,
        message: str,
        line: int | None = None,
        column: int | None = None,
        path: Path = (),
    ) -> None:
        self.source = source
        self.line = line
        self.path = path
        self.detail = message
        where = source
        if line is not None:
            where += f":{line}" + (f":{column}" if column is not None else "")
        super().__init__(f"{where}: invalid YAML: {message}")


# ScalarNote and Loaded are NamedTuples, LineMap and _Frame plain classes, not dataclasses:
# every `paijob render` loads a job, and a dataclass costs about 0.5 ms of
# start-up (its methods are compiled from source when the module is imported).
class ScalarNote(NamedTuple):
    """A plain scalar that YAML 1.1 (PyYAML, Helm) and the server's YAML 1.2 read differently."""

    path: Path
    line: int
    text: str
    jsyaml: Any
    yaml11: Any

    def message(self) -> str:
        return (
            f"{self.text!r} is read as {describe(self.jsyaml)} by OpenPAI (YAML 1.2, js-yaml) "
            f"but as {describe(self.yaml11)} by YAML 1.1 readers (PyYAML, Helm); quote it or "
            "write the value unambiguously"
        )


class LineMap:
    """1-based line numbers of the entries of a YAML document, by path."""

    __slots__ = ("duplicates", "lines", "notes")

    def __init__(self) -> None:
        self.lines: dict[Path, int] = {}
        self.duplicates: list[tuple[Path, int]] = []  # values files only
        self.notes: list[ScalarNote] = []

    def line_of(self, path: Path) -> int | None:
        """The line of ``path``, or of its nearest ancestor that has one."""
        path = tuple(path)
        while True:
            if path in self.lines:
                return self.lines[path]
            if not path:
                return None
            path = path[:-1]


Loaded = NamedTuple("Loaded", [
    ("value", Any),
    ("lines", LineMap),
])


def describe(value: Any) -> str:
    """How a value reads in a message: ``the string 'no'``, ``false``, ``1000``."""
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, Timestamp):
        return f"the date {value.isoformat()}"
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value) if value.bit_length() < 4000 else "a huge integer"
        return text if len(text) <= 40 else text[:37] + "..."
    return js_string(value)


# --------------------------------------------------------------------------- composing


class _Frame:
    """A collection being built: its value, where it sits, and its pending key."""

    __slots__ = ("value", "path", "anchor", "tag", "line", "size", "key", "key_line", "has_key", "overridable")

    def __init__(self, value: dict[Any, Any] | list[Any], path: Path, anchor: str | None, tag: str | None,
                 line: int) -> None:
        self.value = value
        self.path = path
        self.anchor = anchor
        self.tag = tag
        self.line = line
        self.size = 1
        self.key: Any = None
        self.key_line = 0
        self.has_key = False
        self.overridable: set[Any] = set()


_MISSING = object()


class _Composer:
    """Builds Python values straight from the parser's events, iteratively and within bounds."""

    def __init__(self, source: str, schema: str, duplicates: str) -> None:
        self.source = source
        self.js = schema == "js-yaml"
        self.duplicates = duplicates  # "error" or "record"
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.open: set[int] = set()  # id() of collections still being built
        self.stack: list[_Frame] = []
        self.lines = LineMap()
        self.result: Any = _MISSING

    def fail(self, message: str, mark: Any = None) -> YamlError:
        if mark is None:
            return YamlError(self.source, message)
        return YamlError(self.source, message, mark.line + 1, mark.column + 1)

    # -- scalars

    def scalar(self, event: Any) -> Any:
        tag, text = event.tag, event.value
        if tag is None and event.implicit[0] and not event.style:
            value = resolve_js_yaml(text) if self.js else resolve_yaml11(text)
            if self.js and not self.stack_expects_key():
                difference = yaml11_difference(text)
                if difference is not None:
                    self.lines.notes.append(
                        ScalarNote(self.child_path(), event.start_mark.line + 1, text, *difference)
                    )
            return value
        if tag in (None, "!", TAG + "str"):
            return text
        return self.tagged_scalar(tag, text, event)

    def tagged_scalar(self, tag: str, text: str, event: Any) -> Any:
        resolved = resolve_js_yaml(text) if self.js else resolve_yaml11(text)
        number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
        wanted: dict[str, Callable[[Any], bool]] = {
            TAG + "null": lambda v: v is None and (text != "" or not self.js),
            TAG + "bool": lambda v: isinstance(v, bool),
            TAG + "int": lambda v: number(v) and (is_js_int(text) or not self.js),
            TAG + "float": number,
            TAG + "timestamp": lambda v: isinstance(v, Timestamp),
        }
        if tag in wanted:
            if not wanted[tag](resolved):
                raise self.fail(f"cannot read {text!r} as !!{tag[len(TAG):]}", event.start_mark)
            return resolved
        if tag == TAG + "binary":
            try:
                return base64.b64decode("".join(text.split()), validate=True)
            except ValueError:
                raise self.fail("!!binary value is not base64", event.start_mark) from None
        raise self.fail(f"unknown tag !<{tag}>", event.start_mark)

    # -- positions

    def stack_expects_key(self) -> bool:
        top = self.stack[-1] if self.stack else None
        return top is not None and isinstance(top.value, dict) and not top.has_key

    def child_path(self) -> Path:
        if not self.stack:
            return ()
        top = self.stack[-1]
        if isinstance(top.value, dict):
            return (*top.path, top.key)
        return (*top.path, len(top.value))

    # -- collections

    def start(self, event: Any, value: dict[Any, Any] | list[Any]) -> None:
        if len(self.stack) >= MAX_DEPTH:
            raise self.fail(_TOO_DEEP, event.start_mark)
        path = self.child_path()
        if not self.stack:
            self.lines.lines[()] = event.start_mark.line + 1
        frame = _Frame(value, path, event.anchor, event.tag, event.start_mark.line + 1)
        self.stack.append(frame)
        self.open.add(id(value))
        if event.anchor is not None:
            self.anchors[event.anchor] = (value, -1)

    def end(self, event: Any) -> None:
        frame = self.stack.pop()
        self.open.discard(id(frame.value))
        value: Any = frame.value
        tag = frame.tag
        if isinstance(value, dict) and tag not in (None, "!", TAG + "map", TAG + "set"):
            raise self.fail(f"unknown tag !<{tag}> on a mapping", event.start_mark)
        if isinstance(value, list) and tag not in (None, "!", TAG + "seq", TAG + "omap", TAG + "pairs"):
            raise self.fail(f"unknown tag !<{tag}> on a sequence", event.start_mark)
        if tag == TAG + "pairs" and self.js:  # js-yaml: [[key, value], ...]
            value = [[k, v] for item in value if isinstance(item, dict) for k, v in item.items()]
        if frame.anchor is not None:
            self.anchors[frame.anchor] = (value, frame.size)
        self.add(value, frame.size, event, line=frame.line)

    def alias(self, event: Any) -> None:
        if event.anchor not in self.anchors:
            raise self.fail(f"unidentified alias *{event.anchor}", event.start_mark)
        value, size = self.anchors[event.anchor]
        if size < 0 or id(value) in self.open:
            raise self.fail(
                f"recursive alias *{event.anchor}: the value contains itself", event.start_mark
            )
        self.add(value, size, event)

    def add(
        self, value: Any, size: int, event: Any, merge: bool = False, line: int | None = None
    ) -> None:
        """Put a finished value into the collection on top of the stack (or make it the result)."""
        line = line or event.start_mark.line + 1
        if not self.stack:
            self.result = value
            self.lines.lines.setdefault((), line)
            return
        top = self.stack[-1]
        top.size += size
        if top.size > MAX_VALUES:
            raise self.fail(
                f"the document expands to more than {MAX_VALUES} values (aliases of aliases?; every "
                f"{CHARS_PER_VALUE} characters of a text count as one); refusing it",
                event.start_mark,
            )
        if isinstance(top.value, list):
            item_path = (*top.path, len(top.value))
            self.lines.lines[item_path] = line
            top.value.append(value)
        elif not top.has_key:
            key = _MERGE if merge else self.key_of(value, event)
            top.key, top.key_line, top.has_key = key, line, True
        else:
            top.has_key = False
            self.store(top, top.key, value, top.key_line, event)

    def key_of(self, value: Any, event: Any) -> Any:
        if not self.js:
            if isinstance(value, (dict, list)):
                raise self.fail("a mapping or list as a mapping key is not supported", event.start_mark)
            return value
        if isinstance(value, list) and any(isinstance(v, list) for v in value):
            raise self.fail("nested arrays are not supported inside keys", event.start_mark)
        return js_string(value)

    def store(self, top: _Frame, key: Any, value: Any, line: int, event: Any) -> None:
        mapping = top.value
        assert isinstance(mapping, dict)
        if key is _MERGE:
            self.merge(top, value, event)
            return
        if self.js and key == "__proto__":
            return  # js-yaml 3 assigns it, which sets the prototype: no own key, as if absent
        if key in mapping and key not in top.overridable:
            if self.duplicates == "error":
                raise YamlError(
                    self.source,
                    f"duplicate key {js_string(key)!r}: the OpenPAI server (js-yaml: "
                    "'duplicated mapping key') rejects a mapping that repeats a key",
                    line,
                    path=(*top.path, key),
                )
            self.lines.duplicates.append(((*top.path, key), line))
        top.overridable.discard(key)
        mapping[key] = value
        key_path = (*top.path, key)
        self.lines.lines[key_path] = line

    def merge(self, top: _Frame, value: Any, event: Any) -> None:
        sources = value if isinstance(value, list) else [value]
        mapping = top.value
        assert isinstance(mapping, dict)
        for source in sources:
            if not isinstance(source, dict):
                raise self.fail(
                    "cannot merge mappings; the provided source object is unacceptable",
                    event.start_mark,
                )
            for key, item in source.items():
                if key not in mapping:
                    mapping[key] = item
                    top.overridable.add(key)


_MERGE = object()

_TOO_DEEP = f"nesting deeper than {MAX_DEPTH} levels; a job is a few levels deep"
# libyaml (in PyYAML's wheels from 6.0.3 on) refuses nesting deeper than 1000 levels itself, and its
# scanner reads up to 1024 characters ahead of the events paijob sees, so on one line of ``[[[[...``
# its limit fires before MAX_DEPTH's. Its limit is deeper than paijob's, so its refusal is reported
# as paijob's own; older PyYAML (no such limit) reaches MAX_DEPTH in ``_Composer.start``.
_LIBRARY_TOO_DEEP = "exceeded maximum nesting depth"


def _events(text: str, source: str) -> Iterator[Any]:
    loader = _Loader(text)
    try:
        while True:
            try:
                event = loader.get_event()
            except yaml.MarkedYAMLError as error:
                mark = error.problem_mark or error.context_mark
                detail = error.problem or str(error)
                if detail == _LIBRARY_TOO_DEEP:
                    detail = _TOO_DEEP
                elif error.context and error.context not in detail:
                    detail = f"{error.context}, {detail}"
                if mark is None:
                    raise YamlError(source, detail) from None
                raise YamlError(source, detail, mark.line + 1, mark.column + 1) from None
            except yaml.YAMLError as error:
                raise YamlError(source, str(error).splitlines()[0]) from None
            if event is None:
                return
            yield event
    finally:
        loader.dispose()


def _compose(text: str, source: str, schema: str, duplicates: str) -> Loaded:
    composer = _Composer(source, schema, duplicates)
    documents = 0
    for event in _events(text, source):
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise composer.fail(
                    "expected a single document in the stream, but found more", event.start_mark
                )
        elif isinstance(event, yaml.ScalarEvent):
            merge = (
                composer.stack_expects_key()
                and event.value == "<<"
                and not event.style
                and event.tag is None
            )
            value = composer.scalar(event)
            weight = 1 + len(event.value) // CHARS_PER_VALUE
            if event.anchor is not None:
                composer.anchors[event.anchor] = (value, weight)
            composer.add(value, weight, event, merge=merge)
        elif isinstance(event, yaml.SequenceStartEvent):
            composer.start(event, [])
        elif isinstance(event, yaml.MappingStartEvent):
            composer.start(event, {})
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            composer.end(event)
        elif isinstance(event, yaml.AliasEvent):
            composer.alias(event)
    value = None if composer.result is _MISSING else composer.result
    return Loaded(value, composer.lines)


def decode(data: bytes, source: str) -> str:
    """UTF-8 text of a job or values file, or a clear error (the server reads UTF-8)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise YamlError(
            source,
            f"not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start}); "
            "save the file as UTF-8",
            line,
        ) from None


def _text(text: str | bytes, source: str) -> str:
    if isinstance(text, bytes):
        if len(text) > MAX_TEXT_BYTES:
            raise _too_large(source, len(text))
        text = decode(text, source)
    if len(text) > MAX_TEXT_BYTES:
        raise _too_large(source, len(text))
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as error:  # a lone surrogate, e.g. from surrogateescape decoding
        line = text[: error.start].count("\n") + 1
        raise YamlError(source, "not valid Unicode text (a lone surrogate); save the file as UTF-8", line) from None
    if size > MAX_TEXT_BYTES:
        raise _too_large(source, size)
    return text


def _too_large(source: str, size: int) -> YamlError:
    return YamlError(
        source, f"{size} bytes is more than paijob reads ({MAX_TEXT_BYTES} bytes); is it a job file?"
    )


def load_job(text: str | bytes, source: str) -> Loaded:
    """Read job YAML as the OpenPAI rest-server does (js-yaml 3); see the module docstring.

    The result's ``lines.notes`` lists the plain scalars YAML 1.1 reads differently.
    """
    return _compose(_text(text, source), source, "js-yaml", "error")


def load_values(text: str | bytes, source: str, *, duplicates: str = "record") -> Loaded:
    """Read a values file: YAML 1.1 typing (PyYAML, Helm), the same bounds as ``load_job``.

    Repeated keys are recorded in ``lines.duplicates`` (the caller decides);
    ``duplicates="error"`` refuses them at once.
    """
    return _compose(_text(text, source), source, "yaml11", duplicates)
