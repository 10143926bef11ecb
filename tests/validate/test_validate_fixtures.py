"""Hand-written jobs in the style of OpenPAI's own examples pass validate, and
paijob's schema evaluator reports exactly what jsonschema reports."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_validate_rules import BASE

from paijob.validate.report import validate_file
from paijob.validate.schema import JOB_SCHEMA, iter_schema_errors

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
GOLDEN = HERE.parent / "render" / "golden"  # the built-in templates' rendered jobs (tests/render)
FIXTURE_FILES = sorted(FIXTURES.glob("*.yaml"))


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.name)
def test_openpai_style_job_passes_validate(path: Path) -> None:
    report = validate_file(path)
    assert report.ok and not report.warnings, report.formatted_problems()


def test_fixture_plans() -> None:
    summaries = {p.name: validate_file(p).summary() for p in FIXTURE_FILES}
    assert summaries["paijob-two-roles.yaml"].endswith(
        "2 roles, world size 32 (master 1 × 8 + worker 3 × 8), port label SynPort"
    )
    assert summaries["horovod-mpirun.yaml"].endswith(
        "2 roles, world size 6 (mpirun -np across 3 nodes)"
    )
    assert summaries["tensorflow-ps-worker.yaml"].endswith("2 roles, 3 instances")


def _broken_jobs() -> list[object]:
    """Jobs with schema errors of every kind the schema has."""
    base = yaml.safe_load(BASE)
    role = base["taskRoles"]["worker"]
    cases: list[object] = [None, [], "text", {}]
    for mutate in (
        lambda j: j.update(protocolVersion=3, name="bad name", type="jobs", extra=1),
        lambda j: j.update(name=123, jobRetryCount=-1, parameters=[], secrets=5),
        lambda j: j.update(taskRoles={}),
        lambda j: j.update(taskRoles={"1bad": role, "ok": "not a mapping"}),
        lambda j: j["taskRoles"]["worker"].update(instances=0, taskRetryCount="x", typo=1),
        lambda j: j["taskRoles"]["worker"].update(commands=[], completion={"minFailedInstances": 0, "x": 1}),
        lambda j: j["taskRoles"]["worker"].update(extraContainerOptions={"shmMB": 0, "infiniband": "yes"}),
        lambda j: j["taskRoles"]["worker"]["resourcePerInstance"].update(gpu=-1, cpu=1.5, ports={"a-b": 0}),
        lambda j: j["taskRoles"]["worker"]["resourcePerInstance"].pop("memoryMB"),
        lambda j: j["taskRoles"]["worker"].pop("dockerImage"),
        lambda j: j.update(prerequisites=[{"name": "x"}, {"type": "dockerimage", "name": "y"},
                                          {"type": "data", "name": "d", "uri": "one"},
                                          {"type": "script", "name": "s", "uri": ["a"]},
                                          {"type": "other", "name": "o"}]),
        lambda j: j.update(defaults={"virtualCluster": 1, "x": 2}, extras={"gangAllocation": "no"}),
        lambda j: j.update(deployments=[{"taskRoles": {"worker": {"preCommands": []}}}]),
        lambda j: j.update(extras={"com.microsoft.pai.runtimeplugin": [{"parameters": {}}]}),
        lambda j: j["taskRoles"]["worker"].update(instances=True, commands=[1, "ok"]),
    ):
        job = yaml.safe_load(BASE)
        mutate(job)
        cases.append(job)
    return cases


def _as_set(errors: object) -> set[tuple[tuple[object, ...], str]]:
    return {(tuple(e.absolute_path), e.validator) for e in errors}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "job",
    [yaml.safe_load(p.read_text()) for p in [*FIXTURE_FILES, *sorted(GOLDEN.glob("*.yaml"))]]
    + _broken_jobs(),
)
def test_schema_evaluator_agrees_with_jsonschema(job: object) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    expected = _as_set(jsonschema.Draft7Validator(JOB_SCHEMA).iter_errors(job))
    found = _as_set(iter_schema_errors(job))
    assert bool(found) == bool(expected)
    # oneOf: paijob reports the errors of the prerequisite kind that `type` names instead
    assert {e for e in found if e[0][:1] != ("prerequisites",)} == {
        e for e in expected if e[0][:1] != ("prerequisites",)
    }


def test_the_schema_itself_is_valid_draft7() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft7Validator.check_schema(JOB_SCHEMA)
