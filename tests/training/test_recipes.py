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
from paijob.runtime.recipes.command import main
from paijob.runtime.recipes.data import (
    SyntheticImages,
    load_cifar10,
    read_cifar_batch,
    write_cifar_batch,
)
from paijob.runtime.recipes.schedules import step_decay_with_warmup

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


def test_summary_goes_to_the_output_folder_and_the_console_gets_one_short_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "s" / "summary.json"
    code = main(["cifar10", "--epochs", "1", "--output-dir", str(tmp_path / "o"),
                 "--summary-json", str(target), "--steps-per-epoch", "2", *TINY])
    assert code == 0
    out = capsys.readouterr().out
    written = tmp_path / "o" / "summary.json"
    summary = json.loads(written.read_text())
    last = out.strip().splitlines()[-1]
    assert last.startswith("paijob: summary completed 1/1 epochs | eval loss ")
    assert last.endswith(f" img/s | {summary['wall_time_s']:.1f} s | {written}")
    assert len(last) < 120 + len(str(written)) and "{" not in out  # no JSON on the console
    assert json.loads(target.read_text()) == summary
    for key in ("epochs", "final", "images_per_sec", "wall_time_s", "precision", "world_size", "history"):
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
    assert [times["rank"] for times in summary["step_time_s"]] == [0, 1]
    for times in summary["step_time_s"]:
        assert times["steps"] == 3 and 0 < times["p50"] <= times["p90"] <= times["p99"] <= times["max"]
    assert summary["slow_rank"] is None  # run without paijob-runtime's hang watch: no doctor, no verdict
    assert "paijob: summary" not in results[1].stdout  # rank 0 alone reports
    assert summary["final"]["eval_samples"] == 64  # the whole test split, counted once


def test_recipe_process_ends_with_mains_code_and_flushed_output() -> None:
    """The entry point skips finalisation (gloo threads outlive DDP): nothing printed may be lost."""
    script = ("import sys\n"
              "from paijob.runtime.recipes import command\n"
              "def fake_main(argv=None):\n"
              "    print('unflushed summary', end='')\n"
              "    sys.stderr.write('unflushed log')\n"
              "    return 3\n"
              "command.main = fake_main\n"
              "command.main_and_exit()\n")
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


# --- issue 13: a training step that never waits for the device -------------------------------

class _SyncCounter:
    """Counts, on the main thread, the tensor calls that make the host wait for the device.

    On a GPU each of these blocks until the queued kernels finish (``item``, ``cpu``,
    ``tolist``, ``bool``/``float``/``int`` of a tensor, ``nonzero``) or hides a ``nonzero``
    (indexing with a boolean mask). On the CPU nothing waits, but the calls are the same, so
    counting them here pins what ``torch.cuda.set_sync_debug_mode("error")`` checks on a GPU.
    """

    METHODS = ("item", "cpu", "tolist", "numpy", "nonzero", "__bool__", "__float__", "__int__")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import threading

        self.main = threading.get_ident()
        self.active = False
        self.calls: list[str] = []
        for name in self.METHODS:
            monkeypatch.setattr(torch.Tensor, name, self._counting(name, getattr(torch.Tensor, name)))
        for name in ("__getitem__", "__setitem__"):
            monkeypatch.setattr(torch.Tensor, name, self._mask_counting(name, getattr(torch.Tensor, name)))

    def _record(self, name: str) -> None:
        import threading

        if self.active and threading.get_ident() == self.main:
            self.calls.append(name)

    def _counting(self, name: str, original: Any) -> Any:
        def wrapper(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            self._record(name)
            return original(tensor, *args, **kwargs)
        return wrapper

    def _mask_counting(self, name: str, original: Any) -> Any:
        def is_mask(index: Any) -> bool:
            parts = index if isinstance(index, tuple) else (index,)
            return any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts)

        def wrapper(tensor: torch.Tensor, index: Any, *args: Any) -> Any:
            if is_mask(index):
                self._record(f"{name}[bool mask]")
            return original(tensor, index, *args)
        return wrapper


def _count_syncs_in_steps(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, extra: list[str]) -> tuple[int, list[str]]:
    """Run cifar10 in-process; count sync calls from each step's start until the epoch's log line."""
    from paijob.runtime.recipes import command
    from paijob.runtime.recipes.loglines import Progress

    counter = _SyncCounter(monkeypatch)
    steps = {"n": 0}
    real_recipe = command._cifar10_recipe

    def counted_recipe() -> Any:
        recipe = real_recipe()
        lr_at = recipe.lr_at

        def step_starts(*args: Any) -> float:
            counter.active = True  # a training step begins
            steps["n"] += 1
            return lr_at(*args)

        recipe.lr_at = step_starts
        return recipe

    real_log = Progress.log_step

    def log_point(self: Any, *args: Any, **kwargs: Any) -> None:
        counter.active = False  # the log interval's one read of the loss
        real_log(self, *args, **kwargs)

    monkeypatch.setattr(command, "_cifar10_recipe", counted_recipe)
    monkeypatch.setattr(Progress, "log_step", log_point)
    code = main(["cifar10", "--epochs", "2", "--steps-per-epoch", "5", "--output-dir", str(tmp_path),
                 "--no-resume", *TINY, *extra])
    assert code == 0
    return steps["n"], counter.calls


@pytest.mark.parametrize("placement", ["host", "device"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_training_steps_make_no_call_that_waits_for_the_device(
        placement: str, precision: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    steps, calls = _count_syncs_in_steps(monkeypatch, tmp_path, ["--data-placement", placement,
                                                                 "--precision", precision])
    assert steps == 10
    assert calls == []


def test_sync_counter_sees_a_boolean_mask_flip(monkeypatch: pytest.MonkeyPatch) -> None:
    """The counter catches what the old step did (``images[mask] = images[mask].flip(3)``)."""
    counter = _SyncCounter(monkeypatch)
    counter.active = True
    images = torch.zeros(4, 3, 8, 8)
    mask = torch.tensor([True, False, True, False])
    images[mask] = images[mask].flip(3)
    float(images.sum())
    assert counter.calls == ["__getitem__[bool mask]", "__setitem__[bool mask]", "__float__"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_training_steps_on_a_gpu_pass_sync_debug_mode_error(precision: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from paijob.runtime.recipes import command
    from paijob.runtime.recipes.loglines import Progress

    real_recipe = command._cifar10_recipe

    def strict_recipe() -> Any:
        recipe = real_recipe()
        lr_at = recipe.lr_at

        def step_starts(*args: Any) -> float:
            torch.cuda.set_sync_debug_mode("error")
            return lr_at(*args)

        recipe.lr_at = step_starts
        return recipe

    real_log = Progress.log_step

    def log_point(self: Any, *args: Any, **kwargs: Any) -> None:
        torch.cuda.set_sync_debug_mode("default")
        real_log(self, *args, **kwargs)

    monkeypatch.setattr(command, "_cifar10_recipe", strict_recipe)
    monkeypatch.setattr(Progress, "log_step", log_point)
    try:
        for placement in ("host", "device"):
            code = main(["cifar10", "--epochs", "1", "--steps-per-epoch", "5", "--precision", precision,
                         "--data-placement", placement, "--output-dir", str(tmp_path / placement),
                         "--no-resume", *TINY])
            assert code == 0
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("threaded", [True, False])
def test_prefetcher_keeps_order_and_hands_over_producer_errors(threaded: bool) -> None:
    from paijob.runtime.recipes.prefetch import Prefetcher

    cpu = torch.device("cpu")
    produced = [(torch.full((2,), float(i)),) for i in range(5)]
    got = [t[0][0].item() for t in Prefetcher(lambda step, slot: produced[step], 5, cpu, depth=2,
                                              threaded=threaded)]
    assert got == [0.0, 1.0, 2.0, 3.0, 4.0]

    def failing(step: int, slot: Any) -> Any:
        if step == 2:
            raise ValueError("bad batch 2")
        return produced[step]

    with pytest.raises(ValueError, match="bad batch 2"):
        list(Prefetcher(failing, 5, cpu, threaded=threaded))


def test_closing_the_prefetcher_early_stops_its_thread() -> None:
    from paijob.runtime.recipes.prefetch import Prefetcher

    prefetcher = Prefetcher(lambda step, slot: (torch.zeros(1),), 1000, torch.device("cpu"), depth=2,
                            threaded=True)
    iterator = iter(prefetcher)
    next(iterator)
    iterator.close()  # type: ignore[attr-defined]
    assert not prefetcher.thread.is_alive()


def test_eval_plan_has_one_shape_counts_each_sample_once_and_equal_steps_per_rank() -> None:
    from paijob.runtime.recipes.data import padded_eval_plan

    plans = [padded_eval_plan(65, rank, 2, 32) for rank in range(2)]
    assert [tuple(p.indices.shape) for p in plans] == [(2, 32), (2, 32)]  # rank 1 has 32: one padded batch
    counted = sorted(int(i) for p in plans for i, v in zip(p.indices.flatten(), p.valid.flatten(), strict=True)
                     if v > 0)
    assert counted == list(range(65))


def test_flip_without_a_mask_matches_the_masked_flip() -> None:
    from paijob.runtime.recipes.data import apply_crop_flip, draw_crop_flip

    images = torch.randint(0, 256, (8, 3, 6, 6), dtype=torch.uint8)
    oy, ox, flip = draw_crop_flip(8, torch.Generator().manual_seed(1), 0)
    expected = images.clone()
    expected[flip] = expected[flip].flip(3)
    assert flip.any() and not flip.all()
    assert torch.equal(apply_crop_flip(images, oy, ox, flip, 0), expected)


# --- issue 13: evaluation measures the model that was trained ---------------------------------

def test_evaluation_on_the_training_distribution_matches_the_training_loss(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 13 saw eval loss 113-586 beside train loss 7.07 after one 4-step ImageNet-recipe epoch.

    ResNet-50's layout, 4 steps at the issue's effective learning rate: BatchNorm's running
    averages are still 66 % their initial values and evaluation with them blew the loss up
    (342 here before the fix). Recalibrated, eval loss is within 3-10 % of the train loss
    (torch 2.13 / 2.4); the rest is the weights moving during the epoch the train loss averages.
    """
    code, summary = run_recipe(["imagenet", "--arch", "tinyresnet", "--image-size", "32", "--num-classes",
                                "1000", "--epochs", "1", "--lr", "0.8", "--batch-size", "32",
                                "--synthetic-size", "128", "--seed", "0", "--output-dir", str(tmp_path),
                                "--log-interval", "1000"], capsys)
    assert code == 0
    record = summary["history"][0]
    assert record["bn_recalibration_batches"] == 4
    assert record["eval_loss"] == pytest.approx(record["train_loss"], rel=0.25)


def test_batchnorm_statistics_are_recalibrated_only_while_young() -> None:
    from paijob.runtime.recipes import batchnorm
    from paijob.runtime.recipes.models import TinyNet

    model = TinyNet(10)
    assert batchnorm.needs_recalibration(model)
    for layer in model.modules():
        if isinstance(layer, torch.nn.BatchNorm2d):
            layer.num_batches_tracked.fill_(44)  # 0.9 ** 44 < 1 %
    assert not batchnorm.needs_recalibration(model)
    batches = [torch.randn(16, 3, 8, 8) * 3 + 2 for _ in range(3)]
    model.eval()
    assert batchnorm.recalibrate(model, batches) == 3
    first = model.features[1]
    assert not model.training and first.momentum == 0.1
    with torch.no_grad():
        expected = torch.stack([model.features[0](b).mean((0, 2, 3)) for b in batches]).mean(0)
    assert torch.allclose(first.running_mean, expected, atol=1e-5)


# --- issue 13: --compile compiles once --------------------------------------------------------

def test_compiled_model_compiles_in_the_first_epoch_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Training and evaluation graphs are made in epoch 1; later epochs reuse them (no recompile).

    The eager backend keeps the test fast: dynamo traces, guards and caches exactly as with
    inductor, which is what decides recompiles.
    """
    code, summary = run_recipe(["cifar10", "--compile", "--compile-backend", "eager", "--epochs", "3",
                                "--steps-per-epoch", "3", "--output-dir", str(tmp_path), *TINY], capsys)
    assert code == 0
    compiled = [h["graphs_compiled"] for h in summary["history"]]
    assert compiled[0] >= 2 and compiled[1:] == [0, 0], compiled


# --- issue 11 item 16: checkpoints left behind or half-broken ---------------------------------

def test_stale_temporary_checkpoint_files_are_removed(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "o" / "checkpoints"
    folder.mkdir(parents=True)
    stale = [folder / ".ckpt-e0001-s000000.pt.abc123.tmp", folder / ".ckpt-e0001-s000000.pt.sha256.x9.tmp"]
    for path in stale:
        path.write_bytes(b"half a write")
    unrelated = folder / "notes.tmp"
    unrelated.write_text("mine")
    with caplog.at_level("WARNING"):
        code, _ = run_recipe(["cifar10", "--epochs", "1", "--steps-per-epoch", "1",
                              "--output-dir", str(tmp_path / "o"), *TINY], capsys)
    assert code == 0
    assert not any(path.exists() for path in stale) and unrelated.exists()
    assert any("never finished" in r.message for r in caplog.records)
    (folder / ".ckpt-e0002-s000000.pt.zz.tmp").write_bytes(b"")
    ckpt.save_checkpoint(folder, 3, 0, {"model": {}})  # a successful save also sweeps
    assert [p.name for p in folder.iterdir() if p.name.endswith(".tmp")] == ["notes.tmp"]


@pytest.mark.parametrize("sidecar", [b"not-a-hash  twelve\n", b"\xff\xfe\x00garbage", b"", b"abc"])
def test_corrupt_sidecar_makes_resume_fall_back_with_a_warning(
        sidecar: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "run"
    run_recipe(["cifar10", "--epochs", "2", "--steps-per-epoch", "2", "--output-dir", str(out), *TINY], capsys)
    refs = ckpt.list_checkpoints(out / "checkpoints")
    refs[-1].path.with_name(refs[-1].path.name + ".sha256").write_bytes(sidecar)
    with caplog.at_level("WARNING"):
        code, resumed = run_recipe(["cifar10", "--epochs", "3", "--steps-per-epoch", "2",
                                    "--output-dir", str(out), *TINY], capsys)
    assert code == 0 and resumed["resumed_from"].endswith("ckpt-e0001-s000000.pt")
    assert any("skipping unusable checkpoint" in r.message and "sidecar" in r.message for r in caplog.records)


def test_corrupt_sidecar_on_the_only_checkpoint_starts_fresh(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "run"
    run_recipe(["cifar10", "--epochs", "1", "--steps-per-epoch", "1", "--output-dir", str(out), *TINY], capsys)
    (only,) = ckpt.list_checkpoints(out / "checkpoints")
    only.path.with_name(only.path.name + ".sha256").write_text("0" * 64 + "  NaN\n")
    with caplog.at_level("WARNING"):
        code, fresh = run_recipe(["cifar10", "--epochs", "1", "--steps-per-epoch", "1",
                                  "--output-dir", str(out), *TINY], capsys)
    assert code == 0 and fresh["resumed_from"] is None and fresh["epochs"] == 1
    assert any("skipping unusable checkpoint" in r.message for r in caplog.records)


# --- issue 13: image folders, GPU JPEG decoding ------------------------------------------------

def test_gpu_decode_without_cuda_or_torchvision_is_a_clear_error(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    for split in ("train", "val"):
        (tmp_path / "tree" / split / "a").mkdir(parents=True)
    code = main(["imagenet", "--arch", "tinynet", "--data", str(tmp_path / "tree"), "--decode", "gpu",
                 "--output-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err
    if torch.cuda.is_available() and HAS_TORCHVISION:
        pytest.skip("this machine can decode on the GPU")
    assert code == 2 and "--decode gpu needs" in err and "Traceback" not in err


def test_random_resized_crop_boxes_stay_inside_the_image() -> None:
    import random

    from paijob.runtime.recipes.data import GpuJpegDecoder

    decoder = GpuJpegDecoder(224, train=True)
    rng = random.Random(3)
    for height, width in ((375, 500), (500, 375), (10, 1000), (224, 224)):
        for _ in range(50):
            top, left, h, w = decoder._box(height, width, rng)
            assert 0 <= top and top + h <= height and 0 <= left and left + w <= width and h > 0 and w > 0


def test_prefetcher_runs_the_device_stage_in_its_thread_and_passes_lists_through() -> None:
    import threading

    from paijob.runtime.recipes.data import keep_list_collate
    from paijob.runtime.recipes.prefetch import Prefetcher

    encoded, labels = keep_list_collate([(torch.tensor([1, 2, 3], dtype=torch.uint8), 4),
                                         (torch.tensor([5], dtype=torch.uint8), 6)])
    threads = []

    def decode(step: int, moved: tuple[Any, ...]) -> tuple[torch.Tensor, ...]:
        threads.append(threading.get_ident())
        return (torch.stack([t.sum() for t in moved[0]]), moved[1])

    (out,) = list(Prefetcher(lambda step, slot: (encoded, labels), 1, torch.device("cpu"), on_device=decode,
                             threaded=True))
    assert out[0].tolist() == [6, 5] and out[1].tolist() == [4, 6]
    assert threads and threads[0] != threading.get_ident()


def test_ddp_knobs_keep_replicas_bitwise_equal(tmp_path: Path) -> None:
    """Small buckets, gradients as bucket views and a static graph change speed, never the result."""
    results = run_ranks(["-m", "paijob.runtime.recipes", "cifar10", "--arch", "tinynet", "--epochs", "1",
                         "--steps-per-epoch", "3", "--ddp-bucket-mb", "0.01", "--ddp-static-graph",
                         "--output-dir", str(tmp_path), *TINY], 2, ROOT)
    assert_all_ranks_succeeded(results)
    summary = summary_of(results[0].stdout)
    assert summary["replicas_in_sync"] is True and summary["config"]["ddp_static_graph"] is True


class _DecodedFolder:
    """Stands in for torchvision's ImageFolder (uint8 CHW image, label): the loader-worker path."""

    def __init__(self, size: int, seed: int) -> None:
        self.source = SyntheticImages(size, 10, 32, seed, "train")

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        images, labels = self.source.get_batch(torch.tensor([index]))
        return images[0], int(labels[0])


def test_image_folder_path_trains_and_evaluates_every_sample_once(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from paijob.runtime.recipes import command

    real_recipe = command._cifar10_recipe

    def folder_recipe() -> Any:
        recipe = real_recipe()
        recipe.load_data = lambda cfg, info: (_DecodedFolder(96, 0), _DecodedFolder(40, 1))
        return recipe

    monkeypatch.setattr(command, "_cifar10_recipe", folder_recipe)
    code, summary = run_recipe(["cifar10", "--epochs", "2", "--workers", "1", "--batch-size", "32",
                                "--output-dir", str(tmp_path), "--log-interval", "1000"], capsys)
    assert code == 0 and summary["data_placement"] == "loader"
    assert summary["final"]["train_samples"] == 96 and summary["final"]["eval_samples"] == 40


def test_step_times_give_nearest_rank_percentiles_and_skip_the_epoch_start() -> None:
    from paijob.runtime.recipes.meters import StepTimes

    times = StepTimes()
    times.mark(5.0)  # before begin: no step to time
    assert times.percentiles() == {"steps": 0}
    times.begin(10.0)
    now = 10.0
    for step in range(1, 101):
        now += step / 100
        times.mark(now)
    assert times.percentiles() == {"steps": 100, "p50": 0.5, "p90": 0.9, "p99": 0.99, "max": 1.0}
