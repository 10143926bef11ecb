"""Compatibility names for the job YAML loader, which lives in ``paijob.openpai.yaml12``.

``load_with_lines`` reads job YAML as the OpenPAI rest-server does (js-yaml 3,
YAML 1.2 core schema, bounded); new code should call
``paijob.openpai.yaml12.load_job`` (jobs) or ``load_values`` (values files).
"""

from __future__ import annotations

from typing import Any

from paijob.openpai.yaml12 import LineMap, YamlError, load_job

YamlSyntaxError = YamlError

__all__ = ["LineMap", "YamlSyntaxError", "load_with_lines"]


def load_with_lines(text: str | bytes, source: str) -> tuple[Any, LineMap]:
    """Parse one job YAML document; return its value and its line map (``YamlError`` if not YAML)."""
    loaded = load_job(text, source)
    return loaded.value, loaded.lines
