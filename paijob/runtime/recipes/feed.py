"""Where a run's batches come from: device-resident tensors, prefetched pinned batches, or a DataLoader.

In-memory data (synthetic, CIFAR-10) lives on the device when it fits (``choose_placement``; a
source that makes its images per batch, as large synthetic sets do, is generated there once) and
is gathered there by index, or is gathered on the host and prefetched on a side stream; image
folders are read by DataLoader workers, their JPEGs decoded there or on the GPU. Either way a
step receives its batch on the device, prepared ahead (see ``prefetch``). ``placement`` is
where the data really is, and the run's summary reports it.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from paijob.runtime.recipes.data import (
    DataError,
    EvalPlan,
    FolderLoader,
    GpuJpegDecoder,
    TrainPlan,
    dataset_tensors,
    keep_list_collate,
)
from paijob.runtime.recipes.prefetch import Prefetcher, choose_placement, free_memory, resident


class FeedConfig(Protocol):
    """The settings a feed reads (``config.TrainConfig`` has them)."""

    data_placement: str
    prefetch_depth: int
    prefetch_factor: int
    decode: str
    image_size: int


def _nbytes(source: Any) -> int:
    """The bytes of an in-memory source's images and labels, kept whole or not."""
    whole = dataset_tensors(source)
    if whole is None:
        whole = source.get_batch(torch.zeros(1, dtype=torch.int64))
        return len(source) * sum(t[0].numel() * t.element_size() for t in whole)
    return sum(t.numel() * t.element_size() for t in whole)


def _check_fits(nbytes: int, device: torch.device) -> None:
    free = free_memory(device)
    if nbytes > 0.9 * free:
        raise DataError(f"--data-placement device: the data set takes {nbytes / 2**30:.1f} GiB, the {device.type} "
                        f"has {free / 2**30:.1f} GiB free; use --data-placement host (or auto), or a smaller "
                        "--synthetic-size")


def _whole_on(source: Any, device: torch.device, chunk: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole source on ``device``: its tensors, or (made per batch) generated once: on the device
    where the source can (``whole_on``), else on the host a chunk at a time."""
    whole = dataset_tensors(source)
    if whole is not None:
        return whole[0].to(device), whole[1].to(device)
    if hasattr(source, "whole_on"):
        made: tuple[torch.Tensor, torch.Tensor] = source.whole_on(device)
        return made
    size = len(source)
    first = source.get_batch(torch.zeros(1, dtype=torch.int64))
    images = torch.empty((size, *first[0].shape[1:]), dtype=first[0].dtype, device=device)
    labels = torch.empty((size, *first[1].shape[1:]), dtype=first[1].dtype, device=device)
    for start in range(0, size, chunk):
        index = torch.arange(start, min(start + chunk, size))
        batch_images, batch_labels = source.get_batch(index)
        images[start:start + len(index)].copy_(batch_images)
        labels[start:start + len(index)].copy_(batch_labels)
    return images, labels


def seed_for(*parts: int) -> int:
    """One 62-bit seed from integers (epoch, step, rank, ...): a pure function of them."""
    value = 0
    for part in parts:
        value = (value * 1_000_003 + int(part)) % (2**62)
    return value


class Feed:
    """Where this run's batches come from: device-resident, prefetched, or a DataLoader.

    ``train(plan)`` yields ``(images, labels, crop_y, crop_x, flip)`` on the device for in-memory
    data (augmented by the step) and ``(images, labels)`` for image folders (augmented by the
    workers); ``eval(plan)`` yields ``(images, labels, valid)``.
    """

    def __init__(self, cfg: FeedConfig, train_set: Any, test_set: Any, device: torch.device,
                 in_memory: bool, workers: int) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.depth = cfg.prefetch_depth
        self.train_set, self.test_set = train_set, test_set
        self.placement = "loader"
        self.resident: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.loaders: dict[str, FolderLoader] = {}
        self.decoders: dict[str, GpuJpegDecoder] = {}
        if in_memory:
            sources = {"train": train_set, "eval": test_set}
            nbytes = sum(_nbytes(source) for source in sources.values())
            kept = all(dataset_tensors(source) is not None for source in sources.values())
            self.placement = choose_placement(cfg.data_placement, nbytes, device, kept)
            if self.placement == "device":
                _check_fits(nbytes, device)
                self.resident = {name: _whole_on(source, device) for name, source in sources.items()}
        elif cfg.data_placement == "device":
            raise DataError("--data-placement device keeps in-memory data (synthetic, CIFAR-10) on the device; "
                            "an image folder is read and decoded by DataLoader workers: drop the option")
        elif cfg.decode == "gpu":
            self.placement = "loader, GPU decode"
            self.loaders = {"train": FolderLoader(train_set, workers, self.cuda, cfg.prefetch_factor,
                                                  keep_list_collate),
                            "eval": FolderLoader(test_set, workers, self.cuda, cfg.prefetch_factor,
                                                 keep_list_collate)}
            self.decoders = {"train": GpuJpegDecoder(cfg.image_size, train=True),
                             "eval": GpuJpegDecoder(cfg.image_size, train=False)}
        else:
            self.loaders = {"train": FolderLoader(train_set, workers, self.cuda, cfg.prefetch_factor),
                            "eval": FolderLoader(test_set, workers, self.cuda, cfg.prefetch_factor)}

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """A per-epoch plan to the device: one copy, before the steps (pinned, so asynchronous)."""
        if not self.cuda:
            return tensor
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def _gather(self, source: Any, index: torch.Tensor, slot: list[torch.Tensor] | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        whole = dataset_tensors(source)
        if slot is None:
            return source.get_batch(index) if whole is None else (
                whole[0].index_select(0, index), whole[1].index_select(0, index))
        if whole is None:
            images, labels = source.get_batch(index)
            slot[0].copy_(images)
            slot[1].copy_(labels)
        else:
            torch.index_select(whole[0], 0, index, out=slot[0])
            torch.index_select(whole[1], 0, index, out=slot[1])
        return slot[0], slot[1]

    def _slot_specs(self, source: Any, batch: int, extras: list[torch.Tensor]
                    ) -> list[tuple[Any, torch.dtype]] | None:
        if not self.cuda:
            return None
        images, labels = source.get_batch(torch.zeros(1, dtype=torch.int64))
        return ([((batch, *images.shape[1:]), images.dtype), ((batch,), labels.dtype)]
                + [((batch,), extra.dtype) for extra in extras])

    def _in_memory(self, name: str, index_rows: torch.Tensor, extras: list[torch.Tensor]) -> Any:
        steps = int(index_rows.shape[0])
        if steps == 0:
            return iter(())
        if name in self.resident:
            return resident(self.resident[name], self._to_device(index_rows),
                            [self._to_device(extra) for extra in extras])
        source = self.train_set if name == "train" else self.test_set

        def produce(step: int, slot: list[torch.Tensor] | None) -> list[torch.Tensor]:
            images, labels = self._gather(source, index_rows[step], slot)
            rows = [extra[step] for extra in extras]
            if slot is None:
                return [images, labels, *rows]
            for target, row in zip(slot[2:], rows, strict=True):
                target.copy_(row)
            return slot

        specs = self._slot_specs(source, int(index_rows.shape[1]), extras)
        return iter(Prefetcher(produce, steps, self.device, self.depth, specs))

    def _from_loader(self, name: str, index_rows: torch.Tensor, extras: list[torch.Tensor]) -> Any:
        batches = list(index_rows)
        loader = self.loaders[name].batches(batches)

        def produce(step: int, slot: list[torch.Tensor] | None) -> list[torch.Tensor]:
            images, labels = next(loader)
            return [images, labels, *(extra[step] for extra in extras)]

        decoder = self.decoders.get(name)

        def decode(step: int, moved: tuple[Any, ...]) -> tuple[torch.Tensor, ...]:
            assert decoder is not None
            seed = seed_for(*(int(i) for i in index_rows[step][:4]), step)  # a pure function of the batch
            return (decoder(moved[0], self.device, seed), *moved[1:])

        return iter(Prefetcher(produce, len(batches), self.device, self.depth,
                               on_device=decode if decoder is not None else None))

    def train(self, plan: TrainPlan) -> Any:
        if self.loaders:
            return self._from_loader("train", plan.indices, [])
        return self._in_memory("train", plan.indices, [plan.crop_y, plan.crop_x, plan.flip])

    def eval(self, plan: EvalPlan) -> Any:
        if self.loaders:
            return self._from_loader("eval", plan.indices, [plan.valid])
        return self._in_memory("eval", plan.indices, [plan.valid])
