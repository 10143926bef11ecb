"""``paijob logs``: task logs, each line prefixed role/index; -f follows until the job ends."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from paijob.commands import _common as common
from paijob.errors import EXIT_JOB_FAILED, EXIT_OK, PaijobError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("logs", help="print (or follow) the logs of a job's tasks",
                                   description="Print the logs of every task of a job (or one role / index), "
                                               "each line prefixed role/index. -f follows until the job ends and "
                                               "exits 0 if it SUCCEEDED, 1 otherwise.")
    parser.add_argument("job_id", metavar="ID", help="job id USER~NAME (or just NAME for your own jobs)")
    parser.add_argument("--role", "-r", metavar="R", help="only tasks of this role")
    parser.add_argument("--index", "-i", type=int, metavar="I", help="only the task with this index")
    parser.add_argument("--stream", choices=("all", "stdout", "stderr"), default="all",
                        help="which output (default all: stdout and stderr interleaved)")
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    parser.add_argument("--attempt", type=int, metavar="N",
                        help="the logs of job attempt N (0 is the first; default: the latest, after the logs of "
                             "the earlier attempts this command reads as they end), as `paijob status --attempt N`")
    parser.add_argument("--no-prefix", action="store_true", help="print lines without the role/index prefix")
    parser.add_argument("--tail", type=int, metavar="N",
                        help="only the last N lines of each task (with -f: then follow the new ones)")
    parser.add_argument("--rank", type=int, metavar="N",
                        help="only the lines of global rank N (paijob-runtime prefixes them [rankN]:)")
    parser.add_argument("--timestamps", action="store_true",
                        help="prefix each line with the UTC time it was written (the local cluster records it); "
                             "on OpenPAI, whose logs carry no times, the time paijob read it")
    common.add_raw_option(parser)
    common.add_cluster_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from paijob import api

    if args.attempt is not None and (args.attempt < 0 or args.follow):
        raise PaijobError(f"--attempt {args.attempt}: give a job attempt, 0 or more (paijob status lists them), "
                          f"without -f (an earlier attempt has ended; -f follows the latest)")
    client = common.client_for(args, start_local=False)
    job_id = client.job_id(args.job_id)
    follower = api.follow_logs(client, job_id, role=args.role, index=args.index, stream=args.stream,
                               prefix=not args.no_prefix, rank=args.rank, timestamps=args.timestamps,
                               tail=args.tail, raw=args.raw, on_note=common.note)
    detail = client.get_job(job_id, attempt=args.attempt)
    follower.check(detail)  # a role or index the job lacks is an error, not silence
    if args.follow:
        detail = follower.follow()
        print(api.terminal_text(sys.stderr, raw=args.raw)(common.outcome_line(job_id, detail)), file=sys.stderr)
        return EXIT_OK if detail["jobStatus"]["state"] == "SUCCEEDED" else EXIT_JOB_FAILED  # like `paijob run`
    follower.poll(detail)
    follower.finish()
    return 0
