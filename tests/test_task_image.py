"""runtime/Dockerfile and .dockerignore: no source in the image, no checkout clutter in the build context.

The image itself is built and run by .ci/image-stage (podman, as root); these checks are the fast part: they read
the files as Docker reads them.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "runtime" / "Dockerfile"


def instructions(text: str) -> list[str]:
    """The Dockerfile's instructions, one string each (continuation lines joined, comments dropped)."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    return [line.strip() for line in joined.splitlines() if line.strip()]


def stages(text: str) -> list[list[str]]:
    result: list[list[str]] = []
    for instruction in instructions(text):
        if instruction.upper().startswith("FROM "):
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parent folders decides."""
    verdict = False
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        exclude = not pattern.startswith("!")
        body = pattern.lstrip("!").strip("/")
        regex = re.escape(body).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        if any(re.fullmatch(regex, candidate) for candidate in candidates):
            verdict = exclude
    return verdict


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_the_image_stage_has_no_layer_from_the_build_context() -> None:
    final = stages(DOCKERFILE.read_text())[-1]
    copies = [i for i in final if i.split()[0].upper() in ("COPY", "ADD")]
    assert not copies, f"the final stage must mount the wheel, not copy files into a layer: {copies}"
    assert any("--mount=type=bind,from=wheel" in i for i in final if i.upper().startswith("RUN "))


def test_the_install_steps_mount_points_lie_directly_under_root() -> None:
    """Builders remove the empty mount points they make for a RUN step, but buildah 1.28 (Debian 12's podman 4.3)
    misses a target whose leading folder its storage path shares (/tmp/... with a storage under /tmp), leaving an
    empty folder and a 0-byte file in the image; a target right under / is removed wherever the storage lies."""
    final = stages(DOCKERFILE.read_text())[-1]
    targets = [
        option.split("=", 1)[1]
        for instruction in final
        if instruction.upper().startswith("RUN ")
        for mount in re.findall(r"--mount=(\S+)", instruction)
        for option in mount.split(",")
        if option.split("=", 1)[0] in ("target", "dst", "destination")
    ]
    assert len(targets) == 2, targets  # the wheel and the setup script
    assert all(PurePosixPath(target).parent == PurePosixPath("/") for target in targets), targets


def test_the_wheel_stage_holds_only_the_wheel_so_a_build_context_can_replace_it() -> None:
    """``--build-context wheel=dist`` replaces the stage named wheel: its layout must be a folder's (the wheel at
    the root), and only the build stage may copy the source tree."""
    named = {stage[0].split()[-1]: stage for stage in stages(DOCKERFILE.read_text())[:-1]}
    assert named["wheel"] == ["FROM scratch AS wheel", "COPY --from=build /wheel/ /"]
    assert any(i.startswith("COPY . ") for i in named["build"])


def test_the_default_base_is_the_templates_default_image() -> None:
    default = re.search(r"^ARG BASE_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.M)
    assert default is not None
    values = yaml.safe_load((ROOT / "templates" / "ddp.values.yaml").read_text())
    assert default.group(1) == values["image"]


def test_the_labels_are_the_oci_ones() -> None:
    text = DOCKERFILE.read_text()
    for key in ("source", "version", "licenses", "description", "revision"):
        assert f"org.opencontainers.image.{key}=" in text


def test_dockerignore_keeps_venvs_git_and_caches_out() -> None:
    patterns = dockerignore()
    for path in (".venv/bin/python", ".venv-oldest/lib/x.py", ".git/HEAD", "tests/sdk/node_modules/a/b.js",
                 "paijob/__pycache__/cli.cpython-311.pyc", ".image-cache/storage/vfs/x", "dist/paijob-0.1.0.tar.gz",
                 "paijob.egg-info/PKG-INFO", ".pip-cache/http/x", "site/index.html", "dist/paijob-0.1.0-py3-none-any.whl"):
        assert ignored(path, patterns), path


def test_dockerignore_keeps_what_the_build_needs() -> None:
    patterns = dockerignore()
    for path in ("setup.cfg", "pyproject.toml", "paijob/__init__.py", "templates/ddp.yaml.j2", "docs/pypi.md",
                 "runtime/image-setup.sh", "LICENSE"):
        assert not ignored(path, patterns), path


def test_the_ignore_matcher_reads_exceptions_and_folders() -> None:
    assert ignored("a/b/c", ["a"]) and not ignored("a/b/c", ["a", "!a/b"]) and not ignored("ab", ["a"])
