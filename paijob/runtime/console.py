"""How the runtime speaks: one ``paijob-runtime: ...`` line on stderr, passed on at once, and the one
record of why it failed (:mod:`paijob.common.records`), for the cluster to read."""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

from paijob.common import contract, records

PREFIX = "paijob-runtime: "
_record_key: list[str] = []  # the task's record key, once taken out of the environment


def say(message: str) -> None:
    """One line of the launcher's own, told apart from the workers' ``[rankN]:`` lines."""
    print(f"{PREFIX}{message}", file=sys.stderr, flush=True)


def line_buffered_stdio() -> None:
    """Pass worker output on line by line even when our stdout is a pipe (as on OpenPAI).

    torch's log tailer writes each worker line to this process's ``sys.stdout`` /
    ``sys.stderr`` without flushing; a pipe is block-buffered unless
    ``PYTHONUNBUFFERED`` was set before this process started.
    """
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)


def take_record_key(environ: MutableMapping[str, str] = os.environ) -> None:
    """Keep the cluster's record key (:data:`contract.RECORD_KEY`) here and out of ``environ``, before any
    worker starts: a worker's environment never holds it, so a record a worker prints is not signed."""
    key = environ.pop(contract.RECORD_KEY, None)
    if key:
        _record_key[:] = [key]


def tell(record: records.FailureRecord) -> None:
    """Write the record of why this node failed: one line, after the human lines that say the same."""
    print(records.failure_line(record, _record_key[0] if _record_key else None), file=sys.stderr, flush=True)
