"""Fixtures for the training tests (helpers live in training_helpers.py)."""

from __future__ import annotations

import os
from typing import Any

import pytest


@pytest.fixture
def clean_torch_state() -> Any:
    """In-process recipe runs may switch deterministic mode; put it back."""
    import torch

    yield
    torch.use_deterministic_algorithms(False)
    for key in ("RANK", "WORLD_SIZE", "PAIJOB_FAULT_AT"):
        os.environ.pop(key, None)


@pytest.fixture(autouse=True)
def no_outer_precision(monkeypatch: pytest.MonkeyPatch) -> None:
    """A PAIJOB_PRECISION in the developer's shell must not change the tests."""
    monkeypatch.delenv("PAIJOB_PRECISION", raising=False)
