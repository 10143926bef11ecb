"""`paijob submit` of a job whose image is a placeholder says so once, as the error, not also as a warning."""

from __future__ import annotations

import pytest

from paijob import cli
from paijob.remote import profiles


def test_the_placeholder_image_is_one_error_line_on_submit(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROD_TOKEN", "t0ken")
    profiles.add("prod", "http://127.0.0.1:9", user="me", token_env="PROD_TOKEN")  # never contacted
    code = cli.main(["submit", "horovod", "--set", "script=train.py", "-c", "prod"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("is a placeholder") == 1, err
    assert err.startswith("paijob: error: ") and "cluster prod cannot pull" in err
    code = cli.main(["submit", "horovod", "--set", "script=train.py", "-c", "prod", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 0 and err.count("is a placeholder") == 1 and "warning" in err  # a dry run only warns
