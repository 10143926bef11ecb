"""Names on OpenPAI: role-name conversion, framework object names and the default port label.

Source: openpai-runtime ``framework_parser.py`` (``convert_to_runtime_name``
style conversion: lowercase, keep only a-z0-9), rest-server
``config/v2/protocol.js`` (name patterns) and ``models/v2/utils/name.js``
(``convertName``, ``encodeName``).
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache

# rest-server config/v2/protocol.js: job, prerequisite and deployment names
NAME_PATTERN = "^[a-zA-Z0-9_-]+$"
# ... and task role names, port labels (patternProperties keys)
IDENTIFIER_PATTERN = "^[a-zA-Z_][a-zA-Z0-9_]*$"
# OpenPAI's own template tags in commands and auth (mustache with <% %> delimiters):
# any tag, and the references validate checks: <% $parameters.x %>, <% $secrets.y %>
PAI_ANY_TAG_PATTERN = r"<%[\s\S]*?%>"
PAI_TAG_PATTERN = r"<%\s*\$(parameters|secrets|script|output|data)\.([^\s%]+?)\s*%>"

# What paijob's templates declare and paijob-runtime train reads when the command line does not say.
DEFAULT_PORT_LABEL = "SynPort"

# REST v2 behind the cluster's gateway.
DEFAULT_API_PATH = "/rest-server/api/v2"

_NOT_RUNTIME_CHAR = re.compile(r"[^a-z0-9]")


def js_match(pattern: str, text: str) -> bool:
    """``new RegExp(pattern).test(text)`` for the anchored patterns above.

    Python's ``$`` also matches before a final newline; JavaScript's does not.
    """
    return _js_regex(pattern).search(text) is not None


@lru_cache(maxsize=64)
def _js_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern)


def runtime_role_name(role: str) -> str:
    """The role name as the OpenPAI runtime writes it into variable names (``Worker_A`` -> ``workera``)."""
    return _NOT_RUNTIME_CHAR.sub("", role.lower())


def framework_object_name(job_id: str) -> str:
    """rest-server ``encodeName``: the frameworkcontroller object name of job ``user~name`` (``FC_FRAMEWORK_NAME``).

    The md5 hex digest of the job id, since microsoft/pai 207ca6cde (2019; base32
    before). A name that is no job id of OpenPAI's (no ``~``, or starting with
    ``unknown``) is ``convertName``'d instead, with a leading ``unknown`` removed.
    """
    if job_id.startswith("unknown") or "~" not in job_id:
        return runtime_role_name(job_id.removeprefix("unknown"))
    return hashlib.md5(job_id.encode("utf-8"), usedforsecurity=False).hexdigest()


# openpai-runtime v0.1.10 (shipped with OpenPAI v1.6.0 and later): its init container looks the task's
# role up in the job config by the converted name (initializer.py ``jobconfig['taskRoles'][taskrole]``),
# while the config's keys are the names as written, so a role that the conversion changes fails in init
# (exit 1, before the user's commands). Older clusters run such roles; a setting says the cluster is one
# (paijob.common.contract.OPENPAI_BEFORE_1_6, which the caller names in the fix).
INIT_ROLE_LOOKUP_SINCE = "OpenPAI v1.6.0 (openpai-runtime v0.1.10)"


def before_init_role_lookup(version: object) -> bool | None:
    """Whether a rest-server ``version`` (``GET /api/v2/info``: ``v1.5.0``, ``v1.8.1``) is older than
    OpenPAI v1.6.0; None when it says nothing readable (a fork's own scheme, a missing field)."""
    match = re.match(r"\s*v?(\d+)\.(\d+)", version) if isinstance(version, str) else None
    if match is None:
        return None
    return (int(match.group(1)), int(match.group(2))) < (1, 6)


def role_name_breaks_init(role: str) -> bool:
    """Whether OpenPAI v1.6+'s init container fails to find ``role`` in the job config."""
    return runtime_role_name(role) != role


def role_name_fix(role: str, setting: str) -> str:
    """How to fix a role name that OpenPAI v1.6+'s init container cannot find (one clause)."""
    converted = runtime_role_name(role)
    rename = f"rename the role to '{converted}'" if converted else "rename the role"
    return (f"{rename} (lowercase letters and digits only), or, for a cluster older than OpenPAI v1.6, "
            f"set {setting}=1 (or pass --openpai-before-1.6)")


def init_role_failure(role: str) -> str:
    """What OpenPAI v1.6+'s init container says about ``role`` when it cannot find it."""
    return (f"role '{role}' is looked up as '{runtime_role_name(role)}' by the init container of "
            f"{INIT_ROLE_LOOKUP_SINCE} and later (KeyError in initializer.py: the job config names it "
            f"'{role}'), so the task exits 1 before its commands run")
