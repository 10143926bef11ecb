"""Test hosts in Linux network namespaces: a private network that exists only inside them.

Each :class:`Host` is a network namespace with one interface ``eth0`` holding
``10.213.0.<n>/24``, cabled (a veth pair) to a bridge that lives in a
namespace of its own (the switch), so no address of the test network ever
appears on the machine running the tests. Each host also gets:

* its own host name (``unshare --uts``), and
* its own ``/etc/hosts`` (``ip netns exec`` bind-mounts ``/etc/netns/<ns>/hosts``
  over it) mapping that name to ``127.0.1.1``, as stock Ubuntu does: the
  hostile default under which libraries that trust the host name listen on
  loopback.

Root only. Names carry the test process's pid and a counter, so parallel runs
do not collide. :meth:`Network.close` removes every namespace (which takes the
veth pairs with it), the ``/etc/netns`` files, and kills every process still
inside a host namespace. :func:`openpai_env` gives a task on such a host the ``PAI_*`` variables OpenPAI
would (its master port :data:`PORT` on every host), for the tests and ``benchmarks/bench_restart.py``.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from runtime_helpers import base_env

from paijob.openpai import taskenv
from paijob.openpai.model import parse_job

SUBNET = "10.213.0"
PORT = 29517  # inside the namespaces nothing else listens: a fixed port is safe there


def openpai_env(
    roles: list[tuple[str, int]], role: str, index: int, addresses: dict[tuple[str, int], str]
) -> dict[str, str]:
    """The PAI_* variables of task ``role``/``index``, from paijob.openpai.taskenv's producers."""
    job = parse_job({"taskRoles": {
        name: {"instances": count, "resourcePerInstance": {"gpu": 0, "cpu": 2, "memoryMB": 4096},
               "extraContainerOptions": {"shmMB": 512}}
        for name, count in roles
    }})
    ports = {
        name: {i: {"SynPort": [PORT], "ssh": [PORT + 1], "http": [PORT + 2]} for i in range(count)}
        for name, count in roles
    }
    env = base_env()
    env.update(taskenv.server_env("tester~multihost", job))
    env.update(taskenv.current_task_env(role, index))
    env.update(taskenv.runtime_env(roles, role, index, ports, addresses))
    return env


_counter = itertools.count()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def netns_unavailable() -> str | None:
    """Why network namespaces cannot be used here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "needs iproute2's ip and util-linux's unshare"
    probe = f"pjprobe{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except (subprocess.CalledProcessError, OSError) as error:
        detail = getattr(error, "stderr", "") or error
        return f"ip netns add is not permitted here: {str(detail).strip()}"
    _ip("netns", "del", probe)
    return None


class Host:
    """One test host: a namespace, an address, a host name, the processes started in it."""

    def __init__(self, network: Network, index: int) -> None:
        self.network = network
        self.index = index
        self.name = f"host{index}"
        self.netns = f"{network.prefix}-{self.name}"
        self.address = f"{SUBNET}.{index + 1}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def popen(
        self, cmd: Sequence[str], *, env: dict[str, str], stdout: IO[bytes], cwd: Path
    ) -> subprocess.Popen[bytes]:
        """Start ``cmd`` inside this host (its network, host name and /etc/hosts)."""
        wrapped = [
            "ip", "netns", "exec", self.netns,
            "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', self.name, *cmd,
        ]
        proc = subprocess.Popen(
            wrapped, env=env, cwd=cwd, stdout=stdout, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def pids(self) -> list[int]:
        """Every process alive in this host's network namespace (zombies excluded)."""
        out = subprocess.run(
            ["ip", "netns", "pids", self.netns], capture_output=True, text=True, timeout=30
        ).stdout
        return [int(p) for p in out.split() if _alive(int(p))]

    def cut(self) -> None:
        """Unplug this host's cable: a network partition, as seen by everyone."""
        _ip("-n", self.netns, "link", "set", "eth0", "down")

    def kill_all(self) -> None:
        """SIGKILL every process in this host at once: the host died."""
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Network:
    """A switch namespace with a bridge, and hosts cabled to it."""

    def __init__(self, hosts: int) -> None:
        self.prefix = f"pj{os.getpid()}n{next(_counter)}"
        self.switch = f"{self.prefix}-sw"
        self.hosts: list[Host] = []
        self._created: list[str] = []
        try:
            self._add_netns(self.switch)
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
            for index in range(hosts):
                self._add_host(index)
        except BaseException:
            self.close()
            raise

    def _add_netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self._created.append(name)

    def _add_host(self, index: int) -> None:
        host = Host(self, index)
        self._add_netns(host.netns)
        etc = Path("/etc/netns") / host.netns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(
            f"127.0.0.1 localhost\n127.0.1.1 {host.name}\n"
            "::1 localhost ip6-localhost ip6-loopback\n"
        )
        # veth names live in the root namespace only until they are moved: short, unique
        inner, outer = f"{self.prefix[-9:]}a{index}", f"{self.prefix[-9:]}b{index}"
        _ip("link", "add", inner, "type", "veth", "peer", "name", outer)
        _ip("link", "set", inner, "netns", host.netns)
        _ip("link", "set", outer, "netns", self.switch)
        _ip("-n", host.netns, "link", "set", inner, "name", "eth0")
        _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", host.netns, "link", "set", "eth0", "up")
        _ip("-n", host.netns, "link", "set", "lo", "up")
        _ip("-n", self.switch, "link", "set", outer, "master", "br0")
        _ip("-n", self.switch, "link", "set", outer, "up")
        self.hosts.append(host)

    def close(self) -> None:
        """Kill every process in the hosts, delete every namespace and file; never raises."""
        for host in self.hosts:
            for _ in range(50):
                try:
                    pids = host.pids()
                except (OSError, subprocess.SubprocessError):
                    break
                if not pids:
                    break
                host.kill_all()
                time.sleep(0.1)
            for proc in host.procs:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        for name in reversed(self._created):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
            shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)
        self._created.clear()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
