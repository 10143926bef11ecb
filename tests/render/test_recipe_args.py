"""A built-in recipe's arguments (``recipeArgs``, ``--set``) are checked by the recipe's own parser before the queue."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from render_helpers import run_cli

from paijob.common.recipe_options import recipe_arguments_error


def _job(commands: str) -> str:
    return (
        "protocolVersion: 2\nname: recipe\ntype: job\n"
        "prerequisites:\n  - {type: dockerimage, name: image, uri: repo/image:tag}\n"
        "taskRoles:\n  worker:\n    instances: 1\n    dockerImage: image\n"
        "    resourcePerInstance: {cpu: 4, memoryMB: 8192, gpu: 0, ports: {SynPort: 1}}\n"
        f"    commands:\n      - {commands}\n"
    )


def test_a_mistyped_recipe_argument_fails_render_with_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "render", "ddp", "--set", "recipe=cifar10", "--set", "recipeArgs.epohcs=3")
    assert code == 2 and out == ""
    assert "unrecognized arguments: --epohcs 3" in err and "did you mean --epochs?" in err


def test_a_value_the_recipe_cannot_read_fails_render(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "render", "ddp", "--set", "recipe=cifar10", "--set", "recipeArgs.epochs=three")
    assert code == 2 and "argument --epochs: invalid int value: 'three'" in err


def test_recipe_arguments_the_recipe_takes_render(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "render", "ddp", "--set", "recipe=imagenet", "--set", "recipeArgs.epochs=3",
                           "--set", "recipeArgs.decode=gpu", "--set", "recipeArgs.deterministic=true")
    assert code == 0 and "--recipe imagenet" in out and "--epochs 3 --decode gpu --deterministic" in out


def test_a_value_filled_in_at_run_time_is_not_judged_but_an_unknown_option_is(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run_cli(capsys, "render", "ddp", "--set", "recipe=cifar10", "--set", "parameters.epochs=3",
                         "--set", "recipeArgs.epochs=<% $parameters.epochs %>")
    assert code == 0
    assert recipe_arguments_error("cifar10", ["--epochs", "$EPOCHS"], filled_in_later=True) is None
    assert "did you mean --epochs?" in str(recipe_arguments_error("cifar10", ["--epoch-count", "$E"],
                                                                   filled_in_later=True))


def test_validate_refuses_a_recipe_argument_typo_and_an_unknown_recipe(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(_job("paijob-runtime train --recipe cifar10 --epohcs 3"))
    code, out, _ = run_cli(capsys, "validate", str(job))
    assert code == 2 and "recipe cifar10: unrecognized arguments: --epohcs 3" in out and "--epochs?" in out
    job.write_text(_job("paijob-runtime train --recipe cifar100 --epochs 3"))
    code, out, _ = run_cli(capsys, "validate", str(job))
    assert code == 2 and "no built-in recipe 'cifar100' (did you mean cifar10?)" in out


def test_the_check_runs_on_a_client_without_torch(tmp_path: Path) -> None:
    """The client never imports torch: the recipe grammar is in paijob.common, not paijob.runtime."""
    job = tmp_path / "job.yaml"
    job.write_text(_job("paijob-runtime train --recipe cifar10 --epohcs 3"))
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch' or name.startswith('paijob.runtime'):\n"
        "            raise ImportError('the client imported ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from paijob.cli import main\n"
        f"sys.exit(main(['validate', {str(job)!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, env=dict(os.environ),
                          timeout=120)
    assert done.returncode == 2 and "did you mean --epochs?" in done.stdout, done.stdout + done.stderr
