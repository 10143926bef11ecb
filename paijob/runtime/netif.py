"""Which network interface holds this task's address, and binding the collectives to it.

Why: gloo and NCCL pick their listening address from the host name. On
stock Ubuntu (``127.0.1.1 <hostname>``) and on hosts whose ``/etc/hosts``
maps the name to ``127.0.0.1`` that is a loopback address, so each node
advertises an address no peer can reach (``Gloo connectFullMesh failed ...
remote=[127.0.0.1]``). OpenPAI tells every task its own address
(``PAI_HOST_IP_<role>_<index>``, with the host network); naming the interface
that holds it in ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` makes both
libraries listen there.

The kernel is asked directly (``if_nameindex`` + ``SIOCGIFADDR`` for IPv4,
``/proc/net/if_inet6`` for IPv6): no name resolution, no dependency, no torch.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from collections.abc import Callable, Iterator, Mapping

from paijob.openpai.taskenv import (
    PAI_CONTAINER_HOST_IP,
    PAI_CURRENT_CONTAINER_IP,
    PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX,
    PAI_CURRENT_TASK_ROLE_NAME,
    PAI_TASK_INDEX,
    host_ip_name,
)

SOCKET_IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
_SIOCGIFADDR = 0x8915
_IFNAMSIZ = 16


def task_address(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(address, the variable it came from) of the current task, or None outside OpenPAI."""
    role = environ.get(PAI_CURRENT_TASK_ROLE_NAME, "").strip()
    index = (
        environ.get(PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX)
        or environ.get(PAI_TASK_INDEX)
        or ""
    ).strip()
    names = []
    if role and index:
        names.append(host_ip_name(role, index))
    names += [PAI_CURRENT_CONTAINER_IP, PAI_CONTAINER_HOST_IP]
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return value, name
    return None


def interface_addresses() -> Iterator[tuple[str, str]]:
    """(interface name, address) for every interface's IPv4 address and IPv6 addresses."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[: _IFNAMSIZ - 1])
            try:
                reply = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, request)
            except OSError:  # no IPv4 address on this interface
                continue
            yield name, socket.inet_ntoa(reply[20:24])
    try:
        with open("/proc/net/if_inet6") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return
    for line in lines:
        fields = line.split()
        if len(fields) >= 6:
            yield fields[5], str(ipaddress.IPv6Address(bytes.fromhex(fields[0])))


def interface_for(address: str) -> str | None:
    """The interface that holds ``address`` (IPv4 or IPv6), or None when none does."""
    try:
        wanted = ipaddress.ip_address(address)
    except ValueError:
        return None
    for name, held in interface_addresses():
        if ipaddress.ip_address(held) == wanted:
            return name
    return None


def socket_ifname_env(
    environ: Mapping[str, str],
    *,
    say: Callable[[str], None] | None = None,
    find: Callable[[str], str | None] = interface_for,
) -> dict[str, str]:
    """``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` for this task's interface.

    Variables the user set are kept; outside OpenPAI nothing is set. When the
    task's address is on no interface here (NAT, an address for another
    network namespace), one line says so and the libraries keep their default.
    """
    missing = [name for name in SOCKET_IFNAME_VARIABLES if not environ.get(name)]
    found = task_address(environ)
    if not missing or found is None:
        return {}
    address, source = found
    ifname = find(address)
    if ifname is None:
        if say is not None:
            say(
                f"warning: this task's address {address} ({source}) is on no network "
                f"interface here; collectives bind where the host name resolves (set "
                f"GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME if peers cannot connect)"
            )
        return {}
    if say is not None:
        say(f"collectives bind to interface {ifname} ({address}, from {source})")
    # NCCL reads a list of name *prefixes* ("eth1" would also take eth10); "=" means exactly.
    values = {"GLOO_SOCKET_IFNAME": ifname, "NCCL_SOCKET_IFNAME": f"={ifname}"}
    return {name: values[name] for name in missing}
