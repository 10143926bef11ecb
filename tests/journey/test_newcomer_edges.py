"""Rough edges a newcomer met (issue 45): each answered in one line that says what to do."""

from __future__ import annotations

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
