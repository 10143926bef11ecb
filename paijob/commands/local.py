"""``paijob local up|down|status|open|prune|rm``: the built-in OpenPAI-compatible cluster on this machine."""

from __future__ import annotations

import argparse
import sys
from typing import Any
from urllib.parse import urlsplit

from paijob.commands import _common as common
from paijob.common import contract
from paijob.errors import EXIT_LOCAL_NOT_RUNNING


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "local",
        help="start, stop or inspect the local OpenPAI-compatible cluster",
        description="The local cluster serves OpenPAI's REST API on 127.0.0.1 and runs each task as a "
                    "local process with the PAI_* environment OpenPAI gives it. Its jobs, states and logs "
                    f"live in its state dir (${contract.LOCAL_STATE_DIR}, else $XDG_STATE_HOME/paijob/local, "
                    "else ~/.local/state/paijob/local) and survive restarts.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    up = actions.add_parser("up", help="start the local cluster in the background (no-op when it runs)")
    up.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    up.set_defaults(func=run_up)
    down = actions.add_parser("down", help="stop the local cluster (running jobs are stopped)")
    down.set_defaults(func=run_down)
    status = actions.add_parser("status", help="is it running, where, and how many jobs")
    common.add_output_option(status)
    status.set_defaults(func=run_status)
    portal = actions.add_parser("open", help="open the local cluster's web portal (jobs, logs, progress charts)",
                                description="Print a link to the local cluster's web portal and open it in a "
                                            "browser. The link logs one browser in: it holds a one-time code "
                                            "that works within 2 minutes, never the cluster's token; the "
                                            "browser then stays logged in (a cookie) for 12 hours.")
    portal.add_argument("--no-browser", action="store_true", help="only print the link")
    portal.set_defaults(func=run_open)
    prune = actions.add_parser("prune", help="remove finished jobs' work folders and logs (and outputs)",
                               description="Remove the work folders and logs of finished local jobs, and "
                                           "workdir snapshots no active job uses. Job records stay (names are "
                                           "never reused); output folders go only with --outputs.")
    prune.add_argument("--older-than", default="0s", metavar="DURATION",
                       help="only jobs that finished at least this long ago, e.g. 7d, 12h (default: all)")
    prune.add_argument("--outputs", action="store_true",
                       help=f"also remove the jobs' output folders ({contract.OUTPUT_DIR}: checkpoints, results)")
    prune.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    prune.set_defaults(func=run_prune)
    remove = actions.add_parser("rm", help="remove finished jobs: their records, folders, logs and outputs",
                                description="Remove finished local jobs, each one whole: its record (so its "
                                            "name can be used again), its work folders, logs and output folder "
                                            f"({contract.OUTPUT_DIR}). A job that has not finished is refused: "
                                            "stop it first. Its folder on a storage (--set storage=) stays.")
    remove.add_argument("jobs", metavar="JOB", nargs="+", help="job id USER~NAME (or just NAME for your own)")
    remove.set_defaults(func=run_rm)
    parser.set_defaults(func=lambda args: (parser.print_help(sys.stderr), 2)[1])


def run_rm(args: argparse.Namespace) -> int:
    from paijob import api

    for job in args.jobs:
        report = api.remove_local_job(job)
        print(f"removed {report.jobs[0]} ({api.human_size(report.bytes)})")
    return 0


def run_prune(args: argparse.Namespace) -> int:
    from paijob import api

    report = api.prune_local(args.older_than, outputs=args.outputs, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for path in report.paths:
        print(f"{verb} {path}")
    print(f"{verb} {api.human_size(report.bytes)} of {len(report.jobs)} finished job(s)", file=sys.stderr)
    return 0


def run_open(args: argparse.Namespace) -> int:
    from paijob import api

    url = api.portal_link(on_note=common.note)
    print(url)
    if args.no_browser:
        return 0
    if not api.open_in_browser(url):
        port = urlsplit(url).port
        print(f"paijob: no graphical browser here: open the link above in one within 2 minutes (from another "
              f"machine: `ssh -L {port}:127.0.0.1:{port} {_this_host()}` first, then the link there)",
              file=sys.stderr)
    return 0


def _this_host() -> str:
    """This machine as ssh is told it (``user@host``)."""
    import getpass
    import socket

    try:
        who = getpass.getuser() + "@"
    except (KeyError, OSError):
        who = ""
    return who + socket.gethostname()


def run_up(args: argparse.Namespace) -> int:
    from paijob import api

    info = api.local_up(port=args.port)
    verb = "already running" if info.get("already") else "started"
    print(f"local cluster {verb} at {info['url']} (pid {info['pid']}, state {info['state_dir']})")
    return 0


def run_down(args: argparse.Namespace) -> int:
    from paijob import api

    if api.local_down():
        print("local cluster stopped")
    else:
        print("local cluster was not running")
    return 0


def run_status(args: argparse.Namespace) -> int:
    from paijob import api

    data = api.local_status()
    if common.print_data(data, args.output):
        return 0
    directory = data["state_dir"]
    if not data["running"]:
        print(f"local cluster is not running (state {directory}); start it with `paijob local up`")
        return EXIT_LOCAL_NOT_RUNNING
    jobs = ", ".join(f"{n} {state.lower()}" for state, n in sorted(data["jobs"].items())) or "no jobs"
    print(f"local cluster running at {data['url']} (pid {data['pid']}, state {directory}): {jobs}")
    return 0
