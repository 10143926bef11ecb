"""OpenPAI's job states, and which of them are final (like TorchX's ``AppState.is_terminal``).

Source: the REST v2 swagger (``JobStatus.state``, in the order it lists them) and
rest-server ``src/models/v2/utils/frameworkConverter.js`` ``convertState``: a job
that reaches SUCCEEDED, FAILED or STOPPED never changes state again, so waiting,
log following and pruning stop there. UNKNOWN is what OpenPAI reports when it
cannot map the framework's state; it is not final (the next poll may know).

States travel as plain strings in REST JSON, in the local store and on the
command line, so they stay strings here.
"""

from __future__ import annotations

WAITING = "WAITING"
RUNNING = "RUNNING"
STOPPING = "STOPPING"
STOPPED = "STOPPED"
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
UNKNOWN = "UNKNOWN"

JOB_STATES: tuple[str, ...] = (WAITING, RUNNING, STOPPING, STOPPED, SUCCEEDED, FAILED, UNKNOWN)
TERMINAL_STATES: frozenset[str] = frozenset({SUCCEEDED, FAILED, STOPPED})


def is_terminal(state: str | None) -> bool:
    """Whether a job in ``state`` has ended for good (SUCCEEDED, FAILED or STOPPED)."""
    return state in TERMINAL_STATES
