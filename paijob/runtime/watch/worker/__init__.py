"""What runs inside a worker: the progress sampler (the doctors' eyes in the process) and the ``mp.spawn``
hook that carries it into a script's own children.

The worker wrapper (:mod:`paijob.runtime.worker`, which every worker runs) enters the watch here and nowhere
else (an import-linter contract in ``setup.cfg``): it starts the sampler where the launcher asked for one, and
tells it how the script's code ended (an exception: its record; exit code 0 inside a process group: where it
left). Nothing in this package imports the node's side (``hang``, ``slow``, ``node``), nor they it: the two
sides meet only in the files :mod:`paijob.runtime.watch.folder` names. No torch import.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import NoReturn

from paijob.runtime.watch.worker.process import in_process_group, leaving_frame
from paijob.runtime.watch.worker.sampler import Sampler, start_from_env

_SAMPLER: list[Sampler] = []  # this worker's sampler, once started (the launcher asked for it)


def start(skip_files: tuple[str, ...] = ()) -> Sampler | None:
    """Start this worker's sampler where the launcher named a folder (``PAIJOB_HANG_DIR``); None otherwise."""
    sampler = start_from_env(skip_files=skip_files)
    if sampler is not None:
        _SAMPLER.append(sampler)
    return sampler


def install_spawn_hook(finish: Callable[[int], NoReturn]) -> bool:
    """``per-node`` mode: every ``mp.spawn`` child of this process gets a sampler and ends with ``finish``."""
    from paijob.runtime.watch.worker.spawn import install

    return install(finish)


def running() -> Sampler | None:
    """This worker's sampler, once started; None: none (no folder named, or not started yet)."""
    return _SAMPLER[0] if _SAMPLER else None


def note_failure(error: BaseException) -> None:
    """The script raised ``error``: its record for the launcher (never raises)."""
    found = running()
    if found is not None:
        with contextlib.suppress(Exception):  # the watch must never break the worker
            found.note_failure(error)


def note_exit(error: SystemExit | None, target: str) -> None:
    """The script ended with exit code 0: where a process group is still up, tell the sampler where it
    ended, for the ranks that may still wait for this one (a rank that leaves early)."""
    found = running()
    if found is not None and in_process_group():
        found.note_left(leaving_frame(error, target))


def prepare_answer() -> None:
    """Read this rank's recent collectives ahead of the failure account's request (a knock-on held back)."""
    found = running()
    if found is not None:
        found.prepare_answer()


def answer_request() -> None:
    """Answer the failure account's request for this rank's collectives now, if it asked."""
    found = running()
    if found is not None:
        found.answer_request()
