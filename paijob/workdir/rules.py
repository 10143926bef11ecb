"""Which paths of a workdir are left out: ignore files, built-in skips, and secret-looking paths.

Ignore files are read as git reads ``.gitignore``: one per folder, patterns
relative to that folder, a deeper file overriding a shallower one, and
``.paijobignore`` beside ``.gitignore`` overriding it. Patterns are gitignore's
"gitwildmatch" syntax as implemented by ``pathspec``, matched with its RE2
backend (``google-re2``): RE2 runs in time linear in the path, so no pattern
(``*a*a*a*a*a*a*a*a*a*a*b``) can make a snapshot hang, which Python's
backtracking ``re`` cannot promise. A pattern pathspec or RE2 refuses is one
``WorkdirError`` naming the file and line.

Secret-looking paths (``SECRET_PATTERNS``, matched case-insensitively at any
depth) are never shipped unless a ``.paijobignore`` names them exactly with a
re-include line without wildcards (``!config/.env``): on a real cluster the
job text, snapshot included, is readable by every user of the cluster.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pathspec

from paijob.errors import PaijobError

# Never worth shipping: version control, virtual environments, caches, paijob's own state.
ALWAYS_SKIPPED = frozenset((".git", ".hg", ".svn", ".venv", "venv", "__pycache__", ".paijob", ".mypy_cache",
                            ".pytest_cache", ".ruff_cache", ".tox", ".ipynb_checkpoints"))
IGNORE_FILES = (".gitignore", ".paijobignore")  # in order: the later one wins
PAIJOBIGNORE = ".paijobignore"

# What secret scanners (gitleaks, detect-secrets) and cloud CLIs' own ignore
# files treat as credentials. gitwildmatch, matched against the lowercased path.
SECRET_PATTERNS = (
    # dotenv and shell environment files
    ".env", ".env.*", "*.env", ".envrc",
    # credential files of common tools
    ".netrc", "_netrc", ".pypirc", ".git-credentials", ".npmrc", ".yarnrc", ".yarnrc.yml", ".pgpass",
    ".my.cnf", ".boto", ".s3cfg", ".dockercfg", "**/.docker/config.json", ".vault-token", ".terraformrc",
    "terraform.rc", "*.tfstate", "*.tfstate.backup", ".htpasswd", "credentials", "credentials.json",
    "credentials.*.json", "client_secret*.json", "*service-account*.json", "*service_account*.json",
    "application_default_credentials.json", "secrets.yaml", "secrets.yml", "secrets.json", "secrets.toml",
    ".secrets",
    # Hugging Face tokens: the old ~/.huggingface/token and the current $HF_HOME/token (~/.cache/huggingface);
    # any file named token (HF_HOME elsewhere, CLIs that keep one bare token)
    "**/.huggingface/token", "**/huggingface/token", "**/huggingface/stored_tokens", "token", "*.token",
    # Kaggle's API key (~/.kaggle/kaggle.json, or beside the notebook)
    "kaggle.json", ".kaggle/",
    # folders of credentials (ssh, cloud CLIs, kubernetes, gpg, pass)
    ".ssh/", ".aws/", ".azure/", ".gcloud/", "**/.config/gcloud/", ".kube/", ".gnupg/", ".password-store/",
    ".oci/", "**/.config/gh/",
    # what ~/.config holds, seen from a workdir that is ~/.config itself (shipped only with --force)
    "**/gcloud/credentials.db", "**/gcloud/access_tokens.db", "**/gcloud/legacy_credentials/", "**/gh/hosts.yml",
    "**/git/credentials", "**/rclone/rclone.conf", "**/doctl/config.yaml", "**/containers/auth.json",
    "**/.config/hub", "**/.config/op/", "**/keyrings/",
    # kubeconfigs
    "kubeconfig", "kubeconfig.*", "*.kubeconfig",
    # private keys, keystores, certificates with keys
    "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.ppk", "*.p8", "*.asc", "*.gpg",
    "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk", "*_rsa", "*_ed25519",
)
# Credential homes: a workdir that is (or sits inside) one of these folders is refused unless --force.
CREDENTIAL_FOLDERS = frozenset((".ssh", ".aws", ".azure", ".gcloud", ".kube", ".gnupg", ".password-store",
                                ".docker", ".oci", ".config", ".huggingface", ".terraform.d", ".kaggle"))
CREDENTIAL_SUBFOLDERS = frozenset(((".cache", "huggingface"), (".local", "share")))  # (parent, folder) pairs
WILDCARDS = frozenset("*?[]\\")


class WorkdirError(PaijobError):
    """The folder cannot be shipped as asked (refused, missing, too big, a bad pattern, an unreadable file)."""


def _linear_time_backend() -> None:
    """pathspec's RE2 backend needs google-re2; without it pathspec would fall back to backtracking ``re``."""
    try:
        import re2  # type: ignore[import-not-found,import-untyped,unused-ignore]  # noqa: F401
    except ImportError as error:  # pragma: no cover - google-re2 is in install_requires
        raise WorkdirError(f"matching ignore patterns needs google-re2 ({error}); pip install google-re2") from None


def _spec(lines: list[str]) -> pathspec.GitIgnoreSpec:
    try:
        with warnings.catch_warnings():  # re's FutureWarning on "[[" patterns: the pattern is judged below
            warnings.simplefilter("ignore")
            return pathspec.GitIgnoreSpec.from_lines(lines, backend="re2")
    except ImportError as error:  # pragma: no cover - google-re2 is in install_requires
        raise WorkdirError(f"matching ignore patterns needs google-re2 ({error}); pip install google-re2") from None


def compile_lines(lines: list[str], source: str) -> pathspec.GitIgnoreSpec:
    """The spec of one ignore file; a pattern that cannot compile is one error naming ``source`` and its line."""
    try:
        return _spec(lines)
    except Exception:  # noqa: BLE001 - pathspec, re and re2 raise several types; find the line below
        pass
    for number, line in enumerate(lines, 1):
        try:
            _spec([line])
        except Exception as error:  # noqa: BLE001
            detail = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise WorkdirError(f"{source}:{number}: bad pattern {line.strip()!r} ({detail}); fix or remove "
                               "that line (gitignore syntax)") from None
    return _spec(lines)  # each line alone compiled: the combination is fine as well


_linear_time_backend()
SECRETS = _spec(list(SECRET_PATTERNS))


def default_ignore_lines() -> list[str]:
    """The rules of ``paijob init``'s ``.paijobignore``, used where a workdir has none."""
    text = resources.files("paijob.scaffold").joinpath("paijobignore").read_text(encoding="utf-8")
    return text.splitlines()


@dataclass(frozen=True)
class Layer:
    """The ignore files of one folder: their spec and the paths a ``.paijobignore`` names exactly."""

    prefix: str  # the folder, relative to the workdir, "" or ending in "/"
    spec: pathspec.GitIgnoreSpec
    named: frozenset[str] = frozenset()

    def check(self, rel: str, is_dir: bool) -> bool | None:
        """True: ignored, False: re-included, None: no pattern here says."""
        if not rel.startswith(self.prefix):
            return None
        path = rel[len(self.prefix):] + ("/" if is_dir else "")
        result: Any = self.spec.check_file(path)
        return None if result.include is None else bool(result.include)


def _named(lines: Iterable[str], prefix: str) -> set[str]:
    """Paths a ``.paijobignore`` re-includes literally (``!path``): the user named them."""
    found = set()
    for raw in lines:
        line = raw.strip()
        if line.startswith("!") and not WILDCARDS & set(line[1:]):
            path = line[1:].strip("/")
            if path:
                found.add(prefix + path)
    return found


def load_layer(folder: Path, prefix: str, *, defaults: bool) -> Layer | None:
    """The rules of ``folder``'s ignore files (``defaults``: add paijob's own where no .paijobignore is)."""
    lines: list[str] = []
    named: set[str] = set()
    for name in IGNORE_FILES:
        path = folder / name
        try:
            if not path.is_file() or path.is_symlink():
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as error:
            raise WorkdirError(f"cannot read {path}: {error.strerror or error}") from None
        own = text.splitlines()
        compile_lines(own, str(path))
        lines.extend(own)
        if name == PAIJOBIGNORE:
            named |= _named(own, prefix)
    if defaults and not (folder / PAIJOBIGNORE).exists():
        lines = default_ignore_lines() + lines
    if not lines:
        return None
    return Layer(prefix, compile_lines(lines, str(folder)), frozenset(named))


@dataclass
class Rules:
    """The layers that apply inside one folder, outermost first."""

    layers: tuple[Layer, ...] = ()
    named: frozenset[str] = field(default_factory=frozenset)

    def inside(self, layer: Layer | None) -> Rules:
        if layer is None:
            return self
        return Rules((*self.layers, layer), self.named | layer.named)

    def ignored(self, rel: str, is_dir: bool) -> bool:
        for layer in reversed(self.layers):  # the deepest folder's files win, as in git
            verdict = layer.check(rel, is_dir)
            if verdict is not None:
                return verdict
        return False

    def is_named(self, rel: str) -> bool:
        """``rel`` itself is named exactly in a ``.paijobignore`` (naming a folder names none of its secrets)."""
        return rel in self.named

    def names_inside(self, rel: str) -> bool:
        """Something under folder ``rel`` is named exactly (so a secret-looking folder is entered)."""
        return any(name.startswith(rel + "/") for name in self.named)


def looks_secret(rel: str, is_dir: bool) -> bool:
    path = rel.lower() + ("/" if is_dir else "")
    return bool(SECRETS.match_file(path))


def _credential_home(real: str) -> str | None:
    """The credential home ``real`` is or sits in (``~/.aws``, ``~/.config``, ``~/.cache/huggingface``), if any."""
    parts = Path(real).parts
    for index, part in enumerate(parts):
        if part in CREDENTIAL_FOLDERS or (index and (parts[index - 1], part) in CREDENTIAL_SUBFOLDERS):
            return os.path.join(*parts[:index + 1])
    return None


def secret_prefix(real: str) -> str:
    """What secret patterns read in front of a path of workdir ``real``: its place in its credential home.

    Inside ``~/.cache/huggingface`` (shipped with ``--force``) the token's path
    is just ``token``; matched as ``huggingface/token`` it looks like what it
    is, whatever the workdir's root. "" for a workdir outside credential homes.
    """
    home = _credential_home(real)
    if home is None:
        return ""
    return os.path.relpath(real, os.path.dirname(home)) + "/"


def refuse_root(folder: Path, home: str | None = None, *, guarded: Iterable[Path] = (),
                force: bool = False) -> str | None:
    """Refuse a workdir that is or holds the home folder, is a credential home, or holds a ``guarded`` file.

    The home folder is refused always. A credential home, or a folder holding
    one of the ``guarded`` files (paijob's own profile store, with tokens), is
    refused unless ``force``: then the reason is returned, for the user to be
    told what ships from it (the guarded files themselves never do).
    """
    home_dir = os.path.realpath(home if home is not None else os.path.expanduser("~"))
    real = os.path.realpath(folder)
    if home_dir == real or home_dir.startswith(real.rstrip("/") + "/"):
        what = "your home folder" if home_dir == real else f"a folder holding your home folder ({home_dir})"
        raise WorkdirError(f"--workdir {folder} is {what}; everything in it would be readable by every user of "
                           "the cluster: give the project's own folder")
    credential_home = _credential_home(real)
    held = [str(path) for path in guarded if _inside(real, os.path.realpath(path)) and os.path.lexists(path)]
    if credential_home is not None:
        reason = f"is in a credentials folder ({credential_home})"
    elif held:
        reason = f"holds paijob's cluster profiles with their tokens ({held[0]})"
    else:
        return None
    if not force:
        raise WorkdirError(f"--workdir {folder} {reason}; paijob does not ship credentials: give the project's own "
                           "folder and use OpenPAI's `secrets` for what a job needs (--force ships it anyway, "
                           "secret-looking files left out)")
    return reason


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
