"""The one life every watcher of a node shares: start, tick, bounded store call, stop, finish.

Why one: each watcher (the hang watch, the store link of ``per-node`` jobs, the master's port,
node liveness) used to carry its own thread, loop, error handling and shutdown, and the launcher
started and stopped each by hand. Here:

* :class:`Ticker` is a watcher with a daemon thread that calls ``tick()`` every ``interval``
  seconds until ``stop()``; an exception in a tick is said once (not once a second) and never
  takes the node down.
* :func:`bounded` is the one bounded call: a store call has no deadline of its own that holds on
  a real network, so it runs in a daemon thread and the caller waits at most ``timeout``.
* :class:`Watchers` is what the launcher holds: it starts them all, and stops and finishes them
  all (in reverse order, each at most once), after a success or a failure alike.

No torch import.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class StoreTimeout(Exception):
    """A store call did not return within its deadline."""


def bounded(fn: Callable[[], T], timeout: float) -> T:
    """``fn()`` in a daemon thread; its result, its exception, or :class:`StoreTimeout`."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as error:  # noqa: BLE001 - handed to the caller
            box["error"] = error

    thread = threading.Thread(target=run, name="paijob-store-call", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise StoreTimeout(f"no answer within {timeout:.0f}s")
    if "error" in box:
        raise box["error"]
    return box["value"]


class Watcher(Protocol):
    """What :class:`Watchers` needs of one watcher."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def finish(self) -> None: ...


class Ticker:
    """A watcher whose daemon thread calls :meth:`tick` every ``interval`` seconds until stopped."""

    def __init__(self, name: str, interval: float, say: Callable[[str], None], *,
                 at_once: bool = False) -> None:
        """``at_once``: the first tick runs as the thread starts, not one interval later."""
        self.interval = interval
        self.at_once = at_once
        self._say_error = say
        self._stopped = threading.Event()
        self._said: set[str] = set()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def tick(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """No tick after the one in progress."""
        self._stopped.set()

    def finish(self) -> None:
        """After :meth:`stop`: release what the watcher holds (folders, connections)."""

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the tick in progress (never from the watcher's own thread)."""
        if self._thread is not threading.current_thread() and self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def failed(self, error: Exception) -> bool:
        """A tick raised ``error``: say it once (not once a second) and go on (True). A watcher
        for which an error is a verdict overrides this and returns False to stop ticking."""
        message = f"{self._thread.name}: {type(error).__name__}: {error}"
        if message not in self._said:
            self._said.add(message)
            self._say_error(message)
        return True

    def _run(self) -> None:
        if self.at_once and not self._stopped.is_set() and not self._tick_once():
            return
        while not self._stopped.wait(self.interval):
            if not self._tick_once():
                return

    def _tick_once(self) -> bool:
        try:
            self.tick()
        except Exception as error:  # noqa: BLE001 - a watcher never takes the node down by itself
            return self.failed(error)
        return True


class Watchers:
    """The watchers of one node, started together and stopped together: the launcher holds one."""

    def __init__(self, *watchers: Watcher | None) -> None:
        self._watchers = [w for w in watchers if w is not None]
        self._done = False

    def start(self) -> None:
        for watcher in self._watchers:
            watcher.start()

    def stop(self) -> None:
        """Stop every watcher, then finish each (reverse order), once; after a failure too."""
        if self._done:
            return
        self._done = True
        for watcher in reversed(self._watchers):
            watcher.stop()
        for watcher in reversed(self._watchers):
            watcher.finish()
