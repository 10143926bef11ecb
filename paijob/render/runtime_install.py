"""How the built-in templates get paijob-runtime into a task, and the image's registry login.

A real cluster runs each task in the job's image, which may lack paijob. The
templates therefore start every task with one command that installs
``paijob-runtime`` when it is missing, pinned to the client version that
rendered the job (``runtimeInstall`` in the values). It installs with
``--no-deps``: the runtime needs only the standard library and the image's
torch, so the client's own dependencies (Jinja, requests, Flask, ...) stay out
of the task, while ``pip install paijob`` on a laptop still brings them.

``imageCredentials`` becomes the dockerimage prerequisite's ``auth``; its
password must be an OpenPAI secret reference, never the password itself (every
user of a cluster can read a job's config).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from paijob import __version__
from paijob.errors import PaijobError
from paijob.validate.install_route import (
    DEFAULT_INDEX,
    FAILURE_HEAD,
    INSTALL_FAILED_EXIT,
    STEP_PREFIX,
    source_kind,
)

_SECRET_REFERENCE = r"<%\s*\$secrets\.[A-Za-z0-9_.-]+\s*%>"  # compiled on first use (re caches it)


class InstallSettingsError(PaijobError):
    """``runtimeInstall`` or ``imageCredentials`` values that cannot make a working job."""


def requirement(version: str = __version__) -> str:
    """The pip requirement of the exact client version (``paijob==0.1.0``)."""
    return f"paijob=={version}"


def install_source(settings: Mapping[str, Any]) -> str | None:
    """Where pip gets paijob: ``runtimeInstall.source``, or the older ``indexUrl`` / ``wheelUrl``; None: PyPI."""
    given = {key: settings.get(key) for key in ("source", "indexUrl", "wheelUrl") if settings.get(key)}
    if len(given) > 1:
        raise InstallSettingsError(
            "runtimeInstall: set one of " + " and ".join(given) + ", not both (source: a wheel URL, an index "
            "holding paijob or a VCS URL)")
    return str(next(iter(given.values()))).strip() if given else None


def install_command(settings: Mapping[str, Any] | None, version: str = __version__) -> str | None:
    """The task command that installs paijob-runtime when the image lacks it; None when disabled.

    ``PIP_BREAK_SYSTEM_PACKAGES``: a Debian/Ubuntu python3 refuses pip installs
    (PEP 668); a task container is thrown away, so installing there is what the
    user wants. ``command -v`` first: an image that has paijob-runtime pays nothing.
    When pip fails, one line on stderr says what was tried and the ways out, and the
    step exits ``INSTALL_FAILED_EXIT`` (never retried by OpenPAI: ``install_route``).
    """
    settings = settings or {}
    if not settings.get("enabled", True):
        return None
    source = install_source(settings)
    words = ["python3", "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check", "--no-deps"]
    if source is None:
        words.append(requirement(version))
    elif source_kind(source) == "index":
        words += ["--index-url", source, requirement(version)]
    else:
        words.append(source)
    return (f"{STEP_PREFIX} PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore " + shlex.join(words)
            + " || { printf '%s\\n' " + _failure_line(source, version) + f" >&2; exit {INSTALL_FAILED_EXIT}; }}")


def _failure_line(source: str | None, version: str) -> str:
    """The failure line as a bash word; the default route names the index pip used (``PIP_INDEX_URL`` or PyPI)."""
    head = FAILURE_HEAD
    if source is None:
        tried = shlex.quote(head + f"{requirement(version)} from ") + f'"${{PIP_INDEX_URL:-{DEFAULT_INDEX}}}"'
    elif source_kind(source) == "index":
        tried = shlex.quote(head + f"{requirement(version)} from {source}")
    else:
        tried = shlex.quote(head + f"paijob from {source}")
    return tried + shlex.quote(
        " (the pip error is above). Ways out: an image with paijob-runtime (runtimeInstall.enabled: false), "
        "runtimeInstall.source (a wheel URL, an index holding paijob or a VCS URL), or pip settings in "
        "env (PIP_INDEX_URL, PIP_TRUSTED_HOST, HTTPS_PROXY); see docs/real-cluster.md")


def image_auth(credentials: Mapping[str, Any] | None) -> dict[str, str] | None:
    """``imageCredentials`` as a dockerimage prerequisite's ``auth`` (rest-server's field names); None when unset."""
    credentials = credentials or {}
    registry, username, password = (credentials.get(key) for key in ("registry", "username", "password"))
    if not (registry or username or password):
        return None
    if not username or not password:
        raise InstallSettingsError(
            "imageCredentials: set both username and password (password: \"<% $secrets.NAME %>\", "
            "with the password itself under secrets: NAME)")
    if not isinstance(password, str) or not re.fullmatch(_SECRET_REFERENCE, password.strip()):
        raise InstallSettingsError(
            "imageCredentials.password must be an OpenPAI secret reference such as "
            "\"<% $secrets.registryPassword %>\" with the password under secrets: (a password written in clear "
            "is readable by every user of the cluster in the job's config)")
    auth = {"username": str(username), "password": password.strip()}
    if registry:
        auth["registryuri"] = str(registry)
    return auth
