"""TCP ports for the servers paijob's tasks start, drawn outside the kernel's ephemeral range.

A port found with ``bind(("127.0.0.1", 0))`` comes from the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``), the range it also hands to every outgoing
connection on the machine, and gloo opens many: between the draw and the server's own bind,
any connection can take it (``EADDRINUSE``, the task fails). A port outside that range is taken
only by a program that asks for it by number, so paijob draws from ``PAIJOB_PORT_RANGE``
(``LOW-HIGH``, default 20000-28999: below the kernel's usual 32768-60999 and torch's 29500),
less any part of it the kernel's range covers, at random, and checks each port by binding it
as the task's server will (every IPv4 and IPv6 address, never listening). Ports this process
handed out recently are not handed out again until many others have been.

The local cluster (task ports) and ``paijob-runtime`` (a standalone run's rendezvous port)
both use it.
"""

from __future__ import annotations

import collections
import errno
import os
import random
import socket
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

from paijob.common.contract import PORT_RANGE as RANGE_VAR
from paijob.errors import PaijobError

DEFAULT_RANGE = (20000, 28999)
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_RECENT: collections.deque[int] = collections.deque(maxlen=2048)  # handed out by this process
# Ports one reservation holds open (two sockets each); the rest of a large one are checked, not
# held, so that a job's ports never exhaust the open-file limit (often 1024).
HOLD_AT_MOST = 128
_random = random.SystemRandom()


class PortRangeError(PaijobError):
    """No usable port: a bad ``PAIJOB_PORT_RANGE``, or every port of the range is taken."""


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int] | None:
    """The kernel's ephemeral port range (inclusive), or None where it cannot be read."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return None
    return low, high


def configured_range(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """``PAIJOB_PORT_RANGE`` as ``(low, high)``, inclusive; the default when unset."""
    raw = (os.environ if environ is None else environ).get(RANGE_VAR, "").strip()
    if not raw:
        return DEFAULT_RANGE
    low_text, dash, high_text = raw.partition("-")
    if dash and low_text.strip().isdigit() and high_text.strip().isdigit():
        low, high = int(low_text), int(high_text)
        if 1024 <= low <= high <= 65535:
            return low, high
    raise PortRangeError(f"{RANGE_VAR}={raw!r} is not a port range LOW-HIGH within 1024-65535 "
                         f"(e.g. {RANGE_VAR}={DEFAULT_RANGE[0]}-{DEFAULT_RANGE[1]}, outside the kernel's "
                         f"ephemeral range {_describe(ephemeral_range())}); unset it for the default")


def candidates(environ: Mapping[str, str] | None = None, ephemeral: tuple[int, int] | None = None) -> list[int]:
    """Every port paijob may draw: the configured range less the kernel's ephemeral range
    (``ephemeral``, read from procfs when not given)."""
    low, high = configured_range(environ)
    kernel = ephemeral or ephemeral_range()
    ports = [p for p in range(low, high + 1) if kernel is None or not kernel[0] <= p <= kernel[1]]
    if not ports:
        raise PortRangeError(f"{RANGE_VAR} {low}-{high} lies inside the kernel's ephemeral port range "
                             f"{_describe(kernel)} ({EPHEMERAL_RANGE_FILE}), which any outgoing connection "
                             f"may take; set {RANGE_VAR} to a range outside it")
    return ports


def is_free(port: int) -> bool:
    """True when a server could bind ``port`` on every address right now (checked by binding it)."""
    held = _claim(port)
    for sock in held or ():
        sock.close()
    return held is not None


class Reservation:
    """Ports drawn and held bound (never listening) until each is handed to the task that serves it.

    While held, no other program can bind them; :meth:`release` lets them go just before the
    task starts, which leaves only the task's own start-up between the release and its bind.
    Past ``HOLD_AT_MOST`` ports, the rest were free when drawn but are not held.
    """

    def __init__(self, held: dict[int, list[socket.socket]]) -> None:
        self._held = dict(held)
        self.ports = list(held)

    def release(self, ports: Collection[int] | None = None) -> None:
        """Stop holding ``ports`` (all when None)."""
        for port in list(self._held) if ports is None else ports:
            for sock in self._held.pop(port, ()):
                sock.close()

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


def reserve(count: int = 1, *, taken: Collection[int] = (), environ: Mapping[str, str] | None = None,
            ephemeral: tuple[int, int] | None = None) -> Reservation:
    """``count`` distinct ports, held (up to ``HOLD_AT_MOST``); none in ``taken`` or handed out
    recently by this process.

    Raises :class:`PortRangeError` when the range has fewer free ports than ``count``.
    """
    pool = candidates(environ, ephemeral)
    if count > len(pool):
        raise PortRangeError(f"{count} ports asked for, but {RANGE_VAR} offers {len(pool)} "
                             f"({_describe((pool[0], pool[-1]))} outside the kernel's ephemeral range)")
    held: dict[int, list[socket.socket]] = {}
    try:
        for avoid_recent in (True, False):  # ports handed out recently only when nothing else is free
            avoid = set(taken) | (set(_RECENT) if avoid_recent else set())
            for port in _walk(pool):
                if len(held) == count:
                    break
                if port not in avoid and port not in held:
                    sockets = _claim(port)
                    if sockets is not None:
                        if len(held) >= HOLD_AT_MOST:
                            for sock in sockets:
                                sock.close()
                            sockets = []
                        held[port] = sockets
            if len(held) == count:
                break
    except OSError as error:  # EMFILE: more ports than this process may hold open
        Reservation(held).release()
        raise PortRangeError(f"cannot hold {count} ports at once: {error.strerror}") from None
    if len(held) < count:
        found = len(held)
        Reservation(held).release()
        raise PortRangeError(f"only {found} of the {count} ports asked for are free in "
                             f"{_describe((pool[0], pool[-1]))} ({RANGE_VAR}); free some, or widen the range")
    _RECENT.extend(held)
    return Reservation(held)


def draw(count: int = 1, *, taken: Collection[int] = (), environ: Mapping[str, str] | None = None,
         ephemeral: tuple[int, int] | None = None) -> list[int]:
    """``count`` ports as :func:`reserve` finds them, free when drawn and not held (the caller's
    server binds them soon: a standalone run's rendezvous port, a test's server)."""
    with reserve(count, taken=taken, environ=environ, ephemeral=ephemeral) as reservation:
        return reservation.ports


def _walk(pool: list[int]) -> Iterator[int]:
    """Every port of ``pool`` once, from a random start: draws by different processes rarely meet."""
    start = _random.randrange(len(pool))
    yield from pool[start:]
    yield from pool[:start]


def _claim(port: int) -> list[socket.socket] | None:
    """``port`` bound on every IPv4 and IPv6 address (not listening), or None if something holds it."""
    held: list[socket.socket] = []
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as error:
            if error.errno in (errno.EMFILE, errno.ENFILE):
                for other in held:
                    other.close()
                raise
            continue  # no such family on this machine: nothing there can hold the port
        try:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address, port))
        except OSError as error:
            sock.close()
            if family == socket.AF_INET6 and error.errno == errno.EADDRNOTAVAIL:
                continue  # IPv6 built in but switched off
            for other in held:
                other.close()
            return None
        held.append(sock)
    return held


def _describe(bounds: tuple[int, int] | None) -> str:
    return "(unknown)" if bounds is None else f"{bounds[0]}-{bounds[1]}"
