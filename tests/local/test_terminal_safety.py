"""Job output shown on a terminal: control sequences escaped (colours kept), raw with --raw or in a pipe."""

from __future__ import annotations

import base64
import io
import sys
from pathlib import Path

import pytest
from cluster_helpers import TOKEN, job_yaml

from paijob import cli, termsafe
from paijob.commands.status import print_status
from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.remote import profiles
from paijob.remote.client import PaiClient

HOSTILE = "\x1b]0;pwned\x07\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\\x1b[2J\x1b[H\x9b2J\b\x1b[31mred\x1b[0m"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_line_keeps_colours_and_escapes_every_other_control() -> None:
    shown = termsafe.line(HOSTILE + "\tand a bar\r100%")
    assert "\x1b[31mred\x1b[0m" in shown and "\tand a bar\r100%" in shown
    assert shown.count("\x1b") == 2 and "\x07" not in shown and "\x9b" not in shown and "\b" not in shown
    assert shown.startswith("\\x1b]0;pwned\\x07\\x1b]8;;https://evil.example/\\x1b\\click")
    assert "\\x1b[2J\\x1b[H\\x9b2J\\x08" in shown


def test_a_name_escapes_returns_newlines_and_direction_overrides() -> None:
    assert termsafe.name("ok\rfake.txt\n\u202etxt.exe\x1b[31m") == "ok\\rfake.txt\\n\\u202etxt.exe\\x1b[31m"
    assert termsafe.message("line one\x1b[2J\nline two\r") == "line one\\x1b[2J\nline two\\r"


def test_logs_and_status_escape_on_a_terminal_and_are_raw_with_raw_or_in_a_pipe(
        server: LocalServer, client: PaiClient, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    encoded = base64.b64encode(HOSTILE.encode() + b"\n").decode()
    command = f"echo {encoded} | base64 -d"
    job_id = client.submit(job_yaml("hostile", [command]))
    client.wait(job_id, poll=0.1, timeout=60)
    monkeypatch.setenv("SRV_TOKEN", TOKEN)
    profiles.add("srv", server.url, user=local_user(), token_env="SRV_TOKEN")

    def logs(*extra: str, tty: bool) -> str:
        out = Terminal() if tty else io.StringIO()
        monkeypatch.setattr(sys, "stdout", out)
        assert cli.main(["logs", "hostile", "-c", "srv", "--stream", "stdout", *extra]) == 0
        return out.getvalue()

    escaped = logs(tty=True)
    assert "\x1b]" not in escaped and "\x1b[2J" not in escaped and "\\x1b]0;pwned\\x07" in escaped
    assert "\x1b[31mred\x1b[0m" in escaped
    assert HOSTILE in logs(tty=False) and HOSTILE in logs("--raw", tty=True)
    detail = client.get_job(job_id)
    detail["jobStatus"]["appExitTriggerMessage"] = "bad\x1b[2J"  # as a cluster may quote the job's stderr
    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    print_status(detail, job_id)
    assert "reason     bad\\x1b[2J" in terminal.getvalue() and "\x1b[2J" not in terminal.getvalue()
    capsys.readouterr()


def test_cp_lists_hostile_names_escaped_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "state" / "outputs" / f"{local_user()}~job"
    out.mkdir(parents=True)
    (out / "result.json").write_text("{}")
    (out / "gone\r\x1b]0;pwned\x07ok.txt").symlink_to("/nonexistent")
    dest = tmp_path / "dest"
    dest.mkdir()
    for raw, expected in ((False, "gone\\r\\x1b]0;pwned\\x07ok.txt (dangling"),
                          (True, "gone\r\x1b]0;pwned\x07ok.txt (dangling")):
        terminal = Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        assert cli.main(["cp", "job:.", str(dest / str(raw)), "-c", "local", *(["--raw"] if raw else [])]) == 1
        assert expected in terminal.getvalue()
