"""A wheel of the project carries the built-in templates (paijob.templates)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from render_helpers import ROOT

from paijob.render.templates import builtin_names


def test_wheel_contains_the_templates(tmp_path: Path) -> None:
    # Build from a copy so that setuptools' build/ folder never lands in the checkout.
    source = tmp_path / "src"
    source.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md", "docs/pypi.md"):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "paijob", source / "paijob", ignore=ignore)
    shutil.copytree(ROOT / "templates", source / "templates", ignore=ignore)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
             "--no-index", "-q", "-w", str(tmp_path / "dist"), str(source)],
            capture_output=True, text=True, timeout=20,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("pip wheel took over 20 s on this machine")
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "dist").glob("paijob-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for template in builtin_names():
        assert f"paijob/templates/{template}.yaml.j2" in names
        assert f"paijob/templates/{template}.values.yaml" in names
        assert f"paijob/templates/{template}.values.schema.json" in names
    assert "paijob/templates/_job.yaml.j2" in names
    assert "paijob/validate/schema.py" in names
    for page in ("index.html", "job.html", "common.js", "jobs.js", "job.js", "progress.js", "style.css"):
        assert f"paijob/local/portal/static/{page}" in names  # the portal has no build step: files ship as is
