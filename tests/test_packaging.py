"""The distribution ships every sub-package, because setup.cfg lists them by hand."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config


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


def install_requires() -> list[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return [re.split(r"[<>=!~ \[]", line.strip(), maxsplit=1)[0].lower()
            for line in config["options"]["install_requires"].splitlines() if line.strip()]


IMPORT_NAMES = {"pyyaml": "yaml", "google-re2": "re2"}  # distribution -> the module paijob imports


def test_every_install_requirement_is_imported_by_paijob() -> None:
    """A requirement paijob never imports only costs users an install (jsonschema was one: only tests use it)."""
    source = "\n".join(path.read_text(encoding="utf-8") for path in (ROOT / "paijob").rglob("*.py"))
    unused = [name for name in install_requires()
              if not re.search(rf"^\s*(?:import|from) {IMPORT_NAMES.get(name, name)}\b", source, flags=re.MULTILINE)]
    assert not unused, f"setup.cfg install_requires lists packages paijob never imports: {unused}"


def test_the_install_page_names_the_clients_dependencies() -> None:
    readme = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    sentence = " ".join(readme.split("The client side (`paijob`) needs only ", 1)[1].split()).split(", and never", 1)[0]
    named = {word.strip().lower() for word in re.split(r",|\band\b", sentence) if word.strip()}
    assert named == set(install_requires()), f"docs/install.md names {sorted(named)}, setup.cfg requires {install_requires()}"


def test_the_pypi_description_has_no_relative_links() -> None:
    """PyPI shows the long description with no files beside it: a relative link or image there is broken."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    source = config["metadata"]["long_description"]
    assert source.startswith("file: "), source
    text = (ROOT / source.removeprefix("file: ").strip()).read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)", text) + re.findall(r"""(?:src|href)=["']([^"']+)""", text)
    relative = [target for target in targets if not re.match(r"[a-z][a-z0-9+.-]*://", target)]
    assert not relative, f"{source}: links PyPI cannot follow: {relative}"


def test_the_version_lives_in_one_place_and_the_changelog_has_it() -> None:
    import paijob

    metadata = _setup_cfg()["metadata"]
    assert metadata["version"].strip() == "attr: paijob.__version__"
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in changelog and f"## [{paijob.__version__}] - " in changelog


def test_the_license_file_is_the_license_setup_cfg_names() -> None:
    metadata = _setup_cfg()["metadata"]
    assert metadata["license"].strip() == "MIT" and metadata["license_files"].strip() == "LICENSE"
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License\n")
    assert {"Source", "Documentation", "Changelog", "Issues"} <= {
        line.split("=")[0].strip() for line in metadata["project_urls"].strip().splitlines()}
