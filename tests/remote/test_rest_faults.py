"""Every cluster verb against a fault-injecting server: documented exit code, one line, no traceback, no token.

The fake cluster (``fault_server``) runs on 127.0.0.1 for one test. The verbs
run through ``paijob``'s own entry point (``cli.main``) against it, configured
the way a user would: ``PAI_CLUSTER_URL`` + ``PAI_TOKEN`` (``login`` through a
profile and ``--password-stdin``).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import job_yaml
from fault_server import PASSWORD, USER, FakePai, serve

from paijob import cli
from paijob.remote.transport import Transport

TOKEN = "fault-token-8c1d5e2a7b3f"  # must never show up in any output
TIMEOUT = 2.0
MARGIN = 2.5  # start-up and scheduling on a loaded 2-core machine, not a retry

VERBS = ("submit", "status", "logs", "stop", "list", "login")
READS = ("status", "logs", "list")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakePai]:
    with serve(TOKEN) as server:
        server.jobs[f"{USER}~existing"] = job_yaml("existing", ["true"])
        monkeypatch.setenv("PAI_CLUSTER_URL", server.url)
        monkeypatch.setenv("PAI_TOKEN", TOKEN)
        monkeypatch.setenv("PAI_USER", USER)
        yield server


@pytest.fixture
def elsewhere() -> Iterator[FakePai]:
    """Another origin (``localhost`` is another host name than 127.0.0.1) to redirect to."""
    with serve(TOKEN) as server:
        server.url = server.url.replace("127.0.0.1", "localhost")
        yield server


def argv(verb: str, fake: FakePai, tmp_path: Path) -> list[str]:
    if verb == "submit":
        job = tmp_path / "job.yaml"
        resources = {"cpu": 1, "memoryMB": 2048, "gpu": 0, "ports": {"SynPort": 1}}  # no validate warning
        job.write_text(job_yaml("fresh", ["true"], role_extra={"resourcePerInstance": resources}))
        return ["submit", str(job)]
    if verb == "login":
        return ["login", "prod", "--url", fake.url, "--user", USER, "--password-stdin"]
    if verb == "list":
        return ["list"]
    return [verb, f"{USER}~existing"]


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries back off 10 ms here instead of 0.5 s doubling: what these tests check is that a retry happens and
    how it ends (test_client_faults.py pins the backoff's own schedule)."""
    defaults = {**(Transport.__init__.__kwdefaults__ or {}), "backoff": 0.01}
    monkeypatch.setattr(Transport.__init__, "__kwdefaults__", defaults)


def run(verb: str, fake: FakePai, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, *extra: str) -> tuple[int, str, str, float]:
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    started = time.monotonic()
    code = cli.main([*argv(verb, fake, tmp_path), "--timeout", str(TIMEOUT), *extra])
    elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    return code, out, err, elapsed


def assert_clean_error(code: int, out: str, err: str, expected_code: int = 2) -> None:
    assert code == expected_code, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("paijob: error: "), err
    assert len(lines[0]) < 700, err
    assert TOKEN not in out + err and PASSWORD not in out + err


# --------------------------------------------------------------------------- redirects


@pytest.mark.parametrize("status", ["302", "307", "308"])
@pytest.mark.parametrize("verb", ["submit", "stop", "login"])
def test_a_redirected_change_is_an_error_naming_the_new_location(
        verb: str, status: str, fake: FakePai, elsewhere: FakePai, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    fake.redirect_to = elsewhere.url
    fake.set_fault(status)
    code, out, err, _ = run(verb, fake, tmp_path, capsys, monkeypatch)
    assert_clean_error(code, out, err)
    assert f"HTTP {status}" in err and elsewhere.url in err and "not carried out" in err
    assert elsewhere.seen == []  # neither re-sent there nor turned into a GET
    assert f"{USER}~fresh" not in fake.jobs and out == ""  # no job id printed as if it were accepted


@pytest.mark.parametrize("status", ["302", "307", "308"])
@pytest.mark.parametrize("verb", READS)
def test_a_cross_host_redirect_of_a_read_never_carries_the_token(
        verb: str, status: str, fake: FakePai, elsewhere: FakePai, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    fake.redirect_to = elsewhere.url
    fake.set_fault(status)
    code, out, err, _ = run(verb, fake, tmp_path, capsys, monkeypatch)
    assert elsewhere.seen, "the GET was expected to follow the redirect"
    assert all(auth is None for _, _, auth in elsewhere.seen)
    assert_clean_error(code, out, err)  # the other host asks for a token it did not get
    assert "not authorised" in err


@pytest.mark.parametrize("verb", READS)
def test_a_same_host_redirect_of_a_read_is_followed(verb: str, fake: FakePai, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    fake.set_fault("same-host-redirect", methods={"GET"})
    code, out, err, _ = run(verb, fake, tmp_path, capsys, monkeypatch)
    assert code == 0, err
    assert any("followed=1" in path and auth == f"Bearer {TOKEN}" for _, path, auth in fake.seen)
    assert TOKEN not in out + err


# --------------------------------------------------------------------------- trickle


@pytest.mark.parametrize("verb", VERBS)
def test_a_trickling_server_ends_every_verb_within_the_timeout(
        verb: str, fake: FakePai, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake.set_fault("trickle")
    code, out, err, elapsed = run(verb, fake, tmp_path, capsys, monkeypatch)
    assert elapsed < TIMEOUT + MARGIN, f"{verb} took {elapsed:.1f} s"
    if verb == "submit":  # the POST reached the server: the job may exist
        assert_clean_error(code, out, err, expected_code=4)
        assert "outcome is unknown" in err and "paijob status fresh" in err
    else:
        assert_clean_error(code, out, err)
        assert "timed out" in err and "--timeout" in err


def test_a_log_that_trickles_ends_logs_within_the_timeout(fake: FakePai, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    fake.set_fault("trickle", path="^/log-manager/")
    code, out, err, elapsed = run("logs", fake, tmp_path, capsys, monkeypatch)
    assert elapsed < TIMEOUT + MARGIN, f"logs took {elapsed:.1f} s"
    assert_clean_error(code, out, err)


def test_the_process_exits_at_the_deadline_though_the_server_still_trickles(fake: FakePai) -> None:
    fake.set_fault("trickle")
    env = {**os.environ, "PAI_CLUSTER_URL": fake.url, "PAI_TOKEN": TOKEN, "PAI_USER": USER}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "paijob.cli", "status", f"{USER}~existing", "--timeout", "2"],
                          env=env, capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - started
    assert proc.returncode == 2 and "timed out" in proc.stderr and "Traceback" not in proc.stderr
    assert elapsed < 2 + MARGIN + 4, f"took {elapsed:.1f} s"  # + the interpreter's start-up, under load


# --------------------------------------------------------------------------- bad answers


@pytest.mark.parametrize("fault", ["bad-json", "deep-json", "wide-json", "html-200", "wrong-shape"])
@pytest.mark.parametrize("verb", [*READS, "login"])
def test_a_success_status_with_a_body_that_is_not_the_api_s_is_a_clear_error(
        verb: str, fault: str, fake: FakePai, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake.set_fault(fault, path="^/rest-server/")
    code, out, err, _ = run(verb, fake, tmp_path, capsys, monkeypatch)
    assert_clean_error(code, out, err)
    assert ("not JSON" if fault != "wrong-shape" else "not what OpenPAI's REST API v2 sends") in err
    if verb == "login":
        assert not any(Path(os.environ["XDG_CONFIG_HOME"]).rglob("clusters.yaml"))


@pytest.mark.parametrize("fault", ["bad-json", "html-200", "wrong-shape"])
@pytest.mark.parametrize("verb", ["submit", "stop"])
def test_a_change_answered_2xx_with_what_rest_server_never_sends_is_an_unknown_outcome(
        verb: str, fault: str, fake: FakePai, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A 200 HTML page (a proxy, a login portal) to submit or stop says nothing about the job: exit 4,
    as for a timeout, naming what came back (was: exit 0 though no job existed)."""
    fake.set_fault(fault, methods={"POST", "PUT"}, path="^/rest-server/")
    code, out, err, _ = run(verb, fake, tmp_path, capsys, monkeypatch)
    assert_clean_error(code, out, err, expected_code=4)
    assert "outcome is unknown" in err and "HTTP 200" in err and "not OpenPAI's JSON" in err
    assert ("Sign in" if fault == "html-200" else "application/json") in err
    assert f"paijob status {'fresh' if verb == 'submit' else 'existing'}" in err
    assert out == ""


@pytest.mark.parametrize("verb", READS)
def test_odd_optional_fields_are_shown_as_unknown_not_a_traceback(verb: str, fake: FakePai, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    fake.set_fault("odd-fields")
    code, out, err, _ = run(verb, fake, tmp_path, capsys, monkeypatch)
    assert code == 0, err
    fake.set_fault("odd-attempt")
    code, out, err, _ = run(verb, fake, tmp_path, capsys, monkeypatch)
    if verb == "list":  # the list has no attempt ids
        assert code == 0, err
    else:
        assert_clean_error(code, out, err)
        assert "attemptId" in err


@pytest.mark.parametrize("fault", ["echo-401", "echo-500-html"])
@pytest.mark.parametrize("verb", VERBS)
def test_a_token_echoed_by_the_server_is_never_shown(verb: str, fault: str, fake: FakePai, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    fake.set_fault(fault)
    code, out, err, _ = run(verb, fake, tmp_path, capsys, monkeypatch)
    assert_clean_error(code, out, err)
    assert "Bearer ***" in err or "***" in err or "Internal Server Error" in err
    assert "<p>" not in err and "color: red" not in err  # tags and styles stripped


def test_an_echoed_token_in_verbose_logs_is_hidden_too(fake: FakePai, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    import logging

    caplog.set_level(logging.DEBUG)
    fake.set_fault("echo-401")
    code, out, err, _ = run("status", fake, tmp_path, capsys, monkeypatch)
    assert code == 2 and TOKEN not in out + err + caplog.text


# --------------------------------------------------------------------------- unknown outcomes


def test_create_then_503_says_the_outcome_is_unknown_instead_of_advising_a_new_name(
        fake: FakePai, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    fake.set_fault("create-then-503")
    code, out, err, _ = run("submit", fake, tmp_path, capsys, monkeypatch)
    assert_clean_error(code, out, err, expected_code=4)
    assert "outcome is unknown" in err and "paijob status fresh" in err
    assert "--unique-suffix" not in err and "--name" not in err
    assert [job for job in fake.jobs if job.endswith("~fresh")] == [f"{USER}~fresh"]  # exactly one job


def test_create_then_503_is_a_success_once_the_job_can_be_read_back(
        fake: FakePai, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    fake.set_fault("create-then-503", methods={"POST"})
    code, out, err, _ = run("submit", fake, tmp_path, capsys, monkeypatch)
    assert code == 0, err
    assert out.strip() == f"{USER}~fresh" and len([m for m, _, _ in fake.seen if m == "POST"]) == 1


@pytest.mark.parametrize("verb", ["submit", "status"])  # each try backs off: two verbs say enough
def test_an_answer_that_breaks_off_is_retried_then_a_clear_error(verb: str, fake: FakePai, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fake.set_fault("broken-body")
    code, out, err, _ = run(verb, fake, tmp_path, capsys, monkeypatch)
    if verb == "submit":  # the job was created, and reading it back breaks off too
        assert_clean_error(code, out, err, expected_code=4)
        assert "outcome is unknown" in err
    else:
        assert_clean_error(code, out, err)
        assert "connection broken while reading the answer" in err


# --------------------------------------------------------------------------- memory


def test_logs_are_streamed_so_memory_does_not_grow_with_the_log(fake: FakePai) -> None:
    env = {**os.environ, "PAI_CLUSTER_URL": fake.url, "PAI_TOKEN": TOKEN, "PAI_USER": USER}
    # VmHWM, not ru_maxrss: Linux carries the forking parent's peak (this test process) into ru_maxrss
    probe = ("import re, sys\nfrom paijob import cli\ncode = cli.main(sys.argv[1:])\n"
             "status = open('/proc/self/status').read()\n"
             "print(int(re.search(r'VmHWM:\\s+(\\d+)', status).group(1)) // 1024, file=sys.stderr)\n"
             "sys.exit(code)\n")

    def peak_mib() -> int:
        proc = subprocess.run([sys.executable, "-c", probe, "logs", f"{USER}~existing", "--timeout", "60"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return int(proc.stderr.strip().splitlines()[-1])

    small = peak_mib()
    line = b"x" * 99 + b"\n"
    fake.log = line * (48 * 1024 * 1024 // len(line))  # 48 MiB
    big = peak_mib()
    assert big - small < 24, f"peak RSS {small} MiB with a tiny log, {big} MiB with a 48 MiB one"


# --------------------------------------------------------------------------- stop of a job that ended


@pytest.mark.parametrize("state", ["SUCCEEDED", "FAILED", "STOPPED"])
def test_stop_of_a_job_that_already_ended_is_done(state: str, fake: FakePai, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """rest-server answers a stop of an ended job with HTTP 500 'Unexpected end of JSON input'."""
    fake.state = state
    fake.set_fault("stop-ended-500", methods={"PUT"})
    code, out, err, _ = run("stop", fake, tmp_path, capsys, monkeypatch)
    assert code == 0 and err.strip() == f"{USER}~existing already ended ({state}); nothing to stop"
    assert [method for method, *_ in fake.seen] == ["PUT", "GET"]


def test_a_failed_stop_of_a_running_job_stays_an_error(fake: FakePai, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    fake.state = "RUNNING"
    fake.set_fault("stop-ended-500", methods={"PUT"})
    code, out, err, _ = run("stop", fake, tmp_path, capsys, monkeypatch)
    assert_clean_error(code, out, err)
    assert "Unexpected end of JSON input" in err


def test_stop_of_a_job_that_does_not_exist_stays_an_error(fake: FakePai, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["stop", "nosuchjob", "--timeout", str(TIMEOUT)])
    out, err = capsys.readouterr()
    assert_clean_error(code, out, err)
    assert "not found" in err or "no job" in err.lower()
