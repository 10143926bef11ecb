"""Fixtures for the portal tests: an in-process local cluster and, where one is installed, a headless Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from portal_helpers import TOKEN, find_browser, new_browser
from suite_helpers import isolate

from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.remote.client import PaiClient


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes the user's real profiles or local-cluster state."""
    isolate(tmp_path, monkeypatch, "DISPLAY", "WAYLAND_DISPLAY")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    srv = LocalServer(tmp_path_factory.mktemp("portal") / "state", TOKEN).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def client(server: LocalServer) -> PaiClient:
    return PaiClient(server.url, TOKEN, user=local_user(), cluster_name="local", retries=1, backoff=0.05)


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[test]')")
    found = find_browser()
    if isinstance(found, str):
        pytest.skip(found)
    browser = new_browser(*found, tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield browser
    finally:
        browser.quit()
