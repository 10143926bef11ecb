"""--name / --unique-suffix edit the job text the render made, reading it no more than needed."""

from __future__ import annotations

import pytest

from paijob.openpai.jsyaml import load_job
from paijob.render.job_name import rename, rename_job

FLOW = "{protocolVersion: 2, name: first, type: job, taskRoles: {}}\n"  # no `name:` line to edit in place


def test_a_job_without_a_name_line_is_written_anew_and_what_the_render_read_is_left_alone() -> None:
    loaded = load_job(FLOW, "j").value
    text, name = rename(FLOW, "second", False, loaded)
    assert name == "second" and load_job(text, "j").value["name"] == "second"
    assert loaded["name"] == "first"  # the render's report still describes the text it checked


def test_the_name_line_is_edited_in_place_with_or_without_the_loaded_job() -> None:
    text = "# kept\nprotocolVersion: 2\nname: first\ntype: job\n"
    assert rename(text, "second", False) == rename(text, "second", False, load_job(text, "j").value)
    assert rename(text, "second", False)[0] == "# kept\nprotocolVersion: 2\nname: second\ntype: job\n"


def _renamed(text: str, name: str) -> tuple[str, object]:
    loaded = load_job(text, "j")
    renamed = rename_job(text, name, False, loaded.value, loaded.lines)
    assert load_job(renamed.text, "j").value == renamed.job  # what was handed on is what the server reads
    return renamed.text, renamed.job


def test_the_edit_in_place_is_proven_by_the_line_map_not_by_a_second_read() -> None:
    text = "# kept\nprotocolVersion: 2\nname: 'first'  # a comment\ntype: job\n"
    assert _renamed(text, "second")[0] == "# kept\nprotocolVersion: 2\nname: second\ntype: job\n"


def test_a_name_line_inside_another_value_is_not_the_name() -> None:
    text = 'description: "a\nname: first\nb"\nname: first\ntype: job\n'
    edited, job = _renamed(text, "second")
    assert job == {"description": "a name: first b", "name": "second", "type": "job"}


@pytest.mark.parametrize("name", ["123", "2001-12-14", "0x1F", "1e3"])
def test_a_name_that_reads_as_a_number_or_date_when_plain_stays_a_string(name: str) -> None:
    edited, job = _renamed("protocolVersion: 2\nname: first\ntype: job\n", name)
    assert load_job(edited, "j").value["name"] == name
