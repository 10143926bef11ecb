"""Finding, and ending, every process a local task started: nothing escapes, nothing else is hit.

A task may leave processes behind that ``setsid``, double-fork, or clear their
environment. Three nets catch them, the first being the one that matters:

* **a cgroup per task** (Linux, cgroup v2 mounted and writable: root, or a
  delegated subtree): the task starts inside ``<our cgroup>/paijob-<cluster
  id>/<task uid>`` (a two-line ``sh`` stub moves itself there, then execs the
  task), and every descendant stays in it whatever it does. Ending the task is
  SIGTERM to each member, the grace period, then ``cgroup.kill``.
* the **process tree** below the task's main process, taken before any signal
  (``setsid`` does not change a parent). Without a cgroup, the main process is
  made a child subreaper (``PR_SET_CHILD_SUBREAPER``, set by a small Python
  stub that then execs the task), so a double-forked orphan is re-parented to
  it and stays in its tree while it runs;
* the **environment marker** ``PAIJOB_LOCAL_TASK=<task uid>`` (a uuid4, so it
  names one task of one cluster and nothing else).

Each running task also has a **record** in the state dir (``running/<task uid>``:
its main process's pid, start time and boot id), removed when the task ends. A
server killed with ``kill -9`` leaves its tasks running; the next server finds
their main processes from these records (the same process, not a reused pid)
and ends their trees with them, which catches, without a cgroup, what cleared
its environment and ``setsid``: the subreaper keeps it in the tree.

``PAIJOB_LOCAL_CGROUP=0`` turns the cgroup off (the fallback is then tested
alone). Each state dir has a random cluster id (file ``cluster-id``), so two
local clusters never mistake each other's tasks or cgroups.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from paijob.common import contract, procfs
from paijob.local import layout, settings

log = logging.getLogger(__name__)

POLL = 0.05
TASK_MARKER = contract.LOCAL_TASK
# Moves the shell into the task's cgroup (echo is a builtin: the writer is the shell), then becomes the task.
_ENTER_CGROUP = 'echo 0 > "$1" || exit 125; shift; exec "$@"'
# Makes the task's main process a child subreaper (survives exec), then becomes the task. 36: PR_SET_CHILD_SUBREAPER
# It starts in the task's work dir (the user's files): "" leaves sys.path before anything is imported from it.
_SUBREAPER = """\
import sys
del sys.path[0]
import ctypes, os
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
try:
    os.execvp(sys.argv[1], sys.argv[1:])
except OSError as error:
    sys.stderr.write(f"[paijob local] cannot start the task: {error}\\n")
    sys.exit(127)
"""


def cluster_id(state_dir: Path) -> str:
    """This state dir's random id (created once, mode 0600)."""
    return _made_once(state_dir / layout.CLUSTER_ID, 8)


def record_secret(state_dir: Path) -> str:
    """The key each task's record key is made from (created once, mode 0600): a record a task's runtime signed
    is checked after the server restarted too."""
    return _made_once(state_dir / layout.RECORD_SECRET, 32)


def _made_once(path: Path, nbytes: int) -> str:
    """The random hex value in ``path``, made (``nbytes`` random bytes, mode 0600) the first time it is asked."""
    try:
        value = path.read_text().strip()
        if value:
            return value
    except FileNotFoundError:
        pass
    value = secrets.token_hex(nbytes)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first
        return path.read_text().strip()
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    return value


# --------------------------------------------------------------------------- /proc


def _alive(pid: int) -> bool:
    """Running, and not a zombie."""
    stat = procfs.read_stat(pid)
    return stat is not None and not stat.zombie


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process visible in /proc."""
    return {stat.pid: stat.ppid for stat in procfs.processes()}


def descendants(roots: Iterable[int]) -> set[int]:
    """Every live process below ``roots`` (not the roots themselves)."""
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def marked(uids: Iterable[str]) -> set[int]:
    """Pids whose environment holds ``PAIJOB_LOCAL_TASK=<uid>`` for one of ``uids``."""
    needles = {f"{TASK_MARKER}={uid}".encode() for uid in uids}
    if not needles:
        return set()
    found = set()
    for pid in procfs.pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        if needles.intersection(environ.split(b"\0")):
            found.add(pid)
    found.discard(os.getpid())
    return found


def job_marker(cluster: str, job_id: str) -> str:
    """The value of ``PAIJOB_LOCAL_JOB`` for job ``job_id`` of the cluster with id ``cluster``
    (:func:`cluster_id`): unique to that cluster (two state dirs may share job ids)."""
    return f"{cluster}:{job_id}"


def runtime_launchers(job_marker: str) -> list[int]:
    """Pids of the ``paijob-runtime train`` launchers of one job (``PAIJOB_LOCAL_JOB=<marker>``),
    not its workers nor the shells that started them: the processes ``paijob stacks`` signals."""
    needle = f"{contract.LOCAL_JOB}={job_marker}".encode()
    found = []
    for pid in procfs.pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = handle.read()
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if needle not in environ.split(b"\0") or b"train" not in argv:
            continue
        if any(arg.endswith(b"paijob-runtime") or arg == b"paijob.runtime.cli" for arg in argv[:3]):
            found.append(pid)
    return found


# --------------------------------------------------------------------------- cgroups


def _cgroup2_mount() -> Path | None:
    try:
        with open("/proc/self/mounts") as handle:
            for line in handle:
                fields = line.split()
                if len(fields) > 2 and fields[2] == "cgroup2":
                    return Path(fields[1].replace("\\040", " "))
    except OSError:
        pass
    return None


def _own_cgroup() -> str | None:
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


class Cgroups:
    """The cgroup v2 directory of one local cluster: one child cgroup per task."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._lock = threading.Lock()  # the base exists only while a task cgroup does

    @classmethod
    def find(cls, ident: str) -> Cgroups | None:
        """This cluster's cgroup directory, when tasks can really be moved into one here."""
        if not settings.cgroup_wanted():
            return None
        mount, own = _cgroup2_mount(), _own_cgroup()
        if mount is None or own is None:
            return None
        base = mount / own.lstrip("/") / f"paijob-{ident}"
        probe = base / f"probe-{os.getpid()}"
        try:
            probe.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(["/bin/sh", "-c", _ENTER_CGROUP, "paijob-probe", str(probe / "cgroup.procs"),
                                   "true"], stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
            probe.rmdir()
            cls(base).close()  # made again by the first task: an idle cluster leaves nothing behind
        except (OSError, subprocess.SubprocessError) as error:
            log.info("no cgroup per task (%s); tracking tasks by process tree and marker", error)
            cls(base).close()
            return None
        if done.returncode != 0:
            log.info("no cgroup per task (cannot move a process into %s); tracking tasks by process tree "
                     "and marker", base)
            cls(base).close()
            return None
        return cls(base)

    def close(self) -> None:
        """Remove this cluster's cgroup directory when no task cgroup is left in it."""
        with self._lock:
            try:
                self.base.rmdir()
            except OSError:
                pass

    def path(self, uid: str) -> Path:
        return self.base / uid

    def wrap(self, uid: str, argv: list[str]) -> list[str]:
        """``argv`` started inside the task's (new) cgroup."""
        group = self.path(uid)
        with self._lock:
            group.mkdir(parents=True, exist_ok=True)
        return ["/bin/sh", "-c", _ENTER_CGROUP, "paijob-task", str(group / "cgroup.procs"), *argv]

    def members(self, uid: str) -> set[int]:
        try:
            text = (self.path(uid) / "cgroup.procs").read_text()
        except OSError:
            return set()
        return {int(pid) for pid in text.split() if _alive(int(pid))}

    def kill(self, uid: str) -> None:
        try:
            (self.path(uid) / "cgroup.kill").write_text("1")
        except OSError:  # kernels before 5.14: one by one
            for pid in self.members(uid):
                _signal(pid, signal.SIGKILL)

    def remove(self, uid: str) -> None:
        with self._lock:
            try:
                self.path(uid).rmdir()
            except OSError:
                pass
        self.close()

    def leftovers(self) -> list[str]:
        """Task cgroups still present (a server that died left them)."""
        try:
            return [p.name for p in self.base.iterdir() if p.is_dir() and not p.name.startswith("probe-")]
        except OSError:
            return []


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(waiters: list[subprocess.Popen[bytes]]) -> None:
    """Wait (5 s at most each) for our own child processes after SIGKILL, so none is left a zombie."""
    for proc in waiters:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _signal_groups(pgids: Iterable[int], sig: int) -> None:
    for pgid in pgids:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


# --------------------------------------------------------------------------- records of running tasks


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _start_time(pid: int) -> int | None:
    """proc(5) field 22 of ``pid``: when it started, in clock ticks since boot (None: no such process)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


class Records:
    """``<state dir>/running/<uid>``: the main process of each running task, found again after a crash."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = layout.running(state_dir)

    def add(self, uid: str, pid: int) -> None:
        self.dir.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(self.dir / uid, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(f"{pid} {_start_time(pid)} {_boot_id()}\n")

    def remove(self, uids: Iterable[str]) -> None:
        for uid in uids:
            (self.dir / uid).unlink(missing_ok=True)

    def uids(self) -> list[str]:
        try:
            return sorted(path.name for path in self.dir.iterdir())
        except OSError:
            return []

    def live_mains(self, uids: Iterable[str]) -> list[int]:
        """Main processes of ``uids`` still running: same pid, start time and boot as recorded."""
        boot, found = _boot_id(), []
        for uid in uids:
            try:
                pid_text, started, recorded_boot = (self.dir / uid).read_text().split()
                pid = int(pid_text)
            except (OSError, ValueError):
                continue
            if recorded_boot == boot and started != "None" and str(_start_time(pid)) == started and _alive(pid):
                found.append(pid)
        return found


# --------------------------------------------------------------------------- the tracker


class Tracker:
    """Starts tasks where they can be found again, and ends all that they started."""

    def __init__(self, state_dir: Path) -> None:
        self.cluster_id = cluster_id(state_dir)
        self.cgroups = Cgroups.find(self.cluster_id)
        self.records = Records(state_dir)

    def started(self, uid: str, pid: int) -> None:
        """Remember task ``uid``'s main process until the task is ended (see ``end_leftovers``)."""
        self.records.add(uid, pid)

    def wrap(self, uid: str, argv: list[str]) -> list[str]:
        if self.cgroups:
            return self.cgroups.wrap(uid, argv)
        if sys.platform.startswith("linux"):
            return [sys.executable, "-S", "-E", "-c", _SUBREAPER, *argv]
        return argv

    def job_marker(self, job_id: str) -> str:
        """The value of ``PAIJOB_LOCAL_JOB`` for this cluster's job ``job_id`` (:func:`job_marker`)."""
        return job_marker(self.cluster_id, job_id)

    def _members(self, uids: list[str], tree: set[int]) -> set[int]:
        found = {pid for pid in tree if _alive(pid)} | {pid for pid in marked(uids) if _alive(pid)}
        if self.cgroups:
            for uid in uids:
                found |= self.cgroups.members(uid)
        found.discard(os.getpid())
        return found

    def end(self, uids: list[str], mains: list[int], grace: float,
            waiters: list[subprocess.Popen[bytes]] | None = None) -> None:
        """SIGTERM every process of the tasks ``uids`` (main processes ``mains``), SIGKILL what is
        left after ``grace`` seconds; returns once they are gone (or after 5 s more)."""
        tree = descendants(mains) | set(mains)  # before any signal: orphans lose their parent
        targets = self._members(uids, tree)
        _signal_groups(mains, signal.SIGTERM)  # each main process leads its own session and group
        for pid in targets:
            _signal(pid, signal.SIGTERM)
        self._wait_gone(uids, tree, grace, waiters or [])
        _signal_groups(mains, signal.SIGKILL)
        for pid in self._members(uids, tree):
            _signal(pid, signal.SIGKILL)
        if self.cgroups:
            for uid in uids:
                self.cgroups.kill(uid)
        _reap(waiters or [])
        deadline = time.monotonic() + 5  # until the kill has landed
        while time.monotonic() < deadline and self._members(uids, tree):
            time.sleep(POLL)
        if self.cgroups:
            for uid in uids:
                self.cgroups.remove(uid)
        self.records.remove(uids)

    def _wait_gone(self, uids: list[str], tree: set[int], grace: float,
                   waiters: list[subprocess.Popen[bytes]]) -> None:
        """Up to ``grace`` seconds for the tasks' processes to end after SIGTERM (our children reaped meanwhile)."""
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            for proc in waiters:
                proc.poll()
            if not self._members(uids, tree):
                return
            time.sleep(POLL)

    def close(self) -> None:
        """Remove this cluster's (empty) cgroup directory."""
        if self.cgroups:
            self.cgroups.close()

    def end_leftovers(self, uids: list[str], grace: float = 1.0) -> None:
        """After a server died: end what tasks ``uids`` (from the store) and any task cgroup of
        this cluster left running. Only processes proven to be ours are signalled."""
        known = sorted(set(uids) | set(self.records.uids()) | set(self.cgroups.leftovers() if self.cgroups else []))
        self.end(known, self.records.live_mains(known), grace)
