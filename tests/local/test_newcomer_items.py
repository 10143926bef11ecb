"""A newcomer's small stumbles (issue 54 items 6 and 8), each pinned: the slow rank in `run`'s closing lines and
`list`, `validate -c` with the cluster unreachable, `run --local train.py`, the `--set instances` hint,
`local open`'s ssh hint, `stacks` of a finished job, `cluster add` over a profile, `local rm`."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from cluster_helpers import TOKEN, job_yaml
from suite_helpers import paijob

from paijob import api, cli
from paijob.common.records import SlowRecord
from paijob.local.processes import SLOW_NAME
from paijob.local.server import LocalServer
from paijob.remote import profiles
from paijob.remote.client import PaiClient

SLOW_LINE = "slow rank: rank 1 (node rank 0, host 127.0.0.1, local rank 1) holds the job back"


def test_run_s_closing_lines_of_a_job_that_succeeded_keep_the_slow_rank_verdict(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    detail = {"jobStatus": {"state": "SUCCEEDED", "launchedTime": 1_000, "completedTime": 66_000,
                            "paijobSlowRank": {"line": SLOW_LINE, "final": True, "figures": []}}, "taskRoles": {}}
    client = SimpleNamespace(cluster_name="local", is_local=True)
    monkeypatch.setattr(api, "prepare", lambda request: SimpleNamespace(warnings=[], notes=[], target=None,
                                                                         sent_job=lambda: None))
    monkeypatch.setattr(api, "connect", lambda target, timeout, **notes: client)
    monkeypatch.setattr(api, "submit", lambda job, client: "me~job_1")
    monkeypatch.setattr(api, "follow_logs", lambda *args, **kwargs: SimpleNamespace(follow=lambda: detail))
    monkeypatch.setattr(api, "output_location", lambda *args: None)
    assert cli.main(["run", "job.yaml", "--local"]) == 0
    err = capsys.readouterr().err
    closing = err.splitlines()
    at = next(i for i, line in enumerate(closing) if line.startswith("paijob: job me~job_1 SUCCEEDED after 1 min 5 s"))
    assert closing[at + 1] == (f"paijob: slow rank {SLOW_LINE} (over the run) (`paijob status me~job_1 -c local` "
                               "has each rank's figures)")


def test_list_marks_a_running_job_the_slow_rank_doctor_names(
        server: LocalServer, client: PaiClient, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    job_id = client.submit(job_yaml("slowly", ["sleep 60"]))
    deadline = time.monotonic() + 30
    while client.get_job(job_id)["jobStatus"]["state"] != "RUNNING":
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.1)
    folder = server.cluster.work_dir(job_id, 0, "worker", 0)
    (folder / SLOW_NAME).write_text(SlowRecord("rank", SLOW_LINE, (1,), (), time=time.time()).to_json())
    monkeypatch.setenv("SRV_TOKEN", TOKEN)
    profiles.add("srv", server.url, user=client.user, token_env="SRV_TOKEN")
    try:
        code, out, err = paijob(capsys, "list", "-c", "srv")
        assert code == 0, err
        (row,) = [line for line in out.splitlines() if job_id in line]
        assert row.split()[1:3] == ["RUNNING", "slow-rank"]
        listed: list[dict[str, Any]] = client.list_jobs()
        assert listed[0]["paijobSlowRank"]["line"] == SLOW_LINE
    finally:
        client.stop(job_id)
