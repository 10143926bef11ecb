"""One job-state vocabulary: OpenPAI's, as its REST swagger lists it, with the final states marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from paijob.cli import build_parser
from paijob.openpai.jobstate import JOB_STATES, TERMINAL_STATES, is_terminal

SWAGGER = Path(__file__).resolve().parent / "rest-server-swagger.yaml"


def _job_state_enums(node: Any) -> list[list[str]]:
    """Every enum in the swagger that lists job (or task) states."""
    if isinstance(node, dict):
        found = [node["enum"]] if "WAITING" in node.get("enum", ()) else []
        return found + [enum for value in node.values() for enum in _job_state_enums(value)]
    if isinstance(node, list):
        return [enum for value in node for enum in _job_state_enums(value)]
    return []


def test_job_states_are_the_ones_the_swagger_lists_in_its_order() -> None:
    enums = _job_state_enums(yaml.safe_load(SWAGGER.read_text()))
    assert len(enums) >= 2  # JobSummary.state and JobDetail.jobStatus.state at least
    assert all(tuple(enum) == JOB_STATES for enum in enums)


def test_only_succeeded_failed_and_stopped_are_terminal() -> None:
    assert {state for state in JOB_STATES if is_terminal(state)} == {"SUCCEEDED", "FAILED", "STOPPED"}
    assert TERMINAL_STATES < set(JOB_STATES)
    assert not is_terminal("UNKNOWN") and not is_terminal(None) and not is_terminal("succeeded")


def test_list_filters_on_every_state_openpai_reports() -> None:
    parser = build_parser("list")
    for state in JOB_STATES:
        assert parser.parse_args(["list", "--state", state.lower()]).state == state
