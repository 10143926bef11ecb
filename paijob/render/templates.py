"""Where templates are: the built-ins (``paijob.templates``), ``PAIJOB_TEMPLATE_PATH``, a user's file.

A template is a Jinja file ``NAME.yaml.j2`` that renders an OpenPAI job YAML,
with its documented defaults in ``NAME.values.yaml`` and, for the built-ins, a
values schema ``NAME.values.schema.json`` beside it. Built-ins ship as the
package ``paijob.templates`` (the top-level ``templates/`` folder); a path to a
``.yaml.j2`` file names a user template; extra folders of templates can be
listed in ``PAIJOB_TEMPLATE_PATH`` (``:``-separated), searched first.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

from paijob.common import beneath, contract
from paijob.errors import PaijobError

if TYPE_CHECKING:
    # pathlib only for a user's files, imported where they are read: a built-in
    # template (the usual render) reads through os.path, and pathlib is not among
    # the modules Jinja2 and PyYAML load anyway (about 1 ms of every render).
    from pathlib import Path

TEMPLATE_SUFFIX = ".yaml.j2"
VALUES_SUFFIX = ".values.yaml"
SCHEMA_SUFFIX = ".values.schema.json"
TEMPLATE_PATH_ENV = contract.TEMPLATE_PATH


class TemplateError(PaijobError):
    """A template that cannot be found, read or rendered."""


class TemplateRefused(TemplateError):
    """An ``include``, ``import`` or ``extends`` that names something a template may not read.

    Raised by the loader, which knows the name and why; the renderer adds which
    statement of which template asked (``templating._refusal``)."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"'{name}' refused: {why}")
        self.name = name
        self.why = why


class TemplateRef(NamedTuple):  # not a frozen dataclass: ~0.5 ms less start-up for every render
    """Where a template lives: its name, its source text and its defaults."""

    name: str
    filename: str  # for messages: "ddp.yaml.j2" or the user's path
    folder: Path | None  # user templates: their folder (searched first for includes)
    builtin: bool

    def source(self) -> str:
        if self.builtin:
            return builtin_text(self.name + TEMPLATE_SUFFIX)
        from pathlib import Path

        return read_text(Path(self.filename), "template")

    def values_text(self) -> tuple[str, str] | None:
        """(text, filename) of the defaults file, or None when there is none."""
        if self.builtin:
            name = self.name + VALUES_SUFFIX
            try:
                return builtin_text(name), name
            except FileNotFoundError:
                return None
        return self.read_beside(self.name + VALUES_SUFFIX, "default values file")

    def read_beside(self, name: str, what: str) -> tuple[str, str] | None:
        """(text, path) of file ``name`` beside a user template, read through its folder's descriptor
        (``paijob.common.beneath``): a link out of the folder is refused, and one swapped in after a check
        cannot be followed, as no check is made apart from the read. None: no such file (or not a file)."""
        shown = os.path.join(os.path.dirname(self.filename), name)
        folder = os.path.realpath(os.path.dirname(self.filename) or ".")
        try:
            found = beneath.read_beneath(folder, [name])
        except beneath.Outside as error:
            raise TemplateRefused(name, f"the {what} of template {self.filename} is a link to {error.target}, "
                                  f"outside its folder {folder}") from None
        except (beneath.NotRegular, beneath.TooManyLinks):
            return None
        except OSError as error:
            raise TemplateError(f"cannot read {what} {shown}: {error.strerror or error}") from None
        if found is None:
            return None
        try:
            return found[0].decode("utf-8"), shown
        except UnicodeDecodeError as error:
            raise TemplateError(f"{what} {shown} is not UTF-8 text (byte {error.start}); save it as UTF-8") from None

    def schema_file(self) -> str | None:
        """The values schema beside the template (``NAME.values.schema.json``), if any."""
        if self.builtin:
            file = os.path.join(builtin_dir(), self.name + SCHEMA_SUFFIX)
        else:
            from pathlib import Path

            file = str(Path(self.filename).parent / (self.name + SCHEMA_SUFFIX))
            if os.path.isfile(file):
                self.check_beside(file, "values schema")
        return file if os.path.isfile(file) else None

    def check_beside(self, file: str, what: str) -> None:
        """A user template's defaults or schema must be a file of their folder, not a link out of it: a
        cloned project's ``t.values.yaml`` linked to ``~/.docker/config.json`` would hand its keys to the
        template."""
        folder, real = os.path.realpath(os.path.dirname(file) or "."), os.path.realpath(file)
        if os.path.commonpath([real, folder]) != folder:
            raise TemplateRefused(os.path.basename(file), f"the {what} of template {self.filename} is a link to "
                                  f"{real}, outside its folder {folder}")

    def schema_path(self) -> Path | None:
        """``schema_file`` as a ``Path``."""
        from pathlib import Path

        file = self.schema_file()
        return None if file is None else Path(file)

    def description(self) -> str:
        """The first comment line of the defaults file (``# ddp: one worker role ...``)."""
        found = self.values_text()
        if found:
            for line in found[0].splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
                if line.strip():
                    break
        return ""


def builtin_dir() -> str:
    """The folder of the ``paijob.templates`` package.

    A plain path rather than ``importlib.resources.files``: paijob installs as
    files (never from a zip), and the resources machinery costs about 5 ms of
    every ``paijob render``.
    """
    import paijob.templates

    return os.path.dirname(paijob.templates.__file__)


def builtin_text(name: str) -> str:
    """A built-in template or defaults file, by file name."""
    with open(os.path.join(builtin_dir(), name), encoding="utf-8") as file:
        return file.read()


def builtin_include(name: str) -> str:
    """The file of the built-in template file ``name`` (``_job.yaml.j2``), for the loader.

    Built-in names are names, never paths: one part, no folder, no ``..``, so a
    template (built-in or the user's) cannot reach a file beside the package.
    Raises ``TemplateRefused`` for a path, ``FileNotFoundError`` for a name that
    is no built-in file."""
    if not name or "/" in name or os.sep in name or "\0" in name or name in (".", ".."):
        raise TemplateRefused(name, "built-in templates are names (like _job.yaml.j2), not paths")
    file = os.path.join(builtin_dir(), name)
    if not os.path.isfile(file):
        raise FileNotFoundError(file)
    return file


def user_include(folder: str, name: str) -> tuple[bytes, str] | None:
    """The bytes and file name of what a user template's ``include``/``import``/``extends`` of ``name``
    reads, or None.

    A user template reaches its own folder (``folder``, already resolved) and
    what is under it, nothing else: an absolute name, a ``..`` part or a link
    whose target lies outside the folder is a ``TemplateRefused`` naming why,
    never a fall back to anything else. What is read is what was checked: the
    file is opened through the folder's descriptor, part by part, without
    following a link (``paijob.common.beneath``), so a link swapped in while
    renders run is walked and confined, or refused, never followed out (issue 55).
    None: no such file in the folder (a bare name may still be a built-in)."""
    if "\0" in name:
        raise TemplateRefused(name, "a template name holds a NUL character")
    if name.startswith("/") or os.path.isabs(name):
        raise TemplateRefused(
            name, f"an absolute name; a template reads only templates in its own folder {folder}"
        )
    parts = beneath.split(name)
    if ".." in parts:
        raise TemplateRefused(
            name, f"'..' climbs out of the template's folder {folder}; name a template in that folder"
        )
    if not parts:
        return None
    try:
        return beneath.read_beneath(folder, parts)
    except beneath.Outside as error:
        raise TemplateRefused(
            name, f"it is a link to {error.target}, outside the template's folder {folder}; "
            "copy the template into that folder instead"
        ) from None
    except beneath.NotRegular as error:
        raise TemplateRefused(name, f"it is a {error.kind}, not a template file") from None
    except beneath.TooManyLinks:
        raise TemplateRefused(name, "too many links on the way (a link loop?)") from None
    except OSError as error:
        raise TemplateRefused(name, f"it cannot be read ({error.strerror or error})") from None


def read_text(path: Path, what: str, error_type: type[PaijobError] | None = None) -> str:
    """A user's file as UTF-8 text; a missing, unreadable or non-UTF-8 file is one clear error."""
    fail = error_type or TemplateError
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise fail(f"{what} {path} does not exist") from None
    except UnicodeDecodeError as error:
        raise fail(f"{what} {path} is not UTF-8 text (byte {error.start}); save it as UTF-8") from None
    except OSError as error:
        raise fail(f"cannot read {what} {path}: {error.strerror or error}") from None


def builtin_names() -> list[str]:
    """Names of the built-in templates (files ``_*.yaml.j2`` are partials, not listed)."""
    names = []
    for entry in os.listdir(builtin_dir()):
        if entry.endswith(TEMPLATE_SUFFIX) and not entry.startswith("_"):
            names.append(entry[: -len(TEMPLATE_SUFFIX)])
    return sorted(names)


def _search_path() -> list[Path]:
    text = os.environ.get(TEMPLATE_PATH_ENV, "")
    if not text:
        return []
    from pathlib import Path

    return [Path(part) for part in text.split(os.pathsep) if part]


def find_template(spec: str) -> TemplateRef:
    """A built-in name, a name in ``PAIJOB_TEMPLATE_PATH``, or a path to a ``.yaml.j2``."""
    looks_like_path = os.sep in spec or spec.endswith(".j2") or spec.endswith(TEMPLATE_SUFFIX)
    if looks_like_path:
        from pathlib import Path

        path = Path(spec)
        if not path.is_file():
            raise TemplateError(
                f"template file {spec} does not exist; built-in templates: "
                + ", ".join(builtin_names())
            )
        return _user_template(path)
    for folder in _search_path():
        candidate = folder / (spec + TEMPLATE_SUFFIX)
        if candidate.is_file():
            return _user_template(candidate)
    if spec in builtin_names():
        return TemplateRef(spec, spec + TEMPLATE_SUFFIX, None, True)
    if spec.endswith(".py"):  # torchrun, TorchX and SkyPilot users type the script first
        import shlex

        raise TemplateError(
            f"{spec} is a Python script, not a template: a template runs it, with the script as a value, e.g. "
            f"`paijob run ddp --local --workdir . --set script={shlex.quote(spec)}` (every task starts in a "
            f"snapshot of the folder, the ddp template launches the script on each with paijob-runtime; "
            f"`paijob templates` lists the others, `paijob init` writes a project that does this)")
    if spec.endswith((".yaml", ".yml")):  # a job file that is not there, not a template's name
        raise TemplateError(f"job file {spec} does not exist (a job is an OpenPAI YAML file; a template is a "
                            f"built-in name ({', '.join(builtin_names())}) or a {TEMPLATE_SUFFIX} file)")
    raise TemplateError(
        f"unknown template '{spec}'; built-in templates: {', '.join(builtin_names())} "
        f"(see 'paijob templates'), or give a path to a {TEMPLATE_SUFFIX} file"
    )


def _user_template(path: Path) -> TemplateRef:
    name = path.name
    for suffix in (TEMPLATE_SUFFIX, ".j2"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return TemplateRef(name, str(path), path.resolve().parent, False)


def is_job_file(spec: str) -> bool:
    """True when ``spec`` names an existing plain job YAML (not a template)."""
    return spec.endswith((".yaml", ".yml")) and os.path.isfile(spec)
