"""``paijob validate``: check job YAML files against the OpenPAI protocol v2.

Every problem of every file is reported (``file:line: severity: path: message``),
then one summary line per file. Exit 0 when every file is valid (warnings
allowed), 2 when any is not.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from paijob.commands import _options

if TYPE_CHECKING:
    from paijob.validate.report import ValidationReport

DESCRIPTION = """\
Check OpenPAI job YAML files with the verdict of the OpenPAI server: the YAML
is read as its js-yaml reads it (YAML 1.2: 'no' is a string, 1e3 a number),
and every job the server refuses is an error (exit 2), every job it takes
exits 0. paijob's own concerns are warnings, except where paijob-runtime
provably cannot run the job (the message says why). The world size
(instances x processes per node) is printed.

  paijob validate job.yaml
  paijob render ddp | paijob validate -
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check job YAML files against the OpenPAI protocol",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("files", metavar="FILE", nargs="+", help="job YAML files ('-' reads stdin)")
    parser.add_argument(
        "--master-role",
        metavar="ROLE",
        help="role whose first task hosts the rendezvous (default: paijob-runtime's "
        "--master-role in the commands, else the first role)",
    )
    parser.add_argument(
        "--port-label",
        metavar="LABEL",
        help="port label paijob-runtime reads (default: its --port-label in the commands, else SynPort)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print problems only, no summary")
    parser.add_argument("-c", "--cluster", metavar="NAME",
                        help="judge role names by this cluster's OpenPAI version (asks its GET /api/v2/info; "
                             "--openpai-before-1.6 or its variable still decide when given)")
    _options.add_openpai_version_option(parser)
    parser.set_defaults(func=run)


def check(
    path: str, master_role: str | None = None, port_label: str | None = None,
    openpai_before_1_6: bool | None = None,
) -> ValidationReport:
    # imported here: building the CLI parser must not load YAML or the checks
    from paijob import api

    if path == "-":
        # bytes: a non-UTF-8 stdin is a one-line error, not a UnicodeDecodeError traceback
        stdin = getattr(sys.stdin, "buffer", None)
        data: str | bytes = stdin.read() if stdin is not None else sys.stdin.read()
        return api.validate("<stdin>", data, master_role=master_role, port_label=port_label,
                            openpai_before_1_6=openpai_before_1_6)
    return api.validate(path, master_role=master_role, port_label=port_label, openpai_before_1_6=openpai_before_1_6)


def run(args: argparse.Namespace) -> int:
    before = _options.openpai_before_1_6(args)
    if before is None and args.cluster:
        from paijob import api

        before = api.openpai_before_1_6(args.cluster)
        if before is None:  # say so: the rule applied was not the cluster's answer
            print(f"paijob: note: {api.unknown_version_note(args.cluster)}", file=sys.stderr)
    status = 0
    for path in args.files:
        report = check(path, args.master_role, args.port_label, before)
        for line in report.formatted_problems():
            print(line)
        if not args.quiet or not report.ok:
            print(report.summary())
        if not args.quiet and report.ok and report.install_route:
            print(f"  {report.install_route}")
        if not report.ok:
            status = 2
    return status
