"""validate = the server: on every edge-case job of cases.py, and on OpenPAI's own
example jobs, ``paijob validate`` accepts exactly what the OpenPAI rest-server accepts
(exit 0) and refuses what it refuses (exit 2), except the documented differences."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cases import ACCEPT, CASES, EXAMPLES, REJECT, Case  # noqa: E402

from paijob.validate.verdict import validate_text  # noqa: E402


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


HARNESS = os.environ.get("PAIJOB_SERVER_HARNESS")


@pytest.mark.skipif(
    not HARNESS or shutil.which("node") is None,
    reason="set PAIJOB_SERVER_HARNESS to a folder prepared as server_verdict.js says",
)
def test_recorded_verdicts_are_the_servers() -> None:
    assert HARNESS is not None
    texts = [case.text for case in CASES] + [p.read_text(encoding="utf-8") for p in EXAMPLES]
    result = subprocess.run(
        ["node", str(HERE / "server_verdict.js")],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        cwd=HARNESS,
        env={**os.environ, "NODE_PATH": str(Path(HARNESS) / "node_modules")},
        timeout=120,
        check=True,
    )
    answers = json.loads(result.stdout)
    names = [case.id for case in CASES] + [p.name for p in EXAMPLES]
    verdicts = [case.verdict for case in CASES] + [ACCEPT] * len(EXAMPLES)
    wrong = [
        (name, answer)
        for name, verdict, answer in zip(names, verdicts, answers, strict=True)
        if verdict != (ACCEPT if answer["accept"] else REJECT)
    ]
    assert not wrong


PAI_REPO = os.environ.get("PAIJOB_PAI_GIT_DIR")


def _historical_jobs(git_dir: str) -> list[bytes]:
    """Every distinct job YAML (protocolVersion + taskRoles) in microsoft/pai's history."""
    log = subprocess.run(
        ["git", "--git-dir", git_dir, "log", "--all", "--pretty=format:%H", "--name-only",
         "--diff-filter=AMR", "--", "*.yaml", "*.yml"],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout
    commit, wanted = "", []
    for line in log.splitlines():
        if len(line) == 40 and all(c in "0123456789abcdef" for c in line):
            commit = line
        elif line.strip():
            wanted.append(f"{commit}:{line.strip()}")
    blobs = subprocess.run(
        ["git", "--git-dir", git_dir, "cat-file", "--batch"],
        input="\n".join(wanted).encode(), capture_output=True, check=True, timeout=600,
    ).stdout
    jobs: dict[bytes, None] = {}
    pos = 0
    while pos < len(blobs):
        end = blobs.index(b"\n", pos)
        header = blobs[pos:end].split()
        pos = end + 1
        if len(header) < 3:
            continue
        data = blobs[pos : pos + int(header[2])]
        pos += int(header[2]) + 1
        if b"protocolVersion" in data and b"taskRoles" in data:
            jobs.setdefault(data)
    return list(jobs)


@pytest.mark.skipif(
    not (HARNESS and PAI_REPO) or shutil.which("node") is None,
    reason="set PAIJOB_SERVER_HARNESS and PAIJOB_PAI_GIT_DIR (a microsoft/pai clone's .git)",
)
def test_every_historical_pai_job_gets_the_servers_verdict() -> None:
    assert HARNESS is not None and PAI_REPO is not None
    jobs = _historical_jobs(PAI_REPO)
    result = subprocess.run(
        ["node", str(HERE / "server_verdict.js")],
        input=json.dumps([job.decode("utf-8", "replace") for job in jobs]),
        capture_output=True, text=True, cwd=HARNESS, timeout=600, check=True,
        env={**os.environ, "NODE_PATH": str(Path(HARNESS) / "node_modules")},
    )
    answers = json.loads(result.stdout)
    wrong = [
        job[:200]
        for job, answer in zip(jobs, answers, strict=True)
        if validate_text(job, "job.yaml").ok != answer["accept"]
    ]
    assert len(jobs) > 100 and not wrong
