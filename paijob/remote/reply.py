"""One complete HTTP answer, as ``transport`` reads it and ``errors`` judges it.

A module of its own, below both, so that neither imports the other to name it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass
class Reply:
    """A complete HTTP answer (status, headers, body) read within the request's deadline."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes
    url: str
    reason: str = ""

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")
