"""Legacy apex scripts run unmodified on native torch; nothing leaks without the compat flag."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch
from training_helpers import ROOT, run_ranks, run_single

from paijob.runtime import apex_compat
from paijob.runtime.apex_compat.detect import (
    real_apex_amp_present,
    script_needs_apex_compat,
    source_imports_apex,
)

SCRIPT = Path(__file__).with_name("tutorial_apex_script.py")


def losses(stdout: str) -> list[float]:
    return [float(line.split()[1]) for line in stdout.splitlines() if line.startswith("LOSS ")]


def digests(stdout: str) -> list[str]:
    return [line.split()[1] for line in stdout.splitlines() if line.startswith("DIGEST ")]


# --- detection ----------------------------------------------------------------------------


@pytest.mark.parametrize("source", [
    "import apex",
    "from apex import amp",
    "from apex.parallel import DistributedDataParallel as DDP",
    "import apex.amp as amp",
    "def f():\n    from apex import amp\n",
    "try:\n    from apex import amp\nexcept ImportError:\n    amp = None\n",
    "import importlib\namp = importlib.import_module('apex.amp')\n",
])
def test_detect_finds_apex_imports(source: str, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(source)
    assert source_imports_apex(source)
    assert script_needs_apex_compat(script)  # real apex is not installed here


@pytest.mark.parametrize("source", [
    "import torch\n",
    "import apexx\n",
    "from .apex import amp\n",
    "# from apex import amp\nx = 'import apex'\n",
    "from torch.cuda import amp\n",
])
def test_detect_ignores_non_apex_code(source: str, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(source)
    assert not script_needs_apex_compat(script)


def test_detect_tolerates_syntax_errors(tmp_path: Path) -> None:
    script = tmp_path / "broken.py"
    script.write_text("from apex import amp\ndef (:\n")
    assert script_needs_apex_compat(script)


def test_pypi_apex_without_amp_does_not_count_as_real_apex(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "site" / "apex"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("# the unrelated PyPI 'apex' web toolkit\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert not real_apex_amp_present()
    (fake / "amp").mkdir()
    (fake / "amp" / "__init__.py").write_text("")
    assert real_apex_amp_present()
    script = tmp_path / "t.py"
    script.write_text("from apex import amp\n")
    assert not script_needs_apex_compat(script)
    assert "apex" not in sys.modules  # detection never imports


def test_detect_module_does_not_import_torch() -> None:
    code = ("import sys; import paijob.runtime.apex_compat.detect as d; "
            "assert 'torch' not in sys.modules, 'torch imported'; print('ok')")
    result = run_single(["-c", code], ROOT)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


# --- namespace hygiene ----------------------------------------------------------------------


def test_nothing_is_installed_without_the_compat_flag() -> None:
    code = textwrap.dedent("""
        import sys
        import paijob.runtime.apex_compat, paijob.runtime.precision
        import paijob.runtime.recipes.trainer, paijob.runtime.recipes.command
        from paijob.runtime.precision import resolve_policy
        resolve_policy("apex:O2", "cpu")
        leaked = [n for n in sys.modules if n == "apex" or n.startswith("apex.")]
        assert not leaked, leaked
        try:
            from apex import amp
        except ImportError:
            print("clean")
    """)
    result = run_single(["-c", code], ROOT)
    assert result.returncode == 0 and "clean" in result.stdout, result.stderr


def test_install_and_uninstall_in_process() -> None:
    assert apex_compat.install()
    try:
        import apex
        from apex import amp
        from apex.parallel import DistributedDataParallel, convert_syncbn_model  # noqa: F401

        assert apex.__paijob_shim__ and amp.__paijob_shim__
        with pytest.raises(ImportError, match="not provided"):
            from apex import contrib  # noqa: F401
    finally:
        apex_compat.uninstall()
    assert not [n for n in sys.modules if n == "apex" or n.startswith("apex.")]


# --- amp semantics ------------------------------------------------------------------------


@pytest.fixture
def amp_module():
    apex_compat.install()
    from apex import amp

    yield amp
    apex_compat.uninstall()


def test_initialize_returns_what_it_was_given(amp_module) -> None:
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    m, o = amp_module.initialize(model, optimizer, opt_level="O1", verbosity=0)
    assert m is model and o is optimizer
    models = amp_module.initialize([model], opt_level="O0", verbosity=0)
    assert models == [model]
    assert model(torch.randn(3, 4)).dtype == torch.float32  # autocast outputs come back fp32


def test_job_precision_overrides_the_scripts_opt_level(amp_module, monkeypatch: pytest.MonkeyPatch) -> None:
    from paijob.runtime.apex_compat import amp as shim

    monkeypatch.setenv("PAIJOB_PRECISION", "O0")
    model = torch.nn.Linear(4, 2)
    amp_module.initialize(model, torch.optim.SGD(model.parameters(), lr=0.1), opt_level="O2", verbosity=0)
    assert shim._amp_state.policy is not None and shim._amp_state.policy.compute == "fp32"


def test_opt_level_written_with_a_zero_gets_the_hint(amp_module) -> None:
    from paijob.runtime.precision import PrecisionError

    model = torch.nn.Linear(4, 2)
    with pytest.raises(PrecisionError, match="letter O"):
        amp_module.initialize(model, opt_level="02")


def test_scale_loss_static_scale_unscales_and_skips_overflow(amp_module) -> None:
    # On CPU fp16 becomes bf16 without scaling; force the scaler path as on a GPU.
    from paijob.runtime.apex_compat import amp as shim
    from paijob.runtime.precision import LossScaler

    model = torch.nn.Linear(2, 1, bias=False)
    torch.nn.init.ones_(model.weight)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    amp_module.initialize(model, optimizer, opt_level="O0", verbosity=0)
    shim._amp_state.loss_scalers = [LossScaler(64.0)]
    x = torch.ones(1, 2)
    with amp_module.scale_loss(model(x).sum(), optimizer) as scaled:
        assert float(scaled.detach()) == 2.0 * 64
        scaled.backward()
    assert torch.equal(model.weight.grad, torch.ones(1, 2))  # unscaled on exit, as apex
    # accumulation: a second block adds its unscaled gradient to the first
    with amp_module.scale_loss(model(x).sum(), optimizer) as scaled:
        scaled.backward()
    assert torch.equal(model.weight.grad, torch.full((1, 2), 2.0))
    optimizer.step()
    assert torch.equal(model.weight.detach(), torch.full((1, 2), -1.0))
    optimizer.zero_grad()
    with amp_module.scale_loss(model(x).sum() * float("inf"), optimizer) as scaled:
        scaled.backward()
    optimizer.step()  # skipped: overflow
    assert torch.equal(model.weight.detach(), torch.full((1, 2), -1.0))
    assert amp_module.state_dict() == {"loss_scaler0": {"loss_scale": 64.0, "unskipped": 0}}
    assert list(amp_module.master_params(optimizer)) == [model.weight]


# --- whole scripts --------------------------------------------------------------------------


def _run_in_process(argv: list[str], capsys: pytest.CaptureFixture[str], compat: bool) -> str:
    import runpy

    from paijob.runtime.apex_compat.__main__ import main

    saved_argv, saved_path = list(sys.argv), list(sys.path)
    try:
        if compat:
            assert main(argv) == 0
        else:
            sys.argv = list(argv)
            runpy.run_path(argv[0], run_name="__main__")
    finally:
        apex_compat.uninstall()
        sys.argv, sys.path[:] = saved_argv, saved_path
    return capsys.readouterr().out


def test_tutorial_script_trains_under_compat_like_the_native_policy(capsys: pytest.CaptureFixture[str]) -> None:
    apex_out = _run_in_process([str(SCRIPT), "--opt-level", "O1"], capsys, compat=True)
    native_out = _run_in_process([str(SCRIPT), "--mode", "native", "--opt-level", "O1"], capsys, compat=False)
    apex_losses, native_losses = losses(apex_out), losses(native_out)
    assert len(apex_losses) == len(native_losses) == 6
    assert apex_losses[-1] < apex_losses[0]  # it learns
    for a, b in zip(apex_losses, native_losses, strict=False):
        assert abs(a - b) <= 2e-2 * max(1.0, abs(b))  # bf16 tolerance
    assert not [n for n in sys.modules if n == "apex" or n.startswith("apex.")]


def test_script_without_compat_fails_to_import_apex(tmp_path: Path) -> None:
    script = tmp_path / "legacy.py"
    script.write_text("from apex import amp\n")
    result = run_single([str(script)], tmp_path)
    assert result.returncode != 0 and "apex" in result.stderr


def test_apex_ddp_two_ranks_under_the_compat_runner_keeps_replicas_equal(tmp_path: Path) -> None:
    compat = run_ranks(["-m", "paijob.runtime.apex_compat", str(SCRIPT), "--opt-level", "O2",
                        "--steps", "4"], 2, tmp_path)
    for result in compat:
        assert result.returncode == 0, result.stderr
    assert len(set(digests(compat[0].stdout) + digests(compat[1].stdout))) == 1
    rank0 = losses(compat[0].stdout)
    assert len(rank0) == 4 and rank0[-1] < rank0[0]


def test_processes_the_script_starts_also_see_the_shim(tmp_path: Path) -> None:
    script = tmp_path / "spawner.py"
    script.write_text(textwrap.dedent("""
        import subprocess, sys
        from apex import amp  # noqa: F401
        out = subprocess.run([sys.executable, "-c", "import apex; print(apex.__paijob_shim__)"],
                             capture_output=True, text=True)
        print("CHILD", out.stdout.strip(), out.stderr[-300:])
    """))
    result = run_single(["-m", "paijob.runtime.apex_compat", str(script)], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "CHILD True" in result.stdout


def test_runner_runs_modules_and_reports_missing_scripts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from paijob.runtime.apex_compat.__main__ import main

    package = tmp_path / "legacy_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(
        "import sys\nfrom apex import amp\nprint('ARGV', sys.argv[1:], amp.__paijob_shim__)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = list(sys.argv)
    try:
        assert main(["-m", "legacy_pkg.train", "--epochs", "1"]) == 0
    finally:
        apex_compat.uninstall()
        sys.argv = saved
    assert "ARGV ['--epochs', '1'] True" in capsys.readouterr().out
    assert main([str(tmp_path / "nope.py")]) == 2
    assert "not found" in capsys.readouterr().err
