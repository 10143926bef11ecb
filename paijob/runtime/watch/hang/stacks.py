"""Every rank's whole stack, as text and in one file: what the hang doctor writes before it ends a job, and
what SIGUSR1 prints while the job goes on.

A rank's stack comes from the freshest source the look has (:class:`~paijob.runtime.watch.ranks.Look`):
py-spy's read from outside a stopped process, faulthandler's watchdog dump of a rank whose sampler is silent,
else its last sample; a rank waiting for a DataLoader worker also shows that worker's own stack
(``fork<pid>.json``, believed only from a child of the rank's process). No torch import; no signal.
"""

from __future__ import annotations

import linecache
import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from paijob.common import contract
from paijob.runtime.watch.folder import read_forked
from paijob.runtime.watch.ranks import Look, RankState

STACKS_FILE = "paijob-stacks.txt"


def stack_text(report: Mapping[str, Any], header: str) -> str:
    """A rank's whole stack as Python prints a traceback (outermost first): the main thread, then
    every other Python thread its sampler saw while the main thread stood still."""
    lines = [header, "Stack of the main thread (most recent call last):"]
    lines.extend(traceback_lines(report.get("frames") or []))
    for thread in report.get("threads") or []:
        lines.append(f"Stack of thread {thread.get('name', '?')!r} (most recent call last):")
        lines.extend(traceback_lines(thread.get("frames") or []))
    return "\n".join(lines)


def traceback_lines(frames: Sequence[Sequence[Any]]) -> list[str]:
    lines = []
    for file, line, function in frames:
        lines.append(f'  File "{file}", line {line}, in {function}')
        source = linecache.getline(str(file), int(line)).strip()
        if source:
            lines.append(f"    {source}")
    return lines


def local_stacks(look: Look, why: str, *, node_rank: int, host: str, folder: str) -> str:
    """Every rank's stack of one look, every Python thread, as text (a silent rank: faulthandler's
    watchdog dump; a stopped one: py-spy's read from outside, else its last sample and why)."""
    parts = [f"{why}: node rank {node_rank} ({host}), {len(look.reports)} rank(s)"]
    states = {s.rank: s for s in look.states}
    for rank in sorted(look.reports):
        report, state = look.reports[rank], states[rank]
        header = (f"--- {state.name()}, pid {report.get('pid')}, inactive for "
                  f"{state.idle_for:.0f}s, CPU {state.cpu_share:.0%}"
                  + (f", waits in {state.wait}" if state.wait else "")
                  + (", stopped (T state)" if state.stopped else ""))
        seen, dump = look.seen.get(rank), look.dumps.get(rank, "")
        if seen is not None:
            parts.append(stack_text(seen, f"{header}: every thread as py-spy read it from outside "
                                          f"the stopped process"))
        elif dump and state.silent:
            parts.append(f"{header}, its sampler silent for {state.stale_for:.0f}s: every thread "
                         f"as faulthandler's watchdog wrote it (most recent call first):\n{dump}")
        else:
            parts.append(stack_text(report, header + (f": its last sample ({state.unread})"
                                                      if state.unread else "")))
        loader = loader_stack(folder, report, state)
        if loader:
            parts.append(loader)
    return "\n".join(parts)


def loader_stack(folder: str, report: Mapping[str, Any], state: RankState) -> str:
    """The stack of the DataLoader worker a rank waits for, from that worker's own report
    (``fork<pid>.json``), believed only from a child of the rank's process."""
    if state.wait != "DataLoader" or not state.loader_worker:
        return ""
    worker_id, pid = state.loader_worker
    forked = read_forked(folder, pid, report.get("pid")) if pid else None
    if forked is None:
        return ""
    header = f"    its DataLoader worker {worker_id} (pid {pid}):"
    return header + "\n" + "\n".join("    " + line for line in traceback_lines(forked.get("frames") or []))


def write_stacks_file(folder: str | None, name: str, text: str) -> str | None:
    """Write ``text`` to a new file ``folder/name`` (``name-1``... when taken); its path, or None
    when the folder cannot be written. Created exclusively and never through a link: a link
    planted under that name is left alone. ``folder`` None: a new temporary folder."""
    try:
        folder = folder or tempfile.mkdtemp(prefix="paijob-stacks-")
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    stem, dot, ext = name.rpartition(".")
    for attempt in range(100):
        path = os.path.join(folder, name if attempt == 0 else f"{stem}-{attempt}{dot}{ext}")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o644)
        except FileExistsError:
            continue
        except OSError:
            return None
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        return os.path.abspath(path)
    return None


def stacks_folder(log_dir: str | None, environ: Mapping[str, str]) -> str | None:
    """Where the stacks file goes: ``--log-dir``, else the job's output folder, else None (a
    new temporary folder); never the working directory, the user's checkout."""
    return log_dir or environ.get(contract.OUTPUT_DIR) or None
