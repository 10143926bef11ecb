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
import json
import logging
import math
import os
import shlex
import sys
from collections.abc import Sequence

from paijob import __version__
from paijob.errors import PaijobError
from paijob.runtime import exitcodes
from paijob.runtime.env import (
    BACKENDS,
    DEFAULT_PORT_LABEL,
    MAX_WORKERS_PER_CORE,
    DistEnv,
    LaunchOptions,
    check_nproc_fits,
    compute_dist_env,
    compute_mpi_slot,
    parse_nproc_option,
    parse_roles_option,
)
from paijob.runtime.launch import LOCAL_RANK_STYLES, MODES, LaunchError, WorkerCommand

DESCRIPTION = """\
Map OpenPAI's PAI_* variables to a torch.distributed layout and launch the workers.
The same command runs on a laptop (no PAI_* variables: one node, 127.0.0.1) and
in every task of an OpenPAI job.

examples:
  paijob-runtime train train.py --epochs 10          one worker per GPU
  paijob-runtime train --mode per-node main.py -g 4    script spawns its own workers
  paijob-runtime train -m mypkg.train --lr 0.1
  paijob-runtime train --recipe cifar10 --epochs 1
  paijob-runtime env --json                            show the layout, launch nothing
"""

EXIT_CODES_HELP = """\
exit codes: 0 success; 1-127 the failing worker's own exit code; 128+N a worker
killed by signal N; 2 configuration error; 143 infrastructure failure (master
unreachable, peer or store lost) or SIGTERM, which OpenPAI retries.
"""


def _add_layout_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("layout")
    group.add_argument(
        "--port-label",
        default=DEFAULT_PORT_LABEL,
        help="port label declared under the master role's resourcePerInstance.ports "
        "(default: %(default)s)",
    )
    group.add_argument(
        "--master-role", help="task role whose task 0 hosts the rendezvous "
        "(default: the first participating role in PAI_TASK_ROLE_LIST)"
    )
    group.add_argument(
        "--roles", help="comma list of task roles that form the training world (default: all)"
    )
    group.add_argument(
        "--nproc-per-node", "--nproc_per_node",
        default="auto",
        help="workers per node: N or auto (visible GPUs, else the GPU count in "
        "PAI_RESOURCE_<role>, else 1; default: auto); at most "
        f"{MAX_WORKERS_PER_CORE} per CPU core this process may use",
    )
    group.add_argument(
        "--mode", choices=MODES, default="per-gpu",
        help="per-gpu: one worker per GPU on torch's elastic agent (default); per-node: run "
        "the command once per node (scripts that mp.spawn); dataparallel: one process, all "
        "GPUs; horovod: this process is one MPI slot started by mpirun/horovodrun (ranks from "
        "OMPI_*/HOROVOD_*/PMI_* variables), the script runs in it",
    )
    group.add_argument(
        "--nnodes", type=int, metavar="N",
        help="nodes in the job: without PAI_* variables it sets the layout (like torchrun's "
        "static rendezvous, with --node-rank, --master-addr, --master-port); in an OpenPAI "
        "task it must agree with the PAI_* variables",
    )
    group.add_argument("--node-rank", "--node_rank", type=int, metavar="N",
                       help="this node's rank (same rules as --nnodes)")
    group.add_argument("--master-addr", "--master_addr", metavar="ADDR",
                       help="node rank 0's address (same rules as --nnodes)")
    group.add_argument("--master-port", "--master_port", type=int, metavar="PORT",
                       help="the rendezvous port on node rank 0 (same rules as --nnodes)")
    group.add_argument(
        "--backend", choices=BACKENDS, default="auto",
        help="process-group backend exported as PAIJOB_BACKEND (auto: nccl with GPUs, else gloo)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The whole ``paijob-runtime`` parser. Imports no torch (``paijob validate`` uses it)."""
    return build_parsers()[0]


def build_parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The ``paijob-runtime`` parser and its ``train`` sub-parser (no torch import).

    torchrun's underscore spellings of the options both share (``--nproc_per_node``,
    ``--node_rank``, ``--master_addr``, ``--master_port``, ``--log_dir``) are aliases.
    """
    parser = argparse.ArgumentParser(
        prog="paijob-runtime",
        description=DESCRIPTION,
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"paijob {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    train = sub.add_parser(
        "train",
        help="launch this node's workers",
        description="Launch this node's share of the training world.",
        epilog=EXIT_CODES_HELP,
        usage="paijob-runtime train [OPTIONS] (SCRIPT | -m MODULE | --recipe NAME) [ARGS...]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_layout_options(train)
    train.add_argument(
        "--recipe", metavar="NAME", help="run a built-in recipe (python -m paijob.runtime.recipes)"
    )
    train.add_argument(
        "--local-rank-arg", nargs="?", const="auto", choices=LOCAL_RANK_STYLES, metavar="STYLE",
        help="also pass the local rank as an argument, torch.distributed.launch style: "
        "dash (--local-rank=N, torch>=2.0), underscore (--local_rank=N, older torch), or "
        "auto (the default for a bare --local-rank-arg): the spelling the script's source "
        "declares, underscore when it names neither",
    )
    train.add_argument(
        "--apex-compat", choices=("auto", "on", "off"), default="auto", nargs="?", const="on",
        help="run the script under paijob's apex.amp/apex.parallel stand-in (python -m "
        "paijob.runtime.apex_compat); auto (default): when the script imports apex and real "
        "apex.amp is missing; a bare --apex-compat means on",
    )
    train.add_argument(
        "--precision", metavar="POLICY",
        help="fp32|fp16|bf16|O0..O3|apex:O0..apex:O3, exported to the workers as "
        "PAIJOB_PRECISION (read by the recipes and the apex stand-in)",
    )
    train.add_argument(
        "--master-timeout", type=float, default=600.0, metavar="SECONDS",
        help="how long non-zero nodes wait for the master's port (default: %(default)s)",
    )
    train.add_argument(
        "--grace-period", type=int, default=30, metavar="SECONDS",
        help="after SIGTERM/SIGINT or a failure, how long workers get before SIGKILL "
        "(default: %(default)s)",
    )
    train.add_argument(
        "--heartbeat-timeout", type=float, default=60.0, metavar="SECONDS",
        help="node 0 declares a silent peer lost after this long (default: %(default)s)",
    )
    train.add_argument("--log-dir", "--log_dir",
                       help="keep each worker's stdout/stderr under this folder")
    train.set_defaults(func=cmd_train)

    env = sub.add_parser(
        "env",
        help="print the computed layout (no torch import)",
        description="Print the layout paijob-runtime train would use, as shell exports or JSON.",
    )
    _add_layout_options(env)
    env.add_argument("--json", action="store_true", help="print JSON instead of export lines")
    env.set_defaults(func=cmd_env)
    return parser, train


def split_train_argv(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], list[str]]:
    """Split ``train`` arguments into ours and the training command.

    The command starts at the first token that is not one of our options (or
    their values), at ``-m``, right after ``--recipe NAME``, or after ``--``.
    """
    actions = parser._option_string_actions  # noqa: SLF001 - argparse has no public lookup
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return argv[:i], argv[i + 1 :]
        if token == "-m" or not token.startswith("-") or token == "-":
            return argv[:i], argv[i:]
        action = actions.get(token.split("=", 1)[0])
        if action is None:  # unknown option: let argparse complain about it
            return argv[: i + 1], argv[i + 1 :]
        takes_value = "=" not in token and action.nargs != 0
        if takes_value and action.nargs == "?":  # e.g. a bare --apex-compat
            takes_value = i + 1 < len(argv) and argv[i + 1] in (action.choices or ())
        i += 2 if takes_value else 1
        if action.dest == "recipe":  # the recipe's own options follow its name
            return argv[:i], argv[i:]
    return argv, []


def _layout(args: argparse.Namespace) -> tuple[DistEnv, int]:
    from paijob.runtime.probe import count_visible_gpus, find_free_port

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
    free_port = find_free_port()
    dist = compute_dist_env(environ, options, visible_gpus=gpus, free_port=free_port)
    check_nproc_fits(dist.nproc_per_node, len(os.sched_getaffinity(0)))
    return dist, gpus


def cmd_env(args: argparse.Namespace) -> int:
    dist, _ = _layout(args)
    if args.json:
        print(json.dumps(dist.describe(), indent=2))
        return 0
    for key, value in dist.node_env().items():
        print(f"export {key}={shlex.quote(value)}")
    ranks = ", ".join(
        f"LOCAL_RANK={i} RANK={dist.rank(i)}" for i in range(dist.nproc_per_node)
    )
    print(f"# per worker: {ranks}")
    return 0


def _positive_seconds(value: float, option: str) -> float:
    if not math.isfinite(value) or value <= 0:
        raise LaunchError(f"{option} must be a positive number of seconds, got {value}")
    return value


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


def cmd_train(args: argparse.Namespace) -> int:
    from paijob.runtime.launch import launch

    rest: list[str] = args.rest
    if args.recipe is not None:
        command = WorkerCommand(recipe=args.recipe, args=tuple(rest))
    elif rest and rest[0] == "-m":
        if len(rest) < 2:
            raise LaunchError("-m needs a module name: paijob-runtime train -m MODULE [ARGS...]")
        command = WorkerCommand(module=rest[1], args=tuple(rest[2:]))
    elif rest:
        command = WorkerCommand(script=rest[0], args=tuple(rest[1:]))
    else:
        raise LaunchError(
            "nothing to run: paijob-runtime train [OPTIONS] (SCRIPT | -m MODULE | --recipe NAME) "
            "[ARGS...]"
        )
    command = WorkerCommand(
        script=command.script, module=command.module, recipe=command.recipe,
        args=command.args, local_rank_arg=args.local_rank_arg, apex_compat=args.apex_compat,
    )
    _positive_seconds(args.master_timeout, "--master-timeout")
    _positive_seconds(args.heartbeat_timeout, "--heartbeat-timeout")
    if args.log_dir:
        _check_log_dir(args.log_dir)
    if args.grace_period < 0:
        raise LaunchError(f"--grace-period must be >= 0, got {args.grace_period}")
    if args.precision:
        from paijob.runtime.precision import parse_precision  # no torch at import

        parse_precision(args.precision, source="--precision")
        os.environ["PAIJOB_PRECISION"] = args.precision
    if args.mode == "horovod":
        return _train_horovod(args, command)
    dist, _ = _layout(args)
    return launch(
        dist,
        command,
        mode=args.mode,
        master_timeout=args.master_timeout,
        grace_period=args.grace_period,
        heartbeat_timeout=args.heartbeat_timeout,
        log_dir=args.log_dir,
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
    return launch_horovod(slot, command)


def main(argv: Sequence[str] | None = None) -> int:
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
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return exitcodes.CONFIG_ERROR
    try:
        return int(args.func(args) or 0)
    except PaijobError as error:
        print(f"paijob-runtime: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("paijob-runtime: interrupted", file=sys.stderr)
        return exitcodes.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
