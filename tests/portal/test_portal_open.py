"""`paijob local open`: a one-time login link to the portal of the background local cluster."""

from __future__ import annotations

import re
import webbrowser
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from paijob import cli
from paijob.local import daemon
from paijob.local.portal.sessions import CSRF_HEADER, SESSION_PATH


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One background local cluster for the module (`open` starts it)."""
    directory = tmp_path_factory.mktemp("open") / "state"
    yield directory
    daemon.down(directory)


@pytest.fixture
def local(state: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PAIJOB_LOCAL_STATE_DIR", str(state))
    return state


def open_portal(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["local", "open", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def redeem(link: str) -> requests.Response:
    base, code = link.split("/#code=")
    return requests.post(base + SESSION_PATH, json={"code": code}, headers={"Origin": base, CSRF_HEADER: "1"},
                         timeout=10)


def test_open_prints_a_one_time_link_never_the_token(capsys: pytest.CaptureFixture[str], local: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    monkeypatch.setattr(webbrowser, "open", lambda url, new=0: opened.append(url) or True)
    code, out, err = open_portal(capsys, "--no-browser")
    assert code == 0, err
    link = out.strip()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/#code=[A-Za-z0-9_-]{16,}", link), link
    token = daemon.read_token(local)
    assert token and token not in out + err
    assert opened == []  # --no-browser: only printed
    first, again = redeem(link), redeem(link)
    assert first.status_code == 200 and first.cookies
    assert again.status_code == 401  # the code worked once
    _, second, _ = open_portal(capsys, "--no-browser")
    assert second.strip() != link  # every call makes a new code


def test_open_uses_a_graphical_browser_and_says_when_there_is_none(
        capsys: pytest.CaptureFixture[str], local: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    monkeypatch.setattr(webbrowser, "open", lambda url, new=0: opened.append(url) or True)
    code, out, err = open_portal(capsys)  # no DISPLAY (conftest): a text browser would take the terminal
    assert code == 0 and opened == []
    assert "no graphical browser" in err and "ssh -L" in err
    monkeypatch.setenv("DISPLAY", ":0")
    code, out, err = open_portal(capsys)
    assert code == 0 and opened == [out.strip()] and "no graphical browser" not in err
