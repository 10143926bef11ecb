"""Options shared by the verbs that send a job (``submit``, ``run``) and their translation to ``api.JobRequest``."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from paijob.api import JobRequest, PreparedJob


def add_workdir_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("code")
    group.add_argument("--workdir", metavar="DIR",
                       help="start every task in a snapshot of DIR taken now (skips .git, .venv, __pycache__ "
                            "and what .gitignore / .paijobignore list); also the 'workdir' value or "
                            "paijob.yaml's workdir")
    group.add_argument("--force", action="store_true",
                       help="ship the workdir even when it is over the snapshot limits (100 MB unpacked, "
                            "10,000 files) or a credentials folder such as ~/.config (secret-looking files and "
                            "paijob's own profiles are still left out; what ships is listed)")
    group.add_argument("--skip-unreadable", action="store_true",
                       help="leave out (and list) workdir files paijob cannot read, instead of refusing")


def request_from_args(args: argparse.Namespace, *, ask_cluster: bool = False) -> JobRequest:
    """The request the options describe; ``ask_cluster``: when neither ``--openpai-before-1.6`` nor its
    variable decides the role-name rule, the cluster's version does (``api.openpai_before_1_6``)."""
    from paijob.api import JobRequest
    from paijob.commands import _options

    return JobRequest(
        job=getattr(args, "job", None),
        values=list(getattr(args, "values", None) or []),
        sets=list(getattr(args, "sets", None) or []),
        name=getattr(args, "name", None),
        unique_suffix=bool(getattr(args, "unique_suffix", False)),
        workdir=getattr(args, "workdir", None),
        force=bool(getattr(args, "force", False)),
        skip_unreadable=bool(getattr(args, "skip_unreadable", False)),
        cluster=getattr(args, "cluster", None),
        allow_unknown_values=bool(getattr(args, "allow_unknown_values", False)),
        openpai_before_1_6=_options.openpai_before_1_6(args),
        ask_cluster=ask_cluster,
    )


def report(job: PreparedJob) -> None:
    """The render warnings and shipping notes of a prepared job, on stderr."""
    for line in job.warnings + job.notes:
        print(f"paijob: {line}", file=sys.stderr)
