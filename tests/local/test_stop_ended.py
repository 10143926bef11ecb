"""`paijob stop` of a local job that already ended says so and leaves the job as it ended (as on OpenPAI)."""

from __future__ import annotations

import pytest
from cluster_helpers import TOKEN, job_yaml

from paijob import cli
from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.remote import profiles
from paijob.remote.client import ClusterError, PaiClient


def test_stop_of_an_ended_local_job_prints_already_ended_and_changes_nothing(
        server: LocalServer, client: PaiClient, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    job_id = client.submit(job_yaml("done", ["true"]))
    before = client.wait(job_id, poll=0.1)
    assert before["jobStatus"]["state"] == "SUCCEEDED"
    with pytest.raises(ClusterError) as refused:  # rest-server's answer: an error, the job untouched
        client.stop(job_id)
    assert refused.value.status == 500
    monkeypatch.setenv("SRV_TOKEN", TOKEN)
    profiles.add("srv", server.url, user=local_user(), token_env="SRV_TOKEN")
    code = cli.main(["stop", job_id, "-c", "srv"])
    err = capsys.readouterr().err
    assert code == 0 and f"{job_id} already ended (SUCCEEDED); nothing to stop" in err
    after = client.get_job(job_id)["jobStatus"]
    assert (after["state"], after["executionType"]) == ("SUCCEEDED", before["jobStatus"]["executionType"]) \
        == ("SUCCEEDED", "START")
