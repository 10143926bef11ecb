"""``python -m paijob.runtime.worker (SCRIPT | -m MODULE) [ARGS...]``: how every worker starts.

``paijob-runtime train`` runs the user's command through this module in each
worker process (and in-process in ``--mode horovod``). It does three things
that plain ``python SCRIPT`` does not:

* **The worker dies with its launcher.** ``PR_SET_PDEATHSIG`` (Linux) makes the
  kernel send SIGKILL to this process when the process that started it exits,
  so a ``kill -9`` of ``paijob-runtime`` leaves no worker training on,
  re-parented to init.
* **It runs the target exactly as python would**: as ``__main__``, with
  ``sys.argv[0]`` the script path (or the module's file), ``__file__`` set,
  and the script's folder (or, for ``-m``, the working directory) first on
  ``sys.path``.
* **A finished script exits with its own code, every time.** Once DDP has
  wrapped a model, torch never frees the process group, and gloo/TCPStore
  native threads still run while the interpreter finalises; one of them
  dropping a tensor then needs the GIL, Python answers with ``pthread_exit``
  and C++ prints "terminate called without an active exception": a finished
  run exits 134 (SIGABRT) and OpenPAI marks the task failed. :func:`finish`
  does what a normal exit does that the user can observe (joins non-daemon
  threads, runs ``atexit`` handlers, flushes every open file and the logging
  handlers) and then ends the process with ``os._exit`` before
  finalisation can race. A failing script keeps its code: an uncaught
  exception prints its traceback and exits 1, ``sys.exit(n)`` exits ``n``.
* **The real cause is told first, once.** Where the launcher prefixes each
  output line with ``[rankN]:`` (``per-gpu`` mode), the traceback is printed
  without torch's own ``[rankN]:`` prefix (``init_process_group`` installs an
  excepthook that adds one: lines read ``[rank0]: [rank0]: ...``). And an
  error that is only a consequence of another worker's failure (a peer closed
  the connection) is held back for a few seconds: the launcher, which learns
  the root cause within about a second, stops this worker meanwhile and
  reports that cause; the knock-on traceback then never buries it. If nobody
  stops the worker, it prints the traceback and exits 1 as before.
* **Its progress is watched.** Where the launcher asks (``PAIJOB_HANG_DIR``), a
  sampler thread reports where the main thread is and whether it moves
  (:mod:`paijob.runtime.watch.worker`, the worker's side of the watch), for the hang watch. In ``per-node`` mode the
  ranks are ``mp.spawn`` children: the sampler and the clean exit above go into
  each of them instead (:mod:`paijob.runtime.watch.worker.spawn`).
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import io
import logging
import os
import runpy
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import NoReturn

from paijob.common import contract
from paijob.runtime.watch import worker as watched

USAGE = "usage: python -m paijob.runtime.worker (SCRIPT | -m MODULE) [ARGS...]"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(expected_parent: int | None = None) -> bool:
    """Ask the kernel to SIGKILL this process when its parent exits (Linux only).

    ``expected_parent`` closes the race where the parent died before the call:
    then this process has already been re-parented and is killed at once.
    Returns whether the request was made.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        return False
    if expected_parent is not None and os.getppid() != expected_parent:
        os.kill(os.getpid(), signal.SIGKILL)
    return True


def exit_code_of(error: SystemExit) -> int:
    """The status ``sys.exit(value)`` gives: None → 0, an int → itself, anything else → 1."""
    code = error.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF  # what the C exit() python calls makes of it
    print(code, file=sys.stderr)  # python prints a non-int exit value
    return 1


def finish(code: int) -> NoReturn:
    """End the process with ``code`` after what a normal exit does, minus finalisation.

    A negative ``code`` (Popen's way of saying "killed by signal -code") ends it by
    that signal, so its parent sees the signal and not an exit code.
    """
    _wait_for_threads()
    run_exitfuncs: Callable[[], None] | None = getattr(atexit, "_run_exitfuncs", None)
    if run_exitfuncs is not None:  # CPython: atexit handlers, in the usual order
        run_exitfuncs()
    logging.shutdown()
    _flush_open_files()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def _wait_for_threads() -> None:
    """What python does first at exit: threading's exit hooks, then join non-daemon threads.

    ``threading._shutdown`` (CPython 3.10-3.13) runs the hooks first, e.g. the one
    that tells a ``ThreadPoolExecutor`` still referenced somewhere to stop; joining
    its threads without them would wait forever.
    """
    shutdown: Callable[[], None] | None = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
        return
    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main and not thread.daemon and thread.is_alive():
            thread.join()


def _flush_open_files() -> None:
    """Flush files the script left open, which finalisation would have flushed on close."""
    text, binary = [], []
    for obj in gc.get_objects():
        # type(obj), not isinstance: isinstance asks obj for __class__, and a dead
        # weakref.proxy (torch.compile leaves some behind) raises ReferenceError.
        kind = type(obj)
        if issubclass(kind, io.TextIOBase):
            text.append(obj)
        elif issubclass(kind, io.BufferedIOBase):
            binary.append(obj)
    for stream in (*text, *binary):  # text wrappers first: they write into their buffers
        try:
            if not stream.closed and stream.writable():
                stream.flush()
        except Exception:  # noqa: BLE001 - a stream that cannot flush would not have on close
            pass


def run_as_main(target: str, args: Sequence[str], *, module: bool = False) -> int:
    """Run a script (or ``module``) as ``__main__`` like python does; return its exit status
    (negative: stopped by that signal while a knock-on error was held back).

    ``python -m paijob.runtime.worker`` put the working directory first on
    ``sys.path``; ``python SCRIPT`` puts the script's folder there instead, so a
    script target replaces that entry, a module target keeps it.
    """
    cwd_first = bool(sys.path) and sys.path[0] in (os.getcwd(), "")
    sys.argv = [target, *args]
    try:
        if module:
            if not cwd_first:
                sys.path.insert(0, os.getcwd())
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            script_dir = os.path.dirname(os.path.abspath(target))
            if cwd_first:
                sys.path[0] = script_dir
            else:
                sys.path.insert(0, script_dir)
            runpy.run_path(target, run_name="__main__")
    except SystemExit as error:
        code = exit_code_of(error)
        if code == 0:
            watched.note_exit(error, target)
        return code
    except KeyboardInterrupt as error:
        _print_user_traceback(error)
        return 128 + int(signal.SIGINT)
    except BaseException as error:  # noqa: BLE001 - python's own top level: print it, exit 1
        watched.note_failure(error)  # the record the launcher reads (not this traceback)
        stopped = _hold_knock_on(error)
        if stopped:
            return -stopped
        _print_user_traceback(error)
        return 1
    watched.note_exit(None, target)
    return 0


def _hold_knock_on(error: BaseException) -> int:
    """Hold a consequence's traceback back until the launcher stops us; the signal, or 0.

    Only where the launcher asked (``PAIJOB_KNOCK_ON_HOLD``: its agent watches every
    node's failures and stops the workers of a failed job). SIGTERM (the launcher's
    stop) ends the hold; the traceback is not printed then, the root cause is.
    """
    try:
        hold = float(os.environ.get(contract.KNOCK_ON_HOLD, "0"))
    except ValueError:
        return 0
    if hold <= 0:
        return 0
    from paijob.runtime.failure import is_consequence

    if not is_consequence(error):
        return 0
    stopped: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        stopped.append(signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        deadline = time.monotonic() + hold
        # What the agent may ask for next (a mismatch's account), read ahead on a thread of its own: torch's
        # first dump of its recorder takes seconds under load, in C++, during which this thread would not
        # run the SIGTERM handler above (a stop, a restart, waited for that long)
        preparing = threading.Thread(target=watched.prepare_answer, name="paijob-calls-ahead", daemon=True)
        preparing.start()
        while not stopped and time.monotonic() < deadline:
            if not preparing.is_alive():
                watched.answer_request()  # the agent may ask for our calls (a mismatch's account): answer at once
            time.sleep(0.05)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return stopped[0] if stopped else 0


def _print_user_traceback(error: BaseException) -> None:
    """The traceback python would print: without this module's and runpy's frames."""
    ours = {__name__, "runpy"}
    tb = error.__traceback__
    while (
        tb is not None
        and tb.tb_next is not None
        and tb.tb_frame.f_globals.get("__name__") in ours
        and tb.tb_frame.f_code.co_filename in (__file__, "<frozen runpy>", runpy.__file__)
    ):
        tb = tb.tb_next
    _excepthook()(type(error), error.with_traceback(tb), tb)  # python >= 3.11 prints __traceback__


def _excepthook() -> Callable[..., object]:
    """``sys.excepthook``, minus torch's ``[rankN]:`` wrapper where the launcher adds that prefix.

    torch's ``init_process_group`` wraps the hook in ``_distributed_excepthook``,
    which keeps the hook it wrapped as ``old_hook`` (once per call: unwrap them all).
    """
    hook: Callable[..., object] = sys.excepthook
    if os.environ.get(contract.RANK_PREFIXED) != "1":
        return hook
    while getattr(hook, "__module__", None) == "torch.distributed.distributed_c10d":
        code = getattr(hook, "__code__", None)
        closure = getattr(hook, "__closure__", None) or ()
        names = code.co_freevars if code is not None else ()
        if "old_hook" not in names or len(closure) != len(names):
            return sys.__excepthook__
        hook = closure[names.index("old_hook")].cell_contents
    return hook


def _start_progress_sampler() -> None:
    """The hang watch's sampler, where the launcher asks: in this process, or (``per-node``) in each
    child that ``mp.spawn`` starts (which also ends like a wrapped worker: :func:`finish`)."""
    if os.environ.get(contract.SPAWN_HOOK) == "1":
        import importlib

        # under its own name: a child unpickles it by name, and this module runs as __main__ here
        watched.install_spawn_hook(importlib.import_module(__spec__.name if __spec__ else __name__).finish)
        return
    watched.start(skip_files=(__file__, runpy.__file__ or ""))


def main(argv: Sequence[str] | None = None) -> NoReturn:
    args = list(sys.argv[1:] if argv is None else argv)
    launcher = os.environ.get(contract.LAUNCHER_PID, "")
    die_with_parent(int(launcher) if launcher.isdigit() else None)
    if args and args[0] == "--":
        args.pop(0)
    if not args or (args[0] == "-m" and len(args) < 2):
        print(USAGE, file=sys.stderr)
        finish(2)
    _start_progress_sampler()
    if args[0] == "-m":
        finish(run_as_main(args[1], args[2:], module=True))
    finish(run_as_main(args[0], args[1:]))


if __name__ == "__main__":
    main()
