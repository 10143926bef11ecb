"""OpenPAI's REST v2 details that both the local cluster and the client must agree on.

Sources (microsoft/pai rest-server):

* ``src/controllers/v2/job.js`` ``list``: ``username``, ``vc``, ``state`` (and
  ``tagsContain`` / ``tagsNotContain``) are comma lists; ``limit`` defaults to
  5000 and above 50000 is a 400 ``InvalidParametersError``; newest first.
  ``getConfig`` sends the stored config object with ``type('text/yaml')``:
  Express then writes it as JSON (``res.send`` of an object), so the body is
  JSON whatever the ``Accept`` header says, labelled ``text/yaml``.
* ``src/utils/protocolSecret.js`` ``mask``: the stored config has its
  ``secrets:`` block replaced by ``secrets: "******"``.
* ``src/models/v2/job/k8s.js``: frameworkcontroller task roles are named with
  ``convertName`` (``Worker_A`` -> ``workera``), so REST JSON (``taskRoles``
  keys, ``appExitTriggerTaskRoleName``, ``containerLog``) and task/log paths use
  that name; ``convertState`` maps states, a stopped job's code is -210.
* ``src/models/v2/task.js``: a task's attempts are listed newest first.
* ``src/middlewares/v2/protocol.js``: a schema failure is a 400
  ``InvalidProtocolError`` whose message is ajv's error array (as JSON text).
"""

from __future__ import annotations

import json
import re
from typing import Any

from paijob.openpai.names import runtime_role_name

DEFAULT_LIST_LIMIT = 5000
MAX_LIST_LIMIT = 50000
CONFIG_CONTENT_TYPE = "text/yaml; charset=utf-8"


def list_filter(value: str | None) -> list[str] | None:
    """A list filter query value (``a,b``) as its items; None when the filter is absent."""
    if value is None:
        return None
    return value.split(",")


def mask_secrets(config_text: str) -> str:
    """protocolSecret.js ``mask``: the top-level ``secrets:`` block becomes ``secrets: "******"``."""
    masked = re.sub(r"(^secrets:)[\s\S]*?(^\w)", r'\1 "******"\n\2', config_text + "\nZ", count=1, flags=re.M)
    return masked[:-2]


def rest_role_name(role: str) -> str:
    """The name OpenPAI's REST API uses for a task role (in JSON and in paths)."""
    return runtime_role_name(role)


def tasks_of(detail: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(role, task status)`` for every task of a job detail (``GET /jobs/{user}~{name}``), in order."""
    return [(role, status) for role, info in (detail.get("taskRoles") or {}).items()
            for status in info.get("taskStatuses") or []]


def _ajv_line(error: Any) -> str:
    if not isinstance(error, dict):
        return str(error)
    path = str(error.get("dataPath") or error.get("instancePath") or "").lstrip(".")
    message = str(error.get("message") or error.get("keyword") or "invalid")
    raw_params = error.get("params")
    params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
    extra = params.get("additionalProperty") or params.get("missingProperty")
    if error.get("keyword") == "additionalProperties" and extra:
        message = f"{message}: {extra!r}"
    elif params.get("allowedValues"):
        message = f"{message}: {', '.join(map(str, params['allowedValues']))}"
    return f"{path}: {message}" if path else message


def format_protocol_errors(message: str) -> list[str] | None:
    """An ``InvalidProtocolError`` message that is ajv's JSON error array, as one readable line per error.

    None when the message is not such an array (plain text messages, e.g.
    ``Prerequisite x does not exist.``, stay as they are).
    """
    text = message.strip()
    if not text.startswith("["):
        return None
    try:
        errors = json.loads(text)
    except ValueError:
        return None
    if not isinstance(errors, list):
        return None
    return [_ajv_line(error) for error in errors]
