"""Node 0's last word on its declared port, once its command has ended (``per-node`` mode).

Why: in ``per-node`` mode the port OpenPAI declared for the rendezvous belongs to
the script's own store, which lives in the script's rank 0. Once node 0's command
has ended, that store is gone, and with it the channel through which the nodes'
watches talk. What node 0 still has to tell the others, it tells on the same port:

* :data:`ABORT`, a diagnosis (:mod:`paijob.runtime.watch.node.portwatch`: the script
  listens on another port): the waiting nodes read it instead of waiting for a
  store that never comes, and exit 2 too;
* :data:`ACCOUNT`, node 0's account of torch's own process-group timeout (the rank
  that never arrived, :meth:`paijob.runtime.watch.hang.doctor.HangWatch.account_now`),
  as a :class:`~paijob.runtime.failure.Failure` in JSON: every node prints
  the same root cause.

Node 0 speaks first, as a real rendezvous store never does, so a notice cannot be
mistaken for a store (and a reader never sends a store anything). A reader that
recognised the notice says so (:data:`READ`); only those count, so probes and
store clients that knock on the port (a node's store link reconnecting) do not use
up the readers node 0 waits for. No torch import.
"""

from __future__ import annotations

import socket
import time

READ = b"PAIJOB-READ\n"
ABORT = "PAIJOB-ABORT"
ACCOUNT = "PAIJOB-ACCOUNT"
MAX_NOTICE = 1 << 18  # bytes: an account with its culprits' frames is a few kB
READ_WAIT = 1.0  # seconds a connection has to say it read the notice


def serve_notice(port: int, kind: str, message: str, *, peers: int, linger: float) -> int:
    """Answer on ``port`` with one line, ``kind message``, to every connection, until ``peers``
    have said they read it or ``linger`` seconds passed. Returns how many did."""
    payload = f"{kind} {message}".encode("utf-8", errors="replace").replace(b"\n", b" ") + b"\n"
    served = 0
    deadline = time.monotonic() + linger
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind(("", port))
        except OSError:
            return 0  # taken again meanwhile: the others will time out on their own
        server.listen(16)
        while served < peers:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            server.settimeout(remaining)
            try:
                conn, _ = server.accept()
            except OSError:
                break
            with conn:
                served += _told(conn, payload)
    return served


def _told(conn: socket.socket, payload: bytes) -> int:
    """1 when the connection read ``payload`` and said so, else 0."""
    conn.settimeout(READ_WAIT)
    data = b""
    try:
        conn.sendall(payload)
        while len(data) < len(READ):
            chunk = conn.recv(len(READ) - len(data))
            if not chunk:
                break
            data += chunk
    except OSError:
        return 0
    return int(data == READ)


def read_notice(addr: str, port: int, *, timeout: float = 2.0) -> tuple[str, str] | None:
    """Node 0's notice on its declared port as ``(kind, message)``, or None when something else
    (the store) is there, or nothing."""
    try:
        with socket.create_connection((addr, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            data = b""
            while not data.endswith(b"\n") and len(data) < MAX_NOTICE:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            kind, _, message = data.decode("utf-8", errors="replace").strip().partition(" ")
            if kind not in (ABORT, ACCOUNT):
                return None
            conn.sendall(READ)
    except OSError:
        return None
    return kind, message


def read_abort_notice(addr: str, port: int, *, timeout: float = 2.0) -> str | None:
    """Node 0's diagnosis (:data:`ABORT`), or None."""
    found = read_notice(addr, port, timeout=timeout)
    return found[1] if found is not None and found[0] == ABORT else None
