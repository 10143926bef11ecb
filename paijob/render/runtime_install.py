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

_SECRET_REFERENCE = r"<%\s*\$secrets\.[A-Za-z0-9_.-]+\s*%>"  # compiled on first use (re caches it)


class InstallSettingsError(PaijobError):
    """``runtimeInstall`` or ``imageCredentials`` values that cannot make a working job."""


def requirement(version: str = __version__) -> str:
    """The pip requirement of the exact client version (``paijob==0.1.0``)."""
    return f"paijob=={version}"


def install_command(settings: Mapping[str, Any] | None, version: str = __version__) -> str | None:
    """The task command that installs paijob-runtime when the image lacks it; None when disabled.

    ``PIP_BREAK_SYSTEM_PACKAGES``: a Debian/Ubuntu python3 refuses pip installs
    (PEP 668); a task container is thrown away, so installing there is what the
    user wants. ``command -v`` first: an image that has paijob-runtime pays nothing.
    """
    settings = settings or {}
    if not settings.get("enabled", True):
        return None
    index_url = settings.get("indexUrl")
    wheel_url = settings.get("wheelUrl")
    if index_url and wheel_url:
        raise InstallSettingsError(
            "runtimeInstall: set indexUrl (a pip index holding paijob) or wheelUrl (one wheel), not both")
    words = ["python3", "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check", "--no-deps"]
    if index_url:
        words += ["--index-url", str(index_url)]
    words.append(str(wheel_url) if wheel_url else requirement(version))
    return ("command -v paijob-runtime >/dev/null || PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore "
            + shlex.join(words))


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
