"""``paijob list``: recent jobs, newest first."""

from __future__ import annotations

import argparse
from typing import Any

from paijob.commands import _common as common
from paijob.common import records
from paijob.openpai.jobstate import JOB_STATES


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("list", help="list your recent jobs",
                                   description="List jobs, newest first (your own unless --all-users).")
    parser.add_argument("--state", type=str.upper, choices=JOB_STATES, help="only jobs in this state")
    parser.add_argument("--limit", type=int, default=20, metavar="N", help="at most N jobs (default 20)")
    parser.add_argument("--all-users", action="store_true", help="every user's jobs, not only yours")
    common.add_cluster_options(parser)
    common.add_output_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    client = common.client_for(args, start_local=False)
    from paijob import api

    jobs = api.list_jobs(client, state=args.state, limit=args.limit, all_users=args.all_users)
    if common.print_data(jobs, args.output):
        return 0
    if not jobs:
        print("no jobs" + (f" in state {args.state}" if args.state else ""))
        return 0
    wide = args.output == "wide"
    rows = [["ID", "STATE", "SUBMITTED", "DURATION", "EXIT", "TASKS", "GPUS"]
            + (["RETRIES", "VIRTUAL CLUSTER", "EXECUTION"] if wide else [])]
    for job in jobs:
        code = job.get("appExitCode")
        rows.append([
            f"{job['username']}~{job['name']}",
            str(job["state"]) + _marks(job),
            common.when(job.get("submissionTime")),
            common.duration(job.get("launchedTime"), job.get("completedTime")) if job.get("launchedTime") else "-",
            "-" if code is None else str(code),
            str(job.get("totalTaskNumber", "-")),
            str(job.get("totalGpuNumber", "-")),
        ] + ([str(job.get("retries", 0)), str(job.get("virtualCluster") or "-"),
              str(job.get("executionType") or "-")] if wide else []))
    common.table(rows)
    return 0


def _marks(job: dict[str, Any]) -> str:
    """What paijob-runtime's doctors say of a running job on the local cluster (its list entry carries it):
    ``RUNNING stalled``, ``RUNNING slow-rank``; `paijob status` says the whole line."""
    marks = ["stalled"] if common.served_record(records.StallRecord, job.get("paijobStall")) is not None else []
    slow = job.get("paijobSlowRank")
    marks += ["slow-rank"] if isinstance(slow, dict) and isinstance(slow.get("line"), str) else []
    return "".join(f" {mark}" for mark in marks)
