"""The hang doctor's account of torch's own timeout: the rank that never arrived, or the node that never joined.

torch's process-group timeout fires in a rank that *waited*; its traceback names the waiter, not the rank it
waited for. Node 0 names that one from where every rank was at its last look (pure functions over the rank
states the hang doctor keeps: :meth:`~paijob.runtime.watch.hang.doctor.HangWatch.explain_timeout`,
:meth:`~paijob.runtime.watch.hang.doctor.HangWatch.account_now`); every node then prints the same root cause.
No I/O, no clock, no torch.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from paijob.common.records import rank_ranges
from paijob.runtime.failure import Failure, said_timeout
from paijob.runtime.watch.hang.verdict import culprit_detail, named, pick_culprits, ranks_phrase
from paijob.runtime.watch.ranks import RankState


def timed_out_state(states: Sequence[RankState]) -> RankState | None:
    """The first rank (lowest) whose function ended with torch's process-group timeout, as its
    sampler noted it (``per-node`` mode: the ``mp.spawn`` children); None: none did."""
    return next((s for s in sorted(states, key=lambda s: s.rank) if said_timeout(s.error)), None)


def account_of_timeout(failed: RankState, last_states: Sequence[RankState], now: float,
                       world_size: int | None = None, nnodes: int = 1,
                       seen: Collection[int] = ()) -> Failure | None:
    """:func:`never_joined` or :func:`never_arrived` for a rank whose sampler noted the timeout (no
    worker failure record: ``per-node`` mode, where the node's one process fails for all its ranks)."""
    failure = Failure(node_rank=failed.node_rank, rank=failed.rank, local_rank=failed.local_rank,
                      returncode=1, secondary=False, time=now, tail=failed.error)
    return (never_joined(failure, last_states, {*seen, *(s.rank for s in last_states)}, world_size, nnodes)
            or never_arrived(failure, last_states))


def never_joined(failed: Failure, last_states: Sequence[RankState], seen: Collection[int],
                 world_size: int | None, nnodes: int) -> Failure | None:
    """The root cause for ``failed`` (a rank whose start-up or collective timed out) when ranks of the
    job were never seen at all: their node's paijob-runtime never reached the store the watches share
    (it started too late, or cannot reach it), or they failed before it did. ``seen``: every rank the
    watch ever saw. None: every rank was seen."""
    if not world_size:
        return None
    missing = sorted(set(range(world_size)).difference(seen))
    waiter = next((s for s in last_states if s.rank == failed.rank), None)
    if not missing or waiter is None:
        return None
    per_node = max(1, world_size // max(1, nnodes))
    nodes = sorted({rank // per_node for rank in missing})
    where = f"{waiter.wait} at {waiter.location}" if waiter.wait else waiter.location
    noun = "node rank" if len(nodes) == 1 else "node ranks"
    reason = (f"start-up: {noun} {rank_ranges(nodes)} ({ranks_phrase(missing)}) never joined: torch's timeout "
              f"fired in rank {failed.rank}'s {where} while it waited for them, and the watch never saw them "
              f"(their paijob-runtime did not reach the job's store in time: started late, cannot reach "
              f"MASTER_ADDR:MASTER_PORT, or failed first: see that node's log); start every node within the timeout, or pass init_process_group a "
              f"longer timeout=")
    return Failure(node_rank=nodes[0], rank=None, local_rank=None, returncode=failed.returncode,
                   secondary=False, time=failed.time - 1e-3, reason=reason, overrides=True)


def never_arrived(failed: Failure, last_states: Sequence[RankState]) -> Failure | None:
    """The root cause for ``failed`` (a rank whose collective timed out): the rank(s) not where
    the others waited at the last look. None: ``failed`` was not in a collective, or every rank
    was."""
    # the dead ranks' samplers fall silent as they exit: judge by where each one was
    states = [replace(s, stale_for=0.0) for s in last_states]
    waiter = next((s for s in states if s.rank == failed.rank), None)
    culprits, why = pick_culprits(states)
    culprits = [s for s in culprits if s.rank != failed.rank]
    if waiter is None or not waiter.collective or not culprits:
        return None
    reason = (
        f"torch's process-group timeout fired in rank {failed.rank}'s {waiter.wait} at "
        f"{waiter.location}; the rank that never arrived: "
        + named(culprits, why)
    )
    return Failure(node_rank=culprits[0].node_rank, rank=None, local_rank=None,
                   returncode=failed.returncode, secondary=False, time=failed.time - 1e-3,
                   reason=reason, detail="\n".join(culprit_detail(culprits)), overrides=True)
