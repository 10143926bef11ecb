"""Fixtures for the local cluster's tests: an in-process local cluster on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import TOKEN
from suite_helpers import isolate

from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.remote.client import PaiClient


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes the user's real profiles or local-cluster state."""
    isolate(tmp_path, monkeypatch)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LocalServer]:
    srv = LocalServer(tmp_path / "state", TOKEN).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(server: LocalServer) -> PaiClient:
    return PaiClient(server.url, TOKEN, user=local_user(), cluster_name="local", retries=1, backoff=0.05)
