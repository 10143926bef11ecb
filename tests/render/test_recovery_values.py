"""The ddp and apex templates' recovery values: maxRestarts and minNodes reach paijob-runtime, and minNodes
renders what OpenPAI needs to let one task fail alone (checked by validate), or is refused."""

from __future__ import annotations

import pytest

from paijob.errors import PaijobError
from paijob.render.templating import render_template


@pytest.mark.parametrize("template", ["ddp", "apex"])
def test_max_restarts_reaches_the_runtime_and_nothing_else_changes(template: str) -> None:
    plain = render_template(template, sets=["instances=2"]).text
    text = render_template(template, sets=["instances=2", "maxRestarts=3"]).text
    assert "--max-restarts 3 " in text and "--max-restarts" not in plain
    assert text.replace(" --max-restarts 3", "") == plain


@pytest.mark.parametrize("template", ["ddp", "apex"])
def test_min_nodes_renders_gang_allocation_off_and_the_completion_policy(template: str) -> None:
    result = render_template(template, sets=["instances=4", "maxRestarts=1", "minNodes=2"])
    text = result.text
    assert "--max-restarts 1 --min-nodes 2 " in text
    assert "      minFailedInstances: 3\n" in text and "  gangAllocation: false\n" in text
    assert result.report.ok and not result.report.problems, result.report.formatted_problems()
    every = render_template(template, sets=["instances=4", "maxRestarts=1", "minNodes=4"]).text
    assert "      minFailedInstances: 1\n" in every and "gangAllocation" not in every  # none may be lost


@pytest.mark.parametrize(("sets", "message"), [
    (["instances=2", "minNodes=1"], "minNodes needs maxRestarts 1 or more"),
    (["instances=2", "maxRestarts=1", "minNodes=3"], "minNodes 3 is more than instances 2"),
    (["maxRestarts=101"], "value 'maxRestarts' must be at most 100"),
    (["maxRestarts=1", "minNodes=0"], "value 'minNodes' must be at least 1"),
])
def test_recovery_values_that_cannot_be_honoured_are_refused(sets: list[str], message: str) -> None:
    with pytest.raises(PaijobError, match=message):
        render_template("ddp", sets=sets)
