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


@pytest.mark.parametrize("template", TEMPLATES)
def test_every_template_installs_the_exact_client_version_when_the_image_lacks_it(template: str) -> None:
    text = render_template(template, sets=SCRIPT).text
    commands = role_commands(text, first_role(template))
    step = install_step(commands)
    assert split_command(step)[-1] == f"paijob=={paijob.__version__}"
    assert "--no-deps" in split_command(step)  # the client's own dependencies stay out of the task
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
    words = split_command(install_step(role_commands(index, "worker")))
    assert words[words.index("--index-url") + 1] == "https://pypi.corp.test/simple"
    assert words[-1] == f"paijob=={paijob.__version__}"
    wheel = render_template("ddp", sets=["runtimeInstall.wheelUrl=file:///srv/paijob-0.1.0-py3-none-any.whl"]).text
    words = split_command(install_step(role_commands(wheel, "worker")))
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
