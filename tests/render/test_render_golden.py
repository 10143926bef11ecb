"""Every built-in template renders byte for byte what its golden file holds,
and every golden file is a valid job. Regenerate with PAIJOB_UPDATE_GOLDEN=1."""

from __future__ import annotations

import pytest
from render_helpers import GOLDEN, GOLDEN_CASES, UPDATE_GOLDEN, golden_path

from paijob.render.templates import builtin_names
from paijob.render.templating import render_template
from paijob.validate.report import validate_file

CASES = [(t, c) for t, cases in GOLDEN_CASES.items() for c in cases]

# ddp-extras renders gangAllocation: false on 2 nodes on purpose; validate warns
# that OpenPAI then starts tasks one by one (see protocol_plan.gang_allocation).
# horovod's default image is a placeholder (no public image fits): validate warns, submit refuses it.
PLACEHOLDER = ("prerequisites", 0, "uri")
EXPECTED_WARNINGS = {"ddp-extras": {("extras", "gangAllocation")}, "horovod-1x1": {PLACEHOLDER},
                     "horovod-4x8": {PLACEHOLDER}, "horovod-horovodrun": {PLACEHOLDER}}


def unexpected(name: str, problems: list) -> list:  # type: ignore[type-arg]
    allowed = EXPECTED_WARNINGS.get(name, set())
    return [p for p in problems if p.severity == "error" or p.path not in allowed]


@pytest.mark.parametrize(("template", "case"), CASES, ids=[f"{t}-{c}" for t, c in CASES])
def test_template_renders_its_golden_file(template: str, case: str) -> None:
    result = render_template(template, sets=GOLDEN_CASES[template][case])
    path = golden_path(template, case)
    if UPDATE_GOLDEN:
        path.write_text(result.text, encoding="utf-8")
    assert path.exists(), f"no golden file {path.name}; run with PAIJOB_UPDATE_GOLDEN=1"
    assert result.text == path.read_text(encoding="utf-8"), (
        f"{path.name} differs from the render; if the change is intended, "
        "regenerate with PAIJOB_UPDATE_GOLDEN=1 and review the diff"
    )
    assert not unexpected(f"{template}-{case}", result.report.problems), (
        result.report.formatted_problems()
    )


def test_every_builtin_template_has_golden_cases_for_one_and_many_nodes() -> None:
    assert sorted(GOLDEN_CASES) == builtin_names()
    for template, cases in GOLDEN_CASES.items():
        assert "1x1" in cases, template
        assert {"4x8", "1x8"} & set(cases), template


def test_no_stale_golden_files() -> None:
    expected = {golden_path(t, c).name for t, c in CASES}
    on_disk = {p.name for p in GOLDEN.glob("*.yaml")}
    assert on_disk == expected


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.yaml")), ids=lambda p: p.name)
def test_every_golden_file_passes_validate(path) -> None:  # type: ignore[no-untyped-def]
    report = validate_file(path)
    assert report.ok, report.formatted_problems()
    assert not unexpected(path.stem, report.warnings), report.formatted_problems()
    assert report.plan is not None


def test_world_size_of_the_big_cases() -> None:
    expected = {"ddp": 32, "apex": 32, "spawn": 32, "horovod": 32, "dataparallel": 1}
    for template, size in expected.items():
        case = "1x8" if template == "dataparallel" else "4x8"
        report = validate_file(golden_path(template, case))
        assert report.plan is not None and report.plan.world_size == size, template
