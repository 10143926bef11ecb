"""The ``paijob`` command: one sub-command per verb, each in ``paijob.commands``.

Verb modules are imported only to build the parser; none of them may import
torch, so ``paijob --help`` and ``paijob render`` stay fast on any machine.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from paijob import __version__
from paijob.errors import PaijobError

# Order here is the order ``paijob --help`` lists the verbs in.
COMMAND_MODULES: tuple[str, ...] = (
    "paijob.commands.render",
    "paijob.commands.validate",
    "paijob.commands.templates",
    "paijob.commands.submit",
    "paijob.commands.run",
    "paijob.commands.status",
    "paijob.commands.logs",
    "paijob.commands.listing",
    "paijob.commands.stop",
    "paijob.commands.local",
    "paijob.commands.cluster",
    "paijob.commands.login",
)

DESCRIPTION = """\
Render, validate, submit and follow OpenPAI jobs for distributed PyTorch.

typical session:
  paijob templates                       list the built-in job templates
  paijob render ddp --set instances=2    print an OpenPAI job YAML
  paijob validate job.yaml               check a job before it waits in a queue
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="paijob",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"paijob {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except PaijobError as error:
        print(f"paijob: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("paijob: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
