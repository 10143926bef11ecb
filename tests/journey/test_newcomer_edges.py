"""Rough edges a newcomer met (issue 45): each answered in one line that says what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from paijob import cli


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as stop:  # argparse's own exit
        code = int(stop.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_missing_job_file_is_called_a_job_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "render", "missing.yaml")
    assert code == 2 and "job file missing.yaml does not exist" in err and "template file" not in err


@pytest.mark.parametrize(("argv", "hint"), [(["render", "ddp", "--sett", "x=1"], "did you mean --set?"),
                                            (["logs", "--follw", "x"], "did you mean --follow?")])
def test_an_option_typo_is_one_line_with_the_likely_option(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                           hint: str) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2 and hint in err and "--help" in err
    assert len(err.strip().splitlines()) == 1 and "usage:" not in err


def test_cluster_add_s_usage_lists_only_what_works(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "cluster", "add", "--help")
    assert code == 0 and "--token-env" in out and "--token " not in out and "[--token TOKEN]" not in out
    code, _, err = run(capsys, "cluster", "add", "x", "--url", "https://pai.example.com", "--token", "abc")
    assert code == 2 and "--token-env" in err  # still refused, with the way to do it


def test_the_first_cluster_added_says_it_became_the_default(capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    code, _, err = run(capsys, "cluster", "add", "prod", "--url", "https://pai.example.com", "--user", "alice")
    assert code == 0 and "cluster prod is now the default" in err and "cluster use local" in err
    code, _, err = run(capsys, "cluster", "add", "lab", "--url", "https://lab.example.com", "--user", "alice")
    assert code == 0 and "now the default" not in err  # the second one changes nothing, and says nothing


def test_the_shm_warning_says_what_to_change(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "render", "ddp", "--set", "memoryMB=1024")
    assert code == 0 and "shmMB" in err and "raise memoryMB or lower shmMB" in err and "loaderWorkers" in err
