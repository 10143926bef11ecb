"""Which process wrote a sampler report: a key per worker, handed to the watch on the kernel's word.

Why: the watch believes ``rank<N>.json`` only from the process the launcher started for rank N
(pid and start time, :mod:`paijob.runtime.watch.node.believed`). Every process of the job runs as the
same user and writes into the same folder, so that check alone is beaten by copying another rank's
pid and start time into a file of one's own (issue 46 row 8: a rank 0 that kept rewriting
``rank1.json`` as "busy, active now" blinded the watch to a hung rank 1). A file does not say who
wrote it; a socket does.

How: each sampler draws a random key when it starts (:func:`send_key`), keeps it in its own memory
only, and sends it once, before its first report, in one datagram to the node's watch over a Unix
socket. The kernel attaches the sender's pid to the datagram (``SCM_CREDENTIALS``: a process without
``CAP_SYS_ADMIN`` cannot give another's), so the watch (:class:`KeyBox`) files the key under the
process that sent it (pid and start time), whatever the datagram says. Each report then carries an
HMAC-SHA256 of its text under that key (:func:`sign`: a ``"mac"`` field first; the file stays the
JSON every other reader reads). The watch believes a report only when its MAC is right under the
key of the process the launcher started for its rank (:meth:`KeyBox.verify`). Another rank knows
its own key, never this one's: nothing it writes passes.

The socket is in the abstract namespace (no file a job could unlink and bind again in the runtime's
place), named after the watch's folder (:func:`address`: every node on a host has its own), bound by
the runtime before any worker starts and held until the node ends. A key is sent once and never
again, so no later bind could receive one. Nothing here imports torch.

Limits: a flood of datagrams from the job can delay or drop a rank's one key (the sender waits
:data:`SEND_TIMEOUT`); that rank's reports are then not believed and it reads as silent (judged, not
hidden). A process that reads another's memory (ptrace, ``/proc/PID/mem``: the same user may, where
the kernel's Yama setting allows) can take its key: the watch is a doctor, not a sandbox.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import select
import socket
import struct
import threading
from typing import Any

from paijob.common import procfs

MAGIC = b"PJK1"  # a key: magic, rank, key
REPORT = b"PJR1"  # a report: magic, then the report's sealed text
KEY_BYTES = 32
_MESSAGE = struct.Struct(f"!4sI{KEY_BYTES}s")  # magic, rank, key
_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
MAX_KEYS = 4096  # processes whose keys are kept (a node's workers, and their mp.spawn children)
MAX_DATAGRAM = 64 * 1024  # a report larger than this goes by its file only (a sample is a few kB)
MAX_PER_LOOK = 512  # datagrams read in one look: a flood costs the watch bounded work per look
SEND_TIMEOUT = 0.5  # seconds a sampler waits for room in the watch's queue (its own thread)
_PREFIX = b'{"mac":"'
_MAC_HEX = 64


def address(folder: str) -> bytes:
    """The abstract Unix socket of the watch whose folder is ``folder`` (the workers' ``PAIJOB_HANG_DIR``)."""
    digest = hashlib.sha256(os.path.normpath(folder).encode("utf-8", "surrogateescape")).hexdigest()
    return b"\0paijob-seal-" + digest[:40].encode()


def supported() -> bool:
    """Whether this system tells a datagram's sender (Linux)."""
    return all(hasattr(socket, name) for name in ("AF_UNIX", "SO_PASSCRED", "SCM_CREDENTIALS"))


class Seal:
    """A sampler's side: its key (in this process's memory only) and its socket to the watch."""

    def __init__(self, sock: socket.socket, key: bytes, to: bytes) -> None:
        self._sock, self.key, self._to = sock, key, to

    @classmethod
    def open(cls, folder: str, rank: int) -> Seal | None:
        """Draw this process's key and send it to the watch of ``folder`` as ``rank``'s (once); None
        when it could not be sent (no watch there, an unsupported system): reports go unsigned."""
        if not supported():
            return None
        key = os.urandom(KEY_BYTES)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            sock.settimeout(SEND_TIMEOUT)
            sock.sendto(_MESSAGE.pack(MAGIC, rank, key), address(folder))
        except (OSError, struct.error):
            sock.close()
            return None
        return cls(sock, key, address(folder))

    def sign(self, text: str) -> str:
        return sign(self.key, text)

    def send(self, signed: str) -> None:
        """A signed report to the watch too, where a file cannot be overwritten in its place (best effort)."""
        data = REPORT + signed.encode("utf-8")
        if len(data) <= MAX_DATAGRAM:
            with contextlib.suppress(OSError):
                self._sock.sendto(data, self._to)


def sign(key: bytes, text: str) -> str:
    """``text`` (a JSON object, as ``json.dumps`` wrote it) with its MAC under ``key`` as its first field."""
    body = text.encode("utf-8")
    if not body.startswith(b"{") or body.strip() == b"{}":
        return text
    mac = hmac.new(key, body, hashlib.sha256).hexdigest()
    return f'{_PREFIX.decode()}{mac}",{text[1:]}'


def signed_body(data: bytes) -> tuple[str, bytes] | None:
    """(MAC, the text it covers) of a signed report's bytes; None: no MAC where :func:`sign` puts it."""
    end = len(_PREFIX) + _MAC_HEX
    if not data.startswith(_PREFIX) or data[end:end + 2] != b'",':
        return None
    return data[len(_PREFIX):end].decode("ascii", "replace"), b"{" + data[end + 2:]


class KeyBox:
    """The watch's side: the socket the samplers send to, their keys by process, and the last report each
    process sent (read by a thread of its own: the kernel queues only a few datagrams per socket)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._keys: dict[tuple[int, int], tuple[int, bytes]] = {}  # (pid, start time) -> (rank, key)
        self._latest: dict[tuple[int, int], bytes] = {}  # (pid, start time) -> its last report sent
        self._lock = threading.Lock()
        self._closed = False
        self.dropped = 0  # datagrams not from a process of this user, or in no form of ours: counted, then dropped
        self.dropped_from: set[int] = set()  # the uids they came from (another user's flood is said)
        self._thread = threading.Thread(target=self._run, name="paijob-seal", daemon=True)

    @classmethod
    def open(cls, folder: str) -> KeyBox | None:
        """Bind the socket of ``folder``'s watch (before any worker starts); None where it cannot be."""
        if not supported():
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            sock.bind(address(folder))
            sock.setblocking(False)
        except OSError:
            sock.close()
            return None
        box = cls(sock)
        box._thread.start()
        return box

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.close()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._sock.fileno(), select.POLLIN)
        while not self._closed:
            try:
                poller.poll(1000)
            except OSError:
                return
            self.look()

    def look(self) -> None:
        """File what was sent since the last look under its sender (each process's first key only)."""
        for _ in range(MAX_PER_LOOK):
            try:
                data, ancillary, _flags, _addr = self._sock.recvmsg(MAX_DATAGRAM + 1,
                                                                     socket.CMSG_SPACE(_CREDENTIALS.size))
            except OSError:  # nothing more (BlockingIOError), or closed
                return
            with self._lock:
                self._file(data, *_sender(ancillary))

    def _file(self, data: bytes, pid: int | None, uid: int | None) -> None:
        if uid is not None and uid != os.getuid():  # abstract sockets have no permissions: anyone can send
            self.dropped += 1
            self.dropped_from.add(uid)
            return
        stat = procfs.read_stat(pid) if pid is not None else None
        if stat is None:
            self.dropped += 1
            return
        sender = (stat.pid, stat.start_time)
        if data.startswith(REPORT) and sender in self._keys and len(data) <= MAX_DATAGRAM:
            self._latest[sender] = data[len(REPORT):]
        elif data.startswith(MAGIC) and len(data) == _MESSAGE.size and len(self._keys) < MAX_KEYS:
            _magic, rank, key = _MESSAGE.unpack(data)
            self._keys.setdefault(sender, (rank, key))
        else:
            self.dropped += 1

    def reports(self) -> list[tuple[int, bytes]]:
        """(rank, report) of the last report each process sent, for the rank it said it is (checked by
        :meth:`verify` and the launcher's own account of its ranks, as a file is)."""
        with self._lock:
            return [(self._keys[sender][0], data) for sender, data in self._latest.items()]

    def start_of(self, pid: int) -> int | None:
        """The start time process ``pid`` had when its key was filed (it may have ended since); None: no key
        of that pid, or of two processes that had it."""
        with self._lock:
            found = {start for sender_pid, start in self._keys if sender_pid == pid}
        return found.pop() if len(found) == 1 else None

    def verify(self, rank: int, pid: int, start: int, data: bytes) -> bool:
        """Whether ``data`` (a report's bytes) was signed by process (``pid``, ``start``) with the key it
        sent as ``rank``'s."""
        with self._lock:
            found = self._keys.get((pid, start))
        signed = signed_body(data)
        if found is None or signed is None or found[0] != rank:
            return False
        mac, body = signed
        return hmac.compare_digest(mac, hmac.new(found[1], body, hashlib.sha256).hexdigest())


def _sender(ancillary: list[tuple[int, int, Any]]) -> tuple[int | None, int | None]:
    """The sender's pid and uid as the kernel gave them (``SCM_CREDENTIALS``); (None, None) without."""
    for level, kind, value in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(value) >= _CREDENTIALS.size:
            pid, uid, _gid = _CREDENTIALS.unpack(value[:_CREDENTIALS.size])
            return (int(pid) if pid > 0 else None), int(uid)
    return None, None
