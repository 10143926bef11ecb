"""`paijob run --local` and `paijob local up|down|status` with the local cluster as a background service."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from cluster_helpers import job_yaml
from suite_helpers import paijob

from paijob import api, cli


def test_run_local_starts_the_cluster_follows_logs_and_exits_0_on_success(
        capsys: pytest.CaptureFixture[str], local: Path, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(job_yaml("hello", ["echo hello from $PAI_TASK_INDEX", "sleep 0.3", "echo done"], instances=2))
    code, out, err = paijob(capsys, "run", str(job), "--local")
    assert code == 0, err
    for line in ("worker/0 | hello from 0", "worker/1 | hello from 1", "worker/0 | done", "worker/1 | done"):
        assert line in out
    assert "SUCCEEDED" in err
    assert (local / "token").stat().st_mode & 0o777 == 0o600
    # a rerun of the same file works: every run gets a unique name
    code, _, err = paijob(capsys, "run", str(job), "--local")
    assert code == 0, err


def test_run_local_exits_1_and_names_the_failing_task(capsys: pytest.CaptureFixture[str], local: Path,
                                                      tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(job_yaml("broken", ["if [ $PAI_TASK_INDEX = 1 ]; then echo bad >&2; exit 3; fi", "sleep 30"],
                            instances=2))
    code, out, err = paijob(capsys, "run", str(job), "--local")
    assert code == 1
    assert "worker/1 | bad" in out
    assert "FAILED: worker/1 exited with code 255" in err  # exit 3 is reported as 255 (exit spec)


def test_local_up_status_down(capsys: pytest.CaptureFixture[str], local: Path) -> None:
    code, out, _ = paijob(capsys, "local", "up")
    assert code == 0 and "127.0.0.1" in out
    code, out, _ = paijob(capsys, "local", "status")
    assert code == 0 and "running" in out
    code, out, _ = paijob(capsys, "local", "down")
    assert code == 0 and "stopped" in out
    code, out, _ = paijob(capsys, "local", "status")
    assert code == 3 and "not running" in out
    # read-only verbs never start it (issue 12): they say it is down
    code, _, err = paijob(capsys, "list", "-c", "local")
    assert code == 2 and "not running" in err
    # jobs are still there after a restart
    paijob(capsys, "local", "up")
    code, out, _ = paijob(capsys, "list", "-c", "local")
    assert code == 0 and "hello_" in out and "broken_" in out


def test_paijob_runtime_resolves_inside_local_tasks(capsys: pytest.CaptureFixture[str], local: Path,
                                                    tmp_path: Path) -> None:
    runtime = importlib.import_module("paijob.runtime.cli")
    if not hasattr(runtime, "main"):
        pytest.skip("paijob.runtime.cli has no main yet")
    job = tmp_path / "job.yaml"
    job.write_text(job_yaml("runtime", ["command -v paijob-runtime", "paijob-runtime --help > /dev/null"]))
    code, out, err = paijob(capsys, "run", str(job), "--local")
    assert code == 0, out + err
    assert "/paijob-runtime" in out


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_or_sighup_to_run_stops_the_job_and_exits_128_plus_the_signal(
        local: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: int, code: int) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(job_yaml("ended", ["echo started", "sleep 120"]))
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    process = subprocess.Popen([sys.executable, "-m", "paijob.cli", "run", str(job), "--local"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    seen: list[str] = []
    assert process.stdout is not None
    reader = threading.Thread(target=lambda: seen.extend(process.stdout or ()), daemon=True)  # line by line
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not any(line.startswith("worker/0 | started") for line in list(seen)):  # submitted, followed, running
            assert time.monotonic() < deadline and process.poll() is None, "".join(seen)
            time.sleep(0.05)
        job_id = next(line.split()[-1] for line in seen if line.startswith("paijob: submitted "))
        process.send_signal(signum)
        assert process.wait(timeout=60) == code
        reader.join(10)
        rest = "".join(seen)
        assert f"received {signal.Signals(signum).name}; stopping {job_id}" in rest and "Traceback" not in rest
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    client = api.connect("local", start_local=False)
    assert client.wait(job_id, poll=0.1, timeout=30)["jobStatus"]["state"] == "STOPPED"


def test_a_sigterm_during_the_submit_stops_the_job_once_the_submit_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    stopped: list[str] = []

    def submit(job: object, client: object) -> str:
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the request is in flight
        return "me~job_1"

    monkeypatch.setattr(api, "prepare", lambda request: SimpleNamespace(warnings=[], notes=[], target=None))
    monkeypatch.setattr(api, "connect", lambda target, timeout, **notes: SimpleNamespace(cluster_name="local", is_local=True))
    monkeypatch.setattr(api, "submit", submit)
    monkeypatch.setattr(api, "stop", lambda client, job_id: stopped.append(job_id))
    monkeypatch.setattr(api, "follow_logs", lambda *args, **kwargs: pytest.fail("followed after SIGTERM"))
    previous = signal.getsignal(signal.SIGTERM)
    assert cli.main(["run", "job.yaml", "--local"]) == 143
    assert stopped == ["me~job_1"] and signal.getsignal(signal.SIGTERM) is previous
