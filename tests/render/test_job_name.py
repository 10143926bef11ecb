"""--name / --unique-suffix edit the job text the render made, reading it no more than needed."""

from __future__ import annotations

from paijob.openpai.jsyaml import load_job
from paijob.render.job_name import rename

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
