"""The local cluster reads a job's text once: at submit (validation builds the model the runner and the
views share), or, for a job an earlier server stored, the first time a view needs it. No request that
reads a job (its status, a task's attempts and logs, the virtual cluster's usage) parses YAML again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from cluster_helpers import TOKEN, job_yaml

from paijob.local.daemon import local_user
from paijob.local.jobmodels import JobModels
from paijob.local.server import LocalServer
from paijob.openpai import jsyaml
from paijob.openpai.model import parse_job
from paijob.remote.client import PaiClient


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every YAML text paijob reads in this process from now on (all of jsyaml's loaders compose)."""
    seen: list[str] = []
    compose = jsyaml._compose

    def counted(text: str, source: str, *args: Any) -> Any:
        seen.append(source)
        return compose(text, source, *args)

    monkeypatch.setattr(jsyaml, "_compose", counted)
    yield seen


def _read_everything(server: LocalServer, client: PaiClient, job_id: str) -> None:
    """What `paijob status`, `paijob logs` and the portal ask about one job, and the cluster's usage."""
    client.get_job(job_id)
    client.get_job(job_id, attempt=0)
    client.task_status(job_id, 0, "worker", 1)
    uris = client.log_locations(job_id, 0, "worker", 0, 0)
    client.read_log(uris["all"])
    assert "echo started" in client.get_config(job_id)  # the config, secrets masked (none here)
    answer = requests.get(f"{server.url}/rest-server/api/v2/virtual-clusters",
                          headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert answer.status_code == 200
    assert answer.json()["default"]["resourcesUsed"]["cpu"] == 2  # the running job's 2 tasks x 1 cpu


def test_a_submitted_job_is_parsed_once_and_no_view_reads_its_text(
        server: LocalServer, client: PaiClient, reads: list[str]) -> None:
    job_id = client.submit(job_yaml("once", ["echo started", "sleep 60"], instances=2, role="worker"))
    assert reads.count("job") == 1  # the server's one read, to validate (the client names its own "the job")
    reads.clear()
    deadline = time.monotonic() + 60
    while client.get_job(job_id)["jobStatus"]["state"] != "RUNNING":  # every task started
        assert time.monotonic() < deadline, "the job did not start within 60 s"
        time.sleep(0.05)
    _read_everything(server, client, job_id)
    client.stop(job_id)
    client.wait(job_id, poll=0.05, timeout=60)
    assert reads == []


def test_a_job_stored_by_an_earlier_server_is_parsed_once_by_the_next(
        tmp_path: Path, reads: list[str]) -> None:
    state = tmp_path / "restart"
    with LocalServer(state, TOKEN) as first:
        client = PaiClient(first.url, TOKEN, user=local_user(), cluster_name="local", retries=1, backoff=0.05)
        job_id = client.submit(job_yaml("stored", ["true"], instances=2, role="worker"))
        client.wait(job_id, poll=0.05, timeout=60)
    reads.clear()
    with LocalServer(state, TOKEN) as second:
        client = PaiClient(second.url, TOKEN, user=local_user(), cluster_name="local", retries=1, backoff=0.05)
        for _ in range(3):
            assert client.get_job(job_id)["jobStatus"]["state"] == "SUCCEEDED"
        client.task_status(job_id, 0, "worker", 1)
    assert len(reads) == 1


def test_a_job_name_reused_after_a_prune_gets_the_model_of_its_new_text() -> None:
    models = JobModels(kept=2)
    old, new = job_yaml("reused", ["true"]), job_yaml("reused", ["true"], instances=3)
    models.remember("me~reused", old, parse_job(jsyaml.load_job(old, "job").value))
    assert models.of({"username": "me", "name": "reused", "config": new}).roles[0].instances == 3
    for name in ("a", "b"):  # the least recently used model goes first
        models.of({"username": "me", "name": name, "config": job_yaml(name, ["true"])})
    assert list(models._models) == ["me~a", "me~b"]
