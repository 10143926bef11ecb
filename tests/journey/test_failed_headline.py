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
from paijob.common.records import FailureRecord

ERROR = "NameError: name 'undefined_name_here' is not defined"


def rank_1_failed(reported_by: int, error: str | None = ERROR) -> dict[str, Any]:
    """paijob-runtime's record, as node ``reported_by`` wrote it: rank 1 (node 1, local rank 0) failed."""
    return FailureRecord(node_rank=reported_by, exit_code=1, summary="rank 1 failed", rank=1, worker_node=1,
                         local_rank=0, how="exit code 1", error=error).as_json()


def detail(tasks: list[tuple[str, int, str, int, dict[str, Any] | None]], trigger: tuple[str, int]) -> dict[str, Any]:
    roles: dict[str, Any] = {}
    for role, index, state, code, record in tasks:
        task = {"taskIndex": index, "taskState": state, "containerExitCode": code,
                "containerExitDiagnostics": "what the cluster says", "retries": 0}
        if record is not None:
            task["paijobRootCause"] = record
        roles.setdefault(role, {"taskStatuses": []})["taskStatuses"].append(task)
    return {"jobStatus": {"state": "FAILED", "appExitCode": 231, "appExitTriggerTaskRoleName": trigger[0],
                          "appExitTriggerTaskIndex": trigger[1], "createdTime": 0, "completedTime": 13600,
                          "appExitTriggerMessage": f"{trigger[0]}/{trigger[1]} exited with code 231"},
            "taskRoles": roles}


def on_another_node() -> dict[str, Any]:
    """worker/0 exited first, reporting rank 1's error from another node; worker/1 was stopped."""
    return detail([("worker", 0, "FAILED", 231, rank_1_failed(reported_by=0)), ("worker", 1, "STOPPED", -220, None)],
                  trigger=("worker", 0))


def test_the_headline_names_the_failing_rank_and_its_task_not_the_task_that_exited_first() -> None:
    line = common.outcome_line("alice~job", on_another_node())
    assert line.startswith(f"job alice~job FAILED: rank 1 on worker/1 failed with exit code 1: {ERROR}"), line
    assert "(OpenPAI: worker/0 exited with code 231)" in line


def test_a_node_reporting_its_own_worker_beats_one_reporting_it_from_another_node() -> None:
    both = detail([
        ("worker", 0, "FAILED", 231, rank_1_failed(reported_by=0, error="its peer went away")),
        ("worker", 1, "FAILED", 231, rank_1_failed(reported_by=1)),
    ], trigger=("worker", 0))
    cause = common.root_cause(both)
    assert cause is not None and (cause.record.rank, cause.task, cause.record.error) == (1, "worker/1", ERROR)


def test_the_node_rank_of_a_cause_on_another_node_counts_tasks_in_role_order() -> None:
    segv = FailureRecord(node_rank=0, exit_code=139, summary="rank 5 failed", rank=5, worker_node=2, local_rank=1,
                         how="signal SIGSEGV").as_json()
    roles = detail([("ps", 0, "FAILED", 255, segv), ("worker", 0, "STOPPED", -220, None),
                    ("worker", 1, "STOPPED", -220, None)], trigger=("ps", 0))
    cause = common.root_cause(roles)
    assert cause is not None and (cause.record.rank, cause.task, cause.record.how, cause.record.error) == (
        5, "worker/1", "signal SIGSEGV",
                                                                                     None)


def test_a_task_without_paijob_runtime_keeps_the_exit_code_headline() -> None:
    plain = detail([("worker", 0, "FAILED", 255, None)], trigger=("worker", 0))
    assert common.root_cause(plain) is None
    assert common.outcome_line("j", plain).startswith("job j FAILED: worker/0 exited with code 255 after")


@pytest.mark.parametrize("broken", [
    {"v": 2},  # a version this paijob does not know
    {"rank": "1"},  # a field of the wrong type
    {"error": "x" * 401},  # longer than a record's text
    {"note": "from the job"},  # a field no record has
])
def test_a_record_not_in_the_exact_form_is_no_root_cause(broken: dict[str, Any]) -> None:
    record = {**rank_1_failed(reported_by=1), **broken}
    assert common.root_cause(detail([("worker", 1, "FAILED", 1, record)], trigger=("worker", 1))) is None


def test_status_shows_the_cause_first(capsys: pytest.CaptureFixture[str]) -> None:
    print_status(on_another_node(), "alice~job")
    out = capsys.readouterr().out
    lines = out.splitlines()
    cause = next(i for i, line in enumerate(lines) if line.startswith("cause "))
    reason = next(i for i, line in enumerate(lines) if line.startswith("reason "))
    assert cause < reason
    assert lines[cause] == f"cause      rank 1 on worker/1 failed with exit code 1: {ERROR}"
