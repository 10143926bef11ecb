"""The local cluster as a background service: state dir, token, up / down / status.

State dir: ``$PAIJOB_LOCAL_STATE_DIR``, else ``$XDG_STATE_HOME/paijob/local``,
else ``~/.local/state/paijob/local``. It holds ``token`` (0600, made fresh by
every ``up``), ``server.json`` (pid, port, url of the running server),
``jobs.sqlite`` (jobs, attempts, tasks), ``logs/``, ``work/`` and ``server.log``.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

from paijob.errors import PaijobError

START_TIMEOUT = 20.0


class LocalClusterError(PaijobError):
    """The local cluster could not be started, reached or stopped."""


def state_dir() -> Path:
    explicit = os.environ.get("PAIJOB_LOCAL_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "paijob" / "local"


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def read_token(directory: Path | None = None) -> str | None:
    path = (directory or state_dir()) / "token"
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


def new_token(directory: Path | None = None) -> str:
    token = secrets.token_urlsafe(32)
    _write_private((directory or state_dir()) / "token", token + "\n")
    return token


def write_server_info(directory: Path, info: dict[str, Any]) -> None:
    _write_private(directory / "server.json", json.dumps(info))


def clear_server_info(directory: Path, pid: int) -> None:
    info = server_info(directory)
    if info and info.get("pid") == pid:
        (directory / "server.json").unlink(missing_ok=True)


def server_info(directory: Path | None = None) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(((directory or state_dir()) / "server.json").read_text())
        return data
    except (FileNotFoundError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not a server
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _healthy(url: str) -> bool:
    session = requests.Session()
    session.trust_env = False  # loopback: no proxy
    try:
        return session.get(f"{url}/rest-server/api/v2/info", timeout=2).ok
    except requests.RequestException:
        return False
    finally:
        session.close()


def running(directory: Path | None = None) -> dict[str, Any] | None:
    """The running server's info, or None (a stale server.json is removed)."""
    directory = directory or state_dir()
    info = server_info(directory)
    if not info:
        return None
    if not _alive(int(info.get("pid", -1))) or not _healthy(str(info.get("url"))):
        if not _alive(int(info.get("pid", -1))):
            (directory / "server.json").unlink(missing_ok=True)
        return None
    return info


def up(directory: Path | None = None, port: int = 0) -> dict[str, Any]:
    """Start the server in the background unless it runs already; returns its info.

    Two ``paijob run --local`` started together must not start two servers on one
    state dir: the check-and-start happens under a lock file.
    """
    directory = directory or state_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(directory / "up.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _up_locked(directory, port)


def _up_locked(directory: Path, port: int) -> dict[str, Any]:
    info = running(directory)
    if info:
        return {**info, "already": True}
    stale = server_info(directory)
    if stale and _alive(int(stale.get("pid", -1))):
        raise LocalClusterError(
            f"a local cluster process (pid {stale['pid']}) holds {directory} but does not answer; "
            f"stop it with `paijob local down` or `kill {stale['pid']}`"
        )
    (directory / "server.json").unlink(missing_ok=True)
    new_token(directory)
    log_file = open(directory / "server.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "paijob.local.server", "--state-dir", str(directory), "--port", str(port)],
        stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
        close_fds=True,
    )
    log_file.close()
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LocalClusterError(
                f"the local cluster exited at start (code {proc.returncode}); see {directory / 'server.log'}"
            )
        info = server_info(directory)
        if info and info.get("pid") == proc.pid and _healthy(str(info["url"])):
            return {**info, "already": False}
        time.sleep(0.1)
    proc.terminate()
    raise LocalClusterError(f"the local cluster did not answer within {START_TIMEOUT:g} s; see {directory / 'server.log'}")


def down(directory: Path | None = None, timeout: float = 60) -> bool:
    """Stop the server (it stops its running jobs first). False when none was running."""
    directory = directory or state_dir()
    info = server_info(directory)
    if not info or not _alive(int(info.get("pid", -1))):
        (directory / "server.json").unlink(missing_ok=True)
        return False
    pid = int(info["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    (directory / "server.json").unlink(missing_ok=True)
    return True


def ensure_up(directory: Path | None = None) -> tuple[dict[str, Any], bool]:
    """(server info, started now?)"""
    info = up(directory)
    return info, not info.get("already", False)


def local_cluster(directory: Path | None = None, start: bool = True) -> Any:
    """The ``Cluster`` profile of the local cluster, started first when it is down and ``start``."""
    from paijob.local.server import local_user
    from paijob.profiles import LOCAL, Cluster

    directory = directory or state_dir()
    info = running(directory)
    token = read_token(directory)
    if (not info or not token) and start:
        info, _ = ensure_up(directory)
        print(f"paijob: started the local cluster at {info['url']} (state {directory})", file=sys.stderr)
        token = read_token(directory)
    if not info or not token:
        raise LocalClusterError(
            f"the local cluster is not running (state dir {directory}); start it with `paijob local up` "
            "(`paijob run --local` starts it by itself)"
        )
    return Cluster(LOCAL, str(info["url"]), local_user(), token, token_source=str(directory / "token"))
