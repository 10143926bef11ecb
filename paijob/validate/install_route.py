"""Which way a job's tasks get ``paijob-runtime``: read from the job's own commands.

The built-in templates start each task with one install step
(``paijob.render.runtime_install`` writes it; its first words are
``STEP_PREFIX``). ``paijob validate`` and ``paijob submit --dry-run`` print the
route this module reads back, so a user learns before the queue that a task will
reach for PyPI (or the index, wheel or VCS URL they set), or that the image
must bring ``paijob-runtime`` itself.

When the step cannot install paijob it prints one line and exits
``INSTALL_FAILED_EXIT`` (127, the shell's "command not found"), with the words
``command not found`` in that line: OpenPAI's runtime then reports exit code 220,
``UserCommandExitWithError``, ``PERMANENT`` / ``NEVER_RETRY``
(``paijob.openpai.exitspec``), so a task that cannot get paijob is not retried
into the same failure.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

STEP_PREFIX = "command -v paijob-runtime >/dev/null ||"
INSTALL_FAILED_EXIT = 127
FAILURE_HEAD = "paijob-runtime: command not found, and pip could not install "  # the failure line's start
DEFAULT_INDEX = "https://pypi.org/simple"
_VCS_PREFIXES = ("git+", "hg+", "svn+", "bzr+")
_ARCHIVE_SUFFIXES = (".whl", ".tar.gz", ".zip")


_PIP_INDEX_EXPORT = "export PIP_INDEX_URL="


def _exported(command: str) -> str | None:
    """The value of ``export PIP_INDEX_URL=VALUE`` (the templates' ``env`` line), None when not one word."""
    try:
        words = shlex.split(command[len("export "):])
    except ValueError:
        return None
    return words[0].partition("=")[2] if len(words) == 1 else None


def source_kind(source: str) -> str:
    """``wheel`` (a wheel or sdist file/URL), ``vcs`` (``git+https://...``) or ``index`` (a pip index URL)."""
    text = source.strip()
    if text.startswith(_VCS_PREFIXES):
        return "vcs"
    if text.split("#", 1)[0].split("?", 1)[0].endswith(_ARCHIVE_SUFFIXES):
        return "wheel"
    return "index"


def _words(step: str) -> list[str] | None:
    pip_call = step[len(STEP_PREFIX):].split(" || {", 1)[0]  # the failure message after it: not read
    try:
        return shlex.split(pip_call)
    except ValueError:
        return None


def describe_step(step: str, pip_index: str | None = None) -> str:
    """What one install step installs from, for people: ``paijob==0.1.0 from https://pypi.org/simple``;
    ``pip_index``: the ``PIP_INDEX_URL`` the commands export before it, when they do."""
    words = _words(step)
    if not words or "install" not in words:
        return "a custom install step"
    target = words[-1]
    if "--index-url" in words[:-1]:
        return f"{target} from the index {words[words.index('--index-url') + 1]}"
    if target.startswith("paijob==") and pip_index:
        return f"{target} from the index {pip_index} (PIP_INDEX_URL in env)"
    if target.startswith("paijob=="):
        return f"{target} from PyPI ({DEFAULT_INDEX}) or the index PIP_INDEX_URL in env names"
    kind = {"vcs": "the VCS URL", "wheel": "the file"}.get(source_kind(target), "")
    return f"paijob from {kind} {target}".replace("  ", " ")


def route(roles_commands: Iterable[tuple[str, Iterable[str]]]) -> str | None:
    """One line: how the tasks that run paijob-runtime get it; None when no role runs it.

    ``roles_commands``: (role name, its commands) for every role.
    """
    steps: list[str] = []
    pip_index: str | None = None
    runs_runtime = False
    for _, commands in roles_commands:
        for command in commands:
            if not isinstance(command, str):
                continue
            if command.startswith(_PIP_INDEX_EXPORT) and not steps:
                pip_index = _exported(command)
            if command.startswith(STEP_PREFIX):
                steps.append(command)
            elif "paijob-runtime" in command:
                runs_runtime = True
    if steps:
        return ("paijob-runtime: the image's own, else installed at task start: " + describe_step(steps[0], pip_index)
                + f" (a failed install ends the task with exit {INSTALL_FAILED_EXIT}, never retried)")
    if runs_runtime:
        return "paijob-runtime: no install step, so the image must have it"
    return None
