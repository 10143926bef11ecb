"""The HTTP server that carries the local cluster's app: waitress, with every resource bounded.

Any local user can connect to 127.0.0.1 without a token, so what a connection
costs must not depend on the client's good will. werkzeug's development server
(``threaded=True``) gave each connection a thread and read without a timeout: a
body announced and never sent held a thread forever, 800 idle connections were
800 threads. waitress (pure Python, no compiled part to build) reads every
connection in one asynchronous loop and hands a request to a fixed pool of
``THREADS`` only once it has fully arrived, so slow or idle clients cost a
socket, never a thread. On top of its own limits (connections, header and body
sizes, an inactivity timeout) a request must arrive whole within
``REQUEST_DEADLINE``: a client that trickles a byte now and then is cut too.
gunicorn and uWSGI were not chosen: they fork workers, do not run on every OS
Python does, and their own dependencies would ship with a client tool.

A body over the limit is refused by waitress while it reads the headers (it
never reads the rest), answered with rest-server's JSON, as the app would.

The connection cap is shared, so it must not be a door others can hold shut.
Every client of 127.0.0.1 has the same address, so a "peer" here is what a
connection has shown: the app marks a connection *trusted* once one of its
requests carried the cluster's token or a portal session (``trust``). A
connection without one keeps an answered keep-alive connection idle for
``UNTRUSTED_KEEPALIVE`` seconds at most (instead of ``INACTIVITY_TIMEOUT``), and
when every slot is taken the untrusted connections idle the longest are
closed to make room, so a new connection (the token holder's, the portal's)
is accepted at once: 1,100 tokenless sockets each sending a keep-alive request
every 15 s no longer stop the server answering anyone. A trusted connection is
never evicted; a request being served never is, nor a new connection in its first
``FRESH_GRACE`` seconds (time to send its first request and show its token). Nor can queued requests keep
a connection "busy": one without the token that pipelines more than ``MAX_PIPELINED`` requests ahead of
reading their answers is closed (1,100 sockets x 2,000 unread pipelined requests no longer time the token
holder out).
"""

from __future__ import annotations

import json
import resource
import threading
import time
from typing import Any

from waitress import wasyncore
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask, WSGITask
from waitress.utilities import RequestEntityTooLarge

THREADS = 8  # requests served at once; every other connection waits in the I/O loop, costing no thread
MAX_CONNECTIONS = 1000  # sockets held open at once (more wait in the kernel's backlog)
INACTIVITY_TIMEOUT = 30  # seconds without a byte from a client (an idle connection, a stalled request)
REQUEST_DEADLINE = 30.0  # seconds for a request's headers and body to arrive, however steadily they trickle
UNTRUSTED_KEEPALIVE = 5  # seconds an answered connection without the token or a portal session may idle
EVICT_BATCH = 16  # slots freed at once when the cap is reached (untrusted connections idle the longest)
FRESH_GRACE = 5.0  # seconds a new connection that has sent no request yet is never closed to make room
CLEANUP_INTERVAL = 5  # how often those two are checked
MAX_PIPELINED = 8  # requests a connection without the token may have waiting for their answers; more: it is closed
MAX_HEADER_BYTES = 32 * 1024
# rest-server's express.js answer to a body over body-parser's limit (no code, the message alone)
TOO_LARGE = {"message": "request entity too large"}


def too_large_body() -> bytes:
    return json.dumps(TOO_LARGE).encode()


class _TimedParser(HTTPRequestParser):
    """A request being read, with the time its first byte arrived."""

    def __init__(self, adj: Any) -> None:
        super().__init__(adj)
        self.started = time.monotonic()


TRUST = "paijob.trust_connection"  # the WSGI environ's callable that marks the request's connection trusted


def trust(environ: dict[str, Any]) -> None:
    """Mark the connection that carried this request as the token holder's (the app calls it once a
    request passed authentication): it is never evicted and may idle as long as any connection."""
    mark = environ.get(TRUST)
    if mark is not None:
        mark()


class _Task(WSGITask):
    """A request handed to the app; its environ carries ``TRUST`` for its connection."""

    def __init__(self, channel: Any, request: Any) -> None:
        super().__init__(channel, request)
        channel.answered = True

    def get_environment(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environment()
        environ[TRUST] = self.channel.trust
        return environ


class _ErrorTask(ErrorTask):
    """waitress's own refusals; a body over the limit answered as rest-server answers it."""

    def __init__(self, channel: Any, request: Any) -> None:
        super().__init__(channel, request)
        channel.answered = True

    def execute(self) -> None:
        if not isinstance(self.request.error, RequestEntityTooLarge):
            self.response_headers.append(("X-Content-Type-Options", "nosniff"))
            super().execute()
            return
        body = too_large_body()
        self.status = "413 Payload Too Large"
        self.response_headers.extend([("Content-Type", "application/json; charset=utf-8"),
                                      ("Access-Control-Allow-Origin", "*"),
                                      ("X-Content-Type-Options", "nosniff")])
        self.set_close_on_finish()  # the unread body is not drained
        self.content_length = len(body)
        self.write(body)


class _Channel(HTTPChannel):
    parser_class = _TimedParser
    task_class = _Task
    error_task_class = _ErrorTask
    trusted = False  # one of its requests carried the token or a portal session (set by the app's thread)
    answered = False  # it sent a request: idle from now on is keep-alive

    def trust(self) -> None:
        self.trusted = True

    def received(self, data: bytes) -> bool:
        """waitress's own (every complete request in ``data`` is queued), but a connection without the token
        that has more than ``MAX_PIPELINED`` requests waiting is closed, its waiting requests dropped: it sends
        faster than it reads its answers (pipelining thousands and reading none). Queued requests made a
        connection "busy", never closed to make room, and the server worked through all of them (issue 46:
        1,100 sockets x 2,000 requests timed the token holder out). No HTTP client pipelines that deep."""
        result: bool = super().received(data)
        if len(self.requests) > MAX_PIPELINED and not self.trusted:
            with self.requests_lock:
                for request in self.requests[1:]:  # the first may be being served: waitress ends it
                    request.close()
                del self.requests[1:]
                self.will_close = True
        return result

    def evictable(self, now: float) -> bool:
        """Untrusted, serving nothing and not already closing, and past its first moments: it may be closed
        to make room. A connection that has not sent a request yet gets ``FRESH_GRACE`` seconds to show its
        token: the token holder's new connection, accepted into a full house, must not be the one closed
        before its request is read (seen on a loaded machine: the CLI's request reset)."""
        if self.trusted or self.requests or self.will_close or self.close_when_flushed:
            return False
        return self.answered or now - self.creation_time >= FRESH_GRACE


class BoundedServer(TcpWSGIServer):
    """waitress's TCP server that also ends a request which has not fully arrived by its deadline."""

    channel_class = _Channel

    def __init__(self, app: Any, *, host: str, port: int, body_limit: int,
                 inactivity_timeout: int = INACTIVITY_TIMEOUT, request_deadline: float = REQUEST_DEADLINE,
                 cleanup_interval: int = CLEANUP_INTERVAL, threads: int = THREADS,
                 untrusted_keepalive: float | None = None) -> None:
        self.request_deadline = request_deadline
        self.untrusted_keepalive = UNTRUSTED_KEEPALIVE if untrusted_keepalive is None else untrusted_keepalive
        self._trigger_lock = threading.Lock()
        self._stopped = False
        super().__init__(
            app, host=host, port=port, threads=threads, connection_limit=connection_limit(),
            channel_timeout=inactivity_timeout, cleanup_interval=cleanup_interval,
            max_request_header_size=MAX_HEADER_BYTES,
            max_request_body_size=body_limit + 1,  # waitress refuses at >= its maximum
            asyncore_use_poll=True,  # select() cannot watch a socket numbered 1024 or more
            ident="", expose_tracebacks=False,
        )

    @property
    def port(self) -> int:
        return int(self.effective_port)

    def maintenance(self, now: float) -> None:
        super().maintenance(now)  # closes channels idle for the inactivity timeout
        cutoff = time.monotonic() - self.request_deadline
        keepalive_cutoff = now - self.untrusted_keepalive  # waitress's last_activity is time.time()
        for channel in list(self.active_channels.values()):
            partial = channel.request
            if isinstance(partial, _TimedParser) and not channel.requests and partial.started < cutoff:
                channel.will_close = True
            elif partial is None and channel.answered and channel.evictable(now) \
                    and channel.last_activity < keepalive_cutoff:
                channel.will_close = True

    def readable(self) -> bool:
        """waitress's own (maintenance on time, no accepting at the cap), but at the cap room is made for the
        next wake-up, and without waitress's log line each time the cap is reached and left."""
        now = time.time()
        if now >= float(self.next_channel_cleanup):
            self.next_channel_cleanup: float = now + self.adj.cleanup_interval
            self.maintenance(now)
        if not self.accepting:
            return False
        if len(self._map) >= self.adj.connection_limit:
            self.make_room()
            return False
        return True

    def make_room(self) -> None:
        """Close the untrusted connections idle the longest, ``EVICT_BATCH`` slots' worth (those already
        closing count), so the next connection is accepted: the cap is not a door tokenless clients hold."""
        channels = list(self.active_channels.values())
        closing = sum(1 for channel in channels if channel.will_close or channel.close_when_flushed)
        wanted = len(self._map) - self.adj.connection_limit + EVICT_BATCH - closing
        if wanted <= 0:
            return
        now = time.time()  # waitress's clock (last_activity, creation_time)
        idle = sorted((channel for channel in channels if isinstance(channel, _Channel) and channel.evictable(now)),
                      key=lambda channel: channel.last_activity)
        for channel in idle[:wanted]:
            channel.will_close = True

    def handle_accept(self) -> None:
        """Accept what is waiting, up to the free slots (waitress takes one per wake-up)."""
        for _ in range(EVICT_BATCH):
            if len(self._map) >= self.adj.connection_limit:
                return
            before = len(self._map)
            super().handle_accept()
            if len(self._map) == before:  # nothing was waiting
                return

    def serve_forever(self) -> None:
        self.run()

    # Stopping. waitress wakes its I/O loop through a pipe (the trigger) that every worker thread writes to
    # when a response is ready, and the loop runs whatever thunks are queued on *any* wake-up. A thunk that
    # closed the pipe could therefore run between our queueing it and our own write to the pipe, which then
    # went to a closed descriptor (EBADF) or, once the number was reused, into some other file. So the loop
    # closes the sockets only, and the pipe is closed last, under the lock every writer takes.

    def pull_trigger(self) -> None:
        """Wake the I/O loop (waitress's channels call this); nothing once the server is closed."""
        with self._trigger_lock:
            if not self._stopped:
                self.trigger.pull_trigger()

    def shutdown(self) -> None:
        """From any thread: the I/O loop closes every socket (in its own thread) and so returns;
        the worker threads finish what they serve (5 s at most) and end."""
        with self._trigger_lock:
            if self._stopped:
                return
            self.trigger.pull_trigger(self._close_sockets)
        self.task_dispatcher.shutdown(cancel_pending=True, timeout=5)

    def server_close(self) -> None:
        """Close whatever the loop did not (it never ran, or is gone), then the trigger's pipe."""
        with self._trigger_lock:
            self._stopped = True
        self._close_sockets()
        self.trigger.close()

    def close(self) -> None:
        """The listening socket (waitress's own ``close`` also closes the trigger: see ``server_close``)."""
        wasyncore.dispatcher.close(self)

    def _close_sockets(self) -> None:
        """Every socket of the loop's map, the trigger left open; an empty map ends the loop."""
        for dispatcher in list(self._map.values()):
            if dispatcher is not self.trigger:
                try:
                    dispatcher.close()
                except OSError:
                    pass
        self._map.clear()


def connection_limit() -> int:
    """``MAX_CONNECTIONS``, or fewer where the process may not open that many files (half for other uses).

    The soft limit on open files is raised to the hard one first: many systems start at 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * MAX_CONNECTIONS + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(16, min(MAX_CONNECTIONS, soft // 2))
