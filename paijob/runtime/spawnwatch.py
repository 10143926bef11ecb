"""The hang watch's sampler in ``mp.spawn`` children (``per-node`` mode), with no change to the script.

Why a hook: in ``per-node`` mode paijob starts one process per node, and the
ranks are the children that the user's script starts with
``torch.multiprocessing.spawn`` (or ``start_processes``). Those children do not
run paijob's worker wrapper, so its sampler (:mod:`paijob.runtime.progress`)
would not be in them. The wrapper of the one process installs this hook
instead (where the launcher asks: ``PAIJOB_HANG_SPAWN``): every
:class:`multiprocessing.Process` whose target is torch's ``_wrap`` (what
``mp.spawn`` starts, one per index ``i``) gets :func:`run_watched` as its target,
which starts a sampler for rank ``NODE_RANK * NPROC_PER_NODE + i`` (torch's
convention for ``mp.spawn`` scripts) and then runs torch's ``_wrap`` as
before. The target travels by reference (pickled as
``paijob.runtime.spawnwatch.run_watched``), so the hook works for the
``spawn``, ``forkserver`` and ``fork`` start methods alike. Other processes
(DataLoader workers, the user's own) are left alone.

No torch import: torch's target is recognised by its module and name.
"""

from __future__ import annotations

import functools
import multiprocessing.process
import os
from collections.abc import Callable
from typing import Any

from paijob.runtime.progress import Sampler, start_from_env

TORCH_TARGET = ("torch.multiprocessing.spawn", "_wrap")  # mp.spawn's per-child entry point
_installed: list[Callable[..., Any]] = []  # BaseProcess.start before the hook


def install() -> bool:
    """Hook ``multiprocessing`` so that children ``mp.spawn`` starts report their progress.

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
            self._args = (target, *self._args)  # type: ignore[attr-defined]
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


def run_watched(target: Callable[..., Any], fn: Callable[..., Any], index: int, *rest: Any) -> Any:
    """The child's target: start its sampler, then torch's own ``_wrap(fn, index, ...)``."""
    uninstall()  # a fork child inherits the hook; its own children are not ranks
    start_child_sampler(index, skip_files=(__file__, getattr(target.__code__, "co_filename", "")))
    return target(fn, index, *rest)


def start_child_sampler(index: int, skip_files: tuple[str, ...] = ()) -> Sampler | None:
    """The sampler of ``mp.spawn`` child ``index``, reporting as its global rank (None: not asked)."""
    environ = {**os.environ, "RANK": str(child_rank(index, os.environ)), "LOCAL_RANK": str(index)}
    return start_from_env(skip_files=skip_files, environ=environ)
