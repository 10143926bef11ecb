"""Binding collectives to this task's interface (no torch)."""

from __future__ import annotations

import socket

from paijob.runtime.netif import interface_for, socket_ifname_env, task_address


def _task(role: str = "ps_server", index: int = 1, **extra: str) -> dict[str, str]:
    env = {
        "PAI_CURRENT_TASK_ROLE_NAME": role,
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": str(index),
        "PAI_HOST_IP_psserver_0": "10.0.0.5",
        "PAI_HOST_IP_psserver_1": "10.0.0.6",
        "PAI_CONTAINER_HOST_IP": "10.9.9.9",
    }
    env.update(extra)
    return env


def test_task_address_is_the_current_tasks_host_ip_under_the_runtime_role_name():
    assert task_address(_task()) == ("10.0.0.6", "PAI_HOST_IP_psserver_1")


def test_task_address_falls_back_to_the_container_ip_variables():
    env = _task(index=7)
    assert task_address(env) == ("10.9.9.9", "PAI_CONTAINER_HOST_IP")
    env["PAI_CURRENT_CONTAINER_IP"] = "10.8.8.8"
    assert task_address(env) == ("10.8.8.8", "PAI_CURRENT_CONTAINER_IP")
    assert task_address({}) is None  # standalone: nothing to bind to


def test_loopback_addresses_are_found_on_the_loopback_interface():
    loopback = dict(socket.if_nameindex())[1]  # index 1 is lo on Linux
    assert interface_for("127.0.0.1") == loopback
    assert interface_for("192.0.2.123") is None  # TEST-NET-1: on no interface
    assert interface_for("not an address") is None


def test_both_socket_ifname_variables_name_the_interface_holding_the_task_address():
    env = socket_ifname_env(_task(), find={"10.0.0.6": "eth3"}.get)
    assert env == {"GLOO_SOCKET_IFNAME": "eth3", "NCCL_SOCKET_IFNAME": "=eth3"}  # NCCL: exact


def test_a_socket_ifname_the_user_set_is_kept():
    env = socket_ifname_env(_task(NCCL_SOCKET_IFNAME="ib0"), find={"10.0.0.6": "eth3"}.get)
    assert env == {"GLOO_SOCKET_IFNAME": "eth3"}
    both = _task(NCCL_SOCKET_IFNAME="ib0", GLOO_SOCKET_IFNAME="ib0")
    assert socket_ifname_env(both, find={"10.0.0.6": "eth3"}.get) == {}


def test_an_address_on_no_interface_is_one_line_and_changes_nothing():
    said: list[str] = []
    assert socket_ifname_env(_task(), say=said.append, find=lambda _: None) == {}
    assert len(said) == 1
    assert "10.0.0.6 (PAI_HOST_IP_psserver_1) is on no network interface" in said[0]
    assert "GLOO_SOCKET_IFNAME" in said[0]


def test_outside_openpai_nothing_is_set():
    assert socket_ifname_env({}, find=lambda _: "eth0") == {}
