"""The examples/ values files render exactly the job YAML stored beside them."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from render_helpers import EXAMPLES, ROOT, UPDATE_GOLDEN

from paijob.render.templating import render_template
from paijob.validate.report import validate_file

VALUES = sorted(EXAMPLES.glob("*.values.yaml"))


def render_command(values: Path) -> list[str]:
    """The ``# paijob render ...`` command on the first line of an example values file."""
    first = values.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# paijob render "), f"{values.name}: first line must be its render command"
    return shlex.split(first[2:])


def test_there_are_runnable_examples() -> None:
    assert len(VALUES) >= 3
    assert EXAMPLES / "cifar10-local.values.yaml" in VALUES


@pytest.mark.parametrize("values", VALUES, ids=lambda p: p.name)
def test_example_yaml_matches_current_templates(values: Path) -> None:
    argv = render_command(values)
    # --output-file, not the deprecated `-o FILE` (-o names a format now): the comment is a command to copy
    assert argv[:2] == ["paijob", "render"] and argv[3] == "-f" and argv[5] == "--output-file", argv
    template, values_file, output = argv[2], ROOT / argv[4], ROOT / argv[6]
    assert values_file == values
    result = render_template(template, [values_file])
    if UPDATE_GOLDEN:
        output.write_text(result.text, encoding="utf-8")
    assert output.read_text(encoding="utf-8") == result.text, (
        f"{output.name} is stale: run `{' '.join(argv)}` (or PAIJOB_UPDATE_GOLDEN=1)"
    )
    report = validate_file(output)
    # horovod has no public image that fits: its example keeps the placeholder submit refuses
    allowed = {("prerequisites", 0, "uri")} if template == "horovod" else set()
    assert report.ok and all(w.path in allowed for w in report.warnings), report.formatted_problems()


def test_readme_local_example_is_a_two_node_cpu_cifar10_job() -> None:
    result = render_template("ddp", [EXAMPLES / "cifar10-local.values.yaml"])
    role = result.job["taskRoles"]["worker"]
    assert role["instances"] == 2
    assert role["resourcePerInstance"]["gpu"] == 0
    assert role["resourcePerInstance"]["cpu"] <= 4
    assert role["resourcePerInstance"]["memoryMB"] <= 8192
    *_, command = role["commands"]  # after the version export and the runtime install step
    assert command.startswith("paijob-runtime train ")
    assert "--nproc-per-node 1 " in command
    assert "--recipe cifar10 --data synthetic --epochs 2" in command
    words = shlex.split(command)
    recipe_options = {w for w in words[words.index("cifar10") + 1 :] if w.startswith("--")}
    assert recipe_options <= {"--data", "--epochs", "--batch-size", "--output-dir"}
    plan = result.report.plan
    assert plan is not None and plan.world_size == 2
