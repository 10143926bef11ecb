"""``paijob-runtime``: the container entry point.

    paijob-runtime train [OPTIONS] SCRIPT [ARGS...]
    paijob-runtime train [OPTIONS] -m MODULE [ARGS...]
    paijob-runtime train [OPTIONS] --recipe NAME [ARGS...]
    paijob-runtime env [OPTIONS] [--json]

Everything after the script (or module, or recipe name) goes to the script
untouched. ``env`` prints the computed layout and imports no torch.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import shlex
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn

from paijob import __version__
from paijob.common import contract, exitcodes, options
from paijob.common.guard import run_guarded
from paijob.common.jobversion import mismatch_warning, rendered_version
from paijob.common.options import build_parsers, split_train_argv
from paijob.common.records import FailureRecord
from paijob.errors import PaijobError
from paijob.runtime import held
from paijob.runtime.config import HangSettings, LaunchConfig, LaunchError, WorkerCommand
from paijob.runtime.console import tell
from paijob.runtime.env import (
    DistEnv,
    LaunchOptions,
    MasterNotPlacedError,
    check_nproc_fits,
    compute_dist_env,
    compute_mpi_slot,
    parse_nproc_option,
    parse_roles_option,
)

__all__ = ["main", "build_parsers", "split_train_argv"]


def _layout(args: argparse.Namespace) -> tuple[DistEnv, int]:
    from paijob.common.ports import draw
    from paijob.runtime.probe import count_visible_gpus

    environ = dict(os.environ)
    options = LaunchOptions(
        port_label=args.port_label,
        master_role=args.master_role,
        roles=parse_roles_option(args.roles),
        nproc_per_node=parse_nproc_option(args.nproc_per_node),
        backend=args.backend,
        mode=args.mode,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        master_addr=args.master_addr,
        master_port=args.master_port,
    )
    gpus = count_visible_gpus(environ)
    free_port = draw()[0]  # a standalone run's rendezvous port, outside the kernel's ephemeral range
    dist = compute_dist_env(environ, options, visible_gpus=gpus, free_port=free_port)
    check_nproc_fits(dist.nproc_per_node, len(os.sched_getaffinity(0)))
    return dist, gpus


def cmd_env(args: argparse.Namespace) -> int:
    dist, _ = _layout(args)
    if args.json:
        described = {**dist.describe(), "paijob_version": __version__,
                     "rendered_version": rendered_version(os.environ)}
        print(json.dumps(described, indent=2))
        return 0
    for key, value in dist.node_env().items():
        print(f"export {key}={shlex.quote(value)}")
    ranks = ", ".join(
        f"LOCAL_RANK={i} RANK={dist.rank(i)}" for i in range(dist.nproc_per_node)
    )
    print(f"# per worker: {ranks}")
    return 0


def _check_log_dir(path: str) -> None:
    """Create ``--log-dir`` now: a folder that cannot be written is one line, not a traceback."""
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".paijob-write-test-{os.getpid()}")
        with open(probe, "w", encoding="utf-8"):
            pass
        os.remove(probe)
    except OSError as error:
        raise LaunchError(
            f"--log-dir {path!r} cannot be used ({error.strerror or error}); give a writable "
            f"folder, e.g. under the task's working directory"
        ) from None


def _worker_command(args: argparse.Namespace) -> WorkerCommand:
    """What each worker runs: ``--recipe NAME``, ``-m MODULE`` or ``SCRIPT``, with its arguments."""
    rest: list[str] = args.rest
    extra = {"local_rank_arg": args.local_rank_arg, "apex_compat": args.apex_compat}
    if args.recipe is not None:
        return WorkerCommand(recipe=args.recipe, args=tuple(rest), **extra)
    if rest and rest[0] == "-m":
        if len(rest) < 2:
            raise LaunchError("-m needs a module name: paijob-runtime train -m MODULE [ARGS...]")
        return WorkerCommand(module=rest[1], args=tuple(rest[2:]), **extra)
    if rest:
        return WorkerCommand(script=rest[0], args=tuple(rest[1:]), **extra)
    raise LaunchError(
        "nothing to run: paijob-runtime train [OPTIONS] (SCRIPT | -m MODULE | --recipe NAME) "
        "[ARGS...]"
    )


# Where torch comes from, for the one line a task without it gets.
TORCH_FIX = ("pip install 'paijob[train]' (torch from PyPI), or run the job in an image with torch "
             "(the templates' default image, PyTorch's official one, has it)")


class NoTorchError(LaunchError):
    """This image cannot run ``train``: exit ``NOT_RUNNABLE`` (OpenPAI: 220, never retried into the same image)."""

    exit_code = exitcodes.NOT_RUNNABLE


def _require_torch() -> None:
    """``train`` needs torch; without it, one line naming the fix (not an import traceback)."""
    if importlib.util.find_spec("torch") is None:
        raise NoTorchError(f"torch: {exitcodes.NOT_RUNNABLE_WORDS}: paijob-runtime train needs torch, which "
                           f"{sys.executable} cannot import: {TORCH_FIX}")


def cmd_train(args: argparse.Namespace) -> int:
    _require_torch()
    from paijob.runtime.launch import launch

    command = _worker_command(args)
    if args.log_dir:
        _check_log_dir(args.log_dir)
    if args.precision:
        from paijob.runtime.precision import parse_precision  # no torch at import

        parse_precision(args.precision, source="--precision")
    restarts, min_nodes = recovery_options(args)
    if args.mode == "horovod":
        if restarts or min_nodes is not None:
            raise LaunchError("--max-restarts and --min-nodes need --mode per-gpu: in --mode horovod mpirun "
                              "starts the processes, and restarts none of them; drop them")
        return _train_horovod(args, command)
    dist = _layout_for_recovery(args, min_nodes)
    config = LaunchConfig(
        dist=dist,
        command=command,
        mode=args.mode,
        master_timeout=args.master_timeout,
        grace_period=args.grace_period,
        heartbeat_timeout=args.heartbeat_timeout,
        log_dir=args.log_dir,
        verbose=args.verbose,
        precision=args.precision or None,
        hang=hang_settings(args, os.environ),
        max_restarts=restarts,
        min_nodes=min_nodes,
    )
    return launch(config)


def _layout_for_recovery(args: argparse.Namespace, min_nodes: int | None) -> DistEnv:
    """The layout; with ``--min-nodes`` (gang allocation off, so OpenPAI starts this task before the master task
    may have an address), a master not placed yet is exit 143, which OpenPAI retries as a new pod of this task."""
    try:
        return _layout(args)[0]
    except MasterNotPlacedError as error:
        if min_nodes is None:
            raise
        raise exitcodes.InfrastructureError(
            f"{error.args[0].split('. ')[0]} yet: with extras.gangAllocation false (--min-nodes) OpenPAI starts "
            f"this task before the master task is placed; exit 143, which OpenPAI retries (a new pod of this task, "
            f"which reads the master's address again)") from None


def recovery_options(args: argparse.Namespace) -> tuple[int, int | None]:
    """``--max-restarts`` and ``--min-nodes`` as numbers; a bad value is one line (exit 2), before anything
    starts (the layout's node count is checked with it by :class:`LaunchConfig`)."""
    problem = options.max_restarts_error(args.max_restarts) or options.min_nodes_error(args.min_nodes, None)
    if problem:
        raise LaunchError(problem)
    return int(args.max_restarts), None if args.min_nodes is None else int(args.min_nodes)


def hang_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> HangSettings:
    """The hang watch's limits: each option, else its ``PAIJOB_HANG_*`` variable, else the default.
    A timeout the user chose (option or variable) is kept as is; the default one is calibrated."""

    def pick(value: float | None, variable: str, default: float, option: str) -> float:
        if value is not None:
            return float(value)
        text = environ.get(variable, "").strip()
        if not text:
            return default
        try:
            return float(text)
        except ValueError:
            raise LaunchError(
                f"{variable}={text!r} (the default of {option}) is not a number of seconds; "
                f"set it to e.g. 600, or 0 to turn the hang watch off"
            ) from None

    if args.hang_timeout is not None:
        source = "--hang-timeout"
    elif environ.get(contract.HANG_TIMEOUT, "").strip():
        source = f"${contract.HANG_TIMEOUT}"
    else:
        source = "the default"
    chosen = source != "the default"
    return HangSettings(
        source=source,
        timeout=pick(args.hang_timeout, contract.HANG_TIMEOUT, options.DEFAULT_HANG_TIMEOUT,
                     "--hang-timeout"),
        calibrate=not chosen,
        first_timeout=pick(args.hang_first_timeout, contract.HANG_FIRST_TIMEOUT,
                           options.DEFAULT_HANG_FIRST_TIMEOUT, "--hang-first-timeout"),
        hard_limit=pick(args.hang_hard_limit, contract.HANG_HARD_LIMIT,
                        options.DEFAULT_HANG_HARD_LIMIT, "--hang-hard-limit"),
    )


def _train_horovod(args: argparse.Namespace, command: WorkerCommand) -> int:
    """``--mode horovod``: the MPI launcher made the layout; the PAI_* layout options are refused."""
    from paijob.runtime.launch import launch_horovod
    from paijob.runtime.probe import count_visible_gpus

    layout = [option for option, value in (
        ("--nnodes", args.nnodes), ("--node-rank", args.node_rank),
        ("--master-addr", args.master_addr), ("--master-port", args.master_port),
        ("--roles", args.roles), ("--master-role", args.master_role),
    ) if value is not None]
    if layout or args.nproc_per_node != "auto":
        raise LaunchError(
            f"--mode horovod takes its layout from mpirun/horovodrun (-np, -H); drop "
            f"{', '.join(layout or ['--nproc-per-node'])}"
        )
    slot = compute_mpi_slot(
        os.environ, visible_gpus=count_visible_gpus(os.environ), backend=args.backend
    )
    return launch_horovod(slot, command, precision=args.precision or None)


def _run_told(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``command`` under :func:`run_guarded`; an error of the runtime's own (a missing script, an unreachable
    master) then also ends with its record, which the cluster reads, after the line people read."""
    told: list[FailureRecord] = []

    def recorded() -> int:
        try:
            return command(args)
        except PaijobError as error:
            told.append(FailureRecord(None, error.exit_code, str(error)))
            raise

    code = run_guarded("paijob-runtime", recorded)
    for record in told:
        tell(record)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    held.take()  # before any worker starts: none of them gets the keys or the cluster's record files
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, train_parser = build_parsers()
    rest: list[str] = []
    if "train" in argv:
        # Options of ours stop where the training command starts.
        index = argv.index("train")
        ours, rest = split_train_argv(train_parser, argv[index + 1 :])
        argv = argv[: index + 1] + ours
    args = parser.parse_args(argv)
    args.rest = rest
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(message)s" if args.verbose else "%(message)s",
    )
    commands: dict[str, Callable[[argparse.Namespace], int]] = {"train": cmd_train, "env": cmd_env}
    command = commands.get(args.command or "")
    if command is None:
        parser.print_help(sys.stderr)
        return exitcodes.CONFIG_ERROR
    warning = mismatch_warning(os.environ)
    if warning:
        print(f"paijob-runtime: {warning}", file=sys.stderr)
    return _run_told(command, args)


def main_and_exit(argv: Sequence[str] | None = None) -> NoReturn:
    """The ``paijob-runtime`` command: :func:`main`, then the end of the process without interpreter
    finalisation (:func:`paijob.runtime.worker.finish`: output flushed, ``atexit`` run, main's code).

    Why: the launcher's watchers call torch's store from daemon threads, each call bounded from outside
    (``watch.lifecycle.bounded``); one that outlives its bound (seen: 15 s for a 5 s store timeout on a
    loaded machine) is still inside torch when the launcher is done. If it returns while Python
    finalises, pybind11 takes the GIL back in a destructor, Python ends the thread there (``pthread_exit``)
    and C++ calls ``std::terminate``: "terminate called without an active exception", exit -6 on a
    node whose job succeeded. Tests call :func:`main` in-process and keep their interpreter.

    Every way out of :func:`main` ends here: a return, ``SystemExit`` (argparse's ``--help`` and usage errors)
    and an exception :func:`~paijob.common.guard.run_guarded` does not catch (a bug: its traceback, exit 1,
    as Python's own uncaught-exception exit), since that last one met the same store call in flight.
    """
    from paijob.runtime.worker import finish  # no torch

    finish(_code_of_main(argv))


def _code_of_main(argv: Sequence[str] | None) -> int:
    """:func:`main`'s exit code however it ends, as the interpreter would have made it."""
    try:
        return main(argv)
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)  # sys.exit("message"): Python prints it and exits 1
        return 1
    except KeyboardInterrupt:  # before run_guarded took over
        return exitcodes.INTERRUPTED
    except BaseException:  # noqa: BLE001 - a bug's traceback, then the one way out
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    main_and_exit()
