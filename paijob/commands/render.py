"""``paijob render``: a job template plus values → a checked OpenPAI job YAML.

Also the render options that ``paijob submit`` / ``paijob run`` reuse,
``add_render_options(parser)``. Rendering itself is ``paijob.render.templating.render``
(what ``paijob.api.render`` wraps), imported when the verb runs, so that building
the ``paijob`` parser (every command, ``--help``) never pays for Jinja, YAML or the
protocol checks. This verb calls it directly rather than through ``paijob.api``:
importing the API module creates its request and result dataclasses, about 2 ms
of every ``paijob render``, which needs none of them.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from paijob.commands import _options

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["add_render_options", "register", "write_atomic"]

OUTPUT_FORMATS = ("yaml", "json")

DESCRIPTION = """\
Render a job template with values into an OpenPAI protocol-v2 job YAML and
check it with the same rules as 'paijob validate' before printing it.

Values layer like Helm: template defaults < each -f file in order < each
--set / --set-string in order. Examples:

  paijob render ddp --set instances=4 --set gpu=8 --output-file job.yaml
  paijob render apex -f my.values.yaml --set optLevel=O1
  paijob render ./mytemplate.yaml.j2 -f values.yaml
"""


class _OrderedSetAction(argparse.Action):
    """Collect --set and --set-string into one list, in command-line order."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        items = list(getattr(namespace, self.dest, None) or [])
        kind = "set-string" if option_string == "--set-string" else "set"
        items.append((kind, values))
        setattr(namespace, self.dest, items)


def add_render_options(parser: argparse.ArgumentParser) -> None:
    """Add ``-f/--values``, ``--set`` and ``--set-string`` to ``parser``.

    The TEMPLATE positional is the caller's (``paijob render`` names it
    ``template``; ``paijob submit`` / ``run`` name it ``job``). After parsing:
    ``args.values`` (list of paths) and ``args.sets`` (list of
    ``("set" | "set-string", "key=value")`` in command-line order), which is
    what ``paijob.api.render`` (and ``paijob.render.templating.render``) takes.
    """
    parser.add_argument(
        "-f",
        "--values",
        metavar="FILE",
        action="append",
        default=[],
        help="values file layered over the template defaults (repeatable; later wins)",
    )
    parser.add_argument(
        "--set",
        dest="sets",
        metavar="KEY=VALUE",
        action=_OrderedSetAction,
        default=[],
        help="set one value, e.g. --set instances=4 --set tensorboard.enabled=true "
        "(typed as YAML: numbers, true/false, null, [lists]; repeatable; later wins)",
    )
    parser.add_argument(
        "--set-string",
        dest="sets",
        metavar="KEY=VALUE",
        action=_OrderedSetAction,
        help="like --set, but the value is always a string (e.g. --set-string name=0042)",
    )
    _options.add_openpai_version_option(parser)
    parser.add_argument(
        "--allow-unknown-values",
        action="store_true",
        help="a value the template does not read is a warning, not an error (for a values file shared by "
        "several templates); built-in templates otherwise refuse it, since a typo such as instnaces=2 "
        "would render the job without it",
    )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "render",
        help="render a job template into an OpenPAI job YAML",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "template",
        metavar="TEMPLATE",
        help="built-in template name (see 'paijob templates') or a path to a .yaml.j2 file",
    )
    add_render_options(parser)
    parser.add_argument(
        "-o",
        "--output",
        metavar="FORMAT",
        help="yaml (default) or json, printed on stdout; any other value is read as a file name "
        "(deprecated: use --output-file)",
    )
    parser.add_argument(
        "--output-file",
        metavar="FILE",
        help="write the job YAML to FILE instead of stdout: a regular file is replaced "
        "atomically (its permissions kept); a symlink is written through, atomically at its "
        "target; a device or FIFO (/dev/stdout, a pipe) is written in place",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from paijob.render import templating

    result = templating.render(args.template, args.values, args.sets, allow_unknown=args.allow_unknown_values,
                               openpai_before_1_6=_options.openpai_before_1_6(args))
    report = result.report
    for problem in report.warnings:
        print(f"paijob: {problem.format(report.source)}", file=sys.stderr)
    output_file = args.output_file
    if args.output and args.output not in OUTPUT_FORMATS:
        print(f"paijob: note: -o FILE is deprecated (-o now names a format: {', '.join(OUTPUT_FORMATS)}); "
              f"use --output-file {args.output}", file=sys.stderr)
        output_file = output_file or args.output
    if output_file:
        write_atomic(output_file, result.text)
        print(f"wrote {output_file} — {report.summary()}", file=sys.stderr)
    elif args.output == "json":
        import json

        # default=str: a YAML date (parameters: {day: 2024-01-02}) is an object, not JSON
        sys.stdout.write(json.dumps(result.job, indent=2, default=str) + "\n")
    else:
        sys.stdout.write(result.text)
    return 0


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` as ``-o`` promises: regular files atomically (mode kept),
    through a symlink to its target, into a device or FIFO in place
    (``paijob.common.safefile``, as ``paijob.api.write_text``)."""
    from paijob.common.safefile import write_text

    write_text(path, text)
