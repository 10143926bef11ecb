"""`paijob render`: values layering, --set typing, OpenPAI syntax pass-through,
and one clear message (exit 2, no traceback) for every mistake a user can make."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from render_helpers import EXAMPLES, run_cli

from paijob.errors import PaijobError
from paijob.render.templating import render_template
from paijob.render.values import ValuesError, apply_set, merge_values, parse_set


def job_of(text: str) -> dict:  # type: ignore[type-arg]
    return yaml.safe_load(text)


def worker(result_text: str) -> dict:  # type: ignore[type-arg]
    return job_of(result_text)["taskRoles"]["worker"]


# --------------------------------------------------------------------------- values


def test_set_values_are_typed_like_yaml() -> None:
    assert parse_set("instances=4") == (["instances"], 4)
    assert parse_set("lr=0.5") == (["lr"], 0.5)
    assert parse_set("ssh=true") == (["ssh"], True)
    assert parse_set("shmMB=null") == (["shmMB"], None)
    assert parse_set("args=[--lr, '0.1']") == (["args"], ["--lr", "0.1"])
    assert parse_set("env={A: b}") == (["env"], {"A": "b"})
    assert parse_set("image=repo/img:1.0") == (["image"], "repo/img:1.0")
    assert parse_set("name=") == (["name"], "")


def test_set_keeps_text_that_yaml_would_mangle() -> None:
    assert parse_set("vc=no") == (["vc"], "no")  # YAML 1.1 would say False
    assert parse_set("note=#hash") == (["note"], "#hash")  # YAML would say null
    assert parse_set("cmd=a: b") == (["cmd"], "a: b")  # YAML would say a mapping
    assert parse_set("day=2024-01-02") == (["day"], "2024-01-02")


def test_set_string_never_converts() -> None:
    assert parse_set("name=0042", as_string=True) == (["name"], "0042")
    assert parse_set("ssh=true", as_string=True) == (["ssh"], "true")


def test_dotted_keys_nest_and_escaped_dots_do_not() -> None:
    assert parse_set("a.b.c=1") == (["a", "b", "c"], 1)
    assert parse_set(r"env.my\.var=1") == (["env", "my.var"], 1)
    assert apply_set({"a": {"x": 1}}, ["a", "y"], 2) == {"a": {"x": 1, "y": 2}}
    assert apply_set({"a": 3}, ["a", "y"], 2) == {"a": {"y": 2}}


@pytest.mark.parametrize("expr", ["instances", "=4", ".a=1", "a..b=1", "a.=1", " =1"])
def test_bad_set_says_the_expected_form(expr: str) -> None:
    with pytest.raises(ValuesError, match="expected KEY=VALUE"):
        parse_set(expr)


def test_merge_is_deep_for_mappings_and_replaces_everything_else() -> None:
    base = {"tensorboard": {"enabled": False, "port": 1}, "args": [1, 2]}
    over = {"tensorboard": {"enabled": True}, "args": [3]}
    assert merge_values(base, over) == {"tensorboard": {"enabled": True, "port": 1}, "args": [3]}


def test_layers_defaults_then_files_in_order_then_sets_in_order(tmp_path: Path) -> None:
    first = tmp_path / "a.yaml"
    second = tmp_path / "b.yaml"
    first.write_text("instances: 2\ngpu: 2\ncpu: 8\n")
    second.write_text("gpu: 4\n")
    result = render_template("ddp", [first, second], sets=["cpu=16", "cpu=12"])
    role = worker(result.text)
    assert role["instances"] == 2  # first file
    assert role["resourcePerInstance"]["gpu"] == 4  # second file wins over the first
    assert role["resourcePerInstance"]["cpu"] == 12  # the last --set wins
    assert role["resourcePerInstance"]["memoryMB"] == 16384  # template default


def test_set_and_set_string_apply_in_command_line_order(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys, "render", "ddp", "--set-string", "name=0042", "--set", "name=late"
    )
    assert code == 0 and job_of(out)["name"] == "late"
    code, out, _ = run_cli(capsys, "render", "ddp", "--set", "name=x", "--set-string", "name=0042")
    assert code == 0 and job_of(out)["name"] == "0042"


# --------------------------------------------------------------------------- what renders


def test_nproc_per_node_is_the_gpu_count_or_the_explicit_cpu_value() -> None:
    gpu = worker(render_template("ddp", sets=["gpu=8"]).text)
    assert "--nproc-per-node 8 " in gpu["commands"][-1]
    cpu = worker(render_template("ddp", sets=["gpu=0", "processesPerNode=3"]).text)
    assert "--nproc-per-node 3 " in cpu["commands"][-1]
    assert worker(render_template("ddp", sets=["gpu=0"]).text)["commands"][-1].count(
        "--nproc-per-node 1 "
    ) == 1


def test_port_label_flag_matches_the_declared_port() -> None:
    role = worker(render_template("ddp", sets=["portLabel=RdzvPort"]).text)
    assert role["resourcePerInstance"]["ports"] == {"RdzvPort": 1}
    assert "--port-label RdzvPort " in role["commands"][-1]


def test_shm_is_sized_from_processes_and_loader_workers_with_a_floor() -> None:
    def shm(*sets: str) -> int:
        return worker(render_template("ddp", sets=list(sets)).text)["extraContainerOptions"]["shmMB"]

    assert shm("gpu=8", "loaderWorkers=4", "shmPerLoaderWorkerMB=256") == 8 * 4 * 256
    assert shm("gpu=1", "loaderWorkers=0") == 512
    assert shm("gpu=8", "shmMB=1000") == 1000


def test_openpai_parameters_and_secrets_pass_through_jinja() -> None:
    text = render_template(
        "ddp",
        sets=[
            "script=train.py",
            "args=[--lr, '<% $parameters.lr %>', --token, '<% $secrets.token %>']",
            "parameters.lr=0.1",
            "secrets.token=s3cret",
        ],
    ).text
    assert "train.py --lr <% $parameters.lr %> --token '<% $secrets.token %>'" in text
    job = job_of(text)
    assert job["parameters"] == {"lr": 0.1} and job["secrets"] == {"token": "s3cret"}


def test_bash_string_length_is_not_a_jinja_comment(tmp_path: Path) -> None:
    # `${#var}` contains Jinja's default comment opener `{#`.
    text = render_template("ddp", sets=['setup=["echo ${#HOME} ${#PATH}"]']).text
    assert "echo ${#HOME} ${#PATH}" in text
    template = tmp_path / "raw.yaml.j2"
    template.write_text(
        (Path(__file__).parent / "golden" / "ddp-1x1.yaml").read_text().replace(
            "paijob-runtime train", "test ${#PAI_JOB_NAME} -gt 0 && {## a comment ##}paijob-runtime train"
        )
    )
    rendered = render_template(str(template)).text
    assert "test ${#PAI_JOB_NAME} -gt 0 && paijob-runtime train" in rendered


def test_user_template_with_sibling_values_and_the_shared_macros(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml.j2").write_text(
        '{% import "_job.yaml.j2" as job with context %}\n'
        "{{ job.header() }}\n"
        "taskRoles:\n"
        "  trainer:\n"
        "    instances: {{ instances }}\n"
        "{{ job.resources(2) }}\n"
        "    commands:\n"
        '{{ job.commands([job.train("ddp", 2)]) }}\n'
        "{{ job.footer() }}\n"
    )
    defaults = (Path(__file__).parents[2] / "templates" / "ddp.values.yaml").read_text()
    (tmp_path / "mine.values.yaml").write_text(defaults.replace("name: ddp-train", "name: mine"))
    result = render_template(str(tmp_path / "mine.yaml.j2"), sets=["instances=3", "gpu=2"])
    job = job_of(result.text)
    assert job["name"] == "mine"
    assert job["taskRoles"]["trainer"]["instances"] == 3
    assert result.report.plan is not None and result.report.plan.world_size == 6


def test_template_path_environment_variable_adds_template_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = Path(__file__).parents[2] / "templates"
    (tmp_path / "team.yaml.j2").write_text((source / "ddp.yaml.j2").read_text())
    (tmp_path / "team.values.yaml").write_text(
        (source / "ddp.values.yaml").read_text().replace("name: ddp-train", "name: team-job")
    )
    monkeypatch.setenv("PAIJOB_TEMPLATE_PATH", str(tmp_path))
    assert job_of(render_template("team").text)["name"] == "team-job"


def test_an_unknown_value_of_a_built_in_template_is_an_error_with_a_suggestion(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "render", "ddp", "--set", "instance=4")
    assert code == 2 and out == ""
    assert "value 'instance' (--set instance=4)" in err and "did you mean 'instances'" in err
    assert "--allow-unknown-values" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_an_unknown_value_whose_name_holds_a_line_break_is_still_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = tmp_path / "v.yaml"
    values.write_text('"a\\nb": 1\n')  # a key with a line break, as the fuzz test found
    code, out, err = run_cli(capsys, "render", "ddp", "-f", str(values))
    assert code == 2 and out == "" and "value 'a\\nb'" in err
    assert len(err.strip().splitlines()) == 1


def test_allow_unknown_values_passes_deliberate_extras_with_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "render", "ddp", "--set", "instance=4", "--allow-unknown-values")
    assert code == 0
    assert "warning: value 'instance'" in err and "did you mean 'instances'" in err
    assert worker(out)["instances"] == 1


def test_an_unknown_value_of_a_template_without_a_schema_stays_a_warning(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "render", "examples/my-template.yaml.j2", "-f", "examples/my.values.yaml",
                             "--set", "colour=blue")
    assert code == 0, err
    assert "value 'colour'" in err


def test_render_refuses_a_job_that_breaks_the_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "render", "ddp", "--set", "name=my job")
    assert code == 2 and out == ""
    assert "name: 'my job' is not a valid name" in err
    assert "Traceback" not in err


# --------------------------------------------------------------------------- CLI errors


def test_missing_value_names_the_value_the_template_line_and_the_fix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    template = tmp_path / "t.yaml.j2"
    template.write_text("protocolVersion: 2\nname: x\n# {{ resources.gpu }}\n")
    (tmp_path / "t.values.yaml").write_text("resources: {cpu: 1}\n")
    code, out, err = run_cli(capsys, "render", str(template))
    assert code == 2 and out == ""
    assert err.strip() == (
        f"paijob: error: value 'resources.gpu' is not set (template {template}, line 3); "
        "set it with --set resources.gpu=VALUE or in a -f values file"
    )


def test_set_of_a_mapping_merges_like_a_values_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # --set 'tensorboard={enabled: true}' used to replace the whole mapping, so
    # tensorboard.port was gone; now it merges into the defaults as -f does.
    code, out, err = run_cli(capsys, "render", "ddp", "--set", "tensorboard={enabled: true}")
    assert code == 0, err
    plugins = job_of(out)["extras"]["com.microsoft.pai.runtimeplugin"]
    assert plugins == [
        {"plugin": "tensorboard", "parameters": {"port": 11449, "logdir": {"path": "/mnt/tensorboard"}}}
    ]
    values = tmp_path / "v.yaml"
    values.write_text("tensorboard: {enabled: true}\n")
    code, from_file, err = run_cli(capsys, "render", "ddp", "-f", str(values))
    assert (code, from_file) == (0, out), err
    # an empty mapping changes nothing, with --set as with -f
    assert run_cli(capsys, "render", "ddp", "--set", "env={}")[1] == run_cli(capsys, "render", "ddp")[1]


def test_bad_set_is_one_message(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "render", "ddp", "--set", "instances")
    assert (code, out) == (2, "")
    assert err.strip() == (
        "paijob: error: --set 'instances': no '='; expected KEY=VALUE, e.g. --set instances=4 or --set gpu=8 "
        "(a dot reaches into a map: --set env.NCCL_DEBUG=INFO); `paijob templates show TEMPLATE` lists a "
        "template's values"
    )
    code, _, err = run_cli(capsys, "render", "ddp", "--set-string", "=x")
    assert code == 2 and "--set-string '=x': empty key" in err


def test_yaml_error_in_a_values_file_names_file_line_and_column(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    values = tmp_path / "bad.values.yaml"
    values.write_text("instances: 2\nsetup: [pip install x\ngpu: 1\n")
    code, out, err = run_cli(capsys, "render", "ddp", "-f", str(values))
    assert (code, out) == (2, "")
    assert err.startswith(f"paijob: error: {values}:3:4: invalid YAML: ")
    assert err.count("\n") == 1


def test_values_file_problems(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "render", "ddp", "-f", str(tmp_path / "nope.yaml"))
    assert code == 2 and "values file" in err and "does not exist" in err
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    code, _, err = run_cli(capsys, "render", "ddp", "-f", str(tmp_path / "list.yaml"))
    assert code == 2 and "a values file is a YAML mapping" in err
    (tmp_path / "dup.yaml").write_text("gpu: 1\ncpu: 2\ngpu: 4\n")
    code, _, err = run_cli(capsys, "render", "ddp", "-f", str(tmp_path / "dup.yaml"))
    assert code == 2 and f"{tmp_path / 'dup.yaml'}:3: duplicate key 'gpu'" in err


def test_unknown_template_lists_the_builtins(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "render", "dpp")
    assert (code, out) == (2, "")
    assert "unknown template 'dpp'" in err
    assert "apex, dataparallel, ddp, horovod, spawn" in err
    code, _, err = run_cli(capsys, "render", "./missing.yaml.j2")
    assert code == 2 and "does not exist" in err and "ddp" in err


def test_template_failures_are_one_message(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "render", "ddp", "--set", "script=null", "--set", "recipe=null")
    assert code == 2 and "set either 'script'" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, "render", "apex", "--set", "optLevel=O4")
    assert code == 2 and "value 'optLevel' must be one of O0, O1, O2, O3, given the string 'O4'" in err
    code, _, err = run_cli(capsys, "render", "dataparallel", "--set", "instances=2")
    assert code == 2 and "use the ddp template" in err
    broken = tmp_path / "broken.yaml.j2"
    broken.write_text("name: {{ name\n")
    code, _, err = run_cli(capsys, "render", str(broken))
    assert code == 2 and f"{broken}:1: template syntax error" in err
    not_yaml = tmp_path / "notyaml.yaml.j2"
    not_yaml.write_text("a: [\n")
    code, _, err = run_cli(capsys, "render", str(not_yaml))
    assert code == 2 and "rendered text that is not YAML" in err


def test_output_file_is_written_atomically(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "job.yaml"
    target.write_text("old content\n")
    code, out, err = run_cli(capsys, "render", "ddp", "--set", "instances=4", "-o", str(target))
    assert (code, out) == (0, "")
    assert f"wrote {target}" in err and "world size 4 (4 nodes × 1 process)" in err
    assert job_of(target.read_text())["taskRoles"]["worker"]["instances"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]  # no temp file left
    assert oct(target.stat().st_mode & 0o777) != oct(0o600)


def test_unwritable_output_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "render", "ddp", "-o", str(tmp_path / "no" / "such" / "job.yaml"))
    assert code == 2 and "cannot write" in err and "does not exist" in err
    code, _, err = run_cli(capsys, "render", "ddp", "-o", str(tmp_path))
    assert code == 2 and "it is a folder" in err
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        code, _, err = run_cli(capsys, "render", "ddp", "-o", str(locked / "job.yaml"))
        assert code == 2 and "cannot write" in err
    code, _, err = run_cli(capsys, "render", "ddp", "-o", "/proc/paijob-test.yaml")
    assert code == 2 and "cannot write /proc/paijob-test.yaml" in err


def test_a_plain_job_file_is_checked_not_rendered(tmp_path: Path) -> None:
    from paijob.render.templating import render

    job = tmp_path / "job.yaml"
    job.write_text((Path(__file__).parent / "golden" / "ddp-4x8.yaml").read_text())
    result = render(str(job))
    assert result.text == job.read_text()
    with pytest.raises(PaijobError, match="not a template"):
        render(str(job), sets=[("set", "a=1")])


def test_a_values_file_given_as_the_template_gets_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "render", str(EXAMPLES / "cifar10-local.values.yaml"))
    assert code == 2 and "is a values file, not a template" in err and "-f" in err


@pytest.mark.parametrize(
    "command",
    ["a: b", "- item", "#hash", "it's \"quoted\"", "line one\nline two", "true", "010", "<% $secrets.x %>", ""],
)
def test_any_command_text_survives_as_one_list_item(command: str) -> None:
    from paijob.render.filters import shell_quote, yaml_scalar

    assert yaml.safe_load(f"- {yaml_scalar(command)}") == [command]
    rendered = render_template("ddp", ordered_sets=[("set-string", f"env.X={command}")])
    assert worker(rendered.text)["commands"][0] == "export X=" + shell_quote(command)
    rendered = render_template("ddp", sets=[f"setup=[{yaml_scalar(command)}]"])
    assert worker(rendered.text)["commands"][-2] == command  # setup runs right before training


@pytest.mark.parametrize("verb", [["submit", "-c", "local", "--dry-run"], ["run", "--local"]])
def test_submit_and_run_refuse_an_unknown_value_before_anything_is_sent(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, verb: list[str]) -> None:
    monkeypatch.setenv("PAIJOB_LOCAL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    code, out, err = run_cli(capsys, verb[0], "ddp", "--set", "instnaces=2", *verb[1:])
    assert code == 2 and out == ""
    assert "value 'instnaces' (--set instnaces=2)" in err and "did you mean 'instances'" in err
    assert not (tmp_path / "state").exists()  # no local cluster was started for a job that cannot go


def test_submit_with_allow_unknown_values_sends_the_job_with_a_warning(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PAIJOB_LOCAL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    code, out, err = run_cli(capsys, "submit", "ddp", "--set", "instnaces=2", "-c", "local", "--dry-run",
                             "--allow-unknown-values")
    assert code == 0, err
    assert "warning: value 'instnaces'" in err and "POST" in out
