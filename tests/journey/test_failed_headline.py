"""A failed job's headline leads with the root cause: the rank that failed, its task and its error.

OpenPAI names the task that exited first (appExitTriggerTaskRoleName/Index). When rank 1 raises, node 0's
paijob-runtime learns of it and may exit first with the same root cause "(on another node)"; the attempt
then stops rank 1's task (-220). The headline and `paijob status` must still name rank 1 on worker/1 and
its NameError, not worker/0 (issue 28).
"""

from __future__ import annotations

from typing import Any

import pytest

from paijob.commands import _common as common
from paijob.commands.status import print_status

CAUSE = "worker rank 1 (node rank 1, local rank 0) failed with exit code 1"
ERROR = "NameError: name 'undefined_name_here' is not defined"


def detail(tasks: list[tuple[str, int, str, int, str | None]], trigger: tuple[str, int]) -> dict[str, Any]:
    roles: dict[str, Any] = {}
    for role, index, state, code, diagnostics in tasks:
        roles.setdefault(role, {"taskStatuses": []})["taskStatuses"].append({
            "taskIndex": index, "taskState": state, "containerExitCode": code,
            "containerExitDiagnostics": diagnostics, "retries": 0})
    return {"jobStatus": {"state": "FAILED", "appExitCode": 231, "appExitTriggerTaskRoleName": trigger[0],
                          "appExitTriggerTaskIndex": trigger[1], "createdTime": 0, "completedTime": 13600,
                          "appExitTriggerMessage": f"{trigger[0]}/{trigger[1]} exited with code 231"},
            "taskRoles": roles}


def on_another_node() -> dict[str, Any]:
    """worker/0 exited first, reporting rank 1's error from another node; worker/1 was stopped."""
    return detail([
        ("worker", 0, "FAILED", 231, f"{CAUSE} (on another node): {ERROR}; user command exited with 1; "
                                     "OpenPAI reports 231 (ContainerSyntaxError)"),
        ("worker", 1, "STOPPED", -220, None),
    ], trigger=("worker", 0))


def test_the_headline_names_the_failing_rank_and_its_task_not_the_task_that_exited_first() -> None:
    line = common.outcome_line("alice~job", on_another_node())
    assert line.startswith(f"job alice~job FAILED: rank 1 on worker/1 failed with exit code 1: {ERROR}"), line
    assert "(OpenPAI: worker/0 exited with code 231)" in line


def test_a_node_reporting_its_own_worker_beats_one_reporting_it_from_another_node() -> None:
    both = detail([
        ("worker", 0, "FAILED", 231, f"{CAUSE} (on another node): {ERROR}"),
        ("worker", 1, "FAILED", 231, f"{CAUSE}: {ERROR}"),
    ], trigger=("worker", 0))
    cause = common.root_cause(both)
    assert cause is not None and (cause.rank, cause.task, cause.error) == (1, "worker/1", ERROR)


def test_the_node_rank_of_a_cause_on_another_node_counts_tasks_in_role_order() -> None:
    roles = detail([
        ("ps", 0, "FAILED", 255, "worker rank 5 (node rank 2, local rank 1) failed with signal SIGSEGV "
                                 "(on another node)"),
        ("worker", 0, "STOPPED", -220, None),
        ("worker", 1, "STOPPED", -220, None),
    ], trigger=("ps", 0))
    cause = common.root_cause(roles)
    assert cause is not None and (cause.rank, cause.task, cause.how, cause.error) == (5, "worker/1", "signal SIGSEGV",
                                                                                     None)


def test_a_task_without_paijob_runtime_keeps_the_exit_code_headline() -> None:
    plain = detail([("worker", 0, "FAILED", 255, "user command exited with 3; OpenPAI reports 255")],
                   trigger=("worker", 0))
    assert common.root_cause(plain) is None
    assert common.outcome_line("j", plain).startswith("job j FAILED: worker/0 exited with code 255 after")


def test_status_shows_the_cause_first(capsys: pytest.CaptureFixture[str]) -> None:
    print_status(on_another_node(), "alice~job")
    out = capsys.readouterr().out
    lines = out.splitlines()
    cause = next(i for i, line in enumerate(lines) if line.startswith("cause "))
    reason = next(i for i, line in enumerate(lines) if line.startswith("reason "))
    assert cause < reason
    assert lines[cause] == f"cause      rank 1 on worker/1 failed with exit code 1: {ERROR}"
