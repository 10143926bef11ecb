"""One-time codes and browser sessions of the portal, held in the server's memory.

``paijob local open`` asks the server, with the cluster's long-lived token, for
a code that works once and only for ``CODE_TTL`` seconds; the link it prints
carries that code in its fragment (``/#code=...``: never sent to a server,
never in a Referer). The page trades the code for a session id, which the
server sets as an HttpOnly, SameSite=Strict cookie. The long-lived token never
reaches the browser, and a restarted server (a new token) has no sessions.

Only SHA-256 digests of codes and session ids are kept, in bounded tables:
a flood of codes or logins pushes out the oldest, it cannot grow memory.
No Flask here: ``paijob local open`` imports the paths and the link format.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable

CODE_TTL = 120.0  # seconds a one-time code works: long enough for a browser to start
SESSION_TTL = 12 * 3600.0  # a working day; then `paijob local open` again
MAX_CODES = 32
MAX_SESSIONS = 64

CODE_PATH = "/portal/api/code"  # POST, bearer token -> {"code", "expiresIn"}
SESSION_PATH = "/portal/api/session"  # POST {"code"} -> session cookie; DELETE -> logged out
CSRF_HEADER = "X-Paijob-Portal"  # every write sent with the cookie carries it (a cross-site form cannot)


def login_url(base_url: str, code: str) -> str:
    """The link that logs a browser in: the portal's front page with the code in the fragment."""
    return f"{base_url.rstrip('/')}/#code={code}"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class _ExpiringTable:
    """digest -> expiry time, at most ``limit`` entries (the soonest to expire goes first)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.entries: dict[str, float] = {}

    def add(self, digest: str, expires: float, now: float) -> None:
        self.entries = {key: when for key, when in self.entries.items() if when > now}
        while len(self.entries) >= self.limit:
            del self.entries[min(self.entries, key=self.entries.__getitem__)]
        self.entries[digest] = expires

    def live(self, digest: str, now: float) -> bool:
        expires = self.entries.get(digest)
        if expires is None:
            return False
        if expires <= now:
            del self.entries[digest]
            return False
        return True


class Sessions:
    """The codes handed out and the sessions they became (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._codes = _ExpiringTable(MAX_CODES)
        self._sessions = _ExpiringTable(MAX_SESSIONS)

    def new_code(self) -> str:
        code = secrets.token_urlsafe(18)
        with self._lock:
            now = self._clock()
            self._codes.add(_digest(code), now + CODE_TTL, now)
        return code

    def redeem(self, code: str) -> str | None:
        """A new session id for a live code, which is used up; None for any other code."""
        with self._lock:
            now = self._clock()
            digest = _digest(code)
            if not self._codes.live(digest, now):
                return None
            del self._codes.entries[digest]
            session = secrets.token_urlsafe(32)
            self._sessions.add(_digest(session), now + SESSION_TTL, now)
        return session

    def valid(self, session: str) -> bool:
        with self._lock:
            return self._sessions.live(_digest(session), self._clock())

    def end(self, session: str) -> None:
        with self._lock:
            self._sessions.entries.pop(_digest(session), None)
