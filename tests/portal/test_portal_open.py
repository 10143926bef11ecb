"""`paijob local open`: a one-time login link to the portal of the background local cluster."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import webbrowser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from paijob import cli
from paijob.local import daemon, layout
from paijob.local.portal.sessions import CSRF_HEADER, SESSION_PATH


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
    port = urlsplit(out.strip()).port  # issue 54 item 8: the hint named PORT, though paijob knows it
    assert port and f"`ssh -L {port}:127.0.0.1:{port} " in err and "PORT" not in err
    monkeypatch.setenv("DISPLAY", ":0")
    code, out, err = open_portal(capsys)
    assert code == 0 and "no graphical browser" not in err
    assert opened == [(local / layout.PORTAL_PAGE).as_uri()]  # the page, never the link with its code
    assert out.strip() in (local / layout.PORTAL_PAGE).read_text()


BROWSER_SCRIPT = """#!/bin/sh
# what a browser started by `paijob local open` is handed: its arguments, and a copy of each file named
printf '%s\\n' "$@" > "$RECORD/argv"
for arg in "$@"; do
  case "$arg" in file://*) path="${arg#file://}"; stat -c '%a %u' "$path" > "$RECORD/mode"; cat "$path" > "$RECORD/page";;
  esac
done
"""


def test_the_login_code_never_rides_on_the_browsers_command_line(tmp_path: Path, local: Path) -> None:
    """Issue 46 row 1: a browser's command line is world-readable (/proc/PID/cmdline), so another local user
    could redeem the one-time code first. A real `paijob local open` launches the browser through BROWSER:
    it is handed a file:// page only this user can read, and that page holds the working link."""
    record = tmp_path / "record"
    record.mkdir()
    browser = tmp_path / "browser.sh"
    browser.write_text(BROWSER_SCRIPT)
    browser.chmod(0o755)
    env = {**os.environ, "BROWSER": str(browser), "DISPLAY": ":0", "RECORD": str(record),
           "PAIJOB_LOCAL_STATE_DIR": str(local)}
    done = subprocess.run([sys.executable, "-c", "import sys; from paijob import cli; sys.exit(cli.main(sys.argv[1:]))",
                           "local", "open"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    link = done.stdout.strip()
    code = link.split("#code=")[1]
    argv = (record / "argv").read_text()
    assert code not in argv and argv.strip() == (local / layout.PORTAL_PAGE).as_uri()
    mode, owner = (record / "mode").read_text().split()
    assert mode == "600" and int(owner) == os.getuid()
    page = (record / "page").read_text()
    assert f'url={link}"' in page  # the page sends the browser on to the link ...
    assert redeem(link).status_code == 200  # ... which still works: nobody else could have used it
