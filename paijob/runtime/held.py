"""What paijob-runtime takes out of its own environment as it starts, and holds for itself alone.

Why: torch's elastic agent starts each worker with the launcher's whole environment (``os.environ`` and the
worker's own variables), so whatever stays in the launcher's environment is in every worker's
``/proc/<pid>/environ``, readable by the job's code. What the cluster hands the runtime alone
(:data:`paijob.common.contract.RUNTIME_ONLY`: the record key that signs its failure record, the per-job node
key that signs what the nodes tell each other, where the local cluster wants the stall and slow-rank records)
is taken out before any worker starts and kept here. On OpenPAI the node key is the job's own secret, in the
file rest-server mounts into the job's containers (:data:`JOB_SECRETS`): the job's code can read that file
too (docs/security.md says what follows). No torch import.
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping

from paijob.common import contract, untrusted

# rest-server mounts a job's secrets here, as js-yaml's dump of the map (models/v2/job/k8s.js ~750, ~864)
JOB_SECRETS = "/usr/local/pai/secrets/secrets.yaml"
_SECRET_LINE = re.compile(rf"^{contract.NODE_KEY_SECRET}: *['\"]?([0-9a-f]{{32,128}})['\"]? *$", re.MULTILINE)
_held: dict[str, str] = {}


def take(environ: MutableMapping[str, str] = os.environ) -> None:
    """Take :data:`~paijob.common.contract.RUNTIME_ONLY` out of ``environ`` (before any worker starts)."""
    for name in contract.RUNTIME_ONLY:
        value = environ.pop(name, None)
        if value:
            _held[name] = value


def value(name: str) -> str | None:
    """What the cluster handed the runtime under ``name`` (one of ``RUNTIME_ONLY``); None: nothing."""
    return _held.get(name)


def node_key(secrets_file: str = JOB_SECRETS) -> bytes | None:
    """The job's node key: the local cluster's (:data:`~paijob.common.contract.NODE_KEY`), else the OpenPAI job's
    own secret in ``secrets_file``; None: the job has none (rendered by an older paijob, or run by hand)."""
    given = _held.get(contract.NODE_KEY)
    if given:
        return given.encode()
    data = untrusted.read_regular(secrets_file, 64 * 1024)
    found = _SECRET_LINE.search(data.decode("utf-8", "replace")) if data else None
    return found.group(1).encode() if found else None
