"""Machine probes the pure layout code takes as data: GPUs, the master's port.

No torch import here: ``paijob-runtime env`` must stay fast on any machine.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Mapping

from paijob.common.exitcodes import InfrastructureError


class MasterUnreachableError(InfrastructureError):
    """The master task's rendezvous port did not open in time."""


def count_visible_gpus(
    environ: Mapping[str, str] | None = None,
    nvidia_smi: Callable[[], int | None] | None = None,
) -> int:
    """GPUs this process may use, without importing torch.

    ``CUDA_VISIBLE_DEVICES`` wins when set (empty, ``-1`` or ``NoDevFiles``
    mean none); otherwise ``nvidia-smi -L`` is asked; no driver means 0.
    """
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [part.strip() for part in visible.split(",") if part.strip()]
        if not entries or entries[0] in ("-1", "NoDevFiles"):
            return 0
        # CUDA stops at the first invalid entry; "-1" anywhere hides the rest.
        count = 0
        for entry in entries:
            if entry == "-1":
                break
            count += 1
        return count
    probe = nvidia_smi or _nvidia_smi_count
    return probe() or 0


def _nvidia_smi_count() -> int | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "-L"], capture_output=True, text=True, timeout=15, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def wait_for_master(
    addr: str,
    port: int,
    *,
    timeout: float,
    port_label: str | None = None,
    interval: float = 0.5,
    log: Callable[[str], None] | None = None,
    message_every: float = 30.0,
) -> None:
    """Block until ``addr:port`` accepts a TCP connection, or raise after ``timeout`` seconds.

    Non-zero nodes call this before joining the rendezvous, so a master that is
    still queueing or pulling its image is waited for, and a master that never
    comes gives one clear error rather than a hang inside a collective. While
    waiting, ``log`` gets one line at once, one every ``message_every`` seconds, and one
    when the port opens.
    """
    started = time.monotonic()
    deadline = started + timeout
    last_error: OSError | None = None
    next_message = started
    while True:
        remaining = deadline - time.monotonic()
        try:
            with socket.create_connection((addr, port), timeout=max(0.1, min(5.0, remaining))):
                pass
            if log and next_message != started:  # we said we wait: say that it is over
                log(f"the master at {addr}:{port} is up (after {time.monotonic() - started:.0f}s)")
            return
        except OSError as error:
            last_error = error
        now = time.monotonic()
        if now >= deadline:
            break
        if log and now >= next_message:
            if next_message == started:
                log(f"waiting up to {timeout:.0f}s for the master at {addr}:{port} ...")
            else:
                log(
                    f"still waiting for the master at {addr}:{port} ({now - started:.0f}s of "
                    f"--master-timeout {timeout:.0f}s; last error: {last_error})"
                )
            next_message = now + message_every
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
    label = f" (port label {port_label!r})" if port_label else ""
    raise MasterUnreachableError(
        f"the master at {addr}:{port}{label} did not accept connections within "
        f"{timeout:.0f}s (last error: {last_error}). Likely causes: the master task "
        f"(node rank 0) failed or is not scheduled yet (check its log and state); the port "
        f"label is not declared under the master role's resourcePerInstance.ports, or a "
        f"different --port-label is used on the master; a firewall between the nodes. "
        f"Raise --master-timeout if tasks start far apart"
    )
