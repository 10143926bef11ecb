"""Templates reach only templates (issue 35): an ``include``, ``import``,
``from ... import`` or ``extends`` in a built-in or a user template never
reads a file outside the templates (an absolute name, ``..``, a link out of
the user's folder); the refusal is one line naming the statement, the name
and why, exit 2. Legitimate includes of sibling templates, of a subfolder and
of the built-in partial keep working."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from render_helpers import run_cli

from paijob.render.templates import TemplateRefused

SECRET = "gho_OUTSIDE_THE_TEMPLATES_4f1c"

STATEMENTS = {
    "include": '{{% include "{name}" %}}',
    "import": '{{% import "{name}" as x %}}{{{{ x }}}}',
    "from-import": '{{% from "{name}" import y %}}',
    "extends": '{{% extends "{name}" %}}',
}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A secret file outside every template folder, written as a template would be (Jinja text)."""
    folder = tmp_path / "home" / ".config" / "gh"
    folder.mkdir(parents=True)
    file = folder / "hosts.yml"
    file.write_text(f"name: {SECRET}\n{{% macro y() %}}{SECRET}{{% endmacro %}}\n")
    return file


def escapes(template_folder: Path, outside: Path) -> dict[str, str]:
    """The three ways out of ``template_folder``: by absolute name, by ``..``, by a link in the folder."""
    link = template_folder / "friendly.j2"
    if not link.is_symlink():
        link.symlink_to(outside)
    return {
        "absolute": str(outside),
        "relative": os.path.relpath(outside, template_folder),
        "link": "friendly.j2",
    }


@pytest.mark.parametrize("how", ["absolute", "relative", "link"])
@pytest.mark.parametrize("statement", list(STATEMENTS))
def test_a_user_template_cannot_read_a_file_outside_its_folder(
    statement: str, how: str, tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    name = escapes(folder, outside)[how]
    (folder / "evil.yaml.j2").write_text("# a template from a cloned project\n"
                                         + STATEMENTS[statement].format(name=name) + "\n")
    code, out, err = run_cli(capsys, "render", str(folder / "evil.yaml.j2"))
    assert SECRET not in out + err
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"line 2: {statement} of '{name}' refused: " in err
    why = {"absolute": "an absolute name", "relative": "'..' climbs out", "link": f"a link to {outside}"}[how]
    assert why in err


@pytest.mark.parametrize("how", ["absolute", "relative", "folder"])
@pytest.mark.parametrize("statement", list(STATEMENTS))
def test_the_builtin_templates_read_names_never_paths(statement: str, how: str, outside: Path) -> None:
    # The environment the built-ins render in: its loader takes a bare built-in file name only.
    from paijob.render.templating import _environment

    from_package = os.path.relpath(outside, os.path.dirname(__import__("paijob.templates").templates.__file__))
    name = {"absolute": str(outside), "relative": from_package, "folder": "sub/_job.yaml.j2"}[how]
    template = _environment(None).from_string(STATEMENTS[statement].format(name=name))
    with pytest.raises(TemplateRefused, match="built-in templates are names") as refused:
        template.render()
    assert SECRET not in str(refused.value)


def test_a_user_template_cannot_reach_the_builtins_by_path(tmp_path: Path, outside: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # The old loader tried the built-in folder after the user's: '/etc/x' or '../x' was joined there.
    (tmp_path / "t.yaml.j2").write_text('{% include "sub/../../' + str(outside) + '" %}\n')
    code, out, err = run_cli(capsys, "render", str(tmp_path / "t.yaml.j2"))
    assert (code, out) == (2, "") and SECRET not in err and "refused" in err


def test_a_name_from_a_value_is_checked_too(tmp_path: Path, outside: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.yaml.j2").write_text("{% include part ignore missing %}\n")
    code, out, err = run_cli(capsys, "render", str(tmp_path / "t.yaml.j2"), "--set-string", f"part={outside}")
    assert (code, out) == (2, "") and SECRET not in err
    assert "include of '" + str(outside) + "' refused: an absolute name" in err


def test_the_main_template_linked_out_of_its_folder_reads_its_own_folder(
    tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A template file that is a link: its folder is where the file really is, so its includes stay there.
    real = tmp_path / "real"
    real.mkdir()
    (real / "t.yaml.j2").write_text('{% include "../home/.config/gh/hosts.yml" %}\n')
    (tmp_path / "t.yaml.j2").symlink_to(real / "t.yaml.j2")
    code, _, err = run_cli(capsys, "render", str(tmp_path / "t.yaml.j2"))
    assert code == 2 and SECRET not in err and "'..' climbs out" in err


def test_sibling_subfolder_link_inside_and_builtin_partial_still_render(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "name.j2").write_text("demo")
    (tmp_path / "same.j2").symlink_to(tmp_path / "sub" / "name.j2")  # a link that stays inside
    (tmp_path / "macros.j2").write_text("{% macro role() %}worker{% endmacro %}")
    (tmp_path / "base.yaml.j2").write_text(
        "protocolVersion: 2\nname: {% include 'sub/name.j2' %}-{% include './same.j2' %}\n\ntype: job\n"
        "{% block body %}{% endblock %}"
    )
    (tmp_path / "t.yaml.j2").write_text(
        '{% extends "base.yaml.j2" %}{% from "macros.j2" import role %}'
        '{% import "_job.yaml.j2" as job with context %}'
        "{% block body %}prerequisites:\n  - {name: img, type: dockerimage, uri: 'python:3.11'}\ntaskRoles:\n  {{ role() }}:\n    instances: 1\n"
        "    dockerImage: img\n    resourcePerInstance: {cpu: 1, memoryMB: 1024, gpu: 0}\n"
        "    commands: [echo hi]\n"
        "{% endblock %}"
    )
    code, out, err = run_cli(capsys, "render", str(tmp_path / "t.yaml.j2"))
    assert code == 0, err
    assert "name: demo-demo\n" in out and "  worker:\n" in out


def test_paijob_run_in_a_cloned_project_goes_through_the_same_loader(
    tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "cloned"
    project.mkdir()
    (project / "paijob.yaml").write_text("template: job.yaml.j2\n")
    (project / "job.yaml.j2").write_text(
        '{% import "_job.yaml.j2" as job with context %}'
        'parameters: {leak: "{% include "' + str(outside) + '" %}"}\n'
    )
    monkeypatch.chdir(project)
    monkeypatch.setenv("PAI_CLUSTER_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("PAI_TOKEN", "t")
    monkeypatch.setenv("PAI_USER", "alice")
    for argv in (["submit", "--dry-run"], ["run"]):
        code, out, err = run_cli(capsys, *argv)
        assert SECRET not in out + err, argv
        assert code == 2 and "refused: an absolute name" in err, (argv, err)


@pytest.mark.parametrize("key", ["template", "values"])
def test_a_project_config_names_files_in_its_own_folder(
    key: str, tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # values: [~/.docker/config.json] would hand its keys to the project's own template
    project = tmp_path / "cloned"
    project.mkdir()
    (project / "ok.yaml.j2").symlink_to(outside)
    name = {"template": "ok.yaml.j2", "values": os.path.relpath(outside, project)}[key]
    (project / "paijob.yaml").write_text(f"template: ddp\n{key}: {name}\n" if key == "values"
                                         else f"template: {name}\n")
    monkeypatch.chdir(project)
    monkeypatch.setenv("PAI_CLUSTER_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("PAI_TOKEN", "t")
    code, out, err = run_cli(capsys, "submit", "--dry-run")
    assert SECRET not in out + err
    assert code == 2 and "is outside the project folder" in err, err



def test_a_user_templates_defaults_linked_out_of_its_folder_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a cloned project's t.values.yaml linked to ~/.docker/config.json would hand its keys to the template
    project = tmp_path / "cloned"
    project.mkdir()
    secrets = tmp_path / "docker-config.json"
    secrets.write_text('{"auths": {"registry.example.com": {"auth": "' + SECRET + '"}}}')
    (project / "t.yaml.j2").write_text("name: {{ auths | tojson }}\n")
    (project / "t.values.yaml").symlink_to(secrets)
    code, out, err = run_cli(capsys, "render", str(project / "t.yaml.j2"))
    assert SECRET not in out + err
    assert code == 2 and "default values file of template" in err and "is a link to" in err


@pytest.mark.parametrize("where", ["paijob.yaml", "values"])
def test_a_cloned_project_cannot_choose_a_workdir_outside_itself(
    where: str, tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "cloned"
    project.mkdir()
    (project / "train.py").write_text("print(1)\n")
    away = os.path.relpath(outside.parent, project)  # ~/.config/gh, by a relative path
    if where == "paijob.yaml":
        (project / "paijob.yaml").write_text(f"template: ddp\nworkdir: {away}\n")
    else:
        (project / "values.yaml").write_text(f"script: train.py\nworkdir: {away}\n")
        (project / "paijob.yaml").write_text("template: ddp\nvalues: [values.yaml]\n")
    monkeypatch.chdir(project)
    monkeypatch.setenv("PAI_CLUSTER_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("PAI_TOKEN", "t")
    monkeypatch.setenv("PAI_USER", "alice")
    monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))  # so ~/.config is not what refuses it
    code, out, err = run_cli(capsys, "submit", "--dry-run", "--set", "script=train.py")
    assert SECRET not in out + err
    assert code == 2 and "workdir" in err and "is outside the project folder" in err, err
    # the user's own --workdir is theirs to choose
    code, out, err = run_cli(capsys, "submit", "--dry-run", "--set", "script=train.py", "--workdir", ".")
    assert code == 0, err
