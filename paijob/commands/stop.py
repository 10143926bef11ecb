"""``paijob stop``: stop a job (every task is killed)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from paijob.commands import _common as common


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("stop", help="stop a job",
                                   description="Ask the cluster to stop a job; --wait until it has stopped. A job that "
                                               "has already ended is reported as 'already ended (STATE)', exit 0; "
                                               "a job that does not exist is an error.")
    parser.add_argument("job_id", metavar="ID", help="job id USER~NAME (or just NAME for your own jobs)")
    parser.add_argument("--wait", action="store_true", help="wait until the job has ended")
    common.add_cluster_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from paijob import api

    client = common.client_for(args, start_local=False)  # a local cluster that is down runs no job
    result = api.stop(client, args.job_id)
    job_id = result.job_id
    if result.already_ended:
        print(f"{job_id} already ended ({result.already_ended}); nothing to stop", file=sys.stderr)
        return 0
    print(f"stop requested for {job_id}", file=sys.stderr)
    if args.wait:
        detail = api.wait(client, job_id, poll=0.5)
        print(common.outcome_line(job_id, detail), file=sys.stderr)
    return 0
