"""`paijob templates` lists the built-ins; `templates show` prints one with its defaults."""

from __future__ import annotations

import pytest
import yaml
from render_helpers import ROOT, run_cli

from paijob.render.templates import builtin_names, find_template


def test_builtins_are_the_five_documented_templates() -> None:
    assert builtin_names() == ["apex", "dataparallel", "ddp", "horovod", "spawn"]


def test_list_shows_every_template_with_its_description(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "templates")
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == builtin_names()
    for line in lines:
        assert len(line.split(None, 1)[1]) > 20
    code, again, _ = run_cli(capsys, "templates", "list")
    assert (code, again) == (0, out)


def test_show_prints_template_and_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "templates", "show", "ddp")
    assert code == 0
    assert (ROOT / "templates" / "ddp.yaml.j2").read_text() in out
    assert (ROOT / "templates" / "ddp.values.yaml").read_text() in out
    code, _, err = run_cli(capsys, "templates", "show", "nope")
    assert code == 2 and "built-in templates: apex, dataparallel, ddp, horovod, spawn" in err


@pytest.mark.parametrize("name", builtin_names())
def test_every_default_value_is_documented_by_a_comment(name: str) -> None:
    text = find_template(name).values_text()
    assert text is not None
    lines = text[0].splitlines()
    assert lines[0].startswith("# ") and find_template(name).description()
    values = yaml.safe_load(text[0])
    for key in values:
        index = next(i for i, line in enumerate(lines) if line.startswith(f"{key}:"))
        assert lines[index - 1].startswith("#"), f"{name}.values.yaml: '{key}' has no comment"


def test_output_cut_short_by_the_reader_is_not_an_error() -> None:
    import subprocess
    import sys

    # `paijob templates show ddp | head -1`: the reader is gone before paijob writes.
    child = subprocess.Popen(
        [sys.executable, "-m", "paijob.cli", "templates", "show", "ddp"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()
    errors = child.stderr.read().decode()
    assert child.wait(timeout=60) == 0, errors
    assert "Traceback" not in errors and "BrokenPipe" not in errors, errors
