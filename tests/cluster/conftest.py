"""Fixtures for the cluster tests: an in-process local cluster on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import TOKEN

from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.remote.client import PaiClient


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes the user's real profiles or local-cluster state."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("PAIJOB_LOCAL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PAIJOB_LOCAL_STOP_GRACE", "2")
    for var in ("PAI_CLUSTER_URL", "PAI_TOKEN", "PAI_USER"):
        monkeypatch.delenv(var, raising=False)


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
