"""What the watch needs of the launcher that runs a node's workers, and nothing more.

Why a Protocol: the failure accounting (:mod:`paijob.runtime.watch.node.accounting`) used to read and
write torch's elastic agent's own state from module-level functions. It needs only the few facts
below, none of them torch's; written against this, it runs the same under torch's agent
(``per-gpu``, :mod:`paijob.runtime.agent`) and under a test's fake launcher, without torch.

No torch import.
"""

from __future__ import annotations

from typing import Protocol


class WorkerGroup(Protocol):
    """The workers of one node, as the watch sees them (torch's agent, or a test's fake)."""

    node_rank: int
    # the global rank of each local worker, by local rank (empty until torch started them)
    assigned_ranks: list[int]
    # global rank -> pid of each worker started (the processes the watch believes and asks)
    rank_pids: dict[int, int]

    def log_tail(self, local_rank: int) -> str:
        """The last traceback (or lines) in the output of local worker ``local_rank``; "" when none."""
        ...
