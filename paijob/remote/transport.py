"""How paijob talks HTTP to a cluster: deadlines, size caps, retries, and changes that happen once.

Four rules keep it honest against a misbehaving server or gateway:

* **One deadline per request.** ``timeout`` bounds each request from connect
  to its last byte (requests' own timeouts are per socket read, so a server
  that trickles a byte a second would never trip them): the exchange runs on a
  helper thread (:class:`_Exchange`) and the caller stops waiting at the
  deadline. A request that ran out of time is not retried. Connection failures
  and 502/503/504 are retried with exponential backoff. An answer held in memory
  is capped (``MAX_BODY``); a streamed log may outlast the deadline while it flows.
* **No silent redirects of changes.** A 3xx answer to POST / PUT / DELETE is an
  error naming the new location (requests would re-send a POST as a GET and
  report success). GETs follow redirects; requests drops the Authorization
  header whenever the host, port or scheme changes.
* **The token stays home.** It is sent only to the cluster's own scheme, host
  and port (``owns``); a log link elsewhere is read without it, and an
  ``http://`` link from an ``https://`` cluster is refused (a downgrade would
  put a token, ours or the link's own, on the wire in clear text).
* **A change is never re-sent blindly** (:meth:`Transport._send_once`): after a
  failure that may have reached the server, the caller's check says whether the
  change happened; when it cannot tell, the outcome is unknown
  (``OutcomeUnknownError``, exit 4), never a second try.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import requests

from paijob.errors import PaijobError
from paijob.openpai.names import DEFAULT_API_PATH
from paijob.remote.errors import (
    CHANGING_METHODS,
    ClusterError,
    ClusterUnreachableError,
    ReplyErrors,
    ServerError,
    redact,
    short,
)
from paijob.remote.profiles import is_local
from paijob.remote.reply import Reply

log = logging.getLogger("paijob.remote.client")

RETRY_STATUSES = frozenset({502, 503, 504})
CHUNK = 64 * 1024
# A log body may outlast the deadline while it keeps arriving at least this fast (bytes per deadline).
STREAM_MIN_PER_WINDOW = 64 * 1024
MAX_BODY = 256 * 2**20  # an API answer (not a log) larger than this is refused, not held in memory

T = TypeVar("T")


_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of ``url``, the default port made explicit: what "the same server" means."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:  # not a number: no server paijob would send a token to
        return scheme, "", -1
    return scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme)


class _RedactTokens(logging.Filter):
    """urllib3 logs request lines at debug level, query strings (log-manager tokens) included."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "token=" in message.lower():
            record.msg, record.args = redact(message), None
        return True


logging.getLogger("urllib3.connectionpool").addFilter(_RedactTokens())


class _Deadline(Exception):
    """The exchange did not finish within the request's deadline."""


class _TooLarge(Exception):
    """An answer held in memory (not a streamed log) grew past ``MAX_BODY``."""


class _Exchange(threading.Thread):
    """One HTTP exchange on its own thread, so that the caller can hold it to a wall-clock deadline.

    The thread hands over the response head, then the body in chunks, through
    a small queue (so a big log never sits in memory). When the caller gives
    up, the thread stops at its next chunk; one blocked in a socket read ends
    at the server's next byte or the per-read timeout. It is a daemon thread:
    it never keeps the program alive.
    """

    def __init__(self, session: requests.Session, method: str, url: str, kwargs: dict[str, Any]) -> None:
        super().__init__(name="paijob-http", daemon=True)
        self.session, self.method, self.url, self.kwargs = session, method, url, kwargs
        self.items: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=8)
        self.cancelled = threading.Event()

    def _put(self, item: tuple[str, Any]) -> bool:
        while not self.cancelled.is_set():
            try:
                self.items.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def run(self) -> None:
        response = None
        try:
            response = self.session.request(self.method, self.url, stream=True, **self.kwargs)
            if not self._put(("head", response)):
                return
            for chunk in response.iter_content(CHUNK):
                if not chunk:
                    continue
                if not self._put(("chunk", chunk)):
                    return
            self._put(("end", None))
        except Exception as error:  # handed to the caller, which maps it
            self._put(("error", error))
        finally:
            if response is not None:
                response.close()

    def next(self, deadline: float) -> tuple[str, Any]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _Deadline()
        try:
            return self.items.get(timeout=remaining)
        except queue.Empty:
            raise _Deadline() from None


class Retryable(Exception):
    """A failure worth another try: connection problems and 502-504 (timeouts are final)."""

    def __init__(self, reason: str, *, status: int | None = None, timeout: bool = False, sent: bool = True):
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.timeout = timeout
        self.sent = sent  # False when the request surely never reached the server

    def final(self, what: str, client: Transport) -> ClusterError:
        where = f"{what} on {client.cluster_name} ({client.api_base})"
        tries = client.retries + 1
        if self.status:
            return ServerError(
                f"{where}: the server answered HTTP {self.status} {tries} time(s); "
                "the cluster or its gateway is overloaded or restarting, try again later",
                status=self.status,
            )
        if self.timeout:
            return ClusterUnreachableError(
                f"{where}: {self.reason}; check the URL and your network, or raise --timeout"
            )
        hint = ("is the local cluster up? run `paijob local up`" if client.is_local
                else "check the URL and your network")
        return ClusterUnreachableError(f"{where}: {self.reason} after {tries} tries; {hint}")


def never_sent(error: requests.ConnectionError) -> bool:
    """Connect timeouts, refused connections and DNS failures: the request never left."""
    if isinstance(error, requests.ConnectTimeout):
        return True
    from urllib3.exceptions import NewConnectionError  # NameResolutionError is a subclass

    reason = getattr(error.args[0], "reason", None) if error.args else None
    return isinstance(reason, NewConnectionError)


class Transport:
    """One cluster's HTTP: a ``requests.Session`` with its bearer token, held to the rules above.

    ``cluster_url`` is the portal root, e.g. ``https://pai.example.com``;
    ``timeout`` (seconds) bounds each request from connect to last byte
    (``read_timeout`` is its older name).
    """

    def __init__(
        self,
        cluster_url: str,
        token: str | None,
        *,
        user: str | None = None,
        api_path: str = DEFAULT_API_PATH,
        timeout: float | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float | None = None,
        retries: int = 3,
        backoff: float = 0.5,
        session: requests.Session | None = None,
        cluster_name: str | None = None,
    ) -> None:
        self.cluster_url = cluster_url.rstrip("/")
        self.api_base = self.cluster_url + "/" + api_path.strip("/")
        self.user = user
        self.cluster_name = cluster_name or self.cluster_url
        total = timeout if timeout is not None else read_timeout if read_timeout is not None else 30.0
        if not (isinstance(total, (int, float)) and math.isfinite(total) and total > 0):
            raise PaijobError(f"timeout must be a positive number of seconds, not {total!r}")
        self.deadline = float(total)
        self.timeout = (min(connect_timeout, self.deadline), self.deadline)
        self.retries = retries
        self.backoff = backoff
        self.session = session or requests.Session()
        if urlsplit(self.cluster_url).hostname in ("127.0.0.1", "localhost", "::1"):
            self.session.trust_env = False  # never send loopback requests through an HTTP(S)_PROXY
        self._secrets: set[str] = set()
        if token:
            self._secrets.add(token)
            self.session.headers["Authorization"] = f"Bearer {token}"
        self.errors = ReplyErrors(self.cluster_name, self.cluster_url, self.api_base, self._secrets,
                                  local=self.is_local)

    @property
    def is_local(self) -> bool:
        """This client talks to the embedded local cluster (its messages say how to start it)."""
        return is_local(self.cluster_name)

    def _url(self, path: str) -> str:
        return self.api_base + "/" + path.lstrip("/")

    def _perform(self, method: str, url: str, *, sink: Callable[[bytes], None] | None = None,
                 on_head: Callable[[int], None] | None = None,
                 sink_statuses: tuple[int, ...] = (200, 206), **kwargs: Any) -> Reply:
        """One exchange held to ``self.deadline``; the body goes to ``sink`` (streamed) for
        ``sink_statuses``, else into the reply. Raises ``_Deadline`` and requests' errors."""
        kwargs.setdefault("timeout", self.timeout)
        kwargs.setdefault("allow_redirects", method.upper() not in CHANGING_METHODS)
        log.debug("%s %s", method, redact(url))
        exchange = _Exchange(self.session, method, url, kwargs)
        deadline = time.monotonic() + self.deadline
        exchange.start()
        try:
            kind, value = exchange.next(deadline)
            if kind == "error":
                raise value
            response: requests.Response = value
            log.debug("-> %s", response.status_code)
            streaming = sink is not None and response.status_code in sink_statuses
            if on_head is not None:
                on_head(response.status_code)
            body = self._read_body(exchange, deadline, sink if streaming else None)
            return Reply(response.status_code, response.headers, body, response.url,
                         response.reason or "")
        finally:
            exchange.cancelled.set()

    def _read_body(self, exchange: _Exchange, deadline: float, sink: Callable[[bytes], None] | None) -> bytes:
        """The answer's body (at most ``MAX_BODY``), or nothing when it goes to ``sink`` as it arrives.

        A streamed body may outlast the deadline while it keeps arriving at
        ``STREAM_MIN_PER_WINDOW`` bytes per deadline or faster.
        """
        body: list[bytes] = []
        size = 0
        window_start, window_bytes = time.monotonic(), 0
        while True:
            try:
                kind, value = exchange.next(deadline)
            except _Deadline:
                # a streamed log may take longer than the deadline while it keeps flowing
                if sink is None or window_bytes < STREAM_MIN_PER_WINDOW:
                    raise
                deadline = time.monotonic() + self.deadline
                window_start, window_bytes = time.monotonic(), 0
                continue
            if kind == "error":
                raise value
            if kind == "end":
                return b"".join(body)
            if sink is not None:
                sink(value)
                window_bytes += len(value)
                if time.monotonic() - window_start > self.deadline and window_bytes >= STREAM_MIN_PER_WINDOW:
                    deadline = time.monotonic() + self.deadline
                    window_start, window_bytes = time.monotonic(), 0
            else:
                body.append(value)
                size += len(value)
                if size > MAX_BODY:
                    raise _TooLarge()

    def _transport(self, method: str, url: str, **kwargs: Any) -> Reply:
        """One HTTP exchange; connection problems and 502-504 become ``Retryable``."""
        try:
            reply = self._perform(method, url, **kwargs)
        except _Deadline:
            raise Retryable(f"timed out: no complete answer within {self.deadline:g} s (--timeout)", timeout=True) from None
        except requests.Timeout as error:
            sent = not isinstance(error, requests.ConnectTimeout)
            raise Retryable(f"timed out ({error.__class__.__name__}, --timeout {self.deadline:g} s)",
                             timeout=True, sent=sent) from None
        except requests.TooManyRedirects:
            raise ClusterError(f"{method} {redact(url, self._secrets)}: too many redirects; "
                               "check the cluster URL") from None
        except requests.ConnectionError as error:
            raise Retryable(f"connection failed ({short(error, self._secrets)})",
                             sent=not never_sent(error)) from None
        except requests.exceptions.ChunkedEncodingError:  # the connection broke in the middle of the body
            raise Retryable("connection broken while reading the answer") from None
        except _TooLarge:
            raise ClusterError(f"{method} {redact(url, self._secrets)}: the answer is larger than "
                               f"{MAX_BODY // 2**20} MiB; is this an OpenPAI REST server?") from None
        except requests.RequestException as error:  # invalid URL and the like
            raise ClusterError(f"{method} {redact(url, self._secrets)}: {short(error, self._secrets)}; "
                               "check the cluster URL") from None
        if reply.status_code in RETRY_STATUSES:
            raise Retryable(f"HTTP {reply.status_code}", status=reply.status_code)
        return reply

    def _with_retries(self, what: str, attempt: Callable[[], T]) -> T:
        """Run ``attempt``; retry on connection errors / 502-504 with backoff (never on timeouts)."""
        for tries in range(self.retries + 1):
            try:
                return attempt()
            except Retryable as retryable:
                if retryable.timeout or tries == self.retries:
                    raise retryable.final(what, self) from None
                delay = self.backoff * (2**tries)
                log.debug("%s: %s; retrying in %.1f s", what, retryable.reason, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _request(self, method: str, path: str, *, what: str, ok: tuple[int, ...] = (200,), **kwargs: Any) -> Reply:
        url = path if path.startswith("http") else self._url(path)

        def attempt() -> Reply:
            reply = self._transport(method, url, **kwargs)
            if reply.status_code in ok:
                return reply
            raise self.errors.error(reply, what, method)

        return self._with_retries(what, attempt)

    def _send_once(self, what: str, send: Callable[[], Reply],
                   happened: Callable[[bool], bool | None],
                   unknown: Callable[[str], ClusterError]) -> tuple[Reply | None, bool]:
        """Send a change that must not happen twice; (its reply or None when it already happened, maybe sent).

        A failure that may have reached the server is retried only after ``happened(maybe_sent)``
        says the change did not happen (False); None (cannot tell) is ``unknown(reason)``, so
        the change is never made twice. A timeout after sending is unknown at once.
        """
        maybe_sent = False
        for tries in range(self.retries + 1):
            if happened(maybe_sent) is True:
                log.debug("%s: it happened after an interrupted try; not re-sending", what)
                return None, maybe_sent
            try:
                return send(), maybe_sent
            except Retryable as retryable:
                maybe_sent = maybe_sent or retryable.sent
                if retryable.timeout and retryable.sent:
                    raise unknown(retryable.reason) from None
                if tries == self.retries or retryable.timeout:
                    found = happened(maybe_sent)
                    if found is True:
                        return None, maybe_sent
                    if found is None:
                        raise unknown(retryable.reason) from None
                    raise retryable.final(what, self) from None
                time.sleep(self.backoff * (2**tries))
        raise AssertionError("unreachable")

    def owns(self, uri: str) -> bool:
        """``uri`` is on the cluster's own scheme, host and port: the only place the token is sent."""
        return origin(uri) == origin(self.cluster_url)

    def _refuse_downgrade(self, uri: str, what: str) -> None:
        if origin(self.cluster_url)[0] == "https" and origin(uri)[0] != "https":
            raise ClusterError(f"{what} on {self.cluster_name}: the cluster, reached over https, answered with "
                               f"a link that is not https ({redact(uri, self._secrets)}); paijob does not follow "
                               "it, as tokens would travel in clear text: read the log in the web portal, and ask "
                               "the cluster's admin to serve log links over https")
