"""``paijob submit``: validate a job (rendering a template first) and send it to a cluster."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from paijob.commands import _common as common
from paijob.commands import _jobargs
from paijob.errors import EXIT_JOB_FAILED, EXIT_OK

if TYPE_CHECKING:
    from paijob.api import PreparedJob
    from paijob.remote.client import PaiClient


def add_job_source(parser: argparse.ArgumentParser) -> None:
    """The JOB.yaml|TEMPLATE argument plus the render options (-f values files, --set, ...)."""
    from paijob.commands.render import add_render_options

    parser.add_argument("job", metavar="JOB.yaml|TEMPLATE", nargs="?",
                        help="a protocol-v2 job file, or a template to render first "
                             "(a built-in name, see `paijob templates`, or a .yaml.j2 file; "
                             "default: the template of ./paijob.yaml)")
    add_render_options(parser)


def add_naming(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", metavar="N", help="submit under this job name instead of the job's own")
    parser.add_argument("--unique-suffix", action="store_true",
                        help="append _<8 hex> to the name: job names can never be reused on OpenPAI")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "submit",
        help="validate and submit a job to OpenPAI (or the local cluster)",
        description="Render (when given a template), validate and submit a job; prints its id "
                    "(user~name) and web-portal link. With --wait, shows the tasks' progress and exits "
                    "0 only when the job SUCCEEDED.",
    )
    add_job_source(parser)
    add_naming(parser)
    _jobargs.add_workdir_options(parser)
    common.add_cluster_options(parser)
    parser.add_argument("--wait", action="store_true", help="wait for the job to end; exit 0 only on SUCCEEDED")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the request that would be sent (the token and secret values masked) and stop")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from paijob import api

    job = api.prepare(_jobargs.request_from_args(args, ask_cluster=not args.dry_run))  # resolves the cluster, once
    _jobargs.report(job)
    if args.dry_run:
        return dry_run(job)
    client = api.connect(job.target, timeout=args.timeout, on_note=common.note)
    job_id = api.submit(job, client)
    report_submitted(client, job_id)
    if not args.wait:
        return 0
    detail = api.wait(client, job_id, on_update=common.Progress(job_id))
    print(common.outcome_line(job_id, detail), file=sys.stderr)
    return EXIT_OK if detail["jobStatus"]["state"] == "SUCCEEDED" else EXIT_JOB_FAILED


def report_submitted(client: PaiClient, job_id: str) -> None:
    print(job_id)
    if client.is_local:
        print(f"submitted to the local cluster; follow it with `paijob logs {job_id} -f -c local`",
              file=sys.stderr)
    else:
        print(f"web portal: {client.web_link(job_id)}", file=sys.stderr)


def dry_run(job: PreparedJob) -> int:
    """Print the request ``submit`` would send (``api.dry_run``: the same object), token masked."""
    from paijob import api

    target = job.target
    where = "the local cluster" if target is None or target.is_local else target.name
    source = f"token from {target.token_source}" if target is not None and target.token_source != "none" \
        else "no token"
    print(f"# dry run: would POST to {where} ({source}); nothing was sent", file=sys.stderr)
    if job.install_route:
        print(f"# {job.install_route}", file=sys.stderr)
    sys.stdout.write(api.dry_run(job).text())
    return 0
