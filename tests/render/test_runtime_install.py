"""The built-in templates get paijob-runtime into any image with Python and pip, and log in to private registries."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from render_helpers import run_cli

import paijob
from paijob.errors import PaijobError
from paijob.render.templating import render_template
from paijob.validate.runtime_plan import split_command

TEMPLATES = ["ddp", "apex", "spawn", "dataparallel", "horovod"]
SCRIPT = ["script=train.py"]


def role_commands(text: str, role: str) -> list[str]:
    return yaml.safe_load(text)["taskRoles"][role]["commands"]


def first_role(template: str) -> str:
    return "master" if template == "horovod" else "worker"


def install_step(commands: list[str]) -> str:
    (step,) = [c for c in commands if c.startswith("command -v paijob-runtime")]
    return step


def pip_call(step: str) -> list[str]:
    """The step's pip words: up to the `||` of its failure message."""
    words = split_command(step)
    return words[: words.index("||", words.index("pip"))]


@pytest.mark.parametrize("template", TEMPLATES)
def test_every_template_installs_the_exact_client_version_when_the_image_lacks_it(template: str) -> None:
    text = render_template(template, sets=SCRIPT).text
    commands = role_commands(text, first_role(template))
    step = install_step(commands)
    assert pip_call(step)[-1] == f"paijob=={paijob.__version__}"
    assert "--no-deps" in pip_call(step)  # the client's own dependencies stay out of the task
    assert f"export PAIJOB_RENDERED_VERSION={paijob.__version__}" in commands
    assert commands.index(step) < len(commands) - 1  # before training


@pytest.mark.parametrize("template", TEMPLATES)
def test_install_off_leaves_only_the_version_export(template: str) -> None:
    instances = "instances=1" if template == "dataparallel" else "instances=3"
    text = render_template(template, sets=[*SCRIPT, "runtimeInstall.enabled=false", instances]).text
    everything = "\n".join(c for role in yaml.safe_load(text)["taskRoles"].values() for c in role["commands"])
    assert "pip install" not in everything
    assert f"PAIJOB_RENDERED_VERSION={paijob.__version__}" in everything


def test_private_index_and_wheel_url_are_what_pip_is_given() -> None:
    index = render_template("ddp", sets=["runtimeInstall.indexUrl=https://pypi.corp.test/simple"]).text
    words = pip_call(install_step(role_commands(index, "worker")))
    assert words[words.index("--index-url") + 1] == "https://pypi.corp.test/simple"
    assert words[-1] == f"paijob=={paijob.__version__}"
    wheel = render_template("ddp", sets=["runtimeInstall.wheelUrl=file:///srv/paijob-0.1.0-py3-none-any.whl"]).text
    words = pip_call(install_step(role_commands(wheel, "worker")))
    assert words[-1] == "file:///srv/paijob-0.1.0-py3-none-any.whl" and "--index-url" not in words


def test_index_and_wheel_together_are_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "render", "ddp", "--set", "runtimeInstall.indexUrl=https://a.test/simple",
                           "--set", "runtimeInstall.wheelUrl=https://a.test/p.whl")
    assert code == 2 and "not both" in err and err.count("\n") == 1


def test_horovod_installs_on_every_worker_before_the_training_launch() -> None:
    text = render_template("horovod", sets=[*SCRIPT, "instances=3", "gpu=2"]).text
    commands = role_commands(text, "master")
    launches = [c for c in commands if c.startswith("mpirun")]
    assert len(launches) == 2
    prepare, train = (split_command(c) for c in launches)
    assert prepare[prepare.index("-H") + 1] == "worker-0:1,worker-1:1" and prepare[prepare.index("-np") + 1] == "2"
    assert prepare[-3:-1] == ["bash", "-c"] and prepare[-1] == install_step(commands)
    assert "paijob-runtime" in train and train[train.index("-np") + 1] == "6"


def _fake_bin(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("has_runtime", [True, False])
def test_install_step_runs_pip_only_when_the_image_lacks_paijob_runtime(tmp_path: Path, has_runtime: bool) -> None:
    """The step as OpenPAI's user.sh runs it: bash errexit nounset pipefail."""
    step = install_step(role_commands(render_template("ddp").text, "worker"))
    record = tmp_path / "pip-argv"
    _fake_bin(tmp_path, "python3", f'echo "$PIP_BREAK_SYSTEM_PACKAGES $*" > {record}')
    if has_runtime:
        _fake_bin(tmp_path, "paijob-runtime", "exit 0")
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path)}
    subprocess.run(["bash", "-c", f"set -o errexit -o nounset -o pipefail\n{step}"], env=env, check=True)
    if has_runtime:
        assert not record.exists()
    else:
        assert record.read_text().split() == ["1", "-m", "pip", "install", "--no-cache-dir",
                                              "--disable-pip-version-check", "--no-deps",
                                              f"paijob=={paijob.__version__}"]


def test_registry_login_becomes_the_dockerimage_auth() -> None:
    text = render_template("ddp", sets=["imageCredentials.registry=https://reg.corp.test",
                                        "imageCredentials.username=me",
                                        "imageCredentials.password=<% $secrets.registryPassword %>",
                                        "secrets.registryPassword=s3cret"]).text
    (image,) = yaml.safe_load(text)["prerequisites"]
    assert image["auth"] == {"username": "me", "password": "<% $secrets.registryPassword %>",
                             "registryuri": "https://reg.corp.test"}
    assert "auth" not in yaml.safe_load(render_template("ddp").text)["prerequisites"][0]


@pytest.mark.parametrize("sets", [
    ["imageCredentials.username=me", "imageCredentials.password=hunter2"],
    ["imageCredentials.username=me"],
    ["imageCredentials.password=<% $secrets.pw %>"],
])
def test_a_password_in_clear_or_half_a_login_is_refused(sets: list[str]) -> None:
    with pytest.raises(PaijobError, match=r"secrets|password"):
        render_template("ddp", sets=sets)


def test_the_examples_and_defaults_need_no_image_that_does_not_exist() -> None:
    """The default image is public (PyTorch's official one); horovod's is a placeholder submit refuses."""
    for template in TEMPLATES:
        uri = yaml.safe_load(render_template(template, sets=SCRIPT).text)["prerequisites"][0]["uri"]
        if template == "horovod":
            assert uri.split("/")[0].endswith(".invalid")
        else:
            assert uri.startswith("pytorch/pytorch:") and "-cuda" in uri


def test_runtime_modules_import_none_of_the_client_dependencies() -> None:
    """What `pip install --no-deps paijob` gives a task must run `paijob-runtime env`."""
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'yaml', 'jinja2', 'requests', 'flask', 'waitress', 'pathspec', 're2'}:\n"
        "            raise ImportError('client dependency imported by the runtime: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from paijob.runtime.cli import main\n"
        "import paijob.runtime.launch, paijob.runtime.agent, paijob.runtime.worker\n"
        "sys.exit(main(['env', '--nnodes', '1', '--node-rank', '0', '--master-addr', '127.0.0.1',"
        " '--master-port', '29999']))\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("PAI_")}
    done = subprocess.run([os.sys.executable, "-c", blocker], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------- a task that cannot get paijob


def _fake_wheel(folder: Path, version: str) -> Path:
    """A paijob wheel pip accepts (metadata and a record, no code): enough to see which version pip took."""
    import base64
    import hashlib
    import zipfile

    dist = f"paijob-{version}.dist-info"
    files = {
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: paijob\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"paijob-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


def _simple_index(root: Path, version: str) -> str:
    """A PEP 503 index in a folder holding one paijob wheel of ``version``; returns its file:// URL."""
    wheel = _fake_wheel(root / "paijob", version)
    (root / "paijob" / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n', encoding="utf-8")
    (root / "index.html").write_text('<a href="paijob/">paijob</a>\n', encoding="utf-8")
    return root.as_uri()


def _run_step(tmp_path: Path, step: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The step under OpenPAI's shell options with a python3 whose pip installs into a folder (PIP_TARGET)."""
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    _fake_bin(bin_dir, "python3", f'exec {sys.executable} "$@"')
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "PIP_CONFIG_FILE": os.devnull,
           "PIP_TARGET": str(tmp_path / "target"), "PIP_NO_INPUT": "1", **(extra_env or {})}
    return subprocess.run(["bash", "-c", f"set -o errexit -o nounset -o pipefail\n{step}"], env=env,
                          capture_output=True, text=True, timeout=120)


def _installed(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "target").glob("paijob-*.dist-info"))


def test_an_index_without_the_version_ends_the_task_in_one_line_never_retried(tmp_path: Path) -> None:
    from paijob.openpai import exitspec

    index = _simple_index(tmp_path / "index", "0.0.1")  # not this client's version
    step = install_step(role_commands(render_template("ddp", sets=[f"runtimeInstall.source={index}"]).text, "worker"))
    done = _run_step(tmp_path, step)
    assert done.returncode == 127, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert f"paijob=={paijob.__version__} from {index}" in last
    assert "runtimeInstall.enabled: false" in last and "runtimeInstall.source" in last and "in env" in last
    reported = exitspec.container_exit(done.returncode, done.stdout + done.stderr)
    assert reported.code == 220 and reported.spec.never_retried  # OpenPAI's runtime: not retried
    assert _installed(tmp_path) == []


def test_the_default_step_names_the_index_pip_was_pointed_at_in_env(tmp_path: Path) -> None:
    index = _simple_index(tmp_path / "index", "0.0.1")
    step = install_step(role_commands(render_template("ddp").text, "worker"))
    done = _run_step(tmp_path, step, {"PIP_INDEX_URL": index})
    assert done.returncode == 127
    assert f"paijob=={paijob.__version__} from {index} (" in done.stderr.strip().splitlines()[-1]


def test_source_installs_from_a_local_index_and_from_a_wheel_file(tmp_path: Path) -> None:
    index = _simple_index(tmp_path / "index", paijob.__version__)
    step = install_step(role_commands(render_template("ddp", sets=[f"runtimeInstall.source={index}"]).text, "worker"))
    (tmp_path / "a").mkdir()
    done = _run_step(tmp_path / "a", step)
    assert done.returncode == 0, done.stderr
    assert _installed(tmp_path / "a") == [f"paijob-{paijob.__version__}.dist-info"]
    wheel = _fake_wheel(tmp_path / "wheels", "9.9.9")
    step = install_step(role_commands(render_template("ddp", sets=[f"runtimeInstall.source={wheel}"]).text, "worker"))
    (tmp_path / "b").mkdir()
    done = _run_step(tmp_path / "b", step)
    assert done.returncode == 0, done.stderr
    assert _installed(tmp_path / "b") == ["paijob-9.9.9.dist-info"]


@pytest.mark.parametrize(("source", "expected"), [
    ("https://pypi.corp.test/simple", ["--index-url", "https://pypi.corp.test/simple", f"paijob=={paijob.__version__}"]),
    ("https://files.corp.test/paijob-0.1.0-py3-none-any.whl", ["https://files.corp.test/paijob-0.1.0-py3-none-any.whl"]),
    ("git+https://git.corp.test/paijob.git@v0.1.0", ["git+https://git.corp.test/paijob.git@v0.1.0"]),
])
def test_source_is_an_index_a_wheel_or_a_vcs_url(source: str, expected: list[str]) -> None:
    pip_words = pip_call(install_step(role_commands(
        render_template("ddp", sets=[f"runtimeInstall.source={source}"]).text, "worker")))
    assert pip_words[-len(expected):] == expected
    if "--index-url" not in expected:
        assert "--index-url" not in pip_words


def test_source_and_an_older_spelling_together_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "render", "ddp", "--set", "runtimeInstall.source=https://a.test/simple",
                           "--set", "runtimeInstall.wheelUrl=https://a.test/p.whl")
    assert code == 2 and "not both" in err and err.count("\n") == 1


def test_validate_and_dry_run_say_which_install_route_the_job_takes(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(render_template("ddp", sets=["runtimeInstall.source=git+https://git.corp.test/p.git"]).text)
    code, out, _ = run_cli(capsys, "validate", str(job))
    assert code == 0 and "installed at task start: paijob from the VCS URL git+https://git.corp.test/p.git" in out
    code, _, err = run_cli(capsys, "submit", "ddp", "--dry-run", "-c", "local")
    assert code == 0 and f"# paijob-runtime: the image's own, else installed at task start: paijob=={paijob.__version__} " \
                         "from PyPI" in err
    code, _, err = run_cli(capsys, "submit", "ddp", "--dry-run", "-c", "local", "--set", "runtimeInstall.enabled=false")
    assert code == 0 and "# paijob-runtime: no install step, so the image must have it" in err


def test_the_route_names_the_index_the_job_s_env_gives_pip(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "submit", "ddp", "--dry-run", "-c", "local",
                           "--set", "env.PIP_INDEX_URL=https://mirror.corp.test/simple")
    assert code == 0 and f"paijob=={paijob.__version__} from the index https://mirror.corp.test/simple " \
                         "(PIP_INDEX_URL in env)" in err


@pytest.mark.parametrize(("source", "says"), [
    ("notaurl", "expected an index URL"),
    ("ftp://mirror.test/simple", "expected an index URL"),
    ("--index-url=https://pypi.corp.test/simple", "a pip option is not a source"),
    ("https://alice:s3cr3t-TOKEN@pypi.corp.test/simple", "holds credentials"),
    ("https://s3cr3t-TOKEN@pypi.corp.test/simple", "holds credentials"),
    ("git+https://oauth2:s3cr3t-TOKEN@git.corp.test/paijob.git", "holds credentials"),
    ("https://files.corp.test/paijob.whl\x1b[2J", "control characters"),
])
def test_a_source_that_cannot_work_or_holds_credentials_is_refused_before_the_queue(
        capsys: pytest.CaptureFixture[str], source: str, says: str) -> None:
    """Issue 45 (notaurl rendered, failing only in the task) and issue 46 row 2 (a token rendered into the
    commands, printed by --dry-run and sent to the cluster, where every user reads the job's config)."""
    for verb in (["render", "ddp"], ["submit", "ddp", "--dry-run"]):
        code, out, err = run_cli(capsys, *verb, "--set", f"runtimeInstall.source={source}")
        assert code == 2, (verb, out, err)
        assert says in err and "Traceback" not in err and "s3cr3t-TOKEN" not in out + err
        assert len(err.strip().splitlines()) == 1, err
    if "credentials" in says:
        assert "<% $secrets." in err  # the fix names OpenPAI's secrets


@pytest.mark.parametrize("source", ["git+ssh://git@git.corp.test/paijob.git", "./dist/paijob-0.1.0-py3-none-any.whl",
                                    "http://127.0.0.1:8080/simple", "file:///srv/wheels"])
def test_ordinary_sources_still_render(source: str) -> None:
    assert install_step(role_commands(render_template("ddp", sets=[f"runtimeInstall.source={source}"]).text, "worker"))


def test_an_index_held_in_a_secret_is_never_printed_by_the_failure_line() -> None:
    """OpenPAI replaces <% $secrets.NAME %> in the commands' text: a failure line that repeated the marker
    would print the secret's value into the task's log."""
    step = install_step(role_commands(render_template(
        "ddp", sets=["runtimeInstall.source=<% $secrets.pipIndex %>"]).text, "worker"))
    pip_part, _, failure = step.partition(" || {")
    assert "--index-url '<% $secrets.pipIndex %>'" in pip_part
    assert "secrets." not in failure


@pytest.mark.parametrize(("source", "says"), [
    ("https://alice:s3cr3t-TOKEN\uff20pypi.corp.test/simple", "holds credentials"),  # a fullwidth @: a traceback
    ("https://alice\uff1as3cr3t-TOKEN@pypi.corp.test/simple", "holds credentials"),  # a fullwidth :
    ("https://pypi.corp.test/simple?token=s3cr3t-TOKEN", "holds credentials"),
    ("https://pypi.corp.test/simple?private_token=s3cr3t-TOKEN&x=1", "holds credentials"),
    ("https://files.corp.test/paijob.whl?X-Amz-Signature=s3cr3t-TOKEN", "holds credentials"),
    ("alice:s3cr3t-TOKEN@pypi.corp.test/simple", "holds credentials"),  # repeated user:SECRET in its message
    ("https://alice:s3cr3t/TOKEN@pypi.corp.test/simple", "holds credentials"),  # a / in the password
    ("https://pypi.corp.test/simple/" + "sk_live_" + "51H8s3cr3t-TOKENxYzAb", "holds credentials"),
    ("https://[::1/simple", "not a URL pip can read"),  # a traceback
    ("https://\uff50ypi.corp.test/simple", "NFKC"),
])
def test_a_source_is_normalised_and_never_echoes_a_credential(
        capsys: pytest.CaptureFixture[str], source: str, says: str) -> None:
    """Issue 55 item 5: `runtimeInstall.source` with a fullwidth ＠ was a traceback, `?token=` rendered, and one
    message repeated `user:SECRET`."""
    code, out, err = run_cli(capsys, "render", "ddp", "--set-string", f"runtimeInstall.source={source}")
    assert code == 2 and says in err and "Traceback" not in err, err
    assert "s3cr3t" not in out + err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("source", ["git+https://git.corp.test:8443/paijob.git@v1.0", "git+ssh://git@github.com/o/p.git@v1",
                                    "https://files.corp.test/paijob-0.1.0-py3-none-any.whl#sha256=ab12",
                                    "https://pypi.corp.test/simple?format=json"])
def test_sources_with_ports_refs_and_harmless_queries_still_render(source: str) -> None:
    assert install_step(role_commands(render_template("ddp", set_strings=[f"runtimeInstall.source={source}"]).text,
                                      "worker"))
