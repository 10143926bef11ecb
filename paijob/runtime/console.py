"""How the runtime speaks: one ``paijob-runtime: ...`` line on stderr, passed on at once, and the one
record of why it failed (:mod:`paijob.common.records`), for the cluster to read."""

from __future__ import annotations

import sys

from paijob.common import contract, records
from paijob.runtime import held

PREFIX = "paijob-runtime: "


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


def tell(record: records.FailureRecord) -> None:
    """Write the record of why this node failed: one line, after the human lines that say the same, signed
    with the cluster's record key (:data:`contract.RECORD_KEY`, held by :mod:`paijob.runtime.held`: no
    worker's environment holds it, so a record a worker prints is not signed)."""
    print(records.failure_line(record, held.value(contract.RECORD_KEY)), file=sys.stderr, flush=True)
