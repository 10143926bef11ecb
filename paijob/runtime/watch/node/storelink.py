"""How the hang watches of a ``per-node`` job on several nodes talk: as clients of the script's own store.

Why: in ``per-gpu`` mode node 0's agent hosts the rendezvous store and the
nodes' hang watches share it (:class:`~paijob.runtime.watch.hang.doctor.StoreChannel`).
In ``per-node`` mode the script's rank 0 hosts the store (``init_process_group``
on ``MASTER_ADDR:MASTER_PORT``); each node's paijob-runtime connects to it as
one more client (``wait_for_workers=False``: it is not counted as a rank) under
a key prefix of its own, once it exists, and reconnects when a call fails.

Node 0's verdict reaches the other nodes through the same store, and node 0
stops its own workers (whose rank 0 hosts the store) only once every other node
has read the verdict, or after :data:`VERDICT_WAIT` seconds: every node then
ends with the hang's exit code and its line, as in ``per-gpu`` mode. Limits:
before rank 0 has called ``init_process_group`` there is no store, so a hang
there is judged on node 0's ranks alone (no verdict while the others are unseen).

Imports torch (for ``TCPStore``) only in the thread that connects.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from paijob.runtime.failure import Failure
from paijob.runtime.watch.lifecycle import StoreTimeout, bounded

T = TypeVar("T")
VERDICT_KEY = "paijob/hang/verdict"
SEEN_KEY = "paijob/hang/seen"  # a counter: the nodes that read the verdict
VERDICT_WAIT = 8.0  # node 0 waits at most this long for the other nodes to read its verdict
CALL_TIMEOUT = 5.0
RECONNECT_EVERY = 2.0
# after a call or a connection that timed out (the store's process stopped: the kernel still accepts
# connections for it): each try costs CALL_TIMEOUT, so the watch's tick would spend half a minute in
# them, and node 0's verdict on that stopped rank would come that much later
QUIET_RETRY = 15.0
SILENT_CLOSE_WAIT = 1.0  # close: the wait for calls in flight into a store that stopped answering
SILENT_SHARE = 0.8  # a failed call that lasted this share of its timeout met a silent store
CLOSE_WAIT = 4 * (CALL_TIMEOUT + 1.0)  # close: the longest wait for calls still inside torch (they end sooner)
TORCH_CPP_LOG_LEVEL = "TORCH_CPP_LOG_LEVEL"  # torch's name
POLL_EVERY = 1.0  # the other nodes look for node 0's verdict this often


class StoreLink:
    """One node's client of the script's store: ``call`` for the hang watch's channel, and the verdict."""

    def __init__(self, master_addr: str, master_port: int, *, prefix: str, node_rank: int,
                 nnodes: int, connect: Callable[[], Any] | None = None) -> None:
        self.node_rank = node_rank
        self.nnodes = nnodes
        self._connect = connect or (lambda: store_client(master_addr, master_port, prefix))
        self._client: Any = None
        self._next_connect = 0.0
        self._next_poll = 0.0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified when a call leaves torch
        self._verdict: Failure | None = None
        self._declaring = threading.Event()  # node 0 publishes a verdict and waits for the others
        self._declared = threading.Event()
        self._closed = False
        self._in_flight = 0  # calls counted in (:meth:`_inside_torch`) and not yet out of torch
        self.everyone_read = False  # node 0: every other node read its verdict from the store
        self.declared: Failure | None = None  # node 0: the verdict it declared (its notice, if unread)
        self._unanswered_since: float | None = None  # monotonic: the first call that timed out since the last answer

    def call(self, fn: Callable[[Any], T], timeout: float = CALL_TIMEOUT) -> T | None:
        """``fn(store)``, at most ``timeout`` seconds; None when there is no store (yet), it fails,
        or the link is closed."""
        client = self._connected()
        if client is None:
            return None
        started = time.monotonic()
        try:
            found = self._inside_torch(lambda: fn(client), timeout)
        except (StoreTimeout, Exception):  # noqa: BLE001 - the store is gone, not there yet, or silent
            self._failed(started, timeout)
            return None
        with self._lock:
            self._unanswered_since = None
        return found

    def _failed(self, started: float, timeout: float) -> None:
        """Forget the client after a call (or connection) that began at ``started`` failed. One that
        lasted about its ``timeout`` (ours, or the store client's own, which raises) met a store whose
        process answers no one: that starts the store's silence, and the next try waits
        :data:`QUIET_RETRY`; one refused or broken at once (no store yet, or gone) is tried again soon."""
        now = time.monotonic()
        silent = now - started >= SILENT_SHARE * timeout
        with self._lock:
            self._client = None
            self._next_connect = now + (QUIET_RETRY if silent else RECONNECT_EVERY)
            if silent and self._unanswered_since is None:
                self._unanswered_since = started

    def unanswered_for(self) -> float:
        """Seconds since the store stopped answering (calls and connections time out, where a store
        that is gone refuses them); 0 while it answers."""
        with self._lock:
            since = self._unanswered_since
        return 0.0 if since is None else time.monotonic() - since

    def _inside_torch(self, fn: Callable[[], T], timeout: float) -> T:
        """``fn()`` (torch's code) in a bounded thread, counted in flight from before that thread starts
        until ``fn`` returns; :class:`StoreTimeout` once the link is closed.

        Why counted here, by the caller, in the same step (under the lock) as the closed check: the hang
        watch's tick calls while the launcher closes. Counted by the call's own thread, as it was, a call
        that had passed the check but whose thread had not run yet was not in flight when :meth:`close`
        looked; close returned, the interpreter began to end, and the thread then went into torch. When
        a thread's torch call returns during finalization, pybind11 takes the GIL back in a destructor
        (``~gil_scoped_release``), Python ends the thread there (``pthread_exit``), the unwinding meets
        that noexcept destructor, and C++ calls ``std::terminate``: "terminate called without an active
        exception", exit -6 on a node whose job succeeded.
        """
        with self._lock:
            if self._closed:
                raise StoreTimeout("the store link is closed")
            self._in_flight += 1
        state = {"ran": False, "dropped": False}  # under the lock: fn ran, or the count was given back unrun

        def counted() -> T:
            with self._lock:
                if state["dropped"]:
                    raise StoreTimeout("given up before it ran")
                state["ran"] = True
            try:
                return fn()
            finally:
                self._leave()

        try:
            return bounded(counted, timeout)
        except StoreTimeout:
            raise  # still running, still counted: close waits for it
        except BaseException:
            with self._lock:  # its thread did not start (or an interrupt came first): it never goes in
                if not state["ran"]:
                    state["dropped"] = True
                    self._in_flight -= 1
                    self._idle.notify_all()
            raise

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self._idle.notify_all()

    def start(self) -> None:
        """Nothing to start: the link connects on its first call (the lifecycle's start)."""

    def stop(self) -> None:
        """No more calls from the watchers; :meth:`finish` closes."""

    def finish(self) -> None:
        self.close()

    def close(self) -> None:
        """No more calls; wait (bounded) for those counted in to leave torch, so that no thread is inside
        torch's C++ code when the interpreter ends (it would abort: :meth:`_inside_torch`)."""
        # A call's own timeout bounds it in C++, but on a loaded machine it returns late: wait for it
        # well past that timeout.
        # Calls into a store that has answered nothing for longer than a quiet retry never return (torch's
        # own timeout does not hold for a server that accepted and went quiet): nothing to wait for, and
        # the runtime ends by os._exit (a call late on a busy machine is waited for, as before).
        with self._lock:
            self._closed = True
            self._client = None
            since = self._unanswered_since
            silent = since is not None and time.monotonic() - since >= QUIET_RETRY
            wait = SILENT_CLOSE_WAIT if silent else CLOSE_WAIT
            self._idle.wait_for(lambda: not self._in_flight, wait)

    def _connected(self) -> Any:
        with self._lock:
            if self._closed or self._client is not None or time.monotonic() < self._next_connect:
                return self._client
            self._next_connect = time.monotonic() + RECONNECT_EVERY
        started = time.monotonic()
        try:
            client = self._inside_torch(self._connect, CALL_TIMEOUT + 1.0)
        except (StoreTimeout, Exception):  # noqa: BLE001 - rank 0 has not started its store yet, or is stopped
            self._failed(started, CALL_TIMEOUT)
            return None
        with self._lock:
            if not self._closed:
                self._client = client
        return None if self._closed else client

    def declare(self, failure: Failure) -> None:
        """Node 0's hang verdict: publish it, wait (bounded) until every other node has read it."""
        self._declaring.set()
        self.call(lambda store: store.set(VERDICT_KEY, failure.to_json()))
        deadline = time.monotonic() + VERDICT_WAIT
        while time.monotonic() < deadline:
            seen = self.call(lambda store: int(store.add(SEEN_KEY, 0)))
            if seen is None:
                break
            if seen >= self.nnodes - 1:
                self.everyone_read = True
                break
            time.sleep(0.2)
        with self._lock:
            self._verdict = failure
            self.declared = failure
        self._declared.set()

    def verdict(self) -> Failure | None:
        """The hang verdict that ends this node, once: node 0's own (after the others read it), or,
        on the other nodes, node 0's read from the store (for a launcher that polls).

        On node 0, once a verdict is being published this waits for it: the other nodes stop their
        ranks as soon as they have read it, and node 0's ranks then fail on their own (a peer
        closed the connection) before the wait would be over.
        """
        if self._declaring.is_set():
            self._declared.wait(VERDICT_WAIT + 2 * CALL_TIMEOUT)
        with self._lock:
            found, self._verdict = self._verdict, None
        if found is not None or self.node_rank == 0 or time.monotonic() < self._next_poll:
            return found
        self._next_poll = time.monotonic() + POLL_EVERY

        def read(store: Any) -> bytes | None:
            return store.get(VERDICT_KEY) if store.check([VERDICT_KEY]) else None

        text = self.call(read)
        if not text:
            return None
        try:
            verdict = Failure.from_json(text)
        except ValueError:
            return None  # not node 0's: never believed, never fatal
        self.call(lambda store: store.add(SEEN_KEY, 1))
        return verdict


def store_client(master_addr: str, master_port: int, prefix: str) -> Any:
    """A client of the script's store, once something listens on its port (no store yet: no try).

    torch is first imported here in a ``per-node`` launcher: its C++ log goes quiet, since the store
    vanishes with rank 0 at the end of every run, and a call in flight then logs a C++ trace
    ("sendBytes failed ... Broken pipe", "client socket has timed out") that means nothing."""
    with socket.create_connection((master_addr, master_port), timeout=CALL_TIMEOUT):
        pass  # refused (OSError): rank 0 has not created its store yet, or it is gone
    os.environ.setdefault(TORCH_CPP_LOG_LEVEL, "FATAL")  # read once, when torch is imported
    from datetime import timedelta

    from torch.distributed import PrefixStore, TCPStore

    client = TCPStore(master_addr, master_port, is_master=False,
                      timeout=timedelta(seconds=CALL_TIMEOUT), wait_for_workers=False)
    return PrefixStore(prefix, client)
