"""The local cluster's server under idle and stalled connections: its threads, and how fast it answers others.

    python benchmarks/bench_server_load.py [--idle 800] [--slow 50] [--out benchmarks/results/FILE.json]

Starts the real background server (as ``paijob local up`` does) in a scratch
state dir, opens ``idle`` connections that send nothing and ``slow`` requests
that announce a 50 000-byte body and send 8 bytes of it, then times 20 plain
requests from a fresh connection each while those are held. Reports the
server's thread count (``/proc/PID/status``) before and under the load, the
connections it holds (its open sockets), every latency, and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import machine_info  # noqa: E402
from paijob.local import daemon  # noqa: E402

API = "/rest-server/api/v2"
SLOW_HEAD = (b"POST " + API.encode() + b"/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/yaml\r\n"
             b"Content-Length: 50000\r\n\r\n12345678")
PROBES = 20


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise RuntimeError(f"no thread count for pid {pid}")


def _sockets(pid: int) -> int:
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            continue
    return count


def _probe(url: str, token: str) -> list[float]:
    """Seconds for each of PROBES requests (half anonymous /info, half an authenticated job list)."""
    times = []
    for i in range(PROBES):
        start = time.perf_counter()
        if i % 2:
            reply = requests.get(f"{url}{API}/jobs", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        else:
            reply = requests.get(f"{url}{API}/info", timeout=30)
        times.append(time.perf_counter() - start)
        reply.raise_for_status()
    return times


def measure(state_dir: Path, *, idle: int, slow: int) -> dict[str, Any]:
    """Run the load against a fresh background server in ``state_dir``; its figures."""
    info = daemon.up(state_dir)
    pid, url = int(info["pid"]), str(info["url"])
    token = daemon.read_token(state_dir) or ""
    held: list[socket.socket] = []
    try:
        quiet = _probe(url, token)  # also starts every worker thread the pool has
        threads_idle = _threads(pid)
        port = int(url.rsplit(":", 1)[1])
        for _ in range(idle):
            held.append(socket.create_connection(("127.0.0.1", port)))
        for _ in range(slow):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(SLOW_HEAD)
            held.append(sock)
        deadline = time.monotonic() + 30
        while _sockets(pid) < idle + slow and time.monotonic() < deadline:
            time.sleep(0.1)  # the server accepts them all (they queue in its backlog meanwhile)
        loaded = _probe(url, token)
        figures = {
            "idle_connections": idle, "slow_bodies": slow,
            "held_connections": _sockets(pid) - 1,  # less its listening socket
            "threads_idle": threads_idle, "threads_under_load": _threads(pid),
            "latency_s": {"max": max(loaded), "median": statistics.median(loaded), "samples": loaded},
            "latency_without_load_s": {"max": max(quiet), "median": statistics.median(quiet), "samples": quiet},
        }
    finally:
        for sock in held:
            sock.close()
        daemon.down(state_dir)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=800)
    parser.add_argument("--slow", type=int, default=50)
    parser.add_argument("--out", type=Path, help="also write the figures there (JSON)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="paijob-bench-server-") as scratch:
        figures = measure(Path(scratch) / "state", idle=args.idle, slow=args.slow)
    result = {"benchmark": "server_load", "machine": machine_info(), **figures}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
