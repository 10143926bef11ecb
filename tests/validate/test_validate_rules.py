"""`paijob validate`: one test per protocol rule, each problem with its YAML path
and line, every problem at once, exit 0 when valid (warnings allowed) and 2 when not."""

from __future__ import annotations

from pathlib import Path

import pytest
from suite_helpers import paijob

from paijob.validate.report import ERROR, WARNING, Problem, ValidationReport, validate_text

BASE = """\
protocolVersion: 2
name: base-job
type: job
prerequisites:
  - type: dockerimage
    name: image
    uri: repo/image:tag
taskRoles:
  worker:
    instances: 4
    dockerImage: image
    resourcePerInstance:
      gpu: 8
      cpu: 16
      memoryMB: 65536
      ports:
        SynPort: 1
    commands:
      - paijob-runtime train --port-label SynPort train.py --epochs 1
"""


def check(text: str = BASE, **options: str) -> ValidationReport:
    return validate_text(text, "job.yaml", **options)


def edit(old: str, new: str, text: str = BASE) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def only(report: ValidationReport, severity: str = ERROR) -> Problem:
    found = [p for p in report.problems if p.severity == severity]
    assert len(found) == 1, report.formatted_problems()
    return found[0]


def test_base_job_is_valid_with_its_world_size() -> None:
    report = check()
    assert report.ok and not report.problems
    assert report.summary() == (
        "ok: job.yaml — 1 role, world size 32 (4 nodes × 8 processes), port label SynPort"
    )


@pytest.mark.parametrize(
    ("old", "new", "path", "line", "message"),
    [
        ("type: job\n", "", "", 1, "missing required key 'type' (type: job)"),
        ("protocolVersion: 2", "protocolVersion: 3", "protocolVersion", 1, "3 is not allowed here; use one of: '2', 2"),
        ("name: base-job", "name: base job", "name", 2, "'base job' is not a valid name"),
        ("name: base-job", "name: " + "x" * 256, "name", 2, "is 256 characters long; at most 255"),
        ("type: job", "type: jobs", "type", 3, "'jobs' is not allowed here; use one of: 'job'"),
        ("type: job\n", "type: job\ncomment: hi\n", "comment", 4, "unknown key 'comment'"),
        ("    instances: 4", "    instance: 4", "taskRoles.worker.instance", 10, "unknown key 'instance' (did you mean 'instances'?)"),
        ("    instances: 4", "    instances: 0", "taskRoles.worker.instances", 10, "must be at least 1, got 0"),
        ("    instances: 4", "    instances: four", "taskRoles.worker.instances", 10, "expected integer, got string 'four'"),
        ("      gpu: 8", "      gpu: 1.5", "taskRoles.worker.resourcePerInstance.gpu", 13, "expected integer, got number 1.5"),
        ("      gpu: 8", "      gpu: true", "taskRoles.worker.resourcePerInstance.gpu", 13, "expected integer, got boolean True"),
        ("      cpu: 16\n", "", "taskRoles.worker.resourcePerInstance", 12, "missing required key 'cpu'"),
        ("      cpu: 16", "      cpus: 16", "taskRoles.worker.resourcePerInstance.cpus", 14, "unknown key 'cpus' (did you mean 'cpu'?)"),
        ("        SynPort: 1", "        SynPort: one", "taskRoles.worker.resourcePerInstance.ports.SynPort", 17, "expected integer, got string 'one'"),
        ("    commands:\n      - paijob-runtime train --port-label SynPort train.py --epochs 1\n", "    commands: []\n", "taskRoles.worker.commands", 18, "needs at least 1 item(s)"),
        ("    dockerImage: image\n", "", "taskRoles.worker", 9, "missing required key 'dockerImage': the name of a 'type: dockerimage' prerequisite"),
        ("    uri: repo/image:tag\n", "", "prerequisites[0]", 5, "missing required key 'uri'"),
        ("    instances: 4\n", "    instances: 4\n    completion:\n      minFailedInstances: all\n", "taskRoles.worker.completion.minFailedInstances", 12, "expected integer or null, got string 'all'"),
        ("    instances: 4\n", "    instances: 4\n    extraContainerOptions:\n      shmMB: lots\n", "taskRoles.worker.extraContainerOptions.shmMB", 12, "expected integer"),
        ("taskRoles:\n", "jobRetryCount: -1\ntaskRoles:\n", "jobRetryCount", 8, "must be at least 0, got -1"),
        ("type: job\n", "type: job\ndefaults:\n  virtualCluster: vc\n  deployment: 1\n", "defaults.deployment", 6, "expected string, got number 1"),
        ("taskRoles:\n", "secrets: token\ntaskRoles:\n", "secrets", 8, "expected a mapping, got string 'token'"),
        ("      ports:\n        SynPort: 1\n", "      ports: {}\n", "taskRoles.worker.resourcePerInstance.ports", 16, "needs at least one entry"),
        ("    uri: repo/image:tag\n", "    uri: repo/image:tag\n    plugin: x\n", "prerequisites[0].plugin", 8, "unknown key 'plugin'"),
        ("taskRoles:\n", "deployments: []\ntaskRoles:\n", "deployments", 8, "needs at least 1 item(s)"),
        ("taskRoles:\n", "deployments: [{name: d}]\ntaskRoles:\n", "deployments[0]", 8, "missing required key 'taskRoles'"),
    ],
)
def test_schema_rule(old: str, new: str, path: str, line: int, message: str) -> None:
    report = check(edit(old, new))
    assert not report.ok
    matching = [p for p in report.errors if p.dotted_path == path]
    assert len(matching) == 1, report.formatted_problems()
    problem = matching[0]
    assert problem.line == line
    assert message in problem.message


def test_task_role_name_must_be_an_identifier() -> None:
    text = BASE.replace("  worker:", "  1worker:").replace("--port-label SynPort", "--port-label SynPort --master-role 1worker")
    problem = only(check(text))
    assert problem.dotted_path == "taskRoles.1worker" and problem.line == 9
    assert "task role name '1worker' is not allowed" in problem.message


def test_port_label_must_be_an_identifier_and_is_then_not_the_one_the_runtime_reads() -> None:
    report = check(edit("        SynPort: 1", "        Syn-Port: 1"))
    messages = {p.dotted_path: p.message for p in report.errors}
    assert "port label 'Syn-Port' is not allowed" in messages[
        "taskRoles.worker.resourcePerInstance.ports.Syn-Port"
    ]
    assert "declares no such port (declared: Syn-Port)" in messages[
        "taskRoles.worker.resourcePerInstance"
    ]


def test_docker_image_must_name_a_dockerimage_prerequisite() -> None:
    problem = only(check(edit("    dockerImage: image", "    dockerImage: imagee")))
    assert problem.dotted_path == "taskRoles.worker.dockerImage" and problem.line == 11
    assert "'imagee' names no prerequisite; the dockerimage prerequisites are: image" in problem.message
    text = edit(
        "taskRoles:\n", "  - type: data\n    name: cifar\n    uri: [https://example.com/c.tgz]\ntaskRoles:\n"
    )
    problem = only(check(edit("    dockerImage: image", "    dockerImage: cifar", text)))
    assert "'cifar' is a 'data' prerequisite, not a dockerimage" in problem.message


def test_duplicate_prerequisite_names() -> None:
    text = edit("taskRoles:\n", "  - type: dockerimage\n    name: image\n    uri: other:1\ntaskRoles:\n")
    problem = only(check(text))
    assert problem.dotted_path == "prerequisites[1].name" and problem.line == 9
    assert "duplicate dockerimage prerequisite name 'image'" in problem.message


def test_role_data_output_script_must_name_prerequisites_of_that_type() -> None:
    problem = only(check(edit("    dockerImage: image\n", "    dockerImage: image\n    data: nope\n")))
    assert problem.dotted_path == "taskRoles.worker.data"
    assert "names no prerequisite of type 'data'" in problem.message


def test_task_retries_without_gang_allocation_off_are_a_warning() -> None:
    text = edit("    instances: 4\n", "    instances: 4\n    taskRetryCount: 3\n")
    report = check(text)
    assert report.ok
    problem = only(report, WARNING)
    assert problem.dotted_path == "taskRoles.worker.taskRetryCount" and problem.line == 11
    assert "has no effect unless extras.gangAllocation is false" in problem.message
    gang_off = check(text + "extras:\n  gangAllocation: false\n")
    assert [p.dotted_path for p in gang_off.problems] == ["extras.gangAllocation"]


def test_a_role_name_openpai_v1_6_cannot_find_is_an_error_naming_cause_and_fix() -> None:
    text = BASE.replace("  worker:", "  ps_server:")
    problem = only(check(text), ERROR)
    assert problem.dotted_path == "taskRoles.ps_server" and problem.line == 9
    assert "looked up as 'psserver'" in problem.message and "OpenPAI v1.6" in problem.message
    assert "rename the role to 'psserver'" in problem.message and "--openpai-before-1.6" in problem.message


def test_before_openpai_1_6_such_a_role_name_is_only_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    text = BASE.replace("  worker:", "  ps_server:")
    flagged = check(text, openpai_before_1_6=True)
    monkeypatch.setenv("PAIJOB_OPENPAI_BEFORE_1_6", "1")
    for report in (flagged, check(text)):
        assert report.ok
        problem = only(report, WARNING)
        assert problem.dotted_path == "taskRoles.ps_server" and problem.line == 9
        assert "rewrites role 'ps_server' as 'psserver'" in problem.message


def test_roles_that_collide_after_the_rewrite_are_a_warning_the_server_accepts_them() -> None:
    second = BASE[BASE.index("  worker:") :].replace("  worker:", "  Worker:")
    report = check(BASE + second, openpai_before_1_6=True)
    assert any("both become 'worker'" in p.message for p in report.warnings)
    assert not check(BASE + second).ok  # 'Worker' itself cannot be found on OpenPAI v1.6+


@pytest.mark.parametrize(
    "command",
    [
        "python train.py --master_port 29500",
        "export MASTER_PORT=12345",
        "python -m torch.distributed.launch --master-port=23456 train.py",
        "python train.py --dist-url tcp://10.0.0.1:8000",
        "torchrun --rdzv-endpoint $PAI_HOST_IP_worker_0:29400 train.py",
    ],
)
def test_fixed_ports_in_commands_are_a_warning(command: str) -> None:
    text = edit("    commands:\n", f"    commands:\n      - {command}\n")
    report = check(text)
    assert report.ok
    problem = only(report, WARNING)
    assert problem.dotted_path == "taskRoles.worker.commands[0]" and problem.line == 19
    assert "fixed port" in problem.message and "port label" in problem.message


def test_port_variables_are_not_fixed_ports() -> None:
    text = edit("    commands:\n", "    commands:\n      - export MASTER_PORT=$PAI_worker_0_SynPort_PORT\n")
    assert not check(text).problems


def test_runtime_port_label_must_be_declared_on_the_master_role() -> None:
    problem = only(check(edit("--port-label SynPort", "--port-label RdzvPort")))
    assert problem.dotted_path == "taskRoles.worker.resourcePerInstance" and problem.line == 12
    assert "reads port label 'RdzvPort' from the master role 'worker'" in problem.message
    # without --port-label the runtime reads SynPort
    text = edit("        SynPort: 1", "        Other: 1", edit("--port-label SynPort ", ""))
    assert "port label 'SynPort'" in only(check(text)).message
    # validate --port-label overrides what the commands say
    assert "'Other'" not in str(check(text, port_label="Other").problems)


def test_master_role_must_exist_and_take_part() -> None:
    problem = only(check(edit("--port-label SynPort", "--port-label SynPort --master-role chief")))
    assert "master role 'chief' (--master-role) is not a task role" in problem.message
    report = check(BASE, master_role="nobody")
    assert not report.ok


def test_every_training_role_must_run_the_runtime() -> None:
    text = BASE + (
        "  evaluator:\n    dockerImage: image\n    resourcePerInstance: {cpu: 1, memoryMB: 1024, gpu: 0}\n"
        "    commands:\n      - python eval.py\n"
    )
    problem = only(check(text))
    assert problem.dotted_path == "taskRoles.evaluator.commands" and problem.line == 23
    assert "takes part in training" in problem.message and "--roles worker" in problem.message
    fixed = text.replace("--port-label SynPort", "--port-label SynPort --roles worker")
    assert check(fixed).ok


def test_tasks_must_agree_on_runtime_flags() -> None:
    text = BASE + BASE[BASE.index("  worker:") :].replace("  worker:", "  helper:").replace(
        "--port-label SynPort", "--port-label Other"
    )
    assert any("--port-label Other here but SynPort elsewhere" in p.message for p in check(text).errors)


def test_world_size_sums_the_roles_and_follows_nproc_and_mode() -> None:
    explicit = check(edit("--port-label SynPort", "--port-label SynPort --nproc-per-node 2"))
    assert explicit.plan is not None and explicit.plan.world_size == 8
    assert "--nproc-per-node 2 but resourcePerInstance.gpu is 8" in only(explicit, WARNING).message
    dp = check(edit("--port-label SynPort", "--mode dataparallel --port-label SynPort"))
    assert dp.plan is not None and dp.plan.world_size == 4
    cpu = check(edit("      gpu: 8", "      gpu: 0"))
    assert cpu.plan is not None and cpu.plan.world_size == 4
    unknown = check(edit("--port-label SynPort", "--port-label SynPort --nproc-per-node $N"))
    assert unknown.plan is not None and unknown.plan.world_size is None
    assert "world size unknown" in unknown.summary()


def test_undefined_openpai_parameters_are_a_warning() -> None:
    text = edit("train.py --epochs 1", "train.py --epochs <% $parameters.epochs %>")
    problem = only(check(text), WARNING)
    assert "'<% $parameters.epochs %>' but parameters has no 'epochs'" in problem.message
    assert not check(text + "parameters:\n  epochs: 3\n").problems


def test_deployments_must_match_roles_and_defaults() -> None:
    text = BASE + (
        "deployments:\n  - name: prod\n    taskRoles:\n      ps:\n        preCommands: [echo hi]\n"
        "defaults:\n  deployment: dev\n"
    )
    report = check(text)
    messages = {p.dotted_path: p.message for p in report.errors}
    assert "'dev' names no deployment (prod)" in messages["defaults.deployment"]
    # the server renders only the roles the job has and ignores the others
    warning = only(check(text.replace("deployment: dev", "deployment: prod")), WARNING)
    assert "'ps' is not a task role of this job" in warning.message


def test_shm_not_below_memory_is_a_warning() -> None:
    text = edit("    instances: 4\n", "    instances: 4\n    extraContainerOptions:\n      shmMB: 65536\n")
    assert "/dev/shm counts against the container's memory" in only(check(text), WARNING).message


def test_duplicate_keys_are_an_error_like_on_the_server() -> None:
    problem = only(check(edit("      cpu: 16\n", "      cpu: 16\n      cpu: 8\n")))
    assert problem.dotted_path == "taskRoles.worker.resourcePerInstance.cpu" and problem.line == 15
    assert "duplicate key" in problem.message


def test_not_yaml_or_not_a_mapping() -> None:
    problem = only(check("name: [unclosed\n"))
    assert problem.line == 2 and "invalid YAML" in problem.message
    assert "got an empty file" in only(check("")).message
    assert "got a list" in only(check("- a\n")).message


def test_every_problem_is_reported_at_once_in_line_order() -> None:
    text = edit("name: base-job", "name: bad name", edit("      gpu: 8", "      gpu: many"))
    text = edit("    dockerImage: image", "    dockerImage: nope", text)
    report = check(text)
    assert [p.line for p in report.errors] == [2, 11, 13]


# --------------------------------------------------------------------------- CLI


def test_validate_cli_exit_codes_and_output(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(BASE)
    warned = tmp_path / "warned.yaml"
    warned.write_text(BASE.replace("  worker:", "  ps_server:"))
    bad = tmp_path / "bad.yaml"
    bad.write_text(edit("      gpu: 8", "      gpu: eight"))

    code, _, _ = paijob(capsys, "validate", str(warned))
    assert code == 2  # OpenPAI v1.6+ cannot run role ps_server
    code, out, err = paijob(capsys, "validate", "--openpai-before-1.6", str(good), str(warned))
    assert code == 0 and err == ""
    assert f"ok: {good} — 1 role, world size 32 (4 nodes × 8 processes), port label SynPort" in out
    assert f"{warned}:9: warning: taskRoles.ps_server: the runtime rewrites" in out

    code, out, _ = paijob(capsys, "validate", str(good), str(bad), str(tmp_path / "missing.yaml"))
    assert code == 2
    assert (
        f"{bad}:13: error: taskRoles.worker.resourcePerInstance.gpu: expected integer, got string 'eight'"
        in out
    )
    assert f"invalid: {bad} — 1 error" in out
    assert "cannot read job file" in out and f"ok: {good}" in out


def test_validate_reads_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(BASE))
    code, out, _ = paijob(capsys, "validate", "-")
    assert code == 0 and out.startswith("ok: <stdin>")


def test_validate_master_role_and_port_label_options(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(BASE)
    code, out, _ = paijob(capsys, "validate", "--port-label", "Other", str(job))
    assert code == 2 and "declares no such port" in out


def test_a_one_task_job_needs_no_rendezvous_port() -> None:
    text = edit("    instances: 4", "    instances: 1", edit("      ports:\n        SynPort: 1\n", ""))
    assert check(text).ok
    assert not check(edit("      ports:\n        SynPort: 1\n", "")).ok


MPI = """\
protocolVersion: 2
name: hvd
type: job
prerequisites:
  - {type: dockerimage, name: image, uri: horovod/horovod:0.28.1}
taskRoles:
  master:
    dockerImage: image
    resourcePerInstance: {cpu: 8, memoryMB: 16384, gpu: 2}
    commands:
      - mpirun -np 4 -H master-0:2,worker-0:2 python train.py
  worker:
    dockerImage: image
    resourcePerInstance: {cpu: 8, memoryMB: 16384, gpu: 2}
    commands:
      - sleep infinity
extras:
  com.microsoft.pai.runtimeplugin:
    - {plugin: ssh, parameters: {jobssh: true, sshbarrier: true}}
"""


def test_mpi_job_plan_and_its_warnings() -> None:
    report = check(MPI)
    assert not report.problems
    assert report.summary() == "ok: job.yaml — 2 roles, world size 4 (mpirun -np across 2 nodes)"
    no_barrier = check(MPI.replace(", sshbarrier: true", ""))
    assert "without sshbarrier: true" in only(no_barrier, WARNING).message
    no_ssh = check(MPI[: MPI.index("extras:")])
    assert "an MPI launcher needs ssh between tasks" in only(no_ssh, WARNING).message
    too_many = check(MPI.replace("-np 4 -H master-0:2,worker-0:2", "-np 8"))
    assert "mpirun starts 8 processes but the job has 4 GPUs" in only(too_many, WARNING).message
    bad_host = check(MPI.replace("worker-0:2", "worker-1:2"))
    assert "host 'worker-1' does not exist: role 'worker' has 1 instance(s)" in only(
        bad_host, WARNING
    ).message
    bad_np = check(MPI.replace("-np 4", "-np 3"))
    assert "-np 3 but the hosts list offers 4 slots" in only(bad_np, WARNING).message


# --------------------------------------------------------------------------- paijob-runtime's own parser


def test_runtime_commands_are_parsed_by_the_runtimes_own_parser() -> None:
    verbose = check(edit("paijob-runtime train --port-label", "paijob-runtime -v train --port-label"))
    assert verbose.ok and verbose.plan is not None and verbose.plan.world_size == 32
    inline = check(edit("train --port-label SynPort", "train --nproc-per-node=2 --port-label=SynPort"))
    assert inline.plan is not None and inline.plan.world_size == 8
    refused = only(check(edit("train --port-label SynPort", "train --mode fast --port-label SynPort")))
    assert "paijob-runtime would refuse this command" in refused.message and "--mode" in refused.message


def test_a_command_read_again_is_judged_the_same() -> None:
    """Commands are split and parsed once per text (cached): a second job, or a caller that
    changes the words it got, sees the same answers as the first."""
    from paijob.validate.runtime_plan import split_command

    refusing = edit("train --port-label SynPort", "train --mode fast --port-label SynPort")
    for _ in range(2):
        assert "--mode" in only(check(refusing)).message
        assert check(BASE).ok
    words = split_command("paijob-runtime train --port-label SynPort x.py")
    words.append("changed")
    assert split_command("paijob-runtime train --port-label SynPort x.py")[-1] == "x.py"


def test_dataparallel_world_size_is_what_the_runtime_computes() -> None:
    from paijob.runtime.env import LaunchOptions, compute_dist_env

    text = edit("    instances: 4", "    instances: 1", edit("train --port-label", "train --mode dataparallel --port-label"))
    plan = check(text).plan
    environ = {
        "PAI_TASK_ROLE_LIST": "worker",
        "PAI_CURRENT_TASK_ROLE_NAME": "worker",
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": "0",
        "PAI_TASK_ROLE_TASK_COUNT_worker": "1",
        "PAI_RESOURCE_worker": "8,16,65536,0",
    }
    dist = compute_dist_env(environ, LaunchOptions(mode="dataparallel"), visible_gpus=8, free_port=1)
    assert plan is not None and plan.world_size == dist.world_size == 1
    several = check(edit("train --port-label", "train --mode dataparallel --port-label"))
    assert "--mode dataparallel runs one process on one node" in only(several).message


def test_gang_allocation_off_with_a_multi_node_world_is_a_warning() -> None:
    report = check(BASE + "extras:\n  gangAllocation: false\n")
    problem = only(report, WARNING)
    assert report.ok and problem.dotted_path == "extras.gangAllocation"
    assert "exports PAI_HOST_IP_<role>_<i> only for tasks already placed" in problem.message
    single = edit("    instances: 4", "    instances: 1", BASE + "extras:\n  gangAllocation: false\n")
    assert not check(single).problems


def test_negative_gpu_is_accepted_by_the_server_but_not_by_the_runtime_counting_gpus() -> None:
    text = edit("      gpu: 8", "      gpu: -1")
    assert "refuses a negative GPU count" in only(check(text)).message
    explicit = check(edit("train --port-label", "train --nproc-per-node 2 --port-label", text))
    assert explicit.ok and explicit.plan is not None and explicit.plan.world_size == 8


def test_a_users_unquoted_secret_in_a_command_is_warned_about() -> None:
    from paijob.validate.rules import secret_tags_outside_single_quotes as outside

    assert outside("login --token <% $secrets.t %>") == ["<% $secrets.t %>"]
    assert outside('login --token "<% $secrets.t %>"') == ["<% $secrets.t %>"]  # $( ) still runs in "..."
    assert outside("login --token '<% $secrets.t %>' --x=a'<% $secrets.u %>'b") == []
    assert outside("echo \\'<% $secrets.t %>") == ["<% $secrets.t %>"]  # an escaped quote opens nothing


def test_validate_names_the_unquoted_secret_and_the_fix() -> None:
    text = edit("    commands:\n", "    commands:\n      - login --token <% $secrets.t %>\n")
    text = edit("taskRoles:", "secrets:\n  t: x\ntaskRoles:", text)
    problem = only(check(text), WARNING)
    assert problem.line == 21 and "'<% $secrets.t %>'" in problem.message and "&#x27;" in problem.message
    quoted = text.replace("login --token <% $secrets.t %>", "login --token '<% $secrets.t %>'")
    assert not check(quoted).warnings


def test_a_registry_password_in_clear_is_warned_about_and_a_secret_reference_is_not() -> None:
    clear = edit("    uri: repo/image:tag\n", "    uri: repo/image:tag\n    auth: {username: me, password: hunter2}\n")
    problem = only(check(clear), WARNING)
    assert problem.dotted_path == "prerequisites[0].auth.password" and "secrets" in problem.message
    hidden = clear.replace("password: hunter2", "password: '<% $secrets.pw %>'").replace(
        "taskRoles:", "secrets:\n  pw: hunter2\ntaskRoles:")
    assert not check(hidden).warnings


def test_the_openpai_before_1_6_flag_holds_for_its_own_command_only(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path) -> None:
    job = tmp_path / "roles.yaml"
    job.write_text(BASE.replace("  worker:", "  ps_server:"))
    assert paijob(capsys, "validate", "--openpai-before-1.6", str(job))[0] == 0
    assert paijob(capsys, "validate", str(job))[0] == 2


def test_commands_split_into_the_words_shlex_gives() -> None:
    # split_command skips shlex for a command with no quote, escape or comment: the words must not change
    import itertools
    import shlex

    from paijob.validate.runtime_plan import split_command

    for size in (1, 2, 3, 4):
        for chars in itertools.product("a \t\n\r'\"\\#=\x0b\xa0", repeat=size):
            text = "".join(chars)
            try:
                expected = shlex.split(text, comments=True, posix=True)
            except ValueError:  # unbalanced quotes: split_command falls back to str.split
                continue
            assert split_command(text) == expected, repr(text)
    assert split_command("paijob-runtime  train\tx.py\n--lr 1") == ["paijob-runtime", "train", "x.py", "--lr", "1"]


def test_validate_reads_train_calls_with_the_runtime_s_own_grammar() -> None:
    # validate builds `paijob-runtime train`'s parser alone and skips GLOBAL_FLAGS before `train`
    from paijob.common.options import GLOBAL_FLAGS, build_parsers, build_train_parser

    parser, train = build_parsers()
    alone = build_train_parser()

    def grammar(p: object) -> list[tuple[object, ...]]:
        return [(a.option_strings, a.dest, a.nargs, a.choices, a.default, a.type, a.const)
                for a in p._actions]  # type: ignore[attr-defined]  # noqa: SLF001

    assert grammar(alone) == grammar(train)
    top = {s for a in parser._actions if a.nargs == 0 for s in a.option_strings}  # noqa: SLF001
    assert set(GLOBAL_FLAGS) == top


def test_commands_are_rendered_only_for_a_job_that_passed_the_schema() -> None:
    # as the server: the schema first; mustache.js renders the commands of a job that passed it
    unclosed = edit("train.py --epochs 1", "train.py <% $parameters.x")
    assert "Unclosed tag" in only(check(unclosed)).message
    assert [p.message for p in check(edit("type: job", "type: nojob", unclosed)).errors if "Unclosed" in p.message] == []


RUN = "      - paijob-runtime train --port-label SynPort train.py --epochs 1\n"


def _recovery(options: str, extra: str = "", role: str = "") -> ValidationReport:
    text = edit(RUN, f"      - paijob-runtime train --port-label SynPort {options} train.py --epochs 1\n")
    if role:
        text = edit("    instances: 4\n", "    instances: 4\n" + role, text)
    return check(text + extra)


@pytest.mark.parametrize(("options", "message"), [
    ("--max-restarts -1", "--max-restarts must be a whole number of restarts from 0 to 100, got '-1'"),
    ("--max-restarts abc", "got 'abc'"),
    ("--max-restarts 100000", "--max-restarts 100000 is more than 100 restarts in one attempt"),
    ("--min-nodes 0 --max-restarts 1", "--min-nodes must be a whole number of nodes, at least 1, got '0'"),
    ("--mode per-node --max-restarts 2", "need --mode per-gpu"),
])
def test_a_recovery_option_paijob_runtime_refuses_is_an_error_of_its_command(options: str, message: str) -> None:
    problem = only(_recovery(options))
    assert problem.dotted_path == "taskRoles.worker.commands[0]" and message in problem.message, problem.message


def test_max_restarts_alone_is_valid() -> None:
    report = _recovery("--max-restarts 2")
    assert report.ok and not report.problems, report.formatted_problems()


GANG_OFF = "extras:\n  gangAllocation: false\n"


def test_min_nodes_needs_what_openpai_needs_to_let_one_task_fail_alone() -> None:
    report = _recovery("--max-restarts 2 --min-nodes 3")
    errors = {p.dotted_path: p.message for p in report.problems if p.severity == ERROR}
    where = "taskRoles.worker.completion.minFailedInstances"
    assert set(errors) == {"extras.gangAllocation", where}, report.formatted_problems()
    assert "needs extras.gangAllocation: false" in errors["extras.gangAllocation"]
    assert "completion.minFailedInstances: 2 (is 1)" in errors[where]
    report = _recovery("--max-restarts 2 --min-nodes 3", GANG_OFF, "    completion:\n      minFailedInstances: 2\n")
    assert report.ok and not report.problems, report.formatted_problems()  # no gang warning either: it is the point
    report = _recovery("--max-restarts 2 --min-nodes 2", GANG_OFF, "    completion:\n      minFailedInstances: 2\n")
    assert "completion.minFailedInstances: 3 (is 2)" in only(report).message
    report = _recovery("--max-restarts 2 --min-nodes 1", GANG_OFF, "    completion:\n      minFailedInstances: -1\n")
    assert report.ok, report.formatted_problems()  # -1: the attempt never fails by its count
    report = _recovery("--max-restarts 2 --min-nodes 4")  # every node: nothing may be lost, nothing to render
    assert report.ok and not report.problems, report.formatted_problems()


def test_min_nodes_above_the_task_count_or_without_restarts_is_an_error() -> None:
    problem = only(_recovery("--max-restarts 2 --min-nodes 5"))
    assert "--min-nodes 5 is more than the 4 task(s) of the training world" in problem.message
    report = _recovery("--min-nodes 3", GANG_OFF, "    completion:\n      minFailedInstances: 2\n")
    assert "--min-nodes 3 needs --max-restarts 1 or more" in only(report).message
