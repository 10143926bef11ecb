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
import unicodedata
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from paijob import __version__
from paijob.common import credentials
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
    if not given:
        return None
    key, value = next(iter(given.items()))
    source = str(value).strip()
    problem = source_problem(source)
    if problem:
        raise InstallSettingsError(f"runtimeInstall.{key} {_shown(source)}: {problem}")
    return source


_INDEX_SCHEMES = ("https", "http", "file")
_VCS_SCHEMES = ("https", "http", "ssh", "file", "git")
_CREDENTIALS_FIX = (
    "a password or token written into the job is readable by every user of the cluster (the job's config) and is "
    "printed by --dry-run. Put the URL under the job's secrets: (e.g. secrets: {pipIndex: URL}) and set "
    "runtimeInstall.source: \"<% $secrets.pipIndex %>\", or give pip its settings in env from a secret "
    "(PIP_INDEX_URL: \"<% $secrets.pipIndex %>\") and leave runtimeInstall.source unset")


def source_problem(source: str) -> str | None:
    """What is wrong with ``runtimeInstall.source`` (None: an index URL, a wheel or sdist path or URL, a VCS
    URL, or an OpenPAI secret reference that holds one). Checked at render, so ``validate`` and ``--dry-run``
    refuse what would only fail inside the task, and no credential is ever rendered into a command.

    Judged in its NFKC form (a fullwidth ``＠`` or ``：`` is what a server may read as ``@`` or ``:``), and a
    source that form changes is refused; a credential anywhere (``user:password@``, ``?token=``, a token of a
    known shape) is refused, and no message ever repeats it (``_shown``)."""
    if re.fullmatch(_SECRET_REFERENCE, source):
        return None
    if not source or any(ch.isspace() or not ch.isprintable() for ch in source):
        return "a source is one word without spaces or control characters"
    plain = unicodedata.normalize("NFKC", source)
    if plain.startswith("-"):
        return ("a pip option is not a source; give the URL alone (runtimeInstall.source: https://host/simple), "
                "or pip's settings in env (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL)")
    if _holds_credentials(plain):
        return "it holds credentials (user:password@, a token@, a ?token= or a token in the URL); " + _CREDENTIALS_FIX
    if plain != source:
        return ("it holds characters that Unicode normalisation (NFKC) turns into others (a fullwidth ＠, ：or ／), "
                "which pip and servers may read differently: write the URL in plain ASCII")
    kind = source_kind(source)
    try:
        url = urlsplit(source[source.index("+") + 1:] if kind == "vcs" else source)
    except ValueError:  # an unbalanced [ ] (IPv6), a host Python refuses: its message would repeat the URL
        return "it is not a URL pip can read (an unbalanced [ ] or a host no URL may have)"
    return _shape_problem(kind, url)


# query parameters that carry a credential (?token=, ?access_token=, ?sig=, X-Amz-Signature, ...)
_CREDENTIAL_PARAMETER = ("token", "secret", "passw", "pwd", "sig", "auth", "key", "credential", "session")


def _holds_credentials(source: str) -> bool:
    """Does ``source`` (NFKC) hold a credential: userinfo before the host (``user:pw@``, ``token@``, also with a
    ``/`` in the password), a query parameter named like one, or a token of a known shape?"""
    return credentials.found_in(source) or _userinfo(source) or _query_credential(source)


def _userinfo(source: str) -> bool:
    """``user:password@`` or ``token@`` before the host (an ssh user alone, ``git@host``, is no credential)."""
    scheme, sep, rest = source.partition("://")
    head = re.split(r"[?#]", rest if sep else source, maxsplit=1)[0]
    authority = head.split("/", 1)[0]
    if "@" in authority:
        user = authority.rsplit("@", 1)[0]
        if ":" in user or scheme.lower().rsplit("+", 1)[-1] in ("http", "https") or not sep:
            return True
    if "@" in head and ":" in head.split("@", 1)[0]:  # user:pa/ss@host: a ':' that is not a port's
        after = head.split("@", 1)[0].split(":", 1)[1]
        return not after.split("/", 1)[0].isdigit()
    return False


def _query_credential(source: str) -> bool:
    """A query parameter named like a credential, with a value (``?token=...``, ``X-Amz-Signature=...``)."""
    query = source.split("?", 1)[1].split("#", 1)[0] if "?" in source else ""
    for field in query.split("&"):
        name, equals, value = field.partition("=")
        if equals and value and any(word in name.lower() for word in _CREDENTIAL_PARAMETER):
            return True
    return False


def _shape_problem(kind: str, url: Any) -> str | None:
    """What is wrong with a credential-free source of ``kind`` (``source_kind``), split by ``urlsplit``."""
    if kind == "vcs":
        return None if url.scheme in _VCS_SCHEMES and (url.netloc or url.scheme == "file") else (
            "a VCS URL is git+https://host/repo.git[@ref] (or git+ssh://, git+file://)")
    if kind == "wheel":
        return None if url.scheme in ("", *_INDEX_SCHEMES) else (
            "a wheel or sdist is a path or an https://, http:// or file:// URL")
    if url.scheme in _INDEX_SCHEMES and (url.netloc or url.scheme == "file"):
        return None
    return ("expected an index URL (https://host/simple), a wheel or sdist path or URL (.whl, .tar.gz, .zip) "
            "or a VCS URL (git+https://host/repo.git)")


def _shown(source: str) -> str:
    """The source as an error message may show it: no credential. Everything before the last ``@`` of its
    authority (and of a ``user:pa/ss@``) is masked, every query value is, and a source that still holds a
    credential of a known shape is not shown at all; at most 120 characters."""
    plain = unicodedata.normalize("NFKC", source)
    masked = re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)?[^?#\s]*@", r"\1***@", plain) if "@" in plain else plain
    masked = re.sub(r"([?&][^=&#\s]*=)[^&#\s]*", r"\1***", masked)
    if credentials.found_in(masked):
        return "(not shown: it holds a credential)"
    return repr(masked if len(masked) <= 120 else masked[:117] + "...")


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
    elif re.fullmatch(_SECRET_REFERENCE, source):  # never the marker: OpenPAI would print the secret's value
        tried = shlex.quote(head + f"{requirement(version)} from the index runtimeInstall.source names (a secret)")
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
