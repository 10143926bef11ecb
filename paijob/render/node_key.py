"""A job's node key, added at submit among the job's ``secrets`` for a real OpenPAI.

Why: paijob-runtime's nodes talk through the job's TCP store and a port on node 0's host, which any user of
the cluster can reach. Each node signs what it writes there and believes only what is signed with the job's
key (``paijob.runtime.watch.channel``). On OpenPAI the one place only the job's own containers read is its
``secrets``: rest-server masks them in the stored config and mounts them at
``/usr/local/pai/secrets/secrets.yaml`` (k8s.js ~750, ~864), where ``paijob.runtime.held`` reads the key. The
local cluster hands each job a key itself (``PAIJOB_NODE_KEY``), so its jobs carry none.

A new key per submit, never by ``render`` (a rendered file may be submitted twice, or shared): ``--dry-run``
shows it masked, as rest-server shows a stored job's secrets.
"""

from __future__ import annotations

import copy
import re
import secrets
from typing import Any, NamedTuple

from paijob.common.contract import NODE_KEY_SECRET
from paijob.errors import PaijobError
from paijob.openpai.jsdump import dump_job
from paijob.openpai.jsyaml import YamlError, load_job
from paijob.openpai.markers import task_command

KEY_SHAPE = re.compile(r"[0-9a-f]{32,128}")  # what paijob-runtime accepts (``held._SECRET_LINE``)


class Keyed(NamedTuple):
    """The job text with its node key, the job as the server reads that text, and what the user should be told
    when the key was not added (``text`` and ``job`` are then the caller's)."""

    text: str
    job: Any
    note: str | None = None


def new_key() -> str:
    """A fresh node key: 256 random bits, as hex."""
    return secrets.token_hex(32)


def with_node_key(text: str, job: Any, key: str, source: str = "job") -> Keyed:
    """``text`` (read by the server as ``job``) with ``secrets.paijobNodeKey: key``; unchanged when it has a key.

    A job without ``secrets`` gets the map appended, so what the user wrote (comments, order) reaches the
    cluster as written; a job with a ``secrets`` map is written again with the key added
    (``paijob.openpai.jsdump``). A job whose commands a ``secrets`` map would change is left as it is, with a
    note: openpai-runtime renders the commands of a job that has secrets once more, blanking every
    ``<% ... %>`` the server left (``paijob.openpai.markers.render_runtime``). Pure.
    """
    unchanged = Keyed(text, job)
    if not isinstance(job, dict) or not isinstance(job.get("taskRoles"), dict):
        return unchanged  # validate refuses it before this is asked
    present = job.get("secrets")
    if present is not None and not isinstance(present, dict):
        return unchanged
    if present and _has_own_key(present, source):
        return unchanged
    edited = copy.deepcopy(job)
    edited["secrets"] = {**(present or {}), NODE_KEY_SECRET: key}
    changed = [role for role in job["taskRoles"] if task_command(edited, role) != task_command(job, role)]
    if changed:
        return Keyed(text, job, f"no node key for this job: with a `secrets:` map, openpai-runtime would blank the "
                                f"`<% ... %>` left in role {changed[0]}'s commands, so paijob-runtime's nodes talk "
                                "unauthenticated (docs/security.md); resolve those tags or add any `secrets:` yourself")
    appended = text + ("" if text.endswith("\n") else "\n") + f"secrets:\n  {NODE_KEY_SECRET}: '{key}'\n"
    if present is None and _reads_as(appended, edited):
        return Keyed(appended, edited)
    return Keyed(dump_job(edited, width=1 << 30, allow_unicode=True), edited)


def _has_own_key(present: dict[Any, Any], source: str) -> bool:
    """Whether the job's ``secrets`` hold a node key of the user's own (kept); one of another shape is refused."""
    if NODE_KEY_SECRET not in present:
        return False
    own = present[NODE_KEY_SECRET]
    if isinstance(own, str) and KEY_SHAPE.fullmatch(own):
        return True
    raise PaijobError(f"{source}: secrets.{NODE_KEY_SECRET} is paijob's own: the key paijob-runtime's nodes "
                      "sign with, 32 to 128 lowercase hex digits; this one is not. Remove it: paijob adds a "
                      "new one at each submit")


def _reads_as(text: str, job: dict[str, Any]) -> bool:
    """Whether the server reads ``text`` as ``job`` (an appended map is not, after a document end or a flow map)."""
    try:
        return bool(load_job(text, "job").value == job)
    except YamlError:
        return False
