"""``--data-placement`` does what it says, or refuses with a reason; the summary says where the data was."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from training_helpers import TINY

from paijob.runtime.recipes.command import main
from paijob.runtime.recipes.data import DataError, SyntheticImages
from paijob.runtime.recipes.feed import Feed

pytestmark = pytest.mark.usefixtures("clean_torch_state")


class PerBatchImages:
    """An in-memory source that makes its images per batch (as a large synthetic set does): no ``tensors``."""

    def __init__(self, size: int, seed: int) -> None:
        self.inner = SyntheticImages(size, 10, 32, seed, "train")

    def __len__(self) -> int:
        return len(self.inner)

    def get_batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inner.get_batch(indices)

    def tensors(self) -> None:
        return None


def _cfg(placement: str) -> Any:
    return SimpleNamespace(data_placement=placement, prefetch_depth=2, prefetch_factor=2, decode="cpu",
                           image_size=32)


def test_device_placement_keeps_a_per_batch_source_whole_on_the_device() -> None:
    train, test = PerBatchImages(300, 0), PerBatchImages(40, 1)
    feed = Feed(_cfg("device"), train, test, torch.device("cpu"), in_memory=True, workers=0)
    assert feed.placement == "device"
    images, labels = feed.resident["train"]
    expected = train.get_batch(torch.arange(300))
    assert torch.equal(images, expected[0]) and torch.equal(labels, expected[1])
    assert feed.resident["eval"][0].shape[0] == 40


def test_auto_on_a_cpu_leaves_a_per_batch_source_on_the_host() -> None:
    feed = Feed(_cfg("auto"), PerBatchImages(64, 0), PerBatchImages(16, 1), torch.device("cpu"),
                in_memory=True, workers=0)
    assert feed.placement == "host" and feed.resident == {}


def test_device_placement_that_cannot_fit_is_refused_with_the_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    from paijob.runtime.recipes import feed as feed_module

    monkeypatch.setattr(feed_module, "free_memory", lambda device: 1000)
    with pytest.raises(DataError, match=r"--data-placement device: the data set takes .* GiB free; use "
                                        r"--data-placement host"):
        Feed(_cfg("device"), PerBatchImages(64, 0), PerBatchImages(16, 1), torch.device("cpu"),
             in_memory=True, workers=0)


def test_device_placement_of_an_image_folder_is_refused() -> None:
    with pytest.raises(DataError, match="image folder is read and decoded by DataLoader workers"):
        Feed(_cfg("device"), None, None, torch.device("cpu"), in_memory=False, workers=0)


@pytest.mark.parametrize("placement", ["device", "host"])
def test_the_summary_reports_where_the_data_was(placement: str, tmp_path: Path) -> None:
    code = main(["cifar10", "--epochs", "1", "--steps-per-epoch", "2", "--data-placement", placement,
                 "--output-dir", str(tmp_path), *TINY])
    assert code == 0
    assert json.loads((tmp_path / "summary.json").read_text())["data_placement"] == placement


@pytest.mark.parametrize("kept_prototypes", [True, False])
def test_a_synthetic_set_made_on_the_device_is_the_one_made_per_batch(kept_prototypes: bool) -> None:
    source = SyntheticImages(300, 10, 32, 3, "train")
    source._cache = None  # as a set too large to keep: images made per batch
    if not kept_prototypes:
        source._prototypes = None  # as with many classes: prototypes interpolated per batch
    made = source.whole_on(torch.device("cpu"))
    expected = source.get_batch(torch.arange(300))
    assert torch.equal(made[0], expected[0]) and torch.equal(made[1], expected[1])
    feed = Feed(_cfg("device"), source, PerBatchImages(16, 1), torch.device("cpu"), in_memory=True, workers=0)
    assert torch.equal(feed.resident["train"][0], expected[0])
