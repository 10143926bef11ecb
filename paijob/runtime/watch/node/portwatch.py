"""``per-node`` mode: catch a script that overrides ``MASTER_ADDR`` / ``MASTER_PORT``.

Tutorial scripts often set ``os.environ["MASTER_ADDR"] = "localhost"`` and
``MASTER_PORT = "12355"`` themselves. On one node that works; on several, node
rank 0's script listens on 12355 while every other node waits for the port
OpenPAI declared, which never opens: a silent wait until ``--master-timeout``
and then a retryable 143 for what is a configuration error.

Node rank 0 therefore watches, while its command runs, which TCP ports the
command's processes listen on (``/proc/net/tcp*`` and their socket inodes;
Linux only). When they listen on some port but, for :data:`CONFIRM_SECONDS`,
not on the declared one, that is the diagnosis: node 0 stops its command,
says so, and answers on the declared port with a one-line notice
(:mod:`paijob.runtime.watch.node.notice`) so that the waiting nodes, which connect there
first anyway, read the same reason and exit 2 too.

No torch import here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

from paijob.common import procfs

CONFIRM_SECONDS = 15.0
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's "st" column


def listening_sockets(tables: Iterable[str] = ("/proc/net/tcp", "/proc/net/tcp6")) -> dict[int, int]:
    """Socket inode → port of every listening TCP socket in this network namespace."""
    found: dict[int, int] = {}
    for table in tables:
        try:
            with open(table, encoding="ascii") as fh:
                lines = fh.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            found[int(fields[9])] = int(fields[1].rsplit(":", 1)[1], 16)
    return found


def session_pids(session: int) -> set[int]:
    """Processes of session ``session`` (the command runs in a session of its own)."""
    return {stat.pid for stat in procfs.processes() if stat.session == session}


def socket_inodes(pids: Iterable[int]) -> set[int]:
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


class MasterPortWatch:
    """Called about once a second with the command's session id; returns a diagnosis or None."""

    def __init__(
        self,
        port: int,
        *,
        port_label: str | None,
        confirm: float = CONFIRM_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.port = port
        self.port_label = port_label
        self.confirm = confirm
        self.clock = clock
        self.settled = False  # the declared port opened: nothing more to watch
        self.diagnosis: str | None = None  # set by the caller once a call returned one
        self._since: float | None = None
        self._last = 0.0

    def __call__(self, session: int) -> str | None:
        now = self.clock()
        if self.settled or now - self._last < 1.0:
            return None
        self._last = now
        listening = listening_sockets()
        if self.port in listening.values():
            self.settled = True
            return None
        mine = socket_inodes(session_pids(session))
        elsewhere = sorted({port for inode, port in listening.items() if inode in mine})
        return self.judge(elsewhere, now)

    def judge(self, elsewhere: list[int], now: float) -> str | None:
        """The decision, apart from /proc: ports the command listens on (not the declared one)."""
        if not elsewhere:
            self._since = None
            return None
        if self._since is None:
            self._since = now
        if now - self._since < self.confirm:
            return None
        ports = ", ".join(str(port) for port in elsewhere)
        label = f" (port label {self.port_label!r})" if self.port_label else ""
        return (
            f"node rank 0's command listens on port {ports} but not on the rendezvous port "
            f"{self.port}{label} that paijob-runtime exported as MASTER_PORT, so the other "
            f"nodes cannot reach it: the script sets MASTER_ADDR/MASTER_PORT itself (e.g. "
            f"'localhost', '12355'). Remove those lines; paijob-runtime exports both"
        )
