"""What a credential looks like: one home for the shapes every part of paijob refuses to pass on.

Who asks: the workdir snapshot (a file holding one is left out), the local cluster (a variable of the
user's shell that is one is not handed to a task), ``--token-env`` (a token given where a variable's
name belongs), ``runtimeInstall.source`` (a credential in a URL that every user of a cluster can read).

The token shapes are those of gitleaks' default rule set (``config/gitleaks.toml``, the rule ids are
named beside each), restricted to rules with a distinctive prefix: the keyword rules (``generic-api-key``
and ``<service>`` + ``key = <32 hex>``) need gitleaks' entropy filter and allow lists to stay quiet, and
left out a user's ``tokenizer_name = "bert-base-uncased"``. No maintained Python package carries
gitleaks' rules (PyPI has wrappers of its binary and detect-secrets, whose rules are its own), so the
shapes are written here. Each needs only the start of a token (its prefix and a minimum length), so a
match is at most :data:`LONGEST` bytes long and a stream can be searched chunk by chunk.

Besides the tokens: a URL with a password (``postgres://app:PW@db``, ``redis://:PW@host``), Azure's
``AccountKey=`` / ``SharedAccessKey=`` and a SAS ``sig=``, ``docker login -p PW``, an HTTP ``Basic``
credential (base64 of ``user:password``, decoded to be sure), a Kaggle API key file's content.

Every pattern runs on RE2 (google-re2, an install requirement, as for the workdir's ignore patterns in
``paijob.workdir.rules``): its time is linear in the text, so no file a job ships can make the check hang.
"""

from __future__ import annotations

import base64
import binascii
import re
from functools import lru_cache
from typing import Any

# (gitleaks rule id or paijob's own name, RE2 pattern over bytes). Case-sensitive unless (?i:...) says.
TOKEN_RULES: tuple[tuple[str, str], ...] = (
    ("huggingface-access-token", r"\bhf_[A-Za-z]{30,40}\b"),
    ("huggingface-organization-api-token", r"\bapi_org_[A-Za-z]{34}"),
    ("github-pat, github-oauth, github-app-token, github-refresh-token", r"\bgh[pousr]_[A-Za-z0-9]{36}"),
    ("github-fine-grained-pat", r"\bgithub_pat_\w{59}"),
    ("gitlab-*", r"\bgl(?:pat|dt|ft|rt|soat|ffct)-[\w-]{20}|\bglptt-[0-9a-f]{40}|\bglimt-[\w-]{25}"
                 r"|\bglagent-[\w-]{50}|\bgloas-[\w-]{64}|\bglcbt-[0-9a-zA-Z]{1,5}_[\w-]{20}|GR1348941[\w-]{20}"),
    ("aws-access-token", r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"),
    ("aws-amazon-bedrock-api-key-*", r"\bABSK[A-Za-z0-9+/]{64}|bedrock-api-key-YmVkcm9jay5hbWF6b25hd3MuY29t"),
    ("slack-*-token", r"\bxox[abposre]-[A-Za-z0-9-]{10}|(?i:\bxapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+)|(?i:xoxe\.xox[bp]-\d-)"),
    ("slack-webhook-url", r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{43}"),
    ("microsoft-teams-webhook", r"\.webhook\.office\.com/webhookb2/[a-z0-9-]{36}@"),
    ("openai-api-key, anthropic-api-key", r"\bsk-(?:proj-|ant-|svcacct-|admin-)?[A-Za-z0-9_-]{20}"),
    ("pypi-upload-token", r"pypi-AgEIcHlwaS5vcmc[\w-]{50}"),
    ("gcp-api-key", r"\bAIza[\w-]{35}"),
    ("stripe-access-token", r"\b(?:sk|rk)_(?:test|live|prod)_[a-zA-Z0-9]{10}"),
    ("npm-access-token", r"(?i:\bnpm_[a-z0-9]{36})"),
    ("sendgrid-api-token", r"\bSG\.[A-Za-z0-9=_.-]{66}"),
    ("digitalocean-pat, -access-token, -refresh-token", r"\bdo[opr]_v1_[a-f0-9]{64}"),
    ("databricks-api-token", r"\bdapi[a-f0-9]{32}"),
    ("jwt", r"\bey[A-Za-z0-9]{17,400}\.ey[A-Za-z0-9/\\_-]{17}"),
    ("jwt-base64", r"\bZXlK(?:hbGciOi|0eXAiOi|raWQiOi)[A-Za-z0-9+/]{20}"),
    ("azure-ad-client-secret", r"(?:^|[\\'\"`\s>=:(,)])[a-zA-Z0-9_~.]{3}\dQ~[a-zA-Z0-9_~.-]{31,34}(?:$|[\\'\"`\s<),])"),
    ("age-secret-key", r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),
    ("1password-service-account-token", r"\bops_eyJ[a-zA-Z0-9+/]{64}"),
    ("artifactory-api-key", r"\bAKCp[A-Za-z0-9]{69}\b"),
    ("doppler-api-token", r"dp\.pt\.[A-Za-z0-9]{43}"),
    ("dynatrace-api-token", r"dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}"),
    ("grafana-*", r"(?i:\bglc_[A-Za-z0-9+/]{32}|\bglsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|\beyJrIjoi[A-Za-z0-9]{70})"),
    ("vault-service-token, vault-batch-token", r"\bhv[sb]\.[\w-]{90}"),
    ("heroku-api-key-v2", r"\bHRKU-AA[0-9a-zA-Z_-]{58}"),
    ("linear-api-key", r"lin_api_[A-Za-z0-9]{40}"),
    ("notion-api-token", r"\bntn_[0-9]{11}[A-Za-z0-9]{35}"),
    ("perplexity-api-key", r"\bpplx-[a-zA-Z0-9]{48}"),
    ("planetscale-*", r"\bpscale_(?:tkn|oauth|pw)_[\w=.-]{32}"),
    ("postman-api-token", r"\bPMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}"),
    ("prefect-api-token", r"\bpnu_[a-zA-Z0-9]{36}"),
    ("pulumi-api-token", r"\bpul-[a-f0-9]{40}"),
    ("rubygems-api-token", r"\brubygems_[a-f0-9]{48}"),
    ("sendinblue-api-token", r"\bxkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}"),
    ("sentry-user-token, sentry-org-token", r"\bsntryu_[a-f0-9]{64}|\bsntrys_eyJpYXQiO[a-zA-Z0-9+/]{10}"),
    ("shopify-*", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),
    ("square-access-token", r"\bsq0atp-[\w-]{22}"),
    ("twilio-api-key", r"\bSK[0-9a-fA-F]{32}\b"),
    ("infracost-api-token", r"\bico-[a-zA-Z0-9]{32}"),
    ("flyio-access-token", r"\bfo1_[\w-]{43}|\bfm(?:1[ar]|2)_[a-zA-Z0-9+/]{64}"),
    ("openshift-user-token", r"\bsha256~[\w-]{43}"),
    ("maxmind-license-key", r"\b[A-Za-z0-9]{6}_[A-Za-z0-9]{29}_mmk\b"),
    ("clojars-api-token", r"(?i:CLOJARS_[a-z0-9]{60})"),
    ("alibaba-access-key-id", r"\bLTAI[A-Za-z0-9]{20}\b"),
    ("easypost-api-token", r"\bEZ[AT]K[A-Za-z0-9]{54}\b"),
    ("cloudflare-origin-ca-key", r"\bv1\.0-[a-f0-9]{24}-[a-f0-9]{64}"),
    # paijob's own: credentials in connection strings, URLs and command lines
    # (the scheme is not part of the pattern: ``[A-Za-z][A-Za-z0-9+.-]{1,20}`` before ``://`` made RE2's DFA
    # track 20 starts at every letter, 0.6 s a MB of base64; ``://`` alone is the same test)
    ("a URL with a password", r"://[^\s:/@'\"]{0,100}:[^\s/@$<{%'\"][^\s/@'\"]{0,200}@"),
    ("an Azure storage or service bus key", r"(?i:AccountKey|SharedAccessKey)=[A-Za-z0-9+/]{20}"),
    ("a SAS signature", r"(?:^|[?&;\s\"'])sig=[A-Za-z0-9%+/]{20}"),
    ("docker login -p", r"docker[ \t]+login\b[^\n]{0,200}?[ \t](?:-p|--password)(?:=|[ \t]+)[\\\"']*[^\s$\\\"'-]"),
    ("a Kaggle API key", r"\"username\"[ \t]*:[ \t]*\"[^\"\n]{1,100}\"[ \t]*,[ \t\r\n]*\"key\"[ \t]*:[ \t]*\"[0-9a-f]{32}\""),
)
# An HTTP Basic credential: the candidates; one counts when its base64 decodes to printable user:password.
_BASIC = rb"(?i:basic)[ \t]+([A-Za-z0-9+/]{8,400}={0,2})"
LONGEST = 1024  # bytes: every pattern above matches in at most this many (a stream keeps this much across chunks)


def _re2() -> Any:
    import re2  # type: ignore[import-not-found,import-untyped,unused-ignore]  # google-re2: install_requires

    return re2


def _options() -> Any:
    options = _re2().Options()
    options.max_mem = 64 << 20  # the DFA of every rule at once: with RE2's default 8 MB it falls back to the NFA
    options.log_errors = False
    return options


@lru_cache(maxsize=1)
def _tokens() -> Any:
    return _re2().compile("|".join(f"(?:{pattern})" for _, pattern in TOKEN_RULES).encode(), _options())


@lru_cache(maxsize=1)
def _basic() -> Any:
    return _re2().compile(_BASIC, _options())


def _basic_credential(data: bytes) -> bool:
    for match in _basic().finditer(data):
        try:
            decoded = base64.b64decode(match.group(1) + b"=" * (-len(match.group(1)) % 4), validate=True)
            text = decoded.decode("ascii")
        except (binascii.Error, ValueError):
            continue
        user, colon, password = text.partition(":")
        if colon and user and password and text.isprintable():
            return True
    return False


def found_in(data: bytes | str) -> bool:
    """Does ``data`` hold a credential of a known shape (a token, a password in a URL, ...)?"""
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    return _tokens().search(raw) is not None or _basic_credential(raw)


def rule_found(data: bytes | str) -> str | None:
    """The name of the first rule ``data`` matches (for tests and messages; never the match itself)."""
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    for name, pattern in TOKEN_RULES:
        if _re2().search(pattern.encode(), raw):
            return name
    return "an HTTP Basic credential" if _basic_credential(raw) else None


# ------------------------------------------------------------------ environment variables

# Name parts that mark a credential wherever they stand (PGPASSWORD, MY_SECRET_FILE, SLACK_BOT_TOKEN)
_NAME_WORDS = re.compile(r"PASSWORD|PASSWD|PASSPHRASE|SECRET|CREDENTIAL|PRIVATE_?KEY|CONNECTION_?STRING|CONN_?STR")
# ``_``-separated parts that do (KAGGLE_KEY, AWS_ACCESS_KEY_ID, HF_TOKEN, GH_PAT, MYSQL_PWD), not TOKENIZERS_*
_NAME_PARTS = frozenset(("KEY", "KEYS", "APIKEY", "ACCESSKEY", "SECRETKEY", "AUTH", "PAT", "PWD", "DSN", "SAS"))
_TOKEN_PART = re.compile(r"[A-Z0-9]*TOKENS?")


def credential_name(name: str) -> bool:
    """Is ``name`` the name of a variable that usually holds a credential?"""
    upper = name.upper()
    if upper in ("PWD", "OLDPWD"):  # the shell's working folders
        return False
    if _NAME_WORDS.search(upper):
        return True
    parts = [part for part in re.split(r"[^A-Z0-9]+", upper) if part]
    return any(part in _NAME_PARTS or _TOKEN_PART.fullmatch(part) for part in parts)


def credential_variable(name: str, value: str) -> bool:
    """Does variable ``name`` hold a credential, by its name or by its value (``DATABASE_URL`` with a
    password, a connection string with ``AccountKey=``, a token of a known shape under any name)?"""
    return credential_name(name) or found_in(value)


# Variables of every shell that never hold a token: ``--token-env PATH`` is a slip, not a choice.
SHELL_VARIABLES = frozenset((
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "LANG", "LANGUAGE", "TERM", "TMPDIR", "TMP", "TEMP",
    "HOSTNAME", "HOST", "DISPLAY", "EDITOR", "VISUAL", "PAGER", "MAIL", "SHLVL", "TZ", "COLUMNS", "LINES",
    "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV",
    "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "SSH_AUTH_SOCK", "SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY", "MANPATH",
    "INFOPATH", "HISTFILE", "PS1", "PS2", "IFS", "UID", "EUID", "PPID", "RANDOM", "SECONDS", "_",
))
SHELL_PREFIXES = ("LC_", "XDG_", "DBUS_", "BASH_", "TERM_", "COLORTERM", "WAYLAND_", "KDE_", "GNOME_")


def shell_variable(name: str) -> bool:
    """Is ``name`` one of the shell's own variables (``PATH``, ``HOME``, ``LC_ALL``, ...)?"""
    return name in SHELL_VARIABLES or name.startswith(SHELL_PREFIXES)
