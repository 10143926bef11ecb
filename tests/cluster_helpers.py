"""Helpers shared by the cluster tests."""

from __future__ import annotations

import socket
import textwrap
import time
from typing import Any

import yaml

TOKEN = "sentinel-token-5d1e7c0a9b"  # must never show up in any output


def job_yaml(name: str, commands: list[str] | str, *, instances: int = 1, role: str = "worker",
             ports: dict[str, int] | None = None, **extra: Any) -> str:
    """A small valid protocol-v2 job running plain bash commands."""
    if isinstance(commands, str):
        commands = [line for line in textwrap.dedent(commands).strip().splitlines()]
    role_spec: dict[str, Any] = {
        "instances": instances,
        "dockerImage": "img",
        "resourcePerInstance": {"cpu": 1, "memoryMB": 256, "gpu": 0, "ports": ports or {"SynPort": 1}},
        "commands": commands,
    }
    role_spec.update(extra.pop("role_extra", {}))
    job: dict[str, Any] = {
        "protocolVersion": 2,
        "name": name,
        "type": "job",
        "prerequisites": [{"type": "dockerimage", "name": "img", "uri": "python:3.11"}],
        "taskRoles": {role: role_spec},
    }
    job.update(extra)
    return yaml.safe_dump(job, sort_keys=False)


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``sock`` (None: still open after ``seconds``)."""
    start = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - start
