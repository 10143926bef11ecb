"""``paijob run``: submit a job, follow its logs, and exit with its result.

``paijob run ddp --local -f values.yaml`` starts the local cluster when it is
down, submits under a unique name (so reruns work), prints every task's log
lines prefixed role/index, and exits 0 when the job SUCCEEDED, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from paijob.commands import _cluster as common
from paijob.commands import submit


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="submit a job, follow its logs, exit with its result (--local: on this machine)",
        description="Render/validate/submit a job under a unique name, print its tasks' logs as they come "
                    "(prefixed role/index) and exit 0 if it SUCCEEDED, 1 otherwise. --local runs it on the "
                    "built-in local cluster, started when needed.",
    )
    submit.add_job_source(parser)
    parser.add_argument("--local", action="store_true", help="run on the local cluster (same as -c local)")
    parser.add_argument("--name", metavar="N", help="base job name (a unique suffix is always added)")
    common.add_cluster_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.local:
        args.cluster = "local"
    args.unique_suffix = True
    text, _ = submit.prepare(args)
    client = common.client_for(args)
    job_id = client.submit(text)
    print(f"paijob: submitted {job_id}", file=sys.stderr)
    if client.cluster_name != "local":
        print(f"paijob: web portal {client.web_link(job_id)}", file=sys.stderr)
    follower = common.LogFollower(client, job_id)
    try:
        detail = follower.follow()
    except KeyboardInterrupt:
        print(f"\npaijob: interrupted; stopping {job_id}", file=sys.stderr)
        client.stop(job_id)
        raise
    print(f"paijob: {common.outcome_line(job_id, detail)}", file=sys.stderr)
    if client.cluster_name == "local":
        print(f"paijob: `paijob logs {job_id} -c local` shows it again; the local cluster keeps "
              "running (`paijob local down` stops it)", file=sys.stderr)
    return 0 if detail["jobStatus"]["state"] == "SUCCEEDED" else 1
