"""One duration format wherever a user reads one (issue 54 item 8): `paijob status`, `list`, a job's closing
line and the portal write `0.4 s`, `42 s`, `3 min 14 s`, `2 h 5 min`, from one helper each side."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from paijob.commands import _common as common
from paijob.common.durations import human_duration

CASES = [(0.0, "0.0 s"), (0.44, "0.4 s"), (9.9, "9.9 s"), (9.96, "10 s"), (42.4, "42 s"), (59.6, "1 min 0 s"),
         (194, "3 min 14 s"), (3599.4, "59 min 59 s"), (3600, "1 h 0 min"), (7500, "2 h 5 min"),
         (-1, "-"), (float("nan"), "-"), (None, "-")]
COMMON_JS = Path(__file__).parents[2] / "paijob" / "local" / "portal" / "static" / "common.js"


@pytest.mark.parametrize(("seconds", "shown"), CASES)
def test_a_duration_reads_the_same_wherever_paijob_writes_it(seconds: float | None, shown: str) -> None:
    assert human_duration(seconds) == shown


def test_status_list_and_the_closing_line_use_it() -> None:
    assert common.duration(1_000, 195_000) == "3 min 14 s"  # was 3m14s
    assert common.duration(1_000, 83_300) == "1 min 22 s"  # was 82.3 s
    assert common.duration(None, 5_000) == "-"
    detail = {"jobStatus": {"state": "SUCCEEDED", "launchedTime": 1_000, "completedTime": 195_000}}
    assert common.outcome_line("me~j", detail) == "job me~j SUCCEEDED after 3 min 14 s"


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_portal_writes_the_same_text() -> None:
    """The portal's formatDuration (common.js), run under node on the same cases (ms; '–' for none)."""
    source = COMMON_JS.read_text()
    found = re.search(r"^function formatDuration\(ms\) \{.*?^\}", source, re.S | re.M)
    assert found, "formatDuration is gone from common.js"
    cases = [seconds for seconds, _ in CASES if seconds is not None and seconds == seconds]
    script = f"{found.group(0)}\nconsole.log(JSON.stringify({json.dumps(cases)}.map(s => formatDuration(s * 1000))));"
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True, timeout=60).stdout
    expected = [human_duration(seconds).replace("-", "–") for seconds in cases]
    assert json.loads(out) == expected
