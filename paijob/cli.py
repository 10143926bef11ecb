"""The ``paijob`` command: one sub-command per verb, each in ``paijob.commands``.

Verb modules are imported only to build the parser; none of them may import
torch, so ``paijob --help`` and ``paijob render`` stay fast on any machine.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from paijob import __version__
from paijob.common import contract

# verb -> module that registers it; `paijob --help` lists them in this order.
COMMANDS: dict[str, str] = {
    "init": "paijob.commands.init",
    "render": "paijob.commands.render",
    "validate": "paijob.commands.validate",
    "templates": "paijob.commands.templates",
    "submit": "paijob.commands.submit",
    "run": "paijob.commands.run",
    "status": "paijob.commands.status",
    "logs": "paijob.commands.logs",
    "cp": "paijob.commands.cp",
    "list": "paijob.commands.listing",
    "stop": "paijob.commands.stop",
    "stacks": "paijob.commands.stacks",
    "local": "paijob.commands.local",
    "cluster": "paijob.commands.cluster",
    "login": "paijob.commands.login",
    "completion": "paijob.commands.completion",
}

DESCRIPTION = f"""\
Render, validate, submit and follow OpenPAI jobs for distributed PyTorch.

typical session:
  paijob init demo && cd demo && paijob run --local
                                              start a project and run it on this machine
  paijob templates                            list the built-in job templates
  paijob render ddp --set instances=2 --output-file job.yaml
                                              render an OpenPAI job YAML
  paijob validate job.yaml                    check it before it waits in a queue
  paijob run job.yaml --local                 run it on this machine's local cluster
  paijob cluster add prod --url URL --token-env PROD_PAI_TOKEN
                                              tell paijob about a real cluster
  paijob submit job.yaml -c prod --wait       submit it and follow its tasks
  paijob logs ID -f                           follow the tasks' logs
  paijob cp ID:result.json .                  copy a file the job wrote (its {contract.OUTPUT_DIR})
"""


class VerbParser(argparse.ArgumentParser):
    """A verb's parser: an option it does not know is its own error, shown with its own usage.

    argparse leaves a sub-parser's unknown arguments to the top-level parser,
    which then prints ``usage: paijob [-h] ...``: no help for someone who
    mistyped an option of ``paijob logs``. Nested actions (``paijob cluster
    add``) inherit the class, so the innermost verb reports.

    No abbreviations: a prefix or a typo must not reach another option
    (``cluster add --token X`` was taken as ``--token-env X``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._did_you_mean(extras)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        """One line, not argparse's whole usage block: what is wrong, and where the usage is."""
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")

    def _did_you_mean(self, extras: Sequence[str]) -> str:
        """``; did you mean --set?`` for a mistyped option."""
        import difflib

        known = [option for action in self._actions for option in action.option_strings
                 if action.help != argparse.SUPPRESS]
        for extra in extras:
            close = difflib.get_close_matches(extra.split("=", 1)[0], known, n=1)
            if extra.startswith("-") and close:
                return f"; did you mean {close[0]}?"
        return ""


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The parser for ``verb`` alone when it is known, else for every verb.

    Importing only the verb being run keeps ``paijob render`` from paying for
    the cluster verbs' imports; ``paijob --help`` and typos still see them all.
    """
    parser = argparse.ArgumentParser(
        prog="paijob",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"paijob {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=VerbParser)
    modules = [COMMANDS[verb]] if verb in COMMANDS else list(COMMANDS.values())
    for module_name in modules:
        importlib.import_module(module_name).register(subparsers)
    return parser


def _verb(argv: Sequence[str]) -> str | None:
    """The first word that is not an option (paijob's own options take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_verb(words))
    args = parser.parse_args(words)
    if args.verbose:
        # Only then: the client side logs nothing above DEBUG that Python's
        # last-resort handler would not print anyway, and `import logging`
        # is a measurable share of `paijob render`'s start-up.
        import logging

        logging.basicConfig(level=logging.DEBUG, format="%(message)s")
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    from paijob.common.guard import run_guarded

    return run_guarded("paijob", lambda: args.func(args), shown=_shown)


def _shown(message: str) -> str:
    """An error message as the terminal shows it: a job's control sequences escaped (``termsafe``)."""
    from paijob import termsafe

    return termsafe.message(message) if termsafe.is_terminal(sys.stderr) else message

if __name__ == "__main__":
    sys.exit(main())
