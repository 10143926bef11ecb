"""How the runtime speaks: one ``paijob-runtime: ...`` line on stderr, passed on at once."""

from __future__ import annotations

import sys

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
