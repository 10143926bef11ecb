"""Options several verbs share that cost nothing to import (``paijob render`` stays light)."""

from __future__ import annotations

import argparse

from paijob.task import contract


def add_openpai_version_option(parser: argparse.ArgumentParser) -> None:
    """``--openpai-before-1.6``: the cluster is older than OpenPAI v1.6 (``cli.main`` sets the setting)."""
    parser.add_argument(
        "--openpai-before-1.6",
        dest="openpai_before_1_6",
        action="store_true",
        help="the cluster runs OpenPAI older than v1.6: allow role names its runtime rewrites (Worker_A); "
        f"same as {contract.OPENPAI_BEFORE_1_6}=1",
    )
