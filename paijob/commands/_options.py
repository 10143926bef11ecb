"""Options several verbs share that cost nothing to import (``paijob render`` stays light)."""

from __future__ import annotations

import argparse

from paijob.common import contract


def add_openpai_version_option(parser: argparse.ArgumentParser) -> None:
    """``--openpai-before-1.6``: the cluster is older than OpenPAI v1.6 (read with ``openpai_before_1_6``)."""
    parser.add_argument(
        "--openpai-before-1.6",
        dest="openpai_before_1_6",
        action="store_const",
        const=True,
        default=None,
        help="the cluster runs OpenPAI older than v1.6: allow role names its runtime rewrites (Worker_A); "
        f"same as {contract.OPENPAI_BEFORE_1_6}=1 (default: the cluster's version where paijob asks the "
        "cluster, submit and validate -c; else v1.6 or later)",
    )


def openpai_before_1_6(args: argparse.Namespace) -> bool | None:
    """The role-name rule the user chose: the flag, else ``PAIJOB_OPENPAI_BEFORE_1_6`` when set (``1``:
    older than v1.6, `0`: not; any other value is refused), else None (the cluster's version decides)."""
    if getattr(args, "openpai_before_1_6", None):
        return True
    from paijob import api

    return api.openpai_before_1_6_setting()
