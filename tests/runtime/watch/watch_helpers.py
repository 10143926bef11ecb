"""A node's watch as its door builds it, without a launcher: the eyes on a folder of sampler reports and the
doctors they feed, ticked by the test (the one stand-in node of the watch's tests)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paijob.runtime.config import HangSettings
from paijob.runtime.failure import Failure
from paijob.runtime.watch.channel import Channel
from paijob.runtime.watch.hang.doctor import HangWatch
from paijob.runtime.watch.node.believed import Launched
from paijob.runtime.watch.node.eyes import Eyes
from paijob.runtime.watch.ranks import Look
from paijob.runtime.watch.slow.doctor import SlowDoctor


@dataclass
class WatchedNode:
    """One node's eyes and doctors: :meth:`tick` is one look of the node's tick, handed to each doctor."""

    eyes: Eyes
    hang: HangWatch | None
    slow: SlowDoctor | None
    said: list[str] = field(default_factory=list)
    declared: list[Failure] = field(default_factory=list)

    def tick(self, now: float | None = None) -> Look:
        look = self.eyes.look(now)
        for doctor in (self.hang, self.slow):
            if doctor is not None:
                doctor.look(look)
        return look


def watched_node(folder: str | os.PathLike[str] | Path, *, settings: HangSettings | None = None, node_rank: int = 0,
                 nnodes: int = 1, world_size: int = 1, host: str = "10.0.0.5", channel: Channel | None = None,
                 launched: Launched | None = None, hang: bool = True, slow: bool = False,
                 declare: Callable[[Failure], None] | None = None, **hang_options: Any) -> WatchedNode:
    """The eyes on ``folder`` (every well-formed report believed where ``launched`` is None) and the hang
    doctor (``hang``) and the slow-rank doctor (``slow``) of node ``node_rank``, saying into ``.said``."""
    settings = settings or HangSettings(timeout=10)
    said: list[str] = []
    declared: list[Failure] = []
    channel = channel or Channel()
    eyes = Eyes(str(folder), node_rank=node_rank, host=host, interval=settings.interval, launched=launched,
                say=said.append)
    hang_doctor = HangWatch(settings, folder=str(folder), node_rank=node_rank, nnodes=nnodes, world_size=world_size,
                            host=host, stacks_dir=hang_options.pop("stacks_dir", str(folder)), channel=channel,
                            declare=declare or declared.append, say=said.append, eyes=eyes.look,
                            **hang_options) if hang else None
    slow_doctor = SlowDoctor(node_rank=node_rank, nnodes=nnodes, world_size=world_size, folder=str(folder),
                             say=said.append, publish=channel.publish_slow, gather=channel.gather_slow,
                             get=channel.get_text, put=channel.set_text) if slow else None
    return WatchedNode(eyes, hang_doctor, slow_doctor, said, declared)


class DictStore:
    """A TCP store in a dict: the four calls the watch makes of one."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: str | bytes) -> None:
        self.data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key: str) -> bytes:
        return self.data[key]

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)

    def add(self, key: str, amount: int) -> int:
        value = int(self.data.get(key, b"0")) + amount
        self.data[key] = str(value).encode()
        return value
