"""What paijob's worker wrapper does, carried into ``mp.spawn`` children (``per-node`` mode), with no
change to the script.

Why a hook: in ``per-node`` mode paijob starts one process per node, and the
ranks are the children that the user's script starts with
``torch.multiprocessing.spawn`` (or ``start_processes``). Those children do not
run paijob's worker wrapper, so neither its sampler (the hang watch's eyes,
:mod:`paijob.runtime.watch.worker.sampler`) nor its clean exit (:func:`paijob.runtime.worker.finish`)
would be in them. Measured without the exit: a 2-child gloo script that ends
normally (with ``destroy_process_group``) exits 1 about one run in four,
because a child's interpreter finalisation races gloo's threads and aborts
("terminate called without an active exception", SIGABRT).

So the wrapper of the one process installs this hook (the launcher asks with
``PAIJOB_SPAWN_HOOK``): every :class:`multiprocessing.Process` whose target is
torch's ``_wrap`` (what ``mp.spawn`` starts, one per index ``i``) gets
:func:`run_watched` as its target, which starts a sampler for rank
``NODE_RANK * NPROC_PER_NODE + i`` (torch's convention for ``mp.spawn``
scripts; only where the hang watch is on), runs torch's ``_wrap`` as before,
and then ends the child like a wrapped worker (``spawn`` start method; ``fork``
and ``forkserver`` children already end with ``os._exit``). The target travels
by reference (pickled as ``paijob.runtime.watch.worker.spawn.run_watched``). Other
processes (DataLoader workers, the user's own) are left alone.

No torch import: torch's target is recognised by its module and name.
"""

from __future__ import annotations

import functools
import multiprocessing.process
import os
from collections.abc import Callable
from typing import Any, NoReturn

from paijob.runtime.watch.worker.process import in_process_group, leaving_frame
from paijob.runtime.watch.worker.sampler import Sampler, start_from_env

TORCH_TARGET = ("torch.multiprocessing.spawn", "_wrap")  # mp.spawn's per-child entry point
_installed: list[Callable[..., Any]] = []  # BaseProcess.start before the hook


def install(finish: Callable[[int], NoReturn]) -> bool:
    """Hook ``multiprocessing`` so that children ``mp.spawn`` starts report their progress and
    end with ``finish`` (the worker wrapper's exit, passed in: it imports this module).

    Returns whether the hook was installed now (False: already in place).
    """
    if _installed:
        return False
    original = multiprocessing.process.BaseProcess.start
    _installed.append(original)

    @functools.wraps(original)
    def start(self: multiprocessing.process.BaseProcess) -> None:
        target = getattr(self, "_target", None)
        if (getattr(target, "__module__", None), getattr(target, "__name__", None)) == TORCH_TARGET:
            ending = finish if getattr(self, "_start_method", None) == "spawn" else None  # the others os._exit
            self._args = (target, ending, *self._args)  # type: ignore[attr-defined]
            self._target = run_watched  # type: ignore[attr-defined]
        original(self)

    multiprocessing.process.BaseProcess.start = start  # type: ignore[method-assign]
    return True


def uninstall() -> None:
    if _installed:
        multiprocessing.process.BaseProcess.start = _installed.pop()  # type: ignore[method-assign]


def child_rank(index: int, environ: os._Environ[str] | dict[str, str]) -> int:
    """The global rank of ``mp.spawn`` child ``index`` on this node: node rank x processes per node + index."""
    node, per_node = environ.get("NODE_RANK", ""), environ.get("NPROC_PER_NODE", "")
    if node.isdigit() and per_node.isdigit():
        return int(node) * int(per_node) + index
    return index


def run_watched(target: Callable[..., Any], finish: Callable[[int], NoReturn] | None,
                fn: Callable[..., Any], index: int, *rest: Any) -> None:
    """The child's target: its sampler, torch's own ``_wrap(fn, index, ...)``, then (``finish``) the
    worker wrapper's exit without finalisation. An error leaves as ``_wrap`` makes it (SystemExit)."""
    uninstall()  # a fork child inherits the hook; its own children are not ranks
    sampler = start_child_sampler(index, skip_files=(__file__, getattr(target.__code__, "co_filename", "")))
    target(fn if sampler is None else noting_errors(fn, sampler), index, *rest)
    if finish is not None:
        finish(0)


def noting_errors(fn: Callable[..., Any], sampler: Sampler) -> Callable[..., Any]:
    """``fn``, telling ``sampler`` an exception that leaves it before torch's
    ``_wrap`` reports it (and the child ends): the node's watch reads it at once (a collective's
    timeout, :meth:`~paijob.runtime.watch.worker.sampler.Sampler.note_failure`). The exception goes on
    unchanged."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except SystemExit as error:
            if error.code in (None, 0) and in_process_group():
                sampler.note_left(leaving_frame(error, *_source(fn)))
            raise
        except Exception as error:
            sampler.note_failure(error)
            raise
        if in_process_group():  # the function returned with its process group up: a rank that left
            sampler.note_left(leaving_frame(None, *_source(fn)))
        return result

    return run


def _source(fn: Callable[..., Any]) -> tuple[str, str]:
    """``fn``'s file and name (where a rank that returned ended)."""
    code = getattr(fn, "__code__", None)
    return (code.co_filename, code.co_name) if code is not None else ("?", "?")


def start_child_sampler(index: int, skip_files: tuple[str, ...] = ()) -> Sampler | None:
    """The sampler of ``mp.spawn`` child ``index``, reporting as its global rank (None: not asked)."""
    environ = {**os.environ, "RANK": str(child_rank(index, os.environ)), "LOCAL_RANK": str(index)}
    return start_from_env(skip_files=skip_files, environ=environ)
