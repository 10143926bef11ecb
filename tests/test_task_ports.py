"""paijob.common.ports: ports for tasks' servers come from outside the kernel's ephemeral range, free and held."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from paijob.common import ports
from paijob.common.ports import (
    PortRangeError,
    candidates,
    configured_range,
    draw,
    ephemeral_range,
    is_free,
    reserve,
)

ROOT = Path(__file__).resolve().parents[1]


def test_the_kernels_range_is_read_from_procfs(tmp_path: Path) -> None:
    fake = tmp_path / "ip_local_port_range"
    fake.write_text("32768\t60999\n")
    assert ephemeral_range(fake) == (32768, 60999)
    assert ephemeral_range(tmp_path / "absent") is None
    fake.write_text("garbage\n")
    assert ephemeral_range(fake) is None


def test_the_range_is_configurable_and_a_bad_one_is_one_line() -> None:
    assert configured_range({}) == ports.DEFAULT_RANGE
    assert configured_range({"PAIJOB_PORT_RANGE": " 15000-15099 "}) == (15000, 15099)
    for bad in ("15000", "a-b", "900-2000", "3000-2000", "60000-70000", "-1-5"):
        with pytest.raises(PortRangeError, match=r"PAIJOB_PORT_RANGE=.* is not a port range LOW-HIGH"):
            configured_range({"PAIJOB_PORT_RANGE": bad})


def test_the_kernels_ephemeral_range_is_never_drawn_from() -> None:
    env = {"PAIJOB_PORT_RANGE": "30000-40000"}
    pool = candidates(env, ephemeral=(32768, 60999))
    assert pool == list(range(30000, 32768))
    assert all(30000 <= p < 32768 for p in draw(20, environ=env, ephemeral=(32768, 60999)))
    with pytest.raises(PortRangeError, match=r"lies inside the kernel's ephemeral port range 1024-65535"):
        candidates(env, ephemeral=(1024, 65535))


def test_the_default_range_is_outside_this_machines_ephemeral_range() -> None:
    kernel = ephemeral_range()
    assert kernel is not None  # Linux: the file exists
    assert candidates() == [p for p in range(ports.DEFAULT_RANGE[0], ports.DEFAULT_RANGE[1] + 1)
                            if not kernel[0] <= p <= kernel[1]]
    for port in draw(50):
        assert not kernel[0] <= port <= kernel[1]


def test_drawn_ports_are_distinct_free_and_not_handed_out_twice_in_a_row() -> None:
    env = {"PAIJOB_PORT_RANGE": "29600-29609"}
    first = draw(5, environ=env)
    second = draw(5, environ=env)
    assert len(set(first + second)) == 10  # the recent ones are avoided while others are free
    assert all(is_free(port) for port in first + second)
    assert draw(1, environ=env, taken=first + second[:4]) == second[4:]  # recent, but the only one left


def test_a_reservation_holds_its_ports_until_released() -> None:
    env = {"PAIJOB_PORT_RANGE": "29620-29639"}
    with reserve(3, environ=env) as held:
        assert len(set(held.ports)) == 3
        for port in held.ports:
            assert not is_free(port)
            with socket.socket() as other, pytest.raises(OSError):
                other.bind(("127.0.0.1", port))
        held.release([held.ports[0]])
        assert is_free(held.ports[0]) and not is_free(held.ports[1])
    assert all(is_free(port) for port in held.ports)


def test_a_large_reservation_holds_only_so_many_ports_open(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "HOLD_AT_MOST", 2)
    with reserve(5, environ={"PAIJOB_PORT_RANGE": "29640-29659"}) as held:
        assert len(set(held.ports)) == 5
        assert [is_free(port) for port in held.ports] == [False, False, True, True, True]


def test_a_taken_port_is_skipped_and_a_full_range_is_refused() -> None:
    env = {"PAIJOB_PORT_RANGE": "29700-29701"}
    with socket.socket() as squatter:  # another program has one of the two
        squatter.bind(("127.0.0.1", 29700))
        squatter.listen()
        assert draw(1, environ=env) == [29701]
        with pytest.raises(PortRangeError, match=r"only 1 of the 2 ports asked for are free in 29700-29701"):
            draw(2, environ=env)
    with pytest.raises(PortRangeError, match=r"3 ports asked for, but PAIJOB_PORT_RANGE offers 2"):
        draw(3, environ=env)


def test_no_product_code_takes_a_port_the_kernel_picks_and_lets_it_go() -> None:
    """``bind((host, 0))`` then close is a port from the ephemeral range that anyone may take before
    the server binds it; paijob's own code draws with paijob.common.ports instead (a server that binds
    port 0 and keeps the socket, as ``paijob local up`` does by default, is another matter)."""
    pattern = re.compile(r"\.bind\(\([^()]*,\s*0\s*\)\)")
    offenders = [f"{path.relative_to(ROOT)}:{number}"
                 for folder in ("paijob", "benchmarks", "runtime", "examples")
                 for path in sorted((ROOT / folder).rglob("*.py"))
                 for number, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert offenders == []
