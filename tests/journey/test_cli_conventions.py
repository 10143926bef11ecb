"""kubectl/Helm-style conventions: -o formats, read-only verbs that start nothing, logs options, `logs -f`'s
exit code, `local prune`, `templates show --values`, shell completion that costs `paijob render` nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from suite_helpers import paijob

from paijob.local import daemon

JOB = """\
protocolVersion: 2
name: {name}
type: job
jobRetryCount: 0
prerequisites: [{{type: dockerimage, name: img, uri: python:3.11}}]
taskRoles:
  worker:
    instances: 2
    dockerImage: img
    resourcePerInstance: {{cpu: 1, memoryMB: 256, gpu: 0}}
    commands:
      - 'for i in 1 2 3 4 5; do echo "[rank$PAI_TASK_INDEX]: line $i"; done'
      - {last}
"""


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("PAIJOB_LOCAL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    for var in ("PAI_CLUSTER_URL", "PAI_TOKEN", "PAI_USER"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("argv", [["list"], ["status", "nojob"], ["logs", "nojob"], ["stop", "nojob"]])
def test_read_only_verbs_and_stop_never_start_the_local_cluster(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                       argv: list[str]) -> None:
    code, _, err = paijob(capsys, *argv)
    assert code == 2 and "local cluster is not running" in err
    assert daemon.running(tmp_path / "state") is None


def test_local_status_and_cluster_list_speak_yaml_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = paijob(capsys, "local", "status", "-o", "yaml")
    assert code == 0 and yaml.safe_load(out)["running"] is False
    paijob(capsys, "cluster", "add", "prod", "--url", "https://pai.example.com", "--user", "alice")
    code, out, _ = paijob(capsys, "cluster", "list", "-o", "json")
    assert code == 0 and {row["name"]: row["user"] for row in json.loads(out)}["prod"] == "alice"


def test_render_o_format_and_the_deprecated_o_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = paijob(capsys, "render", "ddp", "-o", "json")
    assert code == 0 and json.loads(out)["name"] == "ddp-train"
    code, out, _ = paijob(capsys, "render", "ddp", "-o", "yaml")
    assert code == 0 and yaml.safe_load(out)["name"] == "ddp-train"
    code, out, err = paijob(capsys, "render", "ddp", "-o", str(tmp_path / "job.yaml"))
    assert code == 0 and out == "" and "deprecated" in err and "--output-file" in err
    assert yaml.safe_load((tmp_path / "job.yaml").read_text())["name"] == "ddp-train"
    code, _, err = paijob(capsys, "render", "ddp", "--output-file", str(tmp_path / "b.yaml"))
    assert code == 0 and "deprecated" not in err and (tmp_path / "b.yaml").is_file()


def test_logs_tail_rank_timestamps_and_follow_exit_code(capsys: pytest.CaptureFixture[str], local: Path,
                                                        tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB.format(name="fails", last="exit 3"))
    code, _, err = paijob(capsys, "run", str(job), "--local", "--name", "fails")
    assert code == 1, err
    code, out, err = paijob(capsys, "logs", "fails", "-f")
    assert code == 1 and "FAILED" in err  # -f follows the job's outcome
    code, out, _ = paijob(capsys, "logs", "fails", "--tail", "2")
    assert code == 0
    assert [line for line in out.splitlines() if line.startswith("worker/0")] == [
        "worker/0 | [rank0]: line 4", "worker/0 | [rank0]: line 5"]
    code, out, _ = paijob(capsys, "logs", "fails", "--rank", "1", "--no-prefix")
    assert out.splitlines() == [f"[rank1]: line {i}" for i in range(1, 6)]
    code, out, _ = paijob(capsys, "logs", "fails", "--rank", "0", "--timestamps", "--tail", "1")
    assert len(out.splitlines()) == 1 and out.startswith("worker/0 | 20") and "Z [rank0]: line 5" in out

    code, out, _ = paijob(capsys, "list", "-o", "yaml")
    assert code == 0 and any(entry["name"] == "fails" for entry in yaml.safe_load(out))
    code, out, _ = paijob(capsys, "list", "-o", "wide")
    assert "RETRIES" in out.splitlines()[0]
    code, out, _ = paijob(capsys, "status", "fails", "-o", "yaml")
    assert yaml.safe_load(out)["jobStatus"]["state"] == "FAILED"


def test_local_prune_removes_finished_jobs_files_and_keeps_outputs(capsys: pytest.CaptureFixture[str],
                                                                  local: Path, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB.format(name="done", last='echo kept > "$PAIJOB_OUTPUT_DIR/result.txt"'))
    code, _, err = paijob(capsys, "run", str(job), "--local", "--name", "done")
    assert code == 0, err
    job_id = next(p.name for p in (local / "work").iterdir() if p.name.endswith("~done"))
    code, out, _ = paijob(capsys, "local", "prune", "--dry-run")
    assert code == 0 and str(local / "work" / job_id) in out and (local / "work" / job_id).exists()
    code, out, _ = paijob(capsys, "local", "prune")
    assert not (local / "work" / job_id).exists() and not (local / "logs" / job_id).exists()
    assert (local / "outputs" / job_id / "result.txt").read_text() == "kept\n"
    code, _, _ = paijob(capsys, "status", "done")
    assert code == 0  # the record stays: names are never reused
    paijob(capsys, "local", "prune", "--outputs")
    assert not (local / "outputs" / job_id).exists()


def test_templates_show_values_lists_every_value_of_a_custom_template(capsys: pytest.CaptureFixture[str],
                                                                     tmp_path: Path) -> None:
    template = tmp_path / "mine.yaml.j2"
    template.write_text('{% import "_job.yaml.j2" as job with context %}\n{{ job.header() }}\ntaskRoles:\n'
                        '  w:\n    instances: {{ instances }}\n{{ job.resources(1) }}\n    commands:\n'
                        '{{ job.commands([job.train("ddp", 1)]) }}\n{{ job.footer() }}\n')
    code, out, _ = paijob(capsys, "templates", "show", str(template), "--values", "-o", "json")
    assert code == 0
    listed = {entry["name"]: entry for entry in json.loads(out)}
    for name in ("name", "image", "instances", "gpu", "cpu", "memoryMB", "portLabel", "script", "recipe"):
        assert listed[name]["required"] is True
    assert "ddp's default" in listed["portLabel"]["comment"]
    code, out, _ = paijob(capsys, "templates", "show", "ddp", "--values")
    assert code == 0 and "loaderWorkers" in out and "DataLoader worker" in out


def completions(script: str, words: list[str]) -> list[str]:
    line = " ".join(f"'{w}'" for w in words)
    program = (f"{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _paijob; "
               'printf "%s\\n" "${COMPREPLY[@]}"')
    return subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True,
                          cwd="/").stdout.split()


def test_bash_completion_completes_verbs_options_and_templates(capsys: pytest.CaptureFixture[str]) -> None:
    code, script, _ = paijob(capsys, "completion", "bash")
    assert code == 0
    assert completions(script, ["paijob", "ren"]) == ["render"]
    assert "ddp" in completions(script, ["paijob", "render", "dd"])
    assert "--tail" in completions(script, ["paijob", "logs", "--ta"])
    for shell in ("zsh", "fish"):
        code, text, _ = paijob(capsys, "completion", shell)
        assert code == 0 and "render" in text


def test_paijob_render_imports_no_completion_or_cluster_code() -> None:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "paijob.cli", "render", "ddp"],
                          capture_output=True, text=True, check=True)
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "paijob.render.templating" in imported  # it did render
    assert not {"paijob.commands.completion", "paijob.project", "paijob.remote.client", "paijob.local.daemon",
                "paijob.workdir", "torch", "requests"} & imported
