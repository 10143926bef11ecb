"""``paijob-runtime``'s command line: its options, and where the training command starts.

Why a module of its own: ``paijob validate`` and ``paijob render`` read the
``paijob-runtime train`` calls in a job's commands with this very parser, so
that what the runtime accepts and what validate accepts cannot drift apart.
They run on the client, where start-up time counts and torch must never be
imported; so this module imports nothing but argparse and paijob's names (no
torch, no layout code, no launcher). :mod:`paijob.runtime.cli` builds on it.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from paijob.common import contract
from paijob.openpai.names import DEFAULT_PORT_LABEL

MODES = ("per-gpu", "per-node", "dataparallel", "horovod")
LOCAL_RANK_STYLES = ("auto", "dash", "underscore")
BACKENDS = ("auto", "nccl", "gloo")
DEFAULT_HANG_TIMEOUT = 600.0
DEFAULT_HANG_FIRST_TIMEOUT = 1800.0
DEFAULT_HANG_HARD_LIMIT = 3.0
# The calibrated timeout (the default --hang-timeout only): this multiple of the longest wait
# seen inside one torch.distributed call, at least this many seconds.
HANG_CALIBRATION_MULTIPLE = 10.0
HANG_CALIBRATION_FLOOR = 120.0
# More workers than this per usable CPU core is a typo (--nproc-per-node 100000), not a plan:
# each worker is a whole python process with torch loaded.
MAX_WORKERS_PER_CORE = 4
# --max-restarts: torchrun's name and meaning (restarts of every node's workers inside the attempt). Default 0,
# as torchrun's: a restart runs the script again from its start, which only a script that resumes from its
# checkpoint turns into recovery (docs/runtime/faults.md, "Recovery"). More than MAX_RESTARTS in one attempt is
# a loop, not recovery: a typo (--max-restarts 1000000), refused before anything starts.
DEFAULT_MAX_RESTARTS = 0
MAX_RESTARTS = 100

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
exit codes: 0 success; 1-127 the failing worker's own exit code; 124 hang (see
--hang-timeout); 128+N a worker killed by signal N; 2 configuration error; 143
infrastructure failure (master unreachable, peer or store lost) or SIGTERM, which
OpenPAI retries. SIGUSR1 prints every rank's stack on every node and goes on.
"""


VERSION_FLAG = "--version"
VERBOSE_FLAGS = ("-v", "--verbose")
# What may stand between ``paijob-runtime`` and its sub-command: its own options, none of which takes a value.
GLOBAL_FLAGS = ("-h", "--help", VERSION_FLAG, *VERBOSE_FLAGS)

_TRAIN_PARSER: dict[str, Any] = {
    "description": "Launch this node's share of the training world.",
    "epilog": EXIT_CODES_HELP,
    "usage": "paijob-runtime train [OPTIONS] (SCRIPT | -m MODULE | --recipe NAME) [ARGS...]",
    "formatter_class": argparse.RawDescriptionHelpFormatter,
    "allow_abbrev": False,  # a prefix of an option is an error, never that option (nor a neighbour of it)
}


def workers_per_node(mode: str, requested: int | None, gpus: int) -> int:
    """Worker processes of one task: the world-size unit that paijob validate reports too.

    ``dataparallel`` is one process driving every GPU of the node, so 1; the
    other modes start ``--nproc-per-node`` workers, by default one per GPU.
    """
    if mode == "dataparallel":
        return 1
    return requested or gpus or 1


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
        "(default: the first participating role, in the order of the job's taskRoles)"
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
        help=f"process-group backend exported as {contract.BACKEND} (auto: nccl with GPUs, else gloo)",
    )


def _add_train_options(train: argparse.ArgumentParser) -> None:
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
        f"{contract.PRECISION} (read by the recipes and the apex stand-in)",
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
    hang = train.add_argument_group(
        "hang watch", "a sampler in every worker sees whether it makes progress and where it is; "
        "node 0 names the stuck rank(s) with their stacks and ends the job (exit 124). Watched: "
        "per-gpu, dataparallel, per-node (in each mp.spawn child); not horovod. Each default also comes from the environment variable named "
        "(e.g. the job's env: values)")
    hang.add_argument(
        "--hang-timeout", type=float, metavar="SECONDS",
        help=f"no rank made progress for this long: a hang; 0 turns the watch off "
        f"(default: ${contract.HANG_TIMEOUT} or {DEFAULT_HANG_TIMEOUT:g}; when neither is set, "
        f"a stall with every rank inside a torch.distributed call is judged on "
        f"{HANG_CALIBRATION_MULTIPLE:g} x the longest wait seen in one, at least "
        f"{HANG_CALIBRATION_FLOOR:g}, at most the timeout)",
    )
    hang.add_argument(
        "--hang-first-timeout", type=float, metavar="SECONDS",
        help=f"the timeout until every rank has completed a collective (data loading, "
        f"torch.compile; default: ${contract.HANG_FIRST_TIMEOUT} or {DEFAULT_HANG_FIRST_TIMEOUT:g})",
    )
    hang.add_argument(
        "--hang-hard-limit", type=float, metavar="N",
        help=f"a straggler (busy while the others wait) is reported at the timeout and ended at "
        f"N times it (default: ${contract.HANG_HARD_LIMIT} or {DEFAULT_HANG_HARD_LIMIT:g})",
    )
    recovery = train.add_argument_group(
        "recovery", "a failed worker or a hang the hang watch names restarts every node's workers together, "
        "inside the same OpenPAI attempt (per-gpu mode); the same failure twice in a row, or one that cannot "
        "recover (exit 127, a bad argument, a missing module), is not restarted")
    recovery.add_argument(
        "--max-restarts", "--max_restarts", metavar="N", default=str(DEFAULT_MAX_RESTARTS),
        help=f"restarts of the workers before the job fails, as torchrun's (default: {DEFAULT_MAX_RESTARTS}: a "
        f"restart runs the script again, which recovers only a script that resumes from its checkpoint; at "
        f"most {MAX_RESTARTS})",
    )
    recovery.add_argument(
        "--min-nodes", "--min_nodes", metavar="M",
        help="go on with at least M nodes when a node other than 0 is lost (default: every node); needs "
        "--max-restarts and a job rendered for it (extras.gangAllocation: false, completion.minFailedInstances)",
    )
    train.add_argument("--log-dir", "--log_dir",
                       help="keep each worker's stdout/stderr under this folder (default: "
                       "not kept; the runtime's own copies are removed when it exits)")


def max_restarts_error(text: str) -> str | None:
    """What is wrong with ``--max-restarts TEXT`` (one line: what, and how to fix it); None: nothing."""
    value = text.strip()
    if not value.isdigit():
        return (f"--max-restarts must be a whole number of restarts from 0 to {MAX_RESTARTS}, got {text!r} "
                f"(e.g. --max-restarts 2; 0 turns restarts off)")
    if int(value) > MAX_RESTARTS:
        return (f"--max-restarts {int(value)} is more than {MAX_RESTARTS} restarts in one attempt: a job that "
                f"fails that often has a bug; give at most {MAX_RESTARTS} (2 or 3 covers a flaky worker)")
    return None


def min_nodes_error(text: str | None, nodes: int | None) -> str | None:
    """What is wrong with ``--min-nodes TEXT`` for a world of ``nodes`` tasks (None: not known here); None:
    nothing (or not given)."""
    if text is None:
        return None
    value = text.strip()
    if not value.isdigit() or int(value) < 1:
        return f"--min-nodes must be a whole number of nodes, at least 1, got {text!r} (e.g. --min-nodes 1)"
    if nodes is not None and int(value) > nodes:
        return (f"--min-nodes {int(value)} is more than the {nodes} node(s) of this job: give at most {nodes} "
                f"(the nodes that may go on after a node other than 0 is lost)")
    return None


def build_parser() -> argparse.ArgumentParser:
    """The whole ``paijob-runtime`` parser."""
    return build_parsers()[0]


def build_parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The ``paijob-runtime`` parser and its ``train`` sub-parser.

    torchrun's underscore spellings of the options both share (``--nproc_per_node``,
    ``--node_rank``, ``--master_addr``, ``--master_port``, ``--log_dir``) are aliases.
    The sub-command is ``args.command`` (``train`` or ``env``).
    """
    # for --version only: validate's train parser (every render) needs none of it
    from paijob.common.jobversion import version_line

    parser = argparse.ArgumentParser(
        prog="paijob-runtime",
        description=DESCRIPTION,
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(VERSION_FLAG, action="version", version=version_line(os.environ))
    parser.add_argument(*VERBOSE_FLAGS, action="store_true",
                        help="log debug details, torch's elastic agent's log lines included")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    train = sub.add_parser("train", help="launch this node's workers", **_TRAIN_PARSER)
    _add_train_arguments(train)

    show = sub.add_parser(
        "env",
        help="print the computed layout (no torch import)",
        description="Print the layout paijob-runtime train would use, as shell exports or JSON.",
        allow_abbrev=False,
    )
    _add_layout_options(show)
    show.add_argument("--json", action="store_true", help="print JSON instead of export lines")
    return parser, train


def build_train_parser() -> argparse.ArgumentParser:
    """``paijob-runtime train``'s parser alone, the one ``build_parsers`` returns second.

    ``paijob validate`` (and so every ``paijob render``) reads the ``train`` calls
    in a job's commands with it: building the whole ``paijob-runtime`` parser
    around it would be a third more argparse work for options validate skips
    (``GLOBAL_FLAGS``).
    """
    train = argparse.ArgumentParser(prog="paijob-runtime train", **_TRAIN_PARSER)
    _add_train_arguments(train)
    return train


def _add_train_arguments(train: argparse.ArgumentParser) -> None:
    _add_layout_options(train)
    _add_train_options(train)


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
