"""The template include race (issue 55 item 4): with ``inc.j2`` swapped between a file and a link to a
secret while renders run, no render ever reads the secret (the loader opens what it walked, through the
folder's descriptor, never a name it checked before), and no path form (NUL, long names, odd unicode,
folders, FIFOs, loops) ends in a traceback."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from paijob.errors import PaijobError
from paijob.render import templating
from paijob.render.templates import TemplateRefused, find_template, user_include

SECRET = "gho_" + "RACEDSECRET" * 3 + "x9"
CLEAN = "name: clean\n"
JOB = ("protocolVersion: 2\n{% include 'inc.j2' %}type: job\nprerequisites:\n"
       "  - {name: img, type: dockerimage, uri: 'python:3.11'}\ntaskRoles:\n  w:\n    instances: 1\n"
       "    dockerImage: img\n    resourcePerInstance: {cpu: 1, memoryMB: 1024, gpu: 0}\n    commands: [echo hi]\n")


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    file = tmp_path / "home" / ".config" / "gh" / "hosts.yml"
    file.parent.mkdir(parents=True)
    file.write_text(f"name: {SECRET}\n")
    return file


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "t.yaml.j2").write_text(JOB)
    (folder / "inc.j2").write_text(CLEAN)
    return folder


@pytest.fixture
def swapping(project: Path, secret: Path) -> Iterator[list[int]]:
    """A thread that swaps ``inc.j2`` between a clean file and a link to the secret as fast as it can,
    each swap atomic (a rename over it), for as long as the test runs; yields [swaps made]."""
    stop = threading.Event()
    swaps = [0]

    def toggle() -> None:
        link, file, inc = project / ".new-link", project / ".new-file", project / "inc.j2"
        while not stop.is_set():
            os.symlink(secret, link)
            os.replace(link, inc)
            file.write_text(CLEAN)
            os.replace(file, inc)
            swaps[0] += 2

    thread = threading.Thread(target=toggle, daemon=True)
    thread.start()
    try:
        yield swaps
    finally:
        stop.set()
        thread.join()


def test_no_include_ever_reads_the_secret_while_inc_is_swapped_for_a_link(
        project: Path, swapping: list[int]) -> None:
    folder = str(project.resolve())
    read = refused = missing = 0
    for _ in range(5000):
        try:
            found = user_include(folder, "inc.j2")
        except TemplateRefused as error:  # (40 swaps in a row at the very moment: too many links)
            assert ("is a link to" in error.why or "too many links" in error.why) and SECRET not in str(error)
            refused += 1
            continue
        if found is None:  # between a rename's unlink and link: no file for an instant
            missing += 1
            continue
        assert found[0] == CLEAN.encode(), found
        read += 1
    assert swapping[0] > 100 and read > 0 and refused > 0, (swapping[0], read, refused, missing)


def test_no_include_reads_the_secret_while_a_folder_on_its_path_is_swapped_for_a_link(
        project: Path, secret: Path) -> None:
    """The folder part of ``sub/inc.j2`` swapped between a real folder and a link to ``~/.config/gh`` (which holds
    an ``inc.j2`` of its own): each part is opened without following a link, so the walk never enters it."""
    (secret.parent / "inc.j2").write_text(f"name: {SECRET}\n")
    real = project / "real-sub"
    real.mkdir()
    (real / "inc.j2").write_text(CLEAN)
    stop = threading.Event()

    def toggle() -> None:
        sub, link, swapped = project / "sub", project / ".sub-link", project / ".sub-dir"
        while not stop.is_set():
            os.symlink(secret.parent, link)
            os.replace(link, sub)  # sub is now a link out
            os.rename(real, swapped)
            os.rename(swapped, real)
            os.symlink("real-sub", link)
            os.replace(link, sub)  # sub is now a link inside: read

    thread = threading.Thread(target=toggle, daemon=True)
    thread.start()
    counts = {"read": 0, "refused": 0, "missing": 0}
    try:
        for _ in range(3000):
            try:
                found = user_include(str(project.resolve()), "sub/inc.j2")
            except TemplateRefused as error:
                assert SECRET not in str(error)
                counts["refused"] += 1
                continue
            if found is None:
                counts["missing"] += 1
                continue
            assert found[0] == CLEAN.encode(), found
            counts["read"] += 1
    finally:
        stop.set()
        thread.join()
    assert counts["read"] > 0 and counts["refused"] > 0, counts


def test_no_render_ships_the_secret_while_inc_is_swapped_for_a_link(project: Path, swapping: list[int]) -> None:
    """The attack as a user meets it: whole renders of the cloned project's template, each loading its
    include afresh (a new process does; here the environment's cache is cleared)."""
    outcomes = {"rendered": 0, "refused": 0}
    for _ in range(500):
        templating._environment.cache_clear()
        try:
            result = templating.render_template(find_template(str(project / "t.yaml.j2")))
        except PaijobError as error:
            assert SECRET not in str(error) and "refused" in str(error), error
            outcomes["refused"] += 1
            continue
        assert SECRET not in result.text and "name: clean" in result.text
        outcomes["rendered"] += 1
    assert outcomes["rendered"] > 0 and swapping[0] > 50, (outcomes, swapping)


def _path_forms(project: Path, secret: Path) -> dict[str, str]:
    (project / "folder.j2").mkdir()
    os.mkfifo(project / "fifo.j2")
    with socket.socket(socket.AF_UNIX) as sock:
        here = os.getcwd()
        os.chdir(project)  # bound by a relative name: a socket's path holds 107 bytes, tmp_path may be longer
        try:
            sock.bind("sock.j2")
        finally:
            os.chdir(here)
    (project / "loop.j2").symlink_to("loop.j2")
    (project / "a.j2").symlink_to("b.j2")
    (project / "b.j2").symlink_to("a.j2")
    (project / "dangling.j2").symlink_to("nowhere/x.j2")
    (project / "to-fifo.j2").symlink_to("fifo.j2")
    (project / "to-zero.j2").symlink_to("/dev/zero")
    (project / "up.j2").symlink_to("sub/../../" + os.path.relpath(secret, project.parent))
    (project / "sub").mkdir()
    (project / "sub" / "back.j2").symlink_to("../inc.j2")  # inside: read
    return {
        "nul": "inc\0.j2", "long name": "x" * 300, "long path": "d/" * 3000 + "x.j2", "lone surrogate": "\ud800.j2",
        "escaped byte": "\udcff.j2", "right-to-left": "\u202egnp.j2", "combining": "i\u0307nc.j2",
        "fullwidth": "\uff49nc.j2", "folder": "folder.j2", "fifo": "fifo.j2", "socket": "sock.j2",
        "self loop": "loop.j2", "loop": "a.j2", "dangling": "dangling.j2", "link to a fifo": "to-fifo.j2",
        "link to a device": "to-zero.j2", "link out by dots": "up.j2", "link inside": "sub/back.j2",
        "empty": "", "dot": ".", "trailing slash": "inc.j2/", "dev": "/dev/zero", "proc": "/proc/self/environ",
    }


def test_no_path_form_ends_in_a_traceback(project: Path, secret: Path) -> None:
    forms = _path_forms(project, secret)
    ref = find_template(str(project / "t.yaml.j2"))
    (project / "t.yaml.j2").write_text("{% include part %}\n")
    outcomes = {}
    for label, name in forms.items():
        templating._environment.cache_clear()
        try:
            text = templating.render_text(ref, {"part": name})
        except PaijobError as error:  # TemplateError: one line, no secret
            message = str(error)
            assert "\n" not in message and SECRET not in message, (label, message)
            outcomes[label] = message
            continue
        assert SECRET not in text, label
        outcomes[label] = "rendered " + text.strip()
    assert outcomes["link inside"] == "rendered name: clean"
    for label in ("fifo", "socket", "link to a fifo", "folder"):
        assert "not a template file" in outcomes[label], outcomes[label]
    for label in ("link to a device", "link out by dots"):
        assert "outside the template's folder" in outcomes[label], outcomes[label]
    for label in ("self loop", "loop"):
        assert "too many links" in outcomes[label], outcomes[label]
    assert "NUL" in outcomes["nul"] and "absolute name" in outcomes["dev"]


def test_a_values_schema_swapped_for_a_link_out_after_its_check_is_never_read(project: Path, secret: Path) -> None:
    """The schema is checked when the template is found and read later: the read walks the folder again."""
    from paijob.render.values_schema import ValuesSchemaError, load_schema

    schema = project / "t.values.schema.json"
    secret.write_text('{"type": "object", "description": "' + SECRET + '"}')
    schema.symlink_to(secret)  # as if swapped in after TemplateRef.schema_file() looked
    load_schema.cache_clear()
    with pytest.raises(ValuesSchemaError, match="outside its folder") as refused:
        load_schema(str(schema))
    assert SECRET not in str(refused.value)
    schema.unlink()
    schema.write_text('{"type": "object"}')
    load_schema.cache_clear()
    assert load_schema(str(schema)) == {"type": "object"}
