"""validate = the server: on every edge-case job of cases.py, and on OpenPAI's own
example jobs, ``paijob validate`` accepts exactly what the OpenPAI rest-server accepts
(exit 0) and refuses what it refuses (exit 2), except the documented differences."""

from __future__ import annotations

import json
import lzma
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cases import ACCEPT, CASES, EXAMPLES, REJECT, Case  # noqa: E402

from paijob.validate.report import validate_text  # noqa: E402


def paijob_verdict(text: str) -> str:
    return ACCEPT if validate_text(text, "job.yaml").ok else REJECT


def test_there_are_enough_cases_of_both_verdicts() -> None:
    verdicts = [case.verdict for case in CASES]
    assert len(CASES) >= 50 and verdicts.count(ACCEPT) >= 20 and verdicts.count(REJECT) >= 20
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_validate_agrees_with_the_server(case: Case) -> None:
    report = validate_text(case.text, "job.yaml")
    expected = case.verdict
    if case.differs:
        expected = REJECT if case.verdict == ACCEPT else ACCEPT
    assert paijob_verdict(case.text) == expected, (case.rule, report.formatted_problems())


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_openpai_examples_are_accepted(path: Path) -> None:
    report = validate_text(path.read_bytes(), path.name)
    assert report.ok, report.formatted_problems()


def test_validate_cli_exit_code_is_the_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from paijob.cli import main

    for case in [c for c in CASES if not c.differs][:: max(1, len(CASES) // 12)]:
        job = tmp_path / f"{case.id}.yaml"
        job.write_text(case.text, encoding="utf-8")
        code = main(["validate", "-q", str(job)])
        capsys.readouterr()
        assert code == (0 if case.verdict == ACCEPT else 2), case.id


# OpenPAI's rest-server sources (rest-server/, see its README) and the npm packages they require, pinned by
# package-lock.json and installed by .ci/run (`npm ci` here): the server's own verdict, under node.
NODE_MODULES = HERE / "node_modules"
HISTORY = HERE / "pai-history-jobs.json.xz"


def _node_missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed (CI has it): the server's own verdict needs it"
    if not all((NODE_MODULES / name / "package.json").is_file() for name in ("ajv", "ajv-merge-patch", "js-yaml",
                                                                             "mustache")):
        return "the rest-server's npm packages are not installed: run `npm ci` in tests/conformance (.ci/run does)"
    return None


def server_verdicts(texts: list[str]) -> list[dict[str, object]]:
    """OpenPAI's rest-server verdict on each job text: {accept, stage, error}."""
    result = subprocess.run(
        ["node", str(HERE / "server_verdict.js")], input=json.dumps(texts), capture_output=True, text=True,
        cwd=HERE, env={**os.environ, "NODE_PATH": str(HERE / "rest-server")}, timeout=300, check=True,
    )
    answers: list[dict[str, object]] = json.loads(result.stdout)
    assert len(answers) == len(texts)
    return answers


@pytest.mark.skipif(_node_missing() is not None, reason=str(_node_missing()))
def test_recorded_verdicts_are_the_servers() -> None:
    texts = [case.text for case in CASES] + [p.read_text(encoding="utf-8") for p in EXAMPLES]
    answers = server_verdicts(texts)
    names = [case.id for case in CASES] + [p.name for p in EXAMPLES]
    verdicts = [case.verdict for case in CASES] + [ACCEPT] * len(EXAMPLES)
    wrong = [
        (name, answer)
        for name, verdict, answer in zip(names, verdicts, answers, strict=True)
        if verdict != (ACCEPT if answer["accept"] else REJECT)
    ]
    assert not wrong


@pytest.mark.skipif(_node_missing() is not None, reason=str(_node_missing()))
def test_every_historical_pai_job_gets_the_servers_verdict() -> None:
    """All 383 distinct job files in microsoft/pai's history (pai_history.py made the fixture).

    Many predate OpenPAI v1.6, whose runtime cannot run role names that convertName changes and
    which paijob therefore refuses by default; they are judged as for the cluster they were
    written for (``--openpai-before-1.6``), so what is compared is the server's own verdict.
    """
    jobs = json.loads(lzma.decompress(HISTORY.read_bytes()))
    assert len(jobs) == 383
    answers = server_verdicts(jobs)
    wrong = [job[:200] for job, answer in zip(jobs, answers, strict=True)
             if validate_text(job.encode("utf-8"), "job.yaml", openpai_before_1_6=True).ok != answer["accept"]]
    assert not wrong
