"""Giving a rendered job its final name (``--name``, ``--unique-suffix``) without re-rendering it.

The job text is edited in place, so comments and layout survive; the new name is checked against
OpenPAI's pattern before it is written, so ``--name $'a\\nb'`` cannot break the YAML. The edit is
proven with the line map of the text as it was read (the render's validation read it), not by
reading the new text again; a job whose name line cannot be edited in place is written anew.
"""

from __future__ import annotations

import re
import uuid
from typing import Any, NamedTuple

from paijob.errors import PaijobError
from paijob.openpai import jsyaml
from paijob.openpai.jsdump import dump_job
from paijob.openpai.names import NAME_PATTERN, js_match
from paijob.openpai.yamlscalars import resolve_js_yaml

NAME_MAX = 255


def unique_name(name: str) -> str:
    suffix = "_" + uuid.uuid4().hex[:8]
    return name[: NAME_MAX - len(suffix)] + suffix


_NAME_LINE = re.compile(r"^name:[ \t]*(\S.*?)?[ \t]*$", re.MULTILINE)
_COMMENT = re.compile(r"[ \t]+#.*$")


class Renamed(NamedTuple):
    """The job under its final name: its text, the name, and the job as the server reads the text."""

    text: str
    name: str
    job: Any


def rename(text: str, name: str | None, unique: bool, loaded: Any = None) -> tuple[str, str]:
    """Apply --name / --unique-suffix; returns (text, final name). The rest of the text is kept.

    ``loaded``: ``text`` as ``jsyaml.load_job`` read it already (the render's
    validation did), so that it is not read again; None reads it here.
    """
    job = jsyaml.load_job(text, "the job").value if loaded is None else loaded
    renamed = rename_job(text, name, unique, job)
    return renamed.text, renamed.name


def rename_job(text: str, name: str | None, unique: bool, job: Any, lines: jsyaml.LineMap | None = None) -> Renamed:
    """``rename`` of a text read as ``job`` (``jsyaml.load_job``'s value); with its line map
    (``lines``, from the same read), the new text is not read again."""
    if not isinstance(job, dict):
        return Renamed(text, "", job)
    current = str(job.get("name", ""))
    new = name or current
    if unique:
        new = unique_name(new)
    if new == current:
        return Renamed(text, current, job)
    check_job_name(new, "--name" if name else "the job's name")
    renamed = {**job, "name": new}
    edited = _edit_in_place(text, current, new, lines)
    return Renamed(edited if edited is not None else dump_job(renamed), new, renamed)


def _edit_in_place(text: str, current: str, new: str, lines: jsyaml.LineMap | None) -> str | None:
    """``text`` with its ``name:`` line saying ``new``, when that edit provably renames the job; else None."""
    match = _NAME_LINE.search(text)
    if match is None:
        return None
    edited = text[: match.start()] + f"name: {new}" + text[match.end():]
    if lines is None:  # nothing says where the name is: read the edit back
        read = jsyaml.load_job(edited, "the job").value
        return edited if isinstance(read, dict) and read.get("name") == new else None
    is_name_line = text.count("\n", 0, match.start()) + 1 == lines.lines.get(("name",))
    return edited if is_name_line and _reads_as(match.group(1), current) and _plain(new) else None


def _reads_as(written: str | None, current: str) -> bool:
    """Is ``written`` (a name line's value) one line that reads as the name ``current``, a valid job name?"""
    value = _COMMENT.sub("", written or "")
    return value in (current, f"'{current}'", f'"{current}"')


def _plain(name: str) -> bool:
    """Does ``name`` written plain read as that string (``123`` and ``2001-12-14`` do not)?"""
    return resolve_js_yaml(name) == name


def check_job_name(name: str, what: str) -> None:
    """Refuse a job name OpenPAI would refuse (the pattern ``paijob validate`` checks),
    before it is written into the job text: ``--name $'a\\nb'`` must not break the YAML."""
    if not js_match(NAME_PATTERN, name) or len(name) > NAME_MAX:
        raise PaijobError(
            f"{what} {name!r} is not a valid OpenPAI job name: use letters, digits, _ and - "
            f"(at most {NAME_MAX})"
        )
