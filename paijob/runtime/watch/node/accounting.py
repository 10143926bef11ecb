"""Why a node's workers failed, told the same on every node: the watch's side of a worker failure.

Torch's agent finds a worker failed and stops the rest; what that failure means for the job is
the watch's to say. A rank that timed out in torch's own collective timeout waited for another
(the hang watch names the rank that never arrived, :mod:`paijob.runtime.watch.hang.verdict`); a rank
gloo aborted for a collective's size received a call that differs (the ranks' flight recorders,
asked before torch stops them, name the odd rank, :mod:`paijob.runtime.watch.node.mismatch`). Node 0
makes the account and publishes it; the other nodes wait for it, so every node prints one root
cause. :class:`Accounting` does that against :class:`~paijob.runtime.watch.node.workers.WorkerGroup`
(the ranks, their pids, their output) and the node's failure records (:class:`Records`): no torch,
so a test drives it with a fake launcher.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from paijob.common.records import rank_ranges
from paijob.runtime.failure import Failure, choose_root_cause, first_timed_out, strip_rank_prefix
from paijob.runtime.watch.folder import WorkerError, error_path, read_file, write_request
from paijob.runtime.watch.node.eyes import process_ended
from paijob.runtime.watch.node.mismatch import (
    calls_said,
    mismatch_account,
    said_size_abort,
    script_line,
    undecided,
)
from paijob.runtime.watch.node.recorder import ANSWER_WAIT, read_answers
from paijob.runtime.watch.node.workers import WorkerGroup
from paijob.runtime.watch.ranks import RankState, left_phrase
from paijob.runtime.watch.seal import signed_body

# seconds a node waits for node 0's account (of a collective's timeout, of a mismatch): node 0 asks its
# ranks for their calls (recorder.ANSWER_WAIT), then waits for the other nodes' words (MISMATCH_WAIT)
ACCOUNT_WAIT = 20.0

# Seconds node 0 waits for every node's record to name a mismatch's odd rank. A node stopped for
# node 0's failure before its own workers exited publishes their words after stopping them:
# node 0's poll (1 s), SIGTERM, the node's poll, at most a few seconds under load. Below
# ACCOUNT_WAIT, so the nodes waiting for the account still get it.
MISMATCH_WAIT = 10.0

TAIL_BYTES = 64 * 1024
TAIL_LINES = 40


def read_tail(path: str | None) -> str:
    """The last traceback (or lines) of a worker's output copy at ``path``; "" when there is none."""
    if not path or not os.path.exists(path):
        return ""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - TAIL_BYTES))
        text = fh.read().decode("utf-8", errors="replace")
    start = text.rfind("Traceback (most recent call last)")
    lines = (text[start:] if start >= 0 else text).rstrip().splitlines()
    # torch prefixes a worker's uncaught traceback lines with "[rankN]:"; drop that.
    lines = [strip_rank_prefix(line) for line in lines]
    return "\n".join(lines[-TAIL_LINES:])


class Records(Protocol):
    """The failure records the nodes of a job exchange (:class:`~paijob.runtime.watch.node.liveness.NodeWatch`)."""

    def records(self) -> list[Failure]: ...

    def publish(self, failure: Failure) -> None: ...

    def wait_for(self, enough: Callable[[list[Failure]], bool], timeout: float) -> list[Failure]: ...

    def wait_for_primary(self, have: list[Failure], timeout: float) -> list[Failure]: ...

    def wait_for_account(self, timeout: float) -> list[Failure]: ...


class HangAccounts(Protocol):
    """What the account asks of the hang doctor (:class:`~paijob.runtime.watch.hang.doctor.HangWatch`): node
    0's account of torch's own timeout, and the ranks that left the job."""

    def explain_timeout(self, failures: Sequence[Failure]) -> Failure | None: ...

    def left_ranks(self) -> list[RankState]: ...


SealedBy = Callable[[int, int, bytes], bool]  # (rank, pid, data): signed by that rank's own process?


class Accounting:
    """One node's account of its workers' failure: what they said, their recorders' calls, and
    the account that names the job's root cause."""

    def __init__(self, launcher: WorkerGroup, records: Records, *, nnodes: int, world_size: int,
                 hang: HangAccounts | None = None, folder: str | None = None,
                 sealed_by: SealedBy | None = None, primary_wait: float = 0.0) -> None:
        """``folder``: the watch's folder, where the workers write their error records and answer a
        request for their calls (None: no watch, nobody asked); ``sealed_by``: whether a file there was
        signed by a rank's own process (None: believed as read, a test's folder); ``hang`` None: the hang
        doctor is off (no account of a timeout); ``primary_wait``: how long a node whose failures are all
        consequences waits for their cause (a peer's record, node 0's verdict on a lost node)."""
        self.launcher = launcher
        self.node = records
        self.node_rank = launcher.node_rank
        self.nnodes = nnodes
        self.world_size = world_size
        self.hang = hang
        self.folder = folder
        self.sealed_by = sealed_by
        self.primary_wait = primary_wait
        self.local_failure: Failure | None = None  # the root cause among this node's failed workers
        self.local_failures: list[Failure] = []  # every failed local worker (a mismatch's account reads them all)
        self.recorded_calls: dict[str, list[dict[str, Any]]] = {}  # a mismatch's evidence, by rank
        self._exited: set[int] = set()  # ranks whose exit was looked at
        self._asked = False  # the live workers were asked for their calls (once a run)

    # -- what this node's workers said --------------------------------------------
    def workers_failed(self, failures: list[Failure]) -> Failure:
        """torch found ``failures`` (this node's failed workers): the root cause among them, with
        the calls its ranks' recorders gave, published for the other nodes."""
        for failure in failures:
            self.note_record(failure)
        root = choose_root_cause(failures)
        assert root is not None, "torch reports a failed group with its failures"
        self.local_failures = failures
        self.local_failure = root
        root.calls = self.recorded_calls
        self.node.publish(root)
        return root

    def note_record(self, failure: Failure) -> None:
        """What the worker's own error record says of ``failure`` (Python's last line, the script's line,
        whether it is a peer's knock-on), where its process wrote one and signed it: the traceback's text
        is never parsed. A worker we stopped stays a consequence."""
        found = self.error_record(failure.rank) if failure.rank is not None else None
        if found is None:
            return
        failure.error, failure.where = found.error, found.where
        failure.secondary = failure.secondary or found.consequence

    def error_record(self, rank: int) -> WorkerError | None:
        """``rank``'s error record, when its own worker process (the one this launcher started) signed it."""
        pid = self.launcher.rank_pids.get(rank)
        if not self.folder or pid is None:
            return None
        data = read_file(error_path(self.folder, rank))
        if data is None or (self.sealed_by is not None and not self.sealed_by(rank, pid, data)):
            return None
        try:
            record = WorkerError.from_json(_unsealed(data))
        except ValueError:
            return None
        return record if record.rank == rank and record.pid == pid else None

    def exited_workers(self) -> list[Failure]:
        """Workers that exited since the last look, as their output left them (each once)."""
        exited = []
        launcher = self.launcher
        for local_rank, rank in enumerate(launcher.assigned_ranks):
            pid = launcher.rank_pids.get(rank)
            if pid is None or rank in self._exited or not process_ended(pid):
                continue
            self._exited.add(rank)
            exited.append(Failure(node_rank=self.node_rank, rank=rank, local_rank=local_rank,
                                  returncode=None, secondary=False, time=time.time(),
                                  tail=launcher.log_tail(local_rank)))
        return exited

    def stopped_workers(self) -> list[Failure]:
        """This node's workers as their output left them, when we stopped them for a peer's
        failure before they failed themselves (torch then reports no failures): what they said
        may still be the evidence, e.g. torch's fingerprint check that every rank raised but
        that was slow to exit."""
        return [
            Failure(node_rank=self.node_rank, rank=rank, local_rank=local_rank,
                    returncode=-signal.SIGTERM, secondary=True, time=time.time(),
                    tail=self.launcher.log_tail(local_rank))
            for local_rank, rank in enumerate(self.launcher.assigned_ranks)
        ]

    def complete_local_failures(self) -> None:
        """Add what this node's workers said that torch's failure report left out, once every
        worker has ended. torch reads the workers when it finds the first failure and stops the
        rest: torch 2.4 then reports none of the workers it stopped, and a worker it stopped
        may still have been writing its traceback. Either way the odd rank of a mismatch was
        named without its line (torch 2.4, one run in eight)."""
        present = {f.rank for f in self.local_failures}
        self.local_failures.extend(f for f in self.stopped_workers() if f.rank not in present)
        for failure in self.local_failures:
            if failure.local_rank is None or script_line(failure.tail or ""):
                continue
            fresh = self.launcher.log_tail(failure.local_rank)
            if script_line(fresh):
                failure.tail = fresh

    # -- the flight recorders' calls ------------------------------------------------
    def before_workers_stop(self) -> None:
        """torch is about to stop every worker (its poll found one failed): where gloo aborted
        one for a collective's size, the others must be asked for their calls first."""
        if self.folder:
            self.ask_calls_after_size_abort(self.exited_workers())

    def ask_calls_after_size_abort(self, failures: list[Failure]) -> None:
        """Where gloo aborted a rank for a collective's size (here or on another node), ask this
        node's live workers for their last collectives before they are stopped: which rank's call
        differs is known only inside them (:mod:`paijob.runtime.watch.node.recorder`). Waits until
        each live worker answered, at most :data:`ANSWER_WAIT` seconds."""
        folder = self.folder
        if not folder or self._asked or not said_size_abort(failures):
            return
        self._asked = True
        try:
            write_request(folder)
        except OSError:
            return
        pids = self.launcher.rank_pids
        check = self.sealed_by
        sealed_by = None if check is None else (lambda rank, data: check(rank, pids[rank], data))
        deadline = time.monotonic() + ANSWER_WAIT
        while True:
            answers = read_answers(folder, list(pids), sealed_by)
            waiting = [rank for rank, pid in pids.items() if rank not in answers and not process_ended(pid)]
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        self.recorded_calls = {str(rank): calls for rank, calls in answers.items() if calls}

    # -- the account -------------------------------------------------------------------
    def root_cause(self) -> Failure | None:
        """The job's root cause as this node tells it, once its workers failed or were stopped:
        its own failure and the other nodes' records, with node 0's accounts of a timeout and of
        a mismatch; None: nothing failed that this node knows of."""
        local = [self.local_failure] if self.local_failure is not None else []
        records = self.with_timeout_account(local, self.node.records())
        if not any(not f.secondary for f in [*local, *records]):
            records = [*records, *self.publish_leaver()]
        if self.nnodes > 1 and not any(not f.secondary for f in [*local, *records]):
            # A peer's connection broke under our workers: wait for the cause (its record,
            # or node 0's verdict that it was lost, which takes --heartbeat-timeout).
            records = self.node.wait_for_primary(local, timeout=self.primary_wait)
        records = self.with_mismatch_account(records)
        return choose_root_cause([*local, *records])

    def publish_leaver(self) -> list[Failure]:
        """Every failure so far is a consequence (a peer closed its connection): a rank that left
        the job (its code ended with exit code 0, its process group up) is their cause. The
        earliest this node knows of (its own; node 0: every node's), published so every node
        names it; [] when none left."""
        gone = self.hang.left_ranks() if self.hang is not None else []
        if not gone:
            return []
        first = gone[0]
        waiting = sorted(set(range(self.world_size)) - {s.rank for s in gone})
        ranks = rank_ranges(waiting)
        failure = Failure.leaving(
            node_rank=first.node_rank, rank=first.rank, local_rank=first.local_rank,
            time=time.time() - first.idle_for,
            reason=(f"{left_phrase(first)} while {'ranks' if len(waiting) > 1 else 'rank'} {ranks} "
                    f"still needed it: it left the job with its process group up, and the "
                    f"collectives it was in failed (a script that ends early, or a sys.exit(0) "
                    f"on one rank)"))
        self.node.publish(failure)
        return [failure]

    def with_timeout_account(self, local: list[Failure], records: list[Failure]) -> list[Failure]:
        """``records``, with the hang watch's account when torch's own timeout fired in a rank that
        waited: node 0 names the rank that never arrived and publishes it; the other nodes wait
        for that account, so every node prints the same root cause."""
        if self.hang is None:
            return records
        explained = self.hang.explain_timeout([*local, *records])
        if explained is not None:
            self.node.publish(explained)
            return [*records, explained]
        if self.nnodes > 1 and first_timed_out([*local, *records]):
            return self.node.wait_for_account(timeout=ACCOUNT_WAIT)
        return records

    def with_mismatch_account(self, records: list[Failure]) -> list[Failure]:
        """``records``, with node 0's account when the workers' failures say a collective's calls
        disagree (:mod:`paijob.runtime.watch.node.mismatch`): node 0 names the rank whose call differs
        (waiting briefly for every node's record when its own ranks alone cannot tell) and publishes
        it; the other nodes wait for it, so every node prints the same root cause."""
        if any(f.overrides for f in records):
            return records
        account = self.local_account(records)
        if account is None or self.nnodes == 1:
            return records if account is None else [*records, account]
        if self.node_rank != 0:
            self.publish_our_words()
            return self.node.wait_for_account(timeout=ACCOUNT_WAIT)
        others = set(range(1, self.nnodes))

        def enough(found: list[Failure]) -> bool:  # records hold node 0's own too: count the others
            heard = {f.node_rank for f in found}
            return others <= heard or not undecided([*self.local_failures, *found], self.world_size)

        if not enough(records):
            records = self.node.wait_for(enough, timeout=MISMATCH_WAIT)
            account = mismatch_account([*self.local_failures, *records], self.world_size) or account
        self.node.publish(account)
        return [*records, account]

    def local_account(self, records: list[Failure]) -> Failure | None:
        """The mismatch account from what this node's workers said (their output, their recorders'
        calls) and ``records``; None: no mismatch."""
        if self.local_failure is None:  # stopped for a peer's failure: what did ours say?
            self.local_failures = self.stopped_workers()
        if self.local_failures and not any(f.calls for f in self.local_failures):
            self.local_failures[0].calls = self.recorded_calls  # what our ranks' recorders said
        account = mismatch_account([*self.local_failures, *records], self.world_size)
        if account is not None and self.local_failure is not None:
            self.complete_local_failures()  # an odd rank's line, written as torch stopped it
            account = mismatch_account([*self.local_failures, *records], self.world_size)
        return account

    def publish_our_words(self) -> None:
        """A node other than 0 whose workers were stopped for a peer (it published nothing yet):
        what its ranks said (torch's fingerprints) and their recorders' calls, for node 0's account."""
        if self.local_failure is not None or not self.local_failures:
            return
        evidence = next((f for f in self.local_failures if calls_said([f])), self.local_failures[0])
        if calls_said([evidence]) or self.recorded_calls:
            evidence.calls = self.recorded_calls
            self.node.publish(evidence)


def _unsealed(data: bytes) -> bytes:
    """A sealed file's JSON without its MAC (the seal's ``{"mac":"...",`` prefix; the seal was checked)."""
    found = signed_body(data)
    return data if found is None else found[1]
