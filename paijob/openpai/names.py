"""Names on OpenPAI: role-name conversion and the default port label.

Source: openpai-runtime ``framework_parser.py`` (``convert_to_runtime_name``
style conversion: lowercase, keep only a-z0-9) and rest-server
``config/v2/protocol.js`` (name patterns).
"""

from __future__ import annotations

import re

# What paijob's templates declare and paijob-runtime train reads when the command line does not say.
DEFAULT_PORT_LABEL = "SynPort"

# REST v2 behind the cluster's gateway.
DEFAULT_API_PATH = "/rest-server/api/v2"

_NOT_RUNTIME_CHAR = re.compile(r"[^a-z0-9]")


def runtime_role_name(role: str) -> str:
    """The role name as the OpenPAI runtime writes it into variable names (``Worker_A`` -> ``workera``)."""
    return _NOT_RUNTIME_CHAR.sub("", role.lower())
