"""The project config ``paijob.yaml``: what ``paijob run`` / ``submit`` use in a project folder.

``paijob init`` writes one; a user may write it by hand::

    template: ddp              # the job template (built-in name or a .yaml.j2 path)
    values: [values.yaml]      # values files, layered before any -f on the command line
    cluster: local             # the default cluster for this project
    workdir: .                 # ship this folder with every job (see paijob.workdir)

It is looked up in the current folder only: a config that changes what a
command does should be in plain sight. Paths in it are relative to its folder,
and its template, values files and workdir stay in that folder (a cloned
project's ``paijob.yaml`` cannot name ``~/.docker/config.json`` as values, a
template linked out of the project, or ``/etc`` as the folder its jobs ship). Pure apart from reading the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from paijob.errors import PaijobError

FILENAME = "paijob.yaml"
KEYS = ("template", "values", "cluster", "workdir")


class ProjectError(PaijobError):
    """A paijob.yaml that cannot be used."""


@dataclass(frozen=True)
class Project:
    path: Path | None = None
    template: str | None = None
    values: tuple[str, ...] = ()
    cluster: str | None = None
    workdir: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def parse(text: str, path: Path) -> Project:
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise ProjectError(f"{path}: not YAML: {error}") from None
    if not isinstance(data, dict):
        raise ProjectError(f"{path}: expected a mapping with keys {', '.join(KEYS)}")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise ProjectError(f"{path}: unknown key(s) {', '.join(map(str, unknown))}; known: {', '.join(KEYS)}")
    base = path.parent

    def rel(value: Any, key: str) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            raise ProjectError(f"{path}: {key} must be a path or name, got {value!r}")
        return value

    values = data.get("values") or []
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ProjectError(f"{path}: values must be a list of values files, got {values!r}")
    template = rel(data.get("template"), "template")
    if template and (template.endswith(".j2") or "/" in template):
        template = _inside(path, base, template, "template")
    workdir = rel(data.get("workdir"), "workdir")
    return Project(
        path=path,
        template=template,
        values=tuple(_inside(path, base, v, "values file") for v in values),
        cluster=rel(data.get("cluster"), "cluster"),
        workdir=str(base / workdir) if workdir else None,
    )


def _inside(path: Path, base: Path, name: str, what: str) -> str:
    """``base / name``, refused when it (links resolved) lies outside the project folder ``base``."""
    file = base / name
    real, folder = file.resolve(), base.resolve()
    if not real.is_relative_to(folder):
        raise ProjectError(
            f"{path}: {what} {name} is outside the project folder {folder} (it resolves to {real}); "
            + ("a project's workdir is in the project: pass --workdir DIR to ship another folder"
               if what == "workdir" else
               "a paijob.yaml names files in its own folder: copy the file in, or give it on the command line")
        )
    return str(file)


def check_workdir(project: Project, workdir: str) -> None:
    """A workdir a project chose (``paijob.yaml``'s, or its values' ``workdir``) must lie in the project
    folder, as its other paths do: a cloned project cannot ship ``/etc`` with its jobs. ``--workdir`` is
    the user's own choice and is not checked (``paijob.api.prepare`` calls this without one)."""
    if project.path is not None:
        _inside(project.path, project.path.parent, os.path.expanduser(workdir), "workdir")


def load(folder: Path | None = None) -> Project:
    """The project config of ``folder`` (default: the current folder), or an empty one."""
    path = (folder or Path.cwd()) / FILENAME
    if not path.is_file():
        return Project()
    return parse(path.read_text(encoding="utf-8"), path)
