"""Helpers every test folder shares (importable as ``suite_helpers``: ``tests/`` is on the path, the
suite's root conftest lives there). Folder-specific ones stay in each folder's ``*_helpers.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from paijob import cli


def paijob(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``paijob ARGV`` run in this process, as a user's shell would: its exit code, stdout and stderr."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def make_tree(root: Path, files: dict[str, str]) -> Path:
    """``files`` (relative path -> text) written under ``root``, folders made as needed; ``root``."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
