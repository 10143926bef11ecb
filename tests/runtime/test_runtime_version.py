"""paijob-runtime reports the version the job was rendered with, and says what to do without torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import paijob
from paijob.common import records

LAYOUT = ["env", "--nnodes", "1", "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port", "29999"]


def runtime(*argv: str, env: dict[str, str] | None = None, prelude: str = "") -> subprocess.CompletedProcess[str]:
    clean = {key: value for key, value in os.environ.items() if not key.startswith(("PAI_", "PAIJOB_"))}
    code = f"{prelude}\nimport sys\nfrom paijob.runtime.cli import main\nsys.exit(main({list(argv)!r}))"
    return subprocess.run([sys.executable, "-c", code], env={**clean, **(env or {})}, capture_output=True, text=True)


def test_version_shows_the_rendering_client_beside_its_own() -> None:
    done = runtime("--version", env={"PAIJOB_RENDERED_VERSION": "0.0.1"})
    assert done.stdout.strip() == f"paijob-runtime {paijob.__version__} (job rendered by paijob 0.0.1)"
    assert runtime("--version").stdout.strip() == f"paijob-runtime {paijob.__version__}"


def test_a_job_rendered_by_another_version_is_warned_about_once() -> None:
    done = runtime(*LAYOUT, "--json", env={"PAIJOB_RENDERED_VERSION": "0.0.1"})
    assert done.returncode == 0
    (warning,) = done.stderr.strip().splitlines()
    assert "rendered by paijob 0.0.1" in warning and f"paijob-runtime {paijob.__version__}" in warning
    described = json.loads(done.stdout)
    assert described["rendered_version"] == "0.0.1" and described["paijob_version"] == paijob.__version__


def test_the_same_version_is_silent() -> None:
    done = runtime(*LAYOUT, env={"PAIJOB_RENDERED_VERSION": paijob.__version__})
    assert done.returncode == 0 and done.stderr == ""


def test_train_without_torch_is_one_line_naming_the_fix_never_retried_by_openpai() -> None:
    """Issue 45: it exited 2, which OpenPAI reports as 255 (RETRY_TO_MAX): the local cluster retried it into
    the same image. 127 with "command not found" in the log is OpenPAI's 220, PERMANENT / NEVER_RETRY."""
    from paijob.openpai import exitspec

    done = runtime("train", "train.py", prelude="import sys; sys.modules['torch'] = None")
    assert done.returncode == 127
    reported = exitspec.container_exit(done.returncode, done.stderr)
    assert reported.code == 220 and reported.spec.never_retried
    (line, told) = done.stderr.strip().splitlines()  # one line for people, then its record for the cluster
    assert "needs torch" in line and "pip install 'paijob[train]'" in line
    assert line == f"paijob-runtime: error: {records.read_failure_line(told).summary}"
