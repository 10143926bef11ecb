"""Fixtures for the REST client's tests (paijob.remote), against fake servers or the local cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from suite_helpers import isolate


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes the user's real profiles or local-cluster state."""
    isolate(tmp_path, monkeypatch)
