"""Reading what someone else wrote: a job's files in the watch's folder, a server's answer.

Why one place: the hang watch reads files a job can write (its sampler reports, the flight
recorder's answers), and the client parses whatever a server sends. Either can be hostile: a FIFO
that blocks ``open`` forever, a link to ``/dev/zero``, a 900 kB ``[[[[...`` that makes ``json.loads``
raise ``RecursionError`` (not a ``ValueError``: it killed the watch thread, issue 46). Every such read
goes through here, so each bound is written once:

* :func:`read_regular`: a regular file only, opened without following a link and without blocking
  (``O_NONBLOCK``: a FIFO never stalls the reader), at most ``limit`` bytes;
* :func:`loads`: JSON or :class:`ValueError`, never ``RecursionError``, at most :data:`MAX_DEPTH`
  levels deep, so code that walks the value recursively (a scrubber, a printer) cannot be made to
  overflow either, and at most :data:`MAX_ITEMS` values, so what it becomes in memory is bounded too.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

MAX_DEPTH = 64  # levels of nesting a parsed value may have; OpenPAI's and the watch's own are under 10
# values a parsed text may hold, counted before parsing (its commas and openings: an over-count). A byte cap
# alone does not bound memory: 240 MB of ``[0,0,...`` is 120 million values, 2.26 GB once parsed (issue 46).
# A list of 20,000 jobs is about 600,000.
MAX_ITEMS = 2_000_000


def read_regular(path: str, limit: int) -> bytes | None:
    """The bytes of the regular file at ``path`` (at most ``limit``); None: missing, a link, not a
    regular file (a FIFO, a device, a folder), unreadable, or longer than ``limit``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            data = handle.read(limit + 1)
    except OSError:
        return None
    return data if len(data) <= limit else None


def loads(data: str | bytes | bytearray) -> Any:
    """``json.loads`` for text someone else wrote: every failure (bad JSON, bad UTF-8, nesting deeper
    than :data:`MAX_DEPTH` or than the interpreter's recursion limit) is a :class:`ValueError`."""
    if _values(data) > MAX_ITEMS:
        raise ValueError(f"JSON of more than {MAX_ITEMS:,} values")
    try:
        value = json.loads(data)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    if depth(value) > MAX_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
    return value


def _values(data: str | bytes | bytearray) -> int:
    """An over-count of the values in JSON text: its commas and openings (also those inside strings)."""
    if isinstance(data, str):
        return data.count(",") + data.count("[") + data.count("{")
    return data.count(b",") + data.count(b"[") + data.count(b"{")


def depth(value: Any) -> int:
    """How many levels of lists and objects ``value`` has (0 for a scalar), counted without recursion."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        level += 1
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            return level  # deep enough to refuse: the rest need not be walked
        pending.extend((child, level) for child in children)
    return deepest
