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
from waitress.task import ErrorTask
from waitress.utilities import RequestEntityTooLarge

THREADS = 8  # requests served at once; every other connection waits in the I/O loop, costing no thread
MAX_CONNECTIONS = 1000  # sockets held open at once (more wait in the kernel's backlog)
INACTIVITY_TIMEOUT = 30  # seconds without a byte from a client (an idle connection, a stalled request)
REQUEST_DEADLINE = 30.0  # seconds for a request's headers and body to arrive, however steadily they trickle
CLEANUP_INTERVAL = 5  # how often those two are checked
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


class _ErrorTask(ErrorTask):
    """waitress's own refusals; a body over the limit answered as rest-server answers it."""

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
    error_task_class = _ErrorTask


class BoundedServer(TcpWSGIServer):
    """waitress's TCP server that also ends a request which has not fully arrived by its deadline."""

    channel_class = _Channel

    def __init__(self, app: Any, *, host: str, port: int, body_limit: int,
                 inactivity_timeout: int = INACTIVITY_TIMEOUT, request_deadline: float = REQUEST_DEADLINE,
                 cleanup_interval: int = CLEANUP_INTERVAL, threads: int = THREADS) -> None:
        self.request_deadline = request_deadline
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
        for channel in list(self.active_channels.values()):
            partial = channel.request
            if isinstance(partial, _TimedParser) and not channel.requests and partial.started < cutoff:
                channel.will_close = True

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
