"""``paijob stacks``: every rank's Python stack of a running job, printed into its logs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from paijob.commands import _common as common


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "stacks", help="print every rank's stack of a running job into its logs (it goes on)",
        description="Ask every node of a running job for its ranks' Python stacks (SIGUSR1 to "
                    "paijob-runtime); they appear in the job's logs (paijob logs ID) and the job goes "
                    "on. The local cluster only: on OpenPAI, ssh into a task (the ssh plugin) and "
                    "kill -USR1 paijob-runtime's pid.")
    parser.add_argument("job_id", metavar="ID", help="job id USER~NAME (or just NAME for your own jobs)")
    common.add_cluster_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from paijob import api

    client = common.client_for(args, start_local=False)
    job_id, count = api.stacks(client, args.job_id)
    print(f"asked {count} node(s) of {job_id} for every rank's stack; read them with "
          f"`paijob logs {job_id}`", file=sys.stderr)
    return 0
