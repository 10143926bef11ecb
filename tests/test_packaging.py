"""The distribution ships every sub-package, because setup.cfg lists them by hand."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def listed_packages() -> set[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return set(config["options"]["packages"].split())


def test_every_paijob_subpackage_is_listed_in_setup_cfg() -> None:
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "paijob").rglob("__init__.py")
    }
    missing = on_disk - listed_packages()
    assert not missing, f"add these to [options] packages in setup.cfg: {sorted(missing)}"


def test_templates_folder_is_shipped_as_paijob_templates() -> None:
    assert "paijob.templates" in listed_packages()
    import paijob.templates

    assert Path(paijob.templates.__file__).resolve().parent == ROOT / "templates"
