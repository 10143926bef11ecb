"""``paijob cp JOB:PATH DEST``: copy a file or folder out of a job's output folder (``PAIJOB_OUTPUT_DIR``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from paijob.common import contract
from paijob.errors import EXIT_JOB_FAILED


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "cp",
        help=f"copy a file or folder out of a job's output folder ({contract.OUTPUT_DIR})",
        description=f"Copy JOB:PATH, a file or folder inside the job's output folder (the {contract.OUTPUT_DIR} "
                    "its tasks share, kept across retries), to DEST on this machine, like `cp -r`. JOB is "
                    "NAME or USER~NAME as in `paijob status`; 'JOB:.' copies the folder's contents into DEST. "
                    "A source keeps the name it was given (a link too); a file already in DEST is never "
                    "replaced unless DEST names it or --force; sparse files stay sparse; a big copy is announced "
                    "with its size first, and one that would not fit is refused. "
                    "Links out of the output folder, dangling links, loops and FIFOs are listed and skipped "
                    "(links inside are copied as links); a file that changes while copied is listed, not "
                    "half-copied; then the exit is 1, with the list. On the local cluster, reads its state dir directly (no server needed); on a real "
                    "cluster, a job with `storage: NAME` is read where this machine mounts that storage "
                    "(`paijob cluster add ... --mount NAME=PATH`), and any other says where its files are.",
    )
    parser.add_argument("source", metavar="JOB:PATH", help="e.g. demo1:checkpoints/epoch-2.pt")
    parser.add_argument("dest", metavar="DEST", nargs="?",
                        help="an existing folder (copied into), a new path in an existing folder, or a file to "
                             "replace (named: replaced)")
    parser.add_argument("--list", action="store_true",
                        help="list what JOB:PATH holds (paths, sizes), copying nothing; no DEST")
    parser.add_argument("--force", action="store_true",
                        help="replace files already in DEST, and copy even when DEST's free space looks too small")
    parser.add_argument("--raw", action="store_true",
                        help="list file names as they are (by default, on a terminal, their control characters "
                             "are shown escaped: the job chose the names)")
    parser.add_argument("-c", "--cluster", metavar="NAME", help="cluster profile (default: the project's or current)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from paijob import api

    if args.list:
        return _list(args)
    if args.dest is None:
        raise api.PaijobError("cp: give DEST (where to copy to), or --list to see what JOB:PATH holds")
    shown = api.terminal_text(sys.stderr, raw=args.raw, names=True)

    def preview(plan: api.CopyPlan) -> None:
        if plan.big:
            print(f"paijob cp: copying {plan.files} file(s), {api.human_size(plan.size)} ({api.human_size(plan.data)} of "
                  f"data; holes stay holes) to {shown(str(plan.target))}", file=sys.stderr)

    report = api.copy_output(args.source, args.dest, cluster=args.cluster, force=args.force, on_plan=preview)
    print(f"copied {shown(args.source)} to {shown(str(report.target))} ({report.files} file(s))", file=sys.stderr)
    if report.skipped:
        listed = ", ".join(map(shown, report.skipped[:10])) + (f" and {len(report.skipped) - 10} more"
                                                               if len(report.skipped) > 10 else "")
        print(f"paijob cp: skipped {len(report.skipped)}: {listed}", file=sys.stderr)
        return EXIT_JOB_FAILED  # not all of it came: a script must not take it for a whole copy
    return 0


def _list(args: argparse.Namespace) -> int:
    from paijob import api

    if args.dest is not None:
        raise api.PaijobError("cp --list copies nothing: give JOB[:PATH] alone, without DEST")
    shown = api.terminal_text(sys.stdout, raw=args.raw, names=True)
    entries, more = api.list_output(args.source, cluster=args.cluster)
    for entry in entries:
        size = api.human_size(entry.size) if entry.kind == "file" else entry.kind
        print(f"{size:>10}  {shown(entry.path)}{'/' if entry.kind == 'folder' else ''}")
    if more:
        print(f"paijob cp: the first {len(entries)} entries shown; list a folder inside (JOB:PATH) for more",
              file=sys.stderr)
    return 0
