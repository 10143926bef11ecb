"""The local cluster as a background service: state dir, token, up / down / status.

The state dir and what lies where in it: :mod:`paijob.local.layout`. This module
makes the ``token`` (0600, fresh at every ``up``), writes ``server.json`` (pid,
port, url of the running server) and starts the server with ``server.log``.

It is private whatever the umask: ``up`` takes group and other permissions off
everything already in it (directories 0700, files 0600 or 0700) and starts the
server, and so its tasks, with umask 077. A pid in ``server.json`` is trusted
only while ``/proc/<pid>/cmdline`` shows the server of this very state dir, so
a stale file never gets an unrelated process signalled.

It must be the user's own: a state dir that belongs to another user (a shared
``PAIJOB_LOCAL_STATE_DIR`` someone else made) is refused before anything in it
is read or written, since its owner could read the token and plant a
``server.json`` that sends every job to a server of theirs; and the files
``up`` opens there (``server.log``, ``up.lock``) are opened without following
a link, so a link planted in their place never has the server's output
written through it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from paijob.common import contract, procfs
from paijob.common.cwd_safe import module_args
from paijob.common.safefile import atomic_write
from paijob.errors import PaijobError
from paijob.local import layout, settings
from paijob.local.layout import state_dir
from paijob.remote.profiles import LOCAL, Cluster

START_TIMEOUT = 20.0


class LocalClusterError(PaijobError):
    """The local cluster could not be started, reached or stopped."""


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write(path, text.encode("utf-8"), mode=0o600)


def read_token(directory: Path | None = None) -> str | None:
    path = (directory or state_dir()) / layout.TOKEN
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


def new_token(directory: Path | None = None) -> str:
    token = secrets.token_urlsafe(32)
    _write_private((directory or state_dir()) / layout.TOKEN, token + "\n")
    return token


def write_server_info(directory: Path, info: dict[str, Any]) -> None:
    _write_private(directory / layout.SERVER_INFO, json.dumps(info))


def clear_server_info(directory: Path, pid: int) -> None:
    info = server_info(directory)
    if info and info.get("pid") == pid:
        (directory / layout.SERVER_INFO).unlink(missing_ok=True)


def server_info(directory: Path | None = None) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(((directory or state_dir()) / layout.SERVER_INFO).read_text())
        return data
    except (FileNotFoundError, ValueError):
        return None


def check_owned(directory: Path) -> None:
    """Refuse a state dir that is not a folder of this user's (one that does not exist yet is fine)."""
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        return
    except OSError as error:
        raise LocalClusterError(f"cannot use the local cluster's state dir {directory}: {error.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise LocalClusterError(f"the local cluster's state dir {directory} is not a folder; "
                                f"set {contract.LOCAL_STATE_DIR} to a folder of your own")
    if info.st_uid != os.getuid():
        raise LocalClusterError(
            f"the local cluster's state dir {directory} belongs to another user (uid {info.st_uid}), not to you "
            f"(uid {os.getuid()}): its owner could read the cluster's token and send your jobs elsewhere; set "
            f"{contract.LOCAL_STATE_DIR} to a folder of your own")


def secure(directory: Path) -> None:
    """Take group and other permissions off the state dir and everything in it (links untouched)."""
    check_owned(directory)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    check_owned(directory)  # made just now, or by someone else meanwhile
    for root, dirs, files in os.walk(directory):
        for name in [*dirs, *files]:
            _private(Path(root) / name)
    _private(directory)


def _private(path: Path) -> None:
    try:
        mode = path.lstat().st_mode
        if not stat.S_ISLNK(mode) and mode & 0o077:
            os.chmod(path, stat.S_IMODE(mode) & 0o700)
    except OSError:
        pass


def _open_private(path: Path, flags: int) -> int:
    """``path`` opened (created 0600) as the user's own regular file, never through a link."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise LocalClusterError(f"{path} is a link, which the local cluster never writes through; "
                                    "remove it (paijob makes its own)") from None
        raise LocalClusterError(f"cannot open {path}: {error.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_nlink > 1:
        os.close(fd)
        raise LocalClusterError(f"{path} is not a file of the local cluster's own (another user's, a hard "
                                "link or not a regular file); remove it (paijob makes its own)")
    os.fchmod(fd, 0o600)
    return fd


def _is_server(pid: int, directory: Path) -> bool:
    """Is ``pid`` the local-cluster server of ``directory``? (Not just any process with that pid.)"""
    if pid <= 0 or not _alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            args = [arg.decode(errors="replace") for arg in handle.read().split(b"\0")]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (not Linux): the pid is all there is to go by
        return True
    if "paijob.local.server" not in args or "--state-dir" not in args:
        return False
    given = args[args.index("--state-dir") + 1] if args.index("--state-dir") + 1 < len(args) else ""
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = "/"
    try:
        return Path(cwd, given).resolve() == directory.resolve()
    except OSError:
        return False


def _pid(info: dict[str, Any] | None) -> int:
    try:
        return int((info or {}).get("pid", -1))
    except (TypeError, ValueError):
        return -1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    process = procfs.read_stat(pid)  # a zombie is not a server; without /proc, kill's answer stands
    return process is None or not process.zombie


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
    check_owned(directory)  # its server.json names the server the token goes to
    info = server_info(directory)
    if not info:
        return None
    if not _is_server(_pid(info), directory):
        (directory / layout.SERVER_INFO).unlink(missing_ok=True)
        return None
    if not _healthy(str(info.get("url"))):
        return None
    return info


def up(directory: Path | None = None, port: int = 0) -> dict[str, Any]:
    """Start the server in the background unless it runs already; returns its info.

    Two ``paijob run --local`` started together must not start two servers on one
    state dir: the check-and-start happens under a lock file.
    """
    directory = directory or state_dir()
    settings.check()  # the server inherits this environment: a bad setting is named here, before it starts
    secure(directory)
    with os.fdopen(_open_private(directory / layout.UP_LOCK, os.O_WRONLY), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _up_locked(directory, port)


def _up_locked(directory: Path, port: int) -> dict[str, Any]:
    info = running(directory)
    if info:
        return {**info, "already": True}
    stale = server_info(directory)
    if stale and _is_server(_pid(stale), directory):
        raise LocalClusterError(
            f"a local cluster process (pid {stale['pid']}) holds {directory} but does not answer; "
            f"stop it with `paijob local down` or `kill {stale['pid']}`"
        )
    (directory / layout.SERVER_INFO).unlink(missing_ok=True)
    new_token(directory)
    log_file = os.fdopen(_open_private(directory / layout.SERVER_LOG, os.O_WRONLY | os.O_APPEND), "ab")
    proc = subprocess.Popen(
        [sys.executable, *module_args("paijob.local.server"), "--state-dir", str(directory.resolve()), "--port", str(port)],
        stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
        close_fds=True, umask=0o077,  # SQLite's -wal/-shm, logs, work dirs: private from the start
    )
    log_file.close()
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LocalClusterError(
                f"the local cluster exited at start (code {proc.returncode}): {_last_line(directory)}; "
                f"see {directory / layout.SERVER_LOG}"
            )
        info = server_info(directory)
        if info and info.get("pid") == proc.pid and _healthy(str(info["url"])):
            return {**info, "already": False}
        time.sleep(0.1)
    proc.terminate()
    raise LocalClusterError(f"the local cluster did not answer within {START_TIMEOUT:g} s; see {directory / layout.SERVER_LOG}")


def _last_line(directory: Path) -> str:
    """The server's last words (its one-line reason when it refuses to start)."""
    try:
        lines = (directory / layout.SERVER_LOG).read_bytes()[-4096:].decode(errors="replace").strip().splitlines()
    except OSError:
        return "no server.log"
    return lines[-1][:300] if lines else "server.log is empty"


def down(directory: Path | None = None, timeout: float = 60) -> bool:
    """Stop the server (it stops its running jobs first). False when none was running."""
    directory = directory or state_dir()
    info = server_info(directory)
    pid = _pid(info)
    if not info or not _is_server(pid, directory):  # a stale file: its pid may be anyone's by now
        (directory / layout.SERVER_INFO).unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _is_server(pid, directory):
        time.sleep(0.1)
    if _is_server(pid, directory):
        os.kill(pid, signal.SIGKILL)
    (directory / layout.SERVER_INFO).unlink(missing_ok=True)
    return True


def ensure_up(directory: Path | None = None) -> tuple[dict[str, Any], bool]:
    """(server info, started now?)"""
    info = up(directory)
    return info, not info.get("already", False)


def local_user() -> str:
    """The user the local cluster runs jobs as (the login name, as OpenPAI's user); a name that
    cannot be part of a path (``USER=../../evil``) is a ``LocalSettingError``."""
    return settings.user_name()


def local_cluster(directory: Path | None = None, start: bool = True,
                  on_note: Callable[[str], None] | None = None) -> Cluster:
    """The ``Cluster`` profile of the local cluster, started first when it is down and ``start``.

    ``on_note`` hears the line saying that it was started (the CLI prints it).
    """
    directory = directory or state_dir()
    info = running(directory)
    token = read_token(directory)
    if (not info or not token) and start:
        info, _ = ensure_up(directory)
        if on_note is not None:
            on_note(f"paijob: started the local cluster at {info['url']} (state {directory})")
        token = read_token(directory)
    if not info or not token:
        raise LocalClusterError(
            f"the local cluster is not running (state dir {directory}); start it with `paijob local up` "
            "(`paijob run --local` starts it by itself)"
        )
    return Cluster(LOCAL, str(info["url"]), local_user(), token, token_source=str(directory / layout.TOKEN))


def local_cluster_address(directory: Path | None = None) -> Cluster:
    """The local cluster's profile without starting it or reading its token (dry runs): its URL
    when it runs, a placeholder when it does not."""
    directory = directory or state_dir()
    check_owned(directory)
    info = server_info(directory) or {}
    return Cluster(LOCAL, str(info.get("url", "http://127.0.0.1:<port>")), None, None,
                   token_source=str(directory / layout.TOKEN))


def portal_link(directory: Path | None = None, on_note: Callable[[str], None] | None = None) -> str:
    """A link to the local cluster's web portal that logs one browser in (starting the cluster if
    it is down). It holds a one-time code the server gives for the cluster's token, never the token."""
    from paijob.local.portal.sessions import CODE_PATH, login_url

    cluster = local_cluster(directory, on_note=on_note)
    session = requests.Session()
    session.trust_env = False  # loopback: no proxy
    try:
        response = session.post(f"{cluster.url}{CODE_PATH}", headers={"Authorization": f"Bearer {cluster.token}"},
                                timeout=10)
        code = response.json().get("code") if response.ok else None
    except (requests.RequestException, ValueError) as problem:
        raise LocalClusterError(f"the local cluster at {cluster.url} did not give a portal code: {problem}") from None
    finally:
        session.close()
    if not isinstance(code, str):
        raise LocalClusterError(f"the local cluster at {cluster.url} refused a portal code (HTTP {response.status_code}); "
                                f"restart it with `paijob local down && paijob local up`")
    return login_url(cluster.url, code)


def login_page(url: str, directory: Path | None = None) -> Path:
    """A page only this user can read (0600, in the user's own state dir) that sends the browser on to
    ``url``. The browser is handed this page's ``file://`` address instead of ``url``: a browser's command
    line is readable by every local user (``/proc/PID/cmdline``), and ``url`` holds the one-time login code,
    which another user could redeem first (Jupyter's answer to the same problem)."""
    import html

    directory = directory or state_dir()
    check_owned(directory)
    target = html.escape(url, quote=True)
    text = (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8">\n'
            f'<meta http-equiv="refresh" content="0;url={target}">\n<title>paijob portal</title></head>\n'
            f'<body><p>Opening the paijob portal: <a href="{target}">continue</a> '
            f"(the link works once, within {int(_code_ttl())} seconds).</p></body></html>\n")
    path = directory / layout.PORTAL_PAGE
    try:
        _write_private(path, text)
    except OSError as error:
        raise LocalClusterError(f"cannot write the portal's login page {path}: {error.strerror}; open the "
                                f"link printed above yourself, or use `paijob local open --no-browser`") from None
    return path


def _code_ttl() -> float:
    from paijob.local.portal.sessions import CODE_TTL

    return CODE_TTL


def open_in_browser(url: str, directory: Path | None = None) -> bool:
    """Open ``url`` in a graphical browser when this session has one, through :func:`login_page` (never
    with ``url`` itself on the browser's command line); False when it has none (a text browser would take
    over the terminal and cannot run the portal's scripts)."""
    import webbrowser

    graphical = sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or
                                                              os.environ.get("WAYLAND_DISPLAY"))
    if not graphical:
        return False
    page = login_page(url, directory)
    try:
        return webbrowser.open(page.as_uri(), new=2)
    except webbrowser.Error:
        return False
