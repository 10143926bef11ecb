"""The local cluster's settings from the environment are checked when it starts: one line, exit 2.

Before, ``PAIJOB_LOCAL_STOP_GRACE=abc`` was read first at a job's stop, crashed its
runner and left the job STOPPING with its processes running; ``USER=../../evil``
put job folders outside the state dir.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from paijob import cli
from paijob.local import settings

BAD = [
    ("PAIJOB_LOCAL_STOP_GRACE", "abc"), ("PAIJOB_LOCAL_STOP_GRACE", "5s"), ("PAIJOB_LOCAL_STOP_GRACE", "nan"),
    ("PAIJOB_LOCAL_STOP_GRACE", "-1"), ("PAIJOB_LOCAL_STOP_GRACE", "1e9"),
    ("PAIJOB_LOCAL_UNLIMITED_RETRY_CAP", "three"), ("PAIJOB_LOCAL_UNLIMITED_RETRY_CAP", "-1"),
    ("PAIJOB_LOCAL_UNLIMITED_RETRY_CAP", "1" + "0" * 23), ("PAIJOB_LOCAL_CGROUP", "yes"),
    ("PAIJOB_OPENPAI_BEFORE_1_6", "true"), ("USER", "../../evil"), ("USER", "a/b"), ("USER", ".."), ("USER", "-rf"),
]


@pytest.mark.parametrize(("name", "value"), BAD)
def test_paijob_local_up_names_a_bad_setting_in_one_line(name: str, value: str, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setenv(name, value)
    if name == "USER":
        monkeypatch.setenv("LOGNAME", value)  # getpass reads LOGNAME first
    assert cli.main(["local", "up"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("paijob: error: ") and repr(value)[:40] in err[0], err
    assert not (tmp_path / "state" / "server.json").exists()  # nothing was started


def test_the_server_itself_refuses_to_start_with_a_bad_setting(tmp_path: Path) -> None:
    env = {**os.environ, "PAIJOB_LOCAL_STOP_GRACE": "5s"}
    done = subprocess.run([sys.executable, "-m", "paijob.local.server", "--state-dir", str(tmp_path / "s")],
                          env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "paijob local cluster: PAIJOB_LOCAL_STOP_GRACE='5s' is not a number of seconds from 0 to 3600 "
        "(e.g. PAIJOB_LOCAL_STOP_GRACE=5); unset it for the default, 5"]


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("PAIJOB_LOCAL_STOP_GRACE", "0.5", 0.5), ("PAIJOB_LOCAL_STOP_GRACE", " 7 ", 7.0),
    ("PAIJOB_LOCAL_UNLIMITED_RETRY_CAP", "0", 0), ("PAIJOB_LOCAL_CGROUP", "0", False),
    ("USER", "alice.smith-2", "alice.smith-2"), ("PAIJOB_OPENPAI_BEFORE_1_6", "1", True),
])
def test_good_settings_are_read(name: str, value: str, expected: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, value)
    if name == "USER":
        monkeypatch.setenv("LOGNAME", value)
    readers = {"PAIJOB_LOCAL_STOP_GRACE": settings.stop_grace, "PAIJOB_LOCAL_UNLIMITED_RETRY_CAP":
               settings.unlimited_retry_cap, "PAIJOB_LOCAL_CGROUP": settings.cgroup_wanted, "USER": settings.user_name,
               "PAIJOB_OPENPAI_BEFORE_1_6": settings.openpai_before_1_6}
    assert readers[name]() == expected
