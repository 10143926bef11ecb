"""``paijob run``: submit a job, follow its logs, and exit with its result.

``paijob run ddp --local -f values.yaml`` starts the local cluster when it is
down, submits under a unique name (so reruns work) unless ``--name`` names it,
prints every task's log lines prefixed role/index, and exits 0 when the job
SUCCEEDED, 1 otherwise. In a folder with a ``paijob.yaml`` (``paijob init``)
the job, values, cluster and workdir default to the project's.

SIGTERM and SIGHUP (a CI runner cancelling, ``timeout``, a closed terminal)
end it as Ctrl-C does: the job it started is stopped, then it exits
128 + the signal's number (143, 129). A signal that arrives while the job is
being submitted is acted on once the submit has answered, so the job it
created is known and stopped, never left running.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from paijob.commands import _common as common
from paijob.commands import _jobargs
from paijob.errors import EXIT_HANGUP, EXIT_JOB_FAILED, EXIT_OK, EXIT_TERMINATED


def register(subparsers: Any) -> None:
    from paijob.commands.render import add_render_options

    parser = subparsers.add_parser(
        "run",
        help="submit a job, follow its logs, exit with its result (--local: on this machine)",
        description="Render/validate/submit a job, print its tasks' logs as they come (prefixed role/index) "
                    "and exit 0 if it SUCCEEDED, 1 otherwise. --local runs it on the built-in local cluster, "
                    "started when needed. Without JOB, the template of ./paijob.yaml (see `paijob init`).",
    )
    parser.add_argument("job", metavar="JOB.yaml|TEMPLATE", nargs="?",
                        help="a protocol-v2 job file, or a template to render first (default: paijob.yaml's)")
    add_render_options(parser)
    parser.add_argument("--local", action="store_true", help="run on the local cluster (same as -c local)")
    parser.add_argument("--name", metavar="N",
                        help="job name (default: the job's own plus a unique suffix, so reruns work)")
    parser.add_argument("--unique-suffix", action="store_true", help="append _<8 hex> to --name too")
    _jobargs.add_workdir_options(parser)
    common.add_raw_option(parser)
    common.add_cluster_options(parser)
    parser.set_defaults(func=run)


ENDING_SIGNALS = {"SIGTERM": EXIT_TERMINATED, "SIGHUP": EXIT_HANGUP}  # each 128 + the signal's number


class Terminated(BaseException):  # like KeyboardInterrupt: no `except Exception` on the way swallows it
    """SIGTERM or SIGHUP reached ``paijob run``: stop the job, exit 128 + ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _EndSignals:
    """SIGTERM and SIGHUP raise ``Terminated``, or wait while ``deferred`` (a submit in flight)."""

    def __init__(self) -> None:
        self.deferred = True
        self.pending: int | None = None

    def __call__(self, signum: int, frame: object) -> None:
        if self.deferred:
            self.pending = self.pending or signum
            return
        self.deferred = True  # a second signal while stopping the job waits too
        raise Terminated(signum)

    def release(self) -> None:
        """From here on a signal ends the run; one that came meanwhile does now."""
        self.deferred = False
        if self.pending is not None:
            self.deferred = True
            raise Terminated(self.pending)


@contextmanager
def _end_signals() -> Iterator[_EndSignals]:
    handler = _EndSignals()
    names = [name for name in ENDING_SIGNALS if hasattr(signal, name)]
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        handler.deferred = False
        yield handler
        return
    previous = {name: signal.signal(getattr(signal, name), handler) for name in names}
    try:
        yield handler
    finally:
        for name, old in previous.items():
            signal.signal(getattr(signal, name), old)


def run(args: argparse.Namespace) -> int:
    from paijob import api

    if args.local:
        args.cluster = "local"  # the name users type (`-c local`), which paijob.remote.profiles.LOCAL holds
    if not args.name:
        args.unique_suffix = True
    job = api.prepare(_jobargs.request_from_args(args, ask_cluster=True))
    _jobargs.report(job)
    client = api.connect(job.target, timeout=args.timeout, on_note=common.note)
    with _end_signals() as signals:
        job_id = api.submit(job, client)
        print(f"paijob: submitted {job_id}", file=sys.stderr)
        try:
            signals.release()
            if not client.is_local:
                print(f"paijob: web portal {client.web_link(job_id)}", file=sys.stderr)
            follower = api.follow_logs(client, job_id, raw=args.raw, on_note=common.note)
            detail = follower.follow()
        except KeyboardInterrupt:
            signals.deferred = True  # a SIGTERM now does not cut the stop short
            print(f"\npaijob: interrupted; stopping {job_id}", file=sys.stderr)
            api.stop(client, job_id)
            raise
        except Terminated as ended:
            print(f"\npaijob: received {ended}; stopping {job_id}", file=sys.stderr)
            api.stop(client, job_id)
            return ENDING_SIGNALS[signal.Signals(ended.signum).name]
    shown = api.terminal_text(sys.stderr, raw=args.raw)
    print(f"paijob: {shown(common.outcome_line(job_id, detail))}", file=sys.stderr)
    slow = common.slow_rank_headline(detail)
    if slow:  # a job that succeeded too: the rank the others waited for is worth the user's attention
        print(f"paijob: slow rank {shown(slow)} (`paijob status {job_id} -c {client.cluster_name}` has each "
              "rank's figures)", file=sys.stderr)
    output = api.output_location(client.cluster_name, job_id, job.sent_job())
    if output:
        print(f"paijob: output folder {output} (`paijob cp {job_id.split('~', 1)[1]}:PATH . -c {client.cluster_name}` "
              "copies from it)",
              file=sys.stderr)
    if client.is_local:
        print(f"paijob: `paijob logs {job_id} -c local` shows it again; the local cluster keeps "
              "running (`paijob local down` stops it)", file=sys.stderr)
    return EXIT_OK if detail["jobStatus"]["state"] == "SUCCEEDED" else EXIT_JOB_FAILED
