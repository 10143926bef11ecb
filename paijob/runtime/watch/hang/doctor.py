"""The hang doctor on a node: each look shared with node 0, and on node 0 the verdict acted on.

Each worker's sampler (:mod:`paijob.runtime.watch.worker`) writes where its main thread is and when it was
last active; the node's eyes read those reports once a second into a look
(:mod:`paijob.runtime.watch.node.eyes`) and hand it to :meth:`HangWatch.look`. Every node publishes its ranks'
states over the store the nodes share (:mod:`paijob.runtime.watch.channel`); node 0 gathers every node's and
judges (:func:`~paijob.runtime.watch.hang.verdict.judge`, pure).

A verdict is reported first (one report in node 0's log; every node prints it as its root cause), every
rank's full stack (every Python thread) is written to a file (:mod:`~paijob.runtime.watch.hang.stacks`), and
then the job ends with :data:`HANG_EXIT` on every node.

What it does to a worker: nothing. It reads what the eyes read; it never sends a worker a signal (a signal
wakes a C call that holds the GIL: the user's code would see EINTR). No torch import.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from paijob.common.records import StallRecord, signed_text
from paijob.runtime.config import HangSettings
from paijob.runtime.failure import Failure, first_timed_out
from paijob.runtime.watch.channel import Channel
from paijob.runtime.watch.evidence import SealedBy, read_evidence
from paijob.runtime.watch.folder import read_file, write_new
from paijob.runtime.watch.hang.stacks import STACKS_FILE, local_stacks, write_stacks_file
from paijob.runtime.watch.hang.timeout import account_of_timeout, never_arrived, timed_out_state
from paijob.runtime.watch.hang.verdict import HANG_EXIT, Verdict, judge, stall
from paijob.runtime.watch.ranks import Look, RankState

STACKS_WAIT = 5.0  # how long node 0 waits for the other nodes' full stacks
CALLS_KEPT = 256  # a rank's newest collectives its verdict reads (where the ranks' calls part)


def never_read(rank: int, node_rank: int, seconds: float) -> RankState:
    """A rank of another node whose state never reached node 0 (not judged; ``seconds``: how long the
    watch has looked)."""
    return RankState(rank=rank, node_rank=node_rank, host="", local_rank=None, idle_for=0.0, busy=False,
                     cpu_share=0.0, wait=None, collective=False, first_progress=False, stale_for=seconds,
                     unseen=True)


def unseen_since(state: RankState, seconds: float) -> RankState:
    """``state``, read ``seconds`` ago and unreadable since: counted as a rank of the job, not judged
    (:attr:`RankState.unseen`), ``stale_for`` how long it has not been seen."""
    return replace(state, unseen=True, stale_for=seconds)


def hang_where(verdict: Verdict) -> str:
    """Where a hang is, as one short text that a restart compares with the last one (the same hang at the same
    line is a bug): the culprits' lines, else the line where every rank waits (``train.py:57``, sorted)."""
    states = verdict.culprits or verdict.others
    found = sorted({f"{s.location}{' in ' + s.wait if s.wait else ''}" for s in states})
    return ", ".join(found)[:300]


class HangWatch:
    """One node's hang doctor (node 0 also judges): a watcher of the node, fed a look every tick."""

    def __init__(
        self,
        settings: HangSettings,
        *,
        folder: str,
        node_rank: int,
        nnodes: int,
        world_size: int,
        host: str,
        stacks_dir: str | None,
        channel: Channel,
        declare: Callable[[Failure], None],
        say: Callable[[str], None],
        eyes: Callable[[], Look],
        accounts: bool = False,
        stall_file: str | None = None,
        record_key: str | None = None,
        sealed_by: SealedBy | None = None,
    ) -> None:
        """``eyes()``: this node's ranks read now (an account once the workers failed cannot wait for the
        next tick); ``accounts``: ``per-node`` mode, where the ranks' samplers note a timeout and node 0
        accounts for it; ``stall_file``: where the cluster asks for the current stall record."""
        self.settings = settings
        self.folder = folder
        self.node_rank = node_rank
        self.nnodes = nnodes
        self.world_size = world_size
        self.host = host
        self.stacks_dir = stacks_dir
        self.channel = channel
        self._declare = declare
        self._say = say
        self._eyes = eyes
        self._stacks_request = threading.Event()
        self._stacks_seen = 0
        self._straggler_reported = False
        self.verdict: Verdict | None = None
        self.last_states: list[RankState] = []
        self._running: dict[int, RankState] = {}
        self.stall_file = stall_file
        self._record_key = record_key
        self._sealed_by = sealed_by  # whether an evidence file was signed by its rank's own process
        self._stall: StallRecord | None = None
        self._stall_written = 0.0
        self._declared: Failure | None = None
        self.accounts = accounts
        self.account: Failure | None = None  # node 0's account of torch's own timeout (accounts)
        self._remote: list[RankState] = []  # the other nodes' ranks at the last gather
        self._remote_read: dict[int, tuple[float, list[RankState]]] = {}  # node: when read, its ranks
        self._began = time.time()  # when the watch was made: how long a rank never read has been unseen
        self._seen: set[int] = set()  # every rank whose state was ever read (node 0: every node's)
        self._left: dict[int, RankState] = {}  # ranks seen ended with their process group up (node 0: every node's)
        self._evidence = threading.Lock()  # the tick and account_now both update it

    # -- one watcher among the node's others (lifecycle.Watchers) ----------------------
    def start(self) -> None:
        self._say(self.settings.described())

    def stop(self) -> None:
        """Nothing of its own runs: the node's tick stops looking."""

    def finish(self) -> None:
        """Nothing held: the folder goes with the node's eyes."""

    def take_verdict(self) -> Failure | None:
        """The failure a final verdict declared, once (for a launcher that polls, not listens)."""
        failure, self._declared = self._declared, None
        return failure

    def request_stacks(self) -> None:
        """SIGUSR1: print every rank's stack on every node (from a signal handler: set a flag)."""
        self._stacks_request.set()

    # -- the look ---------------------------------------------------------------------
    def look(self, look: Look) -> None:
        """One tick: share this node's states, answer a request for stacks, and on node 0 judge."""
        local = look.states
        if self.nnodes > 1:
            self.channel.publish(self.node_rank, local)
        self._answer_stacks(look)
        if self.node_rank != 0 or self.verdict is not None or self.account is not None:
            return
        remote = self._gather_remote(local, look.now) if self.nnodes > 1 else []
        with self._evidence:
            self._remote = remote
            states = self._note_evidence(local + remote)
            account = self._account(states, look.now)
        if account is not None:
            self._declare(account)  # the other nodes read it from the store, while it lives
            return
        self._keep_stall_file(states)
        verdict = judge(states, self.settings, expected_ranks=self.world_size)
        if verdict is None:
            self._straggler_reported = False
            return
        if not verdict.final:
            if not self._straggler_reported:
                self._straggler_reported = True
                self._say(f"warning: {verdict.headline(self.settings)}")
            return
        self.verdict = verdict
        self._end(verdict, look)

    def _answer_stacks(self, look: Look) -> None:
        """SIGUSR1 here: this node's stacks in its log, and every other node asked; another node asked
        (SIGUSR1 there, or node 0's verdict): its stacks and recent collectives sent to node 0."""
        if self._stacks_request.is_set():
            self._stacks_request.clear()
            self._stacks_seen = max(self._stacks_seen, self.channel.want_stacks())
            self._say(self._stacks(look, "stacks on request (SIGUSR1)"))
        elif self.nnodes > 1:
            wanted = self.channel.stacks_wanted()
            if wanted > self._stacks_seen:
                self._stacks_seen = wanted
                self.channel.publish_calls(self.node_rank, self._local_calls(look))
                text = self._stacks(look, "stacks asked for (SIGUSR1, or a hang verdict)")
                self.channel.send_stacks(self.node_rank, wanted, text)
                self._say(text)

    def _stacks(self, look: Look, why: str) -> str:
        return local_stacks(look, why, node_rank=self.node_rank, host=self.host, folder=self.folder)

    def _local_calls(self, look: Look) -> dict[int, list[list[Any]]]:
        """This node's ranks' recent collectives as their flight recorders kept them (their evidence files)."""
        found = read_evidence(self.folder, look.reports, read_file, self._sealed_by)
        # the newest of each rank's (its evidence keeps up to half a minute of them): where the calls part
        return {rank: sorted(evidence["calls"], key=lambda c: c[3])[-CALLS_KEPT:]
                for rank, evidence in found.items() if evidence.get("calls")}

    def _gather_remote(self, local: list[RankState], now: float) -> list[RankState]:
        """The other nodes' ranks as they published them through the store.

        In ``per-node`` mode that store lives in the script's rank 0 (on this node): while rank 0's
        process is stopped the store answers no one, and a node that cannot be read counts as last read,
        its ranks counted as unseen (not judged: :func:`unseen_since`). Without this node 0 judged
        nothing (the other nodes' ranks missing) and the job hung silently, where rank 0's stopped
        process, seen here, is the verdict."""
        remote = self.channel.gather(self.nnodes, self.node_rank)
        read = {s.node_rank for s in remote}
        for node in read:
            self._remote_read[node] = (now, [s for s in remote if s.node_rank == node])
        if not (self.accounts and any(s.rank == 0 and s.stopped for s in local)):
            return remote
        found = remote + [unseen_since(s, now - read_at) for node, (read_at, states) in sorted(self._remote_read.items())
                          if node not in read for s in states]
        known = {s.rank for s in local + found}  # a node never read (rank 0 stopped before: a slow start-up)
        per_node = max(1, self.world_size // self.nnodes)
        return found + [never_read(rank, rank // per_node, now - self._began)
                        for rank in range(self.world_size) if rank not in known]

    def _note_evidence(self, states: list[RankState]) -> list[RankState]:
        """``states`` sorted by rank; where each rank was while it ran kept as the evidence for a
        timeout's account (a rank that ended or raised stays where it was last seen running)."""
        states.sort(key=lambda s: s.rank)
        self._seen.update(s.rank for s in states)
        for state in states:
            if not state.exited and not state.error and not state.unseen:
                self._running[state.rank] = state
            if state.exited and state.left:
                self._left.setdefault(state.rank, state)
        self.last_states = [self._running[rank] for rank in sorted(self._running)]
        return states

    def _account(self, states: list[RankState], now: float) -> Failure | None:
        """Node 0 (``accounts``): a rank's sampler noted torch's own process-group timeout: the
        account naming the rank that never arrived (kept in :attr:`account`); None: none."""
        if not self.accounts or self.account is not None:
            return None
        failed = timed_out_state(states)
        self.account = None if failed is None else account_of_timeout(
            failed, self.last_states, now, world_size=self.world_size, nnodes=self.nnodes, seen=self._seen)
        return self.account

    # -- asked now, once the workers failed -------------------------------------------------
    def account_now(self) -> Failure | None:
        """Node 0, once the node's command has failed: the account of torch's own timeout from its
        ranks' files read now and the other nodes' last summaries (a child that timed out ends
        within milliseconds, before the next look). None: no rank timed out, or no account."""
        if self.node_rank != 0 or not self.accounts:
            return None
        look = self._eyes()
        with self._evidence:
            if self.account is not None:
                return self.account
            return self._account(self._note_evidence(look.states + self._remote), look.now)

    def left_ranks(self) -> list[RankState]:
        """The ranks that left the job (their code ended with the process group up) as this node
        knows now: its own, read now, and on node 0 every node's from their last summaries."""
        look = self._eyes()
        with self._evidence:
            self._note_evidence(look.states + self._remote)
            return [self._left[rank] for rank in sorted(self._left)]

    def local_states(self) -> list[RankState]:
        """This node's ranks as their samplers report now."""
        return self._eyes().states

    def local_errors(self) -> dict[int, str]:
        """The errors this node's ranks' functions ended with, as their samplers noted them (now), by rank."""
        return {s.rank: s.error for s in self._eyes().states if s.error}

    def timed_out_here(self) -> bool:
        """Whether a rank of this node noted torch's own process-group timeout (its file, now)."""
        return timed_out_state(self._eyes().states) is not None

    def explain_timeout(self, failures: Sequence[Failure]) -> Failure | None:
        """torch's own process-group timeout fired first (in a rank that waited): name the rank
        that never arrived, from node 0's last look before the failure. None: nothing to add."""
        if self.node_rank != 0 or not self.last_states:
            return None
        failed = first_timed_out(failures)
        return None if failed is None else never_arrived(failed, self.last_states)

    # -- the end -----------------------------------------------------------------------------
    def _end(self, verdict: Verdict, look: Look) -> None:
        """Report first (every stack to a file), end second (every node, exit HANG_EXIT). The other
        nodes publish their ranks' recent collectives as they send their stacks: the verdict says
        what the ranks' flight recorders show, read after that."""
        self._say(f"hang watch: hang: no rank made progress for {verdict.waited:.0f}s "
                  f"({verdict.limit.short()}); collecting every rank's stack, then stopping the workers")
        path = self.write_all_stacks(look)
        calls = {**self.channel.gather_calls(self.nnodes, self.node_rank), **self._local_calls(look)}
        verdict = self.verdict = replace(verdict, calls=calls)
        headline = verdict.headline(self.settings)
        detail = verdict.detail()
        if path:
            detail.append(f"every rank's full stack: {path}")
        self._declared = Failure(
            node_rank=self.node_rank,
            rank=None, local_rank=None, returncode=None, secondary=False, time=time.time(),
            reason=headline, detail="\n".join(detail), exit_status=HANG_EXIT, where=hang_where(verdict),
        )
        self._declare(self._declared)

    def _keep_stall_file(self, states: Sequence[RankState]) -> None:
        """Where the cluster asks (the local cluster): the current stall record (no ranks: none)."""
        if not self.stall_file:
            return
        found = stall(states, self.settings) or StallRecord(ranks=(), seconds=0)
        now = time.monotonic()
        if found == self._stall and now - self._stall_written < 5.0:
            return
        self._stall, self._stall_written = found, now
        try:
            write_new(self.stall_file, signed_text(replace(found, time=time.time()).as_json(), self._record_key))
        except OSError:
            self.stall_file = None

    def write_all_stacks(self, look: Look) -> str | None:
        """Node 0: every rank's full stack in one file (the other nodes' sent over the store)."""
        request = self.channel.want_stacks() if self.nnodes > 1 else 0
        self._stacks_seen = max(self._stacks_seen, request)
        texts = [self._stacks(look, "hang watch")]
        if self.nnodes > 1:
            others = self.channel.collect_stacks(self.nnodes, request, STACKS_WAIT)
            for node in range(1, self.nnodes):
                texts.append(others.get(node, f"node rank {node}: its stacks did not arrive within "
                                              f"{STACKS_WAIT:.0f}s (see its own log)"))
        return write_stacks_file(self.stacks_dir, STACKS_FILE, "\n\n".join(texts) + "\n")
