"""When each line of a task log was written, where the cluster recorded it (the local cluster does).

OpenPAI's logs are plain text: ``paijob logs --timestamps`` can only stamp a
line with the time it read it, so the lines of a finished job all carry
nearly the same time. The local cluster's runner writes ``NAME.times`` beside
each log (``OFFSET UNIXTIME`` per chunk, written before the chunk), served at
the log's URL plus ``.times``; a line's time is that of the chunk holding its
first byte.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from paijob.errors import PaijobError

if TYPE_CHECKING:
    from paijob.remote.client import PaiClient


class LogTimes:
    """The write times of one log, read as the log grows."""

    def __init__(self, client: PaiClient, times_uri: str) -> None:
        self.client = client
        self.uri: str | None = times_uri
        self.offset = 0
        self.partial = b""
        self.starts: list[int] = []
        self.times: list[float] = []
        self.fresh_to = -1  # log bytes read when the times were last read: records of all of them were there

    @classmethod
    def beside(cls, client: PaiClient, log_uri: str) -> LogTimes | None:
        """The times of the log at ``log_uri`` when the cluster serves them (its own host only)."""
        parts = urlsplit(log_uri)
        if not client.owns(log_uri):
            return None  # an OpenPAI log manager: it records no times, and our token stays home
        return cls(client, urlunsplit(parts._replace(path=parts.path + ".times")))

    def at(self, start: int, read_to: int) -> float | None:
        """The time the byte at ``start`` was written (None: unknown); ``read_to``: log bytes read so far."""
        if self.uri is None:
            return None
        if (not self.starts or self.starts[-1] < start) and self.fresh_to < read_to:
            self._refresh()
            self.fresh_to = read_to
        index = bisect_right(self.starts, start) - 1
        return self.times[index] if index >= 0 else None

    def _refresh(self) -> None:
        assert self.uri is not None
        chunks: list[bytes] = []
        try:
            self.offset = self.client.stream_log(self.uri, self.offset, chunks.append)
        except PaijobError:  # a cluster that records no times: stamp with the reading time
            self.uri = None
            return
        lines = (self.partial + b"".join(chunks)).split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            offset, _, when = line.partition(b" ")
            try:
                start, written = int(offset), float(when)
            except ValueError:
                continue
            self.starts.append(start)
            self.times.append(written)
