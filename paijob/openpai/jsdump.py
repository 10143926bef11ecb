"""Writing a job mapping back as YAML text that OpenPAI's rest-server (js-yaml 3) reads as that mapping.

paijob edits a job it has read (a workdir carried in its commands, a new name) as a mapping and
writes it out again. PyYAML writes a string plain whenever YAML 1.1 would read it back as a
string, but the server reads YAML 1.2 (``paijob.openpai.jsyaml``): ``1e3``, ``0o17`` or
``2001-12-14t21:59:43.10z`` written plain come back as a number or a date. Those strings are
quoted here, so the text sent reads as the mapping paijob checked, and nothing needs to read it again.
"""

from __future__ import annotations

from typing import Any

import yaml

from paijob.openpai.yamlscalars import resolve_js_yaml


class _JsYamlSafeDumper(yaml.SafeDumper):
    """``yaml.SafeDumper`` that quotes every string js-yaml would not read back as that string."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if data and "\n" not in data and resolve_js_yaml(data) != data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="'")
    return dumper.represent_str(data)


_JsYamlSafeDumper.add_representer(str, _represent_str)


def dump_job(job: Any, **options: Any) -> str:
    """``yaml.safe_dump(job, sort_keys=False, **options)``, quoted where js-yaml would read a string otherwise."""
    return yaml.dump(job, Dumper=_JsYamlSafeDumper, sort_keys=False, **options)
