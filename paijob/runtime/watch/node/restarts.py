"""Whether a failed round of the workers is started again, and what each restart is told as: pure.

``--max-restarts N`` (torchrun's name and meaning) lets a job that failed inside its OpenPAI attempt start
every node's workers again together, instead of ending the attempt (which on OpenPAI goes back through the
queue). Only what can recover is restarted (:func:`decide`):

* a failure paijob knows to be permanent is never restarted: exit 127 (a command the image lacks), 2 (a bad
  argument, the script's own usage error), a module the image lacks (``ImportError`` and
  ``ModuleNotFoundError``, which OpenPAI's pattern misses), and whatever OpenPAI's exit spec never retries, read as OpenPAI
  reads it (a worker's error line and its traceback's tail: ``ImportError``, ``SyntaxError``, CUDA out of
  memory, a diverged recipe's 136...);
* the same failure twice in a row (the same exception and message at the same line of the script, from the
  workers' own error records, or the same hang at the same line) is a bug, not a fault: said in one line,
  not restarted again (torchrun would spend every restart on it);
* a node that is gone cannot start again with the others: a lost node ends the job unless ``--min-nodes``
  lets the others go on without it (node 0, which hosts the job's store, never: its loss ends every node
  with 143, which OpenPAI retries as a whole job), and so does a node whose workers had already finished, or
  one stopped from outside (SIGTERM: the job is being stopped).

Node 0 decides and tells every node (:mod:`paijob.runtime.watch.channel`'s ``paijob/round/<r>/end``), so
every node tells the same story. No torch, no I/O: tested on plain failures.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from paijob.common import exitcodes
from paijob.common.records import RestartRecord
from paijob.openpai import exitspec
from paijob.runtime.failure import Failure

MAX_SIGNATURE = 400  # characters of a failure's signature (its error line and where)


def signature(failure: Failure) -> str | None:
    """What makes two failures "the same": a hang's place (``hang at train.py:57 in all_reduce``), a worker's
    exception line and the script's line it was raised at (``ValueError: bad batch at train.py:42 in step``),
    a rank that left the job early where it ended. None: nothing to compare by (a worker killed by a signal,
    an exit code without an exception): never called the same."""
    if failure.exit_status == exitcodes.HANG:
        return f"hang at {failure.where}"[:MAX_SIGNATURE] if failure.where else None
    if failure.left:
        return f"left: {failure.reason}"[:MAX_SIGNATURE]
    if failure.error and failure.where:
        return f"{failure.error} at {failure.where}"[:MAX_SIGNATURE]
    return None


def permanent(failure: Failure) -> str | None:
    """Why ``failure`` cannot recover by starting the same workers again (one phrase); None: it may."""
    code = failure.exit_code  # a hang's, 124: a code OpenPAI retries (its reason is in no log it reads)
    if code == exitcodes.NOT_RUNNABLE:
        return f"exit code {code}: a command this image cannot run"
    if code == exitcodes.CONFIG_ERROR:
        return f"exit code {code}: a configuration error (a bad argument, a missing file)"
    if failure.error.startswith(("ModuleNotFoundError:", "ImportError:")):
        return f"{failure.error.partition(':')[0]}: a module this image lacks"
    text = "\n".join(part for part in (failure.error, failure.tail) if part)
    found = exitspec.container_exit(code, text)
    spec = found.spec
    if spec.never_retried and found.code != exitcodes.OK:
        why = f", {found.matched!r}" if found.matched else ""
        return f"exit code {code}, which OpenPAI reports as {found.code} ({spec.phrase}{why}) and never retries"
    return None


def infrastructure(failure: Failure) -> bool:
    """Not a worker's failure, a hang or an account of one: a node stopped from outside, a store lost."""
    return failure.rank is None and failure.exit_status != exitcodes.HANG and not failure.overrides


@dataclass(frozen=True)
class Decision:
    """Node 0's word on a failed round: start the next round on ``nodes`` (``why``: what it restarts after),
    or end (``restart`` False) with ``why`` (one line, said on every node)."""

    restart: bool
    why: str
    nodes: tuple[int, ...] = ()


def cause_text(failure: Failure) -> str:
    """A failure as a restart line names it: its headline, its exception and where it was raised."""
    text = failure.headline()
    if failure.error:
        text += f": {failure.error}"
    if failure.where:
        text += f" ({failure.where})"
    return text


def decide(root: Failure, *, done: int, max_restarts: int, history: Sequence[RestartRecord], nnodes: int,
           lost: Collection[int] = (), finished: Collection[int] = (), min_nodes: int | None = None) -> Decision:
    """Node 0's decision once round ``done`` (0: the first start) failed with ``root``: restart or end.

    ``history``: the restarts so far (the last one's cause is compared with ``root``); ``lost``: the nodes
    node 0 found lost; ``finished``: the nodes whose workers had succeeded; ``min_nodes``: the nodes that may
    go on without a lost one (None: every node)."""
    everyone = tuple(range(nnodes))
    if done >= max_restarts:
        return Decision(False, f"no restart left (--max-restarts {max_restarts} used)")
    if finished:
        nodes = ", ".join(map(str, sorted(finished)))
        return Decision(False, f"not restarting: the workers of node rank {nodes} had already finished, and "
                               f"every node's workers start again together or not at all")
    gone = sorted(set(lost))
    if gone:
        return _without_lost(gone, everyone, min_nodes)
    if infrastructure(root):
        return Decision(False, f"not restarting: {root.headline()} (not a worker's failure)")
    why = permanent(root)
    if why is not None:
        return Decision(False, f"not restarting: {why}: a failure that starting again cannot mend")
    mine = signature(root)
    if mine is not None and history and history[-1].signature == mine:
        return Decision(False, f"the same failure twice in a row: {mine} (before restart {len(history)} and "
                               f"after it): a bug, not a fault; not restarting")
    return Decision(True, cause_text(root), everyone)


def _without_lost(gone: list[int], everyone: tuple[int, ...], min_nodes: int | None) -> Decision:
    """Some nodes were lost: go on without them when ``--min-nodes`` allows (never without node 0)."""
    names = ", ".join(map(str, gone))
    if 0 in gone:
        return Decision(False, "not restarting: node rank 0, which hosts the job's store, was lost; every "
                               "node ends with 143, which OpenPAI retries as a whole job")
    left = tuple(node for node in everyone if node not in gone)
    if min_nodes is None or min_nodes >= len(everyone):
        return Decision(False, f"not restarting: node rank {names} was lost and the job needs all "
                               f"{len(everyone)} nodes (--min-nodes lets the others go on without it)")
    if len(left) < min_nodes:
        return Decision(False, f"not restarting: node rank {names} was lost, which leaves {len(left)} "
                               f"node(s), fewer than --min-nodes {min_nodes}")
    return Decision(True, f"node rank {names} was lost; going on with {len(left)} of {len(everyone)} nodes "
                          f"(--min-nodes {min_nodes})", left)
