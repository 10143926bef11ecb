"""The library/CLI split: the dry run is the request submit sends, the profile is resolved once per
submit, the verbs reach the cluster through paijob.api only, and the client verbs never import Flask."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from cluster_helpers import TOKEN, job_yaml
from suite_helpers import paijob

from paijob import api, cli
from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.remote import profiles

PACKAGE = Path(api.__file__).parent
GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture
def remote(server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """A profile 'srv' for the in-process server, its token in $SRV_TOKEN."""
    monkeypatch.setenv("SRV_TOKEN", TOKEN)
    profiles.add("srv", server.url, user=local_user(), token_env="SRV_TOKEN")
    return "srv"


def test_dry_run_text_is_golden(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROD_TOKEN", TOKEN)
    profiles.add("prod", "https://pai.example.com/", user="alice", token_env="PROD_TOKEN")
    job = tmp_path / "job.yaml"
    job.write_text(job_yaml("golden-dry-run", ["echo hi"]))
    code, out, err = paijob(capsys, "submit", str(job), "-c", "prod", "--dry-run")
    assert code == 0, err
    assert out == (GOLDEN / "dry-run-prod.txt").read_text()
    assert err.splitlines()[-1] == "# dry run: would POST to prod (token from $PROD_TOKEN); nothing was sent"
    assert TOKEN not in out + err


def test_what_submit_sends_is_exactly_the_dry_run(remote: str, tmp_path: Path) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job_yaml("sent-as-shown", ["echo hi"]))
    job = api.prepare(api.JobRequest(str(job_file), cluster=remote))
    shown = api.dry_run(job)
    client = api.connect(job.target)
    wire: list[requests.PreparedRequest] = []
    client.session.hooks["response"].append(lambda reply, *args, **kwargs: wire.append(reply.request))
    assert api.submit(job, client) == f"{local_user()}~sent-as-shown"
    posts = [sent for sent in wire if sent.method == "POST"]
    assert len(posts) == 1
    sent = posts[0]
    assert (sent.method, sent.url, sent.body) == (shown.method, shown.url, shown.body.encode())
    assert sent.headers["Content-Type"] == shown.headers["Content-Type"] == "text/yaml"
    assert sent.headers["Authorization"] == f"Bearer {TOKEN}"  # the real token goes on the wire ...
    assert shown.headers["Authorization"] == "Bearer ***"  # ... and is masked in what is shown
    assert TOKEN not in shown.text() and shown.text().endswith(job.text)


def test_a_request_built_for_another_cluster_is_refused(remote: str, tmp_path: Path) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job_yaml("elsewhere", ["echo hi"]))
    job = api.prepare(api.JobRequest(str(job_file), cluster=remote))
    shown = api.dry_run(job, profiles.Cluster("other", "https://pai.example.com", "u", None))
    with pytest.raises(api.PaijobError, match="built for https://pai.example.com"):
        api.submit(shown, api.connect(job.target))


def test_submit_resolves_the_cluster_profile_once(remote: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = profiles.named

    def counting(name: str) -> profiles.Cluster:
        calls.append(name)
        return real(name)

    monkeypatch.setattr(profiles, "named", counting)
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "data.txt").write_text("x\n")
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job_yaml("once", ["cat data.txt"]))
    code, out, err = paijob(capsys, "submit", str(job_file), "-c", remote, "--workdir", str(folder), "--wait")
    assert code == 0, err
    assert calls == [remote]
    calls.clear()
    code, out, err = paijob(capsys, "submit", str(job_file), "-c", remote, "--workdir", str(folder),
                            "--name", "twice", "--dry-run")
    assert code == 0, err
    assert calls == [remote]


def test_logs_refuses_an_index_the_job_does_not_have(remote: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job_yaml("two-tasks", ["echo task $PAI_TASK_INDEX"], instances=2))
    code, _, err = paijob(capsys, "submit", str(job_file), "-c", remote, "--wait")
    assert code == 0, err
    code, out, err = paijob(capsys, "logs", "two-tasks", "-c", remote, "--index", "1")
    assert code == 0 and out == "worker/1 | task 1\n"
    code, out, err = paijob(capsys, "logs", "two-tasks", "-c", remote, "--index", "5")
    assert code == 2 and out == ""
    assert err == (f"paijob: error: job {local_user()}~two-tasks has no task with index 5 in any role "
                   "(task indexes: 0 to 1); pick one with --index\n")
    code, out, err = paijob(capsys, "logs", "two-tasks", "-c", remote, "--index", "5", "--follow")
    assert code == 2 and "no task with index 5" in err and out == ""
    code, _, err = paijob(capsys, "logs", "two-tasks", "-c", remote, "--role", "nope")
    assert code == 2 and "has no role 'nope' (roles: worker)" in err


@pytest.mark.parametrize("argv", [["logs", "x", "-o", "json"], ["status", "x", "--bogus"],
                                  ["cluster", "add", "p", "--url", "https://h", "--nope"]])
def test_a_bad_option_prints_the_verbs_own_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    err = capsys.readouterr().err
    verb = " ".join(word for word in argv[:2] if word in ("logs", "status", "cluster", "add"))
    assert exit_info.value.code == 2
    assert err.startswith(f"paijob {verb}: error: unrecognized arguments: "
                          f"{' '.join(argv[-2:] if argv[-1] == 'json' else argv[-1:])}")
    assert len(err.strip().splitlines()) == 1 and f"`paijob {verb} --help`" in err  # one line, not the usage block


def test_list_status_and_logs_never_import_flask_or_torch(remote: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job_yaml("light", ["echo hi"]))
    assert paijob(capsys, "submit", str(job_file), "-c", remote, "--wait")[0] == 0
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    for verb in (["list"], ["status", "light"], ["logs", "light"]):
        done = subprocess.run([sys.executable, "-X", "importtime", "-m", "paijob.cli", *verb, "-c", remote],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
        assert "paijob.remote.client" in imported  # it did talk to the cluster
        assert not {"flask", "werkzeug", "waitress", "torch", "paijob.local.server"} & imported, verb


def _imports(path: Path) -> list[str]:
    """The modules ``path`` imports at run time (not those under ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and ast.unparse(block.test) == "TYPE_CHECKING" for node in ast.walk(block)}
    names = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def test_the_verbs_reach_the_library_through_paijob_api_only() -> None:
    allowed = ("paijob.api", "paijob.errors", "paijob.commands", "paijob.cli", "paijob.__version__",
               "paijob.openpai.", "paijob.common.contract",  # pure facts (OpenPAI's, PAIJOB_* names), no I/O
               "paijob.common.records")  # the runtime's failure record, read from a status answer (pure)
    # `paijob render`, the one verb timed against its libraries (issue 25: at most 1.25x `import jinja2, yaml`),
    # calls the function paijob.api.render wraps: importing paijob.api costs about 16 ms it never uses.
    exceptions = {"render.py": ("paijob.render.templating", "paijob.common.safefile.write_text")}
    for path in sorted((PACKAGE / "commands").glob("*.py")):
        for name in _imports(path):
            if name.startswith("paijob") and name not in exceptions.get(path.name, ()):
                assert name.startswith(allowed), f"{path.name} imports {name}: go through paijob.api"


def test_nothing_below_the_cli_imports_the_cli_or_argparse() -> None:
    process_entries = {"local/server.py"}  # the server's own `python -m` entry point
    own_command_lines = ("runtime/", "common/options.py", "common/recipe_options.py", "validate/runtime_plan.py",
                         "scaffold/")  # paijob-runtime's and the recipes' parsers
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("commands/") or relative == "cli.py":
            continue
        names = _imports(path)
        assert not [n for n in names if n.startswith(("paijob.commands", "paijob.cli"))], relative
        if relative not in process_entries and not relative.startswith(own_command_lines):
            assert "argparse" not in names, f"{relative} imports argparse"
