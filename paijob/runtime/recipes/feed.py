"""Where a run's batches come from: device-resident tensors, prefetched pinned batches, or a DataLoader.

In-memory data (synthetic, CIFAR-10) lives on the device when it fits (``choose_placement``)
and is gathered there by index, or is gathered on the host and prefetched on a side stream;
image folders are read by DataLoader workers, their JPEGs decoded there or on the GPU. Either
way a step receives its batch on the device, prepared ahead (see ``prefetch``).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from paijob.runtime.recipes.data import (
    EvalPlan,
    FolderLoader,
    GpuJpegDecoder,
    TrainPlan,
    dataset_tensors,
    keep_list_collate,
)
from paijob.runtime.recipes.prefetch import Prefetcher, choose_placement, resident


class FeedConfig(Protocol):
    """The settings a feed reads (``engine.TrainConfig`` has them)."""

    data_placement: str
    prefetch_depth: int
    prefetch_factor: int
    decode: str
    image_size: int


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
            whole = {name: dataset_tensors(source) for name, source in (("train", train_set), ("eval", test_set))}
            nbytes = sum(t.numel() * t.element_size() for pair in whole.values() if pair for t in pair)
            can_reside = all(pair is not None for pair in whole.values())
            self.placement = choose_placement(cfg.data_placement, nbytes, device) if can_reside else "host"
            if self.placement == "device":
                self.resident = {name: (pair[0].to(device), pair[1].to(device))
                                 for name, pair in whole.items() if pair is not None}
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
