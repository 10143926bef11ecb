"""Cluster profiles: which OpenPAI cluster to talk to, as whom, with which token.

Stored in ``$XDG_CONFIG_HOME/paijob/clusters.yaml`` (default
``~/.config/paijob/clusters.yaml``), mode 0600::

    current: prod
    clusters:
      prod:
        url: https://pai.example.com
        user: alice
        token_env: PAI_PROD_TOKEN     # read from the environment when used
      lab:
        url: http://10.0.0.5
        user: bob
        token: eyJ...                 # stored by `paijob login lab`

``PAI_CLUSTER_URL`` (+ ``PAI_TOKEN``, ``PAI_USER``) define a cluster from the
environment when no ``-c`` is given; ``PAI_TOKEN`` also overrides the token of
the chosen profile. The name ``local`` (or no cluster configured at all) means
the embedded local cluster. A token is never printed: ``describe`` shows where
it comes from, not what it is.
"""

from __future__ import annotations

import base64
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from paijob.common import credentials
from paijob.common.safefile import atomic_write
from paijob.errors import PaijobError
from paijob.remote.errors import hide_url_password

LOCAL = "local"
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # an environment variable's name, as a shell takes it


class ProfileError(PaijobError):
    """A cluster profile is missing, malformed or lacks a token."""



def is_local(name: str | None) -> bool:
    """Whether a cluster (profile) name is the embedded local cluster's: the one place that asks."""
    return name == LOCAL

@dataclass(frozen=True)
class Cluster:
    """A resolved cluster: where, as whom, with which token (``repr`` hides it)."""

    name: str
    url: str
    user: str | None
    token: str | None = field(repr=False)
    api_path: str = "/rest-server/api/v2"
    token_source: str = "none"
    mounts: tuple[tuple[str, str], ...] = ()  # (storage, where this machine mounts it): what `paijob cp` reads

    def mount(self, storage: str) -> str | None:
        """Where this machine mounts ``storage`` (``cluster add --mount NAME=PATH``), or None."""
        return dict(self.mounts).get(storage)

    @property
    def is_local(self) -> bool:
        return is_local(self.name)

    @property
    def api_base(self) -> str:
        """The REST root every request goes under, e.g. ``https://pai.example.com/rest-server/api/v2``."""
        return self.url.rstrip("/") + "/" + self.api_path.strip("/")


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "paijob" / "clusters.yaml"


def load() -> dict[str, Any]:
    path = config_path()
    if not path.exists():
        return {"current": None, "clusters": {}}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ProfileError(f"{path}: not valid YAML ({error}); fix or delete the file") from None
    if not isinstance(data, dict) or not isinstance(data.get("clusters", {}), dict):
        raise ProfileError(f"{path}: expected a mapping with a 'clusters' mapping; fix or delete the file")
    data.setdefault("clusters", {})
    data.setdefault("current", None)
    return data


def save(data: dict[str, Any]) -> Path:
    """Write the profiles atomically with mode 0600 (the file may hold tokens)."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write(path, yaml.safe_dump(data, sort_keys=False).encode("utf-8"), mode=0o600)
    return path


def check_url(url: str, where: str) -> str:
    """``url`` without a trailing slash when it is an http(s) URL with a host and a valid port."""
    hint = f"{where}: the cluster URL {hide_url_password(url)!r} "
    try:
        parts = urlsplit(url.strip())
        port = parts.port  # raises ValueError when out of range or not a number
    except ValueError:
        raise ProfileError(hint + "has an invalid port; use a port from 1 to 65535, e.g. https://pai.example.com:8443") from None
    if parts.scheme not in ("http", "https"):
        raise ProfileError(hint + "must start with http:// or https://, e.g. https://pai.example.com")
    if not parts.hostname:
        raise ProfileError(hint + "names no host, e.g. https://pai.example.com")
    if port == 0:
        raise ProfileError(hint + "has port 0; use a port from 1 to 65535")
    return url.strip().rstrip("/")


def check_name(name: str) -> str:
    if name == LOCAL:
        raise ProfileError("'local' is the built-in local cluster; pick another profile name")
    if not _NAME.match(name):
        raise ProfileError(f"cluster name {name!r} may only use letters, digits, '.', '_' and '-'")
    return name


def parse_mount(text: str) -> tuple[str, str]:
    """``NAME=/local/path`` (``cluster add --mount``): a storage and where this machine mounts it."""
    name, sep, path = text.partition("=")
    if not sep or not _NAME.match(name) or not path:
        raise ProfileError(f"--mount {text!r}: give STORAGE=/local/path, e.g. --mount nfs-home=/mnt/pai-home "
                           "(the storage's name as GET /api/v2/storages lists it, and the folder where this "
                           "machine mounts it)")
    folder = Path(path).expanduser()
    if not folder.is_absolute():
        raise ProfileError(f"--mount {text!r}: the local path must be absolute")
    if not folder.is_dir():
        raise ProfileError(f"--mount {text!r}: {folder} is not a folder on this machine; mount the storage there "
                           f"first (GET /api/v2/storages/{name} says its server and path), then add the profile")
    return name, str(folder)


def add(name: str, url: str, *, user: str | None = None, token_env: str | None = None,
        token: str | None = None, api_path: str | None = None, make_current: bool = False,
        mounts: dict[str, str] | None = None) -> Path:
    check_name(name)
    url = check_url(url, f"cluster {name}")
    if token_env is not None:
        check_token_env(token_env)
    data = load()
    entry: dict[str, Any] = {"url": url}
    if mounts:
        entry["mounts"] = dict(mounts)
    if user:
        entry["user"] = user
    if token_env:
        entry["token_env"] = token_env
    if token:
        entry["token"] = token
    if api_path:
        entry["api_path"] = api_path
    data["clusters"][name] = entry
    if make_current or not data.get("current"):
        data["current"] = name
    return save(data)


def token_variables() -> set[str]:
    """The variables the saved profiles read their tokens from (``token_env``): a local task never inherits
    them, whatever their names (``PROD_TOK`` matches none of the usual secret patterns). Empty when the
    profiles cannot be read: that is reported where they are used."""
    try:
        clusters = load()["clusters"]
    except (ProfileError, OSError):
        return set()
    return {str(c["token_env"]) for c in clusters.values() if isinstance(c, dict) and c.get("token_env")}


# A token that happens to be a valid variable name: GitHub, Hugging Face, AWS key ids, or a long mix of
# upper and lower case letters and digits without an underscore, as generated tokens are.
_TOKEN_SHAPED = re.compile(r"gh[pousr]_[A-Za-z0-9]{36}|github_pat_\w{59,90}|hf_[A-Za-z]{30,40}|(AKIA|ASIA)[A-Z0-9]{16}"
                           r"|(?=\w*[a-z])(?=\w*[A-Z])(?=\w*[0-9])[A-Za-z0-9]{30,}")


def check_token_env(variable: str) -> None:
    """``--token-env`` names a variable (``PROD_PAI_TOKEN``); anything else is most likely the token itself,
    which must then be neither stored as a name nor echoed in the message. A variable of the shell itself
    (``PATH``, ``HOME``, ``LC_ALL``) holds no token: a slip, refused with its name."""
    if not _VARIABLE.fullmatch(variable) or _TOKEN_SHAPED.fullmatch(variable) or _token_like(variable):
        raise ProfileError("--token-env takes the NAME of an environment variable holding the token (letters, "
                           "digits and _, e.g. PROD_PAI_TOKEN), not the token itself (not shown here): "
                           "`export PROD_PAI_TOKEN=...` then `--token-env PROD_PAI_TOKEN`")
    if credentials.shell_variable(variable):
        raise ProfileError(f"--token-env {variable}: {variable} is a variable of your shell, not one holding a "
                           "token; keep the token in a variable of its own: `export PROD_PAI_TOKEN=...` then "
                           "`--token-env PROD_PAI_TOKEN`")


def _token_like(variable: str) -> bool:
    """A token of a known shape (``sk_live_...``, ``npm_...``: paijob.common.credentials), or random-looking: a
    part of 20 or more characters mixing letters and digits or switching case at every turn, or 10 digits and
    more in 30 characters and more (``xoxb_1234..._AbCd...``). No variable is named so."""
    if credentials.found_in(variable):
        return True
    if len(variable) >= 30 and sum(c.isdigit() for c in variable) >= 10:
        return True
    for part in variable.split("_"):
        if len(part) < 20:
            continue
        switches = sum(1 for a, b in zip(part, part[1:], strict=False) if a.isupper() != b.isupper())
        if switches >= 8 or (any(c.isdigit() for c in part) and any(c.isalpha() for c in part)):
            return True
    return False


def remove(name: str) -> Path:
    data = load()
    if name not in data["clusters"]:
        raise ProfileError(f"no cluster named {name!r}; see `paijob cluster list`")
    del data["clusters"][name]
    if data.get("current") == name:
        data["current"] = next(iter(data["clusters"]), None)
    return save(data)


def use(name: str) -> Path:
    data = load()
    if name != LOCAL and name not in data["clusters"]:
        raise ProfileError(f"no cluster named {name!r}; add it with `paijob cluster add {name} --url URL`")
    data["current"] = name
    return save(data)


def store_login(name: str, url: str, token: str, user: str, *, api_path: str | None = None) -> tuple[Path, str | None]:
    """Record a successful login in one write: the profile (created when new, its URL
    updated) gets the token and user. A ``token_env`` it had is dropped, since it
    would take precedence over the new token; returns (path, the dropped variable)."""
    check_name(name)
    url = check_url(url, f"cluster {name}")
    data = load()
    entry = data["clusters"].setdefault(name, {})
    entry["url"] = url
    entry["token"] = token
    entry["user"] = user
    if api_path:
        entry["api_path"] = api_path
    dropped = entry.pop("token_env", None)
    if not data.get("current"):
        data["current"] = name
    return save(data), (str(dropped) if dropped else None)


def user_from_token(token: str | None) -> str | None:
    """OpenPAI tokens are JWTs whose payload names the user; read it (unverified)."""
    if not token or token.count(".") != 2:
        return None
    payload = token.split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(claims, dict):
        value = claims.get("username") or claims.get("user") or claims.get("sub")
        return str(value) if value else None
    return None


def from_environment() -> Cluster | None:
    """The cluster named by ``PAI_CLUSTER_URL`` (with ``PAI_TOKEN``, ``PAI_USER``), when it is set.

    It stands in for the current profile, never for an explicit ``-c NAME``.
    """
    if not os.environ.get("PAI_CLUSTER_URL"):
        return None
    env_token = os.environ.get("PAI_TOKEN") or None
    url = check_url(os.environ["PAI_CLUSTER_URL"], "PAI_CLUSTER_URL")
    user = os.environ.get("PAI_USER") or user_from_token(env_token)
    return Cluster("env", url, user, env_token, token_source="PAI_TOKEN" if env_token else "none")


def current_name(data: dict[str, Any] | None = None) -> str:
    """The current profile's name (``paijob cluster use``), ``local`` when none was chosen."""
    data = data if data is not None else load()
    return str(data.get("current") or LOCAL)


def named(name: str) -> Cluster:
    """The stored profile ``name`` (not ``local``: the local cluster's profile comes from its state dir)."""
    data = load()
    env_token = os.environ.get("PAI_TOKEN") or None
    entry = data["clusters"].get(name)
    if entry is None:
        known = ", ".join(sorted(data["clusters"])) or "none"
        raise ProfileError(
            f"no cluster named {name!r} (known: {known}, plus 'local'); "
            f"add it with `paijob cluster add {name} --url URL --token-env VAR` or `paijob login {name} --url URL`"
        )
    token: str | None
    if env_token:
        token, source = env_token, "PAI_TOKEN"
    elif entry.get("token_env"):
        var = str(entry["token_env"])
        token, source = os.environ.get(var) or None, f"${var}"
        if token is None:
            raise ProfileError(
                f"cluster {name!r} reads its token from ${var}, which is not set; "
                f"export {var}=<application token> or run `paijob login {name}`"
            )
    elif entry.get("token"):
        token, source = str(entry["token"]), str(config_path())
    else:
        token, source = None, "none"
    user = entry.get("user") or os.environ.get("PAI_USER") or user_from_token(token)
    return Cluster(
        name=name,
        url=check_url(str(entry.get("url") or ""), f"cluster {name!r} in {config_path()}"),
        user=str(user) if user else None,
        token=token,
        api_path=str(entry.get("api_path") or "/rest-server/api/v2"),
        token_source=source,
        mounts=_mounts(entry.get("mounts")),
    )


def _mounts(given: Any) -> tuple[tuple[str, str], ...]:
    """A profile's ``mounts`` mapping, the entries that are text."""
    if not isinstance(given, dict):
        return ()
    return tuple((str(k), v) for k, v in given.items() if isinstance(v, str) and v)


def describe(data: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rows for `paijob cluster list`: never the token, only where it comes from."""
    data = data if data is not None else load()
    rows = []
    current = data.get("current") or LOCAL
    for cname, entry in data["clusters"].items():
        if entry.get("token_env"):
            source = f"${entry['token_env']}"
        elif entry.get("token"):
            source = "stored (paijob login)"
        else:
            source = "none"
        url = entry.get("url")
        rows.append({"name": cname, "url": hide_url_password(url) if isinstance(url, str) else url,
                     "user": entry.get("user"),
                     "token": source, "current": cname == current})
    rows.append({"name": LOCAL, "url": "(embedded local cluster)", "user": None,
                 "token": "state dir", "current": current == LOCAL})
    return rows
