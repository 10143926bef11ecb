"""YAML loading that remembers where every value came from.

``load_with_lines`` composes the node tree once, builds the Python value from
it and a map from YAML path (``("taskRoles", "worker", "commands", 0)``) to
the 1-based line of that entry, so that problems can name both.
Duplicate mapping keys, which PyYAML silently collapses but the OpenPAI
server (js-yaml) rejects, are collected too.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import yaml

from paijob.errors import PaijobError

Path = tuple[Hashable, ...]

_Loader: type[yaml.SafeLoader]
try:  # libyaml is 5-10x faster; fall back to the pure-Python loader.
    _Loader = yaml.CSafeLoader  # type: ignore[assignment]
except AttributeError:  # pragma: no cover - depends on the PyYAML build
    _Loader = yaml.SafeLoader


@dataclass
class LineMap:
    """1-based line numbers of the entries of a YAML document, by path."""

    lines: dict[Path, int] = field(default_factory=dict)
    duplicates: list[tuple[Path, int]] = field(default_factory=list)

    def line_of(self, path: Path) -> int | None:
        """The line of ``path``, or of its nearest ancestor that has one."""
        path = tuple(path)
        while True:
            if path in self.lines:
                return self.lines[path]
            if not path:
                return None
            path = path[:-1]


class YamlSyntaxError(PaijobError):
    """A YAML file that does not parse; the message names file:line:column."""

    def __init__(self, source: str, error: yaml.YAMLError) -> None:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        problem = getattr(error, "problem", None) or str(error)
        context = getattr(error, "context", None)
        where = source
        self.line: int | None = None
        if mark is not None:
            self.line = mark.line + 1
            where = f"{source}:{mark.line + 1}:{mark.column + 1}"
        detail = f"{context}, {problem}" if context and context not in problem else problem
        super().__init__(f"{where}: invalid YAML: {detail}")
        self.source = source


def _walk(node: yaml.Node, path: Path, out: LineMap) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key == "<<" or key is None:
                continue
            if key_node.tag.endswith(":int"):
                try:
                    key = int(key)
                except ValueError:
                    pass
            line = key_node.start_mark.line + 1
            child = (*path, key)
            if key in seen:
                out.duplicates.append((child, line))
            seen[key] = line
            out.lines[child] = line
            _walk(value_node, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*path, index)
            out.lines[child] = item.start_mark.line + 1
            _walk(item, child, out)


def load_with_lines(text: str, source: str) -> tuple[Any, LineMap]:
    """Parse one YAML document; return its value and its line map.

    Raises ``YamlSyntaxError`` (file:line:column) when the text is not YAML.
    An empty document is ``None``.
    """
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, LineMap()
        value = loader.construct_document(node)
    except yaml.YAMLError as error:
        raise YamlSyntaxError(source, error) from None
    finally:
        loader.dispose()
    lines = LineMap({(): node.start_mark.line + 1})
    _walk(node, (), lines)
    return value, lines
