"""The built-in recipes: learning, DDP consistency, checkpoints and exact resume, data formats."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from training_helpers import ROOT, TINY, assert_all_ranks_succeeded, base_env, run_ranks, summary_of

from paijob.runtime.recipes import checkpoint as ckpt
from paijob.runtime.recipes.cli import main
from paijob.runtime.recipes.data import (
    SyntheticImages,
    load_cifar10,
    read_cifar_batch,
    write_cifar_batch,
)
from paijob.runtime.recipes.engine import step_decay_with_warmup

pytestmark = pytest.mark.usefixtures("clean_torch_state")
HAS_TORCHVISION = importlib.util.find_spec("torchvision") is not None


def run_recipe(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(args)
    out = capsys.readouterr().out
    return code, summary_of(out)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "O1"])
def test_loss_decreases_on_synthetic_data_for_each_policy(precision: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, summary = run_recipe(["cifar10", "--epochs", "3", "--precision", precision,
                                "--output-dir", str(tmp_path), *TINY], capsys)
    assert code == 0
    losses = [epoch["train_loss"] for epoch in summary["history"]]
    assert losses[-1] < losses[0], losses
    assert summary["precision"] == precision and summary["epochs"] == 3
    assert summary["images_per_sec"] > 0 and summary["world_size"] == 1


def test_summary_is_the_last_line_and_written_to_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "s" / "summary.json"
    code, summary = run_recipe(["cifar10", "--epochs", "1", "--output-dir", str(tmp_path / "o"),
                                "--summary-json", str(target), "--steps-per-epoch", "2", *TINY], capsys)
    assert code == 0
    assert json.loads(target.read_text()) == summary
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["param_digest"] == summary["param_digest"]
    for key in ("epochs", "final", "images_per_sec", "wall_time_s", "precision", "world_size"):
        assert key in summary
    assert set(summary["final"]) >= {"train_loss", "train_top1", "eval_loss", "eval_top1"}


def test_steady_rate_leaves_out_each_epochs_first_two_steps(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The benchmark's headline number: absent when an epoch has no step after the first two."""
    _, short = run_recipe(["cifar10", "--epochs", "1", "--steps-per-epoch", "2",
                           "--output-dir", str(tmp_path / "short"), *TINY], capsys)
    assert short["steady_images_per_sec"] is None and short["images_per_sec"] > 0
    _, longer = run_recipe(["cifar10", "--epochs", "2", "--steps-per-epoch", "4",
                            "--output-dir", str(tmp_path / "long"), *TINY], capsys)
    # 2 epochs x (4 - 2) steps x 32 images, over less time than the whole loop took.
    steady_seconds = 2 * 2 * 32 / longer["steady_images_per_sec"]
    assert 0 < steady_seconds < longer["train_time_s"]


def test_precision_defaults_to_env(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAIJOB_PRECISION", "bf16")
    _, summary = run_recipe(["cifar10", "--epochs", "1", "--steps-per-epoch", "1",
                             "--output-dir", str(tmp_path), *TINY], capsys)
    assert summary["precision"] == "bf16"


def test_ddp_two_ranks_keep_parameters_bitwise_equal(tmp_path: Path) -> None:
    results = run_ranks(["-m", "paijob.runtime.recipes", "cifar10", "--arch", "tinynet", "--epochs", "1",
                         "--steps-per-epoch", "3", "--output-dir", str(tmp_path), *TINY], 2, ROOT)
    assert_all_ranks_succeeded(results)
    summary = summary_of(results[0].stdout)
    assert summary["world_size"] == 2 and summary["replicas_in_sync"] is True
    assert summary["global_batch_size"] == 64
    assert "PAIJOB_SUMMARY" not in results[1].stdout  # rank 0 alone reports
    assert summary["final"]["eval_samples"] == 64  # the whole test split, counted once


def test_recipe_process_ends_with_mains_code_and_flushed_output() -> None:
    """The entry point skips finalisation (gloo threads outlive DDP): nothing printed may be lost."""
    script = ("import sys\n"
              "from paijob.runtime.recipes import cli\n"
              "def fake_main(argv=None):\n"
              "    print('unflushed summary', end='')\n"
              "    sys.stderr.write('unflushed log')\n"
              "    return 3\n"
              "cli.main = fake_main\n"
              "cli.main_and_exit()\n")
    env = {k: v for k, v in base_env().items() if k != "PYTHONUNBUFFERED"}  # pipes buffer, as in a job
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    assert result.stdout == "unflushed summary" and result.stderr == "unflushed log"


@pytest.fixture
def one_thread() -> Any:
    """Bitwise comparisons need the same intra-op thread count in every run (subprocesses use 1)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _deterministic(out: Path, epochs: int = 3) -> list[str]:
    return ["cifar10", "--epochs", str(epochs), "--deterministic", "--seed", "3",
            "--output-dir", str(out), "--steps-per-epoch", "4", *TINY]


def test_resume_after_a_kill_gives_the_same_final_weights(tmp_path: Path, one_thread: None,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess
    import sys

    _, reference = run_recipe(_deterministic(tmp_path / "ref"), capsys)
    killed = subprocess.run([sys.executable, "-m", "paijob.runtime.recipes", *_deterministic(tmp_path / "run")],
                            cwd=ROOT, env=base_env(PAIJOB_FAULT_AT="1:2"), capture_output=True, text=True,
                            timeout=120)
    assert killed.returncode == 137, killed.stderr[-2000:]
    names = [ref.path.name for ref in ckpt.list_checkpoints(tmp_path / "run" / "checkpoints")]
    assert names == ["ckpt-e0001-s000000.pt"]  # killed during epoch 1: only epoch 0 was saved
    code, resumed = run_recipe(_deterministic(tmp_path / "run"), capsys)
    assert code == 0 and resumed["resumed_from"].endswith("ckpt-e0001-s000000.pt")
    assert resumed["param_digest"] == reference["param_digest"]
    assert [h["train_loss"] for h in resumed["history"]] == [h["train_loss"] for h in reference["history"]]


def test_sigterm_saves_mid_epoch_and_resume_is_exact(tmp_path: Path, one_thread: None,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _, reference = run_recipe(_deterministic(tmp_path / "ref", epochs=2), capsys)
    monkeypatch.setenv("PAIJOB_FAULT_AT", "1:1:term")
    code, stopped = run_recipe(_deterministic(tmp_path / "run", epochs=2), capsys)
    assert code == 143 and stopped["status"] == "preempted"
    assert stopped["checkpoint"].endswith("ckpt-e0001-s000002.pt")
    newest = ckpt.list_checkpoints(tmp_path / "run" / "checkpoints")[-1]
    assert (newest.epoch, newest.step) == (1, 2)
    monkeypatch.delenv("PAIJOB_FAULT_AT")
    code, resumed = run_recipe(_deterministic(tmp_path / "run", epochs=2), capsys)
    assert code == 0 and resumed["param_digest"] == reference["param_digest"]


def test_truncated_newest_checkpoint_falls_back_to_the_previous(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str],
                                                               caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "run"
    run_recipe(["cifar10", "--epochs", "2", "--steps-per-epoch", "2", "--output-dir", str(out), *TINY], capsys)
    refs = ckpt.list_checkpoints(out / "checkpoints")
    assert [(r.epoch, r.step) for r in refs] == [(1, 0), (2, 0)]
    data = refs[-1].path.read_bytes()
    refs[-1].path.write_bytes(data[: len(data) // 2])
    with caplog.at_level("WARNING"):
        found = ckpt.load_newest(out / "checkpoints")
    assert found is not None and found[0] == refs[0]
    assert any("skipping unusable checkpoint" in r.message for r in caplog.records)
    # without the checksum sidecar the truncated zip is still detected by loading
    refs[-1].path.with_name(refs[-1].path.name + ".sha256").unlink()
    assert ckpt.load_newest(out / "checkpoints")[0] == refs[0]  # type: ignore[index]
    code, resumed = run_recipe(["cifar10", "--epochs", "3", "--steps-per-epoch", "2",
                                "--output-dir", str(out), *TINY], capsys)
    assert code == 0 and resumed["resumed_from"].endswith("ckpt-e0001-s000000.pt")
    assert resumed["epochs"] == 3


def test_checkpoints_rotate_and_leave_no_temporary_files(tmp_path: Path) -> None:
    for epoch in range(5):
        ckpt.save_checkpoint(tmp_path, epoch, 0, {"model": {"w": torch.ones(2) * epoch}}, keep=3)
    assert [r.epoch for r in ckpt.list_checkpoints(tmp_path)] == [2, 3, 4]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    assert torch.equal(torch.load(tmp_path / "ckpt-e0004-s000000.pt")["model"]["w"], torch.full((2,), 4.0))


def test_failed_write_keeps_the_previous_checkpoint_loadable(tmp_path: Path) -> None:
    ckpt.save_checkpoint(tmp_path, 1, 0, {"model": {"w": torch.ones(1)}})

    class Boom:
        def __reduce__(self) -> Any:
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        ckpt.save_checkpoint(tmp_path, 2, 0, {"model": {"w": Boom()}})
    found = ckpt.load_newest(tmp_path)
    assert found is not None and found[0].epoch == 1
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []


def test_synthetic_data_is_deterministic_and_rank_independent() -> None:
    a = SyntheticImages(100, 10, 32, seed=5, split="train")
    b = SyntheticImages(100, 10, 32, seed=5, split="train")
    index = torch.tensor([3, 99, 0])
    assert torch.equal(a.get_batch(index)[0], b.get_batch(index)[0])
    assert not torch.equal(a.get_batch(index)[0], SyntheticImages(100, 10, 32, 6, "train").get_batch(index)[0])


def _write_fake_cifar(root: Path, per_file: int = 16) -> None:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    gen = torch.Generator().manual_seed(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        labels = torch.randint(0, 10, (per_file,), generator=gen)
        images = torch.randint(0, 256, (per_file, 3, 32, 32), generator=gen, dtype=torch.uint8)
        write_cifar_batch(folder / name, images, labels.tolist())


def test_real_format_cifar10_pickles_are_read_without_numpy(tmp_path: Path) -> None:
    images = torch.arange(2 * 3072, dtype=torch.int64).remainder(256).to(torch.uint8).reshape(2, 3, 32, 32)
    write_cifar_batch(tmp_path / "batch", images, [7, 3])
    read_images, labels = read_cifar_batch(tmp_path / "batch")
    assert torch.equal(read_images, images) and labels.tolist() == [7, 3]
    _write_fake_cifar(tmp_path / "c")
    train_set, test_set = load_cifar10(tmp_path / "c")
    assert (len(train_set), len(test_set)) == (80, 16)


def test_restricted_unpickler_refuses_arbitrary_globals(tmp_path: Path) -> None:
    import pickle

    from paijob.runtime.recipes.data import DataError

    (tmp_path / "evil").write_bytes(pickle.dumps({b"data": os.system}, protocol=2))
    with pytest.raises(DataError, match="not allowed"):
        read_cifar_batch(tmp_path / "evil")


def test_cifar10_recipe_trains_on_real_format_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_fake_cifar(tmp_path / "data")
    code, summary = run_recipe(["cifar10", "--data", str(tmp_path / "data"), "--epochs", "1",
                                "--batch-size", "16", "--output-dir", str(tmp_path / "o")], capsys)
    assert code == 0 and summary["final"]["eval_samples"] == 16 and summary["final"]["train_samples"] == 80


def test_missing_cifar_files_without_torchvision_is_a_clear_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchvision.datasets", None)  # import fails as if absent
    code = main(["cifar10", "--data", str(tmp_path), "--output-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "cifar-10-batches-py" in err and "torchvision" in err and "Traceback" not in err


def test_failed_cifar_download_is_a_clear_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """torchvision's downloader stands in for the network here: tests never leave 127.0.0.1."""
    attempts: list[str] = []

    class UnreachableCifar10:
        def __init__(self, root: str, train: bool, download: bool) -> None:
            attempts.append(root)
            raise OSError("<urlopen error [Errno -2] Name or service not known>")

    fake = types.ModuleType("torchvision.datasets")
    fake.CIFAR10 = UnreachableCifar10  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torchvision.datasets", fake)
    code = main(["cifar10", "--data", str(tmp_path), "--output-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert attempts == [str(tmp_path)]
    assert code == 2 and "downloading CIFAR-10" in err and "--data synthetic" in err


def test_imagenet_recipe_scales_lr_with_global_batch_and_warms_up(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, summary = run_recipe(["imagenet", "--arch", "tinynet", "--image-size", "32", "--num-classes", "10",
                                "--epochs", "1", "--steps-per-epoch", "2", "--lr", "0.1",
                                "--output-dir", str(tmp_path), *TINY], capsys)
    assert code == 0
    base = 0.1 * 32 / 256
    assert summary["history"][0]["lr"] == pytest.approx(base * 2 / (5 * 2))


def test_step_decay_schedule_matches_the_tutorial() -> None:
    assert step_decay_with_warmup(1.0, 0, 0, 10) == pytest.approx(1 / 50)
    assert step_decay_with_warmup(1.0, 4, 9, 10) == pytest.approx(1.0)
    assert step_decay_with_warmup(1.0, 10, 0, 10) == 1.0
    assert step_decay_with_warmup(1.0, 30, 0, 10) == pytest.approx(0.1)
    assert step_decay_with_warmup(1.0, 80, 0, 10) == pytest.approx(0.001)


@pytest.mark.skipif(HAS_TORCHVISION, reason="checks the error shown when torchvision is absent")
@pytest.mark.parametrize("args", [["cifar10", "--arch", "resnet18"], ["imagenet"]])
def test_torchvision_architectures_need_torchvision(args: list[str], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*args, "--output-dir", str(tmp_path)])
    assert code == 2 and "torchvision" in capsys.readouterr().err


@pytest.mark.skipif(not HAS_TORCHVISION, reason="torchvision not installed")
def test_resnet18_on_cifar10_with_torchvision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, summary = run_recipe(["cifar10", "--arch", "resnet18", "--epochs", "1", "--steps-per-epoch", "1",
                                "--output-dir", str(tmp_path), *TINY], capsys)
    assert code == 0 and summary["arch"] == "resnet18"


FAKE_REAL_APEX = """
import contextlib
calls = []

def initialize(model, optimizer, opt_level="O1", **kwargs):
    calls.append(("initialize", opt_level))
    return model, optimizer

@contextlib.contextmanager
def scale_loss(loss, optimizer):
    calls.append(("scale_loss",))
    yield loss * 4.0
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                p.grad.div_(4.0)

def state_dict():
    return {"loss_scaler0": {"loss_scale": 4.0, "unskipped": 0}}

def load_state_dict(state):
    calls.append(("load_state_dict",))
"""


def test_apex_prefix_uses_real_apex_when_it_imports(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    package = tmp_path / "site" / "apex"
    (package / "amp").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "amp" / "__init__.py").write_text(FAKE_REAL_APEX)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    try:
        code, summary = run_recipe(["cifar10", "--epochs", "2", "--precision", "apex:O1",
                                    "--output-dir", str(tmp_path / "o"), *TINY], capsys)
        fake = sys.modules["apex.amp"]
        assert code == 0 and "NVIDIA apex.amp" in summary["precision_detail"]
        assert fake.calls[0] == ("initialize", "O1") and ("scale_loss",) in fake.calls  # type: ignore[attr-defined]
        losses = [h["train_loss"] for h in summary["history"]]
        assert losses[-1] < losses[0]
    finally:
        for name in [n for n in sys.modules if n == "apex" or n.startswith("apex.")]:
            del sys.modules[name]


def test_crop_flip_augmentation_is_a_pure_function_of_the_seed() -> None:
    from paijob.runtime.recipes.data import augment_crop_flip

    images = torch.randint(1, 256, (8, 3, 32, 32), dtype=torch.uint8)
    a = augment_crop_flip(images, torch.Generator().manual_seed(9), 4, True)
    b = augment_crop_flip(images, torch.Generator().manual_seed(9), 4, True)
    assert a.shape == images.shape and torch.equal(a, b)
    unshifted = augment_crop_flip(images, torch.Generator().manual_seed(9), 0, False)
    assert torch.equal(unshifted, images)
