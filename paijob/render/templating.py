"""Rendering: a template and its values -> a checked OpenPAI job (``paijob render``).

The pieces: :mod:`~paijob.render.templates` finds a template,
:mod:`~paijob.render.values` layers its values (defaults < ``-f`` < ``--set``),
:mod:`~paijob.render.filters` is what a template may call; this module renders
in Jinja's sandbox and checks the result as ``paijob validate`` would.

Jinja settings that matter for job YAML:

* ``StrictUndefined``: a value used but not given is an error naming the
  value, the template line and the ``--set`` that fixes it;
* comments are ``{## ... ##}``, so bash's ``${#var}`` (string length) is
  not taken for a Jinja comment; OpenPAI's ``<% $parameters.x %>`` is not
  Jinja syntax and passes through untouched.

The public API is ``render(template, values, sets)`` (a template or a plain
job file, as ``paijob render`` / ``submit`` / ``run`` take it; typed inputs,
no command-line namespace) and ``render_template(template, ...)`` for
templates alone. The command line's half lives in ``paijob.commands`` and
reaches this module through ``paijob.api`` only.
"""

from __future__ import annotations

import functools
import io
import marshal
import os
import pickle
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple

import jinja2
from jinja2.bccache import bc_magic
from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedEnvironment

from paijob import __version__
from paijob.common import contract
from paijob.errors import PaijobError
from paijob.openpai.jsyaml import YamlError, load_job
from paijob.render import filters
from paijob.render.filters import TemplateFailure
from paijob.render.runtime_install import InstallSettingsError, image_auth, install_command
from paijob.render.templates import (
    TEMPLATE_SUFFIX,
    VALUES_SUFFIX,
    TemplateError,
    TemplateRef,
    TemplateRefused,
    builtin_dir,
    builtin_include,
    find_template,
    is_job_file,
    user_include,
)
from paijob.render.values import SetArg, Values, ValuesError, build_values
from paijob.validate.report import (
    WARNING,
    JobValidationError,
    Problem,
    ValidationReport,
    validate_text,
)

if TYPE_CHECKING:
    from pathlib import Path  # imported where a user's file is read: see paijob.render.templates


class _ValuesDict(dict[str, Any]):
    """A values mapping that knows its dotted path, for undefined-value messages."""

    paijob_path: str = ""


def _wrap(value: Any, path: str = "") -> Any:
    if isinstance(value, dict):
        wrapped = _ValuesDict({k: _wrap(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()})
        wrapped.paijob_path = path
        return wrapped
    if isinstance(value, list):
        return [_wrap(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


class UndefinedValue(jinja2.exceptions.UndefinedError):
    """Raised by the template when it uses a value nobody gave."""

    def __init__(self, value_path: str | None, hint: str) -> None:
        super().__init__(hint)
        self.value_path = value_path


class _Undefined(jinja2.StrictUndefined):
    """StrictUndefined whose error carries the dotted path of the missing value."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self._undefined_exception is SecurityError:
            return  # the sandbox refused an attribute: keep its SecurityError
        # Every failing operation raises self._undefined_exception(message).
        self._undefined_exception = functools.partial(  # type: ignore[assignment]
            UndefinedValue, self._value_path()
        )

    def _value_path(self) -> str | None:
        obj, name = self._undefined_obj, self._undefined_name
        if self._undefined_hint or not isinstance(name, (str, int)):
            return None
        if obj is jinja2.runtime.missing:
            return str(name)
        if isinstance(obj, _ValuesDict):
            return f"{obj.paijob_path}.{name}" if obj.paijob_path else str(name)
        return None


class _Environment(SandboxedEnvironment):
    """Every template, built-in or the user's, renders in Jinja's sandbox: it
    reads values, calls the filters and globals registered below and the
    methods of plain values (``list.append``, ``dict.items``, ...), and
    nothing else — no attributes starting with ``_``, no Python internals
    (``cycler.__init__.__globals__``), no files, no imports."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        # values.items must be the value "items", not dict.items
        if isinstance(obj, dict) and attribute in obj:
            return obj[attribute]
        return super().getattr(obj, attribute)


class _TemplateLoader(jinja2.BaseLoader):
    """What ``include``, ``import`` and ``extends`` read: templates, nothing else.

    A user template's own folder first (``user_include``: confined to it, read part by
    part through the folder's descriptor, links walked inside it), then the built-ins by bare name (``builtin_include``).
    A refused name raises ``TemplateRefused`` and never falls through to the next
    place (Jinja's ``ChoiceLoader`` would try the built-ins with ``/etc/passwd``)."""

    def __init__(self, folder: str | None) -> None:
        self.folder = folder

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str, Callable[[], bool]]:
        found = user_include(self.folder, template) if self.folder is not None else None
        if found is not None:  # read through the folder's descriptor: what was checked is what is read
            data, file = found
            return data.decode("utf-8"), file, lambda: True
        try:
            file = builtin_include(template)
        except FileNotFoundError:
            raise jinja2.TemplateNotFound(template) from None
        except TemplateRefused:
            if self.folder is None:
                raise
            raise jinja2.TemplateNotFound(template) from None  # "sub/x.j2": not in the folder
        try:
            with open(file, encoding="utf-8") as handle:
                text = handle.read()
        except OSError:
            raise jinja2.TemplateNotFound(template) from None
        return text, file if self.folder is not None else template, lambda: True


class _QuietBytecodeCache(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept between runs (keyed by name and source checksum,
    so never stale); a cache that cannot be read or written is just skipped."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        """Jinja's own reading (``Bucket.load_bytecode``: its magic, the source checksum, the code), but
        the code unmarshalled from bytes: ``marshal.load`` on a file reads it object by object, one
        method call each, which is ~3 M instructions of every ``paijob render ddp`` (a tenth from bytes)."""
        try:
            with open(self._get_cache_filename(bucket), "rb") as file:
                stream = io.BytesIO(file.read())
            if stream.read(len(bc_magic)) == bc_magic and pickle.load(stream) == bucket.checksum:
                bucket.code = marshal.loads(stream.getbuffer()[stream.tell():])
        except (OSError, EOFError, ValueError, TypeError, pickle.UnpicklingError):
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    if os.environ.get(contract.NO_TEMPLATE_CACHE):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    # "-sandboxed": bytecode compiled outside the sandbox (older paijob) must never load
    folder = os.path.join(base, "paijob", "templates-sandboxed")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    return _QuietBytecodeCache(folder)


@lru_cache(maxsize=16)
def _environment(folder: Path | None) -> jinja2.Environment:
    env = _Environment(
        loader=_TemplateLoader(None if folder is None else str(folder)),
        undefined=_Undefined,
        comment_start_string="{##",
        comment_end_string="##}",
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        bytecode_cache=_bytecode_cache(),
    )
    env.filters.update(filters.FILTERS)
    env.globals.update(filters.GLOBALS)
    env.globals.update(paijob_version=__version__, rendered_version_env=contract.RENDERED_VERSION, runtime_install_command=_failing(install_command),
                       image_auth=_failing(image_auth), storage_output_export=_storage_output_export,
                       storage_mount=_storage_mount)
    return env


def _storage_output_export(*args: Any) -> str:
    """``storage_route.output_export`` for templates, imported when a job has a storage (every other render
    skips the module); its value errors become a template failure, as ``_failing`` does."""
    from paijob.common.storage_route import StorageValueError, output_export

    try:
        return output_export(*args)
    except StorageValueError as error:
        raise TemplateFailure(str(error)) from None


def _storage_mount(name: str) -> dict[str, Any]:
    from paijob.common.storage_route import mount

    return mount(name)


def _failing(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` for templates: its ``InstallSettingsError`` becomes a template failure (file and line)."""
    def call(*args: Any) -> Any:
        try:
            return function(*args)
        except InstallSettingsError as error:
            raise TemplateFailure(str(error)) from None
    return call



def _file_name(filename: str) -> str:
    """The last part of a template's file name, as ``Path.name`` reads it."""
    from pathlib import PurePath

    return PurePath(filename).name

def used_names(template: TemplateRef) -> set[str]:
    """Top-level names the template (and what it imports or includes) reads."""
    from jinja2 import meta

    env = _environment(template.folder)
    first = template.name + TEMPLATE_SUFFIX if template.builtin else _file_name(template.filename)
    names: set[str] = set()
    seen: set[str] = set()
    todo = [first]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            source = env.loader.get_source(env, name)[0] if env.loader else ""
            tree = env.parse(source)
        except (jinja2.TemplateError, TemplateRefused, OSError, UnicodeDecodeError):  # render_text reports it
            continue
        names |= meta.find_undeclared_variables(tree)
        todo.extend(t for t in meta.find_referenced_templates(tree) if t)
    return names


# --------------------------------------------------------------------------- rendering


# A rendered job: the YAML text, the parsed job and its validation report. Not a dataclass, nor the
# class form: ~0.3 ms less start-up for every render (ruff.toml's UP014).
RenderResult = NamedTuple("RenderResult", [
    ("template", TemplateRef),
    ("values", Values),
    ("text", str),
    ("job", dict[str, Any]),
    ("report", ValidationReport),
])


def _template_line(tb: TracebackType | None) -> tuple[str, int] | None:
    """(template file, line) of the innermost template frame of a traceback."""
    found = None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.endswith(".j2"):
            found = (filename, tb.tb_lineno)
        tb = tb.tb_next
    return found


def _where(error: BaseException, template: TemplateRef) -> str:
    """``ddp.yaml.j2, line 12`` for messages (user templates keep their path)."""
    found = _template_line(error.__traceback__)
    if found is None:
        return template.filename
    filename, line = found
    return f"{_file_name(filename) if template.builtin else filename}, line {line}"


def render_text(template: TemplateRef, values: Mapping[str, Any]) -> str:
    """Render ``template`` with ``values``; user-fixable failures become ``TemplateError``."""
    jinja_template = _load(template)
    context = {str(k): _wrap(v, str(k)) for k, v in values.items()}
    try:
        return jinja_template.render(context)
    except TemplateRefused as error:
        raise _refusal(error, template) from None
    except (SecurityError, RecursionError, UnicodeDecodeError, UndefinedValue, TemplateFailure,
            jinja2.TemplateError) as error:
        raise _render_error(error, template) from None
    except (TypeError, ValueError, ArithmeticError, LookupError, MemoryError) as error:
        if template.builtin:
            raise  # values are schema-checked for the built-ins: this is a bug
        raise TemplateError(
            f"template {template.name} ({_where(error, template)}) failed: "
            f"{type(error).__name__}: {error}"
        ) from None


def _load(template: TemplateRef) -> jinja2.Template:
    """The compiled template (from the bytecode cache when it is there); a broken one is a ``TemplateError``."""
    env = _environment(template.folder)
    name = template.name + TEMPLATE_SUFFIX if template.builtin else _file_name(template.filename)
    try:
        return env.get_template(name)
    except TemplateRefused as error:
        raise TemplateError(f"template {template.filename}: {error}") from None
    except jinja2.TemplateSyntaxError as error:
        where = error.filename or error.name or template.filename
        raise TemplateError(
            f"{where}:{error.lineno}: template syntax error: {error.message}"
        ) from None
    except jinja2.TemplateNotFound as error:
        raise TemplateError(f"template {error.name} not found (needed by {template.filename})") from None
    except OSError as error:
        raise TemplateError(f"cannot read template {template.filename}: {error}") from None
    except UnicodeDecodeError as error:
        raise TemplateError(
            f"template {template.filename} (or one it imports) is not UTF-8 text "
            f"(byte {error.start}); save it as UTF-8"
        ) from None


_LOADING_STATEMENTS = {"Include": "include", "Import": "import", "FromImport": "from-import", "Extends": "extends"}


def _refusal(error: TemplateRefused, template: TemplateRef) -> TemplateError:
    """A refused include as the user reads it: which statement of which template, the name, and why."""
    found = _template_line(error.__traceback__)
    where, statement = template.filename, "include, import or extends"
    if found is not None:
        filename, line = found
        where = f"{_file_name(filename) if template.builtin else filename}, line {line}"
        statement = _statement_at(template, filename, line) or statement
    return TemplateError(
        f"template {where}: {statement} of '{error.name}' refused: {error.why}"
    )


def _statement_at(template: TemplateRef, filename: str, line: int) -> str | None:
    """``include`` / ``import`` / ``from-import`` / ``extends``: the statement on ``line`` of ``filename``."""
    from jinja2 import nodes

    env = _environment(template.folder)
    if template.folder is None:  # a built-in's frames carry its bare name
        filename = os.path.join(builtin_dir(), os.path.basename(filename))
    try:
        with open(filename, encoding="utf-8") as file:
            tree = env.parse(file.read())
    except (OSError, UnicodeDecodeError, jinja2.TemplateError):
        return None
    for node in tree.find_all((nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)):
        if node.lineno == line:
            return _LOADING_STATEMENTS[type(node).__name__]
    return None


def _render_error(error: BaseException, template: TemplateRef) -> TemplateError:
    """What a user reads when rendering failed: what, where (template file and line) and how to fix it."""
    if isinstance(error, SecurityError):
        return TemplateError(
            f"template {template.name} ({_where(error, template)}) uses something templates may "
            f"not: {error} (templates run in Jinja's sandbox: values, filters and the methods "
            "of plain values only; see 'paijob templates --help')"
        )
    if isinstance(error, RecursionError):
        return TemplateError(
            f"template {template.filename} extends, includes or calls itself without end; "
            "a template may extend or include only other templates"
        )
    if isinstance(error, UnicodeDecodeError):
        return TemplateError(
            f"a template that {template.filename} imports is not UTF-8 text "
            f"(byte {error.start}); save it as UTF-8"
        )
    if isinstance(error, UndefinedValue) and error.value_path:
        return TemplateError(
            f"value '{error.value_path}' is not set (template {_where(error, template)}); "
            f"set it with --set {error.value_path}=VALUE or in a -f values file"
        )
    if isinstance(error, UndefinedValue):
        return TemplateError(f"template {_where(error, template)}: {error.message}")
    return TemplateError(f"template {template.name} ({_where(error, template)}): {error}")


def render_template(
    template: str | TemplateRef,
    value_files: Sequence[str | Path] = (),
    sets: Sequence[str] = (),
    set_strings: Sequence[str] = (),
    *,
    ordered_sets: Sequence[SetArg] | None = None,
    check: bool = True,
    allow_unknown: bool = False,
    openpai_before_1_6: bool | None = None,
) -> RenderResult:
    """Render a template to a checked OpenPAI job.

    ``template`` is a built-in name or a path to a ``.yaml.j2`` file;
    ``value_files`` layer over the defaults in order, then ``sets``
    (``key=value``, typed) and ``set_strings`` (``key=value``, always text),
    or ``ordered_sets`` — ``[("set" | "set-string", "key=value"), ...]`` in
    command-line order — instead of both. Raises ``PaijobError`` subclasses:
    ``TemplateError`` / ``ValuesError`` for bad input, ``JobValidationError``
    when ``check`` and the rendered job breaks the protocol. Warnings are in
    ``result.report.warnings``.

    A value the template never reads (``--set instnaces=2``) is an error for a
    template with a values schema, the built-ins among them: its values are
    declared, so an unknown one is a typo that would otherwise render (and
    submit) a job without it. ``allow_unknown`` passes deliberate extras (a
    values file shared by several templates) with a warning, as for templates
    without a schema.
    """
    ref = template if isinstance(template, TemplateRef) else find_template(template)
    if ordered_sets is None:
        ordered_sets = [("set", s) for s in sets] + [("set-string", s) for s in set_strings]
    unknown: list[str] = []
    values = build_values(ref, value_files, ordered_sets, unknown, used_names)
    if unknown and not allow_unknown and ref.schema_file() is not None:
        raise ValuesError(f"{'; '.join(unknown)}; fix the name, or pass --allow-unknown-values to keep it "
                          "as a warning (a values file shared by several templates)")
    text = render_text(ref, values)
    source = f"{ref.name} (rendered)"
    # The rendered TEXT, re-read exactly as `paijob validate` reads a file: what
    # is checked is what is printed (a duplicate key, a value that broke the
    # YAML structure), not the values as the template meant them.
    report = validate_text(text, source, openpai_before_1_6=openpai_before_1_6)
    if report.job is None:
        try:
            load_job(text, source)
        except YamlError as error:
            raise TemplateError(
                f"template {ref.filename} rendered text that is not YAML: {error} "
                "(quote values with the '| yaml' filter)"
            ) from None
    report.problems[:0] = [Problem(WARNING, (), message) for message in unknown]
    if check and not report.ok:
        raise JobValidationError(report)
    job = report.job
    return RenderResult(ref, values, text, job if isinstance(job, dict) else {}, report)


def load_job_file(path: str | Path, *, check: bool = True, openpai_before_1_6: bool | None = None) -> RenderResult:
    """A job YAML that needs no rendering, read and checked like a rendered one."""
    from pathlib import Path

    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise PaijobError(f"job file {path} is not UTF-8 text (byte {error.start})") from None
    except OSError as error:
        raise PaijobError(f"cannot read job file {path}: {error.strerror or error}") from None
    report = validate_text(text, str(path), openpai_before_1_6=openpai_before_1_6)  # the checks of `paijob validate`, duplicates included
    job = report.job
    if check and not report.ok:
        raise JobValidationError(report)
    ref = TemplateRef(file.name, str(path), file.resolve().parent, False)
    return RenderResult(ref, {}, text, job if isinstance(job, dict) else {}, report)


def render(
    template: str, values: Sequence[str | Path] = (), sets: Sequence[SetArg] = (), *, check: bool = True,
    allow_unknown: bool = False, openpai_before_1_6: bool | None = None,
) -> RenderResult:
    """Render ``template`` with ``values`` files and ``sets``, or read it when it is a plain job file.

    ``template`` is a built-in name, a ``.yaml.j2`` path, or a ``.yaml`` /
    ``.yml`` job file, which is read and checked instead of rendered (values
    and sets are then an error). ``sets`` are ``("set" | "set-string",
    "key=value")`` in command-line order. Raises ``PaijobError`` subclasses
    (see ``render_template``). ``openpai_before_1_6``: the cluster is older than OpenPAI v1.6 (None: the
    ``PAIJOB_OPENPAI_BEFORE_1_6`` setting; see ``paijob.validate.report.validate_job``).
    """
    if not template:
        raise PaijobError("no template given; see 'paijob templates' for the built-ins")
    if template.endswith(VALUES_SUFFIX) and os.path.isfile(template):
        raise PaijobError(
            f"{template} is a values file, not a template: give the template first and the "
            f"values with -f, e.g. 'ddp -f {template}'"
        )
    if is_job_file(template):
        route = _route_sets(template, values, sets)
        result = load_job_file(template, check=check and route is None, openpai_before_1_6=openpai_before_1_6)
        if route is None:
            return result
        return _with_route(result, route, check=check, openpai_before_1_6=openpai_before_1_6)
    return render_template(template, values, ordered_sets=sets, check=check, allow_unknown=allow_unknown,
                           openpai_before_1_6=openpai_before_1_6)


ROUTE_VALUES = ("storage", "storagePath")


def _route_sets(template: str, values: Sequence[str | Path], sets: Sequence[SetArg]) -> dict[str, Any] | None:
    """``--set storage=NAME`` (and ``storagePath``) given with a job file: the storage route to add to it
    (None: no sets). Any other value is refused: a job file is not rendered."""
    from paijob.render.values import parse_set

    if not values and not sets:
        return None
    route: dict[str, Any] = {}
    for kind, expr in sets:
        keys, value = parse_set(expr, as_string=kind == "set-string", flag=f"--{kind}")
        if len(keys) != 1 or keys[0] not in ROUTE_VALUES:
            route = {}
            break
        route[keys[0]] = value
    if values or "storage" not in route:
        raise PaijobError(
            f"{template} is a job YAML, not a template: -f and --set do not apply to it, except --set "
            "storage=NAME (and storagePath=FOLDER), which puts its output folder on that storage; edit the "
            "file, or give a template (a built-in name or a .yaml.j2 file)")
    return route


def _with_route(result: RenderResult, route: dict[str, Any], *, check: bool,
                openpai_before_1_6: bool | None) -> RenderResult:
    """A job file's ``result`` with the storage route added (``common.storage_route.add_route``), written
    back as js-yaml reads it, and checked again."""
    import copy

    from paijob.common.storage_route import DEFAULT_FOLDER, add_route
    from paijob.openpai.jsdump import dump_job

    if not isinstance(result.report.job, dict):
        raise JobValidationError(result.report)
    edited = add_route(copy.deepcopy(result.report.job), route["storage"], route.get("storagePath", DEFAULT_FOLDER))
    if edited == result.report.job:  # on the route already: the file as it is
        if check and not result.report.ok:
            raise JobValidationError(result.report)
        return result
    text = dump_job(edited, width=1 << 30, allow_unicode=True)
    source = f"{result.template.filename} (with storage {route['storage']})"
    report = validate_text(text, source, openpai_before_1_6=openpai_before_1_6)
    if check and not report.ok:
        raise JobValidationError(report)
    job = report.job
    return RenderResult(result.template, route, text, job if isinstance(job, dict) else {}, report)
