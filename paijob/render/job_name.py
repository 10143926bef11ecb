"""Giving a rendered job its final name (``--name``, ``--unique-suffix``) without re-rendering it.

The job text is edited in place, so comments and layout survive; the new name is checked against
OpenPAI's pattern before it is written, so ``--name $'a\\nb'`` cannot break the YAML.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import yaml

from paijob.errors import PaijobError
from paijob.openpai import jsyaml
from paijob.openpai.names import NAME_PATTERN, js_match

NAME_MAX = 255


def unique_name(name: str) -> str:
    suffix = "_" + uuid.uuid4().hex[:8]
    return name[: NAME_MAX - len(suffix)] + suffix


_NAME_LINE = re.compile(r"^name:[ \t]*(\S.*?)?[ \t]*$", re.MULTILINE)


def rename(text: str, name: str | None, unique: bool, loaded: Any = None) -> tuple[str, str]:
    """Apply --name / --unique-suffix; returns (text, final name). The rest of the text is kept.

    ``loaded``: ``text`` as ``jsyaml.load_job`` read it already (the render's
    validation did), so that it is not read again; None reads it here.
    """
    job = loaded if loaded is not None else jsyaml.load_job(text, "the job").value
    if not isinstance(job, dict):
        return text, ""
    current = str(job.get("name", ""))
    new = name or current
    if unique:
        new = unique_name(new)
    if new == current:
        return text, current
    check_job_name(new, "--name" if name else "the job's name")
    renamed, count = _NAME_LINE.subn(f"name: {new}", text, count=1)
    if count != 1 or (jsyaml.load_job(renamed, "the job").value or {}).get("name") != new:
        renamed = yaml.safe_dump({**job, "name": new}, sort_keys=False)
    return renamed, new


def check_job_name(name: str, what: str) -> None:
    """Refuse a job name OpenPAI would refuse (the pattern ``paijob validate`` checks),
    before it is written into the job text: ``--name $'a\\nb'`` must not break the YAML."""
    if not js_match(NAME_PATTERN, name) or len(name) > NAME_MAX:
        raise PaijobError(
            f"{what} {name!r} is not a valid OpenPAI job name: use letters, digits, _ and - "
            f"(at most {NAME_MAX})"
        )
