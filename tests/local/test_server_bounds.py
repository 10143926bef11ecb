"""The local cluster's HTTP server under clients that never finish: bounded threads, read timeouts, a cap on sockets.

Any local user reaches 127.0.0.1 without a token. A body announced and never
sent, or sent a byte at a time, must be cut; idle connections must cost no
thread; and the server must keep answering everyone else meanwhile.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from cluster_helpers import TOKEN, closed_within

from paijob.local.server import LocalServer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

API = "/rest-server/api/v2"
SLOW_HEAD = (b"POST " + API.encode() + b"/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/yaml\r\n"
             b"Content-Length: 50000\r\n\r\n")


def server_threads() -> set[int | None]:
    """The waitress threads alive in this process (a server stopped by another test may still be ending)."""
    return {thread.ident for thread in threading.enumerate() if thread.name.startswith("waitress")}


def bounded(tmp_path: Path, **limits: float) -> Iterator[LocalServer]:
    srv = LocalServer(tmp_path / "state", TOKEN, cleanup_interval=1, threads=2, **limits).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def short_timeouts(tmp_path: Path) -> Iterator[LocalServer]:
    """A server whose inactivity timeout is 1 s (its request deadline stays long)."""
    yield from bounded(tmp_path, inactivity_timeout=1, request_deadline=600)


@pytest.fixture
def short_deadline(tmp_path: Path) -> Iterator[LocalServer]:
    """A server whose request deadline is 2 s (its inactivity timeout stays long)."""
    yield from bounded(tmp_path, inactivity_timeout=600, request_deadline=2)


def test_a_body_announced_and_not_sent_is_cut_by_the_timeout_and_holds_no_thread(
        short_timeouts: LocalServer) -> None:
    before = server_threads()
    slow = [socket.create_connection(("127.0.0.1", short_timeouts.port)) for _ in range(5)]
    for sock in slow:
        sock.sendall(SLOW_HEAD + b"12345678")  # 8 of the 50 000 bytes announced
    # meanwhile the two worker threads answer others at once, and no thread was added for the waiting bodies
    assert requests.get(f"{short_timeouts.url}{API}/info", timeout=5).status_code == 200
    assert not server_threads() - before and len(short_timeouts.server.task_dispatcher.threads) == 2
    for sock in slow:
        assert closed_within(sock, 30) is not None, "a stalled body was never cut"
        sock.close()


def test_a_request_trickled_a_byte_at_a_time_is_cut_at_its_deadline(short_deadline: LocalServer) -> None:
    sock = socket.create_connection(("127.0.0.1", short_deadline.port))
    stop = threading.Event()
    sent: list[int] = []

    def trickle() -> None:  # never idle for long: only the deadline can end this request
        try:
            for byte in SLOW_HEAD + b"x" * 50_000:
                if stop.wait(0.1):
                    return
                sock.send(bytes([byte]))
                sent.append(byte)
        except OSError:
            return

    sender = threading.Thread(target=trickle, daemon=True)
    sender.start()
    try:
        waited = closed_within(sock, 30)
    finally:
        stop.set()
        sender.join(timeout=5)
        sock.close()
    assert waited is not None and waited >= 1.5, waited  # cut at the 2 s deadline, not sooner
    assert len(sent) < len(SLOW_HEAD) + 50_000


def test_an_idle_keep_alive_connection_is_closed_after_the_inactivity_timeout(short_timeouts: LocalServer) -> None:
    sock = socket.create_connection(("127.0.0.1", short_timeouts.port))
    sock.sendall(b"GET " + API.encode() + b"/info HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    sock.settimeout(10)
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    assert closed_within(sock, 30) is not None
    sock.close()


@pytest.mark.slow
def test_800_idle_connections_and_50_slow_bodies_leave_threads_at_the_cap_and_others_answered(
        tmp_path: Path) -> None:
    """The issue's load, against the real background server (``paijob local up``); figures in benchmarks/."""
    import bench_server_load

    figures = bench_server_load.measure(tmp_path / "state", idle=800, slow=50)
    assert figures["held_connections"] >= 850, figures
    assert figures["threads_under_load"] == figures["threads_idle"], figures
    assert figures["latency_s"]["max"] < 1.0, figures


def test_a_stop_survives_a_worker_waking_the_loop_while_it_queues_the_close(tmp_path: Path) -> None:
    """waitress's worker threads wake the I/O loop through the trigger's pipe whenever a response is ready,
    and the loop then runs every queued thunk. When that wake-up came between stop queueing its close and
    writing its own byte, the close had already run: stop's write went to a closed pipe (EBADF, seen in a CI
    run of tests/local) or, once the descriptor number was reused, into another file. Forced here."""
    srv = LocalServer(tmp_path / "state", TOKEN).start()
    trigger = srv.server.trigger
    write_byte = trigger._physical_pull

    def woken_first() -> None:
        write_byte()  # a worker's wake-up, just before ours
        deadline = time.monotonic() + 30
        while trigger.thunks and time.monotonic() < deadline:  # the loop runs the queued close
            time.sleep(0.01)
        assert not trigger.thunks
        write_byte()  # stop's own write, after the close ran

    trigger._physical_pull = woken_first
    srv.stop()
    assert srv._thread is not None and not srv._thread.is_alive()
    assert trigger._closed
    srv.server.pull_trigger()  # a worker that finishes after the stop: nothing happens, no EBADF


def test_a_server_started_twice_runs_one_io_loop(tmp_path: Path) -> None:
    """``with LocalServer(...).start()`` used to start a second I/O loop over the same sockets: the two
    raced for every read, and the loser's EAGAIN closed the connection under a request (a CI run's
    remote submit then settled its retry by reading the job back)."""
    def loops() -> int:
        return sum(thread.name == "paijob-local" and thread.is_alive() for thread in threading.enumerate())

    before = loops()
    with LocalServer(tmp_path / "state", TOKEN).start() as srv:
        assert srv.start() is srv
        assert loops() == before + 1
    assert srv._thread is not None and not srv._thread.is_alive()
